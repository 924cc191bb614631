"""Compare step for baseline vs candidate: match cases, decide states, aggregate."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from benchmark_result import NUMERIC_COLUMNS
from summarizer.frames import (
    FrameView,
    case_labels,
    failed_mask,
    frame_case_columns,
    noise_pct,
    side_frame,
    success_mask,
)
from summarizer.loading import InputIssue, LoadResult
from summarizer.model import (
    FAILING_STATES,
    MISMATCH_COLUMNS,
    CaseState,
    Gate,
    Verdict,
    artefact_mask,
    environment_of,
    failure_table,
)

SIDE_COLUMNS = ("status", *NUMERIC_COLUMNS, "_source", "_line", "noise")
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
    cases: object = field(default=None, repr=False)  # DataFrame: api + parameters by case id
    case_columns: list[str] = field(default_factory=list)

    JSON_EXCLUDE = ("cases", "case_columns")
    LABELLED = ("matched", "missing", "new")

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def regressions(self):
        """Cases past the gate (regression or within noise), the slowest first."""
        states = self.matched["state"].to_numpy()
        judged = self.matched.loc[(states == "regression") | (states == "within noise")]
        return judged.sort_values("speedup", kind="stable")

    def case_labels(self, case_ids) -> np.ndarray:
        """describe_case of these cases; labels are made only for rows someone reads."""
        return case_labels(self.cases.loc[np.asarray(case_ids)], self.case_columns)

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
    base["_id"], cand["_id"] = _case_ids(base, cand, keys)
    base_unique, base_dups = _drop_duplicates(base, keys, "baseline")
    cand_unique, cand_dups = _drop_duplicates(cand, keys, "candidate")
    joined = _side_columns(base_unique, "b").merge(
        _side_columns(cand_unique, "c"), on="_id", how="outer", indicator=True
    )
    joined = joined.sort_values("_id", kind="stable").reset_index(drop=True)
    cases = _case_table(base_unique, cand_unique, keys)
    position = cases.index.get_indexer(joined["_id"].to_numpy())
    joined["api"] = cases["api"].to_numpy()[position]
    both = joined["_merge"].to_numpy() == "both"
    matched = _matched_table(joined.loc[both].reset_index(drop=True), gate)
    missing = _side_table(joined.loc[joined["_merge"].to_numpy() == "left_only"], "b")
    new = _side_table(joined.loc[joined["_merge"].to_numpy() == "right_only"], "c")
    failures = pd.concat(
        [
            failure_table(FrameView(base), failed_mask(base), "baseline"),
            failure_table(FrameView(cand), failed_mask(cand), "candidate"),
        ],
        ignore_index=True,
    )
    states = matched["state"].to_numpy()
    failing = np.isin(states, [state.value for state in _FAILING])
    new_failed = int((new["status"].to_numpy() == "failed").sum())
    comparison_failed = bool(failing.any() or len(missing) or new_failed)
    comparison_issues = [*base_dups, *cand_dups]
    input_issues = [*baseline.issues, *candidate.issues]
    environment = {
        "baseline": environment_of(FrameView(base)),
        "candidate": environment_of(FrameView(cand)),
    }
    verdict, reason = _verdict(input_issues, comparison_issues, matched, missing, new_failed)
    return RegressionModel(
        baseline_paths=[str(path) for path in baseline.paths],
        candidate_paths=[str(path) for path in candidate.paths],
        gate=gate,
        matched=matched,
        missing=missing,
        new=new,
        failures=failures,
        aggregates=aggregates(matched),
        environment=environment,
        mismatches=_mismatches(environment),
        artefact_rows=int(
            artefact_mask(FrameView(base)).sum() + artefact_mask(FrameView(cand)).sum()
        ),
        input_issues=input_issues,
        comparison_issues=comparison_issues,
        comparison_failed=comparison_failed,
        verdict=verdict,
        reason=reason,
        state_counts=_state_counts(matched),
        cases=cases,
        case_columns=keys[1:],
    )


_FAILING = FAILING_STATES


def _state_counts(matched) -> dict[str, int]:
    counts = matched["state"].value_counts()
    return {str(name): int(counts[name]) for name in sorted(counts.index)}


def _with_keys(frame, keys: list[str]):
    """Every key column present (NaN: the run has no such parameter) and noise added."""
    missing = [name for name in keys if name not in frame.columns]
    if missing:
        frame = frame.assign(**{name: np.nan for name in missing})
    return frame.assign(noise=noise_pct(frame))


def _case_ids(base, cand, keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """One int64 per row naming its case; ids sort like the tuples of key values.

    Each key column is factorized over both runs together (sorted, absent first), and
    the codes are combined in mixed radix, re-compressed before they could overflow.
    """
    import pandas as pd

    ids = np.zeros(len(base) + len(cand), dtype=np.int64)
    span = 1
    for name in keys:
        values = np.concatenate(
            [base[name].to_numpy(dtype=object), cand[name].to_numpy(dtype=object)]
        )
        codes, uniques = pd.factorize(values, sort=True)
        radix = len(uniques) + 1
        if span * radix >= 1 << 62:
            ids, distinct = pd.factorize(ids, sort=True)
            span = len(distinct)
        ids = ids * radix + (codes + 1)
        span *= radix
    return ids[: len(base)], ids[len(base) :]


def _case_table(base_unique, cand_unique, keys: list[str]):
    """api and case parameters of every distinct case, indexed by case id."""
    import pandas as pd

    cases = pd.concat([base_unique[["_id", *keys]], cand_unique[["_id", *keys]]])
    return cases.drop_duplicates("_id").set_index("_id")


def _drop_duplicates(frame, keys: list[str], group: str):
    """Rows whose case is unique in the run, and one issue per repeated row."""
    import pandas as pd

    if not len(frame):
        return frame, []
    ids = frame["_id"].to_numpy()
    repeated = pd.Series(ids).duplicated(keep=False).to_numpy()
    if not repeated.any():
        return frame, []
    labels = dict(
        zip(np.flatnonzero(repeated), case_labels(frame.loc[repeated], keys[1:]), strict=True)
    )
    first_row = {}
    issues = []
    for row in np.flatnonzero(repeated):
        first = first_row.setdefault(ids[row], row)
        if first == row:
            continue
        issues.append(
            InputIssue(
                str(frame["_source"].iat[row]),
                "duplicate case also found at "
                f"{frame['_source'].iat[first]}:{frame['_line'].iat[first]}: "
                f"{frame['api'].iat[row]} ({labels[row]})",
                group,
            )
        )
    return frame.loc[~repeated], issues


def _side_columns(frame, suffix: str):
    renamed = {name: f"{name}_{suffix}" for name in SIDE_COLUMNS}
    return frame[["_id", *SIDE_COLUMNS]].rename(columns=renamed)


def _side_table(rows, suffix: str):
    import pandas as pd

    return pd.DataFrame(
        {
            "api": rows["api"].to_numpy(dtype=object),
            "case_id": rows["_id"].to_numpy(),
            "source": rows[f"_source_{suffix}"].to_numpy(dtype=object),
            "status": rows[f"status_{suffix}"].to_numpy(dtype=object),
        }
    )


def percent_delta(base: np.ndarray, cand: np.ndarray) -> np.ndarray:
    """(cand / base - 1) in %; a zero baseline gives 0 (both zero) or +inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = (cand / base - 1.0) * 100.0
    zero = base == 0
    return np.where(zero, np.where(cand == 0, 0.0, np.inf), delta)


def _matched_table(joined, gate: Gate):
    """One row per matched case: both sides' numbers, deltas, state, reason, speedup."""
    import pandas as pd

    ok_b = success_mask(joined.rename(columns={"status_b": "status"}))
    ok_c = success_mask(joined.rename(columns={"status_c": "status"}))
    both_ok = ok_b & ok_c
    table = pd.DataFrame(
        {"api": joined["api"].to_numpy(dtype=object), "case_id": joined["_id"].to_numpy()}
    )
    for name in NUMERIC_COLUMNS:
        base, cand = joined[f"{name}_b"].to_numpy(), joined[f"{name}_c"].to_numpy()
        table[f"{name}_baseline"], table[f"{name}_candidate"] = base, cand
        table[f"{name}_delta_pct"] = np.where(both_ok, percent_delta(base, cand), np.nan)
    noise = joined["noise_b"].to_numpy() + joined["noise_c"].to_numpy()
    table["noise_pct"] = np.where(both_ok, noise, np.nan)
    gate_hit, beyond = _gate_masks(table, gate, noise)
    state = np.select(
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
    table["state"] = state
    table["reason_metric"] = _reason_metrics(table)
    with np.errstate(divide="ignore", invalid="ignore"):
        table["speedup"] = np.where(
            both_ok, table["time_ms_baseline"] / table["time_ms_candidate"], np.nan
        )
    table["source_baseline"] = joined["_source_b"].to_numpy(dtype=object)
    table["source_candidate"] = joined["_source_c"].to_numpy(dtype=object)
    return table


def _gate_masks(table, gate: Gate, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(past the gate, past the gate and outside the noise) per case."""
    size = len(table)
    if gate.threshold_pct is None:
        return np.zeros(size, dtype=bool), np.zeros(size, dtype=bool)
    gate_hit = np.zeros(size, dtype=bool)
    beyond = np.zeros(size, dtype=bool)
    no_noise = np.isnan(noise)
    for name, sign in WORSE_SIGN.items():
        worse = sign * table[f"{name}_delta_pct"].to_numpy()
        with np.errstate(invalid="ignore"):
            hit = worse > gate.threshold_pct
            gate_hit |= hit
            beyond |= hit & (no_noise | (worse > noise))
    return gate_hit, beyond


def _reason_metrics(table) -> np.ndarray:
    """For regressed or excused cases, the metric that got worst (else empty)."""
    metrics = np.full(len(table), "", dtype=object)
    states = table["state"].to_numpy()
    judged = np.flatnonzero((states == "regression") | (states == "within noise"))
    if len(judged):
        names = list(WORSE_SIGN)
        signed = np.stack(
            [WORSE_SIGN[name] * table[f"{name}_delta_pct"].to_numpy()[judged] for name in names]
        )
        metrics[judged] = np.array(names, dtype=object)[np.argmax(signed, axis=0)]
    return metrics


def aggregates(matched) -> list[Aggregate]:
    """Overall and per-API speedup over cases ok in both runs."""
    ok = ~np.isnan(matched["speedup"].to_numpy(dtype=np.float64))
    rows = matched.loc[ok]
    found = [_aggregate("overall", rows)]
    for api, group in rows.groupby("api", sort=True):
        found.append(_aggregate(str(api), group))
    return found


def _aggregate(scope: str, rows) -> Aggregate:
    speedup = rows["speedup"].to_numpy(dtype=np.float64)
    geomean = float(np.exp(np.log(speedup).mean())) if len(speedup) else float("nan")
    return Aggregate(
        scope=scope,
        cases=len(rows),
        geomean_speedup=geomean,
        baseline_total_ms=float(rows["time_ms_baseline"].sum()),
        candidate_total_ms=float(rows["time_ms_candidate"].sum()),
    )


def _mismatches(environment: dict[str, dict[str, list[str]]]) -> list[str]:
    base, cand = environment["baseline"], environment["candidate"]
    return [
        name
        for name in MISMATCH_COLUMNS
        if name in base and name in cand and base[name] != cand[name]
    ]


def _verdict(input_issues, comparison_issues, matched, missing, new_failed) -> tuple[Verdict, str]:
    issues = len(input_issues) + len(comparison_issues)
    if issues:
        return Verdict.INVALID_INPUT, f"{issues} input error(s); the comparison cannot be trusted"
    states = matched["state"].to_numpy()
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
    return Verdict.PASS, f"{len(matched)} matched case(s), none failing"
