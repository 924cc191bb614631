"""From the store's arrays to per-case series and their change points (one device each)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from fi_attn_bench.history.detect import (
    DEFAULT_SETTINGS,
    DetectionSettings,
    SeriesNormalization,
    detect,
    smallest_step_pct,
)
from fi_attn_bench.results.run_store import CaseInfo, History, RunInfo

SHARED_SERIES_LABEL = "all cases (run-wide level)"


@dataclass(frozen=True)
class CaseChange:
    """One change point, placed on its run and commit."""

    case: CaseInfo | None  # None: the run-wide level of every case on that device
    device: str
    run: RunInfo
    size_pct: float
    confidence: float
    normalization: SeriesNormalization

    @property
    def label(self) -> str:
        return case_label(self.case) if self.case else SHARED_SERIES_LABEL


@dataclass(frozen=True)
class CaseSeries:
    """One case's results on one device, oldest first, as detection saw them."""

    case: CaseInfo
    device: str
    run_positions: np.ndarray  # into Analysis.runs
    time_ms: np.ndarray
    clock_MHz: np.ndarray
    power_capped_pct: np.ndarray
    normalization: SeriesNormalization
    changes: tuple[CaseChange, ...]
    noise_pct: float  # noise per run after cleaning, in % (NaN: too few runs to tell)
    smallest_step_pct: float  # a new step under this is not reported within three runs


@dataclass(frozen=True)
class Analysis:
    runs: tuple[RunInfo, ...]
    series: tuple[CaseSeries, ...]
    shared_changes: tuple[CaseChange, ...]

    def changes(self) -> list[CaseChange]:
        """Every change point, largest first."""
        found = [change for s in self.series for change in s.changes] + list(self.shared_changes)
        return sorted(found, key=lambda change: -abs(change.size_pct))


def case_label(case: CaseInfo) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in case.fields.items() if v != "" and k != "impl")
    impl = f" [{case.impl}]" if case.impl else ""
    return f"{case.api}({fields}){impl}"


def parse_case_filter(text: str | None) -> dict[str, str]:
    """'api=X,batch_size=64' -> {'api': 'X', 'batch_size': '64'}; ValueError on bad terms."""
    if not text:
        return {}
    terms = {}
    for term in text.split(","):
        name, sep, value = term.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--cases term {term!r} is not NAME=VALUE")
        terms[name.strip()] = value.strip()
    return terms


def case_matches(case: CaseInfo, terms: dict[str, str]) -> bool:
    values = {"api": case.api, "impl": case.impl, **case.fields}
    return all(str(values.get(name, "")) == value for name, value in terms.items())


def analyze(history: History, settings: DetectionSettings = DEFAULT_SETTINGS) -> Analysis:
    devices: dict[str, list[int]] = {}
    for position, run in enumerate(history.runs):
        devices.setdefault(run.device, []).append(position)
    series, shared = [], []
    for device, positions in devices.items():
        device_series, device_shared = analyze_device(
            history, device, np.array(positions), settings
        )
        series += device_series
        shared += device_shared
    return Analysis(history.runs, tuple(series), tuple(shared))


def analyze_device(history: History, device: str, run_positions: np.ndarray, settings):
    in_device = np.isin(history.run_index, run_positions)
    case_positions = np.unique(history.case_index[in_device])
    row_of = np.full(len(history.runs), -1)
    row_of[run_positions] = np.arange(len(run_positions))
    column_of = np.full(len(history.cases), -1)
    column_of[case_positions] = np.arange(len(case_positions))
    shape = (len(run_positions), len(case_positions))
    rows, columns = row_of[history.run_index[in_device]], column_of[history.case_index[in_device]]
    matrices = {}
    for name in ("time_ms", "clock_MHz", "power_capped_pct"):
        matrix = np.full(shape, np.nan)
        matrix[rows, columns] = getattr(history, name)[in_device]
        matrices[name] = matrix
    result = detect(matrices["time_ms"], matrices["clock_MHz"], settings)
    changes_of: dict[int, list[CaseChange]] = {}
    shared = []
    for point in result.change_points:
        run = history.runs[run_positions[point.run]]
        case = history.cases[case_positions[point.series]] if point.series >= 0 else None
        normalization = (
            result.normalization[point.series] if case else SeriesNormalization(0.0, False)
        )
        change = CaseChange(case, device, run, point.size_pct, point.confidence, normalization)
        (changes_of.setdefault(point.series, []) if case else shared).append(change)
    series = []
    for column, case_position in enumerate(case_positions):
        present = np.isfinite(matrices["time_ms"][:, column])
        series.append(
            CaseSeries(
                case=history.cases[case_position],
                device=device,
                run_positions=run_positions[present],
                time_ms=matrices["time_ms"][present, column],
                clock_MHz=matrices["clock_MHz"][present, column],
                power_capped_pct=matrices["power_capped_pct"][present, column],
                normalization=result.normalization[column],
                changes=tuple(changes_of.get(column, ())),
                noise_pct=float(np.expm1(result.noise[column]) * 100),
                smallest_step_pct=smallest_step_pct(
                    float(result.noise[column]), int(present.sum()), settings
                ),
            )
        )
    return series, shared


SENSITIVITY_STEP_PCT = 2.0  # the step size sensitivity is quoted for: the smallest one measured


def sensitivity_summary(analysis: Analysis) -> str:
    """How many series are too noisy to show a 2 % step within three runs ("" when no series
    is long enough to tell)."""
    known = [s for s in analysis.series if s.smallest_step_pct == s.smallest_step_pct]
    if not known:
        return ""
    blunt = sum(s.smallest_step_pct > SENSITIVITY_STEP_PCT for s in known)
    return (
        f"{blunt} of {len(known)} series cannot show a {SENSITIVITY_STEP_PCT:g} % step"
        " by the third run after it"
    )


def least_sensitive(analysis: Analysis, count: int) -> list[CaseSeries]:
    """The series that need the largest step to show one, beyond the quoted step size."""
    blunt = [s for s in analysis.series if s.smallest_step_pct > SENSITIVITY_STEP_PCT]
    return sorted(blunt, key=lambda s: -s.smallest_step_pct)[:count]


def sensitivity_note(series: CaseSeries) -> str:
    return (
        f"steps under {series.smallest_step_pct:.1f} % not shown,"
        f" noise {series.noise_pct:.2f} % per run"
    )


def change_record(change: CaseChange) -> dict:
    """A JSON-ready view of one change point."""
    return {
        "case": change.label,
        "device": change.device,
        "run_id": change.run.run_id,
        "commit": change.run.commit,
        "branch": change.run.branch,
        "started_utc": change.run.started_utc,
        "size_pct": round(change.size_pct, 3),
        "confidence": None
        if change.confidence != change.confidence
        else round(change.confidence, 4),
        "clock_scaled": change.normalization.scaled,
        "clock_exponent": round(change.normalization.clock_exponent, 3),
        "fields": json.dumps(change.case.fields) if change.case else "",
    }
