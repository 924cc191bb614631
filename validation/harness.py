"""Measure the harness's published numbers on a GPU and write a Markdown report.

What it measures (docs/VALIDATION.md gives the current values):

* cost          -- wall time of the default sweep of all four scripts in one process
                   (``bench_all.py``), and the GPU time of its timed calls;
* repeatability -- coefficient of variation of time_ms over the sweeps, cases >= 50 us;
* false alarms  -- the summarizer's regression gate at 5 % on every pair of sweeps;
* fidelity      -- for every default case of >= 20 us, the harness's ``measure()`` against an
                   independent cold-L2 measurement of the same run() that uses none of the
                   harness's timers: CUDA events around a queue of (2 x L2 flush, run())
                   pairs minus events around the flushes alone, taken A B B A per case.

It uses public API only: the scripts' ``SPEC``, ``bench_common``, ``benchmark_result`` and
``fi_attn_bench.timing``'s ``TimingOptions``, ``measure``, ``make_timer`` and ``L2Flusher``.

On the GPU machine (FlashInfer installed), JIT warm-up included:

    python -m validation harness --out validation_out --sweeps 5 --fidelity-rounds 3

Exit codes: 0 report written, 2 bad options (before any GPU work).
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
from dataclasses import dataclass
from pathlib import Path

from benchmark_result import HARNESS_VERSION, case_columns
from validation.jit import warm_jit
from validation.running import SCRIPTS

ROOT = Path(__file__).resolve().parent.parent

FIDELITY_MIN_MS = 0.020
REPEAT_MIN_MS = 0.050
WITHIN_PCT = 3.0  # fidelity: |harness / independent - 1| at most this
CV_LIMIT_PCT = 1.0  # repeatability: CV of time_ms at most this
GATE_PCT = 5.0  # false alarms: summarize_results.py --fail-on-regression
NOISE_FLAG_PCT = 5.0  # the harness notes a case whose noise_pct is above this
DRIFT_FLAG_PCT = 3.0  # a drift_pct worth asking whether it singles out the moving cases


@dataclass(frozen=True)
class SweepRun:
    """One script's default sweep in one invocation, and what its output said about cost."""

    script: str
    index: int
    csv_path: Path
    wall_s: float
    exit_code: int
    timed_s: float  # the harness's own "time inside timed runs" line
    phases: str  # and where its wall time went
    busy_s: float  # GPU time of the timed batches, L2 flushes included
    late_cases: int = -1  # cases noted for calls that started late (-1: not known)


def sweep_run(script, index, csv_path, wall, code, stdout: str) -> SweepRun:
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


def run_sweep(scripts, index: int, out_dir: Path) -> list[SweepRun]:
    """The scripts' default sweeps in one ``bench_all.py`` process, as a user runs them; the
    process's wall time is booked on the first script, each CSV becomes sweepN/<script>.csv."""
    folder = out_dir / f"sweep{index}"
    staging = folder / "bench_all"
    staging.mkdir(parents=True, exist_ok=True)
    stems = [Path(script).stem for script in scripts]
    command = [sys.executable, str(ROOT / "bench_all.py"), "--scripts", *stems]
    command += ["--preset", "default", "--output-dir", str(staging)]
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
            sweep_run(script, index, csv_path, wall if position == 0 else 0.0,
                      completed.returncode, section)
        )  # fmt: skip
    return runs


def header_lines(argv: list[str]) -> list[str]:
    """The report's title: GPU, software versions, the command."""
    import flashinfer
    import torch

    return [
        f"# Harness validation on {torch.cuda.get_device_name()}",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"- torch {torch.__version__}, CUDA {torch.version.cuda}, FlashInfer {flashinfer.__version__}, "
        f"harness {HARNESS_VERSION}",
        f"- command: `python -m validation harness {' '.join(argv)}`",
        "",
    ]


def write_report(report: Path, lines: list[str]) -> None:
    """Write the report so far (a run cut short by its time limit keeps what it measured)."""
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text("\n".join(lines) + "\n", encoding="utf-8")


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


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


def _l2_flush(device):
    """The flush before each run(): the harness's definition of cold, on a buffer of its own."""
    from fi_attn_bench.timing import L2Flusher

    flusher = L2Flusher(device)
    flusher.flush()
    return flusher.flush


def _sustain(run, flush, calls: int) -> None:
    """Back-to-back calls so that the GPU is at steady-state clocks when timing starts."""
    for _ in range(calls):
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
    """run()'s share of a queue of (2 x L2 flush, run()) pairs, by CUDA events, in blocks of
    about 20 ms queued behind steady-state calls (no event sits between a flush and its
    run(), because an event record there costs the GPU microseconds)."""
    flush = _l2_flush(device)
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


@dataclass(frozen=True)
class FidelityCase:
    case: str
    harness_ms: float  # the harness's measure(), in this process, interleaved with the reference
    independent_ms: float
    sweep_ms: float  # time_ms of the same case in sweep 0's CSV (another process, earlier)
    error: str = ""

    @property
    def diff_pct(self) -> float:
        return (self.harness_ms / self.independent_ms - 1.0) * 100.0

    @property
    def sweep_diff_pct(self) -> float:
        return (self.sweep_ms / self.independent_ms - 1.0) * 100.0


def interleaved(
    reference: Callable[[], float], harness: Callable[[], float], rounds: int = 1
) -> tuple[float, float]:
    """(reference, harness), each the median of its readings taken A B B A ``rounds`` times,
    because a large case's time moves with the GPU's power state and interleaving cancels a
    steady drift.  One round: the means of the pairs."""
    readings: dict[str, list[float]] = {"reference": [], "harness": []}
    for _ in range(rounds):
        readings["reference"].append(reference())
        readings["harness"] += [harness(), harness()]
        readings["reference"].append(reference())
    return statistics.median(readings["reference"]), statistics.median(readings["harness"])


def case_label(case, fields) -> str:
    return ", ".join(f"{name}={case[name]}" for name in fields)


def fidelity(script: str, sweep_rows: list[dict[str, str]], rounds: int = 1) -> list[FidelityCase]:
    """Every default case: the harness's ``measure()`` (the function behind time_ms, default
    options) and the independent measurement, ``interleaved`` in one process; cases under
    20 us are left out."""
    import torch

    from bench_common import Settings
    from fi_attn_bench.timing import TimingOptions, make_timer, measure

    spec = importlib.import_module(Path(script).stem).SPEC
    device = torch.device("cuda")
    options = TimingOptions(l2="cold")
    timer = make_timer(options, device, lambda _: None)
    ok_rows = (row for row in sweep_rows if row["status"] == "ok")
    swept = {case_label(row, spec.case_fields): float(row["time_ms"]) for row in ok_rows}
    found = []
    for case in spec.presets["default"]:
        label = case_label(case, spec.case_fields)
        settings = Settings(device, torch.float16, 16, "flashinfer", seed=0)
        try:
            run = spec.prepare(case, settings, spec.make_inputs(case, settings)).run
            independent, harness = interleaved(
                lambda run=run: independent_cold_ms(torch, run, device),
                lambda run=run: measure(run, timer, options).median,
                rounds,
            )
        except Exception as exc:  # noqa: BLE001 - report, keep measuring the rest
            found.append(FidelityCase(label, math.nan, math.nan, math.nan, str(exc)))
            continue
        finally:
            run = None
            torch.cuda.empty_cache()
        if independent >= FIDELITY_MIN_MS:
            found.append(FidelityCase(label, harness, independent, swept.get(label, math.nan)))
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


def _key(row: dict[str, str]) -> str:
    """The case as text: its case parameters, by the column registry's rule."""
    return ", ".join(f"{n}={row[n]}" for n in case_columns(row))


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


def gate(first: list[Path], second: list[Path], out_dir: Path, name: str) -> int:
    """The summarizer's regression gate at 5 %, report and JSON written as ``name``.*."""
    command = [sys.executable, str(ROOT / "summarize_results.py"), "--baseline", *map(str, first)]
    command += ["--candidate", *map(str, second), "--fail-on-regression", f"{GATE_PCT:g}"]
    command += ["--output", str(out_dir / f"{name}.md"), "--json", str(out_dir / f"{name}.json")]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True).returncode


# ------------------------------------------------------------------ report sections


@dataclass(frozen=True)
class Headline:
    """The published numbers, as the report's last table prints them."""

    name: str
    value: str


def cost_lines(sweeps, scripts, count: int) -> tuple[list[str], list[Headline]]:
    lines = [
        "## Cost (default preset, all four scripts in one process, JIT warm)",
        "",
        "| sweep | wall s | GPU s in timed calls (harness) | wall / GPU | GPU s (samples x quartile mean) | GPU s in timed batches, flushes included | exit codes | cases with late-started calls |",
        "|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    walls, ratios = [], []
    for index in range(count):
        runs = [sweeps[s][index] for s in scripts]
        wall = sum(r.wall_s for r in runs)
        approx = sum(gpu_seconds(read_rows(r.csv_path)) for r in runs if r.csv_path.exists())
        timed = sum(r.timed_s for r in runs)
        busy = sum(r.busy_s for r in runs)
        codes = " ".join(str(r.exit_code) for r in runs)
        late = sum(r.late_cases for r in runs) if all(r.late_cases >= 0 for r in runs) else "n/a"
        ratio = wall / timed if timed else math.nan
        walls.append(wall)
        ratios.append(ratio)
        lines.append(
            f"| {index} | {wall:.1f} | {timed:.1f} | {ratio:.2f} | {approx:.1f} | {busy:.1f} "
            f"| {codes} | {late} |"
        )
    lines += ["", "Where sweep 0's wall time went, per script (the harness's own phase clock):", ""]
    lines += [f"- {s}: {sweeps[s][0].phases}" for s in scripts] + [""]
    headlines = [
        Headline("sweep wall time", f"{min(walls):.1f}-{max(walls):.1f} s ({count} sweeps)"),
        Headline("wall / GPU time in timed calls", f"{min(ratios):.2f}-{max(ratios):.2f}x"),
    ]
    return lines, headlines


def false_alarm_lines(sweeps, scripts, count: int, out_dir: Path) -> tuple[list[str], Headline]:
    """Every pair of sweeps through the 5 % gate: a false alarm is any exit code but 0."""
    rows, passed = [], 0
    for first, second in itertools.combinations(range(count), 2):
        name = f"false_alarm_{first}_{second}"
        code = gate(
            [sweeps[s][first].csv_path for s in scripts],
            [sweeps[s][second].csv_path for s in scripts],
            out_dir,
            name,
        )
        report = out_dir / f"{name}.md"
        verdict = report.read_text(encoding="utf-8").splitlines()[2] if report.exists() else ""
        rows.append(f"| {first} vs {second} | {code} | {verdict} |")
        passed += code == 0
    lines = [
        f"## False alarms (every pair of sweeps, `--fail-on-regression {GATE_PCT:g}`)",
        "",
        f"- pairs: {len(rows)}; exit 0: {passed}",
        "",
        "| pair | exit | verdict |",
        "|---|---:|---|",
        *rows,
        "",
    ]
    return lines, Headline(f"pairs passing the {GATE_PCT:g} % gate", f"{passed} of {len(rows)}")


def repeatability_lines(sweeps, count: int) -> tuple[list[str], Headline]:
    stats = repeatability(sweeps)
    worst = sorted(stats, key=lambda item: -item.cv_pct)
    within = sum(s.cv_pct <= CV_LIMIT_PCT for s in stats)
    top = worst[0].cv_pct if worst else math.nan
    lines = [
        f"## Repeatability over {count} invocations (cases >= 50 us)",
        "",
        f"- cases: {len(stats)}; CV <= {CV_LIMIT_PCT:g}%: {within}; max CV: {top:.2f}%",
        *flag_lines(stats, "noise_pct", NOISE_FLAG_PCT, lambda s: s.max_noise_pct),
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
    value = f"{within} of {len(stats)} at CV <= {CV_LIMIT_PCT:g} %, max {top:.2f} %"
    return lines + [""], Headline("repeatability (cases >= 50 us)", value)


def fidelity_table_row(script: str, item: FidelityCase) -> str:
    if item.error:
        return f"| {script} | {item.case} | n/a | n/a | error: {item.error[:80]} | |"
    return (
        f"| {script} | {item.case} | {item.harness_ms:.4f} | {item.independent_ms:.4f} "
        f"| {item.diff_pct:+.2f} | {item.sweep_diff_pct:+.2f} |"
    )


def fidelity_summary(found: list[FidelityCase]) -> tuple[list[str], Headline]:
    measured = [item for item in found if not item.error]
    diffs = [abs(item.diff_pct) for item in measured]
    sweep_diffs = [abs(d) for d in (i.sweep_diff_pct for i in measured) if math.isfinite(d)]
    within = sum(d <= WITHIN_PCT for d in diffs)
    top = max(diffs, default=0.0)
    lines = [
        f"- cases: {len(diffs)}; within ±{WITHIN_PCT:g}%: {within}; max |diff|: {top:.2f}%",
        f"- sweep-0 CSV against the same independent values: within ±{WITHIN_PCT:g}%: "
        f"{sum(d <= WITHIN_PCT for d in sweep_diffs)} of {len(sweep_diffs)}; "
        f"max |diff|: {max(sweep_diffs, default=0):.2f}%",
        "",
    ]
    value = f"{within} of {len(diffs)} within ±{WITHIN_PCT:g} %, max {top:.2f} %"
    return lines, Headline("fidelity (cases >= 20 us)", value)


FIDELITY_INTRO = [
    "Per case, in one process: independent, harness, harness, independent (A B B A), repeated",
    "--fidelity-rounds times; harness = the median of `measure()`'s medians (the function behind",
    "`time_ms`, default options), independent = the median of its readings: run()'s share of a",
    "queue of (flush, run()) pairs by CUDA events (events around the pairs minus events around",
    "the flushes). The last column compares the same case's `time_ms` in sweep 0's CSV, measured",
    "earlier in another process, with the same independent value.",
    "",
    "| script | case | harness ms | independent ms | diff % | sweep-0 CSV diff % |",
    "|---|---|---:|---:|---:|---:|",
]


# ------------------------------------------------------------------ command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for sweeps and reports")
    parser.add_argument("--report", type=Path, default=None, help="default: OUT/validation.md")
    parser.add_argument("--sweeps", type=int, default=5, help="default sweeps to run (default 5)")
    parser.add_argument("--scripts", nargs="+", default=list(SCRIPTS), choices=SCRIPTS)
    parser.add_argument("--skip-jit-warm-up", action="store_true", help="the JIT cache is warm")
    parser.add_argument("--skip-fidelity", action="store_true")
    parser.add_argument(
        "--fidelity-scripts",
        nargs="+",
        default=None,
        choices=SCRIPTS,
        help="fidelity for these (default: --scripts)",
    )
    parser.add_argument(
        "--fidelity-rounds",
        type=int,
        default=1,
        help="A B B A this many times per case; each method's median (default 1)",
    )
    parser.add_argument(
        "--deadline-s", type=float, default=math.inf, help="start no new sweep after this many s"
    )
    return parser


def run_sweeps(args, started: float) -> dict[str, list[SweepRun]]:
    sweeps: dict[str, list[SweepRun]] = {script: [] for script in args.scripts}
    for index in range(args.sweeps):
        if index >= 2 and time.perf_counter() - started > args.deadline_s:
            print(f"deadline: stopping after {index} sweeps", flush=True)
            break
        for run in run_sweep(args.scripts, index, args.out):
            sweeps[run.script].append(run)
            print(
                f"sweep {index} {run.script}: {run.wall_s:.1f} s exit {run.exit_code}", flush=True
            )
    return sweeps


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.fidelity_rounds < 1:
        parser.error("--fidelity-rounds must be 1 or more")  # exit 2, before any GPU work
    if args.sweeps < 0:
        parser.error("--sweeps must be 0 or more")
    report = args.report or args.out / "validation.md"
    started = time.perf_counter()
    lines = header_lines(argv)
    if not args.skip_jit_warm_up:
        lines += [
            f"- JIT warm-up: {warm_jit(args.out / 'jit_warm_up', args.scripts):.0f} s (not timed)",
            "",
        ]
    write_report(report, lines)
    sweeps = run_sweeps(args, started)
    count = len(sweeps[args.scripts[0]])
    headlines: list[Headline] = []
    if count:
        section, found = cost_lines(sweeps, args.scripts, count)
        lines += section
        headlines += found
    if count >= 2:
        section, found = false_alarm_lines(sweeps, args.scripts, count, args.out)
        lines += section
        headlines.append(found)
        section, found = repeatability_lines(sweeps, count)
        lines += section
        headlines.append(found)
    write_report(report, lines)
    if not args.skip_fidelity:
        lines += ["## Fidelity (cold L2; harness vs independent measurement, cases >= 20 us)", ""]
        table, measured = list(FIDELITY_INTRO), []
        for script in args.fidelity_scripts or args.scripts:
            print(f"fidelity {script} from {time.perf_counter() - started:.0f} s", flush=True)
            rows = read_rows(sweeps[script][0].csv_path) if sweeps.get(script) else []
            for item in fidelity(script, rows, args.fidelity_rounds):
                measured.append(item)
                table.append(fidelity_table_row(script, item))
                print(table[-1], flush=True)
                write_report(report, [*lines, *table])
        summary, found = fidelity_summary(measured)
        lines += summary + table + [""]
        headlines.append(found)
    headline = ["## Headline", "", "| number | value |", "|---|---|"]
    headline += [f"| {item.name} | {item.value} |" for item in headlines]
    lines += headline + [""]
    write_report(report, lines)
    print("\n".join(headline))
    print(f"report: {report}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
