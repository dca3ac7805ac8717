@0x8366f35c5303af4a;
# The Scaler monitor feed. PROTOCOL.md ("Monitor feed") explains how to subscribe.
#
# The scheduler binds a ZeroMQ PUB socket on its monitor address and, about once a second, publishes
# one single-frame message: a `MonitorSnapshot` in the standard (unpacked) Cap'n Proto encoding, with
# no topic frame. Subscribe to the empty prefix. Every snapshot is complete on its own, so a subscriber
# may drop all but the newest; counters only grow for the life of one scheduler process (a restart
# starts them at zero again, along with `sequence`).

struct MonitorSnapshot {
  feedVersion @0 :UInt32;          # 1 for the layout below; readers ignore fields they do not know
  sequence @1 :UInt64;             # 0 for the first snapshot of a scheduler process, then +1 each time
  publishedAtUs @2 :UInt64;        # the scheduler's wall clock, microseconds since the Unix epoch
  scheduler @3 :SchedulerUsage;
  tasks @4 :TaskCounts;
  sent @5 :List(MessageCount);     # messages the scheduler sent, by type, since it started
  received @6 :List(MessageCount); # messages the scheduler received, by type, since it started
  clients @7 :List(ClientStatus);
  objects @8 :ObjectUsage;
  workers @9 :List(WorkerStatus);
  # Tasks ready to run that no connected worker may run (none has all their required tags), by tag set.
  # They wait for such a worker to join, or fail after their own wait limit (TaskGroup.waitForTagsMs).
  waitingForTags @10 :List(TagsWait);
  stores @11 :List(StoreStatus);   # the object stores, one per host normally (PROTOCOL.md §17)
  bytesRelayed @12 :UInt64;        # payload bytes the scheduler forwarded for peers that cannot reach a store
  # A standby scheduler that does not serve (scaler_scheduler --standby-of): it holds no peers. A view given
  # several monitor addresses shows the feed of the one that serves. Added in feed version 1 without a bump.
  standingBy @13 :Bool;
}

struct TagsWait {
  tags @0 :List(Text);             # the required tags, sorted
  tasks @1 :UInt64;                # how many tasks requiring exactly these wait
}

struct SchedulerUsage {
  cpuPercent @0 :Float32;          # of one core, since the previous snapshot
  rssBytes @1 :UInt64;
}

# Tasks the scheduler holds now (the first three) and tasks finished since it started (the rest).
struct TaskCounts {
  unassigned @0 :UInt64;           # ready, waiting for a free worker slot
  running @1 :UInt64;              # assigned to a worker (queued there or running)
  waitingOnDependencies @2 :UInt64; # graph tasks parked until the tasks they need succeed
  success @3 :UInt64;
  failed @4 :UInt64;               # raised, worker died too often, serialization, rejected
  canceled @5 :UInt64;
  notFound @6 :UInt64;             # cancel or lookup of a task the scheduler did not know
  dropped @7 :UInt64;              # ended without an outcome: their client left, timed out or cleared them
}

struct MessageCount {
  name @0 :Text;                   # the Python view's class name, e.g. "TaskSubmission", "Heartbeat"
  count @1 :UInt64;
}

struct ClientStatus {
  name @0 :Text;
  tasks @1 :UInt64;                # unfinished tasks of this client: queued + running + parked on dependencies
  objects @2 :UInt64;              # objects it owns
  objectBytes @3 :UInt64;
  # Added in feed version 1 without a bump: a feed from before reads 0, 0, 0.0 and 1.0.
  queued @4 :UInt64;               # ready in the scheduler, not yet sent to a worker
  running @5 :UInt64;              # sent to a worker and not finished (running there, or next in its queue)
  oldestReadySeconds @6 :Float64;  # how long the longest-waiting of its queued tasks has waited; 0 if none
  share @7 :Float64 = 1.0;         # its weight in the fair share of worker slots (Client(share=...))
}

struct ObjectUsage {
  count @0 :UInt64;
  bytes @1 :UInt64;
}

struct StoreStatus {
  name @0 :Text;                   # as the store said in its hello
  hostname @1 :Text;
  dataAddress @2 :Text;            # tcp://, the store's identity
  capacityBytes @3 :UInt64;        # memory it fills before it spills to disk
  bytesHeld @4 :UInt64;            # from its last heartbeat: payload bytes of its objects, in memory or on disk
  bytesSpilled @5 :UInt64;         # of those, on disk
  bytesPinned @6 :UInt64;          # of those, mapped by readers now
  objects @7 :UInt64;
  workers @8 :UInt32;              # registered workers that named this store in their hello
  secondsSinceHeard @9 :Float32;
}

struct WorkerStatus {
  name @0 :Text;                   # as the worker said in its hello
  capacity @1 :UInt32;             # task slots
  free @2 :UInt32;                 # slots not holding a task
  sent @3 :UInt64;                 # tasks the scheduler sent it since it joined
  assigned @4 :UInt32;             # tasks it holds now, as the scheduler counts them
  queued @5 :UInt32;               # tasks waiting in its queue, from its last heartbeat
  agentCpuPercent @6 :Float32;     # from its last heartbeat: the agent process
  agentRssBytes @7 :UInt64;
  processorCpuPercent @8 :Float32; # from its last heartbeat: the processor that runs tasks
  processorRssBytes @9 :UInt64;
  latencyUs @10 :UInt32;           # its last measured heartbeat round trip
  secondsSinceHeard @11 :Float32;  # since the scheduler last heard anything from it
  # The I/T/L flags of scaler_top:
  processorInitialized @12 :Bool;  # I: its last heartbeat reported a live processor (processorRssBytes > 0)
  hasTask @13 :Bool;               # T: it holds at least one task (assigned > 0)
  taskLocked @14 :Bool;            # L: reserved for suspended nested tasks; always false in feed version 1
  # A client asked the scheduler to drain it (drainWorkers): it gets no new task, and what it had not
  # started went elsewhere; it still finishes what it runs. Safe to stop once `assigned` is 0.
  draining @15 :Bool;
  tags @16 :List(Text);            # the capabilities from its hello, sorted
}
