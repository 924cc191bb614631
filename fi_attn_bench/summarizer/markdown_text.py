"""Markdown's building blocks: inert cells, numbers, and a renderer that cuts long tables.

A report is a list of fixed blocks and tables; table rows are produced lazily and stop,
with a note, before the report would pass its byte limit, so a 200k-case comparison never
formats 200k rows.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_MAX_REPORT_BYTES = 1 << 20
MAX_CELL_CHARS = 500  # a longer CSV cell (a 50 MB error text) is clipped, its row kept
NOTE_RESERVE = 320  # bytes kept for each table's cut note
_ESCAPES = (
    ("\\", "\\\\"),
    ("|", "\\|"),
    ("`", "\\`"),
    ("*", "\\*"),
    ("_", "\\_"),
    ("#", "\\#"),
    ("[", "\\["),
    ("]", "\\]"),
    ("<", "&lt;"),
    (">", "&gt;"),
)


_NEEDS_WORK = re.compile(r"[\\|`*_#\[\]<>\r\n]")  # most cells have none: returned as they are
# What the seed's escape leaves as it is: control codes (ESC starts a terminal's escape
# sequence, where a report is printed), the bidirectional overrides, and U+2028/9 (a line
# break to some readers).  ``cell`` shows them as escapes or <br>.
_UNSEEN = re.compile(
    "[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]"
)


def escape_markdown(value) -> str:
    """Text from a CSV made inert in Markdown; line breaks become <br> (the seed's rule)."""
    text = str(value)
    if not _NEEDS_WORK.search(text):
        return text
    if "\r" in text or "\n" in text:
        parts = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
        return "<br>".join(_escaped(part) for part in parts)
    return _escaped(text)


def visible_markdown(value) -> str:
    """``escape_markdown``, with control codes shown as escapes (ESC as \\x1b) and U+2028/9
    as line breaks, so a report printed on a terminal cannot be made to run anything."""
    text = str(value)
    if _UNSEEN.search(text):
        text = _UNSEEN.sub(_unseen_escape, text)
    return escape_markdown(text)


def _unseen_escape(match: re.Match) -> str:
    code = ord(match.group())
    if code in (0x2028, 0x2029):
        return "\n"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _escaped(text: str) -> str:
    # Backslash first, so no later escape is escaped again; str.replace beat one
    # str.translate pass 2.5-5x on report cells (DESIGN, "Reader and speed").
    for old, new in _ESCAPES:
        if old in text:
            text = text.replace(old, new)
    return text


def clip(value, limit: int = MAX_CELL_CHARS) -> str:
    """A cell's text cut to ``limit`` characters, saying how much was left out."""
    text = str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text) - limit} more characters; the CSV holds them all)"


def cell(value) -> str:
    """A CSV value as one Markdown table cell: clipped, then escaped."""
    return visible_markdown(clip(value))


def format_metric(value) -> str:
    return f"{value:.6g}"


def format_delta(value) -> str:
    if math.isinf(value):
        return "+∞%" if value > 0 else "-∞%"
    return f"{value:+.2f}%"


@dataclass(frozen=True)
class Block:
    """Lines always written."""

    lines: list[str]


@dataclass(frozen=True)
class Table:
    """Head lines always written; rows written while the size budget lasts."""

    head: list[str]
    rows: Iterable[str]
    total: int
    what: str


def _size(lines: Iterable[str]) -> int:
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def render(parts: list[Block | Table], limit: int) -> str:
    """Join blocks and tables; cut table rows (with a note) to stay under ``limit`` bytes.

    Each table may use an equal share of the bytes left when it starts; what it does
    not use passes on, so one long table cannot crowd out the ones after it.
    """
    fixed = sum(_size(p.lines) if isinstance(p, Block) else _size(p.head) for p in parts)
    tables_left = sum(isinstance(p, Table) for p in parts)
    budget = limit - fixed - NOTE_RESERVE * tables_left
    lines: list[str] = []
    for part in parts:
        if isinstance(part, Block):
            lines.extend(part.lines)
            continue
        lines.extend(part.head)
        share = budget // tables_left
        tables_left -= 1
        shown = 0
        for row in part.rows:
            cost = len(row.encode("utf-8")) + 1
            if cost > share:
                break
            share -= cost
            budget -= cost
            lines.append(row)
            shown += 1
        if shown < part.total:
            lines.append("")
            lines.append(_cut_note(shown, part.total, part.what, limit))
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _cut_note(shown: int, total: int, what: str, limit: int) -> str:
    return (
        f"*Cut: {shown} of {total} {what} shown; this report is limited to {limit} bytes "
        "(--max-report-bytes). The JSON report (--json) holds all of them.*"
    )
