"""Bencher Metric Format (BMF) JSON of a run: what ``bencher run --adapter json`` ingests.

``{benchmark: {measure: {"value", "lower_value", "upper_value"}}}`` (bencher.dev/docs/reference/
bencher-metric-format). A benchmark is one case of one API, named ``API (case label)``; its
measures are the row's median time and throughputs, with the median's 95 % interval as the
bounds, and the paired ratio of a head-to-head row with its own interval.  A summary exports
its run; a regression report exports the candidate (Bencher keeps the history and judges it).
Only rows that ran ok are exported; a value that is not a positive finite number is left out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from json.encoder import encode_basestring

import numpy as np

from fi_attn_bench.summarizer.frames import median_ci_pct, success_mask
from fi_attn_bench.summarizer.model import RULES, ReportKind

MAX_BENCHMARK_CHARS = 1024  # Bencher's longest benchmark name
HASH_CHARS = 16


@dataclass(frozen=True)
class Measure:
    """One BMF measure: its slug (at most 64 characters), the column, and how the median's
    interval maps onto it (time grows with the interval; a throughput shrinks)."""

    slug: str
    column: str
    bounds: str  # "time": value x (1 -/+ ci); "throughput": value / (1 +/- ci); "paired"; ""


# Slugs name their unit: Bencher's built-in "latency" is in nanoseconds, ours in milliseconds.
MEASURES = (
    Measure("latency-ms", "time_ms", "time"),
    Measure("bandwidth-gb-s", "bandwidth_GB_s", "throughput"),
    Measure("tflops", "tflops", "throughput"),
    Measure("energy-mj", "energy_mJ", ""),
    Measure("paired-ratio", "paired_ratio", "paired"),
)


def bmf_json(model) -> str:
    """The BMF text of a summary (its run) or a regression model (its candidate)."""
    return bmf_text(exported_view(model))


def exported_view(model):
    """The FrameView of the rows exported: the summary's run, the regression's candidate."""
    if model.kind is ReportKind.REGRESSION:
        return model.cases.runs[1].view
    return model.cases.view


def bmf_text(view) -> str:
    """``{benchmark name: {measure slug: metric}}`` of the rows of ``view`` that ran ok, as
    JSON text.  Written a column at a time, not through dicts and json.dumps, which took
    several times as long on 200,000 rows (docs/VALIDATION.md)."""
    rows = np.flatnonzero(success_mask(view.objects("status"))) if view.rows else []
    if not len(rows):
        return "{}\n"
    ci = median_ci_pct(view, RULES.notch)[rows] / 100.0
    paired = (view.floats("paired_ratio_lo")[rows], view.floats("paired_ratio_hi")[rows])
    columns = []  # per measure, each row's '"slug": {...}' ("" where it has none)
    for measure in MEASURES:
        value = view.floats(measure.column)[rows]
        low, high = _bounds(measure.bounds, value, ci, paired)
        slug = json.dumps(measure.slug)
        columns.append(
            [f"{slug}: {text}" if text else "" for text in _metric_texts(value, low, high)]
        )
    names = benchmark_names(view.objects("api")[rows], view.labels(rows))
    found = {}
    for name, *parts in zip(names, *columns, strict=True):
        text = ", ".join(filter(None, parts))
        if text:  # a case twice (an input error the report names): its last row
            found[name] = f"{_quoted(name)}: {{{text}}}"
    return "{\n" + ",\n".join(found.values()) + "\n}\n" if found else "{}\n"


def _bounds(kind: str, value, ci, paired) -> tuple[np.ndarray, np.ndarray]:
    """lower_value and upper_value of every row (NaN where the row has no interval)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        usable = np.where((ci >= 0) & (ci < 1), ci, np.nan)
        if kind == "paired":
            return paired
        if kind == "time":
            return value * (1 - usable), value * (1 + usable)
        if kind == "throughput":  # a throughput is work / time: the slow end is the low one
            return value / (1 + usable), value / (1 - usable)
    nothing = np.full(len(value), np.nan)
    return nothing, nothing


def _metric_texts(value, low, high) -> list[str]:
    """Each row's metric object as JSON ("" where its value is not a positive finite number);
    the bounds only where both are finite and on their side of the value."""
    with np.errstate(invalid="ignore"):
        kept = np.isfinite(value) & (value > 0)
        bounded = kept & np.isfinite(low) & np.isfinite(high) & (low > 0)
        bounded &= (low <= value) & (value <= high)
    values, lows, highs = (_number_texts(column) for column in (value, low, high))
    texts = [""] * len(value)
    for i in np.flatnonzero(bounded).tolist():
        texts[i] = f'{{"value": {values[i]}, "lower_value": {lows[i]}, "upper_value": {highs[i]}}}'
    for i in np.flatnonzero(kept & ~bounded).tolist():
        texts[i] = f'{{"value": {values[i]}}}'
    return texts


def _number_texts(column: np.ndarray) -> list[str]:
    """JSON numbers of a float column, as the --json report writes them (pandas' C encoder,
    15 decimals: a fifth of the time of repr() per value)."""
    import pandas as pd

    return pd.Series(column).to_json(orient="values", double_precision=15)[1:-1].split(",")


def _quoted(text: str) -> str:
    """A JSON string (json's own escaping)."""
    return encode_basestring(text)


def benchmark_names(apis, labels) -> list[str]:
    """``API (case label)``; a name past Bencher's limit is cut and keeps a hash of the whole,
    so two long names stay apart."""
    names = []
    for api, label in zip(apis, labels, strict=True):
        name = f"{api} ({label})"
        if len(name) > MAX_BENCHMARK_CHARS:
            digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:HASH_CHARS]
            name = f"{name[: MAX_BENCHMARK_CHARS - HASH_CHARS - 3]}… {digest}"
        names.append(name)
    return names
