@0xd61f51ffb71d4321;
# The Scaler wire protocol. PROTOCOL.md explains the order in which each role sends these messages.
#
# A ZeroMQ message on the wire is one frame holding one `Message` in the standard (unpacked) Cap'n Proto
# encoding, followed by zero or more payload frames. Opaque payloads (functions, arguments, results,
# objects) are made by the client's serializer; every control field is a plain Cap'n Proto field, never
# pickled. A small payload travels inline as `Data`; a large one (64 KiB or more, by the sender's
# choice) travels as its own frame, so that nobody copies or re-encodes it: its `Data` is left empty and
# a field names the frame (1 = the first frame after the message). Every payload frame is named once.
#
# Hot paths are columnar: a batch of N tasks is a handful of lists, not N structs, because per-struct
# access costs dominate in dynamic-language bindings.

struct Message {
  union {
    hello @0 :Hello;
    welcome @1 :Welcome;
    refused @2 :Refused;
    heartbeat @3 :Heartbeat;
    heartbeatEcho @4 :HeartbeatEcho;
    submitTasks @5 :TaskSubmission;
    taskResults @6 :TaskResults;
    cancelTasks @7 :CancelTasks;
    deleteObjects @8 :DeleteObjects;
    clearRequest @9 :ClearRequest;
    clearResponse @10 :ClearResponse;
    disconnect @11 :Disconnect;
    shutdownRequest @12 :ShutdownRequest;
    shutdownResponse @13 :ShutdownResponse;
    protocolError @14 :ProtocolError;
    processorState @15 :ProcessorState;
    releaseTasks @16 :ReleaseTasks;
    cancelRefused @17 :CancelRefused;
    taskStarted @18 :TaskStarted;
    drainWorkers @19 :DrainWorkers;
    drainWorkersResponse @20 :DrainWorkersResponse;
    storeDirectory @21 :StoreDirectory;
    objectsLost @22 :ObjectsLost;
    resendObjects @23 :ResendObjects;
    relay @24 :Relay;
    publishObjects @25 :PublishObjects;
    objectsHeld @26 :ObjectsHeld;
    taskOutput @27 :TaskOutput;
    reannounce @28 :Reannounce;
  }
}

enum Role {
  client @0;
  worker @1;
  store @2;                # a host's object store (data plane, PROTOCOL.md §17)
}

struct Hello {
  protocolVersion @0 :UInt32;
  role @1 :Role;
  name @2 :Text;           # free text shown in logs and the monitor
  hostname @3 :Text;
  pid @4 :UInt32;
  capacity @5 :UInt32;     # workers only: how many tasks it accepts at once
  nestingDepth @6 :UInt32; # clients only: 0 for an application, d + 1 inside a task of depth d
  # Workers only: the capabilities it offers, e.g. "python" (runs Python functions), "native" (runs the
  # functions it was built with), or any tag its operator set ("gpu"). Tasks requiring tags go only to
  # workers that have them all (TaskGroup.requiredTags).
  tags @7 :List(Text);
  # The data plane (PROTOCOL.md §17).
  store @8 :Text;          # workers only: the data address of the store it uses; empty: none
  hostKey @9 :Text;        # "<boot id>/<network namespace inode>": equal keys share memory; empty: unknown
  dataAddress @10 :Text;   # stores only: tcp:// address where every peer reaches it; its identity
  ipcAddress @11 :Text;    # stores only: ipc:// address for the processes of its host
  capacityBytes @12 :UInt64;  # stores only: bytes it holds in memory before it spills to disk
  # Clients only: this client's weight in the fair share of the workers between clients (PROTOCOL.md §4):
  # while several clients have ready tasks, one of share 2 gets twice the slots of one of share 1. Finite
  # and > 0, else the scheduler refuses the hello. A client that does not set it has 1.
  share @13 :Float64 = 1.0;
  # Workers only: how many tasks it runs at once (its processors, native threads, Symphony's base
  # concurrency). The scheduler keeps that many running plus a short measured queue on it (PROTOCOL.md §4).
  concurrency @14 :UInt32 = 1;
  # Workers only: welcomed before by a scheduler at this address, which went away (PROTOCOL.md §21). The
  # scheduler gives it nothing until its `reannounce` says which tasks it holds already.
  rejoining @15 :Bool;
  # Clients only: 0 for a new client. A client that lost its scheduler and says hello again to the one now
  # at the address (a restart) names the id prefix it was given, to keep its task ids: the scheduler
  # accepts it unless that prefix is in use, or was ever given out, in this scheduler process (PROTOCOL.md §4).
  idPrefix @16 :UInt32;
  # The sender's release, for people ("scaler 2.1.0"; empty from a peer before it was sent), and the revision
  # of `protocolVersion` it implements (0 from such a peer): PROTOCOL.md, "Versions and rolling upgrades".
  release @17 :Text;
  protocolRevision @18 :UInt32;
}

struct Welcome {
  protocolVersion @0 :UInt32;
  idPrefix @1 :UInt32;     # clients only: the high 32 bits of every task id this client makes
  heartbeatIntervalMs @2 :UInt32;   # how often the scheduler expects to hear from the peer
  peerTimeoutMs @3 :UInt32;         # silence longer than this and the scheduler drops the peer
  # The largest frame the scheduler reads (its MAXMSGSIZE) and the largest control frame it decodes;
  # 0 means no limit. A peer that sends more loses the message (§10 of PROTOCOL.md): check before sending.
  maxFrameBytes @4 :UInt64;
  maxControlFrameBytes @5 :UInt64;
  storeDirectory @6 :StoreDirectory;  # clients and workers: the stores as of now (empty for stores)
  # Payloads (objects, arguments, results) of this many bytes or more go through a store when one is at
  # hand (§13); smaller ones stay on the control path. 0: the sender's default (LARGE_PAYLOAD_BYTES).
  inlineLimitBytes @7 :UInt64;
  # The scheduler's release and revision of `protocolVersion`, as in Hello.
  release @8 :Text;
  protocolRevision @9 :UInt32;
}

# Scheduler to clients and workers: every registered store, and which one is the receiver's home (where it
# puts its objects). Sent in `welcome` and again, whole, whenever a store joins or leaves.
struct StoreDirectory {
  stores @0 :List(StoreEntry);
  homeStore @1 :Text;      # the data address of the receiver's home store; empty: no store at all
}

struct StoreEntry {
  dataAddress @0 :Text;    # tcp://host:port, the store's identity
  ipcAddress @1 :Text;     # ipc://path, usable only by processes whose host key equals `hostKey`
  hostKey @2 :Text;
}

struct Refused {
  reason @0 :Text;
  # True when the scheduler does not know the sender (it never said hello here, was timed out, or the
  # scheduler restarted): a peer that was welcomed before says hello again (PROTOCOL.md §21). False for a
  # refusal of the hello itself (another protocol version, a bad field): the peer cannot work with it.
  unknownPeer @1 :Bool;
  # True from a standby scheduler (PROTOCOL.md §standby): it does not serve while the scheduler ranked before it
  # does. The peer tries the next address of its list; one welcomed before rejoins there as after a restart.
  standby @2 :Bool;
}

struct Heartbeat {
  cpuPercent @0 :Float32;
  rssBytes @1 :UInt64;
  queuedTasks @2 :UInt32;      # workers only
  processorCpuPercent @3 :Float32;
  processorRssBytes @4 :UInt64;
  latencyUs @5 :UInt32;        # the sender's last measured heartbeat round trip
  # Stores only: payload bytes of the objects held (in memory or on disk), those on disk, those mapped by
  # readers, and how many objects.
  bytesHeld @6 :UInt64;
  bytesSpilled @7 :UInt64;
  bytesPinned @8 :UInt64;
  objectCount @9 :UInt64;
}

struct HeartbeatEcho {
  # Workers only (0 to clients and stores, and from a scheduler before this field): 0 keeps the interval the
  # welcome set; else heartbeat this often from now on, though it is longer than the peer's own interval. A
  # scheduler with many workers spaces their heartbeats out so (PROTOCOL.md, "Heartbeats spaced out at scale").
  heartbeatIntervalMs @0 :UInt32;
}

struct ObjectPayload {
  objectId @0 :Data;       # 16 bytes; for functions, the blake2b-128 digest of `payload`
  name @1 :Text;
  payload @2 :Data;
  payloadFrame @3 :UInt32; # 0: `payload` holds it; k > 0: the payload is frame k
  # A stored object (§13): `payload` is empty and no frame is named; the bytes, `size` of them in the
  # stored-payload layout, are in the store whose data address is `holder`. Empty holder: not stored.
  size @4 :UInt64;
  holder @5 :Text;
}

# `len(taskIds)` tasks that share a function and an argument layout. Arguments are flattened row by
# row: task i owns args[i * argsPerTask .. (i + 1) * argsPerTask). The last `len(keywords)` arguments
# of every task are passed by keyword, in the order of `keywords`.
struct TaskGroup {
  functionId @0 :Data;
  argsPerTask @1 :UInt16;
  keywords @2 :List(Text);
  taskIds @3 :List(UInt64);
  args @4 :List(Data);
  serializerId @5 :Data;   # object holding the serializer for args and results; empty = the default
  # Graph edges: args[refArgIndices[k]] is left empty and receives the result payload of task
  # refTaskIds[k] once that task succeeds. A referenced task must be known to the scheduler already:
  # sent earlier (an earlier group, or an earlier row of this group) and not yet finished.
  refArgIndices @6 :List(UInt32);
  refTaskIds @7 :List(UInt64);
  # Large arguments: the payload of args[argFrameIndices[k]] is frame argFrames[k].
  argFrameIndices @8 :List(UInt32);
  argFrames @9 :List(UInt32);
  # Object arguments: args[i] holds a 16-byte object id; the worker passes the object itself.
  objectArgIndices @10 :List(UInt32);
  # Set by the submitting client to its own nesting depth (0 for an application, d + 1 inside a task of
  # depth d); the scheduler queues such tasks first and passes the value on unchanged. Workers run
  # deeper tasks first, because they are what the blocked tasks of lower depths wait for.
  nestingDepth @11 :UInt32;
  profiling @12 :Bool;     # measure each task and send a TaskProfile with its result
  # Set by the scheduler for tasks that were held by a worker that died: before running one, the worker
  # says taskStarted and waits for the scheduler's taskStarted back (see TaskStarted).
  reportStart @13 :Bool;
  # Run these tasks only on a worker whose hello tags include every one of these; empty: any worker.
  # While no connected worker has them, the tasks wait in the scheduler (shown in the monitor feed).
  requiredTags @14 :List(Text);
  # > 0: if after this many milliseconds from submission a task still waits and no connected worker has
  # its requiredTags, it fails (kind rejected, typeName "NoCapableWorkerError"). 0: wait for such a worker.
  waitForTagsMs @15 :UInt32;
  # Among the ready tasks of one client, those of higher priority are sent to workers first (PROTOCOL.md
  # §4); equal priorities keep their submission order. It orders nothing between clients (that is the
  # fair share). Tasks of different priorities travel in different groups; the scheduler passes it on
  # to workers unchanged. 0 when not set.
  priority @16 :Int32;
  # Send what each task prints (standard output, standard error, log records) to its client as it runs, in
  # taskOutput messages (PROTOCOL.md §20). A worker may ignore it (the native worker does): nothing is sent.
  streamOutput @17 :Bool;
  # Keep each result on the cluster, owned by the submitting client, until it sends deleteObjects for it
  # (PROTOCOL.md §7, "Kept results"): the scheduler records it as an object (a stored result as it is; a
  # small one under the id keptResultId(taskId)), so that later groups of the client may name the task in
  # refTaskIds after it finished. A failure is kept too, for the same later dependents. Workers ignore it.
  keepResults @18 :Bool;
  # With keepResults: the results stay in the workers' stores whatever their size, so that the client gets only
  # where each is and reads it if it asks (persisted data), instead of small ones inline (PROTOCOL.md, "Kept
  # results stay in stores"). The scheduler copies it into the groups it sends workers; a worker may ignore it.
  keepInStores @19 :Bool;
  # Set by the scheduler for the tasks of a client far below its fair share of the tasks on workers, sent to a
  # worker that holds others: the worker runs them before the top-level tasks it holds (after nested ones), in
  # the order they came, so that a newcomer's task does not wait behind a deep queue of others' (PROTOCOL.md,
  # "Ahead of the queue"). A worker may ignore it (the Symphony worker does).
  ahead @20 :Bool;
}

struct TaskSubmission {
  objects @0 :List(ObjectPayload);   # delivered before any group of this message is looked at
  groups @1 :List(TaskGroup);
  quietTaskIds @2 :List(UInt64);     # intermediate graph nodes: results feed dependents, never the client
}

enum FailureKind {
  raised @0;               # the function raised; see typeName, message, traceback, exception
  workerDied @1;           # the worker running it died too often, or its processor crashed
  canceled @2;
  notFound @3;             # the scheduler or worker has no such task (already finished or unknown)
  serialization @4;        # the result or the arguments could not be (de)serialized
  rejected @5;             # the scheduler refused the task (bad layout, unknown function, too large)
  returned @6;             # worker to scheduler only: given back untried, schedule it again
}

struct TaskFailure {
  taskId @0 :UInt64;
  kind @1 :FailureKind;
  typeName @2 :Text;       # e.g. "builtins.ValueError"
  message @3 :Text;
  traceback @4 :Text;      # remote traceback, formatted
  exception @5 :Data;      # optional: the exception object, made by the Python serializer
}

# Results travel columnar too: `payloads[i]` is the serialized return value of `succeededIds[i]`.
struct TaskResults {
  succeededIds @0 :List(UInt64);
  payloads @1 :List(Data);
  failures @2 :List(TaskFailure);
  # Large results: the payload of succeededIds[payloadFrameIndices[k]] is frame payloadFrames[k].
  payloadFrameIndices @3 :List(UInt32);
  payloadFrames @4 :List(UInt32);
  profiles @5 :List(TaskProfile);    # for tasks submitted with profiling, finished in this message
  # Warnings the tasks raised: task warningTaskIds[k] raised warnings[warningIndices[k]]. A warning that
  # many tasks raise (a deprecation in a library every task calls) is one entry. Sent with the task's
  # outcome; to a client also for its quiet graph tasks, which have no outcome of their own.
  warnings @6 :List(TaskWarning);
  warningTaskIds @7 :List(UInt64);
  warningIndices @8 :List(UInt32);
  # Results kept in a store (§13): task storedTaskIds[k] succeeded and its result is object
  # storedObjectIds[k], storedSizes[k] bytes in the stored-payload layout, held by the store whose data
  # address is storedHolders[k]. Such a task is in neither succeededIds nor failures.
  storedTaskIds @9 :List(UInt64);
  storedObjectIds @10 :List(Data);
  storedSizes @11 :List(UInt64);
  storedHolders @12 :List(Text);
  # How long the tasks this message reports as run took, as the worker measured them (wall clock, from taking
  # a task to having its outcome, waits on nested tasks left out): ranTasks of them, runSeconds in all. The
  # scheduler sizes the worker's queue by it (PROTOCOL.md §7, "Run time"). 0 ranTasks: not measured here
  # (a peer that does not measure leaves both unset, and is given its whole capacity).
  runSeconds @13 :Float64;
  ranTasks @14 :UInt32;
}

# A warning raised inside a task (Python: warnings.warn), for the client to issue again to its caller.
struct TaskWarning {
  category @0 :Text;             # "module.QualName" of the warning's class, e.g. "builtins.UserWarning"
  categoryBases @1 :List(Text);  # the category's base warning classes, nearest first, same form
  message @2 :Text;
  filename @3 :Text;             # where the task raised it, as the warning records it
  lineno @4 :UInt32;
  module @5 :Text;               # the module it was raised in; empty: unknown
}

struct TaskProfile {
  taskId @0 :UInt64;
  durationUs @1 :UInt64;       # wall time of the function call
  cpuTimeUs @2 :UInt64;        # CPU time of the processor during the call
  peakMemoryBytes @3 :UInt64;  # highest RSS growth over the start of the call, sampled while it ran
}

struct CancelTasks {
  taskIds @0 :List(UInt64);
  force @1 :Bool;          # also stop a task that is running (its processor is replaced)
}

# Worker to scheduler, scheduler to client: a cancel (without force) reached these tasks after they had
# started; they will finish and send their results as usual.
struct CancelRefused {
  taskIds @0 :List(UInt64);
}

# Worker to scheduler: these tasks, sent with reportStart, are about to start on this worker. Scheduler to
# worker, the answer: noted, run them. Only the tasks of the worker that asked are answered. If that worker
# then dies, the scheduler blames these tasks (the ones that had not finished) for its death.
struct TaskStarted {
  taskIds @0 :List(UInt64);
}

# Scheduler to worker, for load balancing: give back those of these tasks that have not started, as
# failures of kind `returned`; the scheduler hands them to less loaded workers.
struct ReleaseTasks {
  taskIds @0 :List(UInt64);
}

# Client to scheduler: send these workers nothing more, and take back the tasks they hold and have not
# started (releaseTasks), to place them elsewhere; what they run finishes there. Workers are named as in
# their hello (the monitor feed's names); a name several workers share drains them all. Draining stays
# until the worker leaves; asking again changes nothing.
struct DrainWorkers {
  workerNames @0 :List(Text);
}

# The answer: the requested names the scheduler drains now (newly or already), and the names of no
# connected worker.
struct DrainWorkersResponse {
  draining @0 :List(Text);
  unknown @1 :List(Text);
}

# Client to scheduler: it no longer needs these objects. Scheduler to worker or store: drop them.
struct DeleteObjects {
  objectIds @0 :List(Data);
}

# Scheduler to worker (PROTOCOL.md §7): these results of your tasks, reported as stored in your store,
# will be read by another process; write into the store those you have not written yet. A worker may keep
# a large result unwritten while only it reads it; those of a worker that leaves are made again.
struct PublishObjects {
  objectIds @0 :List(Data);
}

# Worker or client to scheduler (PROTOCOL.md §18): these stored objects could not be read from the
# holders it was told of (the holder answered `missing` or did not answer). A client also sends it for the
# objects of a resendObjects it cannot send again. The scheduler drops those holders for those objects;
# an object left with none is lost, and is recomputed, asked for again, or its tasks fail.
# Store to scheduler: this store no longer has these objects, though it was not told to delete them (a
# spill file it cannot read, a borrowed object whose lender exited); the scheduler drops this store, and
# only it, as their holder.
struct ObjectsLost {
  objectIds @0 :List(Data);
}

# Store to scheduler (PROTOCOL.md §17): this store holds these objects (`sizes[k]` payload bytes for
# `objectIds[k]`): everything it holds, right after its welcome, and later each copy it fetched from
# another store. The scheduler adds the store to their holders.
struct ObjectsHeld {
  objectIds @0 :List(Data);
  sizes @1 :List(UInt64);
}

# Worker to scheduler (PROTOCOL.md §21), right after the welcome of a worker that was welcomed before by a
# scheduler at this address (which then went away): the tasks it holds, running or queued, given to it by
# that scheduler and not answered yet. Their results follow as ordinary taskResults, and so do, after this
# message, the results it made while no scheduler knew it. An empty list still says "I rejoin".
struct Reannounce {
  taskIds @0 :List(UInt64);
}

# Scheduler to client (§18): these objects of yours were lost with their store; put them again and name
# them in a submitTasks (objects only), or answer objectsLost for those you no longer have.
struct ResendObjects {
  objectIds @0 :List(Data);
}

# The relay fallback (PROTOCOL.md §19): a data-protocol message (data.capnp) for a store that its sender cannot
# reach directly, carried through the scheduler over the store's control link, and the store's answer back.
# The data message's frames (its control frame, then its payload frames) follow this message's frame.
# Client or store -> scheduler: a request for the store whose data address is `store`.
# Scheduler -> store: the same request; `peer` names the requester (opaque: the store sends it back).
# Store -> scheduler: the answer to the request from `peer`.
# Scheduler -> requester: the answer from `store`; or, with `error` set and no frames, why the request could
# not be delivered (no such store is registered).
struct Relay {
  store @0 :Text;          # a store's data address (tcp://)
  peer @1 :Data;           # the requester's routing identity, between the scheduler and the store
  requestId @2 :UInt64;    # the data message's request id, for a requester to match an error to its request
  error @3 :Text;
  dataFrames @4 :UInt32;   # how many frames the data message has (0 only with an error)
}

# What tasks submitted with streamOutput printed (PROTOCOL.md §20). Worker -> scheduler: chunks of the output of
# tasks it runs; scheduler -> client: the chunks of that client's tasks, with `worker` set to the worker's hello
# name. Chunk k is `texts[k]`, whole lines (each ending in a newline), printed by task `taskIds[k]` on stream
# `streams[k]`: 0 standard output, 1 standard error, 2 log records (one formatted line each). Per task, chunks
# arrive in the order they were printed and before the task's result. The scheduler refuses (protocolError) a
# message whose columns differ in length, name another stream, or carry more than 256 KiB of text.
struct TaskOutput {
  taskIds @0 :List(UInt64);
  streams @1 :List(UInt8);
  texts @2 :List(Text);
  worker @3 :Text;         # scheduler -> client only; what a worker sends here is ignored
}

struct ClearRequest {}

struct ClearResponse {
  canceledTasks @0 :UInt32;
}

struct Disconnect {
  reason @0 :Text;
}

struct ShutdownRequest {}

struct ShutdownResponse {
  accepted @0 :Bool;
  reason @1 :Text;
}

struct ProtocolError {
  reason @0 :Text;
}

# Inside a worker only (agent <-> its processors), never sent to the scheduler: a processor whose task
# waits on nested tasks says blocked=true and the agent answers granted (another processor now serves
# this worker) or not (the worker is at its processor limit: the wait fails instead of deadlocking).
struct ProcessorState {
  blocked @0 :Bool;
  granted @1 :Bool;
  reason @2 :Text;
}
