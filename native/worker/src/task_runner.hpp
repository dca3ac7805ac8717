// The threads that run native functions. The agent's loop never runs a task itself, so it keeps
// heartbeating and answering cancels while tasks run.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "functions.hpp"
#include "protocol.hpp"

namespace scaler_native {

// One task, ready to run: its function is resolved, its arguments are still payloads (decoded on the
// runner thread, so that decoding runs in parallel too).
struct Job {
  uint64_t task_id = 0;
  const NativeFunction* function = nullptr;
  std::shared_ptr<const TaskGroup> group;
  size_t row = 0;
  std::vector<SharedBytes> object_args;  // per argument of the row: the object's payload, or null
  bool profiling = false;
};

// How a job ended: a result payload, or a failure, or stopped by a forced cancel.
struct Completion {
  uint64_t task_id = 0;
  enum class Outcome { succeeded, failed, stopped } outcome = Outcome::succeeded;
  Bytes payload;
  TaskFailure failure;
  std::optional<TaskProfile> profile;
  // Wall-clock seconds the job took on its thread (decoding, the function, encoding): the scheduler sizes this
  // worker's queue by it (TaskResults.runSeconds, PROTOCOL.md §7).
  double run_seconds = 0;
};

// Runs `job` on this thread; never throws.
Completion run_job(const Job& job, const StopFlag& stop);

// The agent's loop collects completions at least every few milliseconds while jobs run; the runner wakes it
// early only when it runs dry (every job done, so the results should go now) or this many are waiting.
constexpr size_t kWakeEveryCompletions = 1000;

// Threads that take jobs from one queue, in the order they were started (those sent ahead first, in theirs:
// TaskGroup.ahead), without waiting for the agent's loop between two jobs: a batch of tiny tasks runs back to back.
class TaskRunner {
 public:
  // `wake_fd` gets a byte written when the loop should collect completions now.
  TaskRunner(size_t threads, int wake_fd);
  ~TaskRunner();
  TaskRunner(const TaskRunner&) = delete;
  TaskRunner& operator=(const TaskRunner&) = delete;

  size_t threads() const { return slots_.size(); }
  void start(Job job);
  // Takes back those of these tasks no thread has picked up yet (they will not run); returns their ids.
  std::vector<uint64_t> withdraw(const std::vector<uint64_t>& task_ids);
  // Asks the function running `task_id`, if any, to stop; it ends as `stopped`.
  void stop(uint64_t task_id);
  std::vector<Completion> take_completions();

 private:
  struct Slot {
    std::atomic<bool> stop{false};
    uint64_t running_task_id = 0;  // guarded by mutex_
  };

  void serve(Slot& slot);

  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::deque<Job> jobs_;
  size_t ahead_ = 0;  // the jobs at the front of jobs_ that were sent ahead, in the order they came
  std::vector<Completion> completions_;
  size_t busy_threads_ = 0;
  bool closing_ = false;
  int wake_fd_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<std::thread> threads_;
};

}  // namespace scaler_native
