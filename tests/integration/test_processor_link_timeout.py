"""A real processor whose agent lives but reads nothing: its send gives up after the link timeout, and it exits
saying why, instead of waiting for that agent forever (utility/frame_stream.py, FrameStream.send_all)."""

from __future__ import annotations

import pathlib
import subprocess

from scaler.protocol import messages as m
from scaler.protocol.serializer import DefaultSerializer
from scaler.utility.identifiers import content_object_id
from tests.integration.test_processor_signal import FIRST_TASK_ID, PlayedAgent

# Far more than a socketpair's buffers hold, so that the result cannot be written while nobody reads.
RESULT_BYTES = 32 * 1024 * 1024


def large_result(size: int) -> bytes:
    return b"r" * size


def test_a_processor_whose_agent_reads_nothing_exits_after_its_link_timeout(tmp_path: pathlib.Path) -> None:
    agent = PlayedAgent(tmp_path, link_timeout_seconds=1.0, stderr=subprocess.PIPE)
    try:
        assert isinstance(agent.receive(30), m.Hello)
        function = DefaultSerializer.serialize(large_result)
        function_id = content_object_id(function)
        group = m.TaskGroup(function_id=function_id, args_per_task=1, keywords=(), task_ids=[FIRST_TASK_ID],
                            args=[DefaultSerializer.serialize(RESULT_BYTES)])
        agent.send(m.TaskSubmission(objects=[m.ObjectPayload(function_id, function)], groups=[group]))
        # We read nothing more: the processor's result stays half written, and the processor must give up.
        try:
            _, stderr = agent.process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            agent.process.kill()
            raise AssertionError("the processor still waits for an agent that reads nothing") from None
        assert agent.process.returncode == 1
        assert "the worker agent took no message" in stderr, stderr
    finally:
        agent.close()
