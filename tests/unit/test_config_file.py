"""Config files: text in, checked values or one clear error out; and the command line over the file over the
defaults, for every command's parser (pure: parsers are built and run, nothing is started)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from scaler.adapters.slurm_settings import SLURM_CLUSTER
from scaler.cli import cluster as cluster_cli
from scaler.cli import scheduler as scheduler_cli
from scaler.cli import slurm_cluster as slurm_cli
from scaler.cli import store as store_cli
from scaler.cli import symphony_cluster as symphony_cli
from scaler.cli import top as top_cli
from scaler.cli.common import parse_command_line
from scaler.cli.option_docs import TABLES
from scaler.cluster.settings import CLUSTER
from scaler.scheduler.settings import SCHEDULER
from scaler.utility.config_file import SECTIONS, ConfigFileError, parse_document, section_values

ADDRESS = "tcp://127.0.0.1:2345"


def values(text: str, table=SCHEDULER) -> dict:
    return section_values(parse_document(text, "site.toml"), "site.toml", table)


def error_of(text: str, table=SCHEDULER) -> str:
    with pytest.raises(ConfigFileError) as caught:
        values(text, table)
    return str(caught.value)


def test_every_command_has_its_section() -> None:
    assert set(SECTIONS) == set(TABLES)


def test_values_are_read_as_the_command_line_reads_them() -> None:
    read = values(
        '[scheduler]\naddress = "tcp://127.0.0.1:2345"\nio-threads = 2\nclient_timeout_seconds = 30\n'
        'protected = false\nlogging_paths = "/dev/stdout"\n'
    )
    assert read == {
        "address": ADDRESS, "io_threads": 2, "client_timeout_seconds": 30.0, "protected": False,
        "logging_paths": ("/dev/stdout",),
    }
    assert isinstance(read["client_timeout_seconds"], float)
    assert values("[cluster]\nstore = false\ntags = ['gpu', 'big']\nnum_of_workers = 3\n", CLUSTER) == {
        "store": False, "tags": ("big", "gpu"), "num_of_workers": 3,
    }


def test_the_other_commands_sections_are_passed_over() -> None:
    assert values("[cluster]\nnum_of_workers = 0\n[ui]\nport = 1\n") == {}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[scheduler]\nio_threads = 0\n", "site.toml: [scheduler] io_threads = 0: must be a whole number at least 1"),
        ("[scheduler]\nio_threads = 1.5\n", "site.toml: [scheduler] io_threads = 1.5: must be a whole number"),
        ('[scheduler]\naddress = "nowhere"\n', "site.toml: [scheduler] address = \"nowhere\": 'nowhere' is not a "
         "ZeroMQ address"),
        ("[scheduler]\nprotected = 1\n", "site.toml: [scheduler] protected = 1: must be true or false"),
        ("[scheduler]\nio_thread = 2\n", "site.toml: [scheduler] io_thread: unknown key (did you mean io_threads?)"),
        ("[scheduler]\nconfig = 'x.toml'\n", "site.toml: [scheduler] config: unknown key"),
        ("[scheduler]\nio_threads = 2\nio-threads = 2\n", "site.toml: [scheduler] io-threads: given twice"),
        ("[schedular]\n", "site.toml: unknown section [schedular] (did you mean scheduler?)"),
        ("address = 'tcp://127.0.0.1:1'\n", "site.toml: unknown key 'address'"),
        ("[[scheduler]]\n[[scheduler]]\n", "site.toml: [scheduler] must be one table of options"),
        ("[scheduler\n", "site.toml: not valid TOML"),
    ],
)
def test_a_bad_file_names_the_file_the_key_and_the_rule(text: str, expected: str) -> None:
    assert error_of(text).startswith(expected)


def test_a_file_that_cannot_be_read_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(SystemExit) as exited:
        scheduler_cli.build_parser().parse_args(["--config", str(missing), ADDRESS])
    assert exited.value.code == 2


# ------------------------------------------------------------------------------------- through the parsers


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "site.toml"
    path.write_text(text)
    return str(path)


def parse(build, argv: list[str]) -> argparse.Namespace:
    return parse_command_line(build(), argv)


def test_scheduler_command_line_over_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, f'[scheduler]\naddress = "{ADDRESS}"\nio_threads = 2\nclient_timeout_seconds = 30\n')
    from_file = parse(scheduler_cli.build_parser, ["--config", path])
    assert (from_file.address, from_file.io_threads, from_file.client_timeout_seconds) == (ADDRESS, 2, 30.0)
    assert from_file.worker_timeout_seconds == SCHEDULER["worker_timeout_seconds"].default
    over = parse(scheduler_cli.build_parser, ["--config", path, "-it", "3", "tcp://127.0.0.1:3000"])
    assert (over.address, over.io_threads, over.client_timeout_seconds) == ("tcp://127.0.0.1:3000", 3, 30.0)
    # The file's values last one parse: the same parser without the file has the defaults again.
    parser = scheduler_cli.build_parser()
    parse_command_line(parser, ["--config", path])
    again = parse_command_line(parser, [ADDRESS])
    assert again.io_threads == SCHEDULER["io_threads"].default


def test_cluster_command_line_over_file_over_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, "[cluster]\nnum_of_workers = 3\nstore = false\ntags = ['gpu']\n")
    from_file = parse(cluster_cli.build_parser, ["--config", path, ADDRESS])
    assert (from_file.num_of_workers, from_file.store, from_file.tags) == (3, False, ("gpu",))
    over = parse(cluster_cli.build_parser, [f"--config={path}", "-n", "5", "--tags", "cpu", ADDRESS])
    assert (over.num_of_workers, over.store, over.tags) == (5, False, ("cpu",))
    assert parse(cluster_cli.build_parser, [ADDRESS]).num_of_workers == CLUSTER["num_of_workers"].default


def test_an_address_in_the_file_may_still_follow_the_logging_paths(tmp_path: Path) -> None:
    path = write(tmp_path, f'[scheduler]\naddress = "{ADDRESS}"\n')
    log = str(tmp_path / "s.log")
    parsed = parse(scheduler_cli.build_parser, ["--config", path, "-lp", log, "tcp://127.0.0.1:3000"])
    assert (parsed.address, parsed.logging_paths) == ("tcp://127.0.0.1:3000", (log,))


def test_a_required_argument_may_come_from_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, f'[top]\naddress = "{ADDRESS}"\n')
    assert top_cli.build_parser().parse_args(["--config", path]).address == ADDRESS
    assert top_cli.build_parser().parse_args(["--config", path, "tcp://127.0.0.1:9"]).address == "tcp://127.0.0.1:9"
    with pytest.raises(SystemExit):
        top_cli.build_parser().parse_args([])


def test_a_repeated_option_on_the_command_line_replaces_the_files(tmp_path: Path) -> None:
    path = write(tmp_path, "[slurm_cluster]\nsbatch_option = ['--account=a', '--qos=b']\n")
    base = ["--partition", "p", "--max-workers", "2"]
    assert parse(slurm_cli.build_parser, ["--config", path, *base, ADDRESS]).sbatch_option == ["--account=a", "--qos=b"]
    given = parse(slurm_cli.build_parser, ["--config", path, *base, "--sbatch-option=--qos=c", ADDRESS])
    assert given.sbatch_option == ["--qos=c"]
    assert SLURM_CLUSTER["sbatch_option"].default == []


def test_an_option_of_no_effect_in_the_file_is_noted_as_on_the_command_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[cluster]\nevent_loop = 'builtin'\n")
    parsed = parse(cluster_cli.build_parser, ["--config", path, ADDRESS])
    assert "--event-loop" in parsed.ignored_options_given


def test_a_bad_file_stops_the_parse_with_status_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(tmp_path, "[cluster]\nnum_of_workers = 0\n")
    with pytest.raises(SystemExit) as exited:
        parse(cluster_cli.build_parser, ["--config", path, ADDRESS])
    assert exited.value.code == 2
    message = capsys.readouterr().err
    assert f"{path}: [cluster] num_of_workers = 0: must be a whole number at least 1" in message
    assert "Traceback" not in message


def test_an_abbreviated_config_option_is_refused_not_ignored(tmp_path: Path) -> None:
    path = write(tmp_path, "[scheduler]\nio_threads = 2\n")
    with pytest.raises(SystemExit):
        scheduler_cli.build_parser().parse_args(["--conf", path, ADDRESS])


def test_a_later_argument_may_come_from_the_file_and_an_earlier_one_from_the_command_line(tmp_path: Path) -> None:
    """What `scaler FILE.toml` does for [symphony_cluster]: the service from the file, the address after `--`."""
    path = write(tmp_path, "[symphony_cluster]\nservice = 'ScalerService'\nbase_concurrency = 2\n")
    parsed = parse(symphony_cli.build_parser, ["--config", path, "--", ADDRESS])
    assert (parsed.address, parsed.service, parsed.base_concurrency) == (ADDRESS, "ScalerService", 2)


def test_the_store_reads_its_section(tmp_path: Path) -> None:
    path = write(tmp_path, "[store]\npool_idle_seconds = 5\n[cluster]\nnum_of_workers = 2\n")
    assert store_cli.build_parser().parse_args(["--config", path]).pool_idle_seconds == 5.0
