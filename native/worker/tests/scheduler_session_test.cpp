// Unit tests of the native worker's SchedulerSession (src/scheduler_session.hpp), the pure rules of a rejoin
// (PROTOCOL.md §21). Run by tests/unit/test_native_scheduler_session.py, with the other test files' cases
// (check.hpp); exits non-zero if any check failed.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "check.hpp"
#include "scheduler_session.hpp"

using scaler_native::Frames;
using scaler_native::Refusal;
using scaler_native::SchedulerSession;

namespace {

Frames message(const std::string& name, size_t size = 0) { return Frames{name + std::string(size, '.')}; }

std::vector<std::string> names(const std::vector<Frames>& held) {
  std::vector<std::string> found;
  for (const Frames& frames : held) found.push_back(frames[0].substr(0, frames[0].find('.')));
  return found;
}

SchedulerSession welcomed_session() {
  SchedulerSession session;
  session.on_welcome();
  return session;
}

void the_results_no_echo_acknowledged_go_to_the_next_scheduler_first() {
  SchedulerSession session = welcomed_session();
  session.sent_results(message("acknowledged"));
  session.heartbeat_sent();
  session.sent_results(message("before-the-unanswered-heartbeat"));
  session.heartbeat_sent();
  session.echoed();  // answers the first heartbeat only
  session.sent_results(message("after-it"));
  CHECK(session.unacknowledged() == 2);
  CHECK(session.on_refused(true, 10.0) == Refusal::rejoin);
  session.hold(message("made-while-unknown"));
  SchedulerSession::Welcomed welcomed = session.on_welcome();
  CHECK(welcomed.rejoined);
  CHECK((names(welcomed.held) == std::vector<std::string>{"before-the-unanswered-heartbeat", "after-it",
                                                          "made-while-unknown"}));
  CHECK(!session.rejoining() && session.on_welcome().held.empty());
}

void an_echo_with_no_heartbeat_outstanding_lets_nothing_go() {
  SchedulerSession session = welcomed_session();
  session.sent_results(message("unanswered"));
  session.echoed();  // the echo of a heartbeat sent before these results
  CHECK(session.unacknowledged() == 1);
}

void refusals() {
  SchedulerSession never_welcomed;
  CHECK(never_welcomed.on_refused(true, 0) == Refusal::leave_failed);  // our first hello refused
  CHECK(never_welcomed.on_refused(false, 0) == Refusal::leave_failed);
  SchedulerSession session = welcomed_session();
  CHECK(session.on_refused(false, 0) == Refusal::leave);  // a scheduler that no longer wants us
  CHECK(session.on_refused(true, 0) == Refusal::rejoin);
  CHECK(session.rejoining());
  CHECK(session.on_refused(true, 0) == Refusal::ignore);  // answers what we sent before the hello again
  CHECK(session.on_refused(false, 0) == Refusal::leave_failed);  // our hello again refused: final
}

void hellos_back_off_from_a_tenth_of_a_second_to_two() {
  SchedulerSession session = welcomed_session();
  CHECK(!session.hello_due(0));
  double now = 100.0;
  session.on_refused(true, now);  // the first hello again goes at once, from the agent
  for (double wait : {0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0}) {
    CHECK(!session.hello_due(now + wait - 0.01));
    CHECK(session.hello_due(now + wait));
    now += wait;
  }
  session.on_welcome();
  CHECK(!session.hello_due(200.0));
}

void unacknowledged_results_are_bounded_in_bytes_oldest_generation_first() {
  SchedulerSession session(1000);
  session.on_welcome();
  session.sent_results(message("first", 400));
  session.heartbeat_sent();
  session.sent_results(message("second", 400));
  session.heartbeat_sent();
  session.sent_results(message("third", 400));  // 1200 bytes: the oldest generation goes
  CHECK(session.unacknowledged() == 2);
  session.on_refused(true, 0);
  CHECK((names(session.on_welcome().held) == std::vector<std::string>{"second", "third"}));
}

void the_messages_held_are_bounded_oldest_first() {
  SchedulerSession session(1000, 2);
  session.on_welcome();
  session.on_refused(true, 0);
  for (const char* name : {"a", "b", "c"}) session.hold(message(name));
  CHECK((names(session.on_welcome().held) == std::vector<std::string>{"b", "c"}));
}

void a_move_to_the_next_address_holds_what_the_scheduler_left_may_not_have_got() {
  SchedulerSession session = welcomed_session();
  session.sent_results(message("unacknowledged"));
  CHECK(session.lost(5.0));  // moved to a standby (§23): hello there, rejoining
  CHECK(session.rejoining());
  CHECK(!session.lost(5.0));  // moved again before a welcome: the hello is the agent's, nothing more to hold
  CHECK(session.on_refused(true, 5.0) == Refusal::ignore);
  session.hold(message("made-meanwhile"));
  CHECK((names(session.on_welcome().held) == std::vector<std::string>{"unacknowledged", "made-meanwhile"}));
}

void a_scheduler_that_still_has_us_is_left_once_per_rejoin() {
  const std::string twice = "a worker may not send Hello; this connection is registered already (hello sent twice)";
  SchedulerSession session = welcomed_session();
  CHECK(!session.still_registered(twice));  // not rejoining: a hello repeated while its welcome was on the way
  session.lost(0);
  CHECK(!session.still_registered("some other protocol error"));
  CHECK(session.still_registered(twice));
  CHECK(!session.still_registered(twice));  // once per rejoin: no disconnect loop
  session.on_welcome();
  session.lost(1.0);
  CHECK(session.still_registered(twice));
}

}  // namespace

int main() {
  for (const auto& test : std::vector<std::function<void()>>{
           the_results_no_echo_acknowledged_go_to_the_next_scheduler_first,
           an_echo_with_no_heartbeat_outstanding_lets_nothing_go,
           refusals,
           hellos_back_off_from_a_tenth_of_a_second_to_two,
           unacknowledged_results_are_bounded_in_bytes_oldest_generation_first,
           the_messages_held_are_bounded_oldest_first,
           a_move_to_the_next_address_holds_what_the_scheduler_left_may_not_have_got,
           a_scheduler_that_still_has_us_is_left_once_per_rejoin,
       }) {
    test();
  }
  scaler_native_test::address_rotation_tests();
  scaler_native_test::heartbeat_pace_tests();
  scaler_native_test::worker_core_tests();
  if (scaler_native_test::failures) return EXIT_FAILURE;
  std::puts("scaler_native_session_test: all passed");
  return EXIT_SUCCESS;
}
