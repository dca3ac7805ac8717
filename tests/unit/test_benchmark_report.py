"""benchmarks/suite/report.py: issue 15's targets from a run's medians, and the tables that show them."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "suite"


@pytest.fixture(scope="module")
def report() -> ModuleType:
    specification = importlib.util.spec_from_file_location("benchmark_report", SUITE / "report.py")
    assert specification is not None and specification.loader is not None
    module = importlib.util.module_from_spec(specification)
    sys.modules[specification.name] = module  # dataclasses looks its module up while building Row
    try:
        specification.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop(specification.name, None)


def _run(peer: str, workloads: dict) -> dict:
    return {"peer": peer, "repetition": 0, "workloads": workloads, "notes": []}


def _document(report: ModuleType, runs: list[dict]) -> dict:
    medians = report.medians(runs)
    machine = {"date": "2026-11-24", "nproc": 2, "cpu": "cpu", "memory_gb": 24, "python": "3.11", "platform": "linux",
               "commit": "abc"}
    return {"machine": machine, "workers": 2, "repeats": 1, "medians": medians, "core": {}, "skipped": {},
            "targets": report.targets(medians, {}), "targets_issue_15": report.targets_issue_15(medians)}


def _by_text(targets: list[dict], start: str) -> dict:
    matching = [target for target in targets if target["target"].startswith(start)]
    assert len(matching) == 1, (start, [target["target"] for target in targets])
    return matching[0]


def test_issue_15_targets_are_ratios_against_peers_today_and_two_hosts_figures(report: ModuleType) -> None:
    runs = [
        _run("scaler", {
            "large_args": {"count": 20, "mb_per_s": 1400.0, "first_mb_per_s": 1000.0},
            "dask_array": {"seconds": 0.2, "first_seconds": 0.5},
            # Against ProcessPoolExecutor, 10.24x on 2026-11-22: 90,000 / 9,000 = 10x is 0.98 of it, within the
            # noise allowance, though slower than 2026-11-22's own 158,282/s (the machine's speed changes).
            "map": {"count": 100_000, "rate": 90_000.0},
            "rtt": {"median_ms": 0.9},  # against ProcessPoolExecutor's 0.137 ms: 0.152x, 0.83 of 0.183x: slower
            "two_hosts": {"seconds": 4.0, "mb_per_s": 537.0, "scheduler_peak_rss_mb": 42.0, "moved_mb": 2147.5,
                          "relayed_mb": 30.0, "scheduler_link_mb": 5.0},
        }),
        _run("ray", {"large_args": {"count": 20, "mb_per_s": 800.0, "first_mb_per_s": 400.0}}),
        _run("ProcessPoolExecutor", {"map": {"count": 20_000, "rate": 9_000.0}, "rtt": {"median_ms": 0.137}}),
        _run("dask.threaded", {"dask_array": {"seconds": 0.15, "first_seconds": 0.15}}),
        _run("dask.distributed", {"two_hosts": {"seconds": 5.0, "mb_per_s": 430.0, "scheduler_peak_rss_mb": 90.0,
                                                "moved_mb": 2147.5, "scheduler_link_mb": 1.0}}),
    ]
    targets = report.targets_issue_15(report.medians(runs))

    versus_ray = _by_text(targets, "50 MB arguments (median of 3 rounds after the first): >= 2x Ray")
    assert versus_ray["value"] == pytest.approx(1400 / 800) and versus_ray["met"] is False
    first_versus_ray = _by_text(targets, "50 MB arguments, first round: >= 2x Ray")
    assert first_versus_ray["value"] == pytest.approx(1000 / 400) and first_versus_ray["met"] is True
    versus_today = _by_text(targets, "50 MB arguments (steady): >= 4x 2026-11-22")
    assert versus_today["value"] == pytest.approx(1400 / 323) and versus_today["met"] is True
    first_versus_today = _by_text(targets, "50 MB arguments, first round: >= 4x 2026-11-22")
    assert first_versus_today["value"] == pytest.approx(1000 / 323) and first_versus_today["met"] is False
    array = _by_text(targets, "dask.array")
    assert array["value"] == pytest.approx(0.75) and array["met"] is True  # 0.2 s against 0.15 s: within 1.5x
    rss = _by_text(targets, "two hosts: scheduler peak RSS")
    assert rss["value"] == 42.0 and rss["met"] is True
    relayed = _by_text(targets, "two hosts: bytes relayed")
    assert relayed["value"] == pytest.approx(100 * 30 / 2147.5) and relayed["met"] is False  # 1.4% >= 1%
    versus_dask = _by_text(targets, "two hosts: MB/s against dask.distributed")
    assert versus_dask["value"] == pytest.approx(537 / 430) and versus_dask["met"] is None  # no threshold
    map_target = _by_text(targets, "map: no slower")
    assert map_target["value"] == pytest.approx(10 / (158_282 / 15_454)) and map_target["met"] is True
    assert _by_text(targets, "map against 2026-11-22's own figure")["met"] is None  # reported only
    assert _by_text(targets, "round trip median: no slower")["met"] is False
    assert _by_text(targets, "submit loop: no slower")["value"] is None  # not measured in this run


def test_tables_show_the_issue_15_block_the_new_rows_and_a_skipped_two_hosts_workload(report: ModuleType) -> None:
    runs = [
        _run("scaler", {"dask_array": {"seconds": 0.2, "first_seconds": 0.5},
                        "two_hosts": {"skipped": "needs root"}}),
        _run("dask.threaded", {"dask_array": {"seconds": 0.15, "first_seconds": 0.15}}),
    ]
    document = _document(report, runs)

    text = report.render(document)
    markdown = report.render_markdown(document)

    assert "Targets (issue 15)" in text and "| target (issue 15) | measured | met |" in markdown
    assert "[MISSED] round trip median: no slower" not in text  # not measured: n/a, never missed
    assert "[n/a] round trip median: no slower than 2026-11-22 against ProcessPoolExecutor" in text
    assert "| dask.array, first computation | 0.50 s | 0.15 s |" in markdown
    assert "| dask.array (x + x.T).mean(axis=0).sum() | 0.20 s | 0.15 s |" in markdown
    assert "| two hosts: dask.array with 2.1 GB of intermediates | skipped |" in markdown
