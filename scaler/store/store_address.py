"""How to reach a store, apart from the client that talks to it: a Cluster's process learns it from the store's
readiness report and needs none of the protocol (Cap'n Proto) that StoreClient brings in, which would only
add to every cluster's start-up."""

from __future__ import annotations

import dataclasses

from scaler.utility.host_key import this_host_key


@dataclasses.dataclass(frozen=True)
class StoreAddress:
    """How to reach a store: its data address (tcp), its local address (ipc) and its host key."""

    data_address: str
    ipc_address: str = ""
    host_key: str = ""

    @staticmethod
    def from_listening_report(detail: str) -> StoreAddress:
        """From the store's readiness report: `DATA_ADDRESS IPC_ADDRESS HOST_KEY`."""
        parts = detail.split()
        if len(parts) != 3:
            raise ValueError(f"not a store's listening report: {detail!r}")
        return StoreAddress(*parts)

    def is_local(self) -> bool:
        return bool(self.ipc_address) and self.host_key == this_host_key()
