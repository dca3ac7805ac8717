#include "scheduler_session.hpp"

#include <algorithm>
#include <utility>

namespace scaler_native {

namespace {

size_t size_of(const Frames& frames) {
  size_t size = 0;
  for (const Bytes& frame : frames) size += frame.size();
  return size;
}

}  // namespace

void SchedulerSession::sent_results(Frames&& frames) {
  size_t size = size_of(frames);
  generations_.back().push_back(std::move(frames));
  generation_bytes_.back() += size;
  unacknowledged_bytes_ += size;
  // The current generation is never let go: its heartbeat is not even sent yet.
  if (unacknowledged_bytes_ > max_unacknowledged_bytes_ && generations_.size() > 1) drop_oldest_generation();
}

void SchedulerSession::heartbeat_sent() {
  generations_.emplace_back();
  generation_bytes_.push_back(0);
}

void SchedulerSession::echoed() {
  // An echo with no heartbeat outstanding answers one sent to the scheduler before: nothing to let go.
  if (generations_.size() > 1) drop_oldest_generation();
}

size_t SchedulerSession::unacknowledged() const {
  size_t count = 0;
  for (const auto& generation : generations_) count += generation.size();
  return count;
}

void SchedulerSession::hold(Frames&& frames) {
  held_.push_back(std::move(frames));
  trim_held();
}

Refusal SchedulerSession::on_refused(bool unknown_peer, double now) {
  if (!unknown_peer || !ever_welcomed_) return ever_welcomed_ && !rejoining_ ? Refusal::leave : Refusal::leave_failed;
  return lost(now) ? Refusal::rejoin : Refusal::ignore;
}

bool SchedulerSession::lost(double now) {
  if (rejoining_) return false;
  rejoining_ = true;
  left_registration_ = false;
  // What the scheduler may not have got goes first, in the order it was sent, then what is made from now on.
  for (auto& generation : generations_) {
    for (Frames& frames : generation) held_.push_back(std::move(frames));
  }
  generations_.assign(1, {});
  generation_bytes_.assign(1, 0);
  unacknowledged_bytes_ = 0;
  trim_held();
  retry_seconds_ = kFirstHelloRetrySeconds;
  next_hello_ = now + retry_seconds_;
  return true;
}

bool SchedulerSession::still_registered(const std::string& reason) {
  if (!rejoining_ || left_registration_ || reason.find(kHelloTwice) == std::string::npos) return false;
  left_registration_ = true;
  return true;
}

bool SchedulerSession::hello_due(double now) {
  if (!rejoining_ || now < next_hello_) return false;
  retry_seconds_ = std::min(retry_seconds_ * 2, kLastHelloRetrySeconds);
  next_hello_ = now + retry_seconds_;
  return true;
}

SchedulerSession::Welcomed SchedulerSession::on_welcome() {
  Welcomed welcomed;
  welcomed.rejoined = rejoining_;
  ever_welcomed_ = true;
  rejoining_ = false;
  if (welcomed.rejoined) {
    welcomed.held.assign(std::make_move_iterator(held_.begin()), std::make_move_iterator(held_.end()));
    held_.clear();
  }
  return welcomed;
}

void SchedulerSession::drop_oldest_generation() {
  generations_.pop_front();
  unacknowledged_bytes_ -= generation_bytes_.front();
  generation_bytes_.pop_front();
}

void SchedulerSession::trim_held() {
  while (held_.size() > max_held_messages_) held_.pop_front();
}

}  // namespace scaler_native
