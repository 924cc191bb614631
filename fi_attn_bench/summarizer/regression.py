"""Compare step for baseline vs candidate: match cases, decide states, aggregate.

Each run's row frame gives a case id per row; matching, judging and aggregating are
numpy on those arrays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from fi_attn_bench.results.schema import CPU_TIMER, IDENTITY_DEFAULTS, NUMERIC_COLUMNS
from fi_attn_bench.summarizer.comparability import (
    FieldDifference,
    environment_warnings,
    field_differences,
    not_comparable_reason,
)
from fi_attn_bench.summarizer.frames import (
    FrameView,
    case_labels,
    failed_mask,
    frame_case_columns,
    median_ci_pct,
    side_frame,
    success_mask,
)
from fi_attn_bench.summarizer.identity import case_ids, unique_cases
from fi_attn_bench.summarizer.loading import InputIssue, LoadResult
from fi_attn_bench.summarizer.model import (
    FAILING_STATES,
    MISMATCH_COLUMNS,
    CaseState,
    Gate,
    ReportKind,
    ReportWarning,
    Verdict,
    artefact_mask,
    environment_of,
    failure_table,
    mixed_harness_warnings,
    plural,
)
from fi_attn_bench.summarizer.paths import missing_shards
from fi_attn_bench.summarizer.run_noise import NOISE_SIGMAS

CONDITION_COLUMNS = ("power_capped_pct", "sm_clock_mean_MHz")
MISSING_CASES_NAMED = 3  # missing candidate cases named in the warning line
ENERGY_COLUMN = "energy_mJ"  # compared beside time; gated by --fail-on-energy-regression
# A metric is worse when time grows or throughput shrinks.
WORSE_SIGN = {"time_ms": 1.0, "bandwidth_GB_s": -1.0, "tflops": -1.0}


@dataclass(frozen=True)
class Aggregate:
    """Speedup over the cases ok in both runs (scope: "overall" or an API)."""

    scope: str
    cases: int
    geomean_speedup: float  # geometric mean of baseline time / candidate time
    baseline_total_ms: float
    candidate_total_ms: float

    @property
    def total_time_ratio(self) -> float:
        """Candidate total time / baseline total time (below 1: faster)."""
        if self.baseline_total_ms <= 0:
            return float("nan")
        return self.candidate_total_ms / self.baseline_total_ms


@dataclass
class RegressionModel:
    """Everything a regression report says, computed once."""

    kind: ClassVar[ReportKind] = ReportKind.REGRESSION

    baseline_paths: list[str]
    candidate_paths: list[str]
    gate: Gate
    matched: object  # DataFrame, one row per matched case (see _matched_table)
    missing: object  # DataFrame: api, case, source
    new: object  # DataFrame: api, case, source, status
    failures: object  # DataFrame: run, api, case, source, error
    aggregates: list[Aggregate]
    environment: dict[str, dict[str, list[str]]]  # side -> column -> values
    mismatches: list[str]  # environment columns whose values differ between sides
    artefact_rows: int
    input_issues: list[InputIssue]
    comparison_issues: list[InputIssue]
    comparison_failed: bool
    verdict: Verdict
    reason: str
    state_counts: dict[str, int] = field(default_factory=dict)
    run_notes: list[str] = field(default_factory=list)  # runs left out, per side
    cases: object = field(default=None, repr=False)  # CaseRows: labels by case id
    case_columns: list[str] = field(default_factory=list)
    differences: list[FieldDifference] = field(default_factory=list)
    warnings: list[ReportWarning] = field(default_factory=list)

    JSON_EXCLUDE = ("cases", "case_columns")
    LABELLED = ("matched", "missing", "new")

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def regressions(self):
        """Cases in state ``regression``, the slowest first."""
        return self._worst_first(np.asarray(self.matched["state"]) == "regression")

    def large_changes(self):
        """Cases significantly slower by GateRules.large_change_pct or more, slowest first."""
        return self._worst_first(np.asarray(self.matched["large_change"], dtype=bool))

    def changes(self, only_changed: bool = True):
        """Matched cases by change, the worst regression first, then by slowdown;
        ``only_changed``: only cases marked ``changed``."""
        keep = np.ones(len(self.matched), dtype=bool)
        if only_changed:
            keep = np.asarray(self.matched["changed"], dtype=bool)
        return self._worst_first(keep)

    def _worst_first(self, keep: np.ndarray):
        """Rows of ``keep``: failing states first, then by time change, largest first."""
        rows = np.flatnonzero(keep)
        states = np.asarray(self.matched["state"])[rows]
        failing = np.isin(states, [state.value for state in FAILING_STATES])
        delta = np.asarray(self.matched["time_ms_delta_pct"], dtype=np.float64)[rows]
        order = np.lexsort((np.nan_to_num(-delta, nan=np.inf), ~failing))
        return Selection(self.matched, rows[order])

    @property
    def condition_cases(self) -> int:
        """Matched cases whose two sides ran under clearly different conditions."""
        return int(np.asarray(self.matched["conditions_differ"], dtype=bool).sum())

    def case_labels(self, case_ids) -> np.ndarray:
        """describe_case of these cases; labels are made only for rows someone reads."""
        return self.cases.labels(np.asarray(case_ids, dtype=np.int64))

    def labelled(self, name: str):
        """One of the case tables with a case_label column (for JSON and plots)."""
        table = getattr(self, name)
        labels = self.case_labels(table["case_id"]) if len(table) else []
        return table.assign(case_label=labels)

    @property
    def issues(self) -> list[InputIssue]:
        return [*self.input_issues, *self.comparison_issues]

    @property
    def allowed_differences(self) -> list[str]:
        """Per --allow-difference name, what differed ("dtype float16 → bfloat16") or that
        nothing did."""
        found = {difference.column: difference.text for difference in self.differences}
        return [
            found.get(name, f"{name} (no difference found)")
            for name in self.gate.allowed_differences
        ]


def compare(
    baseline: LoadResult, candidate: LoadResult, gate: Gate, samples=None, run_noise=None
) -> RegressionModel:
    """Match baseline and candidate cases by api + case parameters and judge each."""
    import pandas as pd

    base, cand = side_frame(baseline), side_frame(candidate)
    keys = ["api", *frame_case_columns(pd.concat([base.head(0), cand.head(0)]))]
    base, cand = _with_keys(base, keys), _with_keys(cand, keys)
    views = (FrameView(base), FrameView(cand))
    ids_b, ids_c = case_ids(views, keys)
    runs = (
        Run("baseline", baseline.paths, views[0], ids_b, _frame_labels(base, keys[1:])),
        Run("candidate", candidate.paths, views[1], ids_c, _frame_labels(cand, keys[1:])),
    )
    model = judge(runs, gate, [*baseline.issues, *candidate.issues], keys[1:], samples, run_noise)
    model.run_notes = [side.note for side in (baseline, candidate) if side.note]
    return model


@dataclass(frozen=True)
class Run:
    """One side of a comparison: its rows (a FrameView), the case id
    of each row, and describe_case of rows (case parameters only)."""

    group: str
    paths: list
    view: object
    ids: np.ndarray
    labels: Callable[[np.ndarray], np.ndarray]


def judge(
    runs: tuple[Run, Run], gate: Gate, input_issues, case_columns, samples=None, run_noise=None
) -> RegressionModel:
    """The model of two runs: match unique cases by id, judge, aggregate."""
    base, cand = runs
    unique_b = unique_cases(base.view, base.ids, base.labels, base.group)
    unique_c = unique_cases(cand.view, cand.ids, cand.labels, cand.group)
    rows_b, ids_b, base_dups = unique_b.rows, unique_b.ids, list(unique_b.issues)
    rows_c, ids_c, cand_dups = unique_c.rows, unique_c.ids, list(unique_c.issues)
    ids = _sorted_union(ids_b, ids_c)
    at_b, in_b = _positions(ids_b, ids)
    at_c, in_c = _positions(ids_c, ids)
    both, only_b, only_c = in_b & in_c, in_b & ~in_c, in_c & ~in_b
    side_b = _side_columns(base, rows_b[at_b[both]], gate.rules)
    side_c = _side_columns(cand, rows_c[at_c[both]], gate.rules)
    p_value, noise_pct = _evidence(
        runs, rows_b[at_b[both]], rows_c[at_c[both]], case_columns, samples, run_noise
    )
    matched = _matched_table(base.view.table, ids[both], side_b, side_c, gate, p_value, noise_pct)
    missing = _side_table(base, rows_b[at_b[only_b]], ids[only_b])
    new = _side_table(cand, rows_c[at_c[only_c]], ids[only_c])
    status_b, status_c = base.view.objects("status"), cand.view.objects("status")
    failures = base.view.concat(
        [
            failure_table(base.view, failed_mask(status_b), "baseline"),
            failure_table(cand.view, failed_mask(status_c), "candidate"),
        ]
    )
    states = np.asarray(matched["state"])
    failing = np.isin(states, [state.value for state in _FAILING])
    new_failed = int((np.asarray(new["status"]) == "failed").sum())
    comparison_failed = bool(failing.any() or len(missing) or new_failed)
    comparison_issues = [
        *base_dups,
        *cand_dups,
        *missing_shards(base.view, "baseline"),
        *missing_shards(cand.view, "candidate"),
    ]
    environment = {
        "baseline": environment_of(base.view),
        "candidate": environment_of(cand.view),
    }
    differences = field_differences(
        base.view, cand.view, rows_b[at_b[both]], rows_c[at_c[both]], gate.allowed_differences
    )
    verdict, reason = _verdict(
        input_issues, comparison_issues, differences, matched, missing, new_failed, gate
    )
    representative = np.where(in_b, _rows_at(rows_b, at_b, in_b), _rows_at(rows_c, at_c, in_c))
    cases = CaseRows(ids, in_b, representative, runs)
    mismatches = _mismatches(environment)
    warnings = [
        *environment_warnings(environment, mismatches),
        *mixed_harness_warnings(environment),
        *_missing_warnings(missing, cases),
    ]
    return RegressionModel(
        baseline_paths=[str(path) for path in base.paths],
        candidate_paths=[str(path) for path in cand.paths],
        gate=gate,
        matched=matched,
        missing=missing,
        new=new,
        failures=failures,
        aggregates=aggregates(matched),
        environment=environment,
        mismatches=mismatches,
        artefact_rows=int(artefact_mask(base.view).sum() + artefact_mask(cand.view).sum()),
        input_issues=list(input_issues),
        comparison_issues=comparison_issues,
        comparison_failed=comparison_failed,
        verdict=verdict,
        reason=reason,
        state_counts=_state_counts(states),
        cases=cases,
        case_columns=list(case_columns),
        differences=differences,
        warnings=warnings,
    )


_FAILING = FAILING_STATES


def _evidence(runs, rows_b, rows_c, case_columns, samples, run_noise):
    """Per matched case: the samples' rank-test p-value and the history's run-to-run noise
    in % (NaN where there is none)."""
    base, cand = runs
    p_value = np.full(len(rows_b), np.nan)
    if samples is not None:
        p_value = samples.p_values(base, cand, rows_b, rows_c, case_columns)
    noise_pct = np.full(len(rows_c), np.nan)
    if run_noise is not None:
        noise_pct = run_noise.pct(cand.view, rows_c, case_columns)
    return p_value, noise_pct


class Selection:
    """Some rows of a table, in an order; rows are copied only for the part read
    (``len``, ``iloc[positions]``), not for a 200k-row table at once."""

    def __init__(self, table, rows: np.ndarray):
        self.table, self.rows = table, rows

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def iloc(self) -> _SelectedRows:
        return _SelectedRows(self)


class _SelectedRows:
    def __init__(self, selection: Selection):
        self.selection = selection

    def __getitem__(self, positions):
        return self.selection.table.iloc[self.selection.rows[positions]]


class CaseRows:
    """Where each case's parameters are read: its baseline row, else its candidate's."""

    def __init__(self, ids: np.ndarray, in_base: np.ndarray, rows: np.ndarray, runs):
        self.ids, self.in_base, self.rows, self.runs = ids, in_base, rows, runs

    def labels(self, case_ids: np.ndarray) -> np.ndarray:
        """describe_case of these cases (in their order)."""
        position = np.searchsorted(self.ids, case_ids)
        from_base = self.in_base[position]
        labels = np.empty(len(position), dtype=object)
        for run, take in ((self.runs[0], from_base), (self.runs[1], ~from_base)):
            if take.any():
                labels[take] = run.labels(self.rows[position[take]])
        return labels


def _state_counts(states: np.ndarray) -> dict[str, int]:
    counts = {state.value: int((states == state.value).sum()) for state in CaseState}
    return {name: counts[name] for name in sorted(counts) if counts[name]}


def _with_keys(frame, keys: list[str]):
    """Every key column present (NaN: the run has no such parameter).

    Nothing else is added: every column of a row frame that is not a known one is a
    case parameter (a CSV column named ``noise`` included), so a column the comparison
    computed would show in labels and shadow the CSV's.  Noise is read from the view
    when judging (``_side_columns``)."""
    missing = [name for name in keys if name not in frame.columns]
    if missing:
        frame = frame.assign(**{name: IDENTITY_DEFAULTS.get(name, np.nan) for name in missing})
    return frame


def _frame_labels(frame, columns: list[str]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda rows: case_labels(frame.iloc[rows], columns)


def _sorted_union(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """The distinct ids of two sorted, distinct id arrays (np.union1d hashes: slower)."""
    both = np.concatenate([left, right])
    both.sort()
    keep = np.ones(len(both), dtype=bool)
    np.not_equal(both[1:], both[:-1], out=keep[1:])
    return both[keep]


def _positions(side_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(index into the sorted side_ids of each id, whether the side has it)."""
    at = np.searchsorted(side_ids, ids)
    found = at < len(side_ids)
    found[found] = side_ids[at[found]] == ids[found]
    return at, found


def _rows_at(rows: np.ndarray, at: np.ndarray, found: np.ndarray) -> np.ndarray:
    """The side's row of each id it has (0 elsewhere)."""
    picked = np.zeros(len(at), dtype=np.int64)
    picked[found] = rows[at[found]]
    return picked


def _side_columns(run: Run, rows: np.ndarray, rules) -> dict[str, np.ndarray]:
    """What judging reads of one side, for these rows (keys name these arrays, not
    columns of the run)."""
    view = run.view
    columns = {name: view.objects(name)[rows] for name in ("api", "status", "_source")}
    for name in (*NUMERIC_COLUMNS, *CONDITION_COLUMNS, ENERGY_COLUMN):
        columns[name] = view.floats(name)[rows]
    columns["ci"] = median_ci_pct(view, rules.notch)[rows]
    timers = view.objects("timer")[rows] if "timer" in view.frame.columns else None
    columns["wall_clock"] = (
        np.zeros(len(rows), dtype=bool) if timers is None else timers == CPU_TIMER
    )
    return columns


def _side_table(run: Run, rows: np.ndarray, ids: np.ndarray):
    view = run.view
    return view.table(
        {
            "api": view.objects("api")[rows],
            "case_id": ids,
            "source": view.objects("_source")[rows],
            "status": view.objects("status")[rows],
        }
    )


def percent_delta(base: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """(cand / base - 1) in %; a zero baseline gives 0 (both zero) or +inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = (cand / base - 1.0) * 100.0
    zero = base == 0
    return np.where(zero, np.where(cand == 0, 0.0, np.inf), delta)


def _matched_table(make_table, ids, base: dict, cand: dict, gate: Gate, p_value, noise_pct):
    """One row per matched case: both sides' numbers, deltas, state, reason, speedup."""
    ok_b, ok_c = success_mask(base["status"]), success_mask(cand["status"])
    both_ok = ok_b & ok_c
    table = {"api": base["api"], "case_id": ids}
    for name in NUMERIC_COLUMNS:
        table[f"{name}_baseline"], table[f"{name}_candidate"] = base[name], cand[name]
        table[f"{name}_delta_pct"] = np.where(
            both_ok, percent_delta(base[name], cand[name]), np.nan
        )
    uncertainty = np.hypot(base["ci"], cand["ci"])
    table["uncertainty_pct"] = np.where(both_ok, uncertainty, np.nan)
    table["p_value"] = np.where(both_ok, p_value, np.nan)
    table["run_noise_pct"] = noise_pct
    # A CPU run's spread from one run to the next dwarfs what its own samples show, so no
    # change between two CPU-timed rows is called significant (reported, never failing).
    significant = _significant(table, gate.rules) & ~(base["wall_clock"] & cand["wall_clock"])
    gate_hit, beyond = _gate_masks(table, gate, significant)
    table["state"] = np.select(
        [
            both_ok & beyond,
            both_ok & gate_hit,
            both_ok,
            ok_b & ~ok_c,
            ~ok_b & ok_c,
        ],
        [
            CaseState.REGRESSION.value,
            CaseState.WITHIN_NOISE.value,
            CaseState.COMPARED.value,
            CaseState.CANDIDATE_FAILED.value,
            CaseState.RECOVERED.value,
        ],
        CaseState.BOTH_FAILED.value,
    )
    table["reason_metric"] = _reason_metrics(table)
    with np.errstate(divide="ignore", invalid="ignore"):
        table["speedup"] = np.where(
            both_ok, table["time_ms_baseline"] / table["time_ms_candidate"], np.nan
        )
    _mark_changes(table, gate, significant)
    for name in CONDITION_COLUMNS:
        table[f"{name}_baseline"], table[f"{name}_candidate"] = base[name], cand[name]
    table["conditions_differ"] = conditions_differ(table, gate.rules)
    _add_energy_change(table, base, cand, both_ok, gate)
    table["source_baseline"] = base["_source"]
    table["source_candidate"] = cand["_source"]
    return make_table(table)


def _add_energy_change(table, base: dict, cand: dict, both_ok: np.ndarray, gate: Gate) -> None:
    """energy_mJ of both sides, its change in % (NaN where a side has no energy: "no
    energy"), and whether it rose past ``gate.energy_threshold_pct``."""
    energy_b, energy_c = base[ENERGY_COLUMN], cand[ENERGY_COLUMN]
    table["energy_mJ_baseline"], table["energy_mJ_candidate"] = energy_b, energy_c
    known = both_ok & ~np.isnan(energy_b) & ~np.isnan(energy_c)
    delta = np.where(known, percent_delta(energy_b, energy_c), np.nan)
    table["energy_mJ_delta_pct"] = delta
    limit = gate.energy_threshold_pct
    with np.errstate(invalid="ignore"):
        table["energy_regression"] = (
            known & (delta > limit) if limit is not None else np.zeros(len(known), dtype=bool)
        )


def energy_regressions(matched) -> np.ndarray:
    """Rows of matched cases whose energy rose past the energy gate, the largest rise first."""
    rows = np.flatnonzero(np.asarray(matched["energy_regression"], dtype=bool))
    delta = np.asarray(matched["energy_mJ_delta_pct"], dtype=np.float64)[rows]
    return rows[np.argsort(-delta, kind="stable")]


def energy_cases(matched) -> tuple[np.ndarray, int]:
    """Rows of matched cases with energy on a side, the largest rise first (no energy
    last), and how many cases have energy on neither side."""
    base = np.asarray(matched["energy_mJ_baseline"], dtype=np.float64)
    cand = np.asarray(matched["energy_mJ_candidate"], dtype=np.float64)
    some = ~(np.isnan(base) & np.isnan(cand))
    delta = np.asarray(matched["energy_mJ_delta_pct"], dtype=np.float64)
    rows = np.flatnonzero(some)
    rows = rows[np.argsort(np.nan_to_num(-delta[rows], nan=np.inf), kind="stable")]
    return rows, int((~some).sum())


def _significant(table, rules) -> np.ndarray:
    """Whether each case's time change is real: the rank test where both sides had
    samples, else the change past the medians' combined uncertainty, else (no
    statistics) True: the gate alone decides; and, where a history gave the case's
    run-to-run noise, past what two runs of the same code show (NOISE_SIGMAS)."""
    delta = np.abs(table["time_ms_delta_pct"])
    p_value, uncertainty = table["p_value"], table["uncertainty_pct"]
    noise = table["run_noise_pct"]
    with np.errstate(invalid="ignore"):
        by_interval = np.isnan(uncertainty) | (delta > uncertainty)
        within_run = np.where(np.isnan(p_value), by_interval, p_value < rules.alpha)
        beyond_runs = np.isnan(noise) | (delta > NOISE_SIGMAS * np.sqrt(2) * noise)
        return within_run & beyond_runs


def _mark_changes(table, gate: Gate, significant: np.ndarray) -> None:
    """``large_change``: significantly slower by rules.large_change_pct or more;
    ``changed``: a state other than compared, or a significant change past the gate
    (past large_change_pct without a gate), in either direction."""
    delta = table["time_ms_delta_pct"]
    limit = gate.rules.large_change_pct if gate.threshold_pct is None else gate.threshold_pct
    with np.errstate(invalid="ignore"):
        table["large_change"] = significant & (delta >= gate.rules.large_change_pct)
        moved = significant & (np.abs(delta) > limit)
    table["changed"] = moved | (table["state"] != CaseState.COMPARED.value)


def conditions_differ(table, rules) -> np.ndarray:
    """Whether each case's two sides ran under clearly different conditions: the
    power-capped share or the mean SM clock apart by more than the rules allow."""
    capped_b, capped_c = table["power_capped_pct_baseline"], table["power_capped_pct_candidate"]
    clock_b, clock_c = table["sm_clock_mean_MHz_baseline"], table["sm_clock_mean_MHz_candidate"]
    with np.errstate(invalid="ignore", divide="ignore"):
        capped = np.abs(capped_c - capped_b) > rules.power_capped_diff_pp
        clocked = np.abs(clock_c / clock_b - 1.0) * 100.0 > rules.sm_clock_diff_pct
    return capped | clocked


def condition_text(capped_b, capped_c, clock_b, clock_c, rules) -> str:
    """How one case's run conditions differed beyond the rules ("" when they did not)."""
    parts = []
    if abs(capped_c - capped_b) > rules.power_capped_diff_pp:
        parts.append(f"power-capped {capped_b:.0f}% → {capped_c:.0f}%")
    if clock_b and abs(clock_c / clock_b - 1.0) * 100.0 > rules.sm_clock_diff_pct:
        parts.append(f"SM clock {clock_b:.0f} → {clock_c:.0f} MHz")
    return "; ".join(parts)


def _gate_masks(table, gate: Gate, significant: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(past the gate, past the gate and significant) per case; ``table``: the matched
    columns (name -> array)."""
    size = len(significant)
    if gate.threshold_pct is None:
        return np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    gate_hit = np.zeros(size, dtype=bool)
    for name, sign in WORSE_SIGN.items():
        with np.errstate(invalid="ignore"):
            gate_hit |= sign * table[f"{name}_delta_pct"] > gate.threshold_pct
    return gate_hit, gate_hit & significant


def _reason_metrics(table) -> np.ndarray:
    """For regressed or excused cases, the metric that got worst (else empty)."""
    states = table["state"]
    metrics = np.full(len(states), "", dtype=object)
    judged = np.flatnonzero((states == "regression") | (states == "within noise"))
    if len(judged):
        names = list(WORSE_SIGN)
        signed = np.stack([WORSE_SIGN[name] * table[f"{name}_delta_pct"][judged] for name in names])
        metrics[judged] = np.array(names, dtype=object)[np.argmax(signed, axis=0)]
    return metrics


def aggregates(matched) -> list[Aggregate]:
    """Overall and per-API speedup over cases ok in both runs (APIs sorted)."""
    speedup = np.asarray(matched["speedup"], dtype=np.float64)
    ok = ~np.isnan(speedup)
    columns = (
        speedup[ok],
        np.asarray(matched["time_ms_baseline"], dtype=np.float64)[ok],
        np.asarray(matched["time_ms_candidate"], dtype=np.float64)[ok],
    )
    found = [_aggregate("overall", *columns)]
    apis = np.asarray(matched["api"], dtype=object)[ok]
    names = sorted(set(apis.tolist()))
    for api in names:
        rows = apis == api if len(names) > 1 else slice(None)
        found.append(_aggregate(str(api), *(column[rows] for column in columns)))
    return found


def _aggregate(scope: str, speedup, baseline_ms, candidate_ms) -> Aggregate:
    geomean = float(np.exp(np.log(speedup).mean())) if len(speedup) else float("nan")
    return Aggregate(
        scope=scope,
        cases=len(speedup),
        geomean_speedup=geomean,
        baseline_total_ms=float(baseline_ms.sum()),
        candidate_total_ms=float(candidate_ms.sum()),
    )


def _mismatches(environment: dict[str, dict[str, list[str]]]) -> list[str]:
    base, cand = environment["baseline"], environment["candidate"]
    return [
        name
        for name in MISMATCH_COLUMNS
        if name in base and name in cand and base[name] != cand[name]
    ]


STATE_NOUNS = {
    CaseState.REGRESSION: ("regression", "regressions"),
    CaseState.CANDIDATE_FAILED: ("case failed in the candidate", "cases failed in the candidate"),
    CaseState.BOTH_FAILED: ("case failed in both runs", "cases failed in both runs"),
}


def _verdict(input_issues, comparison_issues, differences, matched, missing, new_failed, gate):
    issues = len(input_issues) + len(comparison_issues)
    if issues:
        return (
            Verdict.INVALID_INPUT,
            f"{plural(issues, 'input error')}; the comparison cannot be trusted",
        )
    blocking = [difference for difference in differences if not difference.allowed]
    if blocking:
        return Verdict.NOT_COMPARABLE, not_comparable_reason(blocking)
    states = np.asarray(matched["state"])
    reasons = [
        plural(int((states == state.value).sum()), *STATE_NOUNS[state])
        for state in _FAILING
        if (states == state.value).any()
    ]
    if len(missing):
        reasons.append(plural(len(missing), "missing candidate case"))
    if new_failed:
        reasons.append(plural(new_failed, "failed new candidate case"))
    energy = len(energy_regressions(matched))
    if energy:
        reasons.append(
            f"{plural(energy, 'energy regression')} (energy_mJ up more than "
            f"{gate.energy_threshold_pct:g}%)"
        )
    notes = _verdict_notes(matched, gate)
    if reasons:
        return Verdict.FAIL, ", ".join(reasons) + notes
    return Verdict.PASS, f"{plural(len(states), 'matched case')}, none failing" + notes


def _verdict_notes(matched, gate) -> str:
    """Large changes without a gate, and cases whose conditions differed."""
    notes = []
    large = int(np.asarray(matched["large_change"], dtype=bool).sum())
    if gate.threshold_pct is None and large:
        notes.append(
            f"{plural(large, 'case')} {gate.rules.large_change_pct:g}% or more slower "
            "(not gated: no --fail-on-regression)"
        )
    conditions = int(np.asarray(matched["conditions_differ"], dtype=bool).sum())
    if conditions:
        notes.append(
            f"{plural(conditions, 'case')} ran under different conditions (clock or power "
            "limit): the change may be the machine's, not the kernel's"
        )
    return "".join(f"; {note}" for note in notes)


def _missing_warnings(missing, cases: CaseRows) -> list[ReportWarning]:
    """Baseline cases the candidate lacks, the first few named."""
    if not len(missing):
        return []
    shown = missing.iloc[np.arange(min(len(missing), MISSING_CASES_NAMED))]
    labels = cases.labels(np.asarray(shown["case_id"], dtype=np.int64))
    named = [f"{api} ({label})" for api, label in zip(shown["api"], labels, strict=True)]
    more = len(missing) - len(named)
    detail = "; ".join(named) + (f"; and {more} more (the report lists them)" if more else "")
    return [
        ReportWarning(f"{plural(len(missing), 'baseline case')} missing from the candidate", detail)
    ]
