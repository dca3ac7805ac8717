"""What every input of the core returns: messages to send, each with the routing identity of its peer, in order."""

from __future__ import annotations

from scaler.protocol import messages as m

Outgoing = tuple[bytes, m.Message]
