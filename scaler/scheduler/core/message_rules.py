"""Which registered peer may send the scheduler which message: one table, and one answer to a breach.

SchedulerCore builds its handlers for each role from SENDERS, so a message from a registered peer
reaches a handler only if the peer's role may send it. Any other is answered with protocolError naming
the message and the role, and is otherwise ignored: the sender is told, not dropped, as for every
decodable message that breaks a rule (only an unreadable frame costs a peer its registration). A sender
that is not registered is not looked up here: it is refused whatever it sends, except a hello.
PROTOCOL.md §3 documents the table.
"""

from __future__ import annotations

from scaler.protocol import messages as m

_CLIENTS = frozenset({m.Role.CLIENT})
_WORKERS = frozenset({m.Role.WORKER})
_BOTH = _CLIENTS | _WORKERS
_STORES = frozenset({m.Role.STORE})
_ANY = _BOTH | _STORES

# Message type -> the roles that may send it once registered. A type missing here is one the scheduler
# never receives (it sends it, or it belongs inside a worker). Hello opens a registration: a registered
# peer may send it only as a client or a store coming back to this scheduler (hello_again.py); any other
# is a breach ("hello sent twice", which workers act on).
SENDERS: dict[type, frozenset[m.Role]] = {
    m.Hello: _CLIENTS | _STORES,
    m.Heartbeat: _ANY,
    m.Disconnect: _ANY,
    m.TaskSubmission: _CLIENTS,
    m.CancelTasks: _CLIENTS,
    m.ClearRequest: _CLIENTS,
    m.DeleteObjects: _CLIENTS,
    # Readers that could not get an object from its holders; a store that lost objects it held.
    m.ObjectsLost: _ANY,
    m.ObjectsHeld: _STORES,
    m.ShutdownRequest: _CLIENTS,
    m.DrainWorkers: _CLIENTS,
    m.TaskResults: _WORKERS,
    m.CancelRefused: _WORKERS,
    m.TaskStarted: _WORKERS,
    # What tasks submitted with streamOutput print (output_routing.py; bounded by output_problem below).
    m.TaskOutput: _WORKERS,
    # A worker that outlived the scheduler before this one: the tasks it holds (rejoin.py).
    m.Reannounce: _WORKERS,
    # The relay fallback: a client or a store that cannot reach a store; a store's answers.
    m.Relay: _CLIENTS | _STORES,
}

_PLURAL = {m.Role.CLIENT: "clients", m.Role.WORKER: "workers", m.Role.STORE: "stores"}


def violation(role: m.Role, message_type: type) -> str:
    """The protocolError reason for a `role` that sent a message of `message_type` it may not send."""
    allowed = SENDERS.get(message_type)
    if allowed is None:
        why = "the scheduler never receives it"
    elif message_type is m.Hello:
        why = "this connection is registered already (hello sent twice)"
    else:
        why = "only " + " and ".join(_PLURAL[sender] for sender in sorted(allowed)) + " do"
    return f"a {role.name.lower()} may not send {message_type.__name__}; {why}"


def output_problem(output: m.TaskOutput) -> str | None:
    """Why the scheduler refuses a worker's taskOutput (its protocolError reason), or None: the columns must agree,
    the streams be known, and the text fit MAX_TASK_OUTPUT_MESSAGE_CHARS, so that no worker can make the scheduler
    hold or pass on more than that per message."""
    count = len(output.task_ids)
    if len(output.streams) != count or len(output.texts) != count:
        return "taskOutput has columns of different lengths"
    if any(stream not in _OUTPUT_STREAMS for stream in output.streams):
        return "taskOutput names an unknown stream"
    if sum(map(len, output.texts)) > m.MAX_TASK_OUTPUT_MESSAGE_CHARS:
        return f"taskOutput carries more than {m.MAX_TASK_OUTPUT_MESSAGE_CHARS} characters"
    return None


_OUTPUT_STREAMS = frozenset(int(stream) for stream in m.OutputStream)
