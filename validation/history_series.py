"""A run history on a real GPU: the same sweep again and again, each in a fresh process, as a
CI job would run it, so the change-point detector can be measured on real noise.

    python -m validation history-series OUT_DIR [--for-seconds 480] [--runs 200]
        [--sweep-args '--scripts bench_batch_decode bench_batch_prefill_ragged ...']
    python -m validation history-series OUT_DIR --gate 5      # no GPU: the A/A gate table

Each run is ``bench_all.py SWEEP_ARGS --output-dir OUT_DIR/runs/<UTC time>``; no new run
starts once ``--for-seconds`` have passed, so a device call cut at its limit keeps every whole
run.  ``benchmarks/history_detection.py --save-real OUT_DIR/runs`` makes them the fixture its
``--real`` reads (steps are injected there; the runs themselves are step-free).  Exit 0 when every run exited 0, else 1; 2 bad
arguments, or sweep options the first run refused.

``--gate PCT`` runs nothing on the GPU: it compares each run of OUT_DIR/runs with the next
(A/A pairs) by ``summarize_results.py --fail-on-regression PCT``, once alone and once with
``--noise-from`` a history store of every other run (the pair left out), and writes
OUT_DIR/gate.md: how many pairs and cases failed each way.
"""

from __future__ import annotations

import argparse
import shlex
import time
from collections.abc import Sequence
from pathlib import Path

from validation.running import python, run_logged, tail

SWEEP_ARGS = (
    "--scripts bench_batch_decode bench_batch_prefill_ragged --preset default "
    "--min-time-ms 100 --no-check"
)  # memory-bound decode and power-capped prefill; a fifth of the default timing budget


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m validation history-series", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("out", type=Path, help="folder for runs/ and the logs")
    parser.add_argument("--for-seconds", type=float, default=480.0)
    parser.add_argument("--runs", type=int, default=200, help="at most this many runs")
    parser.add_argument("--run-timeout", type=float, default=240.0, help="seconds per run")
    parser.add_argument("--sweep-args", default=SWEEP_ARGS)
    parser.add_argument("--gate", type=float, metavar="PCT", help="the A/A gate table instead")
    arguments = parser.parse_args(argv)
    if arguments.runs < 1 or arguments.for_seconds <= 0:
        parser.error("--runs and --for-seconds must be positive")
    return arguments


def main(argv: Sequence[str] | None = None) -> int:
    arguments = parse_args(argv or [])
    if arguments.gate is not None:
        return gate_table(arguments.out, arguments.gate)
    runs = arguments.out / "runs"
    deadline = time.monotonic() + arguments.for_seconds
    failed = 0
    for index in range(arguments.runs):
        if time.monotonic() >= deadline:
            break
        name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{index:03d}"  # sorts by time
        argv = python(
            "bench_all.py", *shlex.split(arguments.sweep_args), "--output-dir", str(runs / name)
        )
        done = run_logged(argv, arguments.out / "logs" / f"{name}.log", arguments.run_timeout)
        failed += done.exit_code != 0
        print(f"run {index + 1} ({name}): exit {done.exit_code}, {done.wall_s:.1f} s", flush=True)
        if done.exit_code:
            print(tail(arguments.out / "logs" / f"{name}.log", 5))
        if done.exit_code == 2:  # the sweep's options were refused: every run would be
            return 2
    return 1 if failed else 0


def gate_table(out: Path, gate_pct: float) -> int:
    """The A/A gate over consecutive runs, without and with --noise-from; OUT/gate.md."""
    import json
    import subprocess
    import tempfile

    folder = out / "runs"
    runs = sorted(path for path in folder.iterdir() if path.is_dir()) if folder.is_dir() else []
    if len(runs) < 3:
        print(f"--gate: fewer than 3 runs in {out / 'runs'}")
        return 2
    counts = {"alone": [0, 0], "--noise-from": [0, 0]}  # failing pairs, failing cases
    with tempfile.TemporaryDirectory() as scratch:
        for first, second in zip(runs, runs[1:], strict=False):
            store = Path(scratch) / f"{first.name}.sqlite"
            others = [str(run) for run in runs if run not in (first, second)]
            add = ["-m", "fi_attn_bench.history", "add", *others, "--store", str(store)]
            subprocess.run(python(*add), check=True, capture_output=True)
            for way, extra in (("alone", []), ("--noise-from", ["--noise-from", str(store)])):
                report = Path(scratch) / "r.json"
                command = python(
                    "summarize_results.py", "--baseline", str(first), "--candidate", str(second),
                    "--fail-on-regression", f"{gate_pct:g}", "--output", str(report.with_suffix(".md")),
                    "--json", str(report), *extra,
                )  # fmt: skip
                code = subprocess.run(command, capture_output=True).returncode
                matched = json.loads(report.read_text())["matched"]
                counts[way][0] += code == 1
                counts[way][1] += sum(case["state"] == "regression" for case in matched)
                report.unlink()
    lines = [
        f"A/A pairs: {len(runs) - 1} (each run of {out / 'runs'} against the next), "
        f"gate {gate_pct:g} %",
        "",
        "| gate | pairs failing | cases failing |",
        "|---|---:|---:|",
        *(f"| {way} | {pairs} | {cases} |" for way, (pairs, cases) in counts.items()),
    ]
    (out / "gate.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0
