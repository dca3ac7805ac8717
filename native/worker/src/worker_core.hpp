// The worker's decisions, without sockets, threads or clocks (the agent feeds it messages, completions
// and the time; it answers with messages to send and jobs to start or stop). PROTOCOL.md §8 and §14.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "protocol.hpp"
#include "task_runner.hpp"

namespace scaler_native {

// Results are sent when no task is queued, when this many have piled up, or this long after the last send.
constexpr size_t kFlushEveryTasks = 1000;
constexpr double kFlushEverySeconds = 0.005;
// A suspect task (reportStart) waits this long for the scheduler's taskStarted, then goes back `returned`.
constexpr double kStartAnswerSeconds = 30.0;

class WorkerCore {
 public:
  explicit WorkerCore(size_t threads);

  // welcome: the scheduler's limits on what it reads (0: none).
  void set_limits(uint64_t max_frame_bytes, uint64_t max_control_frame_bytes);

  void on_submission(const TaskSubmission& submission, double now);
  void on_cancel(const CancelTasks& cancel, double now);
  void on_release(const ReleaseTasks& release, double now);
  void on_task_started(const TaskStarted& started, double now);
  void on_delete(const DeleteObjects& deleted);
  void on_completion(Completion&& completion, double now);
  void on_tick(double now);

  std::vector<Outgoing> take_messages();
  std::vector<Job> take_jobs();
  std::vector<uint64_t> take_stops();

  // Tasks received and not yet answered, running ones included (the heartbeat's queuedTasks).
  uint32_t held_tasks() const;
  // The next time on_tick has something to do; +infinity when nothing waits on time.
  double next_deadline() const;

 private:
  struct Entry {
    uint64_t task_id;
    std::shared_ptr<const TaskGroup> group;
    size_t row;
  };
  struct Suspect {
    Entry entry;
    double deadline;
    bool granted = false;
  };

  void dispatch(double now);
  void start(const Entry& entry);
  std::optional<std::string> resolve_function(const TaskGroup& group, const NativeFunction** function);
  void fail(uint64_t task_id, FailureKind kind, std::string type_name, std::string message);
  // Takes the named tasks that have not started out of the queue; returns them.
  std::vector<uint64_t> take_unstarted(const std::vector<uint64_t>& task_ids);
  void maybe_flush(double now);
  void flush(double now);

  size_t threads_;
  uint64_t max_frame_bytes_ = 0;
  uint64_t max_control_frame_bytes_ = 0;
  std::unordered_map<Bytes, SharedBytes> objects_;
  // Deepest nesting depth first (PROTOCOL.md §6); arrival order within a depth.
  std::map<uint32_t, std::deque<Entry>, std::greater<uint32_t>> queues_;
  std::unordered_set<uint64_t> queued_ids_;  // includes a suspect waiting for its answer
  std::unordered_set<uint64_t> running_ids_;
  std::optional<Suspect> suspect_;  // asked or running: nothing else starts meanwhile
  TaskResults batch_;
  double last_flush_ = 0;
  std::vector<Outgoing> messages_;
  std::vector<Job> jobs_;
  std::vector<uint64_t> stops_;
};

}  // namespace scaler_native
