"""Measure the harness against issue 4's numbers on a real GPU and print a Markdown report.

What it measures (each with the command that reproduces it printed in the report):

* cost         -- wall time of the default sweep of all four scripts, and the GPU time
                  those sweeps spent in timed calls (sum over rows of samples x time);
* fidelity     -- for every default case of >= 20 us, the harness's time_ms against an
                  independent measurement of the same run(), written here without the
                  harness's timers: CUDA-graph replay (warm L2) or CUDA events with a
                  2 x L2 flush before each call (cold L2);
* repeatability-- coefficient of variation of time_ms over N invocations, cases >= 50 us;
* false alarms -- the summarizer's regression gate at 5 % between two sweeps of the
                  same code on the same GPU.

Usage on the GPU machine (FlashInfer installed):

    python benchmarks/h200_validate.py --sweeps 5 --out results_dir --report report.md
"""

from __future__ import annotations

import argparse
import csv
import importlib
import itertools
import math
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fi_attn_bench.results.schema import HARNESS_VERSION, UNRECORDED_HARNESS_VERSION, case_columns  # noqa: E402
from fi_attn_bench.timing.statistics import WIDE_SPREAD_NOTE_PCT  # noqa: E402

SCRIPTS = (
    "bench_batch_decode.py",
    "bench_batch_prefill_paged.py",
    "bench_batch_prefill_ragged.py",
    "bench_batch_mla.py",
)
FIDELITY_MIN_MS = 0.020
REPEAT_MIN_MS = 0.050
DRIFT_FLAG_PCT = 3.0  # a drift_pct to ask about: the flag the report checks against the CVs


@dataclass(frozen=True)
class SweepRun:
    script: str
    index: int
    csv_path: Path
    wall_s: float
    exit_code: int
    timed_s: float  # the harness's own "time inside timed runs" line
    phases: str  # and where its wall time went
    busy_s: float  # GPU time of the timed batches, L2 flushes included
    late_cases: int = -1  # cases noted for calls that started late (-1: not known)


def run_sweep(script: str, index: int, out_dir: Path, extra: list[str]) -> SweepRun:
    """One invocation of a script's default preset, as a user would run it."""
    csv_path = out_dir / f"sweep{index}" / f"{Path(script).stem}.csv"
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, str(ROOT / script), "--preset", "default", "--output", str(csv_path)]
    started = time.perf_counter()
    completed = subprocess.run([*command, *extra], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    csv_path.with_suffix(".log").write_text(completed.stdout + completed.stderr, encoding="utf-8")
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-4000:] + completed.stderr[-4000:])
    return _sweep_run(script, index, csv_path, wall, completed.returncode, completed.stdout)


def _sweep_run(script, index, csv_path, wall, code, stdout: str) -> SweepRun:
    """A SweepRun from one script's standard output (its last line says where time went)."""
    found = re.search(r"time inside timed runs ([0-9.]+) s", stdout)
    phases = re.search(r"by phase: (.*)", stdout)
    busy = re.search(r"GPU busy in timed batches ([0-9.]+) s", stdout)
    return SweepRun(
        script,
        index,
        csv_path,
        wall,
        code,
        float(found.group(1)) if found else math.nan,
        phases.group(1) if phases else "",
        float(busy.group(1)) if busy else math.nan,
        stdout.count("calls started late"),
    )


def run_sweep_in_one_process(scripts, index: int, out_dir: Path, extra) -> list[SweepRun]:
    """The scripts' default sweeps in one ``bench_all.py`` process.  Its wall time is booked
    on the first script (the cost table adds them up); each CSV becomes sweepN/<script>.csv."""
    folder = out_dir / f"sweep{index}"
    staging = folder / "bench_all"
    staging.mkdir(parents=True, exist_ok=True)
    stems = [Path(script).stem for script in scripts]
    command = [sys.executable, str(ROOT / "bench_all.py"), "--scripts", *stems]
    command += ["--preset", "default", "--output-dir", str(staging), *extra]
    started = time.perf_counter()
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - started
    (folder / "bench_all.log").write_text(completed.stdout + completed.stderr, encoding="utf-8")
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout[-4000:] + completed.stderr[-4000:])
    apis = [importlib.import_module(stem).SPEC.api for stem in stems]
    starts = [completed.stdout.find(f"{api}: ") for api in apis]
    runs = []
    for position, (script, api) in enumerate(zip(scripts, apis, strict=True)):
        end = starts[position + 1] if position + 1 < len(starts) else len(completed.stdout)
        section = completed.stdout[max(starts[position], 0) : end]
        csv_path = folder / f"{Path(script).stem}.csv"
        for made in staging.glob(f"{api}_*.csv"):
            made.replace(csv_path)
        runs.append(
            _sweep_run(script, index, csv_path, wall if position == 0 else 0.0,
                       completed.returncode, section)
        )  # fmt: skip
    return runs


def sweeps_from_log(log: Path, out_dir: Path, scripts) -> dict[str, list[SweepRun]]:
    """SweepRuns rebuilt from a run's "sweep N script: X s exit C" lines and its CSVs
    (the harness's own timed-time figure is not in that log: NaN)."""
    found: dict[str, list[SweepRun]] = {script: [] for script in scripts}
    pattern = re.compile(r"^sweep (\d+) (\S+): ([0-9.]+) s exit (-?\d+)$")
    for line in log.read_text(encoding="utf-8").splitlines():
        match = pattern.match(line)
        if match and match.group(2) in found:
            index, script = int(match.group(1)), match.group(2)
            csv_path = out_dir / f"sweep{index}" / f"{Path(script).stem}.csv"
            wall, code = float(match.group(3)), int(match.group(4))
            found[script].append(
                SweepRun(script, index, csv_path, wall, code, math.nan, "", math.nan)
            )
    return found


def _header_from_gpu(args) -> list[str]:
    import flashinfer
    import torch

    return [
        f"# Harness validation on {torch.cuda.get_device_name()}",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, FlashInfer {flashinfer.__version__}, "
        f"harness {HARNESS_VERSION}",
        f"- command: `python benchmarks/h200_validate.py --sweeps {args.sweeps} --l2 {args.l2}`",
        "",
    ]


def _header_from_rows(rows: list[dict[str, str]], args) -> list[str]:
    row = rows[0]
    return [
        f"# Harness validation on {row.get('device', '?')} (analysed from the sweeps' CSVs)",
        "",
        f"- analysed: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- torch {row.get('torch_version')}, {row.get('runtime')}, FlashInfer {row.get('flashinfer_version')}, "
        f"harness {row.get('harness_version') or UNRECORDED_HARNESS_VERSION}",
        f"- command: `python benchmarks/h200_validate.py --from-log {args.from_log} --out {args.out}`",
        "",
    ]


def _write(report: Path | None, lines: list[str]) -> None:
    """Write the report so far (a run cut short by its time limit keeps what it measured)."""
    if report:
        report.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def case_of(row: dict[str, str], fields: tuple[str, ...]) -> dict[str, int]:
    return {name: int(row[name]) for name in fields}


def gpu_seconds(rows: list[dict[str, str]]) -> float:
    """GPU time the timed calls held, estimated from the rows alone: samples x the mean of
    (q1, median, q3), summed over ok rows; a cross-check of the harness's own figure."""
    total = 0.0
    for row in rows:
        if row["status"] == "ok" and row.get("samples"):
            mean = statistics.fmean(
                float(row[name]) for name in ("time_q1_ms", "time_ms", "time_q3_ms")
            )
            total += int(row["samples"]) * mean / 1e3
    return total


# ------------------------------------------------------------------ independent timing


def _l2_flush(torch, device):
    """The L2 flush the references put before each run(): the harness's own kind (what
    "cold" means is one definition), on a buffer of their own."""

    from fi_attn_bench.timing.l2 import L2Flusher

    flusher = L2Flusher(device)
    flusher.flush()
    return flusher.flush


def _sustain(run, flush, calls: int) -> None:
    """Back-to-back calls so that the GPU is at steady-state clocks when timing starts."""
    for _ in range(calls):
        if flush is not None:
            flush()
        run()


def _steady(torch, run, flush) -> float:
    """Calls until ~200 ms of back-to-back (flush, run()) at steady state; the host's
    seconds for one synchronized call."""
    _sustain(run, flush, 20)
    torch.cuda.synchronize()
    started = time.perf_counter()
    _sustain(run, flush, 1)
    torch.cuda.synchronize()
    one = max(time.perf_counter() - started, 1e-5)
    _sustain(run, flush, int(min(20_000, 0.2 / one)))
    return one


def independent_cold_ms(torch, run, device, max_calls: int = 50, reps: int = 9) -> float:
    """run()'s share of a queue of (2 x L2 flush, run()) pairs, by CUDA events:
    (events around N x (flush, run())) - (events around N x flush), medians of ``reps``
    blocks each, taken alternately, divided by N (``max_calls``, fewer for calls over
    0.4 ms, so a block takes ~20 ms).

    No event sits between a flush and its run(): an event record there costs the GPU 3-4 us
    before run()'s first kernel (``benchmarks/results/h200_validation_v6``), which is the
    measurement's, not run()'s.  The blocks are queued behind the steady-state calls, with
    no synchronize in between, so the GPU never idles: a 10 ms spin before each block (the
    first version) let compute-bound prefill run 13 % faster, as a GPU fresh from idle does."""
    flush = _l2_flush(torch, device)
    calls = max(5, min(max_calls, int(0.02 / _steady(torch, run, flush))))
    return queue_share_ms(torch, run, flush, calls, reps)


def queue_share_ms(torch, run, flush, calls: int, reps: int, pause=None) -> float:
    """(events around ``calls`` x ([pause] flush run())) - (events around ``calls`` x
    ([pause] flush)), medians of ``reps`` blocks each, taken alternately, per call.  A
    ``pause`` (a GPU spin, say) stands in both block kinds, so it cancels."""
    blocks: dict[bool, list] = {True: [], False: []}
    for _ in range(reps):
        for with_run in (True, False):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                if pause is not None:
                    pause()
                flush()
                if with_run:
                    run()
            stop.record()
            blocks[with_run].append((start, stop))
    torch.cuda.synchronize()
    both, flushes = (
        statistics.median(a.elapsed_time(b) for a, b in blocks[key]) for key in (True, False)
    )
    return (both - flushes) / calls


def events_per_call_cold_ms(torch, run, device, reps: int = 100) -> float:
    """The v5 reference: median of CUDA-event pairs around one run(), a 2 x L2 flush
    (after a spin that keeps the GPU ahead of the CPU) just before each start event; the
    start event's own record (3-4 us on the H200) is in every pair."""
    flush = _l2_flush(torch, device)
    _steady(torch, run, flush)
    times = []
    spin = getattr(torch.cuda, "_sleep", None)
    for _ in range(reps):
        if spin is not None:
            spin(50_000)  # keeps the GPU ahead of the CPU's launch of run(): not timed
        flush()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        times.append((start, stop))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in times)


def paired_cold_ms(torch, run, device, max_reps: int = 200) -> float:
    """Per call, by CUDA events, the v6 candidate for a bias-free cold reference: the median
    of (event, flush, run(), event) minus the median of (event, flush, event), interleaved,
    where every flush follows a run() (an untimed one after each flush-only reading).

    No event sits between a flush and its run() (the per-call reference's 1.4-4 us); each
    reading starts with an event then a flush, so the start event's cost cancels in the
    difference; and the subtracted flush evicts what a run() left, as the timed one does
    (the queue-share reference subtracts flushes that evict a flush's dirty lines, which
    may explain its 4-12 % gap to the per-call one on larger cases)."""
    flush = _l2_flush(torch, device)
    one = _steady(torch, run, flush)
    reps = max(30, min(max_reps, int(0.5 / (2 * one))))
    event = lambda: torch.cuda.Event(enable_timing=True)  # noqa: E731
    with_run, flush_only = [], []
    for _ in range(reps):
        pair = (event(), event())
        pair[0].record()
        flush()
        run()
        pair[1].record()
        with_run.append(pair)
        pair = (event(), event())
        pair[0].record()
        flush()  # follows the run() just timed
        pair[1].record()
        flush_only.append(pair)
        run()  # untimed: the next timed flush follows a run() too
    torch.cuda.synchronize()
    both, alone = (
        statistics.median(a.elapsed_time(b) for a, b in p) for p in (with_run, flush_only)
    )
    return both - alone


def independent_warm_ms(torch, run, device=None, calls: int = 20, replays: int = 30) -> float:
    """CUDA-graph replay of ``calls`` back-to-back run()s; median per-call time."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            run()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            run()
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        times.append((start, stop))
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) / calls for a, b in times)


@dataclass(frozen=True)
class FidelityCase:
    case: str
    harness_ms: float  # the harness's measure(), in this process, interleaved with the reference
    independent_ms: float
    sweep_ms: float  # time_ms of the same case in sweep 0's CSV (another process, earlier)
    error: str = ""
    # Cold L2 only: the other references, by name (see COLD_REFERENCES)
    others: dict[str, float] = field(default_factory=dict)

    @property
    def diff_pct(self) -> float:
        return (self.harness_ms / self.independent_ms - 1.0) * 100.0

    def diff_to(self, name: str) -> float:
        return (self.harness_ms / self.others.get(name, math.nan) - 1.0) * 100.0


# Cold-L2 references besides the main one (``independent_cold_ms``), each its own column.
COLD_REFERENCES = {
    "per-call events (v5)": events_per_call_cold_ms,
    "paired events": paired_cold_ms,
}


def other_references(l2: str, main_only: bool = False) -> dict:
    """The references measured besides the main one: the cold ones, none with warm L2 or
    ``main_only`` (they take about a third of a round's time)."""
    return COLD_REFERENCES if l2 == "cold" and not main_only else {}


def interleaved(
    reference: Callable[[], float],
    others: dict[str, Callable[[], float]],
    harness: Callable[[], float],
    rounds: int = 1,
) -> tuple[float, dict[str, float], float]:
    """(reference, {other: reading}, harness), each the median of its readings taken A B B A
    ``rounds`` times: reference, the other references, harness twice, the other references,
    reference.  A large case's time moves by a few % with the GPU's power state
    (``h200_validation_v7``); interleaving cancels a steady drift, and with several rounds one
    reading taken in an odd state no longer decides.  One round: the means of the pairs."""
    readings: dict[str, list[float]] = {"reference": [], "harness": []}
    readings.update({name: [] for name in others})

    def take_others() -> None:
        for name, measure_other in others.items():
            readings[name].append(measure_other())

    for _ in range(rounds):
        readings["reference"].append(reference())
        take_others()
        readings["harness"] += [harness(), harness()]
        take_others()
        readings["reference"].append(reference())
    medians = {name: statistics.median(values) for name, values in readings.items()}
    return (
        medians.pop("reference"),
        {name: medians[name] for name in others},
        medians["harness"],
    )


def fidelity(
    script: str,
    l2: str,
    sweep_rows: list[dict[str, str]],
    rounds: int = 1,
    main_only: bool = False,
) -> list[FidelityCase]:
    """Every default case: the harness's measure() (the function behind time_ms, with the
    scripts' default options) and the independent measurement, taken A B B A ``rounds``
    times in one process (``interleaved``); cases under 20 us are left out."""
    import torch

    from fi_attn_bench.cases import selection
    from fi_attn_bench.timing import loop as tloop
    from fi_attn_bench.timing import options as topts
    from fi_attn_bench.timing import timers

    spec = importlib.import_module(Path(script).stem).SPEC
    device = torch.device("cuda")
    options = topts.TimingOptions(l2=l2)
    timer = timers.make_timer(options, device, lambda _: None)
    swept = {_key(row): float(row["time_ms"]) for row in sweep_rows if row["status"] == "ok"}
    found = []
    reference = independent_warm_ms if l2 == "warm" else independent_cold_ms
    others = other_references(l2, main_only)
    for case in spec.presets["default"]:
        text = selection.case_text(case, spec.case_fields)
        settings = spec.Settings(device, torch.float16, 16, "flashinfer", seed=0)
        try:
            run = spec.prepare(case, settings).run
            independent, means, harness = interleaved(
                lambda run=run: reference(torch, run, device),
                {
                    name: (lambda r=ref, run=run: r(torch, run, device))
                    for name, ref in others.items()
                },
                lambda run=run: tloop.measure(run, timer, options).median,
                rounds,
            )
        except Exception as exc:  # noqa: BLE001 - report, keep measuring the rest
            found.append(FidelityCase(text, math.nan, math.nan, math.nan, str(exc)))
            continue
        finally:
            run = None
            torch.cuda.empty_cache()
        if independent >= FIDELITY_MIN_MS:
            key = ", ".join(f"{n}={case[n]}" for n in spec.case_fields)
            found.append(
                FidelityCase(text, harness, independent, swept.get(key, math.nan), "", means)
            )
    return found


# ------------------------------------------------------------------ statistics


@dataclass(frozen=True)
class Repeat:
    """One case over the invocations: its mean and CV of time_ms, and the largest spread
    (noise_pct) and drift (drift_pct; NaN where the CSVs lack it) any invocation saw."""

    script: str
    case: str
    mean_ms: float
    cv_pct: float
    max_noise_pct: float
    max_drift_pct: float


def _floats(rows: list[dict[str, str]], name: str) -> list[float]:
    return [float(r[name]) if r.get(name) else math.nan for r in rows]


def _largest(rows: list[dict[str, str]], name: str) -> float:
    """The largest value of a column over the invocations that recorded it (NaN: none did)."""
    return max((v for v in _floats(rows, name) if not math.isnan(v)), default=math.nan)


def repeatability(sweeps: dict[str, list[SweepRun]]) -> list[Repeat]:
    """Cases >= 50 us present in every sweep."""
    out = []
    for script, runs in sweeps.items():
        tables = [
            {_key(r): r for r in read_rows(run.csv_path) if r["status"] == "ok"} for run in runs
        ]
        for key in tables[0]:
            rows = [table.get(key) for table in tables]
            if any(r is None for r in rows):
                continue
            values = _floats(rows, "time_ms")
            mean = statistics.fmean(values)
            if mean < REPEAT_MIN_MS:
                continue
            cv = statistics.stdev(values) / mean * 100.0 if len(values) > 1 else 0.0
            noise, drift = _largest(rows, "noise_pct"), _largest(rows, "drift_pct")
            out.append(Repeat(script, key, mean, cv, noise, drift))
    return out


def flag_lines(stats: list[Repeat], name: str, threshold: float, value) -> list[str]:
    """Does a per-invocation flag (``value(case) > threshold`` in any invocation) single out
    the cases whose time_ms moved between invocations?"""
    known = [s for s in stats if not math.isnan(value(s))]
    if not known:
        return []
    flagged = [s for s in known if value(s) > threshold]
    calm = [s for s in known if value(s) <= threshold]

    def cv_range(cases: list[Repeat]) -> str:
        cvs = [s.cv_pct for s in cases]
        return f"CV {min(cvs):.2f}-{max(cvs):.2f}%" if cvs else "none"

    return [
        f"- {name} > {threshold:g}% in any invocation: {len(flagged)} cases, {cv_range(flagged)}; "
        f"never: {len(calm)} cases, {cv_range(calm)}"
    ]


def _key(row: dict[str, str]) -> str:
    """The case as text: its case parameters, by the column registry's rule."""
    return ", ".join(f"{n}={row[n]}" for n in case_columns(row))


def gate(first: list[Path], second: list[Path], out_dir: Path, name: str) -> tuple[int, str]:
    """The summarizer's regression gate at 5 %, report and JSON written as ``name``.*."""
    command = [
        sys.executable,
        str(ROOT / "summarize_results.py"),
        "--baseline",
        *map(str, first),
        "--candidate",
        *map(str, second),
        "--fail-on-regression",
        "5",
        "--output",
        str(out_dir / f"{name}.md"),
        "--json",
        str(out_dir / f"{name}.json"),
    ]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    return completed.returncode, (completed.stdout + completed.stderr).strip()


def false_alarm_lines(sweeps, scripts, count: int, out_dir: Path) -> list[str]:
    """Every pair of sweeps through the 5 % gate: a false alarm is any exit code but 0."""
    rows, passed = [], 0
    for first, second in itertools.combinations(range(count), 2):
        name = f"false_alarm_{first}_{second}"
        code, _ = gate(
            [sweeps[s][first].csv_path for s in scripts],
            [sweeps[s][second].csv_path for s in scripts],
            out_dir,
            name,
        )
        report = out_dir / f"{name}.md"
        verdict = report.read_text(encoding="utf-8").splitlines()[2] if report.exists() else ""
        rows.append(f"| {first} vs {second} | {code} | {verdict} |")
        passed += code == 0
    return [
        "## False alarms (every pair of sweeps, `--fail-on-regression 5`)",
        "",
        f"- pairs: {len(rows)}; exit 0: {passed}",
        "",
        "| pair | exit | verdict |",
        "|---|---:|---|",
        *rows,
        "",
    ]


# ------------------------------------------------------------------ report


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("h200_validation"))
    parser.add_argument("--report", type=Path, default=None)
    parser.add_argument("--l2", choices=("cold", "warm"), default="cold")
    parser.add_argument("--scripts", nargs="+", default=list(SCRIPTS))
    parser.add_argument("--skip-fidelity", action="store_true")
    parser.add_argument(
        "--one-process",
        action="store_true",
        help="each sweep as one bench_all.py process instead of one process per script",
    )
    parser.add_argument(
        "--fidelity-scripts",
        nargs="+",
        default=None,
        help="fidelity for these (default: --scripts)",
    )
    parser.add_argument(
        "--fidelity-rounds",
        type=int,
        default=1,
        help="A B B A this many times per case; each method's median (default 1)",
    )
    parser.add_argument(
        "--main-reference-only",
        action="store_true",
        help="fidelity against the main reference only, not the cold L2's two others",
    )
    parser.add_argument(
        "--deadline-s", type=float, default=math.inf, help="start no new sweep after this many s"
    )
    parser.add_argument(
        "--from-log",
        type=Path,
        default=None,
        help="analyse the sweeps a timed-out run left in --out (its stdout in this file): "
        "cost, false alarms, repeatability; no GPU needed",
    )
    args = parser.parse_args(argv)
    if args.fidelity_rounds < 1:
        parser.error("--fidelity-rounds must be 1 or more")  # exit 2, before any GPU work
    extra = ["--l2", args.l2]
    if args.from_log:
        sweeps = sweeps_from_log(args.from_log, args.out, args.scripts)
        args.sweeps, args.skip_fidelity = len(sweeps[args.scripts[0]]), True
        lines = _header_from_rows(read_rows(sweeps[args.scripts[0]][0].csv_path), args)
    else:
        lines = _header_from_gpu(args)
        sweeps = {script: [] for script in args.scripts}
    _write(args.report, lines)
    started = time.perf_counter()
    for index in range(args.sweeps if not args.from_log else 0):
        if index >= 2 and time.perf_counter() - started > args.deadline_s:
            print(f"deadline: stopping after {index} sweeps", flush=True)
            args.sweeps = index
            break
        if args.one_process:
            runs = run_sweep_in_one_process(args.scripts, index, args.out, extra)
        else:
            runs = [run_sweep(script, index, args.out, extra) for script in args.scripts]
        for run in runs:
            sweeps[run.script].append(run)
            print(
                f"sweep {index} {run.script}: {run.wall_s:.1f} s exit {run.exit_code}", flush=True
            )

    lines += [
        "## Cost (default preset, JIT warm)",
        "",
        "| sweep | wall s | GPU s in timed calls (harness) | wall / GPU | GPU s (samples x quartile mean) | GPU s in timed batches, flushes included | wall / that | exit codes | cases with late-started calls |",
        "|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for index in range(args.sweeps):
        runs = [sweeps[s][index] for s in args.scripts]
        wall = sum(r.wall_s for r in runs)
        approx = sum(gpu_seconds(read_rows(r.csv_path)) for r in runs if r.csv_path.exists())
        timed = sum(r.timed_s for r in runs)
        codes = " ".join(str(r.exit_code) for r in runs)
        busy = sum(r.busy_s for r in runs)
        late = (
            str(sum(r.late_cases for r in runs)) if all(r.late_cases >= 0 for r in runs) else "n/a"
        )
        if not math.isfinite(timed):  # --from-log: the harness's own figure was not kept
            timed = approx
        lines.append(
            f"| {index} | {wall:.1f} | {timed:.1f} | {wall / timed if timed else math.nan:.2f} "
            f"| {approx:.1f} | {busy:.1f} | {wall / busy if busy else math.nan:.2f} | {codes} "
            f"| {late} |"
        )
    lines.append("")
    if args.from_log:
        lines += [
            "(--from-log: GPU s in timed calls is the rows' estimate, samples x quartile mean;",
            "the harness's own figure and phase clock were in stdout, which that run did not keep.)",
            "",
        ]
    elif args.sweeps:
        lines += ["Where sweep 0's wall time went, per script (the harness's own phase clock):", ""]
        lines += [f"- {s}: {sweeps[s][0].phases}" for s in args.scripts]
        lines.append("")

    _write(args.report, lines)
    if args.sweeps >= 2:
        lines += false_alarm_lines(sweeps, args.scripts, args.sweeps, args.out)
        stats = repeatability(sweeps)
        worst = sorted(stats, key=lambda item: -item.cv_pct)
        over = [s for s in stats if s.cv_pct > 1.0]
        lines += [
            f"## Repeatability over {args.sweeps} invocations (cases >= 50 us)",
            "",
            f"- cases: {len(stats)}; CV > 1%: {len(over)}; max CV: {worst[0].cv_pct:.2f}%"
            if worst
            else "- no cases",
            *flag_lines(stats, "noise_pct", WIDE_SPREAD_NOTE_PCT, lambda s: s.max_noise_pct),
            *flag_lines(stats, "drift_pct", DRIFT_FLAG_PCT, lambda s: s.max_drift_pct),
            "",
            "| script | case | mean ms | CV % | max noise_pct | max drift_pct |",
            "|---|---|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {s.script} | {s.case} | {s.mean_ms:.4f} | {s.cv_pct:.2f} | "
            f"{s.max_noise_pct:.1f} | {s.max_drift_pct:.1f} |"
            for s in worst[:15]
        ]
        lines.append("")

    _write(args.report, lines)
    if not args.skip_fidelity:
        lines += [
            f"## Fidelity (L2 {args.l2}; harness vs independent measurement, cases >= 20 us)",
            "",
            "Per case, in one process: independent, harness, harness, independent (A B B A),",
            f"{args.fidelity_rounds} time(s); harness = the median of the `tloop.measure`",
            "medians (the function behind `time_ms`, default options), independent = the",
            "median of its readings (of two: their mean). The last",
            "column compares the same case's `time_ms` in sweep 0's CSV, measured earlier in",
            "another process, with the same independent value. Cold L2: the reference is",
            "run()'s share of a queue of (flush, run()) pairs by CUDA events (events around 50",
            "pairs minus events around 50 flushes).",
        ]
        names = list(other_references(args.l2, args.main_reference_only))
        if names:
            lines += [
                "The last columns compare the harness with the other references, also A B B A:",
                "the v5 one, an event pair around each run() after its flush, whose start",
                "event's record (1.4-4 us) is in every reading, and paired events, (event flush",
                "run() event) minus (event flush event), every flush after a run()",
                "(`paired_cold_ms`).",
            ]
        lines.append("")
        diffs, sweep_diffs = [], []
        other_diffs: dict[str, list[float]] = {name: [] for name in names}
        table = [
            "| script | case | harness ms | independent ms | diff % | sweep-0 CSV diff % "
            + "".join(f"| diff % vs {name} " for name in names)
            + "|",
            "|---|---|---:|---:|---:|---:|" + "---:|" * len(names),
        ]
        for script in args.fidelity_scripts or args.scripts:
            print(f"fidelity {script} from {time.perf_counter() - started:.0f} s", flush=True)
            rows = read_rows(sweeps[script][0].csv_path) if sweeps.get(script) else []
            found = fidelity(script, args.l2, rows, args.fidelity_rounds, args.main_reference_only)
            for item in found:
                if item.error:
                    table.append(
                        f"| {script} | {item.case} | n/a | n/a | error: {item.error[:80]} |"
                        + " |" * (1 + len(names))
                    )
                    continue
                diffs.append(abs(item.diff_pct))
                sweep_diff = (item.sweep_ms / item.independent_ms - 1.0) * 100.0
                if math.isfinite(sweep_diff):
                    sweep_diffs.append(abs(sweep_diff))
                for name in names:
                    other_diffs[name].append(abs(item.diff_to(name)))
                table.append(
                    f"| {script} | {item.case} | {item.harness_ms:.4f} | {item.independent_ms:.4f} "
                    f"| {item.diff_pct:+.2f} | {sweep_diff:+.2f} "
                    + "".join(f"| {item.diff_to(name):+.2f} " for name in names)
                    + "|"
                )
                print(table[-1], flush=True)
                _write(args.report, [*lines, *table])
        within = sum(d <= 3.0 for d in diffs)
        within_sweep = sum(d <= 3.0 for d in sweep_diffs)
        lines += [
            f"- cases: {len(diffs)}; within ±3%: {within}; max |diff|: {max(diffs, default=0):.2f}%",
            f"- sweep-0 CSV against the same independent values: within ±3%: {within_sweep} "
            f"of {len(sweep_diffs)}; max |diff|: {max(sweep_diffs, default=0):.2f}%",
            *(
                f"- against {name}: within ±3%: {sum(d <= 3.0 for d in values)} of {len(values)}; "
                f"max |diff|: {max(values, default=0):.2f}%"
                for name, values in other_diffs.items()
            ),
            "",
        ]
        lines += table + [""]

    _write(args.report, lines)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
