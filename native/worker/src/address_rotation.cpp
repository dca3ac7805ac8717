#include "address_rotation.hpp"

#include <algorithm>
#include <stdexcept>
#include <utility>

namespace scaler_native {

namespace {

std::string trimmed(const std::string& text) {
  size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

bool starts_with(const std::string& text, const char* prefix) { return text.rfind(prefix, 0) == 0; }

}  // namespace

std::vector<std::string> parse_scheduler_addresses(const std::string& text) {
  std::vector<std::string> addresses;
  size_t start = 0;
  while (true) {
    size_t comma = text.find(',', start);
    std::string address = trimmed(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    bool tcp = starts_with(address, "tcp://") && address.find(':', 6) != std::string::npos;
    bool ipc = starts_with(address, "ipc://") && address.size() > 6;
    if (!tcp && !ipc) {
      throw std::invalid_argument("address: expected tcp://HOST:PORT or ipc://PATH, got '" + address + "'" +
                                  (comma == std::string::npos && addresses.empty()
                                       ? std::string()
                                       : " in '" + text + "' (several schedulers: tcp://a:2345,tcp://b:2345)"));
    }
    if (std::find(addresses.begin(), addresses.end(), address) != addresses.end()) {
      throw std::invalid_argument("address: '" + text + "' names " + address +
                                  " twice; list each scheduler once, in rank order");
    }
    addresses.push_back(std::move(address));
    if (comma == std::string::npos) return addresses;
    start = comma + 1;
  }
}

double silence_seconds(double heartbeat_interval_seconds, double death_timeout_seconds) {
  double wanted = std::max(kSilentHeartbeats * heartbeat_interval_seconds, kMinSilenceSeconds);
  return std::min(wanted, death_timeout_seconds / 3);
}

double longest_heartbeat_interval(double death_timeout_seconds) {
  return death_timeout_seconds / (3 * kSilentHeartbeats);
}

AddressRotation::AddressRotation(std::vector<std::string> addresses, double silence_seconds, double now)
    : addresses_(std::move(addresses)), silence_seconds_(silence_seconds), arrived_at_(now) {
  if (addresses_.empty()) throw std::invalid_argument("at least one scheduler address is needed");
}

void AddressRotation::refused(double now) {
  if (!several() || move_at_) return;
  move_at_ = now + wait_;
  wait_ = std::min(std::max(wait_ * 2, kFirstMoveWaitSeconds), kLastMoveWaitSeconds);
}

void AddressRotation::welcomed() {
  wait_ = 0;
  move_at_.reset();
}

std::optional<std::string> AddressRotation::on_tick(double now, double last_heard) {
  if (!several()) return std::nullopt;
  if (move_at_) {
    if (now < *move_at_) return std::nullopt;
  } else if (now - std::max(last_heard, arrived_at_) <= silence_seconds_) {
    return std::nullopt;
  }
  index_ = (index_ + 1) % addresses_.size();
  arrived_at_ = now;
  move_at_.reset();
  return current();
}

}  // namespace scaler_native
