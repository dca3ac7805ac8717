// Whether the scheduler knows this worker, and which results it may not have got: how the worker outlives a
// scheduler that restarts (PROTOCOL.md §21). Pure: the agent tells it what it sent and heard, and the time;
// it holds encoded messages and says what to send. The same rules as the Python peers'
// (scaler/protocol/scheduler_session.py), so that both kinds of worker rejoin alike.
//
// A scheduler that restarted does not know the worker: it answers `refused{unknownPeer}`. The worker keeps
// running its tasks, says hello again (backing off while no welcome comes) and holds everything else; once
// welcomed it sends what it held, then re-announces the tasks it holds. Which results did the scheduler
// before get? One connection delivers in order and the scheduler echoes a heartbeat after everything before
// it: an echo acknowledges the results sent before its heartbeat. Those sent since may have died with the
// scheduler: they are kept (moved here once sent: no copy) and sent again to the next one.
#pragma once

#include <cstddef>
#include <deque>
#include <limits>
#include <string>
#include <vector>

#include "protocol.hpp"

namespace scaler_native {

using Frames = std::vector<Bytes>;

// The backoff of hellos while no welcome comes: doubling from the first to the last.
constexpr double kFirstHelloRetrySeconds = 0.1;
constexpr double kLastHelloRetrySeconds = 2.0;
// Messages held for the next scheduler, at most: beyond, the oldest go (their tasks run again on re-submission).
constexpr size_t kMaxHeldMessages = 100000;
// Bytes of results kept until an echo acknowledges them, at most: beyond, the oldest are let go.
constexpr size_t kMaxUnacknowledgedBytes = size_t{64} << 20;
// In the protocolError a scheduler answers a hello from a peer it has registered (PROTOCOL.md §3).
constexpr const char* kHelloTwice = "hello sent twice";

// What a `refused` means here.
enum class Refusal {
  rejoin,        // the scheduler restarted: say hello again now (rejoining), hold the rest
  ignore,        // another answer to what was sent before our hello again
  leave,         // refused after a welcome, for a reason of its own: leave (status 0)
  leave_failed,  // our hello was refused (another protocol version, a bad field): leave with status 1
};

class SchedulerSession {
 public:
  // The bounds are the constants above; a test gives smaller ones.
  explicit SchedulerSession(size_t max_unacknowledged_bytes = kMaxUnacknowledgedBytes,
                            size_t max_held_messages = kMaxHeldMessages)
      : max_unacknowledged_bytes_(max_unacknowledged_bytes), max_held_messages_(max_held_messages) {}

  bool ever_welcomed() const { return ever_welcomed_; }
  bool rejoining() const { return rejoining_; }

  // A taskResults message just sent: kept until a heartbeat's echo acknowledges it.
  void sent_results(Frames&& frames);
  void heartbeat_sent();
  void echoed();
  size_t unacknowledged() const;  // results messages kept

  // While rejoining: a message that waits for the welcome.
  void hold(Frames&& frames);
  size_t held_count() const { return held_.size(); }

  Refusal on_refused(bool unknown_peer, double now);
  // The scheduler does not know us, or we moved to another address (a standby's, §23): what it may not have got
  // is held for the next, with what comes from now on. Whether to say hello now: not if we did already.
  bool lost(double now);
  // While rejoining, a protocolError saying our hello was sent twice: the scheduler we came back to still has us
  // from before we moved away, and would refuse every hello. True (once per rejoin): leave it (`disconnect`)
  // and say hello again (§23).
  bool still_registered(const std::string& reason);
  // While rejoining: whether to say hello again now (no welcome came); the wait doubles each time.
  bool hello_due(double now);
  // When hello_due may next say yes (infinity unless rejoining).
  double next_hello() const { return rejoining_ ? next_hello_ : std::numeric_limits<double>::infinity(); }

  // Welcomed. After a rejoin: what was held, to send now in order, before the re-announcement (the caller's,
  // which comes last: the scheduler gives a rejoining worker work only after it, so it has the results first).
  struct Welcomed {
    bool rejoined = false;
    std::vector<Frames> held;
  };
  Welcomed on_welcome();

 private:
  void drop_oldest_generation();
  void trim_held();

  size_t max_unacknowledged_bytes_;
  size_t max_held_messages_;
  bool ever_welcomed_ = false;
  bool rejoining_ = false;
  // Results sent before each heartbeat whose echo has not come, oldest first; the last: since the last heartbeat.
  std::deque<std::vector<Frames>> generations_{1};
  std::deque<size_t> generation_bytes_{0};
  size_t unacknowledged_bytes_ = 0;
  std::deque<Frames> held_;
  double retry_seconds_ = kFirstHelloRetrySeconds;
  double next_hello_ = 0;
  bool left_registration_ = false;  // since the last lost(): see still_registered
};

}  // namespace scaler_native
