"""A run history on a real GPU: the same sweep again and again, each in a fresh process, as a
CI job would run it, so the change-point detector can be measured on real noise.

    python -m validation history-series OUT_DIR [--for-seconds 480] [--runs 200]
        [--sweep-args '--scripts bench_batch_decode bench_batch_prefill_ragged ...']
    python -m validation history-series OUT_DIR --gate 5      # no GPU: the A/A gate table
    python -m validation history-series OUT_DIR --noise       # no GPU: noise per case

Each run is ``bench_all.py SWEEP_ARGS --output-dir OUT_DIR/runs/<UTC time>``; no new run
starts once ``--for-seconds`` have passed, so a device call cut at its limit keeps every whole
run.  ``--sweep-args`` given several times alternates the sweeps, run after run, into
OUT_DIR/runs-1, runs-2, ... (the same machine and minutes for each, to compare them).
``benchmarks/history_detection.py --save-real OUT_DIR/runs`` makes them the fixture its
``--real`` reads (steps are injected there; the runs themselves are step-free).  Exit 0 when
every run exited 0, else 1; 2 bad arguments, or sweep options the first run refused.  The
tables below exit 2 when there are too few runs or fi-attn-history refuses one (one line
naming why), and ``--gate`` exits 1 when the summarizer refuses a pair.

``--noise`` runs nothing on the GPU: per case of 50 us or more, the run-to-run noise of each
runs folder (the estimator of ``fi-attn-history detect`` and ``--noise-from``) and how many
runs were over 3 % slower than the case's median, side by side in OUT_DIR/noise.md.

``--gate PCT`` runs nothing on the GPU: it compares each run of OUT_DIR/runs with the next
(A/A pairs) by ``summarize_results.py --fail-on-regression PCT``, once alone and once with
``--noise-from`` a history store of every other run (the pair left out), and writes
OUT_DIR/gate.md: how many pairs and cases failed each way.  ``--baseline-runs K``
``--candidate-runs C``: each baseline is the per-case median of K consecutive runs, and its
candidate the median of the C runs after them (``fi-attn-history baseline --median-of``),
one pair per start run; the table goes to OUT_DIR/gate-KxC.md.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from validation.running import python, run_logged, tail

LARGE_CASE_MS = 0.05  # the detection tables' split: smaller cases are timer-grain noisy

# Memory-bound decode and power-capped prefill at the default timing budget: a fifth of it
# tripled prefill's run-to-run noise on an H100 (docs/VALIDATION.md, "Timing budget").
SWEEP_ARGS = "--scripts bench_batch_decode bench_batch_prefill_ragged --preset default --no-check"


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m validation history-series", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("out", type=Path, help="folder for runs/ and the logs")
    parser.add_argument("--for-seconds", type=float, default=480.0)
    parser.add_argument("--runs", type=int, default=200, help="at most this many runs")
    parser.add_argument("--run-timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--sweep-args", action="append", help=f"default: {SWEEP_ARGS!r}")
    parser.add_argument("--noise", action="store_true", help="the noise table instead")
    parser.add_argument("--gate", type=float, metavar="PCT", help="the A/A gate table instead")
    parser.add_argument("--baseline-runs", type=int, default=1, metavar="K", help="--gate")
    parser.add_argument("--candidate-runs", type=int, default=1, metavar="C", help="--gate")
    arguments = parser.parse_args(argv)
    counts = (arguments.runs, arguments.baseline_runs, arguments.candidate_runs)
    if min(counts) < 1 or arguments.for_seconds <= 0:
        parser.error("--runs, --for-seconds, --baseline-runs and --candidate-runs must be positive")
    arguments.sweep_args = arguments.sweep_args or [SWEEP_ARGS]
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_args(argv or [])
    if arguments.gate is not None:
        sides = (arguments.baseline_runs, arguments.candidate_runs)
        return gate_table(arguments.out, arguments.gate, sides)
    if arguments.noise:
        return noise_table(arguments.out)
    sweeps = arguments.sweep_args
    folders = [arguments.out / "runs"] if len(sweeps) == 1 else [
        arguments.out / f"runs-{number}" for number in range(1, len(sweeps) + 1)
    ]  # fmt: skip
    deadline = time.monotonic() + arguments.for_seconds
    failed = 0
    for index in range(arguments.runs):
        for sweep, folder in zip(sweeps, folders, strict=True):
            if time.monotonic() >= deadline:
                return 1 if failed else 0
            name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{index:03d}"  # sorts by time
            argv = python("bench_all.py", *shlex.split(sweep), "--output-dir", str(folder / name))
            log = arguments.out / "logs" / f"{folder.name}-{name}.log"
            done = run_logged(argv, log, arguments.run_timeout)
            failed += done.exit_code != 0
            print(f"{folder.name} {index + 1} ({name}): exit {done.exit_code}, {done.wall_s:.1f} s")
            if done.exit_code:
                print(tail(log, 5))
            sys.stdout.flush()
            if done.exit_code == 2:  # the sweep's options were refused: every run would be
                return 2
    return 1 if failed else 0


def noise_table(out: Path) -> int:
    """Per case of 50 us or more, each runs folder's run-to-run noise; OUT/noise.md."""
    folders = sorted(path for path in out.glob("runs*") if path.is_dir())
    if not folders:
        print(f"--noise: no runs folder in {out}")
        return 2
    try:
        noise = {folder.name: _case_noise(folder) for folder in folders}
    except UnreadableRuns as exc:
        print(f"--noise: {exc}")
        return 2
    first = noise[folders[0].name]
    cases = [case for case, entry in first.items() if entry.median_ms >= LARGE_CASE_MS]
    names = list(noise)
    lines = [
        f"Run-to-run noise per run (%), cases >= {LARGE_CASE_MS * 1000:g} us, of {out}; "
        "in brackets, the runs over 3 % slower than the case's median",
        "",
        f"| case | ms | {' | '.join(f'{name} ({_runs(noise[name])} runs)' for name in names)} |",
        f"|---|---:|{'---:|' * len(names)}",
    ]
    for case in cases:
        cells = [_noise_cell(noise[name].get(case)) for name in names]
        lines.append(f"| {case} | {first[case].median_ms:.4g} | {' | '.join(cells)} |")
    medians = [
        f"{np.median([noise[name][case].noise_pct for case in cases if case in noise[name]]):.2f}"
        for name in names
    ]
    lines.append(f"| median over cases | | {' | '.join(medians)} |")
    (out / "noise.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


@dataclass(frozen=True)
class CaseNoise:
    """One case's runs in one folder."""

    median_ms: float
    noise_pct: float  # run-to-run noise per run (series_noise.noise_level)
    runs: int
    slow_runs: int  # over 3 % slower than the median


def _case_noise(folder: Path) -> dict[str, CaseNoise]:
    """Per case label, its noise over the folder's runs."""
    import tempfile

    from fi_attn_bench.history.analysis import case_label
    from fi_attn_bench.results.run_store import RunStore
    from fi_attn_bench.results.series_noise import noise_level

    runs = sorted(path for path in folder.iterdir() if path.is_dir())
    with tempfile.TemporaryDirectory() as scratch:
        with RunStore.open(_store(runs, Path(scratch) / "noise.sqlite"), create=False) as store:
            history = store.history()
    noise = {}
    for (_, index), log_ms in history.log_time_series().items():
        if len(log_ms) >= 3:
            slow = int((log_ms - np.median(log_ms) > np.log1p(0.03)).sum())
            median_ms = float(np.exp(np.median(log_ms)))
            level = 100 * noise_level(log_ms)
            noise[case_label(history.cases[index])] = CaseNoise(median_ms, level, len(log_ms), slow)
    return noise


def _runs(noise: dict[str, CaseNoise]) -> int:
    return max((entry.runs for entry in noise.values()), default=0)


def _noise_cell(entry: CaseNoise | None) -> str:
    return "" if entry is None else f"{entry.noise_pct:.2f} ({entry.slow_runs})"


class GateError(Exception):
    """An A/A comparison the summarizer refused (exit 2)."""


class UnreadableRuns(Exception):
    """fi-attn-history refused the runs (not a run, a broken CSV): exit 2."""


def gate_table(out: Path, gate_pct: float, sides: tuple[int, int] = (1, 1)) -> int:
    """The A/A gate over consecutive runs (or medians of them), without and with
    --noise-from; OUT/gate.md (gate-KxC.md for medians)."""
    folder = out / "runs"
    runs = sorted(path for path in folder.iterdir() if path.is_dir()) if folder.is_dir() else []
    width = sum(sides)
    pairs = [(runs[i : i + sides[0]], runs[i + sides[0] : i + width]) for i in range(len(runs))]
    pairs = [pair for pair in pairs if len(pair[1]) == sides[1]]
    if len(pairs) < 2:
        print(f"--gate: fewer than {width + 1} runs in {out / 'runs'}")
        return 2
    try:
        counts = _gate_counts(runs, pairs, gate_pct)
    except UnreadableRuns as exc:
        print(f"--gate: {exc}")
        return 2
    except GateError as exc:
        print(f"--gate: {exc}")
        return 1
    lines = [
        f"A/A pairs: {len(pairs)} (baseline {_side_name(sides[0])}, candidate "
        f"{_side_name(sides[1])} after it, of {out / 'runs'}), gate {gate_pct:g} %",
        "",
        "| gate | pairs failing | cases failing |",
        "|---|---:|---:|",
        *(f"| {way} | {failed} | {cases} |" for way, (failed, cases) in counts.items()),
    ]
    name = "gate.md" if sides == (1, 1) else f"gate-{sides[0]}x{sides[1]}.md"
    (out / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


def _side_name(count: int) -> str:
    return "a run" if count == 1 else f"the median of {count} runs"


def _gate_counts(runs: list[Path], pairs: list[tuple[list[Path], list[Path]]], gate_pct: float):
    """Per way of gating, [pairs failing, cases failing]."""
    import tempfile

    counts = {"alone": [0, 0], "--noise-from": [0, 0]}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        sides: dict[tuple[Path, ...], Path] = {}
        for index, (baseline, candidate) in enumerate(pairs):
            for block in (baseline, candidate):
                if tuple(block) not in sides:
                    sides[tuple(block)] = _side(block, work / f"side{len(sides)}")
            others = [run for run in runs if run not in (*baseline, *candidate)]
            store = _store(others, work / f"noise{index}.sqlite")
            for way, extra in (("alone", []), ("--noise-from", ["--noise-from", str(store)])):
                failed, cases = _gate(
                    sides[tuple(baseline)], sides[tuple(candidate)], gate_pct, extra, work
                )
                counts[way][0] += failed
                counts[way][1] += cases
    return counts


def _store(runs: list[Path], path: Path, branch: str = "main") -> Path:
    """A history store of these runs (fi-attn-history add)."""
    _history("add", *map(str, runs), "--store", str(path), "--branch", branch)
    return path


def _side(block: list[Path], folder: Path) -> Path:
    """One side of a pair: the run itself, or the per-case median of the block's runs."""
    if len(block) == 1:
        return block[0]
    store = _store(block, folder.with_suffix(".sqlite"), branch="side")
    median = ["--median-of", str(len(block)), "--store", str(store), "--out", str(folder)]
    _history("baseline", "--branch", "side", *median)
    return folder


def _history(*argv: str) -> None:
    """``fi-attn-history ARGV``; UnreadableRuns with its one-line error when it refuses."""
    import subprocess

    done = subprocess.run(
        python("-m", "fi_attn_bench.history", *argv), capture_output=True, text=True
    )
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines() or [f"exit {done.returncode}"]
        raise UnreadableRuns(f"fi-attn-history {argv[0]}: {said[-1]}")


def _gate(baseline: Path, candidate: Path, gate_pct: float, extra: list[str], work: Path):
    """(whether the gate failed, how many cases regressed) of one A/A pair."""
    import json
    import subprocess

    report = work / "r.json"
    command = python(
        "summarize_results.py", "--baseline", str(baseline), "--candidate", str(candidate),
        "--fail-on-regression", f"{gate_pct:g}", "--output", str(report.with_suffix(".md")),
        "--json", str(report), *extra,
    )  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # a comparison that did not happen is no A/A result
        said = (done.stdout or done.stderr).strip().splitlines() or [""]
        raise GateError(f"{baseline} against {candidate}: exit {done.returncode}: {said[0]}")
    matched = json.loads(report.read_text())["matched"]
    report.unlink()
    report.with_suffix(".md").unlink()
    return done.returncode == 1, sum(case["state"] == "regression" for case in matched)
