@0xca0afa1b0d8d4a76;
# The data protocol, spoken on a store's data socket (a ZeroMQ ROUTER bound on ipc:// for the processes of
# its host and on tcp:// for everyone else). The scheduler never sees these messages (except relayed).
#
# Framing is the control protocol's (scaler.capnp): one frame holding one `DataMessage`, then payload
# frames. Here a payload is one stored object, in the layout of scaler/protocol/stored_payload.py (header,
# main part, 64-byte aligned out-of-band buffers), split over `payloadFrames` consecutive frames whose
# concatenation is the payload, `size` bytes in all: a sender passes an object's buffers as frames of
# their own, uncopied.
#
# Every request carries a request id, chosen by the requester; the reply names it. Local requests
# (allocate, seal, lend, a local get, release, delete) come over the ipc socket only, and carry the caller's pid:
# the store tracks what each local process has borrowed or mapped, and takes it back when that process
# exits. Over tcp, a store answers put and (remote) get.

struct DataMessage {
  union {
    allocate @0 :Allocate;
    segment @1 :Segment;
    seal @2 :Seal;
    stored @3 :Stored;
    put @4 :Put;
    get @5 :Get;
    located @6 :Located;
    object @7 :ObjectData;
    missing @8 :Missing;
    release @9 :Release;
    failed @10 :Failed;
    delete @11 :Delete;
    status @12 :StatusRequest;
    storeStatus @13 :StoreStatus;
    lend @14 :Lend;
    borrowed @15 :Borrowed;
  }
}

# Local writer -> store: a segment to write an object of `size` bytes into. Answer: segment, or failed.
struct Allocate {
  requestId @0 :UInt64;
  size @1 :UInt64;
  pid @2 :UInt32;
}

# Store -> local writer: open `path` (a /proc/<store pid>/fd/<n> path) read-write, map `size` bytes shared,
# write the payload, unmap, then seal.
struct Segment {
  requestId @0 :UInt64;
  path @1 :Text;
  size @2 :UInt64;
}

# Local writer -> store: the segment at `path` holds object `objectId`, `size` bytes. Answer: stored.
struct Seal {
  requestId @0 :UInt64;
  objectId @1 :Data;
  path @2 :Text;
  size @3 :UInt64;
  name @4 :Text;           # free text for logs and the monitor
  pid @5 :UInt32;
}

# A stretch of a local process's memory.
struct MemoryRange {
  address @0 :UInt64;
  length @1 :UInt64;
}

# Where a borrowed object's bytes are: in the memory of the local process `pid`, which keeps them unchanged
# until it lets the object go. The object's stored payload is `header` (stored_payload.py's header and
# table) with its main part at `ranges[0]` and its buffers at `ranges[1:]`, each at the offset the table
# gives. `cookie` (random bytes) is at `cookieAddress` for exactly as long as the ranges are valid: a reader
# reads the ranges and then the cookie in one process_vm_readv(2) call, and if the cookie differs (the
# object was let go, or `pid` is another process by now) the bytes it read mean nothing.
struct MemoryLoan {
  pid @0 :UInt32;
  header @1 :Data;
  ranges @2 :List(MemoryRange);
  cookieAddress @3 :UInt64;
  cookie @4 :Data;
}

# Local writer -> store: object `objectId` (`size` bytes of stored payload) stays in the writer's memory
# (`loan`); the store reads the cookie first. Answer: stored, or failed (the store cannot read that memory:
# another user, ptrace restrictions, another pid namespace; or it was started with --no-borrowing). The
# store takes a borrowed object as lost when the writer exits.
struct Lend {
  requestId @0 :UInt64;
  objectId @1 :Data;
  size @2 :UInt64;
  name @3 :Text;
  loan @4 :MemoryLoan;
}

# Store -> local reader, to a local get of a borrowed object: read it from the lender's memory (nothing to
# release). A reader that cannot (process_vm_readv refused) asks again with a remote get: the store reads it.
struct Borrowed {
  requestId @0 :UInt64;
  objectId @1 :Data;
  size @2 :UInt64;
  loan @3 :MemoryLoan;
}

# Store -> writer: the object is held (also when it already was).
struct Stored {
  requestId @0 :UInt64;
  objectId @1 :Data;
}

# Remote writer -> store: the object comes as the payload frames (best at most COPIED_FRAME_BYTES each,
# see Get.maxFrameBytes: the store copies them into a segment). Answer: stored, or failed.
struct Put {
  requestId @0 :UInt64;
  objectId @1 :Data;
  size @2 :UInt64;
  name @3 :Text;
  payloadFrames @4 :UInt32;
}

# Reader -> store. Local: answered by `located` (the reader maps the segment and must `release` it once
# unmapped). Remote (also a store fetching from another): answered by `object`. If this store lacks the
# object and `holder` names another store's data address, this store fetches it from there first. An
# object not here (nor arriving) within `waitMs` is `missing`.
struct Get {
  requestId @0 :UInt64;
  objectId @1 :Data;
  local @2 :Bool;
  waitMs @3 :UInt32;
  pid @4 :UInt32;          # local gets: the reader's pid
  holder @5 :Text;         # the data address (tcp://) of a store that holds the object, or empty
  # Remote gets: 0 for the payload in as few frames as it has pieces (a reader that keeps the frames and
  # views them, as a client does); else no frame larger than this (a reader that copies them out, as a
  # store does: small frames reuse the receiver's memory instead of faulting in a fresh payload-sized one).
  maxFrameBytes @6 :UInt64;
}

# Store -> local reader: map `size` bytes of `path` privately (copy-on-write); release when unmapped.
struct Located {
  requestId @0 :UInt64;
  objectId @1 :Data;
  path @2 :Text;
  size @3 :UInt64;
}

# Store -> remote reader: the object, as the payload frames.
struct ObjectData {
  requestId @0 :UInt64;
  objectId @1 :Data;
  size @2 :UInt64;
  payloadFrames @3 :UInt32;
}

struct Missing {
  requestId @0 :UInt64;
  objectId @1 :Data;
  reason @2 :Text;
}

# Local reader -> store, no answer: these mappings are gone (an id twice: two mappings).
struct Release {
  objectIds @0 :List(Data);
  pid @1 :UInt32;
}

# Store -> requester: the request was refused (bad size, a segment not lent to this pid, ...).
struct Failed {
  requestId @0 :UInt64;
  reason @1 :Text;
}

# Local process -> a standalone store (one without a scheduler link), no answer: nobody needs these
# objects any more. A store linked to a scheduler takes deletes only from the scheduler.
struct Delete {
  objectIds @0 :List(Data);
}

# Local process -> store: what it holds. Answer: storeStatus (the numbers its heartbeats report).
struct StatusRequest {
  requestId @0 :UInt64;
}

struct StoreStatus {
  requestId @0 :UInt64;
  capacityBytes @1 :UInt64;
  residentBytes @2 :UInt64;   # every segment: objects', lent to writers, pooled for reuse
  heldBytes @3 :UInt64;       # payload bytes of the objects held, in memory or on disk
  spilledBytes @4 :UInt64;
  pinnedBytes @5 :UInt64;     # segments mapped by readers (or read by a send)
  pooledBytes @6 :UInt64;
  objectCount @7 :UInt64;
}
