"""A titled list of facts, drawn as an HTML table for notebooks (`_repr_html_`) or as one line (`__repr__`).

Every value is escaped here, so a name a user chose (a client's, a worker's) cannot break the page.
"""

from __future__ import annotations

import dataclasses
import html


@dataclasses.dataclass(frozen=True)
class Link:
    url: str
    text: str = ""


Value = str | int | Link


@dataclasses.dataclass(frozen=True)
class Summary:
    title: str
    rows: tuple[tuple[str, Value], ...]

    def html(self) -> str:
        cells = "".join(
            f'<tr><th style="text-align:left">{html.escape(label)}</th>'
            f'<td style="text-align:left">{_html_value(value)}</td></tr>'
            for label, value in self.rows
        )
        return f'<div class="scaler-summary"><strong>{html.escape(self.title)}</strong><table>{cells}</table></div>'

    def text(self) -> str:
        facts = ", ".join(f"{label}: {_text_value(value)}" for label, value in self.rows)
        return f"<{self.title} {facts}>" if facts else f"<{self.title}>"


def _html_value(value: Value) -> str:
    if isinstance(value, Link):
        url = html.escape(value.url, quote=True)
        return f'<a href="{url}" target="_blank">{html.escape(value.text or value.url)}</a>'
    return html.escape(str(value))


def _text_value(value: Value) -> str:
    return value.url if isinstance(value, Link) else str(value)
