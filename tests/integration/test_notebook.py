"""What a notebook shows of a Client, a SchedulerClusterCombo and a Cluster: their HTML summaries, read back
with html.parser, and one real notebook run by nbclient in a real kernel.
"""

from __future__ import annotations

import html.parser

import nbformat
import pytest
from nbclient import NotebookClient

from scaler import Client, Cluster, SchedulerClusterCombo
from scaler.client.cluster_glance import UI_URL_ENVIRONMENT_VARIABLE
from tests.conftest import child_python_environment

pytestmark = pytest.mark.timeout(180)

NOTEBOOK_SECONDS = 120  # per cell: an upper bound against hangs on a loaded machine, never a measure


class SummaryReader(html.parser.HTMLParser):
    """The title, the rows (header -> cell text) and the links of a summary."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.title = ""
        self.rows: dict[str, str] = {}
        self.links: list[str] = []
        self._tag = ""
        self._header = ""
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._tag = tag
        if tag == "a":
            self.links.extend(value or "" for name, value in attrs if name == "href")

    def handle_data(self, data: str) -> None:
        if self._tag == "strong":
            self.title += data
        elif self._tag == "th":
            self._header = data
        elif self._tag in ("td", "a") and self._header:
            self.rows[self._header] = self.rows.get(self._header, "") + data

    def handle_endtag(self, tag: str) -> None:
        self._tag = ""


def test_the_summaries_show_the_address_the_workers_and_the_ui_link(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv(UI_URL_ENVIRONMENT_VARIABLE, "http://127.0.0.1:8081/")
    with SchedulerClusterCombo(n_workers=2, logging_level="WARNING") as combo:
        address = combo.get_address()
        combo_view = SummaryReader(combo._repr_html_())
        assert combo_view.title == "scaler.SchedulerClusterCombo"
        assert combo_view.rows["scheduler"] == address and combo_view.rows["workers"] == "2"
        assert combo_view.links == ["http://127.0.0.1:8081/"]
        assert address in repr(combo) and "workers started: 2" in repr(combo)

        with Client(address=address, name="notebook", timeout_seconds=30) as client:
            assert client.submit(pow, 2, 10).result(timeout=60) == 1024
            view = SummaryReader(client._repr_html_())
            assert view.rows["scheduler"] == address and view.rows["name"] == "notebook"
            assert view.rows["workers"] == "2" and view.rows["connected"] == "yes"
            assert view.rows["cluster tasks"].endswith("1 finished")
            assert repr(client) == (
                f"<scaler.Client scheduler: {address}, name: notebook, connected: yes, unfinished tasks: 0>"
            )

            with Cluster(address=address, worker_names=["extra|0"]) as extra:
                extra.start()
                cluster_view = SummaryReader(extra._repr_html_())
                assert cluster_view.rows["scheduler"] == address
                assert cluster_view.rows["workers started here"] == cluster_view.rows["registered"] == "1"
                assert cluster_view.rows["workers"] == "3"  # the whole cluster, as the scheduler sees it

        monkeypatch.delenv(UI_URL_ENVIRONMENT_VARIABLE)
        assert SummaryReader(combo._repr_html_()).links == []

    # Stopped: what it knows, without waiting for a feed that is gone.
    stopped = SummaryReader(combo._repr_html_())
    assert stopped.rows["running"] == "no" and "workers" not in stopped.rows


def test_a_client_of_a_scheduler_on_another_host_says_the_workers_are_unknown_without_waiting(tmp_path) -> None:
    elsewhere = f"ipc://{tmp_path}/monitor"
    with SchedulerClusterCombo(n_workers=1, logging_level="WARNING", monitor_address=elsewhere) as combo:
        # The default feed of this address is not there (the combo moved it): as for a scheduler elsewhere.
        with Client(address=combo.get_address(), timeout_seconds=30) as client:
            view = SummaryReader(client._repr_html_())
            assert view.rows["workers"].startswith("unknown (no monitor feed read at ipc:///tmp/127.0.0.1_")


NOTEBOOK_CELLS = [
    "from scaler import Client, SchedulerClusterCombo\n"
    "cluster = SchedulerClusterCombo(n_workers=1, logging_level='WARNING')\n"
    "client = Client(address=cluster.get_address(), name='in-a-notebook')",
    "client.submit(pow, 3, 4).result()",
    "client",
    "client.map(abs, [(-value,) for value in range(20)], progress=True)[-1]",
    "client.disconnect()\ncluster.shutdown()",
]


def test_a_notebook_runs_a_task_and_shows_the_client(tmp_path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in NOTEBOOK_CELLS]
    runner = NotebookClient(
        notebook, timeout=NOTEBOOK_SECONDS, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}},
    )
    # The kernel imports this checkout's scaler, as the tests' other child processes do.
    runner.execute(env=child_python_environment())

    outputs = [cell.outputs for cell in notebook.cells]
    assert [output.output_type for output in outputs[1]] == ["execute_result"]
    assert outputs[1][0].data["text/plain"] == "81"

    shown = outputs[2][0].data
    view = SummaryReader(shown["text/html"])
    assert view.title == "scaler.Client" and view.rows["name"] == "in-a-notebook"
    assert view.rows["workers"] == "1" and view.rows["cluster tasks"].endswith("1 finished")
    assert shown["text/plain"].startswith("<scaler.Client scheduler: tcp://127.0.0.1:")

    # The progress bar is tqdm.auto's: in a kernel, a widget when ipywidgets is installed; without it (as in
    # the dev extras) tqdm.auto says it looked for one, then draws text, which reaches 20/20.
    assert outputs[3][-1].data["text/plain"] == "19"
    widgets = [
        output for output in outputs[3]
        if output.output_type == "display_data" and "application/vnd.jupyter.widget-view+json" in output.data
    ]
    if not widgets:
        stderr = "".join(output.text for output in outputs[3] if output.output_type == "stream")
        assert "IProgress not found" in stderr and "map: 100%" in stderr and "20/20" in stderr, stderr
