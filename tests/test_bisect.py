"""fi-attn-history bisect: the search with stand-in measurements (seeded), skips, cannot-tell,
bad input, worktree clean-up, store writes, and an end-to-end bisect of a tiny generated
repository (deterministic run times, so no assertion rests on this machine's timing)."""

from __future__ import annotations

import json
import math
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from fi_attn_bench.history import bisect_command_line
from fi_attn_bench.history.bisect import (
    BisectSettings,
    EndpointFailed,
    Outcome,
    ProbeFailed,
    Revision,
    bisect,
)
from fi_attn_bench.history.bisect_change import change_ends
from fi_attn_bench.history.bisect_runs import CommandProber
from fi_attn_bench.history.bisect_sources import BisectInputError, commit_line
from fi_attn_bench.history.bisect_stats import (
    MANN_WHITNEY,
    SIGNED_RANK,
    compare,
    fewest_repeats_for,
    kept_pairs,
    paired_ratio_estimate,
    ratio_estimate,
    signed_rank_p,
)
from fi_attn_bench.history.command_line import main as history_main

ROOT = Path(__file__).resolve().parents[1]
DECODE = ROOT / "tests" / "fixtures" / "real_csv" / "h100_decode_default.csv"


# --- statistics ---------------------------------------------------------------------------


def test_signed_rank_p_is_scipys_wilcoxon_exact_and_approximate():
    stats = pytest.importorskip("scipy.stats")  # installed with ruptures, in the test extra
    rng = np.random.default_rng(4)
    for n in (6, 11, 25, 40):
        d = rng.normal(0.4, 1, n)
        assert signed_rank_p(d) == pytest.approx(stats.wilcoxon(d, method="exact").pvalue)
    tied = np.round(rng.normal(0.3, 1, 30), 1)
    tied = tied[tied != 0]
    expected = stats.wilcoxon(tied, method="approx", correction=True).pvalue
    assert signed_rank_p(tied) == pytest.approx(expected)


def test_ratio_estimates_recover_a_known_ratio_inside_their_interval():
    first = np.exp(np.random.default_rng(1).normal(0, 0.01, 30))
    unpaired = ratio_estimate(first, first * 1.05)
    assert unpaired.ratio == pytest.approx(1.05)
    assert unpaired.low < 1.05 < unpaired.high
    paired = paired_ratio_estimate(np.log(1.05) + np.random.default_rng(2).normal(0, 0.01, 30))
    assert paired.low < paired.ratio < paired.high
    assert paired.ratio == pytest.approx(1.05, abs=0.005)


def test_fewest_repeats_are_where_complete_separation_first_reaches_alpha():
    assert fewest_repeats_for(0.001, MANN_WHITNEY) == 8
    assert fewest_repeats_for(0.001, SIGNED_RANK) == 11  # 2 / 2**11 < 0.001 < 2 / 2**10
    assert signed_rank_p(np.arange(1, 12)) <= 0.001 < signed_rank_p(np.arange(1, 11))


def test_a_comparison_says_same_only_when_its_interval_excludes_the_margin():
    rng = np.random.default_rng(3)
    wide = compare(np.exp(rng.normal(0, 0.05, 12)), np.exp(rng.normal(0, 0.05, 12)))
    narrow = compare(np.exp(rng.normal(0, 0.002, 40)), np.exp(rng.normal(0, 0.002, 40)))
    assert not wide.within(math.log(1.01))
    assert narrow.within(math.log(1.01))


def spells(rng, count, slow=1.43, share=0.4, noise=0.02):
    """Run times of a machine that is ``slow`` times slower in spells of 1-8 runs (``share`` of
    them), with lognormal noise: this VM's bimodal speed (VALIDATION "Bisect")."""
    out, is_slow = [], False
    while len(out) < count:
        length = int(rng.integers(1, 9))
        out += list((slow if is_slow else 1.0) * np.exp(rng.normal(0, noise, length)))
        is_slow = rng.random() < share
    return np.array(out[:count])


def test_kept_pairs_leave_out_only_pairs_far_beyond_the_median_ratio():
    d = np.array([0.01, -0.02, 0.015, 0.36, -0.005, -0.35, 0.02, 0.0])
    assert sorted(kept_pairs(d, 4.0)) == sorted([0.01, -0.02, 0.015, -0.005, 0.02, 0.0])
    assert list(kept_pairs(d, 0.0)) == list(d)  # trim 0 keeps every pair
    assert list(kept_pairs(np.zeros(5), 4.0)) == [0.0] * 5  # no spread: nothing to judge by
    assert len(kept_pairs(d, 1.0)) >= len(d) // 2  # at least the pairs up to the median


def test_trimmed_signed_rank_keeps_its_level_and_sees_through_slow_spells():
    """No change: p <= 0.05 in about 5 % of seeded draws (the choice looks at |log ratio|
    only).  20 rounds inside slow spells: a 3 % change is found, and no change is "the same"
    within 1.5 %, far more often with the trim than without."""
    rng = np.random.default_rng(11)
    null_hits = 0
    for _ in range(300):
        chain = spells(rng, 120)  # 60 rounds of two back-to-back runs
        null = compare(chain[0::2], chain[1::2], test=SIGNED_RANK, trim=4.0)
        null_hits += null.p_value <= 0.05
        assert null.pairs_kept is not None and 30 <= null.pairs_kept <= 60
    assert 5 <= null_hits <= 27  # 15 expected of 300
    found, same = {4.0: 0, 0.0: 0}, {4.0: 0, 0.0: 0}
    for _ in range(200):
        changed, unchanged = spells(rng, 40), spells(rng, 40)
        for trim in found:
            step = compare(changed[0::2], changed[1::2] * 1.03, test=SIGNED_RANK, trim=trim)
            found[trim] += step.p_value <= 0.001
            flat = compare(unchanged[0::2], unchanged[1::2], test=SIGNED_RANK, trim=trim)
            same[trim] += flat.within(math.log(1.015))
    assert found[4.0] >= found[0.0] + 25 and same[4.0] >= same[0.0] + 20, (found, same)


def test_a_comparison_says_how_many_pairs_its_trim_kept():
    rng = np.random.default_rng(5)
    first = np.exp(rng.normal(0, 0.01, 20))
    second = first * np.exp(rng.normal(0, 0.01, 20))
    second[:3] *= 1.5
    trimmed = compare(first, second, test=SIGNED_RANK, trim=4.0)
    assert trimmed.pairs_kept == 17 and "17 pairs kept" in trimmed.describe()
    assert compare(first, second, test=SIGNED_RANK).pairs_kept is None


# --- the search, with stand-in measurements -----------------------------------------------


class StandIn:
    """Revision i runs at 1.0 ms before ``step_at`` and 1 + step after, times lognormal noise
    (seeded); ``broken`` revisions do not build; ``failing_runs`` fail from their second run."""

    def __init__(self, step_at, step=0.05, noise=0.01, seed=0, broken=(), failing_runs=()):
        self.step_at, self.step, self.noise = step_at, step, noise
        self.rng = random.Random(seed)
        self.broken, self.failing_runs = set(broken), set(failing_runs)
        self.runs: dict[int, int] = {}
        self.released: list[int] = []

    def prepare(self, revision):
        if int(revision.key) in self.broken:
            raise ProbeFailed("build failed")

    def measure(self, revision):
        index = int(revision.key)
        self.runs[index] = self.runs.get(index, 0) + 1
        if index in self.failing_runs and self.runs[index] > 1:
            raise ProbeFailed("crashed")
        level = 1 + self.step if index >= self.step_at else 1.0
        return level * math.exp(self.rng.gauss(0, self.noise))

    def release(self, revision):
        self.released.append(int(revision.key))


def line(count: int) -> list[Revision]:
    return [Revision(str(i), f"r{i}") for i in range(count)]


@pytest.mark.parametrize("test", [SIGNED_RANK, MANN_WHITNEY])
@pytest.mark.parametrize("step_at", [1, 17, 40, 63])
def test_the_search_names_the_step_in_few_probes(step_at, test):
    prober = StandIn(step_at, seed=step_at)
    result = bisect(line(64), prober, BisectSettings(seed=step_at, test=test))
    assert result.outcome is Outcome.FOUND and result.exit_code == 0
    assert result.first_bad.key == str(step_at) and result.last_good.key == str(step_at - 1)
    assert result.probes <= 2 + 6  # the ends and log2(64) midpoints
    assert [s.outcome for s in result.steps[1:]].count("bad") + 1 <= 7


class Spells(StandIn):
    """StandIn whose runs also meet the machine's slow spells, in the order they are made."""

    def __init__(self, step_at, seed):
        super().__init__(step_at, step=0.03, noise=0.0, seed=seed)
        self.chain, self.made = spells(np.random.default_rng(seed), 20000), 0

    def measure(self, revision):
        self.made += 1
        return super().measure(revision) * self.chain[self.made]


def test_slow_spells_do_not_hide_a_3_percent_step_from_the_trimmed_search():
    """With the trim the search names the step in fewer runs, and within a budget of 40 rounds
    a step where the untrimmed test says "cannot tell" throughout."""
    named, runs = {}, {}
    for trim, budget in ((4.0, 100), (0.0, 100), (4.0, 40), (0.0, 40)):
        named[trim, budget] = runs[trim, budget] = 0
        for seed in range(6):
            prober = Spells(37, seed)
            settings = BisectSettings(seed=seed, trim=trim, max_repeats=budget)
            result = bisect(line(64), prober, settings)
            assert result.outcome is Outcome.CANNOT_TELL or result.first_bad.key == "37"
            named[trim, budget] += result.outcome is Outcome.FOUND
            runs[trim, budget] += prober.made
    assert named[4.0, 100] == 6 and runs[4.0, 100] < 0.75 * runs[0.0, 100], (named, runs)
    assert named[4.0, 40] >= 4 and named[0.0, 40] <= 1, named


def test_an_end_whose_runs_keep_failing_is_cannot_tell():
    result = bisect(line(10), StandIn(5, failing_runs={0}), BisectSettings())
    assert result.outcome is Outcome.CANNOT_TELL and result.exit_code == 3
    assert "kept failing" in result.reason


def test_a_faster_revision_is_bisected_too():
    result = bisect(line(20), StandIn(7, step=-0.05), BisectSettings())
    assert result.first_bad.key == "7"


def test_every_step_reports_medians_ratio_interval_p_and_repeats():
    steps = []
    bisect(line(8), StandIn(5), BisectSettings(), on_step=steps.append)
    first, probe = steps[0], steps[1]
    assert first.probe is None and first.outcome == "different"
    assert first.against_good.estimate.ratio == pytest.approx(1.05, abs=0.01)
    text = probe.describe()
    for word in ("ms, ratio", "p ", "repeats", "vs good", "vs bad", "(95%)"):
        assert word in text, text


def test_a_revision_that_does_not_build_is_skipped_and_said():
    steps = []
    prober = StandIn(10, broken={15, 8})
    result = bisect(line(32), prober, BisectSettings(), on_step=steps.append)
    assert result.outcome is Outcome.FOUND and result.first_bad.key == "10"
    assert {r.key for r in result.skipped} == {"15", "8"}
    assert any(s.outcome == "skipped" and s.note == "build failed" for s in steps)


def test_a_probe_that_crashes_mid_step_is_skipped():
    result = bisect(line(16), StandIn(4, failing_runs={7}), BisectSettings())
    assert result.first_bad.key == "4"
    assert [r.key for r in result.skipped] == ["7"]


def test_skips_around_the_culprit_end_in_cannot_tell_with_the_range():
    result = bisect(line(16), StandIn(9, broken={8, 9, 10}), BisectSettings())
    assert result.outcome is Outcome.CANNOT_TELL and result.exit_code == 3
    assert (result.last_good.key, result.first_bad.key) in {("7", "11"), ("7", "9"), ("8", "11")}
    assert "skipped" in result.reason


def test_a_step_too_small_for_the_budget_is_cannot_tell_never_a_commit():
    for seed in range(6):
        result = bisect(
            line(64),
            StandIn(30, step=0.005, noise=0.02, seed=seed),
            BisectSettings(max_repeats=20, seed=seed),
        )
        assert result.outcome is Outcome.CANNOT_TELL, result.summary()
        assert result.summary().startswith("cannot tell between")


def test_good_and_bad_that_measure_the_same_are_cannot_tell():
    result = bisect(line(10), StandIn(99, noise=0.001), BisectSettings())
    assert result.outcome is Outcome.CANNOT_TELL
    assert "measure the same" in result.reason
    assert result.probes == 2


def test_a_good_end_that_does_not_run_is_bad_input():
    with pytest.raises(EndpointFailed, match="good revision r0: build failed"):
        bisect(line(10), StandIn(5, broken={0}), BisectSettings())


def test_ends_that_leave_the_interval_are_released():
    prober = StandIn(3)
    result = bisect(line(16), prober, BisectSettings())
    kept = {result.last_good.key, result.first_bad.key}
    assert set(map(str, prober.released)).isdisjoint(kept)
    assert len(prober.released) >= 2


# --- git: the commit line, worktrees, the command line --------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


RUNNER = """import csv, sys, os
here = os.path.dirname(os.path.abspath(__file__))
if os.path.exists(os.path.join(here, "BROKEN")):
    sys.exit("does not build")
speed = float(open(os.path.join(here, "SPEED")).read())
count_file = os.path.join(here, ".runs")
count = int(open(count_file).read()) + 1 if os.path.exists(count_file) else 1
open(count_file, "w").write(str(count))
row = {"schema_version": "1", "api": "BatchDecodeWithPagedKVCacheWrapper", "batch_size": "1",
       "seq_len_q": "1", "seq_len_kv": "8", "num_qo_heads": "1", "num_kv_heads": "1",
       "head_dim": "8", "impl": "plugin", "status": "ok",
       "time_ms": repr(speed * (1 + 1e-4 * (count % 7))), "bandwidth_GB_s": "0", "tflops": "0",
       "error_type": "", "error": "", "device": "cpu",
       "timestamp_utc": "2026-12-07T00:00:%02dZ" % (count % 60), "run_id": os.urandom(8).hex()}
with open(sys.argv[1], "w", newline="") as out:
    writer = csv.DictWriter(out, fieldnames=list(row))
    writer.writeheader()
    writer.writerow(row)
"""
COMMAND = ["--", "{python}", "-I", "-S", "{rev_dir}/run.py", "{output}"]
CASE = ["--case", "api=BatchDecodeWithPagedKVCacheWrapper,seq_len_kv=8"]


def make_repo(path: Path, speeds, broken=()) -> list[str]:
    """One commit per speed (the run's time in ms); commits in ``broken`` exit 1."""
    path.mkdir()
    git(path, "init", "--quiet", "--initial-branch=main")
    git(path, "config", "user.email", "t@example.com")
    git(path, "config", "user.name", "t")
    (path / "run.py").write_text(RUNNER)
    hashes = []
    for number, speed in enumerate(speeds):
        (path / "SPEED").write_text(repr(speed))
        (path / "BROKEN").unlink(missing_ok=True)
        if number in broken:
            (path / "BROKEN").write_text("1")
        with open(path / "NOTES", "a") as notes:
            notes.write(f"{number}\n")
        git(path, "add", "-A")
        git(path, "commit", "--quiet", "-m", f"commit {number}")
        hashes.append(git(path, "rev-parse", "HEAD"))
    return hashes


def worktrees(repo: Path) -> list[str]:
    return [
        w
        for w in git(repo, "worktree", "list", "--porcelain").splitlines()
        if w.startswith("worktree ")
    ]


def bisect_args(repo, hashes, store, *extra):
    return [
        "bisect", "--repo", str(repo), "--good", hashes[0], "--bad", hashes[-1], *CASE,
        "--store", str(store), "--alpha", "0.01", "--max-repeats", "10", *extra, *COMMAND,
    ]  # fmt: skip


def test_end_to_end_a_tiny_repository_names_its_slow_commit_and_stores_every_run(tmp_path, capsys):
    repo, store = tmp_path / "repo", tmp_path / "h.sqlite"
    hashes = make_repo(repo, [1.0] * 5 + [1.1] * 3, broken={3})
    code = history_main(bisect_args(repo, hashes, store))
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"first bad revision: {hashes[5][:7]} commit 5" in out
    assert f"skipped (did not build or run): {hashes[3][:7]} commit 3" in out
    assert worktrees(repo) == [f"worktree {repo}"]
    with sqlite3.connect(store) as connection:
        rows = connection.execute("SELECT branch, metadata FROM runs").fetchall()
    commits = [json.loads(meta)["git_commit"] for _, meta in rows]
    assert {branch for branch, _ in rows} == {"bisect"}
    assert set(commits) <= set(hashes) and {hashes[0], hashes[5], hashes[7]} <= set(commits)
    assert len(rows) >= 2 * 8  # the first step alone runs each end at least 8 times


def test_ctrl_c_mid_bisect_removes_every_worktree(tmp_path, capsys, monkeypatch):
    repo = tmp_path / "repo"
    hashes = make_repo(repo, [1.0, 1.0, 1.1, 1.1])
    calls = {"n": 0}
    measure = CommandProber.measure

    def interrupted(self, revision):
        calls["n"] += 1
        if calls["n"] == 5:
            raise KeyboardInterrupt
        return measure(self, revision)

    monkeypatch.setattr(CommandProber, "measure", interrupted)
    code = history_main(bisect_args(repo, hashes, tmp_path / "h.sqlite"))
    assert code == 130
    assert "interrupted" in capsys.readouterr().err
    assert worktrees(repo) == [f"worktree {repo}"]
    assert not list(Path(repo / ".git" / "worktrees").glob("*"))


def test_a_terminated_bisect_removes_its_worktrees_and_its_running_command(small_repo, tmp_path):
    repo, hashes = small_repo
    args = bisect_args(repo, hashes, tmp_path / "h.sqlite")[: -len(COMMAND)]
    sleeper = "import time; time.sleep(120)"
    process = subprocess.Popen(
        [sys.executable, "-m", "fi_attn_bench.history", *args, "--", sys.executable, "-c", sleeper],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(600):  # until the good end's worktree exists and its first run sleeps
            if len(worktrees(repo)) == 2:
                break
            time.sleep(0.1)
        assert len(worktrees(repo)) == 2
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted" in err
    assert worktrees(repo) == [f"worktree {repo}"]


def one_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


@pytest.fixture()
def small_repo(tmp_path):
    repo = tmp_path / "repo"
    return repo, make_repo(repo, [1.0, 1.0, 1.1])


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda a, h: a.__setitem__(a.index("--good") + 1, "no-such-rev"), "does not exist"),
        (
            lambda a, h: a.__setitem__(
                slice(a.index("--good"), a.index("--good") + 2), ["--good=-x"]
            ),
            "does not exist",
        ),
        (lambda a, h: a.__setitem__(a.index("--bad") + 1, "no-such-rev"), "does not exist"),
        (lambda a, h: a.__setitem__(a.index("--good") + 1, h[-1]), "the same revision"),
        (lambda a, h: a.__setitem__(a.index("--bad") + 1, h[0]), "the same revision"),
        (lambda a, h: a.__setitem__(a.index("--case") + 1, "seq_len_kv"), "not NAME=VALUE"),
        (lambda a, h: a.__setitem__(a.index("--max-repeats") + 1, "3"), "too few"),
        (lambda a, h: a.__setitem__(a.index("--alpha") + 1, "0"), "--alpha"),
        (
            lambda a, h: a.__setitem__(slice(a.index("--"), a.index("--")), ["--trim", "0.5"]),
            "--trim 0.5 must be 0",
        ),
        (lambda a, h: a.__setitem__(a.index("{python}"), "/no/such/program"), "not found"),
    ],
)
def test_bad_input_is_one_line_exit_2_before_any_run(small_repo, tmp_path, capsys, change, message):
    repo, hashes = small_repo
    store = tmp_path / "h.sqlite"
    args = bisect_args(repo, hashes, store)
    change(args, hashes)
    assert history_main(args) == 2
    assert message in one_error(capsys)
    assert not store.exists()  # refused before the store was opened
    assert worktrees(repo) == [f"worktree {repo}"]


def test_good_that_is_not_an_ancestor_of_bad_is_refused(small_repo, tmp_path, capsys):
    repo, hashes = small_repo
    git(repo, "checkout", "--quiet", "-b", "side", hashes[0])
    (repo / "SPEED").write_text("2.0")
    git(repo, "commit", "--quiet", "-am", "side")
    side = git(repo, "rev-parse", "HEAD")
    args = bisect_args(repo, [side, hashes[-1]], tmp_path / "h.sqlite")
    assert history_main(args) == 2
    assert "is not an ancestor of bad" in one_error(capsys)


def test_a_case_that_matches_nothing_is_bad_input(small_repo, tmp_path, capsys):
    repo, hashes = small_repo
    args = bisect_args(repo, hashes, tmp_path / "h.sqlite")
    args[args.index("--case") + 1] = "seq_len_kv=9999"
    assert history_main(args) == 2
    assert "no case of the output matches --case 'seq_len_kv=9999'" in one_error(capsys)
    assert worktrees(repo) == [f"worktree {repo}"]


def test_a_command_that_never_succeeds_is_bad_input(small_repo, tmp_path, capsys):
    repo, hashes = small_repo
    args = bisect_args(repo, hashes, tmp_path / "h.sqlite")[: -len(COMMAND)]
    args += ["--", sys.executable, "-c", "import sys; sys.exit('cannot build {rev}')"]
    assert history_main(args) == 2
    err = one_error(capsys)
    assert "good revision" in err and f"COMMAND exited 1: cannot build {hashes[0]}" in err


def test_without_a_command_it_needs_a_plugin(small_repo, tmp_path, capsys):
    repo, hashes = small_repo
    args = bisect_args(repo, hashes, tmp_path / "h.sqlite")[: -len(COMMAND)]
    assert history_main(args) == 2
    assert "--impl FILE.py:FACTORY" in one_error(capsys)


def test_the_default_command_runs_the_harness_script_on_the_worktrees_plugin():
    parser = bisect_command_line.argparse.ArgumentParser()
    bisect_command_line.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bisect", "--impl", "plugins/p.py:make"])
    argv = bisect_command_line.default_command(args, {"api": "X", "batch_size": "4", "impl": "p"})
    assert argv[0] == "{python}" and argv[1].endswith("bench_batch_decode.py")
    assert argv[2:] == ("--impl", "{rev_dir}/plugins/p.py:make", "--filter", "batch_size=4",
                        "--output", "{output}")  # fmt: skip


def test_the_command_line_defaults_are_the_settings_defaults():
    assert bisect_command_line.DEFAULT_MAX_REPEATS == BisectSettings().max_repeats
    assert bisect_command_line.DEFAULT_MIN_CHANGE_PCT == BisectSettings().min_change_pct
    assert bisect_command_line.DEFAULT_TEST == BisectSettings().test


def test_commit_line_follows_first_parents_oldest_first(small_repo):
    repo, hashes = small_repo
    revisions = commit_line(repo, hashes[0], hashes[-1])
    assert [r.key for r in revisions] == hashes
    assert revisions[1].label.endswith("commit 1")
    with pytest.raises(BisectInputError, match="not a git repository"):
        commit_line(repo.parent, "a", "b")


def test_a_hostile_subject_cannot_steer_the_terminal(tmp_path):
    repo = tmp_path / "repo"
    hashes = make_repo(repo, [1.0, 1.0])
    (repo / "SPEED").write_text("3")
    git(repo, "commit", "--quiet", "-am", "evil \x1b]0;owned\x07 subject")
    revisions = commit_line(repo, hashes[0], "HEAD")
    assert "\x1b" not in revisions[-1].label and "\x07" not in revisions[-1].label


# --- --from-change ----------------------------------------------------------------------------


def test_from_change_takes_the_commits_around_detects_change_and_its_case(tmp_path, capsys):
    pytest.importorskip("ruptures")
    base = pd.read_csv(DECODE, dtype=str, keep_default_na=False)
    factors = np.exp(np.random.default_rng(3).normal(0, 0.003, size=(24, len(base))))
    factors[14:, 5] *= 1.05  # case 5 slower from run 14 on
    paths = []
    for run, row in enumerate(factors):
        frame = base.copy()
        frame["time_ms"] = [
            repr(float(t) * float(f)) for t, f in zip(base["time_ms"], row, strict=True)
        ]
        frame["timestamp_utc"] = f"2026-01-01T00:{run:02d}:00Z"
        frame["git_commit"] = f"{run:040x}"
        paths.append(tmp_path / f"run{run:02d}.csv")
        frame.to_csv(paths[-1], index=False)
    store = tmp_path / "h.sqlite"
    assert history_main(["add", *map(str, paths), "--store", str(store)]) == 0
    ends = change_ends(store, 1)
    assert (ends.good_commit, ends.bad_commit) == (f"{13:040x}", f"{14:040x}")
    assert ends.case_terms["api"] == base["api"][5]
    assert ends.case_terms["seq_len_kv"] == base["seq_len_kv"][5]
    capsys.readouterr()
    args = ["bisect", "--from-change", "2", "--store", str(store), "--repo", str(tmp_path)]
    assert history_main([*args, "--", "true"]) == 2
    assert "detect lists 1 change point(s)" in one_error(capsys)


# --- --versions ---------------------------------------------------------------------------


def write_wheel(directory: Path, version: str, speed: float) -> Path:
    """A wheel of the dummy package ``bisectdummy`` whose SPEED is the run's time in ms."""
    name = f"bisectdummy-{version}"
    path = directory / f"bisectdummy-{version}-py3-none-any.whl"
    files = {
        "bisectdummy/__init__.py": f"SPEED = {speed!r}\n",
        f"{name}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: bisectdummy\nVersion: {version}\n",
        f"{name}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{file},,\n" for file in files) + f"{name}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for file, text in files.items():
            archive.writestr(file, text)
        archive.writestr(f"{name}.dist-info/RECORD", record)
    return path


VERSION_RUNNER = """import csv, os, sys
import bisectdummy
row = {"schema_version": "1", "api": "BatchDecodeWithPagedKVCacheWrapper", "batch_size": "1",
       "seq_len_q": "1", "seq_len_kv": "8", "num_qo_heads": "1", "num_kv_heads": "1",
       "head_dim": "8", "impl": "plugin", "status": "ok", "time_ms": repr(bisectdummy.SPEED),
       "bandwidth_GB_s": "0", "tflops": "0", "error_type": "", "error": "", "device": "cpu",
       "timestamp_utc": "2026-12-07T00:00:00Z", "run_id": os.urandom(8).hex()}
with open(sys.argv[1], "w", newline="") as out:
    writer = csv.DictWriter(out, fieldnames=list(row))
    writer.writeheader()
    writer.writerow(row)
"""


def test_versions_bisects_wheels_each_in_its_own_environment(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version, speed in (("1.0", 1.0), ("1.1", 1.0), ("1.10", 1.2), ("1.2", 1.0)):
        write_wheel(wheels, version, speed)  # 1.2 < 1.10 by version, not by name
    runner = tmp_path / "runner.py"
    runner.write_text(VERSION_RUNNER)
    store = tmp_path / "h.sqlite"
    args = [
        "bisect", "--versions", str(wheels), "--good", "1.0", "--bad", "1.10", *CASE,
        "--store", str(store), "--alpha", "0.01", "--max-repeats", "10",
        "--", "{python}", str(runner), "{output}",
    ]  # fmt: skip
    code = history_main(args)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "first bad revision: bisectdummy 1.10 (last good: bisectdummy 1.2)" in out
    with sqlite3.connect(store) as connection:
        commits = {
            json.loads(m)["git_commit"] for (m,) in connection.execute("SELECT metadata FROM runs")
        }
    assert {"bisectdummy 1.0", "bisectdummy 1.10"} <= commits
    assert commits <= {"bisectdummy 1.0", "bisectdummy 1.1", "bisectdummy 1.2", "bisectdummy 1.10"}
    assert not list(Path("/tmp").glob("fi-attn-bisect-venv-*/env*"))


def test_versions_refuses_wheels_of_two_packages_and_unknown_versions(tmp_path, capsys):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "1.0", 1.0)
    write_wheel(wheels, "2.0", 1.0)
    base = ["bisect", "--versions", str(wheels), *CASE]
    assert history_main([*base, "--good", "3.0", "--", "true"]) == 2
    assert "version '3.0' is not among the wheels" in one_error(capsys)
    assert history_main([*base, "--good", "2.0", "--bad", "1.0", "--", "true"]) == 2
    assert "is newer than bad" in one_error(capsys)
    (wheels / "other-1.0-py3-none-any.whl").write_bytes(b"")
    assert history_main([*base, "--", "true"]) == 2
    assert "wheels of several packages" in one_error(capsys)


# --- the trials benchmark's repositories ---------------------------------------------------


def test_trial_repositories_slow_the_plugin_at_the_hidden_commit_only(tmp_path):
    bisect_trials = import_trials()
    plugin, runner = bisect_trials.CPU_PLUGIN, bisect_trials.CPU_RUNNER.format(calls=3)
    repo = bisect_trials.make_repository(tmp_path / "r", 6, 4, plugin, runner, (250, 258))
    hashes = git(repo.path, "rev-list", "--reverse", "HEAD").split()
    assert (repo.good, repo.hidden, repo.bad) == (hashes[0], hashes[4], hashes[5])
    repeats = [
        git(repo.path, "show", f"{commit}:plugin.py").count("REPEATS = 258") for commit in hashes
    ]
    assert repeats == [0, 0, 0, 0, 1, 1]
    output = tmp_path / "run.csv"
    subprocess.run(
        [sys.executable, "-I", "-S", str(repo.path / "run_case.py"), str(output)], check=True
    )
    from fi_attn_bench.history.reading import runs_in_file

    (run,) = runs_in_file(output)
    assert run.results[0].time_ms > 0 and run.results[0].status == "ok"


def import_trials():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bisect_trials
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return bisect_trials


def test_torch_trial_repositories_add_matmuls_at_the_hidden_commit_and_time_them(tmp_path):
    bisect_trials = import_trials()
    plugin = bisect_trials.TORCH_PLUGIN.replace("{size}", "32")
    runner = bisect_trials.TORCH_RUNNER.format(device="cpu", calls=3)
    repo = bisect_trials.make_repository(tmp_path / "r", 4, 2, plugin, runner, (50, 51))
    hashes = git(repo.path, "rev-list", "--reverse", "HEAD").split()
    repeats = [git(repo.path, "show", f"{c}:plugin.py").count("REPEATS = 51") for c in hashes]
    assert repeats == [0, 0, 1, 1] and repo.hidden == hashes[2]
    output = tmp_path / "run.csv"
    subprocess.run([sys.executable, "-I", str(repo.path / "run_case.py"), str(output)], check=True)
    from fi_attn_bench.history.analysis import parse_case_filter
    from fi_attn_bench.history.bisect_runs import case_time
    from fi_attn_bench.history.reading import runs_in_file

    runs = runs_in_file(output)
    case = bisect_trials.TORCH_CASE
    assert case_time(runs, parse_case_filter(case), case) > 0


def test_trials_on_cuda_without_a_gpu_are_one_line_exit_2(monkeypatch, capsys):
    bisect_trials = import_trials()
    monkeypatch.setattr(bisect_trials, "cuda_available", lambda: False)
    assert bisect_trials.main(["--device", "cuda", "--trials", "1"]) == 2
    assert one_error(capsys) == "error: --device cuda: torch sees no CUDA device\n"
