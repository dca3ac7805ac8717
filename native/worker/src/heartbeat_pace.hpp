// How often the worker heartbeats, and so how long its scheduler may stay silent before the worker moves on:
// pure, of (event, now). The same rules as the Python worker's (scaler/protocol/heartbeat_pace.py), so that both
// kinds of worker pace alike (PROTOCOL.md §5 and "Heartbeats spaced out at scale").
//
// The worker starts at its own interval, with its first heartbeat at once; the welcome may ask for more frequent
// heartbeats (never rarer); an echo may ask for rarer ones, when the scheduler has so many workers that their
// heartbeats would cost it much, up to longest_heartbeat_interval of the death timeout, and 0 in an echo brings
// back the welcome's. The silence threshold of the address rotation follows the interval: a scheduler we hear
// from only as often as we heartbeat is not silent.
//
// When an echo changes the interval, the next heartbeat comes at a random fraction of the new interval after the
// last: the workers of a join storm, which all learn of a spaced interval within a second or two, would otherwise
// keep heartbeating in that burst once per interval, each burst a spike of the scheduler's work and latency.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "address_rotation.hpp"

namespace scaler_native {

class HeartbeatPace {
 public:
  // `phase` draws the fraction of a changed interval after which the next heartbeat comes (0 to 1). `rotation`
  // must outlive the pace: its silence threshold is kept in step with the interval.
  HeartbeatPace(double own_seconds, double death_timeout_seconds, AddressRotation& rotation,
                std::function<double()> phase);

  // Whether a heartbeat is due now, and when the next one is (-infinity: at once, none was sent yet).
  bool due(double now) const { return now >= next_due(); }
  double next_due() const;
  // A heartbeat went out now (or was dropped for want of a connection: it counts as sent all the same).
  void sent(double now);

  double interval() const { return interval_; }
  double silence_seconds() const;

  // The welcome's heartbeatIntervalMs and peerTimeoutMs (0: not said): its interval stands until an echo asks
  // for another.
  void welcomed(uint32_t heartbeat_interval_ms, uint32_t peer_timeout_ms);
  // An echo's heartbeatIntervalMs (0: the welcome's interval); a new interval takes a new phase.
  void echoed(uint32_t asked_ms);

 private:
  // True if the interval changed; then the next heartbeat comes one new interval after the last.
  bool set(double interval);

  double own_;
  double death_timeout_;
  AddressRotation& rotation_;
  std::function<double()> phase_;
  double welcome_interval_;
  double interval_;
  std::optional<double> last_sent_;
  std::optional<double> next_;  // none: the first heartbeat is due at once
};

}  // namespace scaler_native
