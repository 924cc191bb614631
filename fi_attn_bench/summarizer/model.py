"""Compare step: pure functions from loaded runs to report models.

Nothing here formats text for a reader or touches a file; the Markdown and JSON
renderers only read these models.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field, replace
from typing import ClassVar

import numpy as np

from fi_attn_bench.results.schema import (
    NOISY_NOTE,
    NUMERIC_COLUMNS,
    OPTIONAL_COLUMNS,
    STATUS_FAILED,
    STATUS_LEGACY_OK,
    UNRECORDED_HARNESS_VERSION,
    Compare,
    Kind,
    Role,
)
from fi_attn_bench.summarizer.contest import DEFAULT_CONTEST, ContestOptions, contest_scores
from fi_attn_bench.summarizer.frames import (
    FrameView,
    case_labels,
    frame_case_columns,
    optional_floats,
    side_frame,
)
from fi_attn_bench.summarizer.headtohead import head_to_head
from fi_attn_bench.summarizer.identity import case_ids, unique_cases
from fi_attn_bench.summarizer.loading import SUCCESS_STATUSES, InputIssue, LoadResult
from fi_attn_bench.summarizer.paths import missing_shards
from fi_attn_bench.wording import counted as plural

EXIT_OK = 0
EXIT_BENCHMARK_FAILURE = 1
EXIT_INPUT_ERROR = 2

PEAK_PCT_LIMIT = 100.0  # above 100 % of a hardware peak a figure is an artefact, not a speed
# Text columns only: a number (shard) would read "0" from the file but "0.0" from a frame.
ENVIRONMENT_COLUMNS = tuple(
    column.name
    for column in OPTIONAL_COLUMNS
    if (column.role is Role.ENVIRONMENT or column.name in ("timer", "l2", "dtype"))
    and column.kind in (Kind.TEXT, Kind.CHOICE)
)
# Environment columns that differ row by row: shown as their range, first … last.
RANGE_COLUMNS = ("timestamp_utc",)
# A difference in these means the two runs are not measuring the same hardware/software.
MISMATCH_COLUMNS = tuple(
    column.name for column in OPTIONAL_COLUMNS if column.compare is Compare.WARN
)


class Verdict(enum.Enum):
    """The outcome of a whole command; its exit code is the seed's contract."""

    PASS = ("pass", EXIT_OK)
    FAIL = ("fail", EXIT_BENCHMARK_FAILURE)
    INVALID_INPUT = ("invalid input", EXIT_INPUT_ERROR)
    NOT_COMPARABLE = ("not comparable", EXIT_INPUT_ERROR)  # runs measured different things

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def exit_code(self) -> int:
        return self.value[1]


class CaseState(enum.Enum):
    """What happened to one matched case (the seed's names, plus ``within noise``)."""

    COMPARED = "compared"
    REGRESSION = "regression"
    WITHIN_NOISE = "within noise"
    CANDIDATE_FAILED = "candidate failed"
    RECOVERED = "recovered"
    BOTH_FAILED = "both failed"


FAILING_STATES = (CaseState.REGRESSION, CaseState.CANDIDATE_FAILED, CaseState.BOTH_FAILED)


@dataclass(frozen=True)
class ReportWarning:
    """Something a reader must know before trusting the verdict; the report opens with it
    and stdout prints it, one line each."""

    headline: str
    detail: str


@dataclass(frozen=True)
class GateRules:
    """The documented thresholds of the regression decision (README, docs/DESIGN.md)."""

    notch: float = 1.57  # median's 95 % half-width = notch * IQR / sqrt(n) (McGill notches)
    alpha: float = 0.05  # two-sided Mann-Whitney U level when both sides have raw samples
    large_change_pct: float = 10.0  # highlighted without a gate: this much slower, significant
    power_capped_diff_pp: float = 20.0  # power_capped_pct apart by more: other conditions
    sm_clock_diff_pct: float = 3.0  # sm_clock_mean_MHz apart by more (in %): other conditions

    def __post_init__(self):
        if not (0 < self.alpha < 1 and self.notch > 0 and self.large_change_pct > 0):
            raise ValueError("gate rules: 0 < alpha < 1, notch > 0, large_change_pct > 0")


RULES = GateRules()


@dataclass(frozen=True)
class Gate:
    """When a slower case fails the run.

    A metric regresses when it is worse by more than ``threshold_pct`` and the change
    is significant: with raw samples on both sides, a two-sided Mann-Whitney U test at
    ``rules.alpha``; else the change must exceed the uncertainty of the two medians
    (root sum of squares of their 95 % half-widths, ``frames.median_ci_pct``).  A change
    past the gate that is not significant is ``within noise``; rows without statistics
    are judged by the gate alone.  ``threshold_pct=None`` only reports.

    ``allowed_differences``: columns that must match between the runs
    (``Compare.MUST_MATCH``) but may differ in this comparison (--allow-difference).
    """

    threshold_pct: float | None = None
    rules: GateRules = RULES
    allowed_differences: tuple[str, ...] = ()
    # A matched case whose energy_mJ rises by more than this fails the run (both sides
    # with energy; no significance test: the row keeps no spread of its energy)
    energy_threshold_pct: float | None = None

    def __post_init__(self):
        for pct in (self.threshold_pct, self.energy_threshold_pct):
            if pct is not None and not (math.isfinite(pct) and pct >= 0):
                raise ValueError("the regression gate must be a finite, non-negative percentage")

    @property
    def text(self) -> str:
        return "report only" if self.threshold_pct is None else f"{self.threshold_pct:g}%"


@dataclass(frozen=True)
class Best:
    """The best row of one metric for one API."""

    column: str
    value: float
    case: str
    source: str


@dataclass(frozen=True)
class ApiSummary:
    api: str
    rows: int
    status: str
    best: tuple[Best, ...]
    artefacts: int


@dataclass(frozen=True)
class FileSummary:
    source: str
    rows: int
    status: str  # "invalid" or the status counts


class ReportKind(enum.Enum):
    """Which report a model is: a renderer has one function per kind it renders."""

    SUMMARY = "summary"
    REGRESSION = "regression"
    HISTORY = "history"  # fi-attn-history's dashboard and digest (history.report)


@dataclass
class SummaryModel:
    """Everything a summary report says, computed once."""

    kind: ClassVar[ReportKind] = ReportKind.SUMMARY

    paths: list[str]
    files: list[FileSummary]
    valid_files: int
    total_rows: int
    apis: list[ApiSummary]
    failures: object  # DataFrame: api, case, source, error
    artefacts: object  # DataFrame: api, case, source, bandwidth_GB_s, pct_peak_bw, pct_peak_tflops
    issues: list[InputIssue]
    legacy_rows: int
    environment: dict[str, list[str]]
    verdict: Verdict
    reason: str
    frame: object = field(repr=False)  # the validated rows, for plots and JSON
    cases: object = field(default=None, repr=False)  # CaseList: per-case results, in order
    head_to_head: list = field(default_factory=list)  # headtohead.ApiComparison per API
    contest: list = field(default_factory=list)  # contest.ContestScore per head-to-head API
    warnings: list[ReportWarning] = field(default_factory=list)
    noisy: list = field(default_factory=list)  # NoisyRow per row the harness marked noisy
    run_note: str = ""  # the runs left out because a newer run measured their cases
    older_files: int = 0  # of valid_files: files of older runs of the same cases, left out

    JSON_EXCLUDE = ("cases",)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code


@dataclass(frozen=True)
class NoisyRow:
    """A row whose ``notes`` say its noise was above the target when its budget ran out."""

    api: str
    case: str
    note: str


def noisy_rows(view) -> list[NoisyRow]:
    """The rows marked noisy, in file order (a file without ``notes`` has none)."""
    if not view.rows:
        return []
    try:
        notes = view.objects("notes")
    except KeyError:  # the pandas path has no column that no file wrote
        return []
    marked = [
        index
        for index, note in enumerate(notes)
        if isinstance(note, str) and any(p.startswith(NOISY_NOTE) for p in note.split("; "))
    ]
    if not marked:
        return []
    apis, labels = view.objects("api")[marked], view.labels(marked)
    return [
        NoisyRow(str(api), str(label), str(notes[index]))
        for api, label, index in zip(apis, labels, marked, strict=True)
    ]


@dataclass(frozen=True)
class CaseRow:
    """One row of the per-case results table."""

    api: str
    case: str
    status: str
    time_ms: float
    bandwidth_GB_s: float
    tflops: float


@dataclass(frozen=True)
class CaseList:
    """Every row of a run, by API and case parameters (numbers by value); rows are
    made only for the part someone reads."""

    view: object
    order: np.ndarray

    def __len__(self) -> int:
        return len(self.order)

    def rows(self, start: int, stop: int) -> list[CaseRow]:
        picked = self.order[start:stop]
        apis, states = self.view.objects("api")[picked], self.view.objects("status")[picked]
        labels = self.view.labels(picked)
        metrics = [self.view.floats(name)[picked].tolist() for name in NUMERIC_COLUMNS]
        return [
            CaseRow(str(api), str(label), str(status), *values)
            for api, label, status, *values in zip(apis, labels, states, *metrics, strict=True)
        ]


def summarize(result: LoadResult, contest: ContestOptions = DEFAULT_CONTEST) -> SummaryModel:
    """The summary model of one run, from its row frame."""
    frame = side_frame(result)
    valid_files = (
        len({table.source for table in result.tables})
        if result.tables
        else int(frame["_source"].nunique())
    )
    model = summary_model(
        FrameView(frame), result.paths, result.issues, valid_files, frame, contest
    )
    files = _left_out(model.files, result)
    older = sum(file.status == LEFT_OUT_STATUS for file in files)
    # A file left out as an older run is valid: it is counted, and said to be left out.
    return replace(
        model,
        run_note=result.note,
        files=files,
        valid_files=model.valid_files + older,
        older_files=older,
    )


LEFT_OUT_STATUS = "older run, left out"


def _left_out(files: list[FileSummary], result: LoadResult) -> list[FileSummary]:
    """Files of runs a newer run superseded: no rows read, and said so."""
    if not result.note:
        return files
    read = result.valid_sources | {issue.source for issue in result.issues}
    return [
        file if file.source in read else replace(file, status=LEFT_OUT_STATUS) for file in files
    ]


def summary_model(
    view, paths, issues, valid_files: int, frame=None, contest: ContestOptions = DEFAULT_CONTEST
) -> SummaryModel:
    """The summary model from a run's FrameView."""
    read_issues = issues
    ids = case_ids([view], ["api", *view.case_columns])[0] if view.rows else np.zeros(0, int)
    issues = [*issues, *duplicate_cases(view, ids), *missing_shards(view, "input")]
    status = _StatusCodes(view)
    artefact = artefact_mask(view)
    failed_rows = status.count(STATUS_FAILED)
    verdict, reason = _summary_verdict(len(issues), failed_rows, view.rows)
    environment = environment_of(view)
    return SummaryModel(
        paths=[str(path) for path in paths],
        files=_file_summaries(view, paths, read_issues, status),
        valid_files=valid_files,
        total_rows=view.rows,
        apis=_api_summaries(view, status, artefact),
        failures=failure_table(view, status.mask(STATUS_FAILED)),
        artefacts=_artefact_table(view, artefact),
        issues=list(issues),
        legacy_rows=status.count(STATUS_LEGACY_OK),
        environment=environment,
        verdict=verdict,
        reason=reason,
        frame=frame,
        cases=CaseList(view, np.argsort(ids, kind="stable")),
        head_to_head=(comparisons := head_to_head(view, ids)),
        contest=contest_scores(view, comparisons, contest),
        warnings=mixed_harness_warnings({"run": environment}),
        noisy=noisy_rows(view),
    )


def duplicate_cases(view, ids, group: str = "input") -> tuple[InputIssue, ...]:
    """A case present twice in one run: an input error, as in a comparison."""
    if not view.rows:
        return ()
    return unique_cases(view, ids, view.labels, group).issues


class _StatusCodes:
    """Row statuses as small integers, so counts per file or API are one bincount."""

    def __init__(self, view):
        codes, self.names = view.codes("status") if view.rows else ([], [])
        self.codes = np.asarray(codes) if len(codes) else np.zeros(0, dtype=np.int64)

    def mask(self, *statuses: str) -> np.ndarray:
        wanted = [index for index, name in enumerate(self.names) if name in statuses]
        return np.isin(self.codes, wanted)

    def count(self, status: str) -> int:
        return int(self.mask(status).sum())

    def text_by_group(self, group_codes: np.ndarray, groups: int) -> list[str]:
        """The seed's "failed=1, ok=2" text for each group code."""
        width = max(len(self.names), 1)
        if groups == 1:  # the usual single file or API: no per-row key to build
            counts = np.bincount(self.codes, minlength=width).reshape(1, width)
        else:
            keys = np.asarray(group_codes, dtype=np.int64) * width + self.codes
            counts = np.bincount(keys, minlength=groups * width).reshape(groups, width)
        order = sorted(range(len(self.names)), key=lambda index: str(self.names[index]))
        return [", ".join(f"{self.names[i]}={row[i]}" for i in order if row[i]) for row in counts]


def _summary_verdict(issues: int, failed: int, rows: int) -> tuple[Verdict, str]:
    if issues:
        return (
            Verdict.INVALID_INPUT,
            f"{plural(issues, 'input error')}; the results cannot be trusted",
        )
    if failed:
        return Verdict.FAIL, f"{failed} of {plural(rows, 'case')} failed"
    return Verdict.PASS, "1 case ok" if rows == 1 else f"all {rows} cases ok"


def _file_summaries(view, paths, issues, status: _StatusCodes) -> list[FileSummary]:
    invalid = {issue.source for issue in issues}
    rows, texts = {}, {}
    if view.rows:
        codes, sources = view.codes("_source")
        rows = dict(zip(sources, np.bincount(codes, minlength=len(sources)).tolist(), strict=True))
        texts = dict(zip(sources, status.text_by_group(codes, len(sources)), strict=True))
    files = []
    for path in paths:
        source = str(path)
        text = "invalid" if source in invalid else texts.get(source, "")
        files.append(FileSummary(source, rows.get(source, 0), text))
    return files


def artefact_mask(view) -> np.ndarray:
    """Rows above PEAK_PCT_LIMIT of a hardware peak: an artefact, not a speed."""
    with np.errstate(invalid="ignore"):
        return (view.floats("pct_peak_bw") > PEAK_PCT_LIMIT) | (
            view.floats("pct_peak_tflops") > PEAK_PCT_LIMIT
        )


def _api_summaries(view, status: _StatusCodes, artefact: np.ndarray) -> list[ApiSummary]:
    if not view.rows:
        return []
    success = status.mask(*SUCCESS_STATUSES)
    api_codes, apis = view.codes("api")
    texts = status.text_by_group(api_codes, len(apis))
    groups = _group_rows(np.asarray(api_codes), len(apis))
    summaries = []
    for code in sorted(range(len(apis)), key=lambda index: str(apis[index])):
        rows = groups[code]
        best = tuple(
            entry
            for column in (*NUMERIC_COLUMNS, *BEST_LOWEST_EXTRA)
            if (entry := _best(view, rows, success, artefact, column)) is not None
        )
        summaries.append(
            ApiSummary(
                api=str(apis[code]),
                rows=view.rows if isinstance(rows, slice) else len(rows),
                status=texts[code],
                best=best,
                artefacts=int(artefact[rows].sum()),
            )
        )
    return summaries


def _group_rows(codes: np.ndarray, groups: int) -> list:
    """The rows of each group code, in order; one group is all rows (a slice: no copy)."""
    if groups == 1:
        return [slice(None)]
    order = np.argsort(codes, kind="stable")
    bounds = np.searchsorted(codes[order], np.arange(groups + 1))
    return [order[bounds[group] : bounds[group + 1]] for group in range(groups)]


def _best(view, rows, success, artefact, column: str) -> Best | None:
    """Minimum time and energy, maximum bandwidth/TFLOPS (the first such row); artefact
    rows never count as a speed."""
    values = view.floats(column)[rows]
    keep = success[rows] & ~np.isnan(values)
    if column not in BEST_LOWEST:
        keep &= ~artefact[rows]
    if not keep.any():
        return None
    position = _first_extreme(values, keep, lowest=column in BEST_LOWEST)
    pick = position if isinstance(rows, slice) else int(rows[position])
    return Best(
        column=column,
        value=float(view.floats(column)[pick]),
        case=str(view.labels([pick])[0]),
        source=str(view.texts("_source", [pick])[0]),
    )


# Best per API beyond the result columns (where rows have it): lowest energy per call.
BEST_LOWEST_EXTRA = ("energy_mJ",)
BEST_LOWEST = frozenset(("time_ms", *BEST_LOWEST_EXTRA))


def _first_extreme(values: np.ndarray, keep: np.ndarray, lowest: bool) -> int:
    """Position of the first kept minimum (or maximum) of ``values``."""
    fill = np.inf if lowest else -np.inf
    position = int((np.argmin if lowest else np.argmax)(np.where(keep, values, fill)))
    if keep[position]:
        return position
    candidates = np.flatnonzero(keep)  # every kept value is the fill value itself
    return int(candidates[0])


def failure_table(view, failed: np.ndarray, run: str | None = None):
    """api, case, source, error of every failed row (error_type: error)."""
    rows = np.flatnonzero(failed)
    kinds, texts = view.texts("error_type", rows), view.texts("error", rows)
    error = [f"{kind}: {text}".strip(": ") for kind, text in zip(kinds, texts, strict=True)]
    table = view.table(
        {
            "api": _objects(view.texts("api", rows)),
            "case": view.labels(rows),
            "source": _objects(view.texts("_source", rows)),
            "error": _objects(error),
        }
    )
    if run is not None:
        table.insert(0, "run", run)
    return table


def _objects(values: list) -> np.ndarray:
    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _artefact_table(view, artefact: np.ndarray):
    rows = np.flatnonzero(artefact)
    return view.table(
        {
            "api": _objects(view.texts("api", rows)),
            "case": view.labels(rows),
            "source": _objects(view.texts("_source", rows)),
            "bandwidth_GB_s": view.floats("bandwidth_GB_s")[rows],
            "pct_peak_bw": view.floats("pct_peak_bw")[rows],
            "pct_peak_tflops": view.floats("pct_peak_tflops")[rows],
        }
    )


def environment_of(view) -> dict[str, list[str]]:
    """Distinct non-empty values of each environment column a run carries.  A run whose rows
    name their timer but not the harness version came from a harness older than the column,
    which measured differently: said as such, so a comparison with a newer run warns."""
    found = {}
    for name in ENVIRONMENT_COLUMNS:
        if name in RANGE_COLUMNS:  # one value per row: the first and last are what matter
            texts = view.text_range(name)
            if texts:
                found[name] = [" … ".join(texts)]
            continue
        texts = view.distinct(name)
        if texts:
            found[name] = texts
    if "timer" in found and "harness_version" not in found:
        found["harness_version"] = [UNRECORDED_HARNESS_VERSION]
    return found


ENVIRONMENT_VALUES_SHOWN = 8


def values_text(values: list[str]) -> str:
    """A column's distinct values, the first ENVIRONMENT_VALUES_SHOWN of them named."""
    shown = ", ".join(values[:ENVIRONMENT_VALUES_SHOWN])
    hidden = len(values) - ENVIRONMENT_VALUES_SHOWN
    return shown + (f" (+{hidden} more)" if hidden > 0 else "")


def mixed_harness_warnings(environments: dict[str, dict[str, list[str]]]) -> list[ReportWarning]:
    """A warning per run (name -> environment_of) whose rows were measured by several harness
    versions: their time_ms may not mean the same thing."""
    warnings = []
    for run, environment in environments.items():
        versions = environment.get("harness_version", [])
        if len(versions) > 1:
            warnings.append(
                ReportWarning(
                    f"the {run} mixes {len(versions)} harness versions",
                    values_text(versions) + " (rows measured differently; rerun them with one)",
                )
            )
    return warnings


def summary_plot_rows(model: SummaryModel):
    """The rows plots.render_summary_plots reads (one per valid CSV row)."""
    frame = model.frame
    columns = frame_case_columns(frame)
    rows = frame[["api", *columns, "status", *NUMERIC_COLUMNS]].copy()
    rows["arithmetic_intensity"] = arithmetic_intensity(frame)
    rows["pct_peak_bw"] = optional_floats(frame, "pct_peak_bw")
    rows["pct_peak_tflops"] = optional_floats(frame, "pct_peak_tflops")
    rows["energy_mJ"] = optional_floats(frame, "energy_mJ")
    rows["case_label"] = case_labels(frame, columns)
    peaks = stated_peaks(frame)
    if peaks:
        rows.attrs["peaks"] = peaks
    return rows


def stated_peaks(frame) -> dict | None:
    """The device peaks the rows' ``pct_peak_*`` columns were computed against.

    Recovered from the rows themselves (metric * 100 / percentage, median over rows), so
    the roofline draws the same ceilings the benchmark used; None when no row states them.
    """
    peaks = {}
    for metric, pct_column, key in (
        ("bandwidth_GB_s", "pct_peak_bw", "bandwidth_GB_s"),
        ("tflops", "pct_peak_tflops", "tflops"),
    ):
        pct = optional_floats(frame, pct_column)
        value = frame[metric].to_numpy(dtype=np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):
            implied = np.where(pct > 0, value * 100.0 / pct, np.nan)
        implied = implied[np.isfinite(implied)]
        if implied.size:
            peaks[key] = float(np.median(implied))
    if not peaks:
        return None
    return {**peaks, "source": "pct_peak_* columns"}


def arithmetic_intensity(frame) -> np.ndarray:
    """FLOP per byte: flops/io_bytes when known, else tflops*1e3/bandwidth_GB_s."""
    flops, io_bytes = optional_floats(frame, "flops"), optional_floats(frame, "io_bytes")
    tflops = frame["tflops"].to_numpy(dtype=np.float64)
    bandwidth = frame["bandwidth_GB_s"].to_numpy(dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        stated = np.where(io_bytes > 0, flops / io_bytes, np.nan)
        derived = np.where((tflops > 0) & (bandwidth > 0), tflops * 1e3 / bandwidth, np.nan)
    return np.where(np.isnan(stated), derived, stated)
