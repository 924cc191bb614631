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
import math
from dataclasses import dataclass

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
    return json.dumps(bmf_of_view(exported_view(model)), indent=1, allow_nan=False) + "\n"


def exported_view(model):
    """The FrameView of the rows exported: the summary's run, the regression's candidate."""
    if model.kind is ReportKind.REGRESSION:
        return model.cases.runs[1].view
    return model.cases.view


def bmf_of_view(view) -> dict:
    """{benchmark name: {measure slug: metric}} of the rows of ``view`` that ran ok."""
    if not view.rows:
        return {}
    rows = np.flatnonzero(success_mask(view.objects("status")))
    if not len(rows):
        return {}
    ci = median_ci_pct(view, RULES.notch)[rows] / 100.0
    columns = {measure.column: view.floats(measure.column)[rows] for measure in MEASURES}
    paired = (view.floats("paired_ratio_lo")[rows], view.floats("paired_ratio_hi")[rows])
    names = benchmark_names(view.objects("api")[rows], view.labels(rows))
    found = {}
    for index, name in enumerate(names):
        metrics = {}
        for measure in MEASURES:
            value = float(columns[measure.column][index])
            if not (math.isfinite(value) and value > 0):
                continue
            bounds = _bounds(measure.bounds, value, float(ci[index]), paired, index)
            metrics[measure.slug] = {"value": value, **bounds}
        if metrics:
            found[name] = metrics
    return found


def _bounds(kind: str, value: float, ci: float, paired, index: int) -> dict:
    """lower_value and upper_value where the row has an interval, else none."""
    if kind == "paired":
        low, high = float(paired[0][index]), float(paired[1][index])
    elif kind in ("time", "throughput") and math.isfinite(ci) and 0 <= ci < 1:
        low, high = (value * (1 - ci), value * (1 + ci))
        if kind == "throughput":  # a throughput is work / time: the slow end is the low one
            low, high = value / (1 + ci), value / (1 - ci)
    else:
        return {}
    if not (math.isfinite(low) and math.isfinite(high) and 0 < low <= value <= high):
        return {}
    return {"lower_value": low, "upper_value": high}


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
