"""Whether a baseline and a candidate measured the same thing, and what differs.

The registry (``schema.Column.compare``) decides per column: a ``MUST_MATCH`` column
(dtype, page size, timer, ...) that differs within a matched case makes the comparison
meaningless unless --allow-difference names it; a ``WARN`` column (device, versions,
host) that differs between the runs is a warning at the top of the report.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fi_attn_bench.results.schema import MUST_MATCH_COLUMNS, Kind
from fi_attn_bench.summarizer.model import ReportWarning, plural, values_text

TEXT_KINDS = (Kind.TEXT, Kind.CHOICE)


@dataclass(frozen=True)
class ValueChange:
    """One baseline value -> candidate value of a column, over this many matched cases."""

    baseline: str
    candidate: str
    cases: int


@dataclass(frozen=True)
class FieldDifference:
    """A column that must match (schema.Compare.MUST_MATCH) but differs in matched cases;
    ``allowed``: named by --allow-difference, so the comparison goes on."""

    column: str
    changes: tuple[ValueChange, ...]
    allowed: bool

    @property
    def text(self) -> str:
        """ "dtype float16 → bfloat16", with case counts when several changes."""
        if len(self.changes) == 1:
            change = self.changes[0]
            return f"{self.column} {change.baseline} → {change.candidate}"
        parts = [f"{c.baseline} → {c.candidate} ({plural(c.cases, 'case')})" for c in self.changes]
        return f"{self.column} " + ", ".join(parts)


def not_comparable_reason(blocking: list[FieldDifference]) -> str:
    """One line: what differs, and the option that compares the runs anyway."""
    names = ",".join(difference.column for difference in blocking)
    return (
        "baseline and candidate measured different things: "
        + "; ".join(difference.text for difference in blocking)
        + f" (--allow-difference {names} compares them anyway)"
    )


def field_differences(
    view_b, view_c, rows_b: np.ndarray, rows_c: np.ndarray, allowed=()
) -> list[FieldDifference]:
    """The must-match columns whose values differ between matched rows (``rows_b[i]`` and
    ``rows_c[i]`` are one case).  A case where either side has no value is not counted, so
    CSVs written before a column existed compare as they did."""
    found = []
    for column in MUST_MATCH_COLUMNS:
        changes = _value_changes(view_b, view_c, column, rows_b, rows_c)
        if changes:
            found.append(FieldDifference(column.name, changes, column.name in allowed))
    return found


def _value_changes(view_b, view_c, column, rows_b, rows_c) -> tuple[ValueChange, ...]:
    """Each distinct (baseline value, candidate value) pair that differs, most cases first."""
    if not len(rows_b) or not (view_b.has(column.name) and view_c.has(column.name)):
        return ()
    numeric = column.kind not in TEXT_KINDS
    codes_b, texts_b = _comparable_codes(view_b, column.name, numeric)
    codes_c, texts_c = _comparable_codes(view_c, column.name, numeric)
    width = len(texts_c)
    pairs, counts = np.unique(codes_b[rows_b] * width + codes_c[rows_c], return_counts=True)
    changes = []
    for pair, count in zip(pairs.tolist(), counts.tolist(), strict=True):
        before, after = texts_b[pair // width], texts_c[pair % width]
        if before and after and before != after:
            changes.append(ValueChange(before, after, count))
    return tuple(sorted(changes, key=lambda change: -change.cases))


def _comparable_codes(view, name: str, numeric: bool) -> tuple[np.ndarray, list[str]]:
    """(code per row, text per code), code 0 being no value; numbers as their value reads
    ("16" for 16.0), so the pandas path and the file's text agree."""
    codes, values = view.codes(name)
    texts = ["", *(comparable_text(value, numeric) for value in values)]
    return np.asarray(codes, dtype=np.int64) + 1, texts


def comparable_text(value, numeric: bool) -> str:
    """A cell as compared: stripped text, a number by its value, "" for no value."""
    if value is None or (isinstance(value, float) and value != value):
        return ""
    text = str(value).strip()
    if not numeric or not text:
        return text
    try:
        number = float(text)
    except ValueError:
        return text
    if number != number:
        return ""
    return str(int(number)) if number.is_integer() else repr(number)


def environment_warnings(environment, mismatches: list[str]) -> list[ReportWarning]:
    """The sides ran on other hardware or software (schema.Compare.WARN columns)."""
    if not mismatches:
        return []
    base, cand = environment["baseline"], environment["candidate"]
    detail = "; ".join(
        f"{name}: {values_text(base[name])} → {values_text(cand[name])}" for name in mismatches
    )
    return [ReportWarning("baseline and candidate ran on different hardware or software", detail)]
