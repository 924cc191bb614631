"""The run histories that ``history_detection.py`` measures detection on: simulated from the
real H100 rows in tests/fixtures/real_csv/ with the noise of real sweeps, or real run-history
fixtures resampled, each with steps (and, if asked, outliers and clock drops) injected."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]

REAL_CSV = ROOT / "tests" / "fixtures" / "real_csv"
REAL_HISTORY = ROOT / "tests" / "fixtures" / "h100_history" / "runs.csv.gz"
RUNS, CASES = 60, 30
FIRST_STEP_RUN, REPORT_DELAY = 10, 3  # a step lands at run >= 10; found by run k + 3
STEP_SIZES = (0.02, 0.03, 0.05)
LARGE_CASE_MS = 0.05
CLOCK_DROP = 0.95  # a one-run throttle: every clock 5 % lower, the work unchanged


@dataclass(frozen=True)
class NoiseModel:
    """Noise of one history, per run and per case (log scale, so 0.005 is 0.5 %)."""

    shared_drift_sd: float = 0.005  # consecutive H100 sweeps differ by 0.5-1.1 %
    clock_sd: float = 0.02  # run-to-run SM clock spread of a fully power-capped case
    case_noise_floor: float = 0.003
    case_noise_per_drift: float = 0.25  # share of the row's drift_pct not explained by clock
    tail_df: float = 4.0  # Student t: heavy tails
    short_case_noise: float = 0.005  # at 50 us, growing as 1/time below it (timer grain)
    outlier_every: int = 20
    outlier_range: tuple[float, float] = (0.05, 0.10)
    bimodal_share: float = 0.2
    bimodal_upper_p: float = 0.3
    bimodal_gap: tuple[float, float] = (0.005, 0.015)


@dataclass(frozen=True)
class RealCase:
    time_ms: float
    clock_MHz: float
    capped: float  # power-capped share, 0..1
    clock_exponent: float  # how much time follows the clock: 1 compute-bound, 0.3 memory-bound
    drift: float  # the row's drift_pct as a fraction


@dataclass
class History:
    time_ms: np.ndarray  # runs x cases
    clock_MHz: np.ndarray
    step_run: np.ndarray  # per case, -1 without a step
    step_size: np.ndarray
    outliers: list[tuple[int, int]]  # (run, case)
    large: np.ndarray  # case >= 50 us
    clock_drop_run: int = -1
    decode: np.ndarray | None = None  # real runs: the case is BatchDecode's
    noise: np.ndarray | None = None  # simulated: each case's run-to-run noise sd (log)


def real_cases() -> list[RealCase]:
    frames = [pd.read_csv(path) for path in sorted(REAL_CSV.glob("h100_*.csv"))]
    rows = pd.concat(frames)
    rows = rows[rows["status"] == "ok"]
    compute = rows["pct_peak_tflops"] / (rows["pct_peak_tflops"] + rows["pct_peak_bw"])
    return [
        RealCase(t, c, p / 100, 0.3 + 0.7 * s, d / 100)
        for t, c, p, s, d in zip(
            rows["time_ms"],
            rows["sm_clock_mean_MHz"],
            rows["power_capped_pct"],
            compute,
            rows["drift_pct"],
            strict=True,
        )
    ]


@dataclass(frozen=True)
class DriftEpisodes:
    """Run-wide drift episodes: from a run (each run with probability ``every`` ^ -1, outside
    another episode) every case is ``size`` slower or faster for 1 to ``longest`` runs."""

    every: float = 8.0
    size: float = 0.01
    longest: int = 3


def drift_episodes(rng, runs: int, episodes: DriftEpisodes) -> tuple[np.ndarray, list[int]]:
    """(per run, the episodes' log factor; the first run of each episode)."""
    level = np.zeros(runs)
    starts = []
    run = 0
    while run < runs:
        if rng.random() < 1 / episodes.every:
            length = int(rng.integers(1, episodes.longest + 1))
            level[run : run + length] = np.log1p(episodes.size * rng.choice((-1.0, 1.0)))
            starts.append(run)
            run += length + 1
        else:
            run += 1
    return level, starts


def simulate(
    rng,
    pool: list[RealCase],
    model: NoiseModel,
    steps: bool,
    clock_drop: bool,
    step_share: float = 0.5,
    episodes: DriftEpisodes | None = None,
) -> History:
    """One simulated history; ``step_share`` of the cases step (with ``episodes``, half of
    them at the first run of a drift episode, so a case's step and the machine's drift meet)."""
    cases = [pool[i] for i in rng.integers(len(pool), size=CASES)]
    base = np.array([c.time_ms for c in cases])
    clock0 = np.array([c.clock_MHz for c in cases])
    capped = np.array([max(c.capped, 0.05) for c in cases])
    exponent = np.array([c.clock_exponent for c in cases])
    sd = (
        model.case_noise_floor
        + model.case_noise_per_drift * np.array([c.drift for c in cases]) / 1.96
    )
    sd = sd + model.short_case_noise * np.clip(LARGE_CASE_MS / base - 1, 0, 4)
    run_clock = rng.normal(0, model.clock_sd, size=(RUNS, 1)) * capped
    log_clock = np.log(clock0) + np.minimum(
        run_clock + rng.normal(0, 0.002, (RUNS, CASES)) * capped, np.log(1980 / clock0)
    )
    drop_run = -1
    if clock_drop:
        drop_run = int(rng.integers(FIRST_STEP_RUN, RUNS - REPORT_DELAY))
        log_clock[drop_run] += np.log(CLOCK_DROP)
    log_time = np.log(base) - exponent * (log_clock - np.log(clock0))
    log_time += rng.normal(0, model.shared_drift_sd, size=(RUNS, 1))
    log_time += (
        rng.standard_t(model.tail_df, size=(RUNS, CASES))
        * sd
        / np.sqrt(model.tail_df / (model.tail_df - 2))
    )
    bimodal = rng.random(CASES) < model.bimodal_share
    gap = rng.uniform(*model.bimodal_gap, size=CASES)
    log_time += (rng.random((RUNS, CASES)) < model.bimodal_upper_p) * (bimodal * gap)
    outliers = []
    for run, case, factor in outlier_events(rng, RUNS, CASES, model):
        log_time[run, case] += np.log(factor)
        outliers.append((run, case))
    step_run = np.full(CASES, -1)
    step_size = np.zeros(CASES)
    episode_starts: list[int] = []
    if episodes is not None:
        level, episode_starts = drift_episodes(rng, RUNS, episodes)
        log_time += level[:, None]
    if steps:
        stepped = rng.permutation(CASES)[: int(round(CASES * step_share))]
        step_run[stepped] = rng.integers(FIRST_STEP_RUN, RUNS - REPORT_DELAY, size=len(stepped))
        in_episodes = [run for run in episode_starts if FIRST_STEP_RUN <= run < RUNS - REPORT_DELAY]
        if in_episodes:
            half = stepped[: len(stepped) // 2]
            step_run[half] = rng.choice(in_episodes, size=len(half))
        step_size[stepped] = rng.choice(STEP_SIZES, size=len(stepped))
        for case in stepped:
            log_time[step_run[case] :, case] += np.log1p(step_size[case])
    return History(
        np.exp(log_time),
        np.exp(log_clock),
        step_run,
        step_size,
        outliers,
        base >= LARGE_CASE_MS,
        drop_run,
        noise=sd,
    )


def outlier_events(rng, runs: int, cases: int, model: NoiseModel) -> list[tuple[int, int, float]]:
    """In about one run of ``model.outlier_every``, one case slower by the outlier range (a
    throttled run): (run, case, time factor)."""
    events = []
    for run in np.flatnonzero(rng.random(runs) < 1 / model.outlier_every):
        case = int(rng.integers(cases))
        events.append((int(run), case, 1 + float(rng.uniform(*model.outlier_range))))
    return events


@dataclass(frozen=True)
class RealRuns:
    """A real run-history fixture (or the cases of it a prefix picks) as runs x cases."""

    time_ms: np.ndarray
    clock_MHz: np.ndarray
    decode: np.ndarray  # per case: BatchDecode's (memory-bound), else ragged prefill


@dataclass(frozen=True)
class RealSource:
    """A fixture and, when not empty, the case-label prefix that picks its cases."""

    path: Path = REAL_HISTORY
    prefix: str = ""

    @classmethod
    def parse(cls, text: str) -> RealSource:
        """``PATH`` or ``PATH:PREFIX`` (the cases whose label starts with PREFIX)."""
        path, _, prefix = text.rpartition(":")
        return cls(Path(text)) if not path or Path(text).is_file() else cls(Path(path), prefix)


def real_runs(source: Path | RealSource = REAL_HISTORY) -> RealRuns:
    source = source if isinstance(source, RealSource) else RealSource(Path(source))
    frame = pd.read_csv(source.path)
    frame = frame[frame["case"].str.startswith(source.prefix)]
    time_ms = frame.pivot(index="run", columns="case", values="time_ms")
    clock = frame.pivot(index="run", columns="case", values="sm_clock_mean_MHz")
    decode = time_ms.columns.str.startswith("BatchDecode")
    return RealRuns(time_ms.to_numpy(), clock[time_ms.columns].to_numpy(), np.asarray(decode))


def real_history(
    rng,
    sources: Sequence[RealRuns],
    shuffled: bool,
    length: int | None = None,
    events: bool = False,
    clock_drop: bool = False,
) -> History:
    """The real runs (in a random order when ``shuffled``) with a 2, 3 or 5 % slowdown from
    a random run on in half the cases; the clock stays as measured (the work changed).
    Several ``sources``: run i of the history joins run order_s[i] of each, side by side.
    ``length`` longer than a fixture: more random orders of its runs follow (default: the
    longest fixture's).  ``events``: the simulation's one-case outliers too and, with
    ``clock_drop``, one run where every clock reads 5 % lower and time rises by the case's
    exponent (decode 0.3, prefill 1)."""
    length = length or max(len(source.time_ms) for source in sources)
    orders = [run_order(rng, len(source.time_ms), shuffled, length) for source in sources]
    picked = list(zip(sources, orders, strict=True))
    times = np.hstack([source.time_ms[order] for source, order in picked])
    clock = np.hstack([source.clock_MHz[order] for source, order in picked])
    decode = np.concatenate([source.decode for source in sources])
    runs, cases = times.shape
    step_run = np.full(cases, -1)
    step_size = np.zeros(cases)
    stepped = rng.permutation(cases)[: cases // 2]
    step_run[stepped] = rng.integers(FIRST_STEP_RUN, runs - REPORT_DELAY, size=len(stepped))
    step_size[stepped] = rng.choice(STEP_SIZES, size=len(stepped))
    for case in stepped:
        times[step_run[case] :, case] *= 1 + step_size[case]
    outliers, drop_run = [], -1
    if events:
        for run, case, factor in outlier_events(rng, runs, cases, NoiseModel()):
            times[run, case] *= factor
            outliers.append((run, case))
        if clock_drop:
            drop_run = int(rng.integers(FIRST_STEP_RUN, runs - REPORT_DELAY))
            clock[drop_run] *= CLOCK_DROP
            times[drop_run] *= CLOCK_DROP ** -np.where(decode, 0.3, 1.0)
    large = np.concatenate(
        [np.nanmedian(source.time_ms, axis=0) >= LARGE_CASE_MS for source in sources]
    )
    return History(times, clock, step_run, step_size, outliers, large, drop_run, decode=decode)


def run_order(rng, runs: int, shuffled: bool, length: int) -> np.ndarray:
    """``length`` run positions: the runs in order (or shuffled), then random orders of them,
    never one run twice in a row; each run keeps all its cases, so its run-wide drift too."""
    order = list(rng.permutation(runs) if shuffled else range(runs))
    while len(order) < length:
        block = rng.permutation(runs)
        if block[0] == order[-1]:
            block = np.roll(block, 1)
        order.extend(block.tolist())
    return np.asarray(order[:length])


def save_real_history(runs_dir: Path, path: Path = REAL_HISTORY) -> str:
    """The fixture: every ok result of the runs under ``runs_dir``, one row per run and case."""
    import tempfile

    from fi_attn_bench.history.analysis import case_label
    from fi_attn_bench.history.command_line import main as history_main
    from fi_attn_bench.results.run_store import RunStore

    with tempfile.TemporaryDirectory() as scratch:
        store = Path(scratch) / "runs.sqlite"
        runs = sorted(str(run) for run in runs_dir.iterdir() if run.is_dir())
        if history_main(["add", *runs, "--store", str(store), "--branch", "main"]) != 0:
            raise SystemExit(f"could not read the runs in {runs_dir}")
        with RunStore.open(store, create=False) as opened:
            history = opened.history()
    frame = pd.DataFrame(
        {
            "run": history.run_index,
            "run_id": [history.runs[i].run_id for i in history.run_index],
            "case": [case_label(history.cases[i]) for i in history.case_index],
            "time_ms": history.time_ms,
            "sm_clock_mean_MHz": history.clock_MHz,
            "power_capped_pct": history.power_capped_pct,
        }
    ).sort_values(["run", "case"])
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False, float_format="%.9g")
    return f"{path}: {frame['run'].nunique()} runs x {frame['case'].nunique()} cases"
