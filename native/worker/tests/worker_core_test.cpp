// Unit tests of the native worker's WorkerCore (src/worker_core.hpp): when results go to the scheduler.
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "check.hpp"
#include "neutral.hpp"
#include "worker_core.hpp"

using scaler_native::Completion;
using scaler_native::encode_value;
using scaler_native::kFlushEverySeconds;
using scaler_native::kNativeFunctionExt;
using scaler_native::ObjectPayload;
using scaler_native::Outgoing;
using scaler_native::TaskGroup;
using scaler_native::TaskResults;
using scaler_native::TaskSubmission;
using scaler_native::Value;
using scaler_native::WorkerCore;

namespace {

const std::string kFunctionId(16, 'f');

// A submission of `echo(n)` for each task id.
TaskSubmission echoes(const std::vector<uint64_t>& task_ids) {
  Value function;
  function.kind = Value::Kind::extension;
  function.extension_type = kNativeFunctionExt;
  function.bytes = "echo";
  TaskSubmission submission;
  submission.objects.push_back(ObjectPayload{kFunctionId, "echo", std::make_shared<const std::string>(encode_value(function))});
  auto group = std::make_shared<TaskGroup>();
  group->function_id = kFunctionId;
  group->args_per_task = 1;
  group->task_ids = task_ids;
  for (uint64_t task_id : task_ids) group->args.push_back(encode_value(Value::of_uint(task_id)));
  group->object_arg.assign(task_ids.size(), false);
  submission.groups.push_back(group);
  return submission;
}

Completion succeeded(uint64_t task_id) {
  Completion completion;
  completion.task_id = task_id;
  completion.payload = encode_value(Value::of_uint(task_id));
  return completion;
}

std::vector<TaskResults> results_sent(WorkerCore& core) {
  std::vector<TaskResults> sent;
  for (Outgoing& message : core.take_messages()) {
    if (auto* results = std::get_if<TaskResults>(&message)) sent.push_back(*results);
  }
  return sent;
}

void a_worker_idle_for_a_while_sends_a_quick_submissions_results_in_one_message() {
  WorkerCore core;
  double now = 100.0;  // idle since it started: long past kFlushEverySeconds after any send
  core.on_submission(echoes({1, 2, 3}), now);
  CHECK(core.take_jobs().size() == 3);
  core.on_completion(succeeded(1), now + kFlushEverySeconds / 10);
  CHECK(results_sent(core).empty());  // not the first result alone
  core.on_completion(succeeded(2), now + kFlushEverySeconds / 5);
  core.on_completion(succeeded(3), now + kFlushEverySeconds / 2);  // ran dry: all of them now
  std::vector<TaskResults> sent = results_sent(core);
  CHECK(sent.size() == 1 && (sent[0].succeeded_ids == std::vector<uint64_t>{1, 2, 3}));
}

void results_wait_at_most_the_flush_interval_after_the_work_began() {
  WorkerCore core;
  double now = 100.0;
  core.on_submission(echoes({1, 2, 3}), now);
  core.take_jobs();
  core.on_completion(succeeded(1), now + kFlushEverySeconds / 2);
  CHECK(results_sent(core).empty());
  core.on_completion(succeeded(2), now + kFlushEverySeconds * 1.2);
  std::vector<TaskResults> sent = results_sent(core);
  CHECK(sent.size() == 1 && (sent[0].succeeded_ids == std::vector<uint64_t>{1, 2}));
}

}  // namespace

namespace scaler_native_test {

void worker_core_tests() {
  a_worker_idle_for_a_while_sends_a_quick_submissions_results_in_one_message();
  results_wait_at_most_the_flush_interval_after_the_work_began();
}

}  // namespace scaler_native_test
