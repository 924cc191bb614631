"""Does the regression gate catch a known slowdown?  (public API only)

Sweeps a representative subset of the default presets' cases (those >= 50 us in the first
sweep) five times in one process: A (baseline), three candidates whose run() is followed by
a spin kernel lasting p = 3, 5, 8 % of the case's baseline time_ms, and A' (the A/A partner).
Then runs ``summarize_results.py --fail-on-regression GATE`` on (A, C_p) and (A, A') and
prints, per p, the measured changes and how many cases the gate flagged, and the A/A false
alarms.  Target: at a 5 % gate every case whose measured change exceeds 6 % is
flagged, and A/A flags nothing.

The spin is ``torch.cuda._sleep(cycles)`` launched right after run() inside the timed call,
with cycles = p / 100 x baseline time_ms x the spin's measured cycles per ms (the spin rate
follows the SM clock, so the measured change, not p, is what the target is judged on; a spin
also lowers power, so compute-bound cases at the power limit may read less than p).

Usage on the GPU machine (about 4-5 min on a fresh H200, ~3 min of it the JIT of four wrappers;
``--all-cases`` sweeps every default case instead of the subset: about 7.5 min fresh):

    python -m validation gate-sensitivity OUT_DIR            # sweeps, gates, table
    python -m validation gate-sensitivity OUT_DIR --gate-only   # gates the CSVs already there
                                                               # (e.g. after a summarizer change)
    git worktree add /tmp/before 29963bd   # the last main before the interval gate
    python -m validation gate-sensitivity OUT_DIR --gate-only \
        --summarizer /tmp/before/summarize_results.py --tag _before   # the 'before' column

Writes OUT_DIR/{A_all,A,p3,p5,p8,A2}/<script>.csv, OUT_DIR/gate_A_<label><tag>.{md,json},
and OUT_DIR/inject_slowdown<tag>.md (the table).  Lower cost: --min-time-ms (harness default 500).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import importlib
import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import bench_common  # the public face: main_for, BenchmarkSpec, Prepared

ROOT = Path(__file__).resolve().parent.parent

MIN_CASE_MS = 0.050
PERCENTS = (3.0, 5.0, 8.0)
TARGET_CHANGE_PCT = 6.0
SUMMARIZER = ROOT / "summarize_results.py"
# A representative subset of each default preset (one --filter per script): short and long,
# bandwidth- and compute-bound, every wrapper.
SUBSET: Mapping[str, str] = {
    "bench_batch_decode": "batch_size=64,head_dim=128",
    "bench_batch_prefill_paged": "batch_size=16,head_dim=128",
    "bench_batch_prefill_ragged": "batch_size=16,head_dim_qk=192",
    "bench_batch_mla": "batch_size=64,num_heads=128",
}


@dataclass(frozen=True)
class GateRow:
    """One matched case of one gate run: its measured change and whether it was flagged."""

    api: str
    case: str
    baseline_ms: float
    change_pct: float
    flagged: bool


def case_key(case: Mapping[str, object], fields: Sequence[str]) -> tuple[int, ...]:
    return tuple(int(float(case[f])) for f in fields)


def read_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def long_cases(rows: Sequence[Mapping[str, str]], fields: Sequence[str]) -> dict[tuple, float]:
    """Case key -> time_ms of the ok rows at or above MIN_CASE_MS."""
    return {
        case_key(row, fields): float(row["time_ms"])
        for row in rows
        if row["status"] == "ok" and float(row["time_ms"]) >= MIN_CASE_MS
    }


def spin_cycles(percent: float, baseline_ms: float, cycles_per_ms: float) -> int:
    """Cycles of a spin lasting ``percent`` of a call of ``baseline_ms``."""
    return max(1, round(percent / 100.0 * baseline_ms * cycles_per_ms))


def slowed_spec(spec, cycles_by_case: Mapping[tuple, int], spin: Callable[[int], None]):
    """``spec`` whose run() is followed by ``spin(cycles)`` and whose default preset is the
    cases of ``cycles_by_case`` (public fields of BenchmarkSpec and Prepared only)."""

    def prepare(case, settings, inputs):
        prepared = spec.prepare(case, settings, inputs)
        cycles, run = cycles_by_case[case_key(case, spec.case_fields)], prepared.run

        def run_then_spin():
            result = run()
            if cycles:
                spin(cycles)
            return result

        return dataclasses.replace(prepared, run=run_then_spin)

    cases = tuple(
        case
        for case in spec.presets["default"]
        if case_key(case, spec.case_fields) in cycles_by_case
    )
    return dataclasses.replace(spec, prepare=prepare, presets={"default": cases})


def filtered_copy(source: Path, target: Path, keep: Callable[[Mapping[str, str]], bool]) -> None:
    """A copy of a result CSV with only the rows ``keep`` accepts (same header)."""
    with open(source, newline="") as f:
        reader = csv.DictReader(f)
        rows = [row for row in reader if keep(row)]
        fields = reader.fieldnames
    with open(target, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)


def gate_rows(report: Mapping[str, object]) -> list[GateRow]:
    """The matched cases of a summarizer JSON report."""
    rows = []
    for match in report.get("matched", []):
        change = match.get("time_ms_delta_pct")
        if change is None:
            continue
        rows.append(
            GateRow(
                str(match["api"]),
                str(match.get("case_label", "")),
                float(match["time_ms_baseline"]),
                float(change),
                match.get("state") == "regression",
            )
        )
    return rows


@dataclass(frozen=True)
class Detection:
    """One gate run summarized: how many cases, flagged, and the target's misses."""

    label: str
    cases: int
    flagged: int
    median_change_pct: float
    above_target: int  # measured change > TARGET_CHANGE_PCT
    missed: tuple[str, ...]  # of those, not flagged

    @property
    def line(self) -> str:
        misses = "; ".join(self.missed) or "-"
        return (
            f"| {self.label} | {self.cases} | {self.median_change_pct:+.2f} | {self.flagged} | "
            f"{self.above_target} | {len(self.missed)} | {misses} |"
        )


def detection(label: str, rows: Sequence[GateRow]) -> Detection:
    above = [r for r in rows if r.change_pct > TARGET_CHANGE_PCT]
    missed = tuple(f"{r.api} {r.case} ({r.change_pct:+.1f}%)" for r in above if not r.flagged)
    median = statistics.median(r.change_pct for r in rows) if rows else float("nan")
    return Detection(label, len(rows), sum(r.flagged for r in rows), median, len(above), missed)


def table(detections: Sequence[Detection], gate: float) -> str:
    lines = [
        f"Gate: summarize_results.py --fail-on-regression {gate:g}; cases >= "
        f"{MIN_CASE_MS * 1e3:.0f} us of the baseline sweep.",
        "",
        "| pair | cases | median change % | flagged | change > 6 % | of those not flagged | misses |",
        "|---|---|---|---|---|---|---|",
        *(d.line for d in detections),
    ]
    return "\n".join(lines)


@dataclass(frozen=True)
class Spinner:
    """The kernel injected after run() and its measured rate."""

    spin: Callable[[int], None]
    cycles_per_ms: float


def gpu_spinner() -> Spinner:
    """torch.cuda._sleep and its cycles per ms: median of 5 event-timed spins of 10M cycles."""
    import torch

    cycles, times = 10_000_000, []
    torch.cuda._sleep(cycles)
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return Spinner(torch.cuda._sleep, cycles / statistics.median(times))


def sweep(spec, out: Path, argv: Sequence[str]) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    return bench_common.main_for(spec, ["--preset", "default", "--output", str(out), *argv])


def baseline_sweeps(out_dir: Path, argv: Sequence[str], plans) -> dict[str, dict[tuple, float]]:
    """Sweep A of each script's subset; keep its cases >= 50 us (their rows copied to A/)."""
    kept: dict[str, dict[tuple, float]] = {}
    for name, (spec, subset) in plans.items():
        everything = out_dir / "A_all" / f"{name}.csv"
        sweep(spec, everything, [*argv, *(["--filter", subset] if subset else [])])
        kept[name] = long_cases(read_rows(everything), spec.case_fields)
        if not kept[name]:
            continue  # no case >= 50 us: the script takes no part in the gates
        (out_dir / "A").mkdir(parents=True, exist_ok=True)

        def keep(row, keys=kept[name], fields=spec.case_fields) -> bool:
            return case_key(row, fields) in keys

        filtered_copy(everything, out_dir / "A" / f"{name}.csv", keep)
    return kept


def run_sweeps(out_dir: Path, argv: Sequence[str], plans, make_spinner=gpu_spinner) -> None:
    """A, then p3, p5, p8, then A2; each over the cases >= 50 us of A.  ``plans``: script
    name -> (its BenchmarkSpec, the --filter of its subset)."""
    kept = baseline_sweeps(out_dir, argv, plans)
    spinner = make_spinner()
    print(f"spin rate: {spinner.cycles_per_ms:,.0f} cycles per ms", flush=True)
    for label, percent in [*((f"p{p:g}", p) for p in PERCENTS), ("A2", 0.0)]:
        for name, (spec, _) in plans.items():
            cycles = {
                key: spin_cycles(percent, ms, spinner.cycles_per_ms) if percent else 0
                for key, ms in kept[name].items()
            }
            if cycles:
                sweep(
                    slowed_spec(spec, cycles, spinner.spin), out_dir / label / f"{name}.csv", argv
                )


def default_plans(all_cases: bool = False):
    """Each script's spec and its subset's --filter ("" with ``all_cases``: the whole preset)."""
    return {
        name: (importlib.import_module(name).SPEC, "" if all_cases else subset)
        for name, subset in SUBSET.items()
    }


def run_gate(
    out_dir: Path, label: str, gate: float, summarizer: Path = SUMMARIZER, tag: str = ""
) -> list[GateRow]:
    baseline = sorted((out_dir / "A").glob("*.csv"))
    candidate = [out_dir / label / path.name for path in baseline]
    report = out_dir / f"gate_A_{label}{tag}.json"
    command = [
        sys.executable, str(summarizer),
        "--baseline", *map(str, baseline), "--candidate", *map(str, candidate),
        "--fail-on-regression", f"{gate:g}",
        "--output", str(out_dir / f"gate_A_{label}{tag}.md"), "--json", str(report),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode == 2:
        raise SystemExit(f"summarize_results.py failed on {label}: {done.stderr.strip()}")
    return gate_rows(json.loads(report.read_text()))


def main(argv: Sequence[str] | None = None, plans=None, make_spinner=gpu_spinner) -> int:
    """The command line; ``plans`` and ``make_spinner`` are seams for a CPU test."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--gate", type=float, default=5.0, help="--fail-on-regression (default 5)")
    parser.add_argument("--gate-only", action="store_true", help="gate the CSVs in OUT_DIR again")
    parser.add_argument(
        "--summarizer",
        type=Path,
        default=SUMMARIZER,
        help="the summarize_results.py that gates (default this tree's; an older checkout's "
        "gives the 'before' column)",
    )
    parser.add_argument(
        "--tag",
        default="",
        help="suffix of the gate reports and table names, so a second gate keeps the first's",
    )
    parser.add_argument("--min-time-ms", default="500", help="passed to every sweep (default 500)")
    parser.add_argument(
        "--all-cases",
        action="store_true",
        help="every default case, not the subset (~61 cases >= 50 us: ~7.5 min on a fresh "
        "H200, ~4.5 min with the JIT cache)",
    )
    args = parser.parse_args(argv)
    if not args.summarizer.is_file():
        parser.error(f"--summarizer {args.summarizer}: no such file")
    if not args.gate_only:
        sweep_argv = ["--no-check", "--min-time-ms", args.min_time_ms]
        plans = plans or default_plans(args.all_cases)
        run_sweeps(args.out_dir, sweep_argv, plans, make_spinner)
    pairs = [*(f"p{p:g}" for p in PERCENTS), "A2"]
    detections = [
        detection(
            f"A vs {label}", run_gate(args.out_dir, label, args.gate, args.summarizer, args.tag)
        )
        for label in pairs
    ]
    text = table(detections, args.gate)
    aa = detections[-1]
    text += f"\n\nA/A false alarms: {aa.flagged} of {aa.cases} cases.\n"
    (args.out_dir / f"inject_slowdown{args.tag}.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
