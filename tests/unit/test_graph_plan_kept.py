"""Planning a graph whose values include kept futures (Client.get, persist_graph): a key holding one is a
dependency like a task's key, in plain arguments, in containers and through aliases, and never a call."""

from __future__ import annotations

from scaler.client.future import ScalerFuture
from scaler.client.graph import Slot, TemplateCall, plan_graph


def _kept(task_id: int) -> ScalerFuture:
    return ScalerFuture(task_id, connection=None, serializer=None, keep=True)  # type: ignore[arg-type]


def test_a_key_holding_a_kept_future_is_a_reference_not_a_literal_argument() -> None:
    chunk = _kept(7)
    graph = {"chunk": chunk, "alias": "chunk", "n": (len, "alias"), "both": (sum, ["chunk", "n"])}
    plan = plan_graph(graph, ["n", "both"])
    calls = {call.key: call for call in plan.calls}
    assert set(calls) == {"n", "both"}  # the future is no call
    assert calls["n"].reference_slots == {0: "chunk"} and calls["n"].arguments == [None]
    wrapped = calls["both"]
    assert isinstance(wrapped.function, TemplateCall)
    assert wrapped.arguments[0] == ([Slot(0), Slot(1)],)  # inside a container: a slot, never the future itself
    assert set(wrapped.reference_slots.values()) == {"chunk", "n"}
    assert plan.futures == {"chunk": chunk}


def test_a_requested_key_holding_a_kept_future_is_a_literal_of_the_plan() -> None:
    chunk = _kept(8)
    plan = plan_graph({"chunk": chunk}, ["chunk"])
    assert plan.calls == [] and plan.literals == {"chunk": chunk}


def test_an_ordering_function_sees_only_the_tasks() -> None:
    plan = plan_graph({"chunk": _kept(9), "n": (len, "chunk")}, ["n"], order="python")
    assert [call.key for call in plan.calls] == ["n"]
