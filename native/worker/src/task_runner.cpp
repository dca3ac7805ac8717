#include "task_runner.hpp"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <unordered_set>

namespace scaler_native {

namespace {

uint64_t thread_cpu_us() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1000000 + static_cast<uint64_t>(now.tv_nsec) / 1000;
}

Completion failed(uint64_t task_id, FailureKind kind, std::string type_name, std::string message,
                  const std::string& function) {
  Completion completion;
  completion.task_id = task_id;
  completion.outcome = Completion::Outcome::failed;
  completion.failure.task_id = task_id;
  completion.failure.kind = kind;
  completion.failure.traceback = "in native function " + function + " (scaler_native_worker)\n" + type_name + ": " + message + "\n";
  completion.failure.type_name = std::move(type_name);
  completion.failure.message = std::move(message);
  return completion;
}

// The row's arguments in the function's parameter order: positional ones first, then keywords by name.
std::vector<Value> bind(const NativeFunction& function, std::vector<Value> row, const std::vector<std::string>& keywords) {
  const std::vector<std::string>& parameters = function.parameters;
  size_t positional = row.size() - keywords.size();
  if (positional > parameters.size()) {
    throw TaskError("native.TypeError", function.name + "() takes " + std::to_string(parameters.size()) +
                                            " argument(s) (" + std::to_string(positional) + " given)");
  }
  std::vector<std::optional<Value>> slots(parameters.size());
  for (size_t i = 0; i < positional; ++i) slots[i] = std::move(row[i]);
  for (size_t k = 0; k < keywords.size(); ++k) {
    size_t index = 0;
    while (index < parameters.size() && parameters[index] != keywords[k]) ++index;
    if (index == parameters.size()) {
      throw TaskError("native.TypeError", function.name + "() got an unexpected keyword argument '" + keywords[k] + "'");
    }
    if (slots[index]) {
      throw TaskError("native.TypeError", function.name + "() got multiple values for argument '" + keywords[k] + "'");
    }
    slots[index] = std::move(row[positional + k]);
  }
  std::vector<Value> bound;
  bound.reserve(slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    if (!slots[i]) throw TaskError("native.TypeError", function.name + "() missing argument '" + parameters[i] + "'");
    bound.push_back(std::move(*slots[i]));
  }
  return bound;
}

}  // namespace

Completion run_job(const Job& job, const StopFlag& stop) {
  const TaskGroup& group = *job.group;
  const std::string& name = job.function->name;
  size_t width = group.args_per_task;
  std::vector<Value> row;
  row.reserve(width);
  for (size_t slot = 0; slot < width; ++slot) {
    const Bytes& payload = job.object_args[slot] ? *job.object_args[slot] : group.args[job.row * width + slot];
    try {
      row.push_back(decode_value(payload));
    } catch (const NeutralDecodeError& error) {
      return failed(job.task_id, FailureKind::serialization, "native.DecodeError",
                    "argument " + std::to_string(slot) + " of " + name + " is not a neutral value (" + error.what() +
                        "); submit native tasks with scaler.NeutralSerializer",
                    name);
    }
    if (row.back().kind == Value::Kind::extension && row.back().extension_type == kPythonObjectExt) {
      return failed(job.task_id, FailureKind::serialization, "native.DecodeError",
                    "argument " + std::to_string(slot) + " of " + name +
                        " is a Python object, which a native function cannot read; pass ints, floats, "
                        "strings, bytes, lists, dicts, booleans or None",
                    name);
    }
  }
  auto started = std::chrono::steady_clock::now();
  uint64_t cpu_before = job.profiling ? thread_cpu_us() : 0;
  Completion completion;
  completion.task_id = job.task_id;
  try {
    Value result = job.function->body(bind(*job.function, std::move(row), group.keywords), stop);
    completion.payload = encode_value(result);
  } catch (const TaskStopped&) {
    completion.outcome = Completion::Outcome::stopped;
    return completion;
  } catch (const TaskError& error) {
    return failed(job.task_id, FailureKind::raised, error.type_name(), error.what(), name);
  } catch (const std::exception& error) {
    return failed(job.task_id, FailureKind::raised, "native.InternalError", error.what(), name);
  }
  if (job.profiling) {
    auto elapsed = std::chrono::steady_clock::now() - started;
    completion.profile = TaskProfile{
        job.task_id, static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count()),
        thread_cpu_us() - cpu_before, 0};
  }
  return completion;
}

TaskRunner::TaskRunner(size_t threads, int wake_fd) : wake_fd_(wake_fd) {
  for (size_t i = 0; i < threads; ++i) slots_.push_back(std::make_unique<Slot>());
  for (auto& slot : slots_) threads_.emplace_back([this, raw = slot.get()] { serve(*raw); });
}

TaskRunner::~TaskRunner() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closing_ = true;
    for (auto& slot : slots_) slot->stop = true;  // running functions return within milliseconds
  }
  work_ready_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void TaskRunner::start(Job job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (job.group && job.group->ahead) {  // after those sent ahead before it, before every other queued job
      jobs_.insert(jobs_.begin() + static_cast<std::ptrdiff_t>(ahead_), std::move(job));
      ++ahead_;
    } else {
      jobs_.push_back(std::move(job));
    }
  }
  work_ready_.notify_one();
}

std::vector<uint64_t> TaskRunner::withdraw(const std::vector<uint64_t>& task_ids) {
  std::unordered_set<uint64_t> named(task_ids.begin(), task_ids.end());
  std::vector<uint64_t> withdrawn;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto job = jobs_.begin(); job != jobs_.end();) {
    if (named.count(job->task_id)) {
      withdrawn.push_back(job->task_id);
      if (static_cast<size_t>(job - jobs_.begin()) < ahead_) --ahead_;
      job = jobs_.erase(job);
    } else {
      ++job;
    }
  }
  return withdrawn;
}

void TaskRunner::stop(uint64_t task_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& slot : slots_) {
    if (slot->running_task_id == task_id) slot->stop = true;
  }
}

std::vector<Completion> TaskRunner::take_completions() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Completion> taken;
  taken.swap(completions_);
  return taken;
}

void TaskRunner::serve(Slot& slot) {
  StopFlag stop(slot.stop);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [this] { return closing_ || !jobs_.empty(); });
      if (closing_) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
      if (ahead_ > 0) --ahead_;
      slot.running_task_id = job.task_id;
      slot.stop = false;
      ++busy_threads_;
    }
    auto started = std::chrono::steady_clock::now();
    Completion completion = run_job(job, stop);
    completion.run_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      slot.running_task_id = 0;
      --busy_threads_;
      completions_.push_back(std::move(completion));
      wake = (jobs_.empty() && busy_threads_ == 0) || completions_.size() == kWakeEveryCompletions;
    }
    if (wake) {
      char byte = 1;
      ssize_t written = write(wake_fd_, &byte, 1);
      (void)written;  // a full pipe already holds a wake-up
    }
  }
}

}  // namespace scaler_native
