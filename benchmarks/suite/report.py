"""Medians over repetitions, the tables (text and Markdown), and the targets of issues 8 and 15."""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any

SCALER = "scaler"
PEER_ORDER = [
    "scaler", "scaler (native workers)", "scaler 1.9.9", "dask.distributed", "ray", "ProcessPoolExecutor",
    "loky (joblib)", "dask.threaded", "dask.multiprocessing",
]
WORKLOAD_NAMES = [
    "map", "submit", "rtt", "graph", "graph_adapter", "dask_array", "joblib", "cpu", "large_args", "memory",
    "memory_flat", "core_scaling", "core_memory", "two_hosts", "persist_query",
]


@dataclasses.dataclass(frozen=True)
class Row:
    workload: str
    metric: str
    label: str
    unit: str
    higher_is_better: bool
    # Peers other than Scaler are read from this workload instead (the adapter row compares with "graph").
    peers_from: str = ""
    show_count: bool = False


ROWS = [
    Row("map", "rate", "no-op tasks via map", "tasks/s", True, show_count=True),
    Row("submit", "rate", "no-op tasks, submit loop then result() each", "tasks/s", True, show_count=True),
    Row("rtt", "median_ms", "round trip submit(...).result(), median", "ms", False),
    Row("rtt", "p99_ms", "round trip, p99", "ms", False),
    Row("graph", "rate", "tree reduction graph (client.get / get)", "nodes/s", True, show_count=True),
    Row("graph_adapter", "rate", "same graph, Scaler via scaler.get (dask adapter)", "nodes/s", True, "graph", True),
    Row("dask_array", "seconds", "dask.array (x + x.T).mean(axis=0).sum()", "s", False),
    Row("dask_array", "first_seconds", "dask.array, first computation", "s", False),
    Row("persist_query", "query_seconds", "persisted dask.dataframe: groupby query, median", "s", False),
    Row("persist_query", "first_query_seconds", "persisted dask.dataframe: first query", "s", False),
    Row("persist_query", "persist_seconds", "persisted dask.dataframe: persist (made on workers)", "s", False),
    Row("joblib", "seconds", "tiny joblib calls", "s", False, show_count=True),
    Row("cpu", "wall_over_ideal", "20 ms pure-Python CPU tasks: wall / ideal", "x", False, show_count=True),
    Row("cpu", "wall_over_bare", "same, wall / the same split over bare processes", "x", False, show_count=True),
    Row("large_args", "mb_per_s", "tasks with a 50 MB argument", "MB/s", True, show_count=True),
    Row("large_args", "first_mb_per_s", "tasks with a 50 MB argument, first round", "MB/s", True, show_count=True),
    Row("memory", "scheduler_peak_mb", "peak RSS after the map run: scheduler", "MB", False),
    Row("memory", "workers_peak_mb", "peak RSS after the map run: all worker processes", "MB", False),
    # benchmarks/two_hosts.py, run once by run.py; its MB are 10^6 bytes.
    Row("two_hosts", "seconds", "two hosts: dask.array with 2.1 GB of intermediates", "s", False),
    Row("two_hosts", "mb_per_s", "two hosts: MB/s (x's bytes / s)", "MB/s", True),
    Row("two_hosts", "scheduler_peak_rss_mb", "two hosts: scheduler peak RSS", "MB", False),
    Row("two_hosts", "moved_mb", "two hosts: MB moved (x's bytes, a lower bound)", "MB", False),
    Row("two_hosts", "scheduler_link_mb", "two hosts: MB through the scheduler's link", "MB", False),
    Row("two_hosts", "relayed_mb", "two hosts: MB relayed by the scheduler", "MB", False),
]


# ---------------------------------------------------------------------------------------------- medians

# Figures whose min and max over the repetitions are kept beside the median.
_SPREAD_KEYS = (
    "rate", "seconds", "median_ms", "wall_over_ideal", "mb_per_s", "first_mb_per_s", "query_seconds", "persist_seconds",
)


def medians(runs: list[dict]) -> dict:
    """{peer: {workload: {metric: median over repetitions, "runs": n, "errors": [...]}}}."""
    collected: dict[str, dict[str, list[dict]]] = {}
    notes: dict[str, list[str]] = {}
    background: dict[str, list[float]] = {}
    for run in runs:
        peer = run["peer"]
        if "background_cores" in run:
            background.setdefault(peer, []).append(run["background_cores"])
        by_workload = collected.setdefault(peer, {})
        for workload, figures in run.get("workloads", {}).items():
            by_workload.setdefault(workload, []).append(figures)
        for note in run.get("notes", []) + ([run["failure"]] if run.get("failure") else []):
            if note not in notes.setdefault(peer, []):
                notes[peer].append(note)
    result: dict[str, dict] = {}
    for peer, by_workload in collected.items():
        result[peer] = {"_notes": notes.get(peer, [])}
        for workload, samples in by_workload.items():
            merged: dict[str, Any] = {"runs": len(samples)}
            errors = [sample["error"] for sample in samples if "error" in sample]
            good = [sample for sample in samples if "error" not in sample]
            if errors:
                merged["errors"] = errors
            for sample in good:
                for key, value in sample.items():
                    if isinstance(value, (int, float)) and not isinstance(value, bool):
                        continue
                    merged.setdefault(key, value)
            numeric_keys = {key for sample in good for key, value in sample.items()
                            if isinstance(value, (int, float)) and not isinstance(value, bool)}
            for key in numeric_keys:
                values = [sample[key] for sample in good if isinstance(sample.get(key), (int, float))]
                merged[key] = statistics.median(values)
                if len(values) > 1 and key in _SPREAD_KEYS:
                    merged[f"{key}_spread"] = [min(values), max(values)]
            result[peer][workload] = merged
    for peer, peer_notes in notes.items():
        result.setdefault(peer, {"_notes": peer_notes})
    for peer, loads in background.items():
        summary = [min(loads), statistics.median(loads), max(loads)]
        result.setdefault(peer, {"_notes": []})["_background_cores"] = summary
    return result


def _figure(medians_: dict, peer: str, workload: str, metric: str) -> float | None:
    value = medians_.get(peer, {}).get(workload, {}).get(metric)
    return float(value) if isinstance(value, (int, float)) and not math.isnan(value) else None


def _peer_workload(row: Row, peer: str) -> str:
    return row.peers_from if row.peers_from and peer != SCALER else row.workload


def cell(medians_: dict, row: Row, peer: str) -> str:
    workload = _peer_workload(row, peer)
    figures = medians_.get(peer, {}).get(workload)
    if figures is None:
        return ""
    if "unavailable" in figures:
        return "not available yet"
    if "skipped" in figures:
        return "skipped"
    value = _figure(medians_, peer, workload, row.metric)
    if value is None:
        return "error" if figures.get("errors") else ""
    text = _format(value, row.unit)
    if row.show_count and "count" in figures:
        text += f" [{_short(figures['count'])}]"
    return text


def ratio(medians_: dict, row: Row, peer: str) -> float | None:
    """How many times better Scaler does than `peer` on this row (> 1: Scaler is better)."""
    ours = _figure(medians_, SCALER, row.workload, row.metric)
    theirs = _figure(medians_, peer, _peer_workload(row, peer), row.metric)
    if ours is None or theirs is None or ours == 0 or theirs == 0:
        return None
    return ours / theirs if row.higher_is_better else theirs / ours


def _format(value: float, unit: str) -> str:
    if unit in ("tasks/s", "nodes/s"):
        return f"{value:,.0f}/s"
    if unit == "ms":
        return f"{value:.3f} ms"
    if unit == "s":
        return f"{value:.2f} s"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "MB/s":
        return f"{value:,.0f} MB/s"
    if unit == "MB":
        return f"{value:,.1f} MB" if value < 10 else f"{value:,.0f} MB"
    return f"{value:g}"


def _short(count: float) -> str:
    count = int(count)
    if count >= 1_000_000 and count % 1_000_000 == 0:
        return f"{count // 1_000_000}M"
    if count >= 1000 and count % 1000 == 0:
        return f"{count // 1000}k"
    return f"{count:,}"


# ---------------------------------------------------------------------------------------------- targets


def targets(medians_: dict, core: dict) -> list[dict]:
    rows = {(row.workload, row.metric): row for row in ROWS}
    found: list[dict] = []

    def versus(row_key: tuple[str, str], peer: str, needed: float, text: str) -> None:
        value = ratio(medians_, rows[row_key], peer)
        found.append({"target": text, "value": value, "needed": needed, "unit": "x",
                      "met": None if value is None else value >= needed})

    versus(("map", "rate"), "scaler 1.9.9", 50, "map: >= 50x the original Scaler's tasks/s")
    versus(("map", "rate"), "ProcessPoolExecutor", 5, "map: >= 5x ProcessPoolExecutor(chunksize=1)")
    versus(("submit", "rate"), "scaler 1.9.9", 10, "submit loop: >= 10x the original Scaler")
    versus(("submit", "rate"), "ray", 3, "submit loop: >= 3x Ray")
    rtt = _figure(medians_, SCALER, "rtt", "median_ms")
    found.append({"target": "round trip median < 0.5 ms", "value": rtt, "needed": 0.5, "unit": "ms",
                  "met": None if rtt is None else rtt < 0.5})
    versus(("graph", "rate"), "scaler 1.9.9", 20, "graph: >= 20x the original Scaler")
    versus(("graph", "rate"), "dask.distributed", 20, "graph: >= 20x dask.distributed")
    versus(("graph", "rate"), "dask.threaded", 0.5, "graph: within 2x of dask.threaded.get (client.get)")
    versus(("graph_adapter", "rate"), "dask.threaded", 0.5, "graph: within 2x of dask.threaded.get (scaler.get)")
    versus(("joblib", "seconds"), "loky (joblib)", 0.5, 'joblib: "scaler" backend within 2x of loky')
    versus(("joblib", "seconds"), "dask.distributed", 2, "joblib: >= 2x faster than the dask backend")
    efficiency = _figure(medians_, SCALER, "cpu", "wall_over_ideal")
    found.append({"target": "CPU-bound: wall <= 1.1x ideal (>= 90% efficiency)", "value": efficiency,
                  "needed": 1.1, "unit": "wall/ideal", "met": None if efficiency is None else efficiency <= 1.1})
    over_bare = _figure(medians_, SCALER, "cpu", "wall_over_bare")
    found.append({"target": "CPU-bound, against bare processes on this machine: wall <= 1.1x", "value": over_bare,
                  "needed": 1.1, "unit": "wall/bare", "met": None if over_bare is None else over_bare <= 1.1})
    memory = core.get("core_memory", {})
    if memory and "error" not in memory:
        leftovers = sum(memory.get(key, 0) for key in (
            "task_records", "unassigned_queue_entries", "dependency_entries", "assigned_on_workers", "client_task_ids"
        ))
        grown = memory.get("blocks_added_after_tenth", 0)
        found.append({
            "target": f"core after {_short(memory['tasks'])} tasks: no per-task state (entries left, blocks added "
                      "after the first tenth)",
            "value": f"{leftovers} entries, {grown:+,} blocks", "needed": "0 entries, < 1 block per 100 tasks",
            "unit": "", "met": leftovers == 0 and grown < memory["tasks"] / 100,
        })
    flat = medians_.get(SCALER, {}).get("memory_flat", {})
    if "growth_mb" in flat:
        found.append({
            "target": f"scheduler RSS flat from {_short(flat['first'])} to {_short(flat['count'])} tasks (< 5 MB)",
            "value": flat["growth_mb"], "needed": 5, "unit": "MB", "met": flat["growth_mb"] < 5,
        })
    return found


# Issue 15's "today": the full run of 2026-11-22 (checkout 0ff8657, 3 interleaved repetitions, 2 cores), the
# table in benchmarks/README.md's Results section (added by commit 0b34131: `git show 0b34131:benchmarks/README.md`
# once a later run replaces it). The figures below are as that table printed them.
TODAY_DATE = "2026-11-22"
TODAY_LARGE_ARGS_MB_PER_S = 323.0  # tasks with a 50 MB argument
# (workload, metric, label, figure, reference peer, its figure): the small-task workloads that must not get
# slower. This shared machine's speed changes from day to day (on 2026-11-24 every peer ran its no-op map 30
# to 45% slower than on 2026-11-22), so the target compares Scaler's ratio to a reference peer of the same
# run with that ratio on 2026-11-22; the bare figures against 2026-11-22's are reported beside it.
TODAY_SMALL_TASKS = [
    ("map", "rate", "map", 158_282.0, "ProcessPoolExecutor", 15_454.0),
    ("submit", "rate", "submit loop", 46_992.0, "ProcessPoolExecutor", 17_177.0),
    ("rtt", "median_ms", "round trip median", 0.748, "ProcessPoolExecutor", 0.137),
    ("graph", "rate", "graph (client.get)", 89_151.0, "dask.threaded", 18_986.0),
    ("graph_adapter", "rate", "graph (scaler.get)", 92_431.0, "dask.threaded", 18_986.0),
    ("joblib", "seconds", "joblib", 0.11, "loky (joblib)", 0.05),  # printed with 2 decimals
]
# "No slower beyond noise": the repetitions of one run spread by about 10% around their median on this
# 2-core machine (the *_spread figures in a run's JSON), so a figure at 0.9x today's or better counts.
NOISE_ALLOWANCE = 0.9
TWO_HOSTS_SCHEDULER_RSS_MB = 150.0
TWO_HOSTS_RELAYED_PERCENT = 1.0


def targets_issue_15(medians_: dict) -> list[dict]:
    """Issue 15's targets. "value" is a ratio (x, > 1: Scaler better), MB or a percentage; "needed" None: reported
    without a threshold."""
    rows = {(row.workload, row.metric): row for row in ROWS}
    found: list[dict] = []

    def add(text: str, value: float | None, needed: float | None, unit: str, met: bool | None) -> None:
        found.append({"target": text, "value": value, "needed": needed, "unit": unit,
                      "met": None if value is None or needed is None else met})

    def versus(row_key: tuple[str, str], peer: str, needed: float | None, text: str) -> None:
        value = ratio(medians_, rows[row_key], peer)
        add(text, value, needed, "x", value is not None and needed is not None and value >= needed)

    def against_today(workload: str, metric: str, today: float, needed: float | None, text: str) -> None:
        ours = _figure(medians_, SCALER, workload, metric)
        if ours is None or ours == 0:
            value = None
        else:
            value = ours / today if rows[(workload, metric)].higher_is_better else today / ours
        add(text, value, needed, "x", value is not None and needed is not None and value >= needed)

    # The steady figure (median of the rounds after the first) and the first round, each against its like:
    # the 2026-11-22 figure was a single round after the warm-up, so it compares with the first round.
    versus(("large_args", "mb_per_s"), "ray", 2, "50 MB arguments (median of 3 rounds after the first): >= 2x Ray's")
    versus(("large_args", "first_mb_per_s"), "ray", 2, "50 MB arguments, first round: >= 2x Ray's first round")
    against_today("large_args", "mb_per_s", TODAY_LARGE_ARGS_MB_PER_S, 4,
                  f"50 MB arguments (steady): >= 4x {TODAY_DATE}'s {TODAY_LARGE_ARGS_MB_PER_S:,.0f} MB/s")
    against_today("large_args", "first_mb_per_s", TODAY_LARGE_ARGS_MB_PER_S, 4,
                  f"50 MB arguments, first round: >= 4x {TODAY_DATE}'s {TODAY_LARGE_ARGS_MB_PER_S:,.0f} MB/s")
    versus(("dask_array", "seconds"), "dask.threaded", 1 / 1.5,
           "dask.array (median of 3 after the first): within 1.5x of dask.threaded.get")
    two_hosts = medians_.get(SCALER, {}).get("two_hosts", {})
    rss = _figure(medians_, SCALER, "two_hosts", "scheduler_peak_rss_mb")
    add(f"two hosts: scheduler peak RSS < {TWO_HOSTS_SCHEDULER_RSS_MB:.0f} MB", rss, TWO_HOSTS_SCHEDULER_RSS_MB,
        "MB", rss is not None and rss < TWO_HOSTS_SCHEDULER_RSS_MB)
    relayed, moved = two_hosts.get("relayed_mb"), two_hosts.get("moved_mb")
    percent = 100 * relayed / moved if isinstance(relayed, (int, float)) and moved else None
    add(f"two hosts: bytes relayed by the scheduler < {TWO_HOSTS_RELAYED_PERCENT:g}% of the bytes moved", percent,
        TWO_HOSTS_RELAYED_PERCENT, "%", percent is not None and percent < TWO_HOSTS_RELAYED_PERCENT)
    versus(("two_hosts", "mb_per_s"), "dask.distributed", None, "two hosts: MB/s against dask.distributed")
    for workload, metric, label, today, peer, peer_today in TODAY_SMALL_TASKS:
        row = rows[(workload, metric)]
        now = ratio(medians_, row, peer)
        then = today / peer_today if row.higher_is_better else peer_today / today
        value = None if now is None else now / then
        add(f"{label}: no slower than {TODAY_DATE} against {peer} in the same run ({then:.2f}x then; "
            f">= {NOISE_ALLOWANCE:g} of it allows for noise)", value, NOISE_ALLOWANCE, "x",
            value is not None and value >= NOISE_ALLOWANCE)
    for workload, metric, label, today, _, _ in TODAY_SMALL_TASKS:
        against_today(workload, metric, today, None,
                      f"{label} against {TODAY_DATE}'s own figure ({_format(today, rows[(workload, metric)].unit)}; "
                      "the machine's speed included)")
    return found


# ---------------------------------------------------------------------------------------------- rendering

# (issue, the document's key for its list of targets), in the order printed.
TARGET_BLOCKS = [(8, "targets"), (15, "targets_issue_15")]


def machine_line(machine: dict) -> str:
    return (f"{machine['date']}, {machine['nproc']} cores ({machine['cpu']}), {machine['memory_gb']} GB, "
            f"Python {machine['python']}, {machine['platform']}, checkout {machine['commit']}")


def _peers(document: dict) -> list[str]:
    present = set(document["medians"])
    return [peer for peer in PEER_ORDER if peer in present]


def _rows(document: dict) -> list[Row]:
    medians_ = document["medians"]
    return [row for row in ROWS if any(cell(medians_, row, peer) for peer in _peers(document))]


def render(document: dict) -> str:
    medians_ = document["medians"]
    peers = _peers(document)
    rows = _rows(document)
    width = max([len(peer) for peer in peers] + [16]) + 2
    lines = [machine_line(document["machine"]),
             f"{document['workers']} workers for every peer; median of {document['repeats']} interleaved run(s); "
             "[n] = tasks or calls behind a rate"]
    header = f"{'workload':<52}" + "".join(f"{peer:>{width}}" for peer in peers)
    lines += ["", header, "-" * len(header)]
    for row in rows:
        lines.append(f"{row.label:<52}" + "".join(f"{cell(medians_, row, peer):>{width}}" for peer in peers))
    lines.append(f"{'(CPU used by other processes meanwhile, cores)':<52}"
                 + "".join(f"{_background(medians_, peer):>{width}}" for peer in peers))
    others = [peer for peer in peers if peer != SCALER]
    lines += ["", "Scaler's advantage (x > 1: Scaler better; rates compared as rates)",
              f"{'workload':<52}" + "".join(f"{peer:>{width}}" for peer in others)]
    for row in rows:
        values = [ratio(medians_, row, peer) for peer in others]
        lines.append(f"{row.label:<52}" + "".join(
            f"{'' if value is None else f'{value:.2f}x':>{width}}" for value in values
        ))
    lines += ["", *_core_lines(document), "", *_memory_flat_lines(document)]
    for issue, key in TARGET_BLOCKS:
        lines += ["", f"Targets (issue {issue})"]
        for target in document.get(key, []):
            lines.append(f"  [{_mark(target)}] {target['target']}: {_target_value(target)}")
    notes = _notes(document)
    if notes:
        lines += ["", "Notes", *[f"  {note}" for note in notes]]
    return "\n".join(lines)


def render_markdown(document: dict) -> str:
    medians_ = document["medians"]
    peers = _peers(document)
    rows = _rows(document)
    others = [peer for peer in peers if peer != SCALER]
    lines = [f"{machine_line(document['machine'])}; {document['workers']} workers for every peer; median of "
             f"{document['repeats']} interleaved run(s); [n] = tasks or calls behind a rate.", "",
             "| workload | " + " | ".join(peers) + " |", "| --- |" + " --- |" * len(peers)]
    for row in rows:
        lines.append(f"| {row.label} | " + " | ".join(cell(medians_, row, peer) for peer in peers) + " |")
    lines.append("| *CPU used by other processes meanwhile, cores* | "
                 + " | ".join(_background(medians_, peer) for peer in peers) + " |")
    lines += ["", "Scaler's advantage (x > 1: Scaler better):", "",
              "| workload | " + " | ".join(others) + " |", "| --- |" + " --- |" * len(others)]
    for row in rows:
        values = [ratio(medians_, row, peer) for peer in others]
        lines.append(f"| {row.label} | " + " | ".join("" if v is None else f"{v:.2f}x" for v in values) + " |")
    core = _core_lines(document)
    if core:
        lines += ["", "```", *core, "```"]
    flat = _memory_flat_lines(document)
    if flat:
        lines += ["", *flat]
    for issue, key in TARGET_BLOCKS:
        lines += ["", f"| target (issue {issue}) | measured | met |", "| --- | --- | --- |"]
        for target in document.get(key, []):
            lines.append(f"| {target['target']} | {_target_value(target)} | {_mark(target)} |")
    notes = _notes(document)
    if notes:
        lines += ["", *[f"- {note}" for note in notes]]
    return "\n".join(lines) + "\n"


def _core_lines(document: dict) -> list[str]:
    core = document.get("core") or {}
    points = sorted({int(key.rsplit("_", 1)[1]) for key in core if key.startswith("core_scaling_")})
    if not points:
        return []
    lines = ["Scheduler core alone (sans-I/O, simulated workers; time inside SchedulerCore.on_message)",
             f"{'workers':>8}{'us/task, map chunks of 1000':>30}{'tasks/results msg':>20}"
             f"{'us/task, 100 tasks per msg':>30}"]
    for workers in points:
        chunked = core.get(f"core_scaling_{workers}", {})
        batched = core.get(f"core_scaling_batched_{workers}", {})
        lines.append(
            f"{workers:>8}{_us(chunked.get('core_us_per_task')):>30}"
            f"{_number(chunked.get('tasks_per_results_message')):>20}{_us(batched.get('core_us_per_task')):>30}"
        )
    memory = core.get("core_memory")
    if memory and "error" not in memory:
        lines.append(
            f"memory check: {_short(memory['tasks'])} tasks on {memory['workers']} workers; left behind: "
            f"{memory['task_records']} task records, {memory['unassigned_queue_entries']} queue entries, "
            f"{memory['assigned_on_workers']} assignments; Python blocks {memory['allocated_blocks_after_tenth']:,} "
            f"after the first tenth, {memory['allocated_blocks_after']:,} after all; RSS "
            f"{memory['rss_before_mb']:.0f} -> {memory['rss_after_tenth_mb']:.0f} -> {memory['rss_after_mb']:.0f} MB"
        )
    return lines


def _memory_flat_lines(document: dict) -> list[str]:
    flat = document["medians"].get(SCALER, {}).get("memory_flat", {})
    if "growth_mb" not in flat:
        return []
    return [f"Real cluster: scheduler RSS {flat['scheduler_rss_after_first_mb']:.1f} MB after {_short(flat['first'])}"
            f" tasks, {flat['scheduler_rss_after_all_mb']:.1f} MB after {_short(flat['count'])} "
            f"({flat['growth_mb']:+.1f} MB)"]


def _notes(document: dict) -> list[str]:
    notes = [f"{peer}: skipped: {reason}" for peer, reason in document.get("skipped", {}).items()]
    for peer in _peers(document):
        peer_medians = document["medians"][peer]
        for note in peer_medians.get("_notes", []):
            notes.append(f"{peer}: {note}")
        for workload, figures in peer_medians.items():
            if workload.startswith("_"):
                continue
            if figures.get("errors"):
                notes.append(f"{peer} {workload}: error in {len(figures['errors'])} run(s): {figures['errors'][0]}")
            if figures.get("unavailable"):
                notes.append(f"{peer} {workload}: {figures['unavailable']}")
            if figures.get("note"):
                notes.append(f"{peer} {workload}: {figures['note']}")
    return notes


def _background(medians_: dict, peer: str) -> str:
    loads = medians_.get(peer, {}).get("_background_cores")
    return f"{loads[1]:.2f} (max {loads[2]:.2f})" if loads else ""


def _mark(target: dict) -> str:
    if target["value"] is not None and target["needed"] is None:
        return "reported"
    met = target["met"]
    return "n/a" if met is None else ("met" if met else "MISSED")


def _target_value(target: dict) -> str:
    value = target["value"]
    if value is None:
        return "not measured"
    if isinstance(value, str):
        return f"{value} (needed {target['needed']})"
    unit = target["unit"]
    if target["needed"] is None:
        return f"{value:.2f} {unit}"
    comparison = "<=" if unit in ("wall/ideal", "wall/bare") else ("<" if unit in ("ms", "MB", "%") else ">=")
    return f"{value:.2f} {unit} (needed {comparison} {target['needed']:.3g})"


def _us(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.1f}"
