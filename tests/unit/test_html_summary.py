"""The summaries notebooks show (scaler/utility/html_summary.py): every value escaped, links kept as links."""

from __future__ import annotations

from scaler.utility.html_summary import Link, Summary


def test_a_name_with_markup_is_shown_as_text_not_run() -> None:
    summary = Summary("scaler.Client", (("name", "<script>alert(1)</script>"), ("workers", 2)))
    page = summary.html()
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<td style=\"text-align:left\">2</td>" in page
    assert summary.text() == "<scaler.Client name: <script>alert(1)</script>, workers: 2>"


def test_a_link_is_an_anchor_whose_address_cannot_break_out_of_its_attribute() -> None:
    page = Summary("scaler.Client", (("dashboard", Link('http://host:8081/"onmouseover="x')),)).html()
    assert '<a href="http://host:8081/&quot;onmouseover=&quot;x" target="_blank">' in page
