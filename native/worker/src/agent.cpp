#include "agent.hpp"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>

#include "address_rotation.hpp"
#include "heartbeat_pace.hpp"
#include "logging.hpp"
#include "process_stats.hpp"
#include "scheduler_session.hpp"
#include "task_runner.hpp"
#include "wire.hpp"
#include "worker_core.hpp"

namespace scaler_native {

volatile std::sig_atomic_t stop_requested = 0;

namespace {

// How long the loop may sleep when nothing is due: also how soon it sees a signal or its parent leave.
constexpr double kLoopTickSeconds = 0.1;
// Time for our last message (disconnect) to leave when we close.
constexpr int kCloseLingerMs = 100;

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// What the hello says this worker offers: "native" (it runs the functions it was built with) and the
// operator's --tags, sorted and without repeats as the scheduler compares them.
std::vector<std::string> advertised_tags(const Options& options) {
  std::vector<std::string> tags = options.tags;
  tags.push_back("native");
  std::sort(tags.begin(), tags.end());
  tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
  return tags;
}

// The fraction of a changed heartbeat interval after which the next heartbeat comes (HeartbeatPace): uniform in
// [0, 1), from a generator seeded apart in each worker so that workers told together spread out.
std::function<double()> heartbeat_phase() {
  return [engine = std::mt19937(std::random_device()()), fraction = std::uniform_real_distribution<double>(0, 1)]()
             mutable { return fraction(engine); };
}

std::string random_hex(size_t digits) {
  static const char hex_digits[] = "0123456789abcdef";
  std::random_device device;
  std::string text;
  for (size_t i = 0; i < digits; ++i) text += hex_digits[device() % 16];
  return text;
}

// Why the loop ends, and with which status and log level.
struct Leave {
  std::string reason;
  int status;
  LogLevel level;
};

class Agent {
 public:
  explicit Agent(const Options& options)
      : options_(options),
        name_(options.name.empty() ? host_name() + "|" + std::to_string(getpid()) : options.name),
        identity_("W|" + name_ + "|" + random_hex(8)),
        hello_{name_, host_name(), static_cast<uint32_t>(getpid()), options.capacity, advertised_tags(options),
               options.threads},
        rotation_(options.addresses, silence_seconds(options.heartbeat_interval_seconds, options.death_timeout_seconds),
                  monotonic_seconds()),
        pace_(options.heartbeat_interval_seconds, options.death_timeout_seconds, rotation_, heartbeat_phase()),
        connected_to_(rotation_.current()) {}

  int run();

 private:
  // What the core makes: sent, or held while no scheduler knows us (§21); results are kept until acknowledged.
  void send(const Outgoing& message);
  // Hellos, heartbeats and the goodbye, which no session rule holds back. False: dropped (ZMQ_DONTWAIT).
  bool send_now(const Outgoing& message, int flags = 0);
  bool send_frames(const Frames& frames, int flags);
  void on_frames(const std::vector<Bytes>& frames, double now);
  void on_welcome(const Welcome& welcome, double now);
  void on_refused(const Refused& refused, double now, double heard_before);
  void on_protocol_error(const ProtocolError& error);
  // To the next scheduler address (silent, or a standby's, §23): hello there, rejoining if welcomed before (§21).
  void move_to(const std::string& address, double now);
  std::string refusal_text(const Refused& refused) const;
  void apply_core();
  Heartbeat heartbeat();
  std::string who() const { return "NativeWorker[" + name_ + "]"; }

  Options options_;
  std::string name_;
  std::string identity_;
  WorkerCore core_;
  TaskRunner* runner_ = nullptr;
  void* socket_ = nullptr;
  ProcessStats stats_;
  double heartbeat_sent_at_ = -1;
  uint32_t latency_us_ = 0;
  Hello hello_;
  SchedulerSession session_;
  // Which scheduler we talk to, of several (a standby's): the socket is connected to connected_to_.
  AddressRotation rotation_;
  // When the next heartbeat is due, at the interval the welcome and the echoes ask; keeps rotation_'s silence.
  HeartbeatPace pace_;
  std::string connected_to_;
  // When a word (other than a standby's refusal) last came from a scheduler: the death timeout runs from it.
  double last_heard_ = 0;
  // The latest store directory (welcome, then each storeDirectory): kept, though this worker uses no store.
  StoreDirectory store_directory_;
  std::optional<Leave> leave_;
};

std::vector<Bytes> receive_frames(void* socket) {
  std::vector<Bytes> frames;
  int more = 0;
  do {
    zmq_msg_t part;
    zmq_msg_init(&part);
    if (zmq_msg_recv(&part, socket, frames.empty() ? ZMQ_DONTWAIT : 0) < 0) {
      int error = errno;
      zmq_msg_close(&part);
      if (frames.empty() && error == EAGAIN) return frames;
      throw std::runtime_error(std::string("receive failed: ") + zmq_strerror(error));
    }
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&part)), zmq_msg_size(&part));
    more = zmq_msg_more(&part);
    zmq_msg_close(&part);
  } while (more);
  return frames;
}

void Agent::send(const Outgoing& message) {
  if (session_.rejoining()) {
    session_.hold(encode(message));
    return;
  }
  Frames frames = encode(message);
  send_frames(frames, 0);
  if (std::holds_alternative<TaskResults>(message)) session_.sent_results(std::move(frames));
}

bool Agent::send_now(const Outgoing& message, int flags) { return send_frames(encode(message), flags); }

bool Agent::send_frames(const Frames& frames, int flags) {
  for (size_t i = 0; i < frames.size(); ++i) {
    int more = i + 1 < frames.size() ? ZMQ_SNDMORE : 0;
    if (zmq_send(socket_, frames[i].data(), frames[i].size(), flags | more) < 0) {
      if (errno == EAGAIN && i == 0) return false;  // a heartbeat with no usable connection: the next one will do
      throw std::runtime_error(std::string("send failed: ") + zmq_strerror(errno));
    }
  }
  return true;
}

Heartbeat Agent::heartbeat() {
  Heartbeat beat;
  // This process is both the agent and the processor of the Python worker's split: same figures for both.
  beat.cpu_percent = stats_.cpu_percent();
  beat.rss_bytes = stats_.rss_bytes();
  beat.processor_cpu_percent = beat.cpu_percent;
  beat.processor_rss_bytes = beat.rss_bytes;
  beat.queued_tasks = core_.held_tasks();
  beat.latency_us = latency_us_;
  return beat;
}

void Agent::on_frames(const std::vector<Bytes>& frames, double now) {
  double heard_before = last_heard_;
  last_heard_ = now;
  Incoming message;
  try {
    message = decode(frames);
  } catch (const DecodeError& error) {
    log(LogLevel::warning, who() + ": dropped an undecodable message from the scheduler: " + error.what());
    return;
  }
  log(LogLevel::debug, who() + ": received " + member_name(message));
  if (auto welcome = std::get_if<Welcome>(&message)) {
    on_welcome(*welcome, now);
  } else if (auto submission = std::get_if<TaskSubmission>(&message)) {
    core_.on_submission(*submission, now);
  } else if (auto cancel = std::get_if<CancelTasks>(&message)) {
    core_.on_cancel(*cancel, runner_->withdraw(cancel->task_ids), now);
  } else if (auto release = std::get_if<ReleaseTasks>(&message)) {
    core_.on_release(*release, runner_->withdraw(release->task_ids), now);
  } else if (auto started = std::get_if<TaskStarted>(&message)) {
    core_.on_task_started(*started, now);
  } else if (auto deleted = std::get_if<DeleteObjects>(&message)) {
    core_.on_delete(*deleted);
  } else if (auto echo = std::get_if<HeartbeatEcho>(&message)) {
    session_.echoed();
    pace_.echoed(echo->heartbeat_interval_ms);
    if (heartbeat_sent_at_ >= 0) {
      latency_us_ = static_cast<uint32_t>((now - heartbeat_sent_at_) * 1e6);
      heartbeat_sent_at_ = -1;
    }
  } else if (auto disconnect = std::get_if<Disconnect>(&message)) {
    leave_ = Leave{"scheduler asked us to leave: " + disconnect->reason, 0, LogLevel::info};
  } else if (auto refused = std::get_if<Refused>(&message)) {
    on_refused(*refused, now, heard_before);
  } else if (auto error = std::get_if<ProtocolError>(&message)) {
    on_protocol_error(*error);
  } else if (auto directory = std::get_if<StoreDirectory>(&message)) {
    store_directory_ = std::move(*directory);
  } else if (auto unexpected = std::get_if<Unexpected>(&message)) {
    log(LogLevel::warning, who() + ": ignored a " + unexpected->member + " from the scheduler, which a worker never receives");
  }
}

void Agent::on_welcome(const Welcome& welcome, double now) {
  pace_.welcomed(welcome.heartbeat_interval_ms, welcome.peer_timeout_ms);
  core_.set_limits(welcome.max_frame_bytes, welcome.max_control_frame_bytes);
  store_directory_ = welcome.store_directory;
  heartbeat_sent_at_ = -1;
  rotation_.welcomed();
  bool first = !session_.ever_welcomed();
  if (session_.rejoining()) {
    // Results made but not sent yet are not re-announced (their tasks are answered): held, they go before it.
    core_.flush_results(now);
    apply_core();
  }
  SchedulerSession::Welcomed welcomed = session_.on_welcome();
  if (welcomed.rejoined) {
    for (Frames& frames : welcomed.held) {
      send_frames(frames, 0);
      session_.sent_results(std::move(frames));  // acknowledged, like any result, by the next echo
    }
    // Not kept like them: should this scheduler go too, the next one gets a fresh re-announcement, last.
    std::vector<uint64_t> task_ids = core_.held_task_ids();
    send_frames(encode_reannounce(task_ids), 0);
    log(LogLevel::info, who() + ": welcomed again; re-announced " + std::to_string(task_ids.size()) +
                            " tasks held, sent " + std::to_string(welcomed.held.size()) + " messages held before");
  } else if (first) {
    log(LogLevel::info, who() + ": connected to the scheduler at " + connected_to_ + " (" +
                            (welcome.release.empty() ? std::string("an older release") : welcome.release) +
                            ", protocol version " + std::to_string(welcome.protocol_version) + ")");
  }
}

// This worker's own versions too: an older scheduler's reason for another protocol version names only its own.
std::string Agent::refusal_text(const Refused& refused) const {
  return "scheduler refused us (worker of " + std::string(kRelease) + ", protocol version " +
         std::to_string(kProtocolVersion) + "; scheduler at " + connected_to_ + "): " + refused.reason;
}

void Agent::on_refused(const Refused& refused, double now, double heard_before) {
  if (refused.standby) {
    // Not a word from a scheduler that serves: the death timeout runs on. The next address, soon.
    last_heard_ = heard_before;
    rotation_.refused(now);
    return;
  }
  switch (session_.on_refused(refused.unknown_peer, now)) {
    case Refusal::rejoin: {
      size_t kept = session_.held_count();
      log(LogLevel::warning, who() + ": the scheduler at " + connected_to_ +
                                 " does not know us (it restarted?); saying hello again, tasks keep running" +
                                 (kept ? ", " + std::to_string(kept) + " results messages kept for it" : ""));
      Hello hello = hello_;
      hello.rejoining = true;
      send_now(hello);
      break;
    }
    case Refusal::ignore:
      break;
    case Refusal::leave:  // after a welcome: a scheduler that no longer wants us
      leave_ = Leave{refusal_text(refused), 0, LogLevel::warning};
      break;
    case Refusal::leave_failed:  // our hello refused: we cannot work with this scheduler at all
      leave_ = Leave{refusal_text(refused), 1, LogLevel::error};
      break;
  }
}

void Agent::on_protocol_error(const ProtocolError& error) {
  if (session_.still_registered(error.reason)) {  // back from a standby to a scheduler that kept us: leave, join
    log(LogLevel::warning, who() + ": the scheduler at " + connected_to_ +
                               " still has us from before; leaving it and saying hello again");
    send_now(Disconnect{"rejoining"});
    Hello hello = hello_;
    hello.rejoining = true;
    send_now(hello);
    return;
  }
  log(LogLevel::warning, who() + ": scheduler reports a protocol error: " + error.reason);
}

void Agent::move_to(const std::string& address, double now) {
  log(LogLevel::warning, who() + ": trying the scheduler at " + address);
  zmq_disconnect(socket_, connected_to_.c_str());  // what is queued for the old one goes: results are kept (§21)
  connected_to_ = address;
  if (zmq_connect(socket_, address.c_str()) != 0) {
    throw std::runtime_error("cannot connect to " + address + ": " + zmq_strerror(errno));
  }
  bool welcomed_before = session_.ever_welcomed();
  if (welcomed_before && session_.lost(now)) {
    size_t kept = session_.held_count();
    log(LogLevel::warning, who() + ": the scheduler at " + address + " is the next to try; saying hello again, " +
                               "tasks keep running" +
                               (kept ? ", " + std::to_string(kept) + " results messages kept for it" : ""));
  }
  heartbeat_sent_at_ = -1;
  Hello hello = hello_;
  hello.rejoining = welcomed_before;
  send_now(hello);
}

void Agent::apply_core() {
  for (uint64_t task_id : core_.take_stops()) runner_->stop(task_id);
  for (Job& job : core_.take_jobs()) {
    // Each run of a task, for whoever counts them (tests check that a held result is not run again).
    if (log_enabled(LogLevel::debug)) log(LogLevel::debug, who() + ": running task " + std::to_string(job.task_id));
    runner_->start(std::move(job));
  }
  for (const Outgoing& message : core_.take_messages()) send(message);
}

int Agent::run() {
  int wake[2];
  if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  void* context = zmq_ctx_new();
  socket_ = zmq_socket(context, ZMQ_DEALER);
  int zero = 0;
  zmq_setsockopt(socket_, ZMQ_SNDHWM, &zero, sizeof(zero));
  zmq_setsockopt(socket_, ZMQ_RCVHWM, &zero, sizeof(zero));
  zmq_setsockopt(socket_, ZMQ_LINGER, &zero, sizeof(zero));
  zmq_setsockopt(socket_, ZMQ_ROUTING_ID, identity_.data(), identity_.size());
  // After a lost scheduler, reconnect attempts back off to the hellos' longest wait (§21).
  int reconnect_max_ms = static_cast<int>(kLastHelloRetrySeconds * 1000);
  zmq_setsockopt(socket_, ZMQ_RECONNECT_IVL_MAX, &reconnect_max_ms, sizeof(reconnect_max_ms));
  pid_t parent = getppid();
  int status = 0;
  {
    TaskRunner runner(options_.threads, wake[1]);
    runner_ = &runner;
    try {
      if (zmq_connect(socket_, connected_to_.c_str()) != 0) {
        throw std::runtime_error("cannot connect to " + connected_to_ + ": " + zmq_strerror(errno));
      }
      log(LogLevel::info, who() + ": connecting to " + connected_to_ +
                              (rotation_.several() ? " (first of " + options_.address + ")" : std::string()) +
                              " with capacity " +
                              std::to_string(options_.capacity) + " and " + std::to_string(options_.threads) + " thread(s)");
      send_now(hello_);
      last_heard_ = monotonic_seconds();
      while (!leave_) {
        double now = monotonic_seconds();
        // While rejoining no heartbeat goes out: its deadline, passed, would make every poll return at once.
        double heartbeat_at = session_.rejoining() ? INFINITY : pace_.next_due();
        double wait = std::min({kLoopTickSeconds, heartbeat_at - now, core_.next_deadline(now) - now,
                                session_.next_hello() - now});
        zmq_pollitem_t items[] = {{socket_, 0, ZMQ_POLLIN, 0}, {nullptr, wake[0], ZMQ_POLLIN, 0}};
        if (zmq_poll(items, 2, static_cast<long>(std::max(0.0, std::ceil(wait * 1000)))) < 0 && errno != EINTR) {
          throw std::runtime_error(std::string("poll failed: ") + zmq_strerror(errno));
        }
        now = monotonic_seconds();
        for (std::vector<Bytes> frames = receive_frames(socket_); !frames.empty() && !leave_; frames = receive_frames(socket_)) {
          on_frames(frames, now);
          apply_core();
        }
        char drained[256];
        while (read(wake[0], drained, sizeof(drained)) > 0) {
        }
        for (Completion& completion : runner.take_completions()) core_.on_completion(std::move(completion), now);
        core_.on_tick(now);
        apply_core();
        if (leave_) break;
        if (rotation_.several()) {
          if (std::optional<std::string> next = rotation_.on_tick(now, last_heard_)) move_to(*next, now);
        }
        if (session_.rejoining()) {
          if (session_.hello_due(now)) {
            Hello hello = hello_;
            hello.rejoining = true;
            send_now(hello, ZMQ_DONTWAIT);
          }
        } else if (pace_.due(now)) {
          pace_.sent(now);
          // Never blocks: with no usable connection, zmq would wait for one and the death timeout could not fire.
          if (send_now(heartbeat(), ZMQ_DONTWAIT)) session_.heartbeat_sent();
          heartbeat_sent_at_ = now;
        }
        if (now - last_heard_ > options_.death_timeout_seconds) {
          char seconds[32];
          std::snprintf(seconds, sizeof(seconds), "%g", options_.death_timeout_seconds);
          leave_ = session_.ever_welcomed() ? Leave{std::string("no word from the scheduler for ") + seconds +
                                         "s, exiting (--death-timeout-seconds; the scheduler was at " + options_.address + ")",
                                     0, LogLevel::warning}
                             : Leave{"no scheduler answered at " + options_.address + " within " + seconds +
                                         "s (--death-timeout-seconds), exiting: is a scheduler running there, and reachable?",
                                     1, LogLevel::error};
        } else if (stop_requested) {
          leave_ = Leave{"stopped by a signal", 0, LogLevel::info};
        } else if (options_.exit_with_parent && getppid() != parent) {
          leave_ = Leave{"parent process is gone, exiting", 0, LogLevel::info};
        }
      }
      log(leave_->level, who() + ": " + leave_->reason);
      status = leave_->status;
    } catch (const std::exception& error) {
      log(LogLevel::error, who() + ": " + error.what());
      status = 1;
    }
    try {
      send_now(Disconnect{"worker exiting"}, ZMQ_DONTWAIT);
    } catch (const std::exception&) {
    }
    runner_ = nullptr;
  }  // the runner's threads stop here: running functions see their stop flag
  int linger = kCloseLingerMs;
  zmq_setsockopt(socket_, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_close(socket_);
  zmq_ctx_term(context);
  close(wake[0]);
  close(wake[1]);
  return status;
}

}  // namespace

int run_agent(const Options& options) {
  if (options.exit_with_parent) prctl(PR_SET_PDEATHSIG, SIGTERM);
  return Agent(options).run();
}

}  // namespace scaler_native
