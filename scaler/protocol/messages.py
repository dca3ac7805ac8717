"""The Python view of the wire protocol: the messages as plain objects, and `encode`/`decode` for them.

`from scaler.protocol import messages as m`, then `m.TaskGroup(...)`, `m.encode(message)`,
`m.decode(frames)`. Everything above this layer handles the dataclasses (message_types.py), so the
scheduler core, the worker and the client never see a capnp reader or builder: the Cap'n Proto encoding
lives in scaler/protocol/capnp_codec.py, and besides it only the monitor feed's (monitor_messages.py) and
the data plane's (data_messages.py) codecs import capnp.

`encode(message) -> list[Buffer]`: the frames of one message, the Cap'n Proto frame, then any large
payloads it names. `decode(frames) -> Message`: one message from its frames; anything malformed raises
ProtocolDecodeError, never anything else.
"""

from __future__ import annotations

from scaler.protocol.capnp_codec import decode as decode
from scaler.protocol.capnp_codec import encode as encode
from scaler.protocol.capnp_ids import decode_ids as decode_ids
from scaler.protocol.message_types import *  # noqa: F403  (every message class, constant and type alias)
