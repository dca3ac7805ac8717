// Unit tests of the native worker's AddressRotation (src/address_rotation.hpp): which of several scheduler
// addresses it talks to (PROTOCOL.md §23), the same cases as the Python peers' tests/unit/test_address_rotation.py.
#include <functional>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "address_rotation.hpp"
#include "check.hpp"

using scaler_native::AddressRotation;
using scaler_native::kLastMoveWaitSeconds;
using scaler_native::longest_heartbeat_interval;
using scaler_native::parse_scheduler_addresses;
using scaler_native::silence_seconds;

namespace {

const std::string A = "tcp://127.0.0.1:1", B = "tcp://127.0.0.1:2", C = "tcp://127.0.0.1:3";
using Addresses = std::vector<std::string>;

bool refused_with(const std::string& text, const std::string& expected) {
  try {
    parse_scheduler_addresses(text);
  } catch (const std::invalid_argument& error) {
    return std::string(error.what()).find(expected) != std::string::npos;
  }
  return false;
}

void addresses_are_comma_separated_in_rank_order() {
  CHECK(parse_scheduler_addresses(A + ", " + B) == (Addresses{A, B}));
  CHECK(parse_scheduler_addresses(A) == Addresses{A});
  CHECK(parse_scheduler_addresses("ipc:///tmp/s," + A) == (Addresses{"ipc:///tmp/s", A}));
  CHECK(refused_with(A + "," + A, "twice"));
  CHECK(refused_with(A + ",b:2", "expected tcp://HOST:PORT or ipc://PATH, got 'b:2'"));
  CHECK(refused_with(A + ",", "got ''"));
  CHECK(refused_with("localhost:2345", "got 'localhost:2345'"));
}

void one_address_never_moves() {
  AddressRotation rotation({A}, 1.0);
  CHECK(!rotation.several());
  rotation.refused(0);
  CHECK(!rotation.on_tick(1000, 0));
  CHECK(rotation.current() == A);
}

void a_standby_refusal_moves_at_once_then_after_a_doubling_wait_until_a_welcome() {
  AddressRotation rotation({A, B}, 100.0);
  rotation.refused(0);
  CHECK(rotation.on_tick(0, 0) == B);
  rotation.refused(0);
  CHECK(!rotation.on_tick(0, 0));  // a second refusal in a row waits
  CHECK(rotation.on_tick(0.1, 0) == A);
  rotation.refused(0.1);
  CHECK(!rotation.on_tick(0.29, 0));
  CHECK(rotation.on_tick(0.31, 0) == B);  // and the wait doubled
  rotation.welcomed();
  rotation.refused(1.0);
  CHECK(rotation.on_tick(1.0, 1.0) == A);  // a welcome in between: at once again
}

void the_wait_between_refusals_stops_doubling_at_two_seconds() {
  AddressRotation rotation({A, B}, 1e9);
  double now = 0;
  for (double wait : {0.0, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0}) {
    rotation.refused(now);
    if (wait > 0) CHECK(!rotation.on_tick(now + wait - 0.01, now));
    CHECK(rotation.on_tick(now + wait, now).has_value());
    now += wait;
  }
}

void silence_moves_to_the_next_address_and_wraps_around() {
  AddressRotation rotation({A, B, C}, 2.0);
  CHECK(!rotation.on_tick(1.9, 0));
  std::vector<std::optional<std::string>> moves;
  for (double now : {2.1, 4.2, 6.3}) moves.push_back(rotation.on_tick(now, 0));
  CHECK((moves == std::vector<std::optional<std::string>>{B, C, A}));
  CHECK(!rotation.on_tick(7.0, 6.9));  // heard lately: stay
}

void the_silence_counts_from_the_arrival_at_an_address() {
  AddressRotation rotation({A, B}, 2.0, 100.0);  // started at 100: nothing heard yet is no silence yet
  CHECK(!rotation.on_tick(101.9, 0));
  CHECK(rotation.on_tick(102.1, 0) == B);
}

void a_worker_tries_a_standby_well_before_its_death_timeout() {
  CHECK(silence_seconds(2.0, 300.0) == 6.0);
  CHECK(silence_seconds(0.1, 300.0) == 1.0);
  CHECK(silence_seconds(2.0, 3.0) == 1.0);
}

// An echo asked for rarer heartbeats (scaler/protocol/heartbeat_pace.py): the silence threshold follows, within
// what the death timeout allows.
void rarer_heartbeats_stretch_the_silence_within_the_death_timeout() {
  CHECK(longest_heartbeat_interval(300.0) == 300.0 / 9);
  AddressRotation rotation({A, B}, silence_seconds(2.0, 300.0));
  rotation.set_silence(silence_seconds(15.0, 300.0));
  CHECK(!rotation.on_tick(40.0, 0.0));
  CHECK(rotation.on_tick(45.5, 0.0) == B);
}

// Random refusals, welcomes and ticks: moves go round the list in order, only after a refusal (nothing is ever
// silent here), and no refusal waits longer than the longest wait.
void refusals_move_round_the_list_in_order_within_the_longest_wait() {
  std::mt19937 random(26);
  for (int run = 0; run < 500; ++run) {
    size_t count = 1 + random() % 4;
    Addresses addresses;
    for (size_t port = 1; port <= count; ++port) addresses.push_back("tcp://127.0.0.1:" + std::to_string(port));
    AddressRotation rotation(addresses, 1000.0);
    double now = 0;
    size_t index = 0;
    std::optional<double> refused_at;  // a refusal not yet followed by a move or a welcome
    for (int step = 0; step < 60; ++step) {
      now += std::uniform_real_distribution<double>(0, 5)(random);
      switch (random() % 3) {
        case 0:
          rotation.refused(now);
          if (!refused_at && count > 1) refused_at = now;
          break;
        case 1:
          rotation.welcomed();
          refused_at.reset();
          break;
        default:
          if (std::optional<std::string> moved = rotation.on_tick(now, now)) {
            CHECK(refused_at.has_value());
            index = (index + 1) % count;
            CHECK(*moved == addresses[index]);
            refused_at.reset();
          } else if (refused_at) {
            CHECK(now < *refused_at + kLastMoveWaitSeconds);
          }
      }
      CHECK(rotation.current() == addresses[index]);
    }
  }
}

}  // namespace

namespace scaler_native_test {

void address_rotation_tests() {
  for (const auto& test : std::vector<std::function<void()>>{
           addresses_are_comma_separated_in_rank_order,
           one_address_never_moves,
           a_standby_refusal_moves_at_once_then_after_a_doubling_wait_until_a_welcome,
           the_wait_between_refusals_stops_doubling_at_two_seconds,
           silence_moves_to_the_next_address_and_wraps_around,
           the_silence_counts_from_the_arrival_at_an_address,
           a_worker_tries_a_standby_well_before_its_death_timeout,
           rarer_heartbeats_stretch_the_silence_within_the_death_timeout,
           refusals_move_round_the_list_in_order_within_the_longest_wait,
       }) {
    test();
  }
}

}  // namespace scaler_native_test
