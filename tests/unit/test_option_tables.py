"""Every derivation of the option tables agrees with its table, so that no second copy of a setting creeps back:
the command lines, the config dataclasses, the scheduler core's config, SchedulerClusterCombo's and Cluster's
keywords. And what -h shows is right (pure: parsers are built, nothing is started)."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import os
import re
from typing import Any, Callable

import pytest

from scaler.adapters.slurm_settings import SLURM_CLUSTER
from scaler.adapters.symphony.settings import SYMPHONY_CLUSTER
from scaler.cli import cluster as cluster_cli
from scaler.cli import option_docs
from scaler.cli import scheduler as scheduler_cli
from scaler.cli import slurm_cluster as slurm_cli
from scaler.cli import symphony_cluster as symphony_cli
from scaler.cli import top as top_cli
from scaler.cli import ui as ui_cli
from scaler.cli.store import build_parser as store_parser
from scaler.cluster.cluster import Cluster
from scaler.cluster.combo import SchedulerClusterCombo
from scaler.cluster.settings import CLUSTER, CLUSTER_KEYWORDS, combo_keywords
from scaler.cluster.store_settings import StoreSettings
from scaler.scheduler.config import SchedulerConfig
from scaler.scheduler.core.core_config import CoreConfig, frame_limit
from scaler.scheduler.settings import SCHEDULER
from scaler.store.server_config import StoreServerConfig
from scaler.store.settings import STORE
from scaler.ui.settings import TOP, UI
from scaler.utility.option_table import LIST, OFF_SWITCH, ON_SWITCH, POSITIONAL, REPEATED, SWITCH, OptionTable
from scaler.worker.config import LIBRARY_LOGGING_LEVEL, WorkerConfig
from tests.conftest import REPO_ROOT

COMMANDS: list[tuple[OptionTable, Callable[[], argparse.ArgumentParser]]] = [
    (SCHEDULER, scheduler_cli.build_parser),
    (CLUSTER, cluster_cli.build_parser),
    (STORE, store_parser),
    (TOP, top_cli.build_parser),
    (UI, ui_cli.build_parser),
    (SLURM_CLUSTER, slurm_cli.build_parser),
    (SYMPHONY_CLUSTER, symphony_cli.build_parser),
]
IDS = [table.section for table, _ in COMMANDS]

# Config dataclasses, the table that declares their settings, and the fields that are no option on purpose.
CONFIGS: list[tuple[type, OptionTable, set[str]]] = [
    (SchedulerConfig, SCHEDULER, set()),
    (WorkerConfig, CLUSTER, {"name", "store_address"}),  # set per worker by the Cluster
    (StoreSettings, CLUSTER, {"spill_directory"}),
    (StoreServerConfig, STORE, {"work_directory_parent"}),
]
# Defaults a Python entry point holds on purpose otherwise than its command line.
LIBRARY_DEFAULTS = {
    (SchedulerConfig, "address"): dataclasses.MISSING,  # required from Python
    (WorkerConfig, "address"): dataclasses.MISSING,
    (WorkerConfig, "logging_level"): LIBRARY_LOGGING_LEVEL,  # a program starting workers is not flooded
    (StoreServerConfig, "capacity_bytes"): dataclasses.MISSING,  # the store's main says 30% of memory
    (StoreServerConfig, "spill_directory"): "",
    (StoreServerConfig, "host_key"): "",
}


def parser_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {action.dest: action for action in parser._actions if action.dest != "help"}


@pytest.mark.parametrize(("table", "build"), COMMANDS, ids=IDS)
def test_the_parser_has_every_option_of_the_table_with_its_default(table: OptionTable, build: Callable) -> None:
    actions = parser_actions(build())
    # --config and --version (on the commands that print one) are the parser's own, not options of the table.
    assert set(actions) - {"version"} == {option.name for option in table} | {"config"}
    for option in table:
        action = actions[option.name]
        assert action.default == option.default, option.name
        if option.form != POSITIONAL:
            negative = {"--no-" + option.long_flag[2:]} if option.form == SWITCH else set()
            assert set(action.option_strings) == {option.long_flag, *option.flags, *negative}, option.name


@pytest.mark.parametrize(("table", "build"), COMMANDS, ids=IDS)
def test_every_default_meets_its_own_rule(table: OptionTable, build: Callable) -> None:
    """What a config file holding the defaults (`[section]`, one key per option name) would be checked by."""
    for option in table:
        if option.default is None:
            continue
        values = option.default if option.form == REPEATED else [option.default]
        for value in values:
            assert option.rule.check(value) == (tuple(value) if option.form == LIST else value), option.name


def test_option_names_can_be_keywords_and_file_keys() -> None:
    for table, _ in COMMANDS:
        for option in table:
            assert re.fullmatch(r"[a-z][a-z0-9_]*", option.name) and option.name.isidentifier(), option.name


@pytest.mark.parametrize(
    ("config_class", "table", "not_options"), CONFIGS, ids=[config.__name__ for config, _, _ in CONFIGS]
)
def test_each_config_field_is_an_option_with_the_same_default(
    config_class: type, table: OptionTable, not_options: set[str]
) -> None:
    for field in dataclasses.fields(config_class):
        if field.name in not_options:
            continue
        option = table.for_field(field.name)
        expected = LIBRARY_DEFAULTS.get((config_class, field.name), option.default)
        default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
        assert default == expected, f"{config_class.__name__}.{field.name}"
        if "rule" in field.metadata:
            assert field.metadata["rule"] is option.rule


def test_every_setting_of_the_scheduler_reaches_its_config() -> None:
    fields = {field.name for field in dataclasses.fields(SchedulerConfig)}
    assert {option.config_field for option in SCHEDULER.setting_options()} == fields


def test_every_worker_and_store_option_of_the_cluster_reaches_a_config() -> None:
    fields = {field.name for config in (WorkerConfig, StoreSettings) for field in dataclasses.fields(config)}
    own = {"num_of_workers", "worker_names", "store"}  # what scaler_cluster itself does with them
    assert {option.config_field for option in CLUSTER.setting_options()} - fields == own


def test_the_core_config_defaults_are_the_scheduler_options() -> None:
    core = CoreConfig()
    for field in dataclasses.fields(CoreConfig):
        if field.name in SCHEDULER:
            assert getattr(core, field.name) == SCHEDULER[field.name].default, field.name
    assert core.max_frame_bytes == frame_limit(SCHEDULER["max_message_size_bytes"].default)
    # The two that disagreed before: the documented defaults.
    assert core.per_worker_queue_size == 1000
    assert "max_number_of_tasks_waiting" in {field.name for field in dataclasses.fields(CoreConfig)}


def test_the_core_config_takes_every_value_of_a_scheduler_config() -> None:
    config = SchedulerConfig(
        address="tcp://127.0.0.1:2345", per_worker_queue_size=7, max_number_of_tasks_waiting=9, protected=False,
        max_message_size_bytes=-1, load_balance_trigger_times=5,
    )
    core = CoreConfig.from_settings(config)
    assert (core.per_worker_queue_size, core.max_number_of_tasks_waiting, core.protected) == (7, 9, False)
    assert (core.max_frame_bytes, core.load_balance_trigger_times) == (0, 5)


def test_the_combo_takes_every_option_of_both_tables_by_keyword() -> None:
    routes = combo_keywords()
    reached = {(table.section, option.name) for targets in routes.values() for table, option in targets}
    every = {(table.section, option.name) for table in (SCHEDULER, CLUSTER) for option in table}
    assert reached == every


def test_the_combos_named_keywords_have_the_tables_defaults() -> None:
    routes = combo_keywords()
    on_purpose = {"address": None, "logging_level": LIBRARY_LOGGING_LEVEL}
    parameters = inspect.signature(SchedulerClusterCombo.__init__).parameters
    named = [name for name, parameter in parameters.items() if parameter.kind is not parameter.VAR_KEYWORD]
    for name in named:
        if name in ("self", "start_timeout_seconds"):
            continue
        assert name in routes, f"SchedulerClusterCombo({name}=...) sets no option"
        for _, option in routes[name]:
            assert parameters[name].default == on_purpose.get(name, option.default), name


def test_the_combo_refuses_an_unknown_keyword_before_starting_anything() -> None:
    with pytest.raises(TypeError, match="max_tasks_waiting"):
        SchedulerClusterCombo(max_tasks_waiting=3)


def test_the_combo_gives_its_children_what_it_was_given() -> None:
    scheduler, cluster = _combo_command_lines(per_worker_queue_size=10, worker_io_threads=2, tags={"gpu", "fast"},
                                              bad_frame_log_seconds=0.5, store=False)
    assert scheduler[scheduler.index("--per-worker-queue-size") + 1] == "10"
    assert "--bad-frame-log-seconds" in scheduler and "--io-threads" not in scheduler
    assert cluster[cluster.index("--per-worker-task-queue-size") + 1] == "10"
    assert cluster[cluster.index("--io-threads") + 1] == "2"
    assert cluster[cluster.index("--tags") + 1] == "fast,gpu"
    assert "--no-store" in cluster
    for arguments, parser in ((scheduler, scheduler_cli.build_parser()), (cluster, cluster_cli.build_parser())):
        parser.parse_args(arguments)  # the children read back what they are given


def _combo_command_lines(**settings: Any) -> tuple[list[str], list[str]]:
    """The command lines a combo would start its children with (its checks run; nothing is started)."""
    started: list[list[str]] = []

    class Recording(SchedulerClusterCombo):
        def _start_scheduler_and_cluster(self) -> None:
            started.extend([self._scheduler_args(), self._cluster_args()])

    Recording(address="tcp://127.0.0.1:2345", **settings).shutdown()
    return started[0], started[1]


def test_the_cluster_takes_every_worker_option_by_its_name_and_its_field() -> None:
    for option in CLUSTER:
        if option.config_field in {field.name for field in dataclasses.fields(WorkerConfig)} - {"address"}:
            assert CLUSTER_KEYWORDS[option.name] == option.config_field
            assert CLUSTER_KEYWORDS[option.config_field] == option.config_field
    cluster = Cluster(address="tcp://127.0.0.1:2345", worker_names=["a"], input_wait_seconds=3.0,
                      per_worker_task_queue_size=5, worker_io_threads=2)
    assert (cluster._template.input_wait_seconds, cluster._template.task_queue_size) == (3.0, 5)
    assert cluster._template.io_threads == 2


def test_the_symphony_config_has_the_tables_defaults() -> None:
    from scaler.adapters.symphony.worker import SymphonyWorkerConfig

    fields = {field.name: field.default for field in dataclasses.fields(SymphonyWorkerConfig)}
    for option in SYMPHONY_CLUSTER.setting_options():
        if option.config_field in fields and option.form != POSITIONAL:
            assert fields[option.config_field] == option.default, option.name


def test_the_configuration_document_shows_every_table_as_it_is() -> None:
    with open(os.path.join(REPO_ROOT, option_docs.DOCUMENT), encoding="utf-8") as file:
        document = file.read()
    shown = set(re.findall(r"<!-- options: (\w+) -->", document))
    assert shown == set(option_docs.TABLES), "every command has its table in docs/configuration.md"
    assert option_docs.rendered(document) == document, "run: python -m scaler.cli.option_docs"


# ---------------------------------------------------------------------------------------------- what -h says


def help_entries(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each argument's spellings -> its help as printed (whitespace flattened)."""
    formatter = parser._get_formatter()
    return {
        ", ".join(action.option_strings) or action.dest: " ".join(formatter._expand_help(action).split())
        for action in parser._actions if action.help
    }


@pytest.mark.parametrize(("table", "build"), COMMANDS, ids=IDS)
def test_help_states_no_default_where_there_is_none(table: OptionTable, build: Callable) -> None:
    entries = help_entries(build())
    for option in table:
        entry = next(text for spelled, text in entries.items() if option.long_flag in spelled.split(", "))
        defaults = re.findall(r"\(default: ([^)]*)\)", entry)
        assert len(defaults) <= 1, entry
        if option.form in (POSITIONAL, ON_SWITCH, OFF_SWITCH) or option.required:
            # "--no-store ... (default: True)" read as if the store were off by default
            assert not defaults, f"{option.long_flag}: {entry}"
        for shown in defaults:
            assert shown not in ("None", "", "[]", "()", "True", "False"), f"{option.long_flag}: {entry}"
            assert not shown.startswith(("(", "[")), f"{option.long_flag}: {entry}"


def test_a_switch_says_which_way_it_is_by_default() -> None:
    entries = help_entries(scheduler_cli.build_parser())
    assert "(default: --protected)" in entries["--protected, --no-protected, -p"]


def test_a_bad_tag_is_named_once(capsys) -> None:
    with pytest.raises(SystemExit):
        cluster_cli.build_parser().parse_args(["--tags", "gpu,,fast", "tcp://127.0.0.1:2345"])
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.count("--tags") == 1 and "a tag must be a non-empty word" in error, error


def test_a_list_default_reads_as_its_values() -> None:
    entries = help_entries(scheduler_cli.build_parser())
    assert "(default: /dev/stdout)" in entries["--logging-paths, -lp"]
