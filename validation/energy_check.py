"""Does ``energy_mJ`` hold? Repeatability over sweeps, and agreement with power
samples integrated over the same batches; optionally a head-to-head sweep's paired time and
energy ratios side by side.

One process: a background thread samples board power every ``--interval-ms`` through NVML
(the instantaneous field where the driver has it, else ``nvmlDeviceGetPowerUsage``) while
the bench script's ``main`` runs ``--sweeps`` times with the usual harness (its own options
after ``--``).  Per case: ``energy_mJ`` of each sweep's row, its CV over the sweeps, and the
same estimator (median over the row's energy windows of energy / calls) computed from the
integrated power samples over exactly the batches the row's energy came from (the harness's
reads at batch boundaries).  ``--h2h A B`` adds one sweep with ``--impl A --impl B`` whose
rounds are made long enough for the energy counter (``--batch-ms`` from its measured update
period) and reports ``paired_ratio`` beside ``paired_energy_ratio``.

Usage on a GPU machine (nvidia-ml-py installed):

    python -m validation energy --script ragged --sweeps 5 --out energy.md \\
        --h2h flashinfer:fa2 flashinfer:fa3 -- --preset default

Writes the Markdown report to ``--out`` after each sweep, each sweep's CSV beside it
(``<out stem>_sweep<N>.csv``, ``<out stem>_h2h.csv``) and, after each sweep, the raw power
samples, counter readings and rows' batches (``<out stem>_raw.json``); refuses to overwrite
any of them.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench.device import energy as device_energy
from fi_attn_bench.device.energy import ENERGY_WINDOW_UPDATES, PAIRED_ROUND_UPDATES
from fi_attn_bench.sweep import run as sweep_run
from fi_attn_bench.timing.energy import energy_windows
from fi_attn_bench.timing.options import TimingOptions

SCRIPTS = {
    "decode": "bench_batch_decode",
    "paged": "bench_batch_prefill_paged",
    "ragged": "bench_batch_prefill_ragged",
    "mla": "bench_batch_mla",
}
CV_LIMIT_PCT = 3.0  # the repeatability target, for cases >= MIN_CASE_MS
AGREEMENT_LIMIT_PCT = 5.0  # the agreement target with integrated power samples
# nvmlDeviceGetPowerUsage is a mean over the trailing second on Ampere and newer (NVML's docs;
# on an H100 it matched the counter's trailing 1 s mean best, DESIGN "Energy")
AVERAGED_WINDOW_S = 1.0
MIN_CASE_MS = 1.0
ROUND_MARGIN = 1.1  # head-to-head rounds this much longer than the counter needs
DEFAULT_MIN_TIME_MS = TimingOptions.min_time_ms


@dataclass(frozen=True)
class CaseSweep:
    """One case in one sweep: its row's time and energy, and the integrated check."""

    case: str
    time_ms: float
    energy_mj: float | None
    window_pct: float | None  # counter against power over the row's own windows, %
    steady_pct: float | None  # counter against power over the case's steady batches, %
    windows: int
    note: str


@dataclass(frozen=True)
class CaseCheck:
    """One case over all sweeps."""

    case: str
    time_ms: float
    energy_mj: float | None  # mean over sweeps
    cv_pct: float | None
    window_pct: float | None  # worst |counter / integrated - 1| over sweeps, signed, in %
    steady_pct: float | None  # the same over the steady batches, the reading's lag allowed for
    sweeps: int
    note: str

    @property
    def judged(self) -> bool:
        return self.time_ms >= MIN_CASE_MS and self.energy_mj is not None

    @property
    def repeats(self) -> bool:
        return self.cv_pct is not None and self.cv_pct <= CV_LIMIT_PCT

    @property
    def agrees(self) -> bool:
        return self.steady_pct is not None and abs(self.steady_pct) <= AGREEMENT_LIMIT_PCT


def integrated_per_call(energy, samples, times) -> float | None:
    """The row's estimator over power samples: median over its windows of integrated
    energy / calls, in mJ; None where a batch lies outside the samples."""
    per_call = []
    for window in energy_windows(list(energy.batches), energy.window_s):
        joules = [device_energy.integrate_power(samples, b.start_s, b.end_s, times) for b in window]
        if any(j is None for j in joules):
            return None
        per_call.append(sum(joules) * 1e3 / sum(b.calls for b in window))
    return statistics.median(per_call) if per_call else None


def steady_agreement_pct(batches, samples, times, averaged_s: float) -> float | None:
    """The counter's energy over a case's steady batches against the power samples over the
    same batches, in %.  A reading averaged over the trailing ``averaged_s`` lags the load by
    half of that, so each batch is integrated that much later, and the batches within it of
    the case's first start or last end, whose readings also average the load before or after
    the case, are left out.  None where no batch is left or one lies outside the samples."""
    if not batches:
        return None
    lag = averaged_s / 2.0
    first, last = batches[0].start_s, batches[-1].end_s
    steady = [
        b
        for b in batches
        if b.start_s >= first + lag and b.end_s <= last - lag and b.energy_mj is not None
    ]
    joules = [
        device_energy.integrate_power(samples, b.start_s + lag, b.end_s + lag, times)
        for b in steady
    ]
    if not steady or any(j is None for j in joules) or sum(joules) <= 0:
        return None
    return (sum(b.energy_mj for b in steady) / (sum(joules) * 1e3) - 1.0) * 100.0


def case_sweeps(captured, samples, times, averaged_s: float = 0.0) -> list[CaseSweep]:
    """Each ok row of one sweep with its integrated checks (``captured``: (record, result));
    ``averaged_s``: the window the power reading is averaged over (0 for point samples)."""
    found = []
    for record, result in captured:
        if record.get("status") != "ok" or result.measurement is None:
            continue
        energy = result.measurement.energy
        has = energy is not None and energy.energy_mj is not None
        integrated = integrated_per_call(energy, samples, times) if has else None
        found.append(
            CaseSweep(
                case=record["repro_case"],
                time_ms=float(record["time_ms"]),
                energy_mj=energy.energy_mj if has else None,
                window_pct=(energy.energy_mj / integrated - 1.0) * 100.0 if integrated else None,
                steady_pct=(
                    steady_agreement_pct(list(energy.batches), samples, times, averaged_s)
                    if has
                    else None
                ),
                windows=energy.windows if has else 0,
                note=str(record.get("notes") or ""),
            )
        )
    return found


def combine(sweeps: Sequence[Sequence[CaseSweep]]) -> list[CaseCheck]:
    """Per case (first sweep's order): mean energy, its CV over sweeps, worst agreement."""
    by_case: dict[str, list[CaseSweep]] = {}
    for sweep in sweeps:
        for entry in sweep:
            by_case.setdefault(entry.case, []).append(entry)
    checks = []
    for case, entries in by_case.items():
        energies = [e.energy_mj for e in entries if e.energy_mj is not None]
        mean = statistics.fmean(energies) if energies else None
        cv = statistics.stdev(energies) / mean * 100.0 if len(energies) > 1 and mean else None
        notes = sorted({e.note for e in entries if e.note})
        checks.append(
            CaseCheck(
                case,
                statistics.median(e.time_ms for e in entries),
                mean,
                cv,
                _worst(e.window_pct for e in entries),
                _worst(e.steady_pct for e in entries),
                len(energies),
                "; ".join(notes),
            )
        )
    return checks


def _worst(percents) -> float | None:
    """The percent farthest from 0 (sign kept), None when there is none."""
    found = [pct for pct in percents if pct is not None]
    return max(found, key=abs) if found else None


def sweep_arguments(period_s: float, extra: Sequence[str]) -> list[str]:
    """Options that give each case at least 3 energy windows when the counter is slow (the
    harness's default 500 ms of timed batches would give fewer); none where the user set
    --min-time-ms or the default suffices."""
    needed_ms = 3 * ENERGY_WINDOW_UPDATES * period_s * 1e3
    if "--min-time-ms" in extra or needed_ms <= DEFAULT_MIN_TIME_MS:
        return []
    budget_s = max(2.0, 1.5 * needed_ms / 1e3)
    return ["--min-time-ms", f"{math.ceil(needed_ms):g}", "--max-time-per-case", f"{budget_s:g}"]


def h2h_round_ms(period_s: float) -> float:
    """Head-to-head batch length (--batch-ms) that gives each round's batch the
    PAIRED_ROUND_UPDATES counter updates the paired energy ratio needs, at least the
    harness's default 50 ms."""
    return max(50.0, math.ceil(round(ROUND_MARGIN * PAIRED_ROUND_UPDATES * period_s * 1e3, 6)))


def h2h_arguments(impls: Sequence[str], period_s: float) -> list[str]:
    """The head-to-head sweep's options: two impls, rounds long enough for the counter
    (20 rounds of ``h2h_round_ms``; --max-time-per-case is per implementation)."""
    batch_ms = h2h_round_ms(period_s)
    min_time_ms = 20 * batch_ms
    # wall per GPU time reaches 1.5 with cold L2 flushes; a budget cut shortens the last rounds
    budget_s = max(2.0, 2.5 * min_time_ms / 1e3)
    argv = [arg for impl in impls for arg in ("--impl", impl)]
    return [
        *argv,
        "--batch-ms",
        f"{batch_ms:g}",
        "--min-time-ms",
        f"{min_time_ms:g}",
        "--max-time-per-case",
        f"{budget_s:g}",
    ]


def _number(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _mark(ok: bool, judged: bool) -> str:
    return ("yes" if ok else "**no**") if judged else "-"


def energy_table(checks: Sequence[CaseCheck], sweeps: int) -> list[str]:
    lines = [
        f"| case | time_ms | energy_mJ (mean of {sweeps}) | CV % | CV <= {CV_LIMIT_PCT:g} % | "
        "counter vs integrated per energy window, worst % | counter vs integrated over the "
        f"steady batches, worst % | within {AGREEMENT_LIMIT_PCT:g} % | notes |",
        "|---|---:|---:|---:|---|---:|---:|---|---|",
    ]
    for c in checks:
        lines.append(
            f"| {c.case} | {c.time_ms:.4f} | {_number(c.energy_mj, 3)} | {_number(c.cv_pct)} | "
            f"{_mark(c.repeats, c.judged)} | {_number(c.window_pct)} | "
            f"{_number(c.steady_pct)} | {_mark(c.agrees, c.judged)} | {c.note} |"
        )
    judged = [c for c in checks if c.judged]
    lines += [
        "",
        f"Cases >= {MIN_CASE_MS:g} ms with energy: {len(judged)}; CV <= {CV_LIMIT_PCT:g} %: "
        f"{sum(c.repeats for c in judged)}; within {AGREEMENT_LIMIT_PCT:g} % of the "
        f"integrated power samples over the steady batches: {sum(c.agrees for c in judged)}.",
        "",
        "Per energy window, the samples are integrated over the row's own windows (500 ms and "
        "up) as they are. Over the steady batches, each batch is integrated half the power "
        "reading's averaging window later, and the batches within that of the case's start or "
        "end are left out (an averaged reading there also holds the load before or after).",
    ]
    return lines


def h2h_table(rows: Sequence[dict], base: str) -> list[str]:
    lines = [
        f"Against {base}: paired ratio (time) and paired energy ratio with their 95 % intervals.",
        "",
        "| case | impl | time_ms | paired_ratio [95 %] | energy_mJ | paired_energy_ratio [95 %] "
        "| notes |",
        "|---|---|---:|---|---:|---|---|",
    ]
    for row in rows:
        if row.get("impl") == base or row.get("status") != "ok":
            continue
        lines.append(
            f"| {row['repro_case']} | {row['impl']} | {float(row['time_ms']):.4f} | "
            f"{_ratio_text(row, 'paired_ratio')} | {row.get('energy_mJ') or 'n/a'} | "
            f"{_ratio_text(row, 'paired_energy_ratio')} | {row.get('notes', '')} |"
        )
    return lines


def _ratio_text(row: dict, name: str) -> str:
    if not row.get(name):
        return "n/a"
    low, high = row.get(f"{name}_lo"), row.get(f"{name}_hi")
    interval = f" [{float(low):.4f}, {float(high):.4f}]" if low and high else ""
    return f"{float(row[name]):.4f}{interval}"


class Capture:
    """Collects each case's (record, result) from the harness's sweep as it goes."""

    def __init__(self):
        self.rows: list[tuple[dict, object]] = []
        self._one = sweep_run.Sweep._one

    def __enter__(self) -> Capture:
        original, rows = self._one, self.rows

        def one(sweep, runner, case, metadata):
            records, results = original(sweep, runner, case, metadata)
            text = ",".join(f"{name}={case[name]}" for name in sweep.spec.case_fields)
            for record, result in zip(records, results, strict=True):
                rows.append(({**record, "repro_case": text}, result))
            return records, results

        sweep_run.Sweep._one = one
        return self

    def __exit__(self, *exc) -> None:
        sweep_run.Sweep._one = self._one


def raw_sweep(captured) -> list[dict]:
    """Each ok row's time and energy with the batches behind it, for estimators tried later."""
    found = []
    for record, result in captured:
        energy = result.measurement.energy if result.measurement is not None else None
        if record.get("status") != "ok" or energy is None:
            continue
        found.append(
            {
                "case": record["repro_case"],
                "impl": record.get("impl", ""),
                "time_ms": float(record["time_ms"]),
                "energy_mj": energy.energy_mj,
                "window_s": energy.window_s,
                "batches": [[b.start_s, b.end_s, b.calls, b.energy_mj] for b in energy.batches],
            }
        )
    return found


def write_raw(path: Path, period_s: float, logs, sweeps: Sequence[list[dict]]) -> None:
    """The power samples (instantaneous, averaged), the counter's readings and every sweep's
    rows, as JSON."""
    power, counter, averaged = ([[x.time_s, x.watts] for x in list(log.samples)] for log in logs)
    data = {
        "period_s": period_s,
        "power": power,
        "counter": counter,
        "power_averaged": averaged,
        "sweeps": list(sweeps),
    }
    path.write_text(json.dumps(data), encoding="utf-8")


def run_sweep(main: Callable[[list[str]], int], argv: list[str]) -> tuple[int, list]:
    with Capture() as capture:
        code = main(argv)
    return code, capture.rows


def sweep_paths(out: Path, sweeps: int, h2h: bool) -> list[Path]:
    paths = [out.with_name(f"{out.stem}_sweep{i + 1}.csv") for i in range(sweeps)]
    return [*paths, out.with_name(f"{out.stem}_h2h.csv")] if h2h else paths


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    own, extra = (list(argv), [])
    if "--" in own:
        at = own.index("--")
        own, extra = own[:at], own[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--script", choices=sorted(SCRIPTS), required=True)
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True, help="Markdown report path")
    parser.add_argument("--interval-ms", type=float, default=5.0, help="power sampling period")
    parser.add_argument(
        "--power",
        choices=("averaged", "instant"),
        default="averaged",
        help="the power reading integrated as the reference: nvmlDeviceGetPowerUsage "
        "(averaged, default) or the instantaneous field (one point sample per ~100 ms on an "
        "H100, biased low against the counter)",
    )
    parser.add_argument("--h2h", nargs=2, metavar=("BASE", "OTHER"), help="impls to pair")
    args = parser.parse_args(own)
    if args.sweeps == 1 or args.sweeps < 0 or (args.sweeps == 0 and not args.h2h):
        parser.error("--sweeps must be at least 2 (a CV needs two), or 0 with --h2h")
    if args.interval_ms <= 0:
        parser.error("--interval-ms must be positive")
    raw = args.out.with_name(f"{args.out.stem}_raw.json")
    taken = [
        p
        for p in (args.out, raw, *sweep_paths(args.out, args.sweeps, bool(args.h2h)))
        if p.exists()
    ]
    if taken:
        parser.error(f"{taken[0]} exists; choose another --out")
    if any(arg in ("--output", "--output-dir", "--impl") for arg in extra):
        parser.error("the bench script's --output, --output-dir and --impl are set by this check")
    return args, extra


def versions(device) -> list[str]:
    import torch

    try:
        import pynvml

        driver = pynvml.nvmlSystemGetDriverVersion()
        binding = importlib.metadata.version("nvidia-ml-py")
    except Exception as exc:  # noqa: BLE001 - reported, not fatal
        driver = binding = f"unknown ({type(exc).__name__})"
    try:
        import flashinfer

        flashinfer_version = flashinfer.__version__
    except Exception:  # noqa: BLE001
        flashinfer_version = "not importable"
    return [
        f"- GPU: {torch.cuda.get_device_name(device)}; driver {driver}; nvidia-ml-py {binding}",
        f"- torch {torch.__version__}; flashinfer {flashinfer_version}; Python "
        f"{platform.python_version()}",
    ]


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, extra = parse(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: energy_check needs a CUDA GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    access = device_energy.open_energy_counter(device)
    interval_s, averaged = args.interval_ms / 1e3, args.power == "averaged"
    sampler = device_energy.open_power_sampler(device, interval_s=interval_s, averaged=averaged)
    if access.counter is None or sampler is None:
        why = access.reason or "NVML power is unreadable"
        print(f"error: no energy counter or power samples: {why}", file=sys.stderr)
        return 2
    point_samples = sampler.read_watts.__name__ == "instant"
    averaged_window_s = 0.0 if point_samples else AVERAGED_WINDOW_S
    main_fn = importlib.import_module(SCRIPTS[args.script]).main
    paths = sweep_paths(args.out, args.sweeps, bool(args.h2h))
    raw_path = args.out.with_name(f"{args.out.stem}_raw.json")
    # The counter read as often as the power, over every sweep: the raw steps behind the rows
    counter_log = device_energy.PowerSampler(access.counter.energy_mj, args.interval_ms / 1e3)
    other_log = device_energy.open_power_sampler(
        device, interval_s=interval_s, averaged=not averaged
    )
    # The raw JSON keeps both power readings under fixed names
    logs = (other_log, counter_log, sampler) if averaged else (sampler, counter_log, other_log)
    raw: list[list[dict]] = []
    started = time.monotonic()
    per_sweep, h2h_rows, codes = [], [], []
    longer = sweep_arguments(access.period_s, extra)

    def write_report() -> None:
        """The report of the sweeps done so far (a call cut short keeps them)."""
        checks = combine(per_sweep)
        elapsed = time.monotonic() - started
        source = "instantaneous field" if point_samples else "averaged power"
        lines = [
            f"# Energy check: {SCRIPTS[args.script]}",
            "",
            f"- Command: `python -m validation energy {' '.join(argv)}`",
            *versions(device),
            f"- Energy counter: NVML total energy, update period {access.period_s * 1e3:.2f} ms "
            f"(windows of >= {access.window_s * 1e3:.0f} ms); power samples every "
            f"{args.interval_ms:g} ms ({source}, {len(sampler.samples)} samples)",
            f"- Sweeps: {len(per_sweep)} of {args.sweeps} (added options: "
            f"`{' '.join(longer) or 'none'}`), exit codes {codes}; wall {elapsed:.0f} s",
            "",
            "## Repeatability and agreement",
            "",
            *energy_table(checks, len(per_sweep)),
        ]
        if h2h_rows:
            argv_text = " ".join(h2h_arguments(args.h2h, access.period_s))
            lines += ["", f"## Head to head (`{argv_text}`)", "", *h2h_table(h2h_rows, args.h2h[0])]
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")

    with sampler, counter_log, other_log:
        for index in range(args.sweeps):
            sweep_argv = [*extra, *longer, "--output", str(paths[index])]
            code, rows = run_sweep(main_fn, sweep_argv)
            codes.append(code)
            samples, times = sampler.frozen()
            per_sweep.append(case_sweeps(rows, samples, times, averaged_window_s))
            raw.append(raw_sweep(rows))
            write_raw(raw_path, access.period_s, logs, raw)
            write_report()
            print(f"sweep {index + 1}/{args.sweeps}: exit {code}, {len(rows)} rows", flush=True)
        if args.h2h:
            h2h_argv = [
                *extra,
                *h2h_arguments(args.h2h, access.period_s),
                "--output",
                str(paths[-1]),
            ]
            code, rows = run_sweep(main_fn, h2h_argv)
            codes.append(code)
            h2h_rows = [record for record, _ in rows]
            raw.append(raw_sweep(rows))
            write_raw(raw_path, access.period_s, logs, raw)
    write_report()
    print(f"Report saved to {args.out}")
    return 0 if all(code == 0 for code in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
