// The messages a worker exchanges with the scheduler, as plain C++ values (PROTOCOL.md §3, §14).
// Only wire.cpp sees Cap'n Proto; everything else works with these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

namespace scaler_native {

constexpr uint32_t kProtocolVersion = 1;
// The revision of kProtocolVersion this worker implements, and its release (PROTOCOL.md, "Versions and rolling
// upgrades"): CMakeLists.txt reads the release from scaler/about.py next to the schema it builds against. The
// revision is what this code honours, so it is written here, not read from the Python peers' constant: 2 (kept
// results) asks nothing of a worker that reads no stored object, 3 is `TaskGroup.ahead` (task_runner.cpp's queue
// order), 4 is `HeartbeatEcho.heartbeatIntervalMs` (the spaced heartbeats). The conformance suite checks that
// it is the revision of this checkout's Python peers (tests/protocol/test_worker_versions.py).
constexpr uint32_t kProtocolRevision = 4;
#ifndef SCALER_RELEASE
#define SCALER_RELEASE "scaler (release unknown)"
#endif
constexpr const char* kRelease = SCALER_RELEASE;
// Payloads this large travel as their own frame (PROTOCOL.md §1).
constexpr size_t kLargePayloadBytes = 64 * 1024;

using Bytes = std::string;
using SharedBytes = std::shared_ptr<const Bytes>;

enum class FailureKind : uint16_t {
  raised = 0,
  workerDied = 1,
  canceled = 2,
  notFound = 3,
  serialization = 4,
  rejected = 5,
  returned = 6,
};

// ------------------------------------------------------------------------------------ scheduler -> worker

// The stores of the cluster and this worker's home store (PROTOCOL.md §17). This worker reads and writes
// no stored object, but keeps the latest directory as the protocol asks of every worker.
struct StoreEntry {
  std::string data_address;
  std::string ipc_address;
  std::string host_key;
};

struct StoreDirectory {
  std::vector<StoreEntry> stores;
  std::string home_store;
};

struct Welcome {
  uint32_t protocol_version = 0;
  std::string release;  // the scheduler's; empty from one before releases were sent
  uint32_t heartbeat_interval_ms = 0;
  uint32_t peer_timeout_ms = 0;
  uint64_t max_frame_bytes = 0;          // 0: no limit
  uint64_t max_control_frame_bytes = 0;  // 0: no limit
  StoreDirectory store_directory;
};

struct Refused {
  std::string reason;
  bool unknown_peer = false;  // the scheduler does not know us (it restarted?): rejoin (§21)
  bool standby = false;       // a standby scheduler that does not serve now: try the next address (§23)
};

struct HeartbeatEcho {
  // 0: the welcome's interval stands; else heartbeat this often from now on (a scheduler with many workers).
  uint32_t heartbeat_interval_ms = 0;
};

struct ObjectPayload {
  Bytes object_id;
  std::string name;
  SharedBytes payload;
};

struct TaskGroup {
  Bytes function_id;
  uint16_t args_per_task = 0;
  std::vector<std::string> keywords;
  std::vector<uint64_t> task_ids;
  std::vector<Bytes> args;  // payloads, with frames already put in place
  Bytes serializer_id;
  std::vector<bool> object_arg;  // per flat index of args: it holds a 16-byte object id
  uint32_t nesting_depth = 0;
  bool profiling = false;
  bool report_start = false;
  bool ahead = false;  // run before the jobs queued that were not sent ahead (PROTOCOL.md, "Ahead of the queue")
};

struct TaskSubmission {
  std::vector<ObjectPayload> objects;
  std::vector<std::shared_ptr<const TaskGroup>> groups;
};

struct CancelTasks {
  std::vector<uint64_t> task_ids;
  bool force = false;
};

struct ReleaseTasks {
  std::vector<uint64_t> task_ids;
};

struct TaskStarted {
  std::vector<uint64_t> task_ids;
};

struct DeleteObjects {
  std::vector<Bytes> object_ids;
};

struct Disconnect {
  std::string reason;
};

struct ProtocolError {
  std::string reason;
};

// A decodable message a worker never receives (hello, clearRequest, ...): logged and ignored.
struct Unexpected {
  std::string member;
};

using Incoming = std::variant<Welcome, Refused, HeartbeatEcho, TaskSubmission, CancelTasks, ReleaseTasks,
                              TaskStarted, DeleteObjects, Disconnect, ProtocolError, Unexpected, StoreDirectory>;

// ------------------------------------------------------------------------------------ worker -> scheduler

struct Hello {
  std::string name;
  std::string hostname;
  uint32_t pid = 0;
  uint32_t capacity = 0;
  std::vector<std::string> tags;  // sorted, without repeats
  uint32_t concurrency = 1;       // tasks run at once: its threads
  bool rejoining = false;         // welcomed before by a scheduler at this address, which went away (§21)
};

struct Heartbeat {
  float cpu_percent = 0;
  uint64_t rss_bytes = 0;
  uint32_t queued_tasks = 0;
  float processor_cpu_percent = 0;
  uint64_t processor_rss_bytes = 0;
  uint32_t latency_us = 0;
};

struct TaskFailure {
  uint64_t task_id = 0;
  FailureKind kind = FailureKind::raised;
  std::string type_name;
  std::string message;
  std::string traceback;
};

struct TaskProfile {
  uint64_t task_id = 0;
  uint64_t duration_us = 0;
  uint64_t cpu_time_us = 0;
  uint64_t peak_memory_bytes = 0;
};

struct TaskResults {
  std::vector<uint64_t> succeeded_ids;
  std::vector<Bytes> payloads;
  std::vector<TaskFailure> failures;
  std::vector<TaskProfile> profiles;
  // The tasks reported here that ran (succeeded or raised), and their running time in all; 0: not measured.
  double run_seconds = 0;
  uint32_t ran_tasks = 0;

  bool empty() const { return succeeded_ids.empty() && failures.empty(); }
};

struct CancelRefused {
  std::vector<uint64_t> task_ids;
};

using Outgoing = std::variant<Hello, Heartbeat, TaskResults, CancelRefused, TaskStarted, Disconnect>;

}  // namespace scaler_native
