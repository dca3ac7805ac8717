"""`scaler FILE.toml`'s decisions (SiteCore) and what it reads from the file (site_parts): pure, nothing started."""

from __future__ import annotations

import pytest

from scaler.cli.site_core import (
    RUNNING,
    STOPPING,
    Begin,
    CouldNotStart,
    Exited,
    Reported,
    Say,
    SiteCore,
    Start,
    StopAll,
    StopAsked,
    Tick,
)
from scaler.cli.site_plan import Part, site_parts
from scaler.utility.config_file import ConfigFileError, parse_document
from scaler.utility.readiness import FAILED, LISTENING, REGISTERED

SCHEDULER = Part("scheduler", 0, LISTENING, ("scaler.cli.scheduler",))
STORE = Part("store", 1, LISTENING, ("scaler.cli.store",))
CLUSTER = Part("cluster", 2, REGISTERED, ("scaler.cli.cluster",))
UI = Part("ui", 2, None, ("scaler.cli.ui",))
TIMEOUT = 30.0


def started(actions: list) -> list[str]:
    return [action.part.name for action in actions if isinstance(action, Start)]


def stop_of(actions: list) -> StopAll | None:
    return next((action for action in actions if isinstance(action, StopAll)), None)


def said(actions: list) -> str:
    return "\n".join(action.message for action in actions if isinstance(action, Say))


def up_to_running(core: SiteCore) -> None:
    assert started(core.handle(Begin(), 0.0)) == ["scheduler"]
    assert started(core.handle(Reported("scheduler", LISTENING, "tcp://x"), 1.0)) == ["store"]
    assert started(core.handle(Reported("store", LISTENING), 2.0)) == ["cluster", "ui"]
    actions = core.handle(Reported("cluster", REGISTERED, "2 workers"), 3.0)
    assert "the site is up" in said(actions) and core.state == RUNNING


def test_parts_start_stage_by_stage_each_once_the_one_before_is_up() -> None:
    core = SiteCore([SCHEDULER, STORE, CLUSTER, UI], TIMEOUT)
    assert started(core.handle(Begin(), 0.0)) == ["scheduler"]
    assert core.handle(Tick(), 1.0) == []
    assert core.handle(Reported("cluster", REGISTERED), 1.0) == []  # not started: not its turn
    assert started(core.handle(Reported("scheduler", LISTENING), 1.0)) == ["store"]
    assert started(core.handle(Reported("store", LISTENING), 2.0)) == ["cluster", "ui"]
    assert core.state != RUNNING  # the cluster's workers have not registered yet
    core.handle(Reported("cluster", REGISTERED), 3.0)
    assert core.state == RUNNING


def test_parts_that_report_nothing_are_up_once_started() -> None:
    core = SiteCore([UI], TIMEOUT)
    actions = core.handle(Begin(), 0.0)
    assert started(actions) == ["ui"] and core.state == RUNNING


def test_a_stage_late_past_the_timeout_stops_the_site_naming_the_late_part() -> None:
    core = SiteCore([SCHEDULER, CLUSTER], TIMEOUT)
    core.handle(Begin(), 0.0)
    core.handle(Reported("scheduler", LISTENING), 10.0)
    assert core.handle(Tick(), 10.0 + TIMEOUT - 0.1) == []  # each stage has its own deadline
    actions = core.handle(Tick(), 10.0 + TIMEOUT)
    assert stop_of(actions) == StopAll(1)
    assert "cluster did not come up within 30 s" in said(actions)


def test_a_part_that_reports_failure_stops_the_site_with_its_reason() -> None:
    core = SiteCore([SCHEDULER, CLUSTER], TIMEOUT)
    core.handle(Begin(), 0.0)
    actions = core.handle(Reported("scheduler", FAILED, "cannot listen on tcp://x: in use"), 1.0)
    assert stop_of(actions) == StopAll(1)
    assert "scheduler could not start: cannot listen on tcp://x: in use" in said(actions)
    assert core.state == STOPPING and core.handle(Tick(), 100.0) == []


def test_a_part_that_cannot_be_started_stops_the_site() -> None:
    core = SiteCore([SCHEDULER], TIMEOUT)
    core.handle(Begin(), 0.0)
    actions = core.handle(CouldNotStart("scheduler", "No such file"), 0.0)
    assert stop_of(actions) == StopAll(1) and "scheduler could not start: No such file" in said(actions)


@pytest.mark.parametrize("status", [0, 1, -9])
def test_a_part_exiting_while_the_site_runs_stops_it_saying_which_part_and_why(status: int) -> None:
    core = SiteCore([SCHEDULER, STORE, CLUSTER, UI], TIMEOUT)
    up_to_running(core)
    actions = core.handle(Exited("cluster", status, ("line 1", "ValueError: boom")), 5.0)
    assert stop_of(actions) == StopAll(1)
    message = said(actions)
    how = "was killed by signal 9" if status < 0 else f"exited with status {status}"
    assert f"cluster {how} while the site was running" in message
    assert "ValueError: boom" in message


def test_a_signal_stops_the_site_with_status_0_and_what_follows_is_ignored() -> None:
    core = SiteCore([SCHEDULER, CLUSTER], TIMEOUT)
    up = core.handle(Begin(), 0.0)
    assert started(up) == ["scheduler"]
    actions = core.handle(StopAsked("SIGTERM"), 1.0)
    assert stop_of(actions) == StopAll(0) and "stopping on SIGTERM" in said(actions)
    # The parts exit as they are stopped: not a failure, and nothing more starts.
    assert core.handle(Exited("scheduler", -15), 2.0) == []
    assert core.handle(Reported("scheduler", LISTENING), 2.0) == []


# ------------------------------------------------------------------------------------------ the site file


def parts_of(text: str) -> list[Part]:
    return site_parts(parse_document(text, "site.toml"), "site.toml")


def test_the_site_file_lists_its_parts_in_start_order_with_the_address_written_once() -> None:
    parts = parts_of(
        "[ui]\nport = 8081\n[cluster]\nnum_of_workers = 2\n[store]\n[top]\n"
        "[scheduler]\naddress = 'tcp://127.0.0.1:2345'\n[site]\nstop_grace_seconds = 3\n"
    )
    assert [(part.name, part.stage) for part in parts] == [("scheduler", 0), ("store", 1), ("cluster", 2), ("ui", 2)]
    by_name = {part.name: part.command for part in parts}
    assert by_name["scheduler"] == ("scaler.cli.scheduler", "--config", "site.toml")
    assert by_name["cluster"] == ("scaler.cli.cluster", "--config", "site.toml", "--", "tcp://127.0.0.1:2345")
    assert by_name["store"][-2:] == ("--scheduler-address", "tcp://127.0.0.1:2345")
    assert by_name["ui"][-1] == "ipc:///tmp/127.0.0.1_2345_monitor"


def test_a_sections_own_address_is_kept() -> None:
    parts = parts_of("[scheduler]\naddress = 'tcp://127.0.0.1:2345'\n[cluster]\naddress = 'tcp://10.0.0.1:2345'\n")
    assert parts[1].command == ("scaler.cli.cluster", "--config", "site.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[site]\n", "site.toml: lists nothing to start"),
        ("[top]\naddress = 'tcp://127.0.0.1:1'\n", "site.toml: lists nothing to start"),
        ("[cluster]\nnum_of_workers = 2\n", "site.toml: [cluster] address: missing"),
        ("[scheduler]\nio_threads = 2\n", "site.toml: [scheduler] address: missing"),
        ("[scheduler]\naddress = 'tcp://127.0.0.1:1'\n[cluster]\nnum_of_workers = -1\n",
         "site.toml: [cluster] num_of_workers = -1: must be a whole number"),
        ("[scheduler]\naddress = 'tcp://127.0.0.1:1'\n[top]\nadress = 'x'\n", "site.toml: [top] adress: unknown key"),
    ],
)
def test_a_bad_site_file_is_refused_before_anything_starts(text: str, expected: str) -> None:
    with pytest.raises(ConfigFileError) as caught:
        parts_of(text)
    assert str(caught.value).startswith(expected)


def test_the_site_command_reads_its_own_options_from_the_site_section(tmp_path) -> None:
    from scaler.cli.site import build_parser

    path = tmp_path / "site.toml"
    path.write_text("[site]\nstart_timeout_seconds = 5\n[scheduler]\naddress = 'tcp://127.0.0.1:2345'\n")
    parsed = build_parser().parse_args([str(path)])
    assert (parsed.file, parsed.start_timeout_seconds, parsed.stop_grace_seconds) == (str(path), 5.0, 10.0)
    given = build_parser().parse_args(["--start-timeout-seconds", "7", str(path), "--stop-grace-seconds", "2"])
    assert (given.start_timeout_seconds, given.stop_grace_seconds) == (7.0, 2.0)
    path.write_text("[site]\nstart_timeout_seconds = 0\n")
    with pytest.raises(SystemExit):
        build_parser().parse_args([str(path)])
