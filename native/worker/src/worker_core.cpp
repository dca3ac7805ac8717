#include "worker_core.hpp"

#include <algorithm>
#include <limits>

#include "neutral.hpp"

namespace scaler_native {

namespace {

constexpr size_t kObjectIdBytes = 16;
// Cap'n Proto bytes per result or failure entry besides its texts and inline payload (ids, pointers, padding).
constexpr size_t kEntryOverheadBytes = 64;

std::string hex(const Bytes& bytes) {
  static const char digits[] = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : bytes) {
    text += digits[byte >> 4];
    text += digits[byte & 15];
  }
  return text;
}

}  // namespace

void WorkerCore::set_limits(uint64_t max_frame_bytes, uint64_t max_control_frame_bytes) {
  max_frame_bytes_ = max_frame_bytes;
  max_control_frame_bytes_ = max_control_frame_bytes;
}

void WorkerCore::on_submission(const TaskSubmission& submission, double now) {
  // Work begins: the results' wait counts from now. Counted from the last send, a worker idle for longer than
  // kFlushEverySeconds sent the first result of each submission alone (two results messages per submission).
  if (kept_.empty() && handed_ids_.empty() && batch_.empty()) last_flush_ = now;
  for (const ObjectPayload& object : submission.objects) objects_[object.object_id] = object.payload;
  for (const auto& group : submission.groups) {
    for (size_t row = 0; row < group->task_ids.size(); ++row) {
      uint64_t task_id = group->task_ids[row];
      // A task the worker already holds: the scheduler never sends one twice, and the first copy answers.
      if (kept_ids_.count(task_id) || handed_ids_.count(task_id)) continue;
      kept_ids_.insert(task_id);
      kept_.push_back(Entry{task_id, group, row});
    }
  }
  dispatch(now);
}

void WorkerCore::on_cancel(const CancelTasks& cancel, const std::vector<uint64_t>& withdrawn, double now) {
  std::vector<uint64_t> canceled = take_unstarted(cancel.task_ids, withdrawn);
  std::vector<uint64_t> refused;
  for (uint64_t task_id : cancel.task_ids) {
    if (!handed_ids_.count(task_id)) continue;  // running (or just finished, its result on the way)
    if (cancel.force) {
      stops_.push_back(task_id);  // it ends `canceled` when its function sees the stop flag
    } else {
      refused.push_back(task_id);
    }
  }
  if (!refused.empty()) messages_.push_back(CancelRefused{refused});
  for (uint64_t task_id : canceled) fail(task_id, FailureKind::canceled, "", "");
  if (!canceled.empty()) flush(now);
  dispatch(now);
}

void WorkerCore::on_release(const ReleaseTasks& release, const std::vector<uint64_t>& withdrawn, double now) {
  std::vector<uint64_t> returned = take_unstarted(release.task_ids, withdrawn);
  for (uint64_t task_id : returned) fail(task_id, FailureKind::returned, "", "");
  if (!returned.empty()) flush(now);
  dispatch(now);
}

void WorkerCore::on_task_started(const TaskStarted& started, double now) {
  if (!suspect_ || suspect_->granted) return;
  if (std::find(started.task_ids.begin(), started.task_ids.end(), suspect_->task_id) != started.task_ids.end()) {
    suspect_->granted = true;
    dispatch(now);
  }
}

void WorkerCore::on_delete(const DeleteObjects& deleted) {
  for (const Bytes& object_id : deleted.object_ids) objects_.erase(object_id);
}

void WorkerCore::on_completion(Completion&& completion, double now) {
  uint64_t task_id = completion.task_id;
  if (!handed_ids_.erase(task_id)) return;  // not ours (never happens: the runner runs only what we handed)
  switch (completion.outcome) {
    case Completion::Outcome::succeeded:
      if (max_frame_bytes_ && completion.payload.size() >= max_frame_bytes_) {  // at the limit too (PROTOCOL.md §10)
        fail(task_id, FailureKind::raised, "scaler.errors.PayloadTooLargeError",
             "the result is " + std::to_string(completion.payload.size()) +
                 " bytes, at or over the scheduler's limit of " + std::to_string(max_frame_bytes_) +
                 " bytes per frame (--max-message-size-bytes); return less");
      } else {
        batch_.succeeded_ids.push_back(task_id);
        batch_.payloads.push_back(std::move(completion.payload));
        if (completion.profile) batch_.profiles.push_back(*completion.profile);
      }
      batch_.run_seconds += completion.run_seconds;
      ++batch_.ran_tasks;
      break;
    case Completion::Outcome::failed:
      if (completion.failure.kind == FailureKind::raised) {  // as the scheduler counts tasks run
        batch_.run_seconds += completion.run_seconds;
        ++batch_.ran_tasks;
      }
      batch_.failures.push_back(std::move(completion.failure));
      break;
    case Completion::Outcome::stopped:
      fail(task_id, FailureKind::canceled, "", "");
      break;
  }
  if (suspect_ && suspect_->task_id == task_id) {
    suspect_.reset();
    flush(now);  // a suspect's result goes at once, before anything else can take this worker down
  } else {
    maybe_flush(now);
  }
  dispatch(now);
}

void WorkerCore::on_tick(double now) {
  if (suspect_ && !suspect_->granted && now >= suspect_->deadline) {
    std::vector<uint64_t> returned = take_unstarted({suspect_->task_id}, {});
    for (uint64_t task_id : returned) fail(task_id, FailureKind::returned, "", "");
    flush(now);
  }
  if (!batch_.empty() && now - last_flush_ >= kFlushEverySeconds) flush(now);
  dispatch(now);
}

std::vector<Outgoing> WorkerCore::take_messages() { return std::exchange(messages_, {}); }
std::vector<Job> WorkerCore::take_jobs() { return std::exchange(jobs_, {}); }
std::vector<uint64_t> WorkerCore::take_stops() { return std::exchange(stops_, {}); }

uint32_t WorkerCore::held_tasks() const { return static_cast<uint32_t>(kept_ids_.size() + handed_ids_.size()); }

std::vector<uint64_t> WorkerCore::held_task_ids() const {
  std::vector<uint64_t> task_ids(kept_ids_.begin(), kept_ids_.end());
  task_ids.insert(task_ids.end(), handed_ids_.begin(), handed_ids_.end());
  std::sort(task_ids.begin(), task_ids.end());
  return task_ids;
}

double WorkerCore::next_deadline(double now) const {
  double deadline = std::numeric_limits<double>::infinity();
  if (!batch_.empty()) deadline = last_flush_ + kFlushEverySeconds;
  // The runner wakes the loop only when it runs dry: collect what finished meanwhile this often.
  if (!handed_ids_.empty()) deadline = std::min(deadline, now + kFlushEverySeconds);
  if (suspect_ && !suspect_->granted) deadline = std::min(deadline, suspect_->deadline);
  return deadline;
}

void WorkerCore::dispatch(double now) {
  while (!kept_.empty()) {
    const Entry entry = kept_.front();
    if (suspect_) {
      if (suspect_->handed || !suspect_->granted) break;  // running alone, or waiting for the answer
      kept_.pop_front();
      kept_ids_.erase(entry.task_id);
      hand(entry);
      if (handed_ids_.count(entry.task_id)) {
        suspect_->handed = true;
        break;
      }
      suspect_.reset();  // it failed before it could run (an unknown function, say)
      flush(now);
      continue;
    }
    if (entry.group->report_start) {
      // A suspect runs alone, so that if this worker dies under it the scheduler blames only it (§8).
      if (!handed_ids_.empty()) break;
      flush(now);
      messages_.push_back(TaskStarted{{entry.task_id}});
      suspect_ = Suspect{entry.task_id, now + kStartAnswerSeconds};
      break;
    }
    kept_.pop_front();
    kept_ids_.erase(entry.task_id);
    hand(entry);
  }
  if (kept_.empty() && handed_ids_.empty() && !batch_.empty()) flush(now);  // ran dry: send what there is
}

void WorkerCore::hand(const Entry& entry) {
  const TaskGroup& group = *entry.group;
  const NativeFunction* function = nullptr;
  if (auto problem = resolve_function(group, &function)) {
    fail(entry.task_id, FailureKind::serialization, "native.DecodeError", *problem);
    return;
  }
  Job job;
  job.task_id = entry.task_id;
  job.function = function;
  job.group = entry.group;
  job.row = entry.row;
  job.profiling = group.profiling;
  size_t width = group.args_per_task;
  job.object_args.resize(width);
  for (size_t slot = 0; slot < width; ++slot) {
    size_t index = entry.row * width + slot;
    if (!group.object_arg[index]) continue;
    auto object = objects_.find(group.args[index]);
    if (object == objects_.end()) {
      fail(entry.task_id, FailureKind::serialization, "native.DecodeError",
           "argument " + std::to_string(slot) + " names object " + hex(group.args[index]) +
               ", which this worker was never sent (or was told to delete)");
      return;
    }
    job.object_args[slot] = object->second;
  }
  handed_ids_.insert(entry.task_id);
  jobs_.push_back(std::move(job));
}

std::optional<std::string> WorkerCore::resolve_function(const TaskGroup& group, const NativeFunction** function) {
  if (group.args.size() != static_cast<size_t>(group.args_per_task) * group.task_ids.size() ||
      group.keywords.size() > group.args_per_task) {
    return std::string("the group's argument layout does not match its task count");
  }
  auto object = objects_.find(group.function_id);
  if (object == objects_.end()) {
    return "the function object " + hex(group.function_id) + " was never sent to this worker (or was deleted)";
  }
  Value reference;
  try {
    reference = decode_value(*object->second);
  } catch (const NeutralDecodeError&) {
    reference = Value::nil();
  }
  if (reference.kind != Value::Kind::extension || reference.extension_type != kNativeFunctionExt) {
    return std::string(
        "the function payload is not a neutral function reference (PROTOCOL.md §16); a native worker runs only "
        "functions it was built with: submit scaler.native(\"name\") with serializer=scaler.NeutralSerializer()");
  }
  *function = find_function(reference.bytes);
  if (*function == nullptr) {
    return "this worker has no native function '" + reference.bytes + "' (it has: " + function_names() + ")";
  }
  return std::nullopt;
}

void WorkerCore::fail(uint64_t task_id, FailureKind kind, std::string type_name, std::string message) {
  TaskFailure failure;
  failure.task_id = task_id;
  failure.kind = kind;
  failure.type_name = std::move(type_name);
  failure.message = std::move(message);
  batch_.failures.push_back(std::move(failure));
}

std::vector<uint64_t> WorkerCore::take_unstarted(const std::vector<uint64_t>& task_ids,
                                                  const std::vector<uint64_t>& withdrawn) {
  std::vector<uint64_t> taken;
  for (uint64_t task_id : withdrawn) {
    if (handed_ids_.erase(task_id)) taken.push_back(task_id);
  }
  std::unordered_set<uint64_t> named;
  for (uint64_t task_id : task_ids) {
    if (kept_ids_.erase(task_id)) named.insert(task_id);
  }
  if (named.empty()) return taken;
  if (suspect_ && !suspect_->handed && named.count(suspect_->task_id)) suspect_.reset();
  kept_.erase(std::remove_if(kept_.begin(), kept_.end(), [&](const Entry& entry) { return named.count(entry.task_id) > 0; }),
              kept_.end());
  for (uint64_t task_id : task_ids) {
    if (named.erase(task_id)) taken.push_back(task_id);
  }
  return taken;
}

void WorkerCore::maybe_flush(double now) {
  if (batch_.succeeded_ids.size() + batch_.failures.size() >= kFlushEveryTasks || now - last_flush_ >= kFlushEverySeconds) {
    flush(now);
  }
}

void WorkerCore::flush(double now) {
  last_flush_ = now;
  if (batch_.empty()) return;
  TaskResults all = std::exchange(batch_, {});
  // Keep each control frame well inside the scheduler's limit (PROTOCOL.md §10): half of it, as the Python worker.
  size_t budget = max_control_frame_bytes_ ? max_control_frame_bytes_ / 2 : std::numeric_limits<size_t>::max();
  std::unordered_map<uint64_t, TaskProfile> profiles;
  for (const TaskProfile& profile : all.profiles) profiles[profile.task_id] = profile;
  TaskResults part;
  // The running time of them all goes with the first part: the scheduler sums what it reads.
  part.run_seconds = all.run_seconds;
  part.ran_tasks = all.ran_tasks;
  size_t inline_bytes = 0;
  auto add_entry = [&](size_t size) {
    if (!part.empty() && inline_bytes + size > budget) {
      messages_.push_back(std::move(part));
      part = TaskResults{};
      inline_bytes = 0;
    }
    inline_bytes += size;
  };
  for (size_t i = 0; i < all.succeeded_ids.size(); ++i) {
    Bytes& payload = all.payloads[i];
    add_entry(kEntryOverheadBytes + (payload.size() < kLargePayloadBytes ? payload.size() : 0));
    uint64_t task_id = all.succeeded_ids[i];
    part.succeeded_ids.push_back(task_id);
    part.payloads.push_back(std::move(payload));
    auto profile = profiles.find(task_id);
    if (profile != profiles.end()) part.profiles.push_back(profile->second);
  }
  for (TaskFailure& failure : all.failures) {
    add_entry(kEntryOverheadBytes + failure.type_name.size() + failure.message.size() + failure.traceback.size());
    part.failures.push_back(std::move(failure));
  }
  if (!part.empty()) messages_.push_back(std::move(part));
}

}  // namespace scaler_native
