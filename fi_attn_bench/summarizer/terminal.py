"""Console step: the verdict and a compact table for stdout, so a CI log shows why.

Plain text sized to the terminal (``shutil.get_terminal_size``): fixed-width number
columns, the case column takes what is left and is cut with "…".  When stdout is not a
terminal (a CI log, a file) nothing is cut: the lines are as long as their cells.  The
model's warnings follow the verdict, one line each.  At most MAX_CONSOLE_ROWS rows; the
report holds the rest.
"""

from __future__ import annotations

import re
import shutil
import sys

import numpy as np

from fi_attn_bench.summarizer.identity import short_labels
from fi_attn_bench.summarizer.model import Verdict
from fi_attn_bench.summarizer.regression import plural

MAX_CONSOLE_ROWS = 20
MIN_CASE_WIDTH = 16
FALLBACK_COLUMNS = 100
UNLIMITED = sys.maxsize  # the width of a stdout that is not a terminal: nothing is cut


# C0 and C1 control codes (ESC starts an ANSI sequence), DEL, and the bidirectional
# overrides that make a terminal show text in another order than it is ("Trojan source").
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_text(text) -> str:
    """One line: ``text`` with every control code shown as its escape (ESC as \\x1b, a
    newline as \\x0a), so a string from a CSV or the store cannot move the cursor, recolor
    or retitle the terminal, hide itself, or pass for another line."""
    text = str(text)
    return _CONTROL.sub(_escape_control, text) if _CONTROL.search(text) else text


def _escape_control(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal_width(stream=None) -> int:
    """The terminal's width, or UNLIMITED when ``stream`` (stdout) is not a terminal."""
    stream = sys.stdout if stream is None else stream
    try:
        is_terminal = stream.isatty()
    except (AttributeError, ValueError):  # a replaced or closed stream
        is_terminal = False
    if not is_terminal:
        return UNLIMITED
    return shutil.get_terminal_size((FALLBACK_COLUMNS, 24)).columns


def head_lines(model) -> list[str]:
    """The verdict, then each warning and the allowed differences, one line each."""
    lines = [f"Verdict: {model.verdict.label.upper()} — {terminal_text(model.reason)}"]
    lines += [
        terminal_text(f"Warning: {w.headline} — {w.detail}".replace("\n", " "))
        for w in model.warnings
    ]
    allowed = getattr(model, "allowed_differences", [])
    if allowed:
        lines.append(
            terminal_text("Allowed differences (--allow-difference): " + "; ".join(allowed))
        )
    return lines


def fit(text: str, width: int) -> str:
    """``text`` padded or cut (with "…") to exactly ``width`` characters."""
    text = terminal_text(str(text).replace("\n", " "))
    return text.ljust(width) if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _table(headers: list[str], rows: list[list[str]], width: int, flexible: int) -> list[str]:
    """Columns as wide as their widest cell; column ``flexible`` gets what is left."""
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    others = sum(w for i, w in enumerate(widths) if i != flexible) + 2 * (len(headers) - 1)
    widths[flexible] = max(MIN_CASE_WIDTH, min(widths[flexible], width - others))
    lines = []
    for row in [headers, *rows]:
        cells = [
            fit(value, widths[i])
            if i in (0, 1, flexible) or not _numeric(value)
            else value.rjust(widths[i])
            for i, value in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return lines


def _numeric(text: str) -> bool:
    return bool(text) and (text[0].isdigit() or text[0] in "+-∞" or text == "n/a")


def _number(value: float) -> str:
    return "n/a" if value != value else f"{value:.4g}"


def _delta(value: float) -> str:
    if value != value:
        return "n/a"
    if np.isinf(value):
        return "+∞%" if value > 0 else "-∞%"
    return f"{value:+.2f}%"


def summary_console(model, width: int, only_changed: bool = False) -> str:
    """Verdict, then failed cases first and the others in report order."""
    lines = head_lines(model)
    if model.noisy:
        lines[0] += f"; {plural(len(model.noisy), 'row')} noisy (see the report)"
    cases = model.cases
    if cases is None or not len(cases):
        return "\n".join(lines)
    shown = cases.rows(0, min(len(cases), 4 * MAX_CONSOLE_ROWS))
    shown = sorted(shown, key=lambda row: row.status != "failed")[:MAX_CONSOLE_ROWS]
    labels, common = short_labels([r.case for r in shown], width)
    rows = [
        [r.api, label, r.status, _number(r.time_ms), _number(r.bandwidth_GB_s), _number(r.tflops)]
        for r, label in zip(shown, labels, strict=True)
    ]
    headers = ["API", "Case", "Status", "Time ms", "GB/s", "TFLOPS"]
    lines += _listed(headers, rows, width, common, len(cases) - len(rows), "case")
    return "\n".join(lines)


def regression_console(model, width: int, only_changed: bool = False) -> str:
    """Verdict, then the changed cases, the worst regression first."""
    lines = head_lines(model)
    changes = model.changes(only_changed=True)
    if not len(changes):
        if model.verdict is not Verdict.NOT_COMPARABLE:  # nothing was compared
            lines.append(f"No changed case among {plural(len(model.matched), 'matched case')}.")
        return "\n".join(lines)
    top = changes.iloc[np.arange(min(len(changes), MAX_CONSOLE_ROWS))]
    labels, common = short_labels(model.case_labels(top["case_id"]).tolist(), width)
    columns = ("api", "state", "time_ms_baseline", "time_ms_candidate", "time_ms_delta_pct")
    rows = []
    for label, (api, state, base, cand, delta) in zip(
        labels, zip(*(top[name].tolist() for name in columns), strict=True), strict=True
    ):
        rows.append([str(api), str(label), str(state), _number(base), _number(cand), _delta(delta)])
    headers = ["API", "Case", "State", "Base ms", "Cand ms", "Δ time"]
    lines += _listed(headers, rows, width, common, len(changes) - len(rows), "changed case")
    return "\n".join(lines)


def _listed(headers, rows, width: int, common: str, hidden: int, noun: str) -> list[str]:
    """The table, the case parameters every listed row shares, and how many rows the report
    holds beyond it."""
    lines = _table(headers, rows, width, 1)
    if common:
        lines.append(terminal_text(f"(every case listed: {common})"))
    if hidden > 0:
        lines.append(f"… {plural(hidden, 'more ' + noun)} in the report")
    return lines
