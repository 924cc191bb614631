"""Compare step for baseline vs candidate: match cases, decide states, aggregate.

Two sources feed one comparison: the row frames of loaded runs (any input; JSON and
plots need them) and the pandas-free reader's views of plain files.  Each gives a
case id per row; matching, judging and aggregating are numpy on those arrays, so
both give the same model.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from fi_attn_bench.results.schema import NUMERIC_COLUMNS, case_columns
from fi_attn_bench.summarizer.frames import (
    FrameView,
    case_labels,
    failed_mask,
    frame_case_columns,
    noise_pct,
    side_frame,
    success_mask,
)
from fi_attn_bench.summarizer.loading import InputIssue, LoadResult
from fi_attn_bench.summarizer.model import (
    FAILING_STATES,
    MISMATCH_COLUMNS,
    CaseState,
    Gate,
    Verdict,
    artefact_mask,
    environment_of,
    failure_table,
)
from fi_attn_bench.summarizer.scan import joint_codes

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
    cases: object = field(default=None, repr=False)  # CaseRows: labels by case id
    case_columns: list[str] = field(default_factory=list)

    JSON_EXCLUDE = ("cases", "case_columns")
    LABELLED = ("matched", "missing", "new")

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def regressions(self):
        """Cases past the gate (regression or within noise), the slowest first."""
        states = np.asarray(self.matched["state"])
        rows = np.flatnonzero((states == "regression") | (states == "within noise"))
        speedup = np.asarray(self.matched["speedup"], dtype=np.float64)[rows]
        return self.matched.iloc[rows[np.argsort(speedup, kind="stable")]]

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


def compare(baseline: LoadResult, candidate: LoadResult, gate: Gate) -> RegressionModel:
    """Match baseline and candidate cases by api + case parameters and judge each."""
    import pandas as pd

    base, cand = side_frame(baseline), side_frame(candidate)
    keys = ["api", *frame_case_columns(pd.concat([base.head(0), cand.head(0)]))]
    base, cand = _with_keys(base, keys), _with_keys(cand, keys)
    ids_b, ids_c = _case_ids(_frame_key_codes(base, cand, keys), len(base))
    runs = (
        Run("baseline", baseline.paths, FrameView(base), ids_b, _frame_labels(base, keys[1:])),
        Run("candidate", candidate.paths, FrameView(cand), ids_c, _frame_labels(cand, keys[1:])),
    )
    return judge(runs, gate, [*baseline.issues, *candidate.issues], keys[1:])


def compare_scanned(base, cand, gate: Gate) -> RegressionModel:
    """compare() of two runs the pandas-free reader accepted (scan.ScannedView)."""
    keys = ["api", *case_columns({*base.case_columns, *cand.case_columns})]
    codes = []
    for name in keys:
        joined, texts = joint_codes([base.sorted_codes(name), cand.sorted_codes(name)])
        codes.append((joined, len(texts)))
    ids_b, ids_c = _case_ids(codes, base.rows)
    runs = (
        Run("baseline", base.paths, base, ids_b, base.labels),
        Run("candidate", cand.paths, cand, ids_c, cand.labels),
    )
    return judge(runs, gate, [], keys[1:])


@dataclass(frozen=True)
class Run:
    """One side of a comparison: its rows (a FrameView or ScannedView), the case id
    of each row, and describe_case of rows (case parameters only)."""

    group: str
    paths: list
    view: object
    ids: np.ndarray
    labels: Callable[[np.ndarray], np.ndarray]


def judge(runs: tuple[Run, Run], gate: Gate, input_issues, case_columns) -> RegressionModel:
    """The model of two runs: match unique cases by id, judge, aggregate."""
    base, cand = runs
    rows_b, ids_b, base_dups = _unique_cases(base)
    rows_c, ids_c, cand_dups = _unique_cases(cand)
    ids = _sorted_union(ids_b, ids_c)
    at_b, in_b = _positions(ids_b, ids)
    at_c, in_c = _positions(ids_c, ids)
    both, only_b, only_c = in_b & in_c, in_b & ~in_c, in_c & ~in_b
    side_b = _side_columns(base, rows_b[at_b[both]])
    side_c = _side_columns(cand, rows_c[at_c[both]])
    matched = _matched_table(base.view.table, ids[both], side_b, side_c, gate)
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
    comparison_issues = [*base_dups, *cand_dups]
    environment = {
        "baseline": environment_of(base.view),
        "candidate": environment_of(cand.view),
    }
    verdict, reason = _verdict(input_issues, comparison_issues, states, missing, new_failed)
    representative = np.where(in_b, _rows_at(rows_b, at_b, in_b), _rows_at(rows_c, at_c, in_c))
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
        mismatches=_mismatches(environment),
        artefact_rows=int(artefact_mask(base.view).sum() + artefact_mask(cand.view).sum()),
        input_issues=list(input_issues),
        comparison_issues=comparison_issues,
        comparison_failed=comparison_failed,
        verdict=verdict,
        reason=reason,
        state_counts=_state_counts(states),
        cases=CaseRows(ids, in_b, representative, runs),
        case_columns=list(case_columns),
    )


_FAILING = FAILING_STATES


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
        frame = frame.assign(**{name: np.nan for name in missing})
    return frame


def _frame_key_codes(base, cand, keys: list[str]) -> list[tuple[np.ndarray, int]]:
    """(code per row of both runs, distinct values) of each key column: factorized
    over both runs together, sorted, -1 where absent."""
    import pandas as pd

    found = []
    for name in keys:
        values = np.concatenate(
            [base[name].to_numpy(dtype=object), cand[name].to_numpy(dtype=object)]
        )
        codes, uniques = pd.factorize(values, sort=True)
        found.append((codes, len(uniques)))
    return found


def _frame_labels(frame, columns: list[str]) -> Callable[[np.ndarray], np.ndarray]:
    return lambda rows: case_labels(frame.iloc[rows], columns)


def _case_ids(key_codes, base_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per row naming its case; ids sort like the tuples of key values.

    ``key_codes``: per key column, the sorted code of each row of both runs (-1:
    absent, first) and the number of distinct values.  The codes are combined in
    mixed radix, re-compressed before they could overflow.
    """
    ids = np.zeros(len(key_codes[0][0]), dtype=np.int64)
    span = 1
    for codes, distinct in key_codes:
        radix = distinct + 1
        if span * radix >= 1 << 62:
            values, ids = np.unique(ids, return_inverse=True)
            span = len(values)
        ids = ids * radix + (codes + 1)
        span *= radix
    return ids[:base_rows], ids[base_rows:]


def _unique_cases(run: Run) -> tuple[np.ndarray, np.ndarray, list[InputIssue]]:
    """(rows whose case is unique in the run, their ids, both sorted by id) and one
    issue per repeated row."""
    order = np.argsort(run.ids, kind="stable")
    ids = run.ids[order]
    repeated = np.zeros(len(ids), dtype=bool)
    same = ids[1:] == ids[:-1]
    repeated[1:] |= same
    repeated[:-1] |= same
    if not repeated.any():
        return order, ids, []
    in_rows = np.zeros(len(ids), dtype=bool)
    in_rows[order] = repeated
    return order[~repeated], ids[~repeated], _duplicate_issues(run, np.flatnonzero(in_rows))


def _duplicate_issues(run: Run, rows: np.ndarray) -> list[InputIssue]:
    """One issue per repeated row after the first of its case, in row order."""
    labels = run.labels(rows)
    sources, lines, apis = (run.view.texts(name, rows) for name in ("_source", "_line", "api"))
    first_of: dict[int, int] = {}
    issues = []
    for index, case in enumerate(run.ids[rows].tolist()):
        first = first_of.setdefault(case, index)
        if first == index:
            continue
        issues.append(
            InputIssue(
                str(sources[index]),
                f"duplicate case also found at {sources[first]}:{lines[first]}: "
                f"{apis[index]} ({labels[index]})",
                run.group,
            )
        )
    return issues


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


def _side_columns(run: Run, rows: np.ndarray) -> dict[str, np.ndarray]:
    """What judging reads of one side, for these rows (keys name these arrays, not
    columns of the run)."""
    view = run.view
    columns = {name: view.objects(name)[rows] for name in ("api", "status", "_source")}
    for name in NUMERIC_COLUMNS:
        columns[name] = view.floats(name)[rows]
    columns["noise"] = noise_pct(view)[rows]
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


def _matched_table(make_table, ids: np.ndarray, base: dict, cand: dict, gate: Gate):
    """One row per matched case: both sides' numbers, deltas, state, reason, speedup."""
    ok_b, ok_c = success_mask(base["status"]), success_mask(cand["status"])
    both_ok = ok_b & ok_c
    table = {"api": base["api"], "case_id": ids}
    for name in NUMERIC_COLUMNS:
        table[f"{name}_baseline"], table[f"{name}_candidate"] = base[name], cand[name]
        table[f"{name}_delta_pct"] = np.where(
            both_ok, percent_delta(base[name], cand[name]), np.nan
        )
    noise = base["noise"] + cand["noise"]
    table["noise_pct"] = np.where(both_ok, noise, np.nan)
    gate_hit, beyond = _gate_masks(table, gate, noise)
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
    table["source_baseline"] = base["_source"]
    table["source_candidate"] = cand["_source"]
    return make_table(table)


def _gate_masks(table, gate: Gate, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(past the gate, past the gate and outside the noise) per case; ``table``: the
    matched columns (name -> array)."""
    size = len(noise)
    if gate.threshold_pct is None:
        return np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    gate_hit = np.zeros(size, dtype=bool)
    beyond = np.zeros(size, dtype=bool)
    no_noise = np.isnan(noise)
    for name, sign in WORSE_SIGN.items():
        worse = sign * table[f"{name}_delta_pct"]
        with np.errstate(invalid="ignore"):
            hit = worse > gate.threshold_pct
            gate_hit |= hit
            beyond |= hit & (no_noise | (worse > noise))
    return gate_hit, beyond


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


def _verdict(input_issues, comparison_issues, states, missing, new_failed) -> tuple[Verdict, str]:
    issues = len(input_issues) + len(comparison_issues)
    if issues:
        return Verdict.INVALID_INPUT, f"{issues} input error(s); the comparison cannot be trusted"
    reasons = [
        f"{int((states == state.value).sum())} {state.value}"
        for state in _FAILING
        if (states == state.value).any()
    ]
    if len(missing):
        reasons.append(f"{len(missing)} missing candidate case(s)")
    if new_failed:
        reasons.append(f"{new_failed} failed new candidate case(s)")
    if reasons:
        return Verdict.FAIL, ", ".join(reasons)
    return Verdict.PASS, f"{len(states)} matched case(s), none failing"
