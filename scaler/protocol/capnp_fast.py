"""Reading the two messages of every task, in their plain form, straight from their Cap'n Proto bytes, and
writing plain results so.

A task's submission and its results are each decoded at three hops; through pycapnp, reading a group's
twenty fields one by one costs most of a small message's decode. Here the frame's words are read with
`struct` instead, for the shape nearly every such message has: one segment; a submission carrying no objects
and no large arguments, no keyword names and at most one required tag per group; results carrying successes
only (no failures, profiles, warnings, stored results nor large payloads). Anything else, and anything this
reader does not find exactly as it expects (a pointer out of bounds, a far pointer, a list of another element
size, text without its NUL or not UTF-8, pointers covering more words than the frame has), gives None: the
codec then decodes the frame through pycapnp as ever, which reads it or says why it is malformed. So a message
read here is one pycapnp reads alike (tests/protocol/test_capnp_fast.py holds the two to that), and the wire
format is Cap'n Proto's, unchanged: this is another reader of it, not another format.

The writer (`encode_plain`) writes plain results word for word as pycapnp's builder does (the tests compare
the bytes): the scheduler's answer of every round trip, and the worker's, without a builder's setattr calls.
"""

from __future__ import annotations

from struct import Struct, pack, unpack_from
from struct import error as struct_error

from scaler.protocol.message_types import Buffer, TaskGroup, TaskResults, TaskSubmission

# Message's union members read here (scaler.capnp).
_SUBMIT_TASKS = 5
_TASK_RESULTS = 6

_HEAD = Struct("<IIII")  # the segment table of one segment, and the root pointer
_POINTER = Struct("<II")
_WHICH = Struct("<H")
_RESULTS_DATA = Struct("<dI")  # runSeconds, ranTasks
_GROUP_DATA = Struct("<HBxIIi")  # argsPerTask, the flags byte, nestingDepth, waitForTagsMs, priority
_NULL_WORD = bytes(8)


def decode_plain(frame: Buffer) -> TaskSubmission | TaskResults | None:
    """The submission or results that `frame` (the only frame of its message) holds, or None for anything else."""
    if type(frame) is not bytes:
        frame = bytes(frame)  # a view (of a receive buffer): the values read are bytes of their own
    size = len(frame)
    if size < 40 or size & 7:
        return None
    segments_less_one, words, lower, upper = _HEAD.unpack_from(frame, 0)
    if segments_less_one or 8 + words * 8 != size or lower & 3:
        return None
    root = 16 + ((lower >> 2) - ((lower & 0x80000000) >> 1)) * 8
    data_words = upper & 0xFFFF
    if not data_words or not upper >> 16 or root < 16 or root + (data_words + (upper >> 16)) * 8 > size:
        return None
    which = _WHICH.unpack_from(frame, root)[0]
    if which == _TASK_RESULTS:
        return _results(frame, root + data_words * 8, words)
    if which == _SUBMIT_TASKS:
        return _submission(frame, root + data_words * 8, words)
    return None


def _target(frame: bytes, at: int, lower: int, words: int) -> int:
    """Where the pointer at `at` (lower half `lower`) points, if `words` words from there are in the frame; else -1."""
    start = at + 8 + ((lower >> 2) - ((lower & 0x80000000) >> 1)) * 8
    return start if start >= 16 and start + words * 8 <= len(frame) else -1


def _results(frame: bytes, at: int, budget: int) -> TaskResults | None:
    lower, upper = _POINTER.unpack_from(frame, at)
    data_words = upper & 0xFFFF
    pointer_count = upper >> 16
    if lower & 3 or data_words < 2 or pointer_count < 2:
        return None
    start = _target(frame, at, lower, data_words + pointer_count)
    if start < 0:
        return None
    pointers = start + data_words * 8
    end = pointers + pointer_count * 8
    # Successes only, all inline: failures, payloadFrameIndices, payloadFrames, profiles, warnings and their
    # columns, stored results (pointers 2 to 12) all null.
    if frame.count(0, pointers + 16, end) != end - pointers - 16:
        return None
    budget -= data_words + pointer_count
    read_ids = _uint64s(frame, pointers, budget)
    if read_ids is None:
        return None
    ids, budget = read_ids
    read = _datas(frame, pointers + 8, budget)
    if read is None:
        return None
    payloads = read[0]
    run_seconds, ran_tasks = _RESULTS_DATA.unpack_from(frame, start)
    return TaskResults(succeeded_ids=ids, payloads=payloads, failures=[], run_seconds=run_seconds, ran_tasks=ran_tasks)


def _list(frame: bytes, at: int, element_size: int, budget: int) -> tuple[int, int, int] | None:
    """Where the list that the pointer at `at` points to starts, its length and the budget left ((0, 0, budget)
    for a null pointer); None unless it is a list of `element_size` (5: 64-bit values, 6: pointers) in the frame."""
    lower, upper = _POINTER.unpack_from(frame, at)
    if not (lower or upper):
        return 0, 0, budget
    count = upper >> 3
    budget -= count
    if lower & 3 != 1 or upper & 7 != element_size or budget < 0:
        return None
    first = _target(frame, at, lower, count)
    return None if first < 0 else (first, count, budget)


def _uint64s(frame: bytes, at: int, budget: int) -> tuple[list[int], int] | None:
    """A List(UInt64) (null: empty), and the budget left."""
    found = _list(frame, at, 5, budget)
    if found is None:
        return None
    first, count, budget = found
    return (list(unpack_from(f"<{count}Q", frame, first)) if count else []), budget


def _datas(frame: bytes, at: int, budget: int) -> tuple[list[Buffer], int] | None:
    """A List(Data) (a null element is empty), and the budget left."""
    found = _list(frame, at, 6, budget)
    if found is None:
        return None
    first, count, budget = found
    values: list[Buffer] = []
    for element in range(first, first + count * 8, 8):
        read = _data(frame, element, budget)
        if read is None:
            return None
        value, budget = read
        values.append(value)
    return values, budget


def _data(frame: bytes, at: int, budget: int) -> tuple[bytes, int] | None:
    """A Data (null: empty), and the budget left."""
    lower, upper = _POINTER.unpack_from(frame, at)
    if not (lower or upper):
        return b"", budget
    length = upper >> 3
    budget -= (length + 7) >> 3
    if lower & 3 != 1 or upper & 7 != 2 or budget < 0:
        return None
    start = _target(frame, at, lower, (length + 7) >> 3)
    return None if start < 0 else (frame[start:start + length], budget)


def _submission(frame: bytes, at: int, budget: int) -> TaskSubmission | None:
    lower, upper = _POINTER.unpack_from(frame, at)
    pointer_count = upper >> 16
    if lower & 3 or pointer_count != 3:
        return None
    start = _target(frame, at, lower, (upper & 0xFFFF) + 3)
    if start < 0:
        return None
    pointers = start + (upper & 0xFFFF) * 8
    # No objects (pointer 0) and no quiet tasks (pointer 2): null.
    if frame[pointers:pointers + 8] != _NULL_WORD or frame[pointers + 16:pointers + 24] != _NULL_WORD:
        return None
    lower, upper = _POINTER.unpack_from(frame, pointers + 8)
    if lower & 3 != 1 or upper & 7 != 7:
        return None
    words = upper >> 3
    tag = _target(frame, pointers + 8, lower, words + 1)
    if tag < 0:
        return None
    lower, upper = _POINTER.unpack_from(frame, tag)
    count = lower >> 2
    data_words = upper & 0xFFFF
    pointer_count = upper >> 16
    step = (data_words + pointer_count) * 8
    budget -= words + 1
    if lower & 3 or data_words != 2 or pointer_count != 11 or count * step > words * 8 or budget < 0:
        return None
    groups = []
    for element in range(tag + 8, tag + 8 + count * step, step):
        read = _group(frame, element, budget)
        if read is None:
            return None
        group, budget = read
        groups.append(group)
    return TaskSubmission(objects=[], groups=groups)


def _group(frame: bytes, data: int, budget: int) -> tuple[TaskGroup, int] | None:
    pointers = data + 16
    # Null: keywords (1), the graph's refArgIndices and refTaskIds (5, 6), the large arguments' argFrameIndices
    # and argFrames (7, 8), objectArgIndices (9).
    if frame.count(0, pointers + 8, pointers + 16) != 8 or frame.count(0, pointers + 40, pointers + 80) != 40:
        return None
    args_per_task, flags, nesting_depth, wait_for_tags_ms, priority = _GROUP_DATA.unpack_from(frame, data)
    read = _data(frame, pointers, budget)
    if read is None:
        return None
    function_id, budget = read
    read = _data(frame, pointers + 32, budget)
    if read is None:
        return None
    serializer_id, budget = read
    read_args = _datas(frame, pointers + 24, budget)
    if read_args is None:
        return None
    args, budget = read_args
    read_ids = _uint64s(frame, pointers + 16, budget)
    if read_ids is None:
        return None
    task_ids, budget = read_ids
    required_tags: tuple[str, ...] = ()
    lower, upper = _POINTER.unpack_from(frame, pointers + 80)
    if lower or upper:
        if lower & 3 != 1 or upper != (1 << 3) | 6:
            return None  # more than one tag (or not a list of pointers): the codec's decode
        element = _target(frame, pointers + 80, lower, 1)
        read = _data(frame, element, budget - 1) if element >= 0 else None
        if read is None:
            return None
        tag, budget = read
        if not tag or tag[-1]:
            return None  # no NUL at its end (or not even that)
        try:
            required_tags = (tag[:-1].decode(),)
        except UnicodeDecodeError:
            return None
    return TaskGroup(
        function_id=function_id, args_per_task=args_per_task, keywords=(), task_ids=task_ids, args=args,
        serializer_id=serializer_id, nesting_depth=nesting_depth, profiling=bool(flags & 1),
        report_start=bool(flags & 2), required_tags=required_tags, wait_for_tags_ms=wait_for_tags_ms,
        priority=priority, stream_output=bool(flags & 4), keep_results=bool(flags & 8),
        keep_in_stores=bool(flags & 16), ahead=bool(flags & 32),
    ), budget


# ---------------------------------------------------------------------------------------------- writing

# A message of up to this many words is one segment as pycapnp writes it (its first segment's size): the plain
# writer writes those only, word for word as pycapnp does (the tests compare the bytes).
_ONE_SEGMENT_WORDS = 1024
_LARGE = 64 * 1024  # message_types.LARGE_PAYLOAD_BYTES: such a payload is a frame of its own (the codec's work)
# Up to the results struct's pointers: the segment table, the root pointer, Message (the union's member, its
# pointer) and TaskResults (2 data words, 13 pointers).
_RESULTS_HEAD = Struct("<IIIIQII")
_RESULTS_WORDS = 18  # before the first list
_RUN = Struct("<dI4x")
_NOT_RUN = bytes(16)
_NULL_POINTERS = bytes(8 * 11)
_PADDING = [b"", b"\0" * 7, b"\0" * 6, b"\0" * 5, b"\0" * 4, b"\0" * 3, b"\0" * 2, b"\0"]


def encode_plain(message: object) -> bytes | None:
    """The one frame of plain results (successes only, all inline, one segment), as pycapnp writes it; None for
    anything else (the codec encodes it)."""
    if type(message) is not TaskResults or message.failures or message.profiles or message.warnings or (
        message.stored
    ):
        return None
    ids = message.succeeded_ids
    payloads = message.payloads
    id_count = len(ids)
    count = len(payloads)
    sizes = [len(payload) for payload in payloads]
    if sizes and max(sizes) >= _LARGE:
        return None
    position = _RESULTS_WORDS + id_count + count  # where the first payload goes
    total = position + sum((size + 7) >> 3 for size in sizes)
    if total > _ONE_SEGMENT_WORDS:
        return None
    pieces: list[bytes | memoryview] = []
    try:
        pieces.append(_RESULTS_HEAD.pack(0, total, 0, 0x00010001, _TASK_RESULTS, 0, 0x000D0002))
        pieces.append(_RUN.pack(message.run_seconds, message.ran_tasks) if message.ran_tasks else _NOT_RUN)
        pieces.append(_POINTER.pack((12 << 2) | 1, (id_count << 3) | 5))  # at word 5, to word 18
        pieces.append(_POINTER.pack(((11 + id_count) << 2) | 1, (count << 3) | 6))
        pieces.append(_NULL_POINTERS)
        if id_count:
            pieces.append(pack(f"<{id_count}Q", *ids))
        at = _RESULTS_WORDS + id_count  # the word of the first payload's pointer
        for size in sizes:
            pieces.append(_POINTER.pack(((position - at - 1) << 2) | 1, (size << 3) | 2))
            position += (size + 7) >> 3
            at += 1
    except (struct_error, OverflowError, TypeError):
        return None  # a value its field cannot hold: the codec's encode says so as it always did
    for payload, size in zip(payloads, sizes):
        pieces.append(payload)
        pieces.append(_PADDING[size & 7])
    return b"".join(pieces)
