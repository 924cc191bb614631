"""fi-attn-history: the run store, change points, baseline and reports."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fi_attn_bench.history.command_line import main
from fi_attn_bench.history.detect import (
    DetectionSettings,
    clock_normalization,
    detect,
    kernel_cpd_breakpoints,
    series_change_points,
    shared_drift,
    shift_p_value,
    smallest_step_pct,
    welch_confidence,
)
from fi_attn_bench.results import run_store as store_module
from fi_attn_bench.results.run_store import STORE_VERSION, RunStore

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real_csv"
DECODE = REAL / "h100_decode_default.csv"


def write_runs(
    directory: Path, factors: np.ndarray, clocks: np.ndarray | None = None, run_ids=False
):
    """One CSV per run from the real decode rows: time_ms scaled by ``factors[run, case]``."""
    base = pd.read_csv(DECODE, dtype=str, keep_default_na=False)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for run, row_factors in enumerate(factors):
        frame = base.copy()
        frame["time_ms"] = [
            repr(float(t) * float(f)) for t, f in zip(base["time_ms"], row_factors, strict=True)
        ]
        if clocks is not None:
            frame["sm_clock_mean_MHz"] = [repr(float(c)) for c in clocks[run].tolist()]
        frame["timestamp_utc"] = f"2026-01-01T{run // 60:02d}:{run % 60:02d}:00Z"
        frame["git_commit"] = f"{run:040x}"
        if run_ids:
            frame["run_id"] = f"run-{run}"
        path = directory / f"run_{run:03d}.csv"
        frame.to_csv(path, index=False)
        paths.append(path)
    return paths


def noisy_factors(runs: int, cases: int, seed: int = 0, sd: float = 0.003) -> np.ndarray:
    return np.exp(np.random.default_rng(seed).normal(0, sd, size=(runs, cases)))


def stored_runs(path: Path) -> list[tuple[str, int, int]]:
    with sqlite3.connect(path) as connection:
        return connection.execute(
            "SELECT r.run_id, r.cases, COUNT(x.case_id) FROM runs r"
            " LEFT JOIN results x ON x.run_seq = r.run_seq GROUP BY r.run_seq"
        ).fetchall()


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_add_stores_each_real_file_once(tmp_path, capsys):
    store = tmp_path / "h.sqlite"
    assert main(["add", str(REAL), "--store", str(store), "--branch", "main"]) == 0
    assert "added 3 run(s)" in capsys.readouterr().out
    assert main(["add", str(REAL), "--store", str(store)]) == 0
    assert "added 0 run(s)" in capsys.readouterr().out
    runs = stored_runs(store)
    assert sorted(count for _, count, _ in runs) == [10, 27, 40]
    assert all(cases == results for _, cases, results in runs)


def test_default_store_sits_beside_the_results(tmp_path):
    paths = write_runs(tmp_path / "results", noisy_factors(2, 27))
    assert main(["add", str(paths[0].parent)]) == 0
    assert (tmp_path / "results" / "fi-attn-history.sqlite").exists()


def test_add_creates_the_stores_folder(tmp_path):
    """A CI job's first run: the folder the store is kept in does not exist yet."""
    store = tmp_path / "history" / "fi-attn-history.sqlite"
    assert main(["add", str(DECODE), "--store", str(store), "--branch", "main"]) == 0
    assert [count for _, count, _ in stored_runs(store)] == [27]


def test_two_writers_at_once_both_store_their_runs_whole(tmp_path):
    paths = write_runs(tmp_path / "in", noisy_factors(6, 27))
    store = tmp_path / "h.sqlite"
    writers = [
        subprocess.Popen(
            [sys.executable, "-m", "fi_attn_bench.history", "add", *map(str, half)]
            + ["--store", str(store)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for half in (paths[:3], paths[3:])
    ]
    outcomes = [(writer.wait(timeout=120), writer.stderr.read()) for writer in writers]
    assert outcomes == [(0, ""), (0, "")]
    with sqlite3.connect(store) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert [(cases, results) for _, cases, results in stored_runs(store)] == [(27, 27)] * 6


def test_run_id_column_splits_and_identifies_runs(tmp_path, capsys):
    paths = write_runs(tmp_path / "in", noisy_factors(2, 27), run_ids=True)
    merged = pd.concat([pd.read_csv(p, dtype=str, keep_default_na=False) for p in paths])
    merged.to_csv(tmp_path / "both.csv", index=False)
    store = tmp_path / "h.sqlite"
    assert main(["add", str(tmp_path / "both.csv"), "--store", str(store)]) == 0
    assert sorted(run_id for run_id, _, _ in stored_runs(store)) == ["run-0", "run-1"]
    with sqlite3.connect(store) as connection:  # the run id is no case field
        assert connection.execute("SELECT COUNT(*) FROM cases").fetchone() == (27,)
    assert main(["add", str(paths[1]), "--store", str(store)]) == 0
    assert "added 0 run(s)" in capsys.readouterr().out


def test_welch_confidence_is_scipys_test_and_quiet_on_near_constant_runs():
    from scipy import stats

    rng = np.random.default_rng(3)
    for _ in range(50):
        before = rng.normal(0, 1, rng.integers(2, 20))
        after = rng.normal(rng.normal(), rng.uniform(0.1, 2), rng.integers(2, 20))
        expected = 1 - stats.ttest_ind(before, after, equal_var=False).pvalue
        assert welch_confidence(before, after) == pytest.approx(expected, abs=1e-9)
    level = np.log(0.109)  # a memory-bound case whose runs repeat to the last digit
    before = np.full(6, level)
    after = level + 0.02 + np.array([0.0, 1e-4, -1e-4])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert welch_confidence(before, after) > 0.999


def test_a_run_written_as_one_csv_per_api_is_stored_whole(tmp_path, capsys):
    """bench_all.py writes one CSV per script, every row with the sweep's run_id."""
    store = tmp_path / "h.sqlite"
    paths = []
    for name in ("h100_decode_default.csv", "h100_ragged_fa2_vs_fa3.csv"):
        frame = pd.read_csv(REAL / name, dtype=str, keep_default_na=False)
        frame["run_id"] = "sweep-1"
        paths.append(tmp_path / name)
        frame.to_csv(paths[-1], index=False)
    assert main(["add", str(paths[0]), "--store", str(store)]) == 0
    assert main(["add", str(tmp_path), "--store", str(store)]) == 0
    assert "added 1 run(s), 40 result(s)" in capsys.readouterr().out
    assert stored_runs(store) == [("sweep-1", 67, 67)]
    with RunStore.open(store, create=False) as opened:
        (run,) = opened.runs()
        assert {"seq_len_kv", "head_dim_qk"} <= set(run.columns)  # both files' case columns
        assert len({case.api for case in opened.cases()}) == 2
    assert main(["add", str(tmp_path), "--store", str(store)]) == 0
    assert "added 0 run(s), 0 result(s)" in capsys.readouterr().out
    assert stored_runs(store) == [("sweep-1", 67, 67)]


def test_a_csv_that_is_not_a_run_is_refused_before_any_write(tmp_path, capsys):
    bad = tmp_path / "notes.csv"
    bad.write_text("name,value\na,1\n")
    store = tmp_path / "h.sqlite"
    assert main(["add", str(DECODE), str(bad), "--store", str(store)]) == 2
    assert "not a benchmark run" in one_error_line(capsys)
    assert not store.exists()


def test_a_newer_store_is_refused(tmp_path, capsys):
    store = tmp_path / "h.sqlite"
    assert main(["add", str(DECODE), "--store", str(store)]) == 0
    capsys.readouterr()
    with sqlite3.connect(store) as connection:
        connection.execute(
            "UPDATE meta SET value=? WHERE key='store_version'", (str(STORE_VERSION + 1),)
        )
    assert main(["detect", "--store", str(store)]) == 2
    assert f"version {STORE_VERSION + 1}" in one_error_line(capsys)


@pytest.mark.parametrize("content", [b"garbage " * 200, b""])
def test_a_corrupt_store_is_refused(tmp_path, capsys, content):
    store = tmp_path / "h.sqlite"
    store.write_bytes(content)
    code = main(["add", str(DECODE), "--store", str(store)])
    if content:
        assert code == 2
        assert "not a usable history store" in one_error_line(capsys)
        assert store.read_bytes() == content
    else:
        assert code == 0  # an empty file is a fresh SQLite database


def test_a_locked_store_gives_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    store = tmp_path / "h.sqlite"
    assert main(["add", str(DECODE), "--store", str(store)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(store_module, "LOCK_TIMEOUT_S", 0.2)
    writer = sqlite3.connect(store, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        assert main(["add", str(REAL), "--store", str(store)]) == 2
        assert "locked by another writer" in one_error_line(capsys)
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert len(stored_runs(store)) == 1


KILLED_ADD = """
import sys, time
from fi_attn_bench.results import run_store as store
original = store.RunStore._case_ids
def slow(self, run):
    ids = original(self, run)
    if run.source.endswith("run_001.csv"):
        print("inside", flush=True)
        time.sleep(60)
    return ids
store.RunStore._case_ids = slow
from fi_attn_bench.history.command_line import main
sys.exit(main(sys.argv[1:]))
"""


def test_a_killed_add_leaves_whole_runs_only(tmp_path):
    paths = write_runs(tmp_path / "in", noisy_factors(3, 27))
    store = tmp_path / "h.sqlite"
    process = subprocess.Popen(
        [sys.executable, "-c", KILLED_ADD, "add", *map(str, paths), "--store", str(store)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout.readline().strip() == "inside"  # run 0 committed, run 1 half-written
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    with sqlite3.connect(store) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert [(cases, results) for _, cases, results in stored_runs(store)] == [(27, 27)]
    assert main(["add", *map(str, paths), "--store", str(store)]) == 0
    assert [(cases, results) for _, cases, results in stored_runs(store)] == [(27, 27)] * 3


def test_detect_finds_a_step_on_its_commit_and_ignores_a_throttled_run(tmp_path, capsys):
    runs, cases = 24, 27
    factors = noisy_factors(runs, cases, seed=3)
    factors[14:, 5] *= 1.05  # a kernel got 5 % slower from run 14 on
    clocks = np.full((runs, cases), 1980.0)
    clocks[9] *= 0.95  # a throttled run: the clock drops 5 %, every time rises with it
    factors[9] /= 0.95
    store = tmp_path / "h.sqlite"
    main(["add", *map(str, write_runs(tmp_path / "in", factors, clocks)), "--store", str(store)])
    capsys.readouterr()
    assert main(["detect", "--store", str(store), "--json"]) == 0
    found = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(found) == 1, found
    assert found[0]["commit"] == f"{14:040x}"
    assert found[0]["size_pct"] == pytest.approx(5, abs=1)
    assert found[0]["confidence"] > 0.99


def default_budget_history() -> tuple[np.ndarray, np.ndarray]:
    """20 real H100 runs of the ragged-prefill preset at the default budget (runs x cases)."""
    frame = pd.read_csv(ROOT / "tests" / "fixtures" / "h100_history_default_budget" / "runs.csv.gz")
    time_ms = frame.pivot(index="run", columns="case", values="time_ms")
    clock = frame.pivot(index="run", columns="case", values="sm_clock_mean_MHz")
    return time_ms.to_numpy(), clock[time_ms.columns].to_numpy()


def test_real_power_capped_runs_without_a_change_report_none():
    time_ms, clock = default_budget_history()
    assert detect(time_ms, clock).change_points == ()


def test_a_two_percent_step_in_real_runs_is_found_by_the_third_run_after_it():
    """Each case >= 50 us of the real runs, slowed 2 % from run 12 on, seen through run 15."""
    time_ms, clock = default_budget_history()
    large = np.flatnonzero(np.median(time_ms, axis=0) >= 0.05)
    assert len(large) == 16
    for case in large:
        stepped = time_ms.copy()
        stepped[12:, case] *= 1.02
        points = detect(stepped[:16], clock[:16]).change_points
        assert [(point.series, abs(point.run - 12) <= 1) for point in points] == [(case, True)]


def test_one_commit_slowing_half_the_real_cases_is_reported_on_each_of_them():
    """Every other case 2 % slower from run 14 on: the run-wide factor moves by about half of
    that, and removing it whole hid every step; a lasting shift most cases do not share stays."""
    time_ms, clock = default_budget_history()
    slowed = np.arange(time_ms.shape[1]) % 2 == 0
    stepped = time_ms.copy()
    stepped[14:, slowed] *= 1.02
    points = detect(stepped[:18], clock[:18]).change_points
    large = np.median(time_ms, axis=0) >= 0.05
    reported = {point.series for point in points}
    assert set(np.flatnonzero(slowed & large)) <= reported <= set(np.flatnonzero(slowed))
    assert all(abs(point.run - 14) <= 1 for point in points)


def test_detect_filters_cases_and_rejects_bad_filters(tmp_path, capsys):
    factors = noisy_factors(20, 27, seed=4)
    factors[12:, 0] *= 1.06
    store = tmp_path / "h.sqlite"
    main(["add", *map(str, write_runs(tmp_path / "in", factors)), "--store", str(store)])
    capsys.readouterr()
    assert main(["detect", "--store", str(store), "--json", "--cases", "seq_len_kv=999999"]) == 2
    assert "matches no case" in one_error_line(capsys)
    assert main(["detect", "--store", str(store), "--json", "--since", f"{11:040x}"[:12]]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1  # the change at run 12
    assert main(["detect", "--store", str(store), "--json", "--since", "2026-01-01T00:13"]) == 0
    assert capsys.readouterr().out == ""
    assert main(["detect", "--store", str(store), "--cases", "batch_size"]) == 2
    assert "NAME=VALUE" in one_error_line(capsys)
    assert main(["detect", "--store", str(tmp_path / "none.sqlite")]) == 2
    assert "no history store" in one_error_line(capsys)


def clock_bound_series(runs=40, seed=5, exponent=1.0):
    rng = np.random.default_rng(seed)
    clock = 1700 * np.exp(rng.normal(0, 0.03, size=(runs, 10)).cumsum(axis=0) * 0.3)
    time_ms = (1700 / clock) ** exponent * np.exp(rng.normal(0, 0.002, size=(runs, 10)))
    return time_ms, clock


def test_clock_bound_series_are_scaled_and_their_step_is_found():
    time_ms, clock = clock_bound_series()
    time_ms[25:, 3] *= 1.03
    result = detect(time_ms, clock)
    assert all(
        n.scaled and n.clock_exponent == pytest.approx(1, abs=0.15) for n in result.normalization
    )
    assert [(p.series, p.run) for p in result.change_points] == [(3, 25)]
    raw = detect(time_ms, clock, DetectionSettings(normalize_clock=False))
    assert not any(n.scaled for n in raw.normalization)
    assert len(raw.change_points) > 1  # without the clock the wandering clock reads as changes


@pytest.mark.parametrize(("exponent", "least", "most"), [(0.4, 0.98, 1.0), (0.0, 0.0, 0.08)])
def test_twelve_runs_tell_a_case_that_follows_the_clock(exponent, least, most):
    """With 12 runs, a case whose time follows a 2 % clock by exponent 0.4 is scaled in
    nearly every draw, and one that ignores the clock rarely is."""
    scaled = []
    for seed in range(200):
        rng = np.random.default_rng(seed)
        log_clock = np.log(1700) + rng.normal(0, 0.02, 12)
        log_time = -exponent * (log_clock - np.log(1700)) + rng.normal(0, 0.004, 12)
        scaled.append(clock_normalization(log_time, log_clock, DetectionSettings()).scaled)
    assert least <= np.mean(scaled) <= most


def test_run_wide_drift_is_measured_against_the_cases_own_levels():
    """A third of the cases step up 5 % at staggered runs: measured against each case's
    median, the run-wide factor would be pulled by them; against their levels it is not."""
    errors = {2: [], 0: []}
    for seed in range(4):
        rng = np.random.default_rng(seed)
        factor = rng.normal(0, 0.004, 40)
        log_time = rng.normal(0, 0.003, (40, 30)) + factor[:, None]
        for case, run in enumerate(range(12, 32, 2)):
            log_time[run:, case] += np.log(1.05)
        for passes in errors:
            drift = shared_drift(log_time, DetectionSettings(drift_passes=passes))
            error = drift - factor
            errors[passes].append(np.mean(np.abs(error - np.median(error))))
    assert np.mean(errors[2]) < 0.0008
    assert np.mean(errors[2]) < 0.6 * np.mean(errors[0])


def test_the_shift_test_asks_more_of_a_short_series():
    """1.2 % over 4 runs in 0.5 % noise passes the default p-value with the noise estimated
    on 48 degrees of freedom, not on 8; 2 % passes on either."""
    limit = DetectionSettings().false_alarm_p
    before = np.zeros(20)
    assert shift_p_value(before, np.full(4, 0.012), 0.005, 48) < limit
    assert shift_p_value(before, np.full(4, 0.012), 0.005, 8) > limit
    assert shift_p_value(before, np.full(4, 0.02), 0.005, 8) < limit


def split_at_run_20(signal, penalty, min_size):
    """A search that always proposes one change, at run 20, so only the reporting rules decide."""
    return [20]


def noisy_series_with_a_shift(runs, shift, noise=0.012):
    rng = np.random.default_rng(0)
    series = rng.normal(0, noise, runs)  # 0.012: about 0.9 % run-to-run noise
    series[20:] += shift
    return series


def test_a_shift_that_three_runs_barely_support_is_not_reported():
    """2 % over 3 runs in 0.9 % noise has a one-sided p of about 2e-4: a chance level of that
    strength would come once in a few hundred series, so the default asks for 1e-4."""
    series = noisy_series_with_a_shift(23, 0.02)
    assert series_change_points(series, DetectionSettings(), split_at_run_20) == []
    looser = DetectionSettings(false_alarm_p=1e-3)
    assert [run for run, _, _ in series_change_points(series, looser, split_at_run_20)] == [20]


def test_a_large_shift_needs_less_proof():
    """3.1 % over 3 runs in 1.4 % noise (p about 2e-4) is reported: a change of 3 % or more
    passes the shift test at 1e-3."""
    series = noisy_series_with_a_shift(23, 0.03, noise=0.018)
    found = series_change_points(series, DetectionSettings(), split_at_run_20)
    assert [(run, round(size, 1)) for run, size, _ in found] == [(20, 3.1)]
    strict = DetectionSettings(large_change_p=1e-4)
    assert series_change_points(series, strict, split_at_run_20) == []


def test_a_two_percent_step_in_noisy_series_clears_the_size_floor():
    """A step measured at 2.1 % and held for 6 runs in 0.9 % noise is reported: 2.4 noise
    levels, above the floor of 2 and below the 2.5 that would hide it."""
    series = noisy_series_with_a_shift(26, 0.016)
    found = series_change_points(series, DetectionSettings(), split_at_run_20)
    assert [run for run, _, _ in found] == [20]
    assert found[0][1] == pytest.approx(2.1, abs=0.05)
    stricter = DetectionSettings(min_change_sigmas=2.5)
    assert series_change_points(series, stricter, split_at_run_20) == []


def test_series_that_ignore_the_clock_are_not_scaled():
    time_ms, clock = clock_bound_series(exponent=0.0)
    result = detect(time_ms, clock)
    assert not any(n.scaled for n in result.normalization)
    assert result.change_points == ()


def test_a_run_wide_step_is_reported_on_the_shared_series():
    rng = np.random.default_rng(6)
    time_ms = np.exp(rng.normal(0, 0.002, size=(30, 12)))
    time_ms[18:] *= 1.04  # every case slower: a driver or a machine change
    result = detect(time_ms, np.full_like(time_ms, np.nan))
    assert [(p.series, p.run) for p in result.change_points] == [(-1, 18)]


@pytest.mark.parametrize("where", [15, 29])
def test_a_one_run_blip_is_not_a_change(where):
    rng = np.random.default_rng(7)
    time_ms = np.exp(rng.normal(0, 0.003, size=(30, 12)))
    time_ms[where, 4] *= 1.10
    assert detect(time_ms, np.full_like(time_ms, np.nan)).change_points == ()


def branch_store(tmp_path, factors):
    store = tmp_path / "h.sqlite"
    paths = write_runs(tmp_path / "in", factors)
    main(["add", *map(str, paths[:-1]), "--store", str(store), "--branch", "main"])
    main(["add", str(paths[-1]), "--store", str(store), "--branch", "feature"])
    return store


def test_baseline_is_the_latest_main_run_and_the_summarizer_reads_it(tmp_path, capsys):
    factors = np.ones((4, 27))
    factors[2] = 1.1  # the newest main run
    factors[3] = 1.3  # a feature-branch run, newer still
    store = branch_store(tmp_path, factors)
    out = tmp_path / "baseline"
    assert main(["baseline", "--store", str(store), "--branch", "main", "--out", str(out)]) == 0
    written = pd.read_csv(out / "baseline_BatchDecodeWithPagedKVCacheWrapper.csv")
    real = pd.read_csv(DECODE)
    assert np.allclose(written["time_ms"], real["time_ms"] * 1.1)
    summary = subprocess.run(
        [
            sys.executable,
            "summarize_results.py",
            "--baseline",
            str(out),
            "--candidate",
            str(DECODE),
            "--output",
            str(tmp_path / "r.md"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert summary.returncode in (0, 1), summary.stderr
    assert "27 matched cases" in summary.stdout


def test_baseline_median_of_k(tmp_path):
    factors = np.ones((5, 27))
    factors[:4, 0] = [1.0, 1.2, 1.1, 5.0]  # the median of the last three main runs: 1.2
    store = branch_store(tmp_path, factors)
    out = tmp_path / "baseline"
    assert (
        main(
            [
                "baseline",
                "--store",
                str(store),
                "--branch",
                "main",
                "--out",
                str(out),
                "--median-of",
                "3",
            ]
        )
        == 0
    )
    written = pd.read_csv(out / "baseline_BatchDecodeWithPagedKVCacheWrapper.csv")
    real = pd.read_csv(DECODE)
    assert written["time_ms"][0] == pytest.approx(real["time_ms"][0] * 1.2)
    assert np.allclose(written["time_ms"][1:], real["time_ms"][1:])


def median_baseline(tmp_path, paths, last: int):
    store, out = tmp_path / "h.sqlite", tmp_path / "baseline"
    assert main(["add", *map(str, paths), "--store", str(store), "--branch", "main"]) == 0
    command = ["baseline", "--store", str(store), "--branch", "main", "--median-of", str(last)]
    assert main([*command, "--out", str(out)]) == 0
    return out


def rewrite(path: Path, **columns) -> None:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for name, value in columns.items():
        frame[name] = value
    frame.to_csv(path, index=False)


def test_baseline_median_of_runs_whose_notes_differ_is_one_row_per_case(tmp_path):
    """Real runs differ in cells beside the times (an energy note in one run, not the next):
    the median is still taken per case, and the summarizer reads the baseline."""
    factors = np.ones((3, 27))
    factors[:, 0] = [1.0, 1.3, 1.1]
    paths = write_runs(tmp_path / "in", factors)
    for run, path in enumerate(paths):
        rewrite(path, notes=f"energy: the counter stepped {run} times")
    out = median_baseline(tmp_path, paths, 3)
    written = pd.read_csv(out / "baseline_BatchDecodeWithPagedKVCacheWrapper.csv")
    real = pd.read_csv(DECODE)
    assert len(written) == 27
    assert written["time_ms"][0] == pytest.approx(real["time_ms"][0] * 1.1)
    summary = subprocess.run(
        [sys.executable, "summarize_results.py", "--baseline", str(out), "--candidate",
         str(DECODE), "--output", str(tmp_path / "r.md")],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert summary.returncode == 0, summary.stdout + summary.stderr
    assert "27 matched cases" in summary.stdout


def test_baseline_median_takes_only_runs_measured_as_the_newest(tmp_path):
    factors = np.ones((3, 27))
    factors[:, 0] = [1.0, 1.3, 1.1]
    paths = write_runs(tmp_path / "in", factors)
    rewrite(paths[-1], dtype="bfloat16")  # the newest run measured another dtype
    out = median_baseline(tmp_path, paths, 3)
    written = pd.read_csv(out / "baseline_BatchDecodeWithPagedKVCacheWrapper.csv")
    assert len(written) == 27 and set(written["dtype"]) == {"bfloat16"}
    assert written["time_ms"][0] == pytest.approx(pd.read_csv(DECODE)["time_ms"][0] * 1.1)


def test_baseline_of_an_unknown_branch_is_exit_2(tmp_path, capsys):
    store = branch_store(tmp_path, np.ones((2, 27)))
    capsys.readouterr()
    assert main(["baseline", "--store", str(store), "--branch", "release"]) == 2
    assert "no run of branch 'release'" in one_error_line(capsys)


def test_report_writes_a_dashboard_and_a_short_markdown(tmp_path, capsys):
    factors = noisy_factors(20, 27, seed=8)
    factors[12:, 2] *= 1.07
    store = tmp_path / "h.sqlite"
    main(["add", *map(str, write_runs(tmp_path / "in", factors)), "--store", str(store)])
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert main(["report", "--store", str(store), "--html", str(html), "--md", str(md)]) == 0
    text = html.read_text()
    assert "http" not in text.replace("http://www.w3.org/2000/svg", "")  # no CDN, no server
    payload = json.loads(text.split('type="application/json">')[1].split("</script>")[0])
    assert len(payload["series"]) == 27
    assert [len(s["changes"]) for s in payload["series"]].count(1) == 1
    digest = md.read_text()
    assert "20 runs, 27 case series" in digest and "| +7." in digest
    assert main(["report", "--store", str(store)]) == 2


def test_the_smallest_step_grows_with_noise_and_shrinks_with_history():
    assert smallest_step_pct(0.001, 20) == DetectionSettings().min_change_pct  # the size floor
    assert smallest_step_pct(0.005, 8) > smallest_step_pct(0.005, 40)
    sizes = [smallest_step_pct(noise, 20) for noise in (0.005, 0.01, 0.02, 0.03)]
    assert sizes == sorted(sizes) and sizes[-1] > 3 * sizes[0]
    assert np.isnan(smallest_step_pct(float("nan"), 20))


def test_steps_well_under_the_smallest_step_are_missed_and_well_over_it_found():
    """On Gaussian noise of 1 % per run, 20 runs before the step and the third run after it."""
    settings, noise, before = DetectionSettings(), 0.01, 20
    floor = smallest_step_pct(noise, before, settings)
    rng = np.random.default_rng(11)

    def found(multiple: float) -> int:
        hits = 0
        for _ in range(40):
            series = rng.normal(0, noise, before + 4)
            series[before:] += np.log1p(floor * multiple / 100)
            points = series_change_points(series, settings, kernel_cpd_breakpoints)
            hits += any(abs(run - before) <= 1 for run, _, _ in points)
        return hits

    assert found(0.7) <= 8
    assert found(1.4) >= 28


def test_detect_and_report_name_the_series_too_noisy_for_a_two_percent_step(tmp_path, capsys):
    factors = noisy_factors(16, 27, seed=9)
    factors[:, 3] = noisy_factors(16, 1, seed=10, sd=0.03)[:, 0]  # one case as noisy as 3 %
    store = tmp_path / "h.sqlite"
    main(["add", *map(str, write_runs(tmp_path / "in", factors)), "--store", str(store)])
    capsys.readouterr()
    assert main(["detect", "--store", str(store)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "sensitivity: 1 of 27 series cannot show a 2 % step by the third run after it" in lines
    noisy = pd.read_csv(DECODE).iloc[3]
    (named,) = [line for line in lines if line.startswith("  steps under ")]
    assert f"batch_size={noisy['batch_size']}," in named
    assert f"seq_len_kv={noisy['seq_len_kv']}," in named
    md, html = tmp_path / "r.md", tmp_path / "r.html"
    assert main(["report", "--store", str(store), "--md", str(md), "--html", str(html)]) == 0
    assert "Sensitivity: 1 of 27 series cannot show a 2 % step" in md.read_text()
    text = html.read_text()
    payload = json.loads(text.split('type="application/json">')[1].split("</script>")[0])
    notes = [s["sensitivity"] for s in payload["series"]]
    assert all(note.startswith("steps under ") for note in notes)


def test_runs_of_other_schema_and_harness_versions_are_kept_with_their_versions(tmp_path):
    legacy = ROOT / "tests" / "fixtures" / "summarizer" / "legacy_decode.csv"
    older = ROOT / "tests" / "fixtures" / "summarizer" / "new_decode.csv"
    store = tmp_path / "h.sqlite"
    assert main(["add", str(legacy), str(older), str(DECODE), "--store", str(store)]) == 0
    with RunStore.open(store, create=False) as opened:
        versions = [
            (run.metadata.get("schema_version", ""), run.metadata.get("harness_version", ""))
            for run in opened.runs()
        ]
    assert "harness_version" not in pd.read_csv(older).columns  # written before the column
    assert sorted(versions) == [("", ""), ("1", ""), ("1", "0.6.0")]


def test_noise_from_a_store_excuses_a_noisy_cases_move_and_keeps_a_quiet_cases_regression(
    tmp_path,
):
    from summarize_results import main as summarize

    factors = noisy_factors(12, 27, seed=12)
    factors[:, 3] = noisy_factors(12, 1, seed=13, sd=0.03)[:, 0]  # a case moving 3 % per run
    store = tmp_path / "h.sqlite"
    assert (
        main(["add", *map(str, write_runs(tmp_path / "history", factors)), "--store", str(store)])
        == 0
    )
    slower = np.ones((1, 27))
    slower[0, [3, 5]] = 1.07  # both 7 % slower than the baseline run
    candidate = write_runs(tmp_path / "candidate", slower)[0]
    baseline = write_runs(tmp_path / "baseline", np.ones((1, 27)))[0]
    gate = ["--baseline", str(baseline), "--candidate", str(candidate), "--fail-on-regression", "5"]
    times = pd.read_csv(DECODE)["time_ms"].tolist()

    def states(*extra: str) -> tuple[int, dict[int, str], list[dict]]:
        report = tmp_path / "r.json"
        code = summarize([*gate, "--output", str(tmp_path / "r.md"), "--json", str(report), *extra])
        matched = json.loads(report.read_text())["matched"]
        report.unlink()
        by_row = {times.index(case["time_ms_baseline"]): case["state"] for case in matched}
        return code, by_row, matched

    code, by_row, _ = states()
    assert code == 1 and by_row[3] == by_row[5] == "regression"
    code, by_row, matched = states("--noise-from", str(store))
    assert code == 1
    assert by_row[3] == "within noise" and by_row[5] == "regression"
    assert [state for row, state in by_row.items() if row not in (3, 5)] == ["compared"] * 25
    noise = {times.index(case["time_ms_baseline"]): case["run_noise_pct"] for case in matched}
    assert noise[3] > 2 and max(value for row, value in noise.items() if row != 3) < 1
    report = (tmp_path / "r.md").read_text()
    assert "With --noise-from, a case with a history (27 here)" in report
    assert f"run-to-run noise {noise[5]:.2f}% (history)" in report  # the regression's reason


def test_noise_from_a_missing_store_is_one_line_and_exit_2(tmp_path, capsys):
    from summarize_results import main as summarize

    run = write_runs(tmp_path / "runs", np.ones((1, 27)))[0]
    missing = tmp_path / "no.sqlite"
    code = summarize(
        ["--baseline", str(run), "--candidate", str(run), "--noise-from", str(missing),
         "--output", str(tmp_path / "r.md")]
    )  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: --noise-from: ")
    assert not (tmp_path / "r.md").exists()
    with pytest.raises(SystemExit) as stopped:
        summarize([str(run), "--noise-from", str(missing)])
    assert stopped.value.code == 2
