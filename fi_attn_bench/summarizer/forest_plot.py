"""The head-to-head forest plot: each case's paired time ratio with its 95 % interval.

One figure per API (``{api}_forest.png``): a row per case and non-baseline implementation, the
ratio ``time / baseline time`` as a point, its interval as a bar, a vertical line at 1 (left of
it: faster than the baseline), coloured by the paired verdict. Labels show only the case
fields that vary across the plotted rows; the fields every row shares go in the footnote. The
figure grows with the rows; past ``MAX_ROWS`` only the most extreme ratios are drawn, and the
title says how many were left out. The numbers are the summary model's (``headtohead``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fi_attn_bench.summarizer.headtohead import ApiComparison
from fi_attn_bench.summarizer.identity import natural_key, short_labels
from fi_attn_bench.summarizer.plots import (
    FOREST_PNG,
    LOG_SPEEDUP_RATIO,
    MAX_ROW_LABEL_CHARS,
    ROW_BASE_INCHES,
    ROW_FIGURE_WIDTH,
    ROW_INCHES,
    _figure,
    _save,
    _wrap,
    literal,
    safe_file_stem,
    wrap_footnote,
)
from fi_attn_bench.wording import counted

MAX_ROWS = 80  # past this the most extreme ratios are drawn (80 rows: a 20-inch figure)
VERDICT_COLORS: Mapping[str, str] = {
    "faster": "#2ca02c",
    "same": "#4c72b0",
    "slower": "#d62728",
    "": "#7f7f7f",  # fewer than 6 pairs of rounds: no interval, no verdict
}
VERDICT_NAMES: Mapping[str, str] = {"": "no verdict (ratio of times)"}


@dataclass(frozen=True)
class ForestRow:
    """One case and implementation: its time ratio to the baseline and the 95 % interval."""

    label: str  # the case's fields ("name=value, ..."), the implementation last when several
    ratio: float
    low: float  # NaN without a paired interval
    high: float
    verdict: str  # faster, same, slower or ""


@dataclass(frozen=True)
class Forest:
    api: str
    baseline_impl: str
    impls: tuple[str, ...]  # the non-baseline implementations drawn
    rows: tuple[ForestRow, ...]


def forests(comparisons: Sequence[ApiComparison]) -> list[Forest]:
    """The forest of each API's head to head, from the summary model's comparisons."""
    found = []
    for comparison in comparisons:
        table = comparison.cases
        rows = []
        for column, impl in enumerate(table.impls[1:], start=1):
            several = len(table.impls) > 2
            for index in np.flatnonzero(table.present[:, column]).tolist():
                speedup = float(table.speedup[index, column])
                label = table.label(index) + (f", impl={impl}" if several else "")
                rows.append(
                    ForestRow(
                        label=_without_impl(label) if not several else label,
                        ratio=1.0 / speedup if speedup > 0 else math.nan,
                        low=1.0 / float(table.speedup_hi[index, column]),
                        high=1.0 / float(table.speedup_lo[index, column]),
                        verdict=str(table.verdicts[index, column]),
                    )
                )
        kept = tuple(row for row in rows if math.isfinite(row.ratio) and row.ratio > 0)
        if kept:
            impls = tuple(table.impls[1:])
            found.append(Forest(comparison.api, comparison.baseline_impl, impls, kept))
    return found


def _without_impl(label: str) -> str:
    return ", ".join(part for part in label.split(", ") if not part.startswith("impl="))


def shown_rows(rows: Sequence[ForestRow], limit: int = MAX_ROWS) -> list[ForestRow]:
    """At most ``limit`` rows, the furthest from 1 (on a log scale) kept, sorted for reading:
    the largest ratio (slowest against the baseline) at the top, ties by their fields."""
    kept = list(rows)
    if len(kept) > limit:
        kept = sorted(kept, key=lambda row: -abs(math.log(row.ratio)))[:limit]
    return sorted(kept, key=lambda row: (row.ratio, _label_key(row.label)))


def _label_key(label: str) -> tuple:
    return tuple(natural_key(part.partition("=")[2]) for part in label.split(", "))


def render_forest_plots(comparisons: Sequence[ApiComparison], out_dir: Path) -> list[Path]:
    """``{api}_forest.png`` per API with a head to head; the written paths, in API order."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        _save(forest_figure(forest), out_dir / (safe_file_stem(forest.api) + FOREST_PNG))
        for forest in forests(comparisons)
    ]


def forest_figure(forest: Forest):
    """The figure of one API's forest (rows drawn bottom-up: the first shown row at the bottom)."""
    rows = shown_rows(forest.rows)
    labels, common = short_labels([row.label for row in rows], MAX_ROW_LABEL_CHARS)
    figure = _figure(ROW_FIGURE_WIDTH, ROW_BASE_INCHES + ROW_INCHES * max(len(rows), 5))
    ax = figure.subplots()
    positions = np.arange(len(rows))
    _draw_rows(ax, rows, positions)
    ax.axvline(1.0, color="black", lw=1, zorder=1)
    _style_ratio_axis(ax, rows)
    ax.set_yticks(positions, [literal(label) for label in labels], fontsize="small")
    ax.set_ylim(-0.7, len(rows) - 0.3)
    _value_column(ax, rows, positions)
    ax.grid(True, axis="x", which="both", alpha=0.3)
    figure.supxlabel(_footnote(forest, common), fontsize="small")
    figure.suptitle(_wrap(_title(forest, len(rows)), ROW_FIGURE_WIDTH))
    _legend(ax, rows)
    return figure


def _draw_rows(ax, rows: Sequence[ForestRow], positions) -> None:
    for verdict, color in VERDICT_COLORS.items():
        picked = [i for i, row in enumerate(rows) if row.verdict == verdict]
        if not picked:
            continue
        ratio = np.array([rows[i].ratio for i in picked])
        low = np.array([rows[i].low for i in picked])
        high = np.array([rows[i].high for i in picked])
        has = np.isfinite(low) & np.isfinite(high)
        errors = np.where(has, [ratio - low, high - ratio], 0.0)
        ax.errorbar(
            ratio,
            positions[picked],
            xerr=np.clip(errors, 0.0, None),
            fmt="o",
            mfc=color if verdict else "white",
            color=color,
            ms=4.5,
            capsize=2.5,
            lw=1.4,
            label=VERDICT_NAMES.get(verdict, verdict),
            zorder=3,
        )


def _style_ratio_axis(ax, rows: Sequence[ForestRow]) -> None:
    """A linear ratio axis for a narrow range, a log one (1-2-5 ticks) for a wide one; 1 in view."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ends = [v for row in rows for v in (row.ratio, row.low, row.high) if math.isfinite(v)]
    low, high = min([*ends, 1.0]), max([*ends, 1.0])
    if high / low > LOG_SPEEDUP_RATIO:
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlim(low / 1.15, high * 1.15)
    else:
        margin = 0.05 * (high - low) or 0.01
        ax.set_xlim(low - margin, high + margin)


def _value_column(ax, rows: Sequence[ForestRow], positions) -> None:
    """Each row's numbers at the right edge: the ratio and its interval."""
    right = ax.twinx()
    right.set_ylim(ax.get_ylim())
    right.set_yticks(positions, [_ratio_text(row) for row in rows], fontsize="small")
    right.tick_params(axis="y", length=0)
    right.set_ylabel("ratio [95 % interval]", fontsize="small")
    for side in ("top", "right"):
        right.spines[side].set_visible(False)


def _ratio_text(row: ForestRow) -> str:
    if math.isfinite(row.low) and math.isfinite(row.high):
        return f"{row.ratio:.3f} [{row.low:.3f}, {row.high:.3f}]"
    return f"{row.ratio:.3f}"


def _title(forest: Forest, shown: int) -> str:
    impls = " and ".join(forest.impls)
    total = len(forest.rows)
    cut = f"; the {shown} furthest from 1 of {total} shown" if shown < total else ""
    return f"{forest.api}: {impls} vs {forest.baseline_impl}, {counted(total, 'case')}{cut}"


def _footnote(forest: Forest, common: str) -> str:
    """What the axis is, and the fields every drawn case shares, wrapped to the figure."""
    text = f"time ratio to {forest.baseline_impl} (paired rounds; bar: 95 % interval); "
    text += "left of 1: faster" + (f"; every case: {common}" if common else "")
    return wrap_footnote(text, ROW_FIGURE_WIDTH)


def _legend(ax, rows: Sequence[ForestRow]) -> None:
    """The verdicts present, in one row above the axes (never over a point)."""
    handles, names = ax.get_legend_handles_labels()
    ax.legend(
        handles,
        names,
        fontsize="x-small",
        loc="lower right",
        bbox_to_anchor=(1.0, 1.0),
        ncol=len(handles),
        frameon=False,
        borderaxespad=0.2,
    )
