#include "heartbeat_pace.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace scaler_native {

HeartbeatPace::HeartbeatPace(double own_seconds, double death_timeout_seconds, AddressRotation& rotation,
                             std::function<double()> phase)
    : own_(own_seconds),
      death_timeout_(death_timeout_seconds),
      rotation_(rotation),
      phase_(std::move(phase)),
      welcome_interval_(own_seconds),
      interval_(own_seconds) {
  rotation_.set_silence(silence_seconds());
}

double HeartbeatPace::next_due() const { return next_ ? *next_ : -INFINITY; }

void HeartbeatPace::sent(double now) {
  last_sent_ = now;
  next_ = now + interval_;
}

double HeartbeatPace::silence_seconds() const {
  return scaler_native::silence_seconds(std::max(interval_, own_), death_timeout_);
}

void HeartbeatPace::welcomed(uint32_t heartbeat_interval_ms, uint32_t peer_timeout_ms) {
  // The scheduler says how often it expects to hear from us, and after how much silence it drops us; a third of
  // that timeout leaves room for two lost or late heartbeats.
  double interval = own_;
  if (heartbeat_interval_ms) interval = std::min(interval, heartbeat_interval_ms / 1000.0);
  if (peer_timeout_ms) interval = std::min(interval, peer_timeout_ms / 3000.0);
  welcome_interval_ = interval;
  set(interval);
}

void HeartbeatPace::echoed(uint32_t asked_ms) {
  double interval = welcome_interval_;
  if (asked_ms) interval = std::min(asked_ms / 1000.0, std::max(interval, longest_heartbeat_interval(death_timeout_)));
  if (set(interval) && last_sent_) next_ = *last_sent_ + phase_() * interval;
}

bool HeartbeatPace::set(double interval) {
  if (interval == interval_) return false;
  interval_ = interval;
  rotation_.set_silence(silence_seconds());
  if (last_sent_) next_ = *last_sent_ + interval;
  return true;
}

}  // namespace scaler_native
