#include "wire.hpp"

#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/exception.h>

#include <cstring>
#include <set>

#include "scaler.capnp.h"

namespace scaler_native {

namespace {

// PROTOCOL.md §1, decoding limits: traversal relative to the frame's size, nesting 16.
constexpr uint64_t kTraversalWordsPerFrameWord = 4;
constexpr uint64_t kTraversalSlackWords = 4096;
constexpr int kNestingLimit = 16;

Bytes bytes_of(capnp::Data::Reader data) {
  return Bytes(reinterpret_cast<const char*>(data.begin()), data.size());
}

kj::ArrayPtr<const kj::byte> data_of(const Bytes& bytes) {
  return kj::arrayPtr(reinterpret_cast<const kj::byte*>(bytes.data()), bytes.size());
}

template <typename T>
std::vector<uint64_t> ids_of(T list) {
  std::vector<uint64_t> ids;
  ids.reserve(list.size());
  for (auto id : list) ids.push_back(id);
  return ids;
}

// Hands out payload frames by number, each at most once, and checks that none is left over (§1).
class FrameTable {
 public:
  explicit FrameTable(const std::vector<Bytes>& frames) : frames_(frames) {}

  const Bytes& take(uint64_t number) {
    if (number == 0 || number >= frames_.size() || !used_.insert(number).second) {
      throw DecodeError("payload frame " + std::to_string(number) + " is missing or named twice");
    }
    return frames_[number];
  }

  void check_all_used() const {
    if (used_.size() != frames_.size() - 1) {
      throw DecodeError(std::to_string(frames_.size() - 1 - used_.size()) + " payload frame(s) are not named");
    }
  }

 private:
  const std::vector<Bytes>& frames_;
  std::set<uint64_t> used_;
};

TaskSubmission decode_submission(::TaskSubmission::Reader reader, FrameTable& frames) {
  TaskSubmission submission;
  for (auto object : reader.getObjects()) {
    ObjectPayload payload;
    payload.object_id = bytes_of(object.getObjectId());
    payload.name = object.getName().cStr();
    uint32_t frame = object.getPayloadFrame();
    payload.payload = std::make_shared<const Bytes>(frame ? frames.take(frame) : bytes_of(object.getPayload()));
    submission.objects.push_back(std::move(payload));
  }
  for (auto reader_group : reader.getGroups()) {
    auto group = std::make_shared<TaskGroup>();
    group->function_id = bytes_of(reader_group.getFunctionId());
    group->args_per_task = reader_group.getArgsPerTask();
    for (auto keyword : reader_group.getKeywords()) group->keywords.emplace_back(keyword.cStr());
    group->task_ids = ids_of(reader_group.getTaskIds());
    auto args = reader_group.getArgs();
    group->args.reserve(args.size());
    for (auto arg : args) group->args.push_back(bytes_of(arg));
    auto frame_indices = reader_group.getArgFrameIndices();
    auto frame_numbers = reader_group.getArgFrames();
    if (frame_indices.size() != frame_numbers.size()) {
      throw DecodeError("frame index and frame number lists differ in length");
    }
    for (unsigned k = 0; k < frame_indices.size(); ++k) {
      uint32_t index = frame_indices[k];
      if (index >= group->args.size()) throw DecodeError("payload index " + std::to_string(index) + " is out of range");
      group->args[index] = frames.take(frame_numbers[k]);
    }
    group->object_arg.assign(group->args.size(), false);
    for (uint32_t index : reader_group.getObjectArgIndices()) {
      if (index >= group->args.size()) throw DecodeError("object argument index " + std::to_string(index) + " is out of range");
      group->object_arg[index] = true;
    }
    // Graph edges are resolved before a task reaches a worker (§6): a reference here cannot be filled.
    if (reader_group.getRefArgIndices().size() != 0 || reader_group.getRefTaskIds().size() != 0) {
      throw DecodeError("a group sent to a worker carries unresolved graph edges");
    }
    group->serializer_id = bytes_of(reader_group.getSerializerId());
    group->nesting_depth = reader_group.getNestingDepth();
    group->profiling = reader_group.getProfiling();
    group->report_start = reader_group.getReportStart();
    group->ahead = reader_group.getAhead();
    submission.groups.push_back(std::move(group));
  }
  return submission;
}

StoreDirectory decode_directory(::StoreDirectory::Reader reader) {
  StoreDirectory directory;
  for (auto entry : reader.getStores()) {
    directory.stores.push_back(
        StoreEntry{entry.getDataAddress().cStr(), entry.getIpcAddress().cStr(), entry.getHostKey().cStr()});
  }
  directory.home_store = reader.getHomeStore().cStr();
  return directory;
}

Incoming decode_message(::Message::Reader message, FrameTable& frames) {
  switch (message.which()) {
    case ::Message::WELCOME: {
      auto reader = message.getWelcome();
      Welcome welcome;
      welcome.protocol_version = reader.getProtocolVersion();
      welcome.release = reader.getRelease().cStr();
      welcome.heartbeat_interval_ms = reader.getHeartbeatIntervalMs();
      welcome.peer_timeout_ms = reader.getPeerTimeoutMs();
      welcome.max_frame_bytes = reader.getMaxFrameBytes();
      welcome.max_control_frame_bytes = reader.getMaxControlFrameBytes();
      welcome.store_directory = decode_directory(reader.getStoreDirectory());
      return welcome;
    }
    case ::Message::REFUSED:
      return Refused{message.getRefused().getReason().cStr(), message.getRefused().getUnknownPeer(),
                     message.getRefused().getStandby()};
    case ::Message::HEARTBEAT_ECHO:
      return HeartbeatEcho{message.getHeartbeatEcho().getHeartbeatIntervalMs()};
    case ::Message::SUBMIT_TASKS:
      return decode_submission(message.getSubmitTasks(), frames);
    case ::Message::CANCEL_TASKS: {
      auto reader = message.getCancelTasks();
      return CancelTasks{ids_of(reader.getTaskIds()), reader.getForce()};
    }
    case ::Message::RELEASE_TASKS:
      return ReleaseTasks{ids_of(message.getReleaseTasks().getTaskIds())};
    case ::Message::TASK_STARTED:
      return TaskStarted{ids_of(message.getTaskStarted().getTaskIds())};
    case ::Message::DELETE_OBJECTS: {
      DeleteObjects deleted;
      for (auto id : message.getDeleteObjects().getObjectIds()) deleted.object_ids.push_back(bytes_of(id));
      return deleted;
    }
    case ::Message::DISCONNECT:
      return Disconnect{message.getDisconnect().getReason().cStr()};
    case ::Message::PROTOCOL_ERROR:
      return ProtocolError{message.getProtocolError().getReason().cStr()};
    case ::Message::STORE_DIRECTORY:
      return decode_directory(message.getStoreDirectory());
    case ::Message::HELLO: return Unexpected{"hello"};
    case ::Message::HEARTBEAT: return Unexpected{"heartbeat"};
    case ::Message::TASK_RESULTS: return Unexpected{"taskResults"};
    case ::Message::CLEAR_REQUEST: return Unexpected{"clearRequest"};
    case ::Message::CLEAR_RESPONSE: return Unexpected{"clearResponse"};
    case ::Message::SHUTDOWN_REQUEST: return Unexpected{"shutdownRequest"};
    case ::Message::SHUTDOWN_RESPONSE: return Unexpected{"shutdownResponse"};
    case ::Message::PROCESSOR_STATE: return Unexpected{"processorState"};
    case ::Message::CANCEL_REFUSED: return Unexpected{"cancelRefused"};
  }
  throw DecodeError("unknown message member " + std::to_string(static_cast<unsigned>(message.which())));
}

// ------------------------------------------------------------------------------------ encoding

std::vector<Bytes> finish(capnp::MallocMessageBuilder& builder, std::vector<Bytes>&& payload_frames) {
  kj::Array<capnp::word> words = capnp::messageToFlatArray(builder);
  auto bytes = words.asBytes();
  std::vector<Bytes> frames;
  frames.reserve(1 + payload_frames.size());
  frames.emplace_back(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  for (auto& frame : payload_frames) frames.push_back(std::move(frame));
  return frames;
}

::FailureKind wire_kind(FailureKind kind) {
  return static_cast<::FailureKind>(static_cast<uint16_t>(kind));
}

void encode_results(::TaskResults::Builder builder, const TaskResults& results, std::vector<Bytes>& frames) {
  auto ids = builder.initSucceededIds(results.succeeded_ids.size());
  auto payloads = builder.initPayloads(results.payloads.size());
  std::vector<uint32_t> frame_indices;
  for (unsigned i = 0; i < results.succeeded_ids.size(); ++i) {
    ids.set(i, results.succeeded_ids[i]);
    const Bytes& payload = results.payloads[i];
    if (payload.size() >= kLargePayloadBytes) {
      frame_indices.push_back(i);
      frames.push_back(payload);
    } else {
      payloads.set(i, data_of(payload));
    }
  }
  if (!frame_indices.empty()) {
    auto indices = builder.initPayloadFrameIndices(frame_indices.size());
    auto numbers = builder.initPayloadFrames(frame_indices.size());
    for (unsigned k = 0; k < frame_indices.size(); ++k) {
      indices.set(k, frame_indices[k]);
      numbers.set(k, k + 1);
    }
  }
  if (results.ran_tasks) {
    builder.setRunSeconds(results.run_seconds);
    builder.setRanTasks(results.ran_tasks);
  }
  auto failures = builder.initFailures(results.failures.size());
  for (unsigned i = 0; i < results.failures.size(); ++i) {
    const TaskFailure& failure = results.failures[i];
    auto entry = failures[i];
    entry.setTaskId(failure.task_id);
    entry.setKind(wire_kind(failure.kind));
    entry.setTypeName(failure.type_name);
    entry.setMessage(failure.message);
    entry.setTraceback(failure.traceback);
  }
  if (!results.profiles.empty()) {
    auto profiles = builder.initProfiles(results.profiles.size());
    for (unsigned i = 0; i < results.profiles.size(); ++i) {
      const TaskProfile& profile = results.profiles[i];
      profiles[i].setTaskId(profile.task_id);
      profiles[i].setDurationUs(profile.duration_us);
      profiles[i].setCpuTimeUs(profile.cpu_time_us);
      profiles[i].setPeakMemoryBytes(profile.peak_memory_bytes);
    }
  }
}

template <typename Builder>
void set_ids(Builder builder, const std::vector<uint64_t>& task_ids) {
  auto ids = builder.initTaskIds(task_ids.size());
  for (unsigned i = 0; i < task_ids.size(); ++i) ids.set(i, task_ids[i]);
}

}  // namespace

Incoming decode(const std::vector<Bytes>& frames) {
  if (frames.empty()) throw DecodeError("a message needs at least one frame");
  const Bytes& control = frames[0];
  if (control.size() % sizeof(capnp::word) != 0 || control.empty()) {
    throw DecodeError("malformed message: the control frame is not a whole number of words");
  }
  // Cap'n Proto reads aligned words; a received frame need not be aligned, so copy it (it is small).
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(control.size() / sizeof(capnp::word));
  std::memcpy(words.begin(), control.data(), control.size());
  capnp::ReaderOptions options;
  options.traversalLimitInWords = words.size() * kTraversalWordsPerFrameWord + kTraversalSlackWords;
  options.nestingLimit = kNestingLimit;
  FrameTable table(frames);
  try {
    capnp::FlatArrayMessageReader reader(words.asPtr(), options);
    Incoming message = decode_message(reader.getRoot<::Message>(), table);
    table.check_all_used();
    return message;
  } catch (const DecodeError&) {
    throw;
  } catch (const kj::Exception& error) {
    throw DecodeError(std::string("malformed message: ") + error.getDescription().cStr());
  } catch (const std::exception& error) {
    throw DecodeError(std::string("malformed message: ") + error.what());
  }
}

std::vector<Bytes> encode(const Outgoing& message) {
  capnp::MallocMessageBuilder builder;
  auto root = builder.initRoot<::Message>();
  std::vector<Bytes> payload_frames;
  if (auto hello = std::get_if<Hello>(&message)) {
    auto out = root.initHello();
    out.setProtocolVersion(kProtocolVersion);
    out.setProtocolRevision(kProtocolRevision);
    out.setRelease(kRelease);
    out.setRole(::Role::WORKER);
    out.setName(hello->name);
    out.setHostname(hello->hostname);
    out.setPid(hello->pid);
    out.setCapacity(hello->capacity);
    out.setConcurrency(hello->concurrency);
    out.setRejoining(hello->rejoining);
    auto tags = out.initTags(static_cast<unsigned>(hello->tags.size()));
    for (size_t i = 0; i < hello->tags.size(); ++i) tags.set(static_cast<unsigned>(i), hello->tags[i]);
  } else if (auto heartbeat = std::get_if<Heartbeat>(&message)) {
    auto out = root.initHeartbeat();
    out.setCpuPercent(heartbeat->cpu_percent);
    out.setRssBytes(heartbeat->rss_bytes);
    out.setQueuedTasks(heartbeat->queued_tasks);
    out.setProcessorCpuPercent(heartbeat->processor_cpu_percent);
    out.setProcessorRssBytes(heartbeat->processor_rss_bytes);
    out.setLatencyUs(heartbeat->latency_us);
  } else if (auto results = std::get_if<TaskResults>(&message)) {
    encode_results(root.initTaskResults(), *results, payload_frames);
  } else if (auto refused = std::get_if<CancelRefused>(&message)) {
    set_ids(root.initCancelRefused(), refused->task_ids);
  } else if (auto started = std::get_if<TaskStarted>(&message)) {
    set_ids(root.initTaskStarted(), started->task_ids);
  } else if (auto disconnect = std::get_if<Disconnect>(&message)) {
    root.initDisconnect().setReason(disconnect->reason);
  }
  return finish(builder, std::move(payload_frames));
}

std::vector<Bytes> encode_reannounce(const std::vector<uint64_t>& task_ids) {
  capnp::MallocMessageBuilder builder;
  set_ids(builder.initRoot<::Message>().initReannounce(), task_ids);
  return finish(builder, {});
}

const char* member_name(const Incoming& message) {
  static const char* const kNames[] = {
      "welcome", "refused", "heartbeatEcho", "submitTasks", "cancelTasks", "releaseTasks",
      "taskStarted", "deleteObjects", "disconnect", "protocolError", "unexpected", "storeDirectory",
  };
  return kNames[message.index()];
}

}  // namespace scaler_native
