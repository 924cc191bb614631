"""Detection quality of ``fi-attn-history detect``, measured online on resampled H100 runs.

Histories of RUNS runs x CASES cases are built from the real H100 rows in
tests/fixtures/real_csv/ (each case keeps its real time, clock, power-capped share,
compute/memory balance and block drift), with the noise of real sweeps added:
a run-wide drift shared by all cases, a power-limit clock that moves per run (time
follows it by the case's clock exponent), heavy-tailed per-case noise, bimodal cases,
and in one run of 20 one case 5-10 % slow.  Half the cases get a 2, 3 or 5 % step at
a random run.  Runs are added one at a time; a step is found when a change point
within one run of it is reported by the time the third run after it is added.

    python benchmarks/history_detection.py [--histories 400] [--seed 1] [--workers 16]
    python benchmarks/history_detection.py --otava        # otava-test-data's series
    python benchmarks/history_detection.py --engines      # ruptures vs e-divisive
    python benchmarks/history_detection.py --real [--histories 200]
    python benchmarks/history_detection.py --real --history PATH --real-runs 60 --events

--real measures on real noise instead: the 48 runs of tests/fixtures/h100_history/ (the same
sweep in 48 fresh processes on an H100, ``python -m validation history-series``), in their own
order for the first history and shuffled for the others, with the same steps injected into
half the cases; ``--save-real RUNS_DIR`` rebuilds that fixture from such runs, and ``--history
PATH`` names another fixture for both (tests/fixtures/h100_history_default_budget/: 20 runs at
the default timing budget).  ``--real-runs 60`` resamples the runs into longer histories, and
``--events`` adds the simulation's one-case outliers and one-run clock drops to them.  Several
``--history`` fixtures are joined side by side, each resampled on its own, and ``PATH:PREFIX``
keeps a fixture's cases whose label starts with PREFIX:

    python benchmarks/history_detection.py --real --real-runs 60 --events --history \
        tests/fixtures/h100_history/runs.csv.gz:BatchDecode \
        tests/fixtures/h100_history_default_budget/runs.csv.gz
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.history_sources import (  # noqa: E402
    REAL_CSV,
    REAL_HISTORY,
    REPORT_DELAY,
    STEP_SIZES,
    DriftEpisodes,
    History,
    NoiseModel,
    RealRuns,
    RealSource,
    real_cases,
    real_history,
    real_runs,
    save_real_history,
    simulate,
)
from fi_attn_bench.history.detect import (  # noqa: E402
    DetectionSettings,
    detect,
    kernel_cpd_breakpoints,
)

FIRST_CHECK_RUNS = 6  # the first online check sees this many runs


Reports = list[
    list[tuple[int, int]]
]  # per case: (run of the change, runs seen when first reported)


def online_series_detector(settings: DetectionSettings, engine=kernel_cpd_breakpoints):
    def reports(history: History) -> Reports:
        runs, cases = history.time_ms.shape
        found: list[dict[int, int]] = [{} for _ in range(cases)]
        for seen in range(FIRST_CHECK_RUNS, runs + 1):
            result = detect(history.time_ms[:seen], history.clock_MHz[:seen], settings, engine)
            for point in result.change_points:
                if point.series >= 0:
                    found[point.series].setdefault(point.run, seen)
        return [sorted(case.items()) for case in found]

    return reports


def threshold_gate(threshold: float):
    """A pairwise gate: the run is flagged when a case moved more than ``threshold`` since the previous run."""

    def reports(history: History) -> Reports:
        ratio = history.time_ms[1:] / history.time_ms[:-1] - 1
        flagged = np.abs(ratio) > threshold
        return [
            [(run + 1, run + 2) for run in np.flatnonzero(flagged[:, case])]
            for case in range(history.time_ms.shape[1])
        ]

    return reports


@dataclass
class Tally:
    found: dict = field(default_factory=lambda: {s: [0, 0] for s in STEP_SIZES})
    false_points: int = 0
    clean_series: int = 0
    drop_quiet: list = field(default_factory=lambda: [0, 0])
    outlier_quiet: list = field(default_factory=lambda: [0, 0])

    def add(self, history: History, reports: Reports, cases: np.ndarray) -> None:
        """Count the cases where ``cases`` (a mask) is true."""
        for case, points in enumerate(reports):
            if not cases[case]:
                continue
            step = history.step_run[case]
            if step >= 0:
                hit = any(
                    abs(run - step) <= 1 and seen <= step + REPORT_DELAY + 1 for run, seen in points
                )
                tally = self.found[float(history.step_size[case])]
                tally[0] += hit
                tally[1] += 1
                continue
            self.clean_series += 1
            self.false_points += len(points)
            if history.clock_drop_run >= 0:
                self.drop_quiet[0] += not any(
                    abs(run - history.clock_drop_run) <= 1 for run, _ in points
                )
                self.drop_quiet[1] += 1
            for run, outlier_case in history.outliers:
                if outlier_case == case:
                    self.outlier_quiet[0] += not any(abs(r - run) <= 1 for r, _ in points)
                    self.outlier_quiet[1] += 1

    def series(self) -> int:
        return self.clean_series + sum(total for _, total in self.found.values())

    def row(self) -> dict:
        row = {f"{int(s * 100)} % step found": pct(*self.found[s]) for s in STEP_SIZES}
        row["false points / 200 series"] = (
            f"{200 * self.false_points / max(self.clean_series, 1):.2f}"
        )
        if self.drop_quiet[1]:  # real runs get no injected clock drop or outlier
            row["5 % clock drop not reported"] = pct(*self.drop_quiet)
        if self.outlier_quiet[1]:
            row["one-case outlier not reported"] = pct(*self.outlier_quiet)
        return row


def markdown_table(frame: pd.DataFrame, index: bool = True) -> str:
    """A pipe table (pandas' to_markdown needs tabulate, one dependency more)."""
    frame = frame.reset_index() if index else frame
    header = [str(c) if c != "index" else "" for c in frame.columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += [
        "| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)
    ]
    return "\n".join(lines)


def pct(hits: int, total: int) -> str:
    return f"{100 * hits / total:.2f} % ({hits}/{total})" if total else "n/a"


def e_divisive_engine(pvalue: float, permutations: int = 100):
    """MongoDB's e-divisive (signal-processing-algorithms) in the place of KernelCPD; it has
    no minimum segment, so change points leaving a shorter segment are dropped."""
    from signal_processing_algorithms.energy_statistics.energy_statistics import e_divisive

    def breakpoints(signal: np.ndarray, penalty: float, min_size: int) -> list[int]:
        found = sorted(e_divisive(signal[:, 0], pvalue=pvalue, permutations=permutations))
        bounds = [0, *found, len(signal)]
        return [
            start
            for before, start, after in zip(bounds, bounds[1:], bounds[2:], strict=False)
            if start - before >= min_size and after - start >= min_size
        ]

    return breakpoints


def methods(engine_name: str = "kernelcpd") -> dict[str, Callable]:
    if engine_name == "edivisive":
        engine = e_divisive_engine(pvalue=0.01)
        return {
            "ruptures KernelCPD, clock-normalized": online_series_detector(DetectionSettings()),
            "e-divisive, clock-normalized": online_series_detector(DetectionSettings(), engine),
        }
    return {
        "series, clock-normalized": online_series_detector(DetectionSettings()),
        "series, drift from whole-series medians": online_series_detector(
            DetectionSettings(drift_passes=0)
        ),
        "series, raw": online_series_detector(
            DetectionSettings(normalize_clock=False, remove_shared_drift=False)
        ),
        "gate vs previous run, 1.5 %": threshold_gate(0.015),
        "gate vs previous run, 3 %": threshold_gate(0.03),
    }


@dataclass(frozen=True)
class Job:
    """One history (a pair, simulated) to build and detect on, in a worker process."""

    seed: int
    index: int  # seeds the history with ``seed``, so results do not depend on the workers
    engine_name: str
    real: tuple[RealRuns, ...] = ()  # the real-run fixtures, read once; none: simulated
    length: int | None = None  # --real-runs
    events: bool = False  # --events
    drift_steps: bool = False  # --drift-steps


def history_pair_reports(job: Job) -> list[tuple[History, dict[str, Reports]]]:
    """One step history and one history without steps (every other one with a clock drop),
    each history seeded by (seed, index) so results do not depend on the worker count."""
    rng = np.random.default_rng([job.seed, job.index])
    pool, model, chosen = real_cases(), NoiseModel(), methods(job.engine_name)
    if job.drift_steps:
        chosen = {name: chosen[name] for name in list(chosen)[:1]}  # the detector as shipped
        episodes = DriftEpisodes()
        pair = (
            simulate(rng, pool, model, True, False, step_share=0.4, episodes=episodes),
            simulate(rng, pool, model, True, job.index % 2 == 0, 0.4, episodes),
        )
        return [(history, {name: of(history) for name, of in chosen.items()}) for history in pair]
    pair = (
        simulate(rng, pool, model, steps=True, clock_drop=False),
        simulate(rng, pool, model, steps=False, clock_drop=job.index % 2 == 0),
    )
    return [(history, {name: of(history) for name, of in chosen.items()}) for history in pair]


def real_history_reports(job: Job) -> list[tuple[History, dict[str, Reports]]]:
    """One history of the real runs (the first in their own order), seeded by (seed, index)."""
    rng = np.random.default_rng([job.seed, job.index])
    history = real_history(
        rng,
        job.real,
        shuffled=job.index > 0,
        length=job.length,
        events=job.events,
        clock_drop=job.index % 2 == 0,
    )
    return [(history, {name: of(history) for name, of in methods(job.engine_name).items()})]


def quality_tables(
    histories: int,
    seed: int,
    engine_name: str,
    workers: int,
    real: tuple[RealRuns, ...] = (),
    length: int | None = None,
    events: bool = False,
    drift_steps: bool = False,
) -> str:
    import multiprocessing

    jobs = [
        Job(seed, index, engine_name, real, length, events, drift_steps)
        for index in range(histories)
    ]
    reports_of = real_history_reports if real else history_pair_reports
    if workers > 1:
        with multiprocessing.Pool(workers) as workers_pool:
            results = workers_pool.map(reports_of, jobs, chunksize=1)
    else:
        results = [reports_of(job) for job in jobs]
    names = list(methods(engine_name))[: 1 if drift_steps else None]
    groups = case_groups(bool(real))
    tallies = {(group, name): Tally() for group in groups for name in names}
    for pair in results:
        for history, reports in pair:
            for (group, name), tally in tallies.items():
                tally.add(history, reports[name], groups[group](history))
    tables = []
    for group in groups:
        if tallies[group, names[0]].series() == 0:  # a fixture of one API: no table for the other
            continue
        frame = pd.DataFrame({name: tallies[group, name].row() for name in names})
        tables.append(f"{group}:\n\n" + markdown_table(frame))
    return "\n\n".join(tables)


def case_groups(real: bool) -> dict[str, Callable[[History], np.ndarray]]:
    """The tables' case groups, each a mask of a history's cases."""
    groups = {
        "Cases >= 50 us": lambda history: history.large,
        "Cases < 50 us": lambda history: ~history.large,
    }
    if not real:  # the detection targets are quoted for these
        groups["Cases with noise <= 0.5 %"] = lambda history: history.noise <= 0.005
    if real:  # the real runs hold two APIs: memory-bound decode, power-capped ragged prefill
        groups["Decode cases >= 50 us"] = lambda history: history.large & history.decode
        groups["Ragged prefill cases >= 50 us"] = lambda history: history.large & ~history.decode
    return groups


def otava_scores(tolerance: int = 5) -> str:
    """Precision and recall of the default detector (offline, whole series) on
    otava-test-data's suite, per generator and in total."""
    try:
        from otava_test_data.generators.combiner import CombinationGenerator
    except ImportError as exc:
        return f"otava-test-data is not installed: {exc}"
    suite = CombinationGenerator(lengths=[50, 500], seed=42).generate_with_noise_variants()
    totals: dict[str, list[int]] = {}
    for ts in suite:
        values = np.asarray(ts.data, dtype=float)
        if values.min() <= 0:  # times are positive; shift only where the series is not
            values = values - values.min() + 1.0
        result = detect(values.reshape(-1, 1), np.full((len(values), 1), np.nan))
        found = [point.run for point in result.change_points]
        truth = [cp.index for cp in ts.change_points]
        near = [any(abs(t - f) <= tolerance for t in truth) for f in found]
        row = totals.setdefault(ts.generator_name.split("+")[0], [0, 0, 0, 0, 0])
        row[0] += 1
        row[1] += len(truth)
        row[2] += len(found)
        row[3] += sum(near)
        row[4] += sum(any(abs(t - f) <= tolerance for f in found) for t in truth)
    totals["all"] = [sum(column) for column in zip(*totals.values(), strict=True)]
    rows = [
        {
            "generator": name,
            "series": n,
            "true points": truth,
            "reported": found,
            "precision": f"{good / found:.3f}" if found else "n/a",
            "recall": f"{hit / truth:.3f}" if truth else "n/a",
        }
        for name, (n, truth, found, good, hit) in totals.items()
    ]
    note = f"\n\n(a report within +/- {tolerance} points of a true one counts, as in otava-test-data's viewer)"
    return markdown_table(pd.DataFrame(rows), index=False) + note


def speed_rows(cases: int) -> pd.DataFrame:
    """``cases`` distinct real-looking rows: the real decode rows with new batch sizes."""
    base = pd.read_csv(REAL_CSV / "h100_decode_default.csv", dtype=str, keep_default_na=False)
    copies = []
    for index in range(-(-cases // len(base))):
        copy = base.copy()
        copy["batch_size"] = [str(int(b) + 1000 * index) for b in base["batch_size"]]
        copies.append(copy)
    return pd.concat(copies).head(cases)


def write_speed_run(rows: pd.DataFrame, path: Path, run: int, rng) -> None:
    frame = rows.copy()
    times = frame["time_ms"].astype(float) * np.exp(rng.normal(0, 0.004, len(frame)))
    frame["time_ms"] = [repr(float(t)) for t in times]
    frame["timestamp_utc"] = (
        f"2026-{1 + run // 600:02d}-{1 + run // 24 % 25:02d}T{run % 24:02d}:00:00Z"
    )
    frame["git_commit"] = f"{run:040x}"
    frame["run_id"] = f"speed-{run}"
    frame.to_csv(path, index=False)


def timed(command: list[str]) -> float:
    import subprocess

    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - started


def speed(workdir: Path) -> str:
    """Wall times of the CLI (a fresh process each, imports included) on this machine."""
    import shutil

    from fi_attn_bench.history.reading import runs_in_file
    from fi_attn_bench.results.run_store import RunStore

    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rng = np.random.default_rng(0)
    cli = [sys.executable, "-m", "fi_attn_bench.history"]
    small = workdir / "one.sqlite"
    write_speed_run(speed_rows(200), workdir / "run200.csv", 0, rng)
    add_wall = timed([*cli, "add", str(workdir / "run200.csv"), "--store", str(small)])
    write_speed_run(speed_rows(200), workdir / "run200b.csv", 1, rng)
    started = time.perf_counter()
    with RunStore.open(small, create=False) as store:
        store.add_run(runs_in_file(workdir / "run200b.csv")[0], "main")
    add_in_process = time.perf_counter() - started
    big = workdir / "big.sqlite"
    rows = speed_rows(100)
    with RunStore.open(big, create=True) as store:
        for run in range(1000):
            path = workdir / "run.csv"
            write_speed_run(rows, path, run, rng)
            store.add_run(runs_in_file(path)[0], "main")
    detect_wall = timed([*cli, "detect", "--store", str(big)])
    html = workdir / "report.html"
    report_wall = timed(
        [*cli, "report", "--store", str(big), "--html", str(html), "--md", str(workdir / "r.md")]
    )
    return "\n".join(
        [
            f"add, 200-case CSV, CLI wall (new process): {add_wall:.2f} s",
            f"add, 200-case CSV, in process (read + store): {add_in_process:.3f} s",
            f"detect, 1000 runs x 100 cases, CLI wall: {detect_wall:.2f} s",
            f"report --html --md, 1000 runs x 100 cases, CLI wall: {report_wall:.2f} s",
            f"HTML size: {html.stat().st_size / 1e6:.2f} MB",
        ]
    )


def read_real_source(parser: argparse.ArgumentParser, source: RealSource) -> RealRuns:
    """The fixture's runs, or one argparse error (exit 2) before any work."""
    if not source.path.is_file():
        parser.error(f"--history {source.path}: no such file")
    runs = real_runs(source)
    if not runs.time_ms.shape[1]:
        parser.error(f"--history {source.path}: no case label starts with {source.prefix!r}")
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--otava", action="store_true")
    parser.add_argument("--speed", metavar="WORKDIR", help="time add/detect/report instead")
    parser.add_argument(
        "--engine",
        choices=("kernelcpd", "edivisive"),
        default="kernelcpd",
        help="edivisive: signal-processing-algorithms (pins numpy<2: use its own venv)",
    )
    parser.add_argument("--workers", type=int, default=1, help="processes (histories in parallel)")
    parser.add_argument("--real", action="store_true", help="real H100 runs, steps injected")
    parser.add_argument("--save-real", metavar="RUNS_DIR", type=Path, help="rebuild that fixture")
    parser.add_argument(
        "--history",
        nargs="+",
        default=[str(REAL_HISTORY)],
        metavar="PATH[:PREFIX]",
        help="the real-run fixture that --real reads and --save-real writes; --real: several "
        "are joined run by run, and :PREFIX keeps the cases whose label starts with it",
    )
    parser.add_argument(
        "--real-runs",
        type=int,
        help="--real: histories of this many runs, resampled from the fixtures' (default: the longest's)",
    )
    parser.add_argument(
        "--events",
        action="store_true",
        help="--real: inject the simulation's one-case outliers, and a one-run 5 %% clock drop "
        "in every other history",
    )
    parser.add_argument(
        "--drift-steps",
        action="store_true",
        help="simulated: 40 %% of the cases step, half of them as a run-wide drift episode "
        "(+-1 %% for 1-3 runs, about one run in 8) starts; the shipped detector only",
    )
    args = parser.parse_args(argv)
    sources = tuple(RealSource.parse(text) for text in args.history)
    if args.save_real and (len(sources) > 1 or sources[0].prefix):
        parser.error("--save-real writes one fixture: --history PATH")
    real = tuple(read_real_source(parser, source) for source in sources) if args.real else ()
    if args.real_runs is not None and args.real_runs < 1:
        parser.error("--real-runs must be positive")
    started = time.perf_counter()
    if args.save_real:
        print(save_real_history(args.save_real, sources[0].path))
    elif args.speed:
        print(speed(Path(args.speed)))
    elif args.otava:
        print(otava_scores())
    else:
        tables = quality_tables(
            args.histories,
            args.seed,
            args.engine,
            args.workers,
            real,
            args.real_runs,
            args.events,
            args.drift_steps,
        )
        print(tables)
    print(f"\n({time.perf_counter() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
