"""Hypothesis strategies for protocol messages: every dataclass of `scaler.protocol.messages`, valid on the wire.

"Valid" means what the schema can carry (integer widths, float32, UTF-8 text), not what the scheduler
accepts: the fuzz tests of the scheduler core feed these to it from misbehaving peers. Ids and payloads
come from small pools where collisions matter, so drawn messages hit each other's tasks and objects.
"""

from __future__ import annotations

from hypothesis import strategies as st

from scaler.protocol import messages as m
from scaler.utility.identifiers import OBJECT_ID_BYTES, TASK_COUNTER_BITS

U16 = st.integers(min_value=0, max_value=2**16 - 1)
U32 = st.integers(min_value=0, max_value=2**32 - 1)
U64 = st.integers(min_value=0, max_value=2**64 - 1)
SMALL_U32 = st.one_of(st.integers(min_value=0, max_value=8), st.just(2**32 - 1))
FLOAT32 = st.floats(width=32, allow_nan=False)
I32 = st.integers(min_value=-(2**31), max_value=2**31 - 1)
# Hello.share: the client's weight, also the values the scheduler refuses (0, negative, infinite).
SHARES = st.one_of(st.just(m.DEFAULT_SHARE), st.floats(allow_nan=False))
# Cap'n Proto Text is UTF-8: no lone surrogates.
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
SMALL_BYTES = st.binary(max_size=24)
# A payload at the size that moves it to its own frame, now and then.
LARGE_PAYLOAD = b"L" * m.LARGE_PAYLOAD_BYTES
PAYLOADS = st.one_of(SMALL_BYTES, st.none().map(lambda _: LARGE_PAYLOAD))  # map: keeps the repr short

ROLES = st.sampled_from(list(m.Role))
# Worker and required tags: a small pool, so that drawn workers and tasks match now and then, and any text.
TAGS = st.lists(st.one_of(st.sampled_from(["python", "native", "gpu"]), TEXT), max_size=3).map(tuple)
FAILURE_KINDS = st.sampled_from(list(m.FailureKind))


def task_ids(pool: st.SearchStrategy[int] = U64, max_size: int = 6) -> st.SearchStrategy[list[int]]:
    return st.lists(pool, max_size=max_size)


def forged_task_ids(prefixes: st.SearchStrategy[int]) -> st.SearchStrategy[int]:
    """Task ids that carry some prefix, with a small counter, so that they collide with real ones."""
    return st.builds(lambda prefix, counter: (prefix << TASK_COUNTER_BITS) | counter, prefixes, st.integers(0, 6))


def object_ids(known: st.SearchStrategy[bytes] | None = None) -> st.SearchStrategy[bytes]:
    choices = [st.binary(min_size=OBJECT_ID_BYTES, max_size=OBJECT_ID_BYTES), st.binary(max_size=20)]
    if known is not None:
        choices.insert(0, known)
    return st.one_of(*choices)


def hellos() -> st.SearchStrategy[m.Hello]:
    return st.builds(
        m.Hello,
        role=ROLES,
        name=TEXT,
        hostname=TEXT,
        pid=U32,
        capacity=SMALL_U32,
        protocol_version=st.one_of(st.just(m.PROTOCOL_VERSION), U32),
        nesting_depth=SMALL_U32,
        tags=TAGS,
        store=TEXT,
        host_key=TEXT,
        data_address=TEXT,
        ipc_address=TEXT,
        capacity_bytes=U64,
        share=SHARES,
        rejoining=st.booleans(),
    )


def store_directories() -> st.SearchStrategy[m.StoreDirectory]:
    entries = st.builds(m.StoreEntry, data_address=TEXT, ipc_address=TEXT, host_key=TEXT)
    return st.builds(m.StoreDirectory, stores=st.lists(entries, max_size=3), home_store=TEXT)


def heartbeats() -> st.SearchStrategy[m.Heartbeat]:
    return st.builds(
        m.Heartbeat,
        cpu_percent=FLOAT32,
        rss_bytes=U64,
        queued_tasks=U32,
        processor_cpu_percent=FLOAT32,
        processor_rss_bytes=U64,
        latency_us=U32,
        bytes_held=U64,
        bytes_spilled=U64,
        bytes_pinned=U64,
        object_count=U64,
    )


@st.composite
def task_groups(
    draw: st.DrawFn,
    ids: st.SearchStrategy[int] = U64,
    functions: st.SearchStrategy[bytes] | None = None,
    consistent: bool = False,
) -> m.TaskGroup:
    """A group; `consistent` makes the lengths agree (args = width x tasks, refs paired), as a sane client would."""
    width = draw(st.integers(0, 3) if consistent else st.integers(0, 3) | st.just(2**16 - 1))
    group_task_ids = draw(task_ids(ids, max_size=4))
    if consistent:
        args = draw(st.lists(PAYLOADS, min_size=width * len(group_task_ids), max_size=width * len(group_task_ids)))
    else:
        args = draw(st.lists(PAYLOADS, max_size=8))
    arg_count = max(len(args), 1)
    index = st.one_of(st.integers(0, arg_count + 1), U32)
    ref_count = draw(st.integers(0, 3))
    ref_arg_indices = draw(st.lists(index, min_size=ref_count, max_size=ref_count))
    ref_ids = draw(st.lists(ids, min_size=ref_count, max_size=ref_count))
    if not consistent and draw(st.booleans()):
        ref_arg_indices = ref_arg_indices[: draw(st.integers(0, ref_count))]
    if not ref_ids:
        ref_arg_indices = []  # the encoder writes both lists or neither
    required_tags = draw(TAGS)
    return m.TaskGroup(
        function_id=draw(object_ids(functions)),
        args_per_task=width,
        keywords=tuple(draw(st.lists(TEXT, max_size=width if consistent else 4))),
        task_ids=group_task_ids,
        args=args,
        serializer_id=draw(st.one_of(st.just(b""), object_ids(functions))),
        ref_arg_indices=ref_arg_indices,
        ref_task_ids=ref_ids,
        object_arg_indices=draw(st.lists(index, max_size=3)),
        nesting_depth=draw(SMALL_U32),
        profiling=draw(st.booleans()),
        report_start=draw(st.booleans()),
        required_tags=required_tags,
        # The encoder writes the wait limit only with tags.
        wait_for_tags_ms=draw(SMALL_U32) if required_tags else 0,
        priority=draw(st.one_of(st.just(0), st.integers(-3, 3), I32)),
        stream_output=draw(st.booleans()),
        keep_in_stores=draw(st.booleans()),
        ahead=draw(st.booleans()),
    )


def submissions(
    ids: st.SearchStrategy[int] = U64,
    functions: st.SearchStrategy[bytes] | None = None,
    function_payloads: st.SearchStrategy[bytes] = PAYLOADS,
) -> st.SearchStrategy[m.TaskSubmission]:
    objects = st.builds(m.ObjectPayload, object_id=object_ids(functions), payload=function_payloads, name=TEXT)
    return st.builds(
        m.TaskSubmission,
        objects=st.lists(objects, max_size=3),
        groups=st.lists(task_groups(ids, functions), max_size=3),
        quiet_task_ids=task_ids(ids, max_size=3),
    )


def task_failures(ids: st.SearchStrategy[int] = U64) -> st.SearchStrategy[m.TaskFailure]:
    return st.builds(
        m.TaskFailure,
        task_id=ids,
        kind=FAILURE_KINDS,
        type_name=TEXT,
        message=TEXT,
        traceback=TEXT,
        exception=SMALL_BYTES,
    )


def task_warnings(ids: st.SearchStrategy[int] = U64) -> st.SearchStrategy[m.TaskWarning]:
    return st.builds(
        m.TaskWarning,
        task_id=ids,
        category=TEXT,
        category_bases=st.lists(TEXT, max_size=3).map(tuple),
        message=TEXT,
        filename=TEXT,
        lineno=U32,
        module=TEXT,
    )


def task_results(ids: st.SearchStrategy[int] = U64, paired: bool = True) -> st.SearchStrategy[m.TaskResults]:
    @st.composite
    def build(draw: st.DrawFn) -> m.TaskResults:
        succeeded = draw(task_ids(ids))
        payload_count = len(succeeded) if paired else draw(st.integers(0, 6))
        return m.TaskResults(
            succeeded_ids=succeeded,
            payloads=draw(st.lists(PAYLOADS, min_size=payload_count, max_size=payload_count)),
            failures=draw(st.lists(task_failures(ids), max_size=4)),
            profiles=draw(st.lists(st.builds(m.TaskProfile, task_id=ids, duration_us=U64, cpu_time_us=U64,
                                             peak_memory_bytes=U64), max_size=2)),
            warnings=draw(st.lists(task_warnings(ids), max_size=2)),
            **draw(st.one_of(st.just({}), st.fixed_dictionaries({
                "ran_tasks": st.integers(1, 2**32 - 1), "run_seconds": st.floats(0.0, 1e9, allow_nan=False),
            }))),
        )

    return build()


def relays() -> st.SearchStrategy[m.Relay]:
    """A data message carried, or (no frames) the error of one that could not be delivered."""
    carrying = st.builds(
        m.Relay, frames=st.lists(SMALL_BYTES, min_size=1, max_size=3), store=TEXT, peer=SMALL_BYTES, request_id=U64,
    )
    failing = st.builds(m.Relay, frames=st.builds(list), store=TEXT, request_id=U64, error=TEXT.filter(bool))
    return st.one_of(carrying, failing)


def message_strategies(
    ids: st.SearchStrategy[int] = U64,
    functions: st.SearchStrategy[bytes] | None = None,
    paired_results: bool = True,
) -> dict[type, st.SearchStrategy]:
    """A strategy for each message type, every field drawn."""
    id_lists = task_ids(ids)
    return {
        m.Hello: hellos(),
        m.Welcome: st.builds(
            m.Welcome, id_prefix=U32, heartbeat_interval_ms=U32, peer_timeout_ms=U32, protocol_version=U32,
            max_frame_bytes=U64, max_control_frame_bytes=U64, store_directory=store_directories(),
        ),
        m.StoreDirectory: store_directories(),
        m.Refused: st.builds(m.Refused, reason=TEXT, unknown_peer=st.booleans()),
        m.Reannounce: st.builds(m.Reannounce, task_ids=id_lists),
        m.Heartbeat: heartbeats(),
        m.HeartbeatEcho: st.builds(m.HeartbeatEcho, heartbeat_interval_ms=st.integers(0, 2**32 - 1)),
        m.TaskSubmission: submissions(ids, functions),
        m.TaskResults: task_results(ids, paired_results),
        m.CancelTasks: st.builds(m.CancelTasks, task_ids=id_lists, force=st.booleans()),
        m.ReleaseTasks: st.builds(m.ReleaseTasks, task_ids=id_lists),
        m.CancelRefused: st.builds(m.CancelRefused, task_ids=id_lists),
        m.TaskStarted: st.builds(m.TaskStarted, task_ids=id_lists),
        m.DeleteObjects: st.builds(m.DeleteObjects, object_ids=st.lists(object_ids(functions), max_size=3)),
        m.ObjectsLost: st.builds(m.ObjectsLost, object_ids=st.lists(object_ids(functions), max_size=3)),
        m.ObjectsHeld: st.lists(object_ids(functions), max_size=3).flatmap(lambda ids: st.builds(
            m.ObjectsHeld, object_ids=st.just(ids), sizes=st.lists(U64, min_size=len(ids), max_size=len(ids))
        )),
        m.ResendObjects: st.builds(m.ResendObjects, object_ids=st.lists(object_ids(functions), max_size=3)),
        m.PublishObjects: st.builds(m.PublishObjects, object_ids=st.lists(object_ids(functions), max_size=3)),
        m.ClearRequest: st.just(m.ClearRequest()),
        m.ClearResponse: st.builds(m.ClearResponse, canceled_tasks=U32),
        m.Disconnect: st.builds(m.Disconnect, reason=TEXT),
        m.ShutdownRequest: st.just(m.ShutdownRequest()),
        m.ShutdownResponse: st.builds(m.ShutdownResponse, accepted=st.booleans(), reason=TEXT),
        m.ProtocolError: st.builds(m.ProtocolError, reason=TEXT),
        m.ProcessorState: st.builds(m.ProcessorState, blocked=st.booleans(), granted=st.booleans(), reason=TEXT),
        m.DrainWorkers: st.builds(m.DrainWorkers, worker_names=st.lists(TEXT, max_size=3)),
        m.DrainWorkersResponse: st.builds(
            m.DrainWorkersResponse, draining=st.lists(TEXT, max_size=3), unknown=st.lists(TEXT, max_size=3)
        ),
        m.Relay: relays(),
        m.TaskOutput: task_outputs(ids),
    }


@st.composite
def task_outputs(draw: st.DrawFn, ids: st.SearchStrategy[int] = U64) -> m.TaskOutput:
    """Chunks of output, their columns usually agreeing, the streams usually known (0..2), as a worker sends."""
    count = draw(st.integers(0, 3))
    streams = st.integers(0, 2) | st.integers(0, 255)
    return m.TaskOutput(
        task_ids=draw(st.lists(ids, min_size=count, max_size=count)),
        streams=draw(st.lists(streams, min_size=count, max_size=count + draw(st.integers(0, 1)))),
        texts=draw(st.lists(TEXT, min_size=count, max_size=count)),
        worker=draw(TEXT),
    )


def messages(
    ids: st.SearchStrategy[int] = U64,
    functions: st.SearchStrategy[bytes] | None = None,
    paired_results: bool = True,
) -> st.SearchStrategy[m.Message]:
    """Any message of any type."""
    return st.one_of(*message_strategies(ids, functions, paired_results).values())


# Every member of the `Message` union; the decoder test checks that each has a strategy.
MESSAGE_TYPES: tuple[type, ...] = m.Message.__args__  # type: ignore[attr-defined]
