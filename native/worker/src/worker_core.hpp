// The worker's decisions, without sockets, threads or clocks (the agent feeds it messages, completions
// and the time; it answers with messages to send and jobs to start or stop). PROTOCOL.md §8 and §14.
#pragma once

#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "protocol.hpp"
#include "task_runner.hpp"

namespace scaler_native {

// Results are sent when no task is queued, when this many have piled up, or this long after the last send (or
// after the work began, for a worker that was idle).
constexpr size_t kFlushEveryTasks = 1000;
constexpr double kFlushEverySeconds = 0.005;
// A suspect task (reportStart) waits this long for the scheduler's taskStarted, then goes back `returned`.
constexpr double kStartAnswerSeconds = 30.0;

// Tasks go to the runner (task_runner.hpp) as they arrive, and run there in that order; the core keeps back
// only a suspect task and whatever arrived after it, since a suspect runs alone (PROTOCOL.md §8).
class WorkerCore {
 public:
  // welcome: the scheduler's limits on what it reads (0: none).
  void set_limits(uint64_t max_frame_bytes, uint64_t max_control_frame_bytes);

  void on_submission(const TaskSubmission& submission, double now);
  // `withdrawn`: those of the named tasks that the runner took back before any thread picked them up.
  void on_cancel(const CancelTasks& cancel, const std::vector<uint64_t>& withdrawn, double now);
  void on_release(const ReleaseTasks& release, const std::vector<uint64_t>& withdrawn, double now);
  void on_task_started(const TaskStarted& started, double now);
  void on_delete(const DeleteObjects& deleted);
  void on_completion(Completion&& completion, double now);
  void on_tick(double now);

  std::vector<Outgoing> take_messages();
  std::vector<Job> take_jobs();   // hand these to the runner, in this order
  std::vector<uint64_t> take_stops();

  // Sends the results made so far now: after a rejoin they go before the re-announcement (PROTOCOL.md §21).
  void flush_results(double now) { flush(now); }

  // Tasks received and not yet answered, running ones included (the heartbeat's queuedTasks).
  uint32_t held_tasks() const;
  // Their ids, in increasing order: what a rejoining worker re-announces.
  std::vector<uint64_t> held_task_ids() const;
  // When on_tick should next run: results to send, completions to collect, or a suspect's answer overdue.
  double next_deadline(double now) const;

 private:
  struct Entry {
    uint64_t task_id;
    std::shared_ptr<const TaskGroup> group;
    size_t row;
  };
  struct Suspect {
    uint64_t task_id;
    double deadline;  // for the scheduler's taskStarted
    bool granted = false;
    bool handed = false;
  };

  void dispatch(double now);
  void hand(const Entry& entry);
  std::optional<std::string> resolve_function(const TaskGroup& group, const NativeFunction** function);
  void fail(uint64_t task_id, FailureKind kind, std::string type_name, std::string message);
  // The named tasks that never started: withdrawn from the runner, or still kept back here.
  std::vector<uint64_t> take_unstarted(const std::vector<uint64_t>& task_ids, const std::vector<uint64_t>& withdrawn);
  void maybe_flush(double now);
  void flush(double now);

  uint64_t max_frame_bytes_ = 0;
  uint64_t max_control_frame_bytes_ = 0;
  std::unordered_map<Bytes, SharedBytes> objects_;
  std::deque<Entry> kept_;  // not handed yet: a suspect at the front, and everything that came after it
  std::unordered_set<uint64_t> kept_ids_;
  std::unordered_set<uint64_t> handed_ids_;  // with the runner, queued there or running
  std::optional<Suspect> suspect_;  // asked, granted or running: nothing else is handed meanwhile
  TaskResults batch_;
  double last_flush_ = 0;
  std::vector<Outgoing> messages_;
  std::vector<Job> jobs_;
  std::vector<uint64_t> stops_;
};

}  // namespace scaler_native
