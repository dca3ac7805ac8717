// Unit tests of the native worker's HeartbeatPace (src/heartbeat_pace.hpp): how often it heartbeats, at the interval
// its welcome and the scheduler's echoes ask (PROTOCOL.md §5 and "Heartbeats spaced out at scale"), the same cases
// as the Python worker's tests/unit/test_agent_heartbeat_pace.py.
#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "check.hpp"
#include "heartbeat_pace.hpp"

using scaler_native::AddressRotation;
using scaler_native::HeartbeatPace;
using scaler_native::silence_seconds;

namespace {

const std::string A = "tcp://127.0.0.1:1", B = "tcp://127.0.0.1:2";

std::function<double()> always(double fraction) {
  return [fraction]() { return fraction; };
}

// The agent's loop around a pace: a heartbeat is due now, goes out, and its echo comes back (asking `asked_ms`).
struct Paced {
  AddressRotation rotation;
  HeartbeatPace pace;
  double now;

  Paced(double own, double death_timeout, std::function<double()> phase, std::vector<std::string> addresses = {A},
        double start = 0)
      : rotation(std::move(addresses), 0, start), pace(own, death_timeout, rotation, std::move(phase)), now(start) {}

  void beat(uint32_t asked_ms = 0) {
    CHECK(pace.due(now));
    pace.sent(now);
    pace.echoed(asked_ms);
  }

  // How long after now the next heartbeat is due.
  double wait() const { return pace.next_due() - now; }
};

void the_first_heartbeat_is_due_at_once_then_one_every_interval() {
  Paced paced(2.0, 300.0, always(0.5));
  CHECK(paced.pace.due(paced.now));  // right after the hello, before any welcome
  paced.pace.sent(paced.now);
  CHECK(!paced.pace.due(paced.now + 1.99));
  CHECK(paced.pace.due(paced.now + 2.0));
}

void the_welcome_may_ask_for_more_frequent_heartbeats_never_rarer() {
  Paced paced(2.0, 300.0, always(0.5));
  paced.beat();
  paced.pace.welcomed(60'000, 0);
  CHECK(paced.pace.interval() == 2.0);
  paced.pace.welcomed(500, 0);
  CHECK(paced.pace.interval() == 0.5);
  CHECK(paced.wait() == 0.5);  // one new interval after the last heartbeat: no phase for a welcome
  paced.pace.welcomed(60'000, 900);
  CHECK(paced.pace.interval() == 0.3);  // a third of the peer timeout
}

void an_echo_may_ask_for_rarer_heartbeats_and_an_empty_one_brings_back_the_welcomes() {
  Paced paced(2.0, 300.0, always(1.0));
  paced.pace.welcomed(1000, 60'000);
  paced.beat(15'000);
  CHECK(!paced.pace.due(paced.now + 14.9));
  paced.now += 15.0;
  paced.beat(0);
  CHECK(!paced.pace.due(paced.now + 0.9));
  CHECK(paced.pace.due(paced.now + 1.0));  // the welcome asked for 1 s
}

void the_interval_asked_is_bounded_by_the_death_timeout() {
  Paced paced(0.5, 18.0, always(1.0));
  paced.pace.welcomed(2000, 60'000);
  paced.beat(15'000);
  CHECK(paced.pace.interval() == 2.0);  // at most a ninth of the death timeout
  CHECK(paced.pace.due(paced.now + 2.0));
  // Never shorter than the welcome's for all that: a death timeout below 9 welcome intervals takes the welcome's.
  Paced short_timeout(2.0, 9.0, always(1.0));
  short_timeout.pace.welcomed(2000, 60'000);
  short_timeout.beat(15'000);
  CHECK(short_timeout.pace.interval() == 2.0);
}

void a_scheduler_heard_at_each_of_the_rarer_heartbeats_is_not_silent() {
  Paced paced(1.0, 300.0, always(1.0), {A, B});
  CHECK(paced.pace.silence_seconds() == silence_seconds(1.0, 300.0));
  paced.pace.welcomed(1000, 60'000);
  for (int i = 0; i < 4; ++i) {  // heard only every 10 s, the echoes of heartbeats it asked for: stays
    paced.beat(10'000);
    CHECK(!paced.rotation.on_tick(paced.now + 9.9, paced.now));
    paced.now += 10.0;
  }
  CHECK(paced.pace.silence_seconds() == 30.0);
  CHECK(paced.rotation.on_tick(paced.now + 20.1, paced.now - 10.0) == B);  // silent for three of its intervals
  // Back to the welcome's interval: the silence threshold too (the worker's own interval at least).
  paced.pace.echoed(0);
  CHECK(paced.pace.silence_seconds() == silence_seconds(1.0, 300.0));
}

void a_changed_interval_starts_at_the_phase_drawn_then_keeps_its_period() {
  int draws = 0;
  Paced paced(2.0, 300.0, [&draws]() {
    ++draws;
    return 0.3;
  });
  paced.pace.welcomed(2000, 60'000);
  paced.beat(15'000);
  CHECK(draws == 1);
  CHECK(!paced.pace.due(paced.now + 4.4));
  CHECK(paced.pace.due(paced.now + 4.5));
  paced.now += 4.5;
  paced.beat(15'000);  // the same interval: no new phase
  CHECK(draws == 1);
  CHECK(!paced.pace.due(paced.now + 14.9));
  CHECK(paced.pace.due(paced.now + 15.0));
  paced.now += 15.0;
  paced.beat(0);  // back to the welcome's 2 s: a new phase of that
  CHECK(draws == 2);
  CHECK(std::abs(paced.wait() - 0.3 * 2.0) < 1e-9);
}

void an_echo_with_no_heartbeat_sent_yet_draws_no_phase() {
  int draws = 0;
  Paced paced(2.0, 300.0, [&draws]() {
    ++draws;
    return 0.3;
  });
  paced.pace.echoed(15'000);
  CHECK(draws == 0);
  CHECK(paced.pace.due(paced.now));  // the first heartbeat is still due at once
}

void workers_told_of_a_spaced_interval_together_spread_their_heartbeats_over_it() {
  // A join storm: 200 workers learn within one second that their scheduler wants a heartbeat every 15 s. In
  // step, each would send its heartbeats in that same second of every 15; their phases spread them out.
  std::mt19937 engine(7);
  std::uniform_real_distribution<double> fraction(0, 1);
  std::vector<double> firsts;
  for (int index = 0; index < 200; ++index) {
    Paced paced(2.0, 300.0, always(fraction(engine)), {A}, 1000.0 + index / 200.0);
    paced.pace.welcomed(2000, 60'000);
    paced.beat(15'000);
    CHECK(paced.wait() >= 0 && paced.wait() < 15.0);
    firsts.push_back(paced.pace.next_due());
  }
  size_t busiest = 0;
  for (double start : firsts) {
    busiest = std::max(busiest, static_cast<size_t>(std::count_if(firsts.begin(), firsts.end(), [start](double first) {
                                  return start <= first && first < start + 1.0;
                                })));
  }
  CHECK(busiest <= 200 / 5);
}

}  // namespace

namespace scaler_native_test {

void heartbeat_pace_tests() {
  for (const auto& test : std::vector<std::function<void()>>{
           the_first_heartbeat_is_due_at_once_then_one_every_interval,
           the_welcome_may_ask_for_more_frequent_heartbeats_never_rarer,
           an_echo_may_ask_for_rarer_heartbeats_and_an_empty_one_brings_back_the_welcomes,
           the_interval_asked_is_bounded_by_the_death_timeout,
           a_scheduler_heard_at_each_of_the_rarer_heartbeats_is_not_silent,
           a_changed_interval_starts_at_the_phase_drawn_then_keeps_its_period,
           an_echo_with_no_heartbeat_sent_yet_draws_no_phase,
           workers_told_of_a_spaced_interval_together_spread_their_heartbeats_over_it,
       }) {
    test();
  }
}

}  // namespace scaler_native_test
