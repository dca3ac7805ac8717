"""Why a connection to a peer does not work, told within seconds instead of a silent wait.

ZeroMQ reconnects on its own and never says why a connection fails, so a peer whose CURVE key the
scheduler refused, a plain peer at a CURVE scheduler, or `scaler_top` pointed at the scheduler's own
address all look alike: nothing arrives. The socket monitor (zmq_socket_monitor) does say it: a refused
key is EVENT_HANDSHAKE_FAILED_AUTH with the ZAP status (400), a CURVE peer at a plain socket or the
reverse is EVENT_HANDSHAKE_FAILED_PROTOCOL (mechanism mismatch), a wrong server public key makes the
server drop the hello (EVENT_HANDSHAKE_FAILED_NO_DETAIL), and a socket of an incompatible type (a SUB at
the scheduler's ROUTER) is connected and dropped before any handshake ends.

`HandshakeDiagnosis` turns those events into sentences (pure: events and times in, new problems out);
`HandshakeWatch` feeds it from a socket's monitor and is polled by its shell without blocking, at its tick.
Each problem is told once until a handshake succeeds; ZeroMQ keeps retrying meanwhile.
"""

from __future__ import annotations

import zmq
from zmq.utils.monitor import recv_monitor_message

# Until this long after the start, a peer that has not connected yet is not reported as silent.
DEFAULT_SILENCE_SECONDS = 3.0

_EVENTS = (
    zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_HANDSHAKE_FAILED_AUTH
    | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL
)


class HandshakeDiagnosis:
    """What the connection events of one connecting socket mean, for a reader of its log or screen.

    `peer` names what is at `address` ("the scheduler"), `role` what this process is ("worker"), `secured`
    whether this side uses CURVE; `silence_seconds` (None: never) reports a peer that has not connected by
    then; `not_the_peer_hint` is said when something at the address is not that peer: it connects and drops
    us before any handshake ends (a service of another kind), or, with `peer_is_plain` (a peer that never uses
    CURVE, such as a monitor feed), any handshake fails.
    """

    def __init__(
        self, address: str, peer: str, role: str, secured: bool, now: float, silence_seconds: float | None = None,
        not_the_peer_hint: str = "", peer_is_plain: bool = False,
    ) -> None:
        self._address = address
        self._peer_is_plain = peer_is_plain
        self._peer = peer
        self._role = role
        self._secured = secured
        self._silent_after = None if silence_seconds is None else now + silence_seconds
        self._not_the_peer_hint = not_the_peer_hint
        self._ever_connected = False
        self._handshake_pending = False
        self._told: set[str] = set()
        self.problem = ""  # the latest problem not resolved by a successful handshake since ("" when none)
        # Whether that problem is the scheduler refusing this side's keys (or their absence): retrying cannot help.
        self.keys_refused = False
        # Connections made, handshake and all: one more than before is a reconnection (a restarted peer, maybe).
        self.handshakes_succeeded = 0

    def on_event(self, event: int, value: int) -> list[str]:
        """The problems this event shows that were not told yet."""
        if event == zmq.EVENT_CONNECTED:
            self._ever_connected = True
            self._handshake_pending = True
            return []
        if event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
            self.handshakes_succeeded += 1
            self._handshake_pending = False
            self._told.clear()
            self.problem = ""
            self.keys_refused = False
            return []
        if event == zmq.EVENT_DISCONNECTED:
            dropped = self._handshake_pending
            self._handshake_pending = False
            return self._tell(self._dropped()) if dropped else []
        self._handshake_pending = False
        if self._peer_is_plain:
            return self._tell(self._dropped())
        self.keys_refused = _refuses_keys(event, value, self._secured)
        return self._tell(self._failed(event, value))

    def on_tick(self, now: float) -> list[str]:
        """The problem of a peer that has not connected within the silence time (told once)."""
        if self._ever_connected or self._silent_after is None or now < self._silent_after:
            return []
        return self._tell(
            f"nothing answers at {self._address} yet (still trying): is {self._peer} running, and is this its address?"
        )

    def _tell(self, problem: str) -> list[str]:
        self.problem = problem
        if problem in self._told:
            return []
        self._told.add(problem)
        return [problem]

    def _failed(self, event: int, value: int) -> str:
        at = f"{self._peer} at {self._address}"
        if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
            return (
                f"{at} refused this {self._role}'s key (CURVE authentication failed, status {value}): check that "
                "the public key of the secret key given to it (--curve-secret-key or SCALER_CURVE_SECRET_KEY) is "
                "in the scheduler's authorized keys directory"
            )
        if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL and value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            if self._secured:
                return f"{at} does not use CURVE, but this {self._role} was given keys: connect without them"
            return (
                f"{at} requires CURVE keys (authentication failed before it began): give this {self._role} the "
                "scheduler's public key and a secret key the scheduler authorized (--curve-server-key and "
                "--curve-secret-key, or SCALER_CURVE_SERVER_KEY and SCALER_CURVE_SECRET_KEY)"
            )
        if event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and self._secured:
            return (
                f"{at} could not read this {self._role}'s CURVE hello (authentication failed): check that the "
                "scheduler's public key given to it (--curve-server-key or SCALER_CURVE_SERVER_KEY) is the one "
                "of the scheduler's secret key"
            )
        return f"the handshake with {at} failed (ZeroMQ error {value:#x}): is this the right address?"

    def _dropped(self) -> str:
        hint = f": {self._not_the_peer_hint}" if self._not_the_peer_hint else ""
        return f"{self._address} answers, but not as {self._peer}{hint}"


def _refuses_keys(event: int, value: int, secured: bool) -> bool:
    """Whether a failed handshake is an authentication failure (the three kinds _failed explains as such)."""
    if event == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return True
    if event == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        return value == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH
    return event == zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL and secured


class HandshakeWatch:
    """The diagnosis of one socket, fed by its monitor; made before the socket connects, so that no event is
    missed, and closed before the socket's context is terminated."""

    def __init__(
        self, socket: zmq.Socket, address: str, now: float, *, peer: str = "the scheduler", role: str = "peer",
        secured: bool = False, silence_seconds: float | None = None, not_the_peer_hint: str = "",
        peer_is_plain: bool = False,
    ) -> None:
        self._socket = socket
        self._monitor: zmq.Socket | None = socket.get_monitor_socket(_EVENTS)
        self.diagnosis = HandshakeDiagnosis(
            address, peer, role, secured, now, silence_seconds, not_the_peer_hint, peer_is_plain
        )

    @property
    def monitor_socket(self) -> zmq.Socket | None:
        """The monitor's socket, for a shell that polls it with its own sockets instead of at every pass."""
        return self._monitor

    @property
    def problem(self) -> str:
        """The latest problem not resolved since ("" when none): for an error message at a timeout."""
        return self.diagnosis.problem

    def poll(self, now: float) -> list[str]:
        """The problems found since the last poll that were not told yet (never blocks)."""
        problems: list[str] = []
        monitor = self._monitor
        while monitor is not None:
            try:
                event = recv_monitor_message(monitor, zmq.NOBLOCK)
            except zmq.Again:
                break
            problems.extend(self.diagnosis.on_event(int(event["event"]), int(event["value"])))
        problems.extend(self.diagnosis.on_tick(now))
        return problems

    def close(self) -> None:
        monitor, self._monitor = self._monitor, None
        if monitor is None:
            return
        try:
            self._socket.disable_monitor()
        except zmq.ZMQError:
            pass  # the socket is closed already: its monitor ended with it
        monitor.close(linger=0)
