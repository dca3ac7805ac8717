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


class _NotPlain(Exception):
    """The frame is not a plain message as this reader expects it: the codec's pycapnp decode takes it."""


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
    if which != _TASK_RESULTS and which != _SUBMIT_TASKS:
        return None
    reader = _Reader(frame, words)
    try:
        if which == _TASK_RESULTS:
            return reader.results(root + data_words * 8)
        return reader.submission(root + data_words * 8)
    except _NotPlain:
        return None


class _Reader:
    """One frame's words, and a budget of words to visit (the frame's size) that no forged pointer can exceed."""

    __slots__ = ("frame", "budget")

    def __init__(self, frame: bytes, budget: int) -> None:
        self.frame = frame
        self.budget = budget

    def spend(self, words: int) -> None:
        self.budget -= words
        if self.budget < 0:
            raise _NotPlain

    def target(self, at: int, lower: int, words: int) -> int:
        """Where the pointer at `at` (lower half `lower`) points, if `words` words from there are in the frame."""
        start = at + 8 + ((lower >> 2) - ((lower & 0x80000000) >> 1)) * 8
        if start < 16 or start + words * 8 > len(self.frame):
            raise _NotPlain
        return start

    def struct(self, at: int) -> tuple[int, int, int]:
        """The struct the pointer at `at` points to: where its data starts, its data words and its pointers."""
        lower, upper = _POINTER.unpack_from(self.frame, at)
        if lower & 3:
            raise _NotPlain
        data_words, pointer_count = upper & 0xFFFF, upper >> 16
        return self.target(at, lower, data_words + pointer_count), data_words, pointer_count

    def list_at(self, at: int, element_size: int) -> tuple[int, int]:
        """Where the list the pointer at `at` points to starts, and its length ((0, 0) for a null pointer); a list
        of another `element_size` (2: bytes, 5: 64-bit values, 6: pointers) is not plain."""
        lower, upper = _POINTER.unpack_from(self.frame, at)
        if not (lower or upper):
            return 0, 0
        count = upper >> 3
        words = (count + 7) >> 3 if element_size == 2 else count
        self.spend(words)
        if lower & 3 != 1 or upper & 7 != element_size:
            raise _NotPlain
        return self.target(at, lower, words), count

    def uint64s(self, at: int) -> list[int]:
        first, count = self.list_at(at, 5)
        return list(unpack_from(f"<{count}Q", self.frame, first)) if count else []

    def data(self, at: int) -> bytes:
        start, length = self.list_at(at, 2)
        return self.frame[start:start + length]

    def datas(self, at: int) -> list[Buffer]:
        first, count = self.list_at(at, 6)
        return [self.data(element) for element in range(first, first + count * 8, 8)]

    def results(self, at: int) -> TaskResults:
        start, data_words, pointer_count = self.struct(at)
        if data_words < 2 or pointer_count < 2:
            raise _NotPlain
        pointers = start + data_words * 8
        end = pointers + pointer_count * 8
        # Successes only, all inline: failures, payloadFrameIndices, payloadFrames, profiles, warnings and their
        # columns, stored results (pointers 2 to 12) all null.
        if self.frame.count(0, pointers + 16, end) != end - pointers - 16:
            raise _NotPlain
        self.spend(data_words + pointer_count)
        ids = self.uint64s(pointers)
        payloads = self.datas(pointers + 8)
        run_seconds, ran_tasks = _RESULTS_DATA.unpack_from(self.frame, start)
        return TaskResults(
            succeeded_ids=ids, payloads=payloads, failures=[], run_seconds=run_seconds, ran_tasks=ran_tasks
        )

    def submission(self, at: int) -> TaskSubmission:
        frame = self.frame
        start, data_words, pointer_count = self.struct(at)
        if pointer_count != 3:
            raise _NotPlain
        pointers = start + data_words * 8
        # No objects (pointer 0) and no quiet tasks (pointer 2): null.
        if frame[pointers:pointers + 8] != _NULL_WORD or frame[pointers + 16:pointers + 24] != _NULL_WORD:
            raise _NotPlain
        lower, upper = _POINTER.unpack_from(frame, pointers + 8)
        if lower & 3 != 1 or upper & 7 != 7:
            raise _NotPlain
        words = upper >> 3
        tag = self.target(pointers + 8, lower, words + 1)
        lower, upper = _POINTER.unpack_from(frame, tag)
        count = lower >> 2
        data_words, pointer_count = upper & 0xFFFF, upper >> 16
        step = (data_words + pointer_count) * 8
        self.spend(words + 1)
        if lower & 3 or data_words != 2 or pointer_count != 11 or count * step > words * 8:
            raise _NotPlain
        return TaskSubmission(
            objects=[], groups=[self.group(element) for element in range(tag + 8, tag + 8 + count * step, step)]
        )

    def group(self, data: int) -> TaskGroup:
        frame = self.frame
        pointers = data + 16
        # Null: keywords (1), the graph's refArgIndices and refTaskIds (5, 6), the large arguments'
        # argFrameIndices and argFrames (7, 8), objectArgIndices (9).
        if frame.count(0, pointers + 8, pointers + 16) != 8 or frame.count(0, pointers + 40, pointers + 80) != 40:
            raise _NotPlain
        args_per_task, flags, nesting_depth, wait_for_tags_ms, priority = _GROUP_DATA.unpack_from(frame, data)
        function_id = self.data(pointers)
        serializer_id = self.data(pointers + 32)
        args = self.datas(pointers + 24)
        task_ids = self.uint64s(pointers + 16)
        return TaskGroup(
            function_id=function_id, args_per_task=args_per_task, keywords=(), task_ids=task_ids, args=args,
            serializer_id=serializer_id, nesting_depth=nesting_depth, profiling=bool(flags & 1),
            report_start=bool(flags & 2), required_tags=self.one_tag(pointers + 80),
            wait_for_tags_ms=wait_for_tags_ms, priority=priority, stream_output=bool(flags & 4),
            keep_results=bool(flags & 8), keep_in_stores=bool(flags & 16), ahead=bool(flags & 32),
        )

    def one_tag(self, at: int) -> tuple[str, ...]:
        """No required tag, or one; more (or not a list of pointers) are the codec's to decode."""
        lower, upper = _POINTER.unpack_from(self.frame, at)
        if not (lower or upper):
            return ()
        if lower & 3 != 1 or upper != (1 << 3) | 6:
            raise _NotPlain
        self.spend(1)
        tag = self.data(self.target(at, lower, 1))
        if not tag or tag[-1]:
            raise _NotPlain  # no NUL at its end (or not even that)
        try:
            return (tag[:-1].decode(),)
        except UnicodeDecodeError:
            raise _NotPlain from None


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
