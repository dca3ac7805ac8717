"""Outcomes on their way to clients: gathered per client while one event is handled, then one message each."""

from __future__ import annotations

from scaler.protocol import messages as m
from scaler.scheduler.core.outgoing import Outgoing
from scaler.scheduler.core.peer_registry import ClientPeer


class ResultRouter:
    """One TaskResults per client per event, whatever number of tasks ended in it and however they ended."""

    def __init__(self) -> None:
        self._by_client: dict[bytes, m.TaskResults] = {}

    def success(self, client: ClientPeer, task_id: int, payload: m.Buffer) -> None:
        results = self._results_for(client.identity)
        results.succeeded_ids.append(task_id)
        results.payloads.append(payload)

    def stored(self, client: ClientPeer, result: m.StoredResult) -> None:
        self._results_for(client.identity).stored.append(result)

    def failure(self, client: ClientPeer, failure: m.TaskFailure) -> None:
        self._results_for(client.identity).failures.append(failure)

    def profile(self, client: ClientPeer, profile: m.TaskProfile) -> None:
        self._results_for(client.identity).profiles.append(profile)

    def warning(self, client: ClientPeer, warning: m.TaskWarning) -> None:
        self._results_for(client.identity).warnings.append(warning)

    def flush(self, out: list[Outgoing]) -> None:
        out.extend(self._by_client.items())
        self._by_client.clear()

    def _results_for(self, identity: bytes) -> m.TaskResults:
        results = self._by_client.get(identity)
        if results is None:
            results = self._by_client[identity] = m.TaskResults(succeeded_ids=[], payloads=[], failures=[])
        return results
