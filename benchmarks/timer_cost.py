"""What a sweep costs with each GPU timer, and whether the timers agree (run on a GPU).

    python benchmarks/timer_cost.py --out DIR [--timers cupti,profiler] [--rounds 1]
        [--scripts decode,paged,ragged,mla] [--warm] [-- extra sweep arguments]

``--warm`` first runs each script once with the events timer and a tiny per-case budget, so
that FlashInfer's JIT compiles every kernel variant before anything is measured.  Then, for
each round, each script's default sweep runs once per timer, the timers interleaved (script
by script), each in a process of its own (CUPTI keeps one tracer per process).  It prints and
writes ``DIR/timer_cost.json``:

* per sweep: wall time, time inside timed calls and their ratio, from the sweep's own
  "Sweep wall time" line, and the per-phase cost columns summed over its rows;
* per script, for the first two timers: the per-case ratio of time_ms (second / first), its
  median, the worst memory-bound case (pct_peak_bw >= pct_peak_tflops), and the cases whose
  kernel lists differ (memset/memcpy names compared by kind only).

Targets: wall/timed <= 1.5 (cupti), <= 2.0 (profiler); median ratio within
+-1 %, memory-bound cases within +-3 %, the same kernel lists.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time

SCRIPTS = {
    "decode": "bench_batch_decode.py",
    "paged": "bench_batch_prefill_paged.py",
    "ragged": "bench_batch_prefill_ragged.py",
    "mla": "bench_batch_mla.py",
}
COST_LINE = re.compile(
    r"Sweep wall time ([\d.]+) s; time inside timed runs ([\d.]+) s(?:.*?by phase: (.*))?$"
)


def run_sweep(script: str, out_csv: str, extra: list[str], log_path: str) -> dict:
    command = [sys.executable, script, "--output", out_csv, "--force", *extra]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    process_s = time.perf_counter() - started
    with open(log_path, "w", encoding="utf-8") as handle:
        handle.write(done.stdout + "\n--- stderr\n" + done.stderr)
    found = {"command": " ".join(command), "exit": done.returncode, "process_s": process_s}
    for line in done.stdout.splitlines():
        match = COST_LINE.search(line)
        if match:
            wall, timed = float(match.group(1)), float(match.group(2))
            found.update(wall_s=wall, timed_s=timed, ratio=wall / timed if timed else None)
            found["phases"] = match.group(3) or ""
    return found


def read_rows(path: str) -> list[dict[str, str]]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8", newline="") as handle:
        return [row for row in csv.DictReader(handle) if row.get("status") == "ok"]


def cost_totals(rows: list[dict[str, str]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for row in rows:
        for name, value in row.items():
            if name.startswith("cost_") and value:
                totals[name] = totals.get(name, 0.0) + float(value)
    return {name: round(value, 3) for name, value in totals.items()}


def case_key(row: dict[str, str], fields: list[str]) -> tuple:
    return tuple(row.get(name, "") for name in fields)


def kernel_set(text: str) -> tuple[str, ...]:
    """The kernel list with memset/memcpy names by kind (the profiler and CUPTI word them
    differently)."""
    names = [n.strip() for n in text.split(";") if n.strip()]
    return tuple(
        sorted(n.split(" ")[0] if n.startswith(("Memset", "Memcpy")) else n for n in names)
    )


def compare(first: list[dict], second: list[dict], fields: list[str]) -> dict:
    base = {case_key(row, fields): row for row in first}
    ratios, memory, differing = [], [], []
    for row in second:
        other = base.get(case_key(row, fields))
        if other is None:
            continue
        ratio = float(row["time_ms"]) / float(other["time_ms"])
        ratios.append(ratio)
        try:
            bound = float(other["pct_peak_bw"]) >= float(other["pct_peak_tflops"])
        except (KeyError, ValueError):
            bound = False
        if bound:
            memory.append(ratio)
        if kernel_set(row.get("kernels", "")) != kernel_set(other.get("kernels", "")):
            differing.append([row.get("kernels", ""), other.get("kernels", "")])
    worst = max(memory, key=lambda r: abs(r - 1.0)) if memory else None
    return {
        "cases": len(ratios),
        "median_ratio": statistics.median(ratios) if ratios else None,
        "min_ratio": min(ratios) if ratios else None,
        "max_ratio": max(ratios) if ratios else None,
        "memory_bound_cases": len(memory),
        "worst_memory_bound_ratio": worst,
        "kernel_lists_differ": len(differing),
        "differing_examples": differing[:3],
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--timers", default="cupti,profiler")
    parser.add_argument("--scripts", default=",".join(SCRIPTS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--warm", action="store_true")
    asked = parser.parse_args(argv)
    os.makedirs(asked.out, exist_ok=True)
    timers = asked.timers.split(",")
    scripts = asked.scripts.split(",")
    report: dict = {"sweeps": [], "fidelity": {}}
    if asked.warm:
        for name in scripts:
            quick = ["--timer", "events", "--max-time-per-case", "0.02", "--sustain-ms", "0"]
            out = os.path.join(asked.out, f"warm_{name}.csv")
            found = run_sweep(SCRIPTS[name], out, quick, out + ".log")
            print(f"warm {name}: exit {found['exit']}, {found['process_s']:.1f} s", flush=True)
    for round_index in range(asked.rounds):
        for name in scripts:
            for timer in timers:
                out = os.path.join(asked.out, f"{name}_{timer}_r{round_index}.csv")
                found = run_sweep(SCRIPTS[name], out, ["--timer", timer, *extra], out + ".log")
                found.update(script=name, timer=timer, round=round_index)
                found["cost_columns"] = cost_totals(read_rows(out))
                report["sweeps"].append(found)
                ratio = found.get("ratio")
                print(
                    f"{name} {timer} r{round_index}: exit {found['exit']}, wall "
                    f"{found.get('wall_s', float('nan')):.1f} s, timed "
                    f"{found.get('timed_s', float('nan')):.2f} s, wall/timed "
                    f"{ratio if ratio is None else round(ratio, 2)}; {found.get('phases', '')}",
                    flush=True,
                )
            if len(timers) >= 2:
                first = read_rows(os.path.join(asked.out, f"{name}_{timers[0]}_r{round_index}.csv"))
                second = read_rows(
                    os.path.join(asked.out, f"{name}_{timers[1]}_r{round_index}.csv")
                )
                fields = [k for k in (first[0] if first else {}) if k in _case_fields(first)]
                result = compare(first, second, fields)
                report["fidelity"][f"{name} r{round_index}"] = result
                print(f"  fidelity {timers[1]}/{timers[0]}: {json.dumps(result)[:600]}", flush=True)
            with open(os.path.join(asked.out, "timer_cost.json"), "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
    return 0


def _case_fields(rows: list[dict[str, str]]) -> list[str]:
    """The CSV's case parameters: the columns between ``api`` and ``status``."""
    if not rows:
        return []
    names = list(rows[0])
    return names[names.index("api") + 1 : names.index("status")] + ["impl"] * ("impl" in names)


if __name__ == "__main__":
    raise SystemExit(main())
