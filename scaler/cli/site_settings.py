"""The options of `scaler FILE.toml` (`[site]` in the file itself): the one table of them."""

from __future__ import annotations

from scaler.utility.option_table import Option, OptionTable
from scaler.utility.setting_rules import POSITIVE_SECONDS

SITE = OptionTable(
    "site",
    (
        Option(
            "start_timeout_seconds", 60.0, POSITIVE_SECONDS,
            "how long each step of the start may take: the scheduler listening, the stores listening, every "
            "worker of [cluster] registered; past it, the site stops and says which part did not come up",
        ),
        Option(
            "stop_grace_seconds", 10.0, POSITIVE_SECONDS,
            "how long each part has to stop after SIGTERM before it is killed (with what it started)",
        ),
    ),
)
