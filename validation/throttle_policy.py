"""What --throttle-policy does to compute-bound cases on a power-capped GPU.

A few compute-bound default cases (the H200 held them at its 700 W limit, SM clock 1260-1965
MHz), measured with ``--throttle-policy off``, ``discard`` and ``pause`` in turn, three
rounds (the policies interleaved within each round, so slow drift hits all three alike),
through the scripts' public ``main_for``.  Prints, per case and policy: mean time_ms, its CV
over the rounds, the samples discarded (from the verbose note), mean and min SM clock,
power_capped_pct.  The question: does discarding throttled batches make a case repeat better,
and at what cost in time and in what the median means.

Usage on the GPU machine (about 4-5 min on a fresh H200, JIT included):

    python -m validation throttle-policy OUT_DIR [--rounds 3]

Writes OUT_DIR/<policy>_r<round>/<script>.csv, OUT_DIR/<...>.log and OUT_DIR/throttle_effect.md.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import importlib
import io
import re
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import bench_common  # the public face: main_for

POLICIES = ("off", "discard", "pause")
# Compute-bound default cases that sat at the power limit on the H200 (v10).
CASES: Mapping[str, str] = {
    "bench_batch_prefill_paged": "batch_size=16,seq_len=4096,head_dim=128",
    "bench_batch_prefill_ragged": "batch_size=16,seq_len=4096,head_dim_qk=192",
    "bench_batch_mla": "batch_size=64,seq_len=32768,num_heads=128",
}
CASE_LINE = re.compile(r"^\[\d+/\d+\] (?P<case>[^:]+):")
DISCARDED = re.compile(r"discarded (?P<n>\d+) samples")
ALL_THROTTLED = re.compile(r"every batch ran below .*; all (?P<n>\d+) samples kept")


@dataclass(frozen=True)
class Observation:
    """One case under one policy in one round."""

    script: str
    case: str
    policy: str
    time_ms: float
    discarded: int | None  # None: no note (policy off, or inactive)
    all_throttled: bool
    sm_clock_mean: str
    sm_clock_min: str
    power_capped_pct: str


def notes_by_case(log: str) -> dict[str, tuple[int | None, bool]]:
    """Case text -> (samples discarded, every batch throttled) from a verbose sweep's output."""
    found: dict[str, tuple[int | None, bool]] = {}
    case = None
    for line in log.splitlines():
        match = CASE_LINE.match(line.strip())
        if match:
            case = match["case"]
            found[case] = (None, False)
            continue
        if case is None:
            continue
        if discarded := DISCARDED.search(line):
            found[case] = (int(discarded["n"]), False)
        elif ALL_THROTTLED.search(line):
            found[case] = (0, True)
    return found


def case_text(row: Mapping[str, str], fields: Sequence[str]) -> str:
    return ",".join(f"{f}={int(float(row[f]))}" for f in fields)


def observations(
    script: str, policy: str, rows: Sequence[Mapping[str, str]], fields, log: str
) -> list[Observation]:
    notes = notes_by_case(log)
    found = []
    for row in rows:
        if row["status"] != "ok":
            continue
        text = case_text(row, fields)
        discarded, all_throttled = notes.get(text, (None, False))
        found.append(
            Observation(
                script, text, policy, float(row["time_ms"]), discarded, all_throttled,
                row.get("sm_clock_mean_MHz", ""), row.get("sm_clock_min_MHz", ""),
                row.get("power_capped_pct", ""),
            )
        )  # fmt: skip
    return found


def _mean_text(values: Sequence[str]) -> str:
    numbers = [float(v) for v in values if v not in ("", None)]
    return f"{statistics.fmean(numbers):.0f}" if numbers else "-"


def table(found: Sequence[Observation]) -> str:
    """One line per case and policy: mean time, CV over rounds, what the policy did."""
    lines = [
        "| case | policy | rounds | mean time_ms | CV % | discarded samples (per round) | "
        "SM clock mean / min MHz | power_capped_pct |",
        "|---|---|---|---|---|---|---|---|",
    ]
    keys = dict.fromkeys((o.script, o.case, o.policy) for o in found)
    for script, case, policy in keys:
        group = [o for o in found if (o.script, o.case, o.policy) == (script, case, policy)]
        times = [o.time_ms for o in group]
        mean = statistics.fmean(times)
        cv = statistics.stdev(times) / mean * 100 if len(times) > 1 else float("nan")
        discarded = ", ".join(
            "all kept" if o.all_throttled else ("-" if o.discarded is None else str(o.discarded))
            for o in group
        )
        clocks = f"{_mean_text([o.sm_clock_mean for o in group])} / {_mean_text([o.sm_clock_min for o in group])}"
        capped = _mean_text([o.power_capped_pct for o in group])
        lines.append(
            f"| {script.removeprefix('bench_batch_')} {case} | {policy} | {len(group)} | "
            f"{mean:.4f} | {cv:.2f} | {discarded} | {clocks} | {capped} |"
        )
    return "\n".join(lines)


def run_one(spec, subset: str, policy: str, out: Path) -> tuple[list[dict], str]:
    """One verbose sweep of ``subset`` with ``policy``; its rows and its printed output."""
    out.parent.mkdir(parents=True, exist_ok=True)
    buffer = io.StringIO()
    args = ["--preset", "default", "--filter", subset, "--output", str(out),
            "--throttle-policy", policy, "--verbose", "--no-check"]  # fmt: skip
    with contextlib.redirect_stdout(buffer):
        code = bench_common.main_for(spec, args)
    log = buffer.getvalue()
    out.with_suffix(".log").write_text(log)
    if code not in (0, 1):
        raise SystemExit(f"{spec.script} --throttle-policy {policy}: exit {code}\n{log}")
    with open(out, newline="") as f:
        return list(csv.DictReader(f)), log


def default_plans():
    return {name: (importlib.import_module(name).SPEC, subset) for name, subset in CASES.items()}


def main(argv: Sequence[str] | None = None, plans=None) -> int:
    """The command line; ``plans`` (script name -> (spec, --filter)) is a seam for tests."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    plans = plans or default_plans()
    found: list[Observation] = []
    for round_index in range(1, args.rounds + 1):
        for policy in POLICIES:
            for name, (spec, subset) in plans.items():
                out = args.out_dir / f"{policy}_r{round_index}" / f"{name}.csv"
                rows, log = run_one(spec, subset, policy, out)
                found += observations(name, policy, rows, spec.case_fields, log)
            print(f"round {round_index}, --throttle-policy {policy}: done", file=sys.stderr)
    text = table(found)
    (args.out_dir / "throttle_effect.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
