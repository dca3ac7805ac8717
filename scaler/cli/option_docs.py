"""The option tables of docs/configuration.md, made from the commands' option tables.

`python -m scaler.cli.option_docs` rewrites them in place (between `<!-- options: SECTION -->` and
`<!-- end of options -->`); tests/unit/test_option_tables.py fails while the document differs.
"""

from __future__ import annotations

import html
import os
import re
import sys

from scaler.adapters.slurm_settings import SLURM_CLUSTER
from scaler.adapters.symphony.settings import SYMPHONY_CLUSTER
from scaler.cli.site_settings import SITE
from scaler.cluster.settings import CLUSTER
from scaler.scheduler.settings import SCHEDULER
from scaler.store.settings import STORE
from scaler.ui.settings import TOP, UI
from scaler.utility.command_parser import config_option
from scaler.utility.option_table import OFF_SWITCH, ON_SWITCH, POSITIONAL, SWITCH, Option, OptionTable
from scaler.utility.setting_rules import MAX_SECONDS, Rule

TABLES = {
    table.section: table for table in (SCHEDULER, CLUSTER, STORE, TOP, UI, SLURM_CLUSTER, SYMPHONY_CLUSTER, SITE)
}
# The document is the repository's, not the installed package's: the path is from the repository's root.
DOCUMENT = os.path.join("docs", "configuration.md")
_BLOCK = re.compile(r"(<!-- options: (\w+) -->\n)(.*?)(<!-- end of options -->)", re.DOTALL)
# Above these a number's range is said to be open: the bounds are what the wire carries, not a choice.
_OPEN_ENDED = 2**31 - 1


def values_text(option: Option) -> str:
    rule = option.rule
    if option.form in (SWITCH, ON_SWITCH, OFF_SWITCH):
        return ""
    if not isinstance(rule, Rule):
        return rule.describe()
    low = f"{rule.minimum:g}"
    if rule.maximum >= _OPEN_ENDED or rule.maximum == MAX_SECONDS:
        text = f"above {low}" if rule.above_minimum else f"{low} and up"
    else:
        text = f"{low} to {rule.maximum:g}"
    return ", ".join(str(value) for value in rule.special) + ", or " + text if rule.special else text


def spelled(option: Option) -> str:
    if option.form == POSITIONAL:
        return f"`{option.name.upper()}`"
    first = f"`{option.long_flag}`"
    if option.form == SWITCH:
        first = f"`{option.long_flag}`/`--no-{option.long_flag[2:]}`"
    return ", ".join([first, *(f"`{flag}`" for flag in option.flags)])


def what_it_does(option: Option) -> str:
    text = option.help[0].upper() + option.help[1:] + "."
    if option.ignored is not None:
        text += " When given, the log says so once."
    if option.doc:
        text += " " + option.doc
    return text


def markdown_table(table: OptionTable) -> str:
    rows = ["| option | values | default | what it does |", "| --- | --- | --- | --- |"]
    # The arguments first, as a usage line names them, then the file (`scaler FILE.toml` names it positionally).
    options = sorted(table, key=lambda option: option.form != POSITIONAL)
    if table.section != SITE.section:
        arguments = [option for option in options if option.form == POSITIONAL]
        options = [*arguments, config_option(table.section), *options[len(arguments):]]
    for option in options:
        cells = [spelled(option), values_text(option), option.shown_default() or "", what_it_does(option)]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return "\n".join(rows) + "\n"


def _cell(text: str) -> str:
    """Markdown's table cell: `|` escaped, and `<...>` outside code shown, not read as HTML."""
    parts = text.split("`")
    return "`".join(part if index % 2 else html.escape(part, quote=False) for index, part in enumerate(parts)).replace(
        "|", "\\|"
    )


def rendered(document: str) -> str:
    """The document with each option block made anew from its table."""
    return _BLOCK.sub(lambda match: match.group(1) + markdown_table(TABLES[match.group(2)]) + match.group(4), document)


def main(argv: list[str] | None = None) -> None:
    """`python -m scaler.cli.option_docs [PATH]`: rewrite PATH's tables (default: docs/configuration.md, run from
    the repository's root)."""
    arguments = sys.argv[1:] if argv is None else argv
    path = arguments[0] if arguments else DOCUMENT
    with open(path, encoding="utf-8") as file:
        document = file.read()
    fresh = rendered(document)
    if fresh != document:
        with open(path, "w", encoding="utf-8") as file:
            file.write(fresh)
        print(f"rewrote the option tables of {os.path.normpath(path)}", file=sys.stderr)


if __name__ == "__main__":
    main()
