"""The signal by which the agent makes a processor read its socket while a task runs.

The agent sends it after a cancel or release for tasks queued behind a running one, or a request to publish a
result the processor made; see Processor._on_agent_signal. A module of its own: the agent would otherwise
import everything a processor needs (the store client, cloudpickle, ...) for this name, and a processor the
agent's actions (agent_actions.py), at every worker's start.
"""

from __future__ import annotations

import signal

AGENT_SIGNAL = signal.SIGUSR1
