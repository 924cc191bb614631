"""Raw per-call samples and the rank test that uses them.

The bench's ``--samples-dir DIR`` writes ``DIR/<csv-stem>.samples.jsonl.gz``: gzip
JSON Lines, one object per finished case::

    {"api": str, "case": {param: cell text exactly as in the CSV}, "impl": str,
     "samples_ms": [float, ...]}

Given samples of both sides for a matched case, the comparison calls its change
significant with a two-sided Mann-Whitney U test (normal approximation with tie and
continuity correction, as scipy's ``mannwhitneyu(method="asymptotic")``), the test
Google Benchmark's compare.py uses; scipy is not a dependency.
"""

from __future__ import annotations

import json
import math
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fi_attn_bench.results.input_limits import (
    InputLimitError,
    check_gzip_within_limits,
    open_gzip_text,
)
from fi_attn_bench.results.schema import IDENTITY_DEFAULTS

SAMPLES_PATTERN = "*.samples.jsonl.gz"
DEFAULT_IMPL = IDENTITY_DEFAULTS["impl"]


class SamplesError(ValueError):
    """A samples file that cannot be used; its message is the one line printed."""


def mann_whitney_p(first, second) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie and
    continuity corrected); NaN when a side is empty, 1.0 when every value ties."""
    x = np.asarray(first, dtype=np.float64)
    y = np.asarray(second, dtype=np.float64)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return math.nan
    values, inverse, counts = np.unique(
        np.concatenate([x, y]), return_inverse=True, return_counts=True
    )
    ends = np.cumsum(counts)
    average_rank = ends - (counts - 1) / 2.0  # ranks start at 1; ties share their mean
    u1 = average_rank[inverse.reshape(-1)[:n1]].sum() - n1 * (n1 + 1) / 2.0
    n = n1 + n2
    ties = float((counts.astype(np.float64) ** 3 - counts).sum())
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return 1.0
    shift = u1 - n1 * n2 / 2.0
    z = (abs(shift) - 0.5) / math.sqrt(variance) if abs(shift) >= 0.5 else 0.0
    return min(1.0, math.erfc(z / math.sqrt(2.0)))


def case_key(api: str, case: dict, impl: str) -> tuple:
    """What names a case in a samples file and in a CSV row alike: api, the non-empty
    case cells (stripped, identity columns other than impl included), impl."""
    cells = tuple(
        sorted(
            (str(name), str(value).strip())
            for name, value in case.items()
            if name != "impl" and str(value).strip() != ""
        )
    )
    return str(api), cells, (str(impl).strip() or DEFAULT_IMPL)


@dataclass(frozen=True)
class SideSamples:
    """The samples of one side, by case_key."""

    by_case: dict

    def get(self, key) -> np.ndarray | None:
        return self.by_case.get(key)


def read_samples(paths) -> SideSamples:
    """Every samples file of one side (files, or directories searched for
    *.samples.jsonl.gz); SamplesError on anything unusable."""
    from fi_attn_bench.summarizer.paths import expand_paths

    files, error = expand_paths(paths, SAMPLES_PATTERN)
    if error:
        raise SamplesError(error)
    by_case: dict = {}
    for path in files:
        for line_number, record in _records(Path(path)):
            key = _record_key(record, path, line_number)
            if key in by_case:
                raise SamplesError(f"{path}:{line_number}: case listed twice in the samples")
            by_case[key] = _record_samples(record, path, line_number)
    return SideSamples(by_case)


def _records(path: Path):
    try:
        check_gzip_within_limits(path)  # before any line is parsed: a bomb costs no memory
        with open_gzip_text(path) as stream:
            for line_number, line in enumerate(stream, 1):
                if line.strip():
                    yield line_number, json.loads(line)
    except InputLimitError as exc:
        raise SamplesError(f"{path}: {exc}") from None
    except (OSError, EOFError, zlib.error, UnicodeError) as exc:
        raise SamplesError(f"{path}: not a readable gzip samples file: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SamplesError(f"{path}: invalid JSON line: {exc}") from None


def _record_key(record, path, line_number: int) -> tuple:
    if not isinstance(record, dict) or not isinstance(record.get("api"), str):
        raise SamplesError(f"{path}:{line_number}: a samples line needs an api string")
    case = record.get("case")
    if not isinstance(case, dict):
        raise SamplesError(f"{path}:{line_number}: a samples line needs a case object")
    return case_key(record["api"], case, record.get("impl") or DEFAULT_IMPL)


def _record_samples(record, path, line_number: int) -> np.ndarray:
    values = record.get("samples_ms")
    if not isinstance(values, list) or not values:
        raise SamplesError(f"{path}:{line_number}: samples_ms must be a non-empty list")
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise SamplesError(f"{path}:{line_number}: samples_ms must hold numbers") from None
    if array.ndim != 1 or not np.isfinite(array).all() or (array <= 0).any():
        raise SamplesError(f"{path}:{line_number}: samples_ms must be finite times > 0")
    return array


@dataclass(frozen=True)
class RunSamples:
    """Both sides' samples; p_values() is what the comparison asks of them."""

    baseline: SideSamples
    candidate: SideSamples

    def p_values(self, base_run, cand_run, rows_b, rows_c, case_columns) -> np.ndarray:
        """Mann-Whitney p of each matched case (rows of both runs, in order); NaN
        where a side has no samples for it."""
        keys_b = _row_keys(base_run.view, rows_b, case_columns)
        keys_c = _row_keys(cand_run.view, rows_c, case_columns)
        found = np.full(len(keys_b), np.nan)
        for index, (key_b, key_c) in enumerate(zip(keys_b, keys_c, strict=True)):
            first, second = self.baseline.get(key_b), self.candidate.get(key_c)
            if first is not None and second is not None:
                found[index] = mann_whitney_p(first, second)
        return found


def _row_keys(view, rows, case_columns) -> list[tuple]:
    rows = np.asarray(rows, dtype=np.int64)
    apis = view.texts("api", rows)
    columns = {name: view.texts(name, rows) for name in case_columns}
    keys = []
    for index, api in enumerate(apis):
        case = {name: _text(values[index]) for name, values in columns.items()}
        keys.append(case_key(api, case, case.get("impl", "")))
    return keys


def _text(value) -> str:
    return "" if value is None or value != value else str(value)
