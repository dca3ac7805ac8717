"""`progress=True` on Client.map and Client.get draws a bar of finished tasks on stderr; off by default."""

from __future__ import annotations

import inspect

import pytest

from scaler import Client

pytestmark = pytest.mark.timeout(120)


def test_progress_is_off_by_default() -> None:
    for method in (Client.map, Client.get):
        parameter = inspect.signature(method).parameters["progress"]
        assert parameter.default is False and parameter.kind is inspect.Parameter.KEYWORD_ONLY


def final_line(text: str) -> str:
    return text.replace("\r", "\n").strip().splitlines()[-1]


def test_map_with_progress_counts_every_task(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    assert client.map(pow, [(i, 2) for i in range(500)], progress=True) == [i * i for i in range(500)]
    line = final_line(capsys.readouterr().err)
    assert line.startswith("map: 100%") and "500/500" in line


def test_map_without_progress_prints_nothing(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    assert client.map(pow, [(i, 2) for i in range(50)]) == [i * i for i in range(50)]
    assert capsys.readouterr().err == ""


def test_a_failing_map_still_closes_its_bar(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ZeroDivisionError):
        client.map(divmod, [(1, 0)] + [(i, 1) for i in range(20)], progress=True)
    assert "/21" in capsys.readouterr().err


def test_get_with_progress_counts_the_requested_keys(client: Client, capsys: pytest.CaptureFixture[str]) -> None:
    graph = {"a": 1, "b": (pow, "a", 2), "c": (pow, "b", 3), "d": (max, "b", "c")}
    assert client.get(graph, ["b", "c", "d"], progress=True) == {"b": 1, "c": 1, "d": 1}
    line = final_line(capsys.readouterr().err)
    assert line.startswith("get: 100%") and "3/3" in line
