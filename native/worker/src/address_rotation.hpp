// Which of several scheduler addresses the worker talks to now: pure, of (event, now). The same rules as the
// Python peers' (scaler/protocol/address_rotation.py, PROTOCOL.md §23), so that both kinds of worker move alike.
//
// A worker given several addresses (one comma-separated string, in rank order: tcp://a:2345,tcp://b:2345)
// starts with the first and moves on to the next (wrapping around) when
// - the scheduler there says it stands by (`refused{standby}`): at once the first time, then after a wait that
//   doubles up to kLastMoveWaitSeconds while refusals keep coming without a welcome in between, so that a worker
//   facing two standbys (the serving one unreachable) does not spin; or
// - nothing was heard there for the silence threshold (the host is gone, or cut off).
// A welcome resets the wait. With one address nothing ever moves. The agent reconnects its socket to the
// address on_tick returns; the session rules (scheduler_session.hpp) decide what it says there.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace scaler_native {

constexpr double kFirstMoveWaitSeconds = 0.1;
constexpr double kLastMoveWaitSeconds = 2.0;
// Silence before the worker tries the next address, in heartbeat intervals of its own, and at least this long.
constexpr double kSilentHeartbeats = 3;
constexpr double kMinSilenceSeconds = 1.0;

// "tcp://a:2345, tcp://b:2345" -> the addresses in order, trimmed. std::invalid_argument names a part that is
// not tcp://HOST:PORT or ipc://PATH, or an address listed twice.
std::vector<std::string> parse_scheduler_addresses(const std::string& text);

// How long the worker waits for a word from its scheduler before it tries the next address: a few missed
// heartbeat echoes, but well within its death timeout so that a standby is tried before the worker gives up.
double silence_seconds(double heartbeat_interval_seconds, double death_timeout_seconds);

// The rarest heartbeats the worker sends, whatever the scheduler's echo asks: its silence threshold then still
// spans kSilentHeartbeats of them (scaler/protocol/heartbeat_pace.py).
double longest_heartbeat_interval(double death_timeout_seconds);

class AddressRotation {
 public:
  // `addresses` must not be empty.
  AddressRotation(std::vector<std::string> addresses, double silence_seconds, double now = 0);

  const std::string& current() const { return addresses_[index_]; }
  bool several() const { return addresses_.size() > 1; }

  // The scheduler at the current address stands by: move on, at once or after the doubling wait.
  void refused(double now);
  // A scheduler serves us here: stay, and a later refusal moves at once again.
  void welcomed();
  // The worker heartbeats at another interval (the scheduler asked): the silence threshold follows.
  void set_silence(double silence_seconds) { silence_seconds_ = silence_seconds; }
  // The address to move to now (the socket reconnects there), or nothing to stay. `last_heard`: when a word
  // (other than a standby's refusal) last came from a scheduler.
  std::optional<std::string> on_tick(double now, double last_heard);

 private:
  std::vector<std::string> addresses_;
  double silence_seconds_;
  size_t index_ = 0;
  double arrived_at_;
  std::optional<double> move_at_;
  double wait_ = 0;
};

}  // namespace scaler_native
