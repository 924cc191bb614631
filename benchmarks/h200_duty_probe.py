"""Do the cold-L2 references disagree on large cases because of how busy they keep the GPU?

`h200_validate.py` (v7, harness 0.3.0) found three large HBM-bound cases where the harness
reads 3.8-4.2 % below the queue-share reference (back-to-back (flush, run()) pairs) while
agreeing within 0.2-1.6 % with the per-call event reference (a GPU spin between calls).
Suspect: power or clocks under an unbroken stream of HBM-saturating calls.  This probe
measures, in one process and in rounds, each case by:

* ``harness``    -- ``bench_timing.measure`` with default options (the function behind time_ms);
* ``queue``      -- the queue-share reference of ``h200_validate.py``;
* ``queue+gap``  -- ``h200_validate.queue_share_ms`` with a GPU spin of ``--gap-us`` before
  every flush (in both block kinds, so the spin cancels in the difference): the load broken
  up; 20 pairs a block, where ``queue`` sizes its blocks to ~20 ms;
* ``per-call``   -- ``h200_validate``'s per-call event reference;

and, for each, the mean SM clock, memory clock, power and temperature that ``nvidia-smi``
sampled (every 20 ms) while it ran.

    python benchmarks/h200_duty_probe.py --rounds 3 --gap-us 50 500
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CASES = (
    ("bench_batch_decode", dict(batch_size=256, seq_len_q=1, seq_len_kv=8192, num_qo_heads=32, num_kv_heads=8, head_dim=64)),
    ("bench_batch_prefill_ragged", dict(batch_size=64, seq_len=1024, num_qo_heads=32, num_kv_heads=4, head_dim_qk=192, head_dim_vo=128)),
    ("bench_batch_mla", dict(batch_size=64, seq_len=32768, num_heads=16, head_dim_ckv=512, head_dim_kpe=64)),
    ("bench_batch_decode", dict(batch_size=64, seq_len_q=1, seq_len_kv=32768, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
)  # fmt: skip
SMI_FIELDS = "timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu"


def smi_means(log: Path, since: float, until: float) -> str:
    """Mean SM MHz / memory MHz / W / degrees C of the nvidia-smi samples in [since, until]."""
    rows = []
    for line in log.read_text().splitlines():
        parts = [p.strip() for p in line.split(",")]
        try:
            whole, _, fraction = parts[0].partition(".")
            stamp = time.mktime(time.strptime(whole, "%Y/%m/%d %H:%M:%S"))
            stamp += float(f"0.{fraction}") if fraction.isdigit() else 0.0
            values = [float(p) for p in parts[1:]]
        except (ValueError, IndexError):
            continue
        if since <= stamp <= until:
            rows.append(values)
    if not rows:
        return "n/a | n/a | n/a | n/a"
    return " | ".join(f"{statistics.fmean(column):.0f}" for column in zip(*rows, strict=True))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--gap-us", type=float, nargs="+", default=[50.0, 500.0])
    parser.add_argument("--smi-log", type=Path, default=Path("/tmp/duty_smi.csv"))
    args = parser.parse_args(argv)

    with args.smi_log.open("w") as log:
        smi = subprocess.Popen(
            [
                "nvidia-smi",
                f"--query-gpu={SMI_FIELDS}",
                "--format=csv,noheader,nounits",
                "-lms",
                "20",
            ],
            stdout=log,
            stderr=subprocess.DEVNULL,
        )
        try:
            probe(args)
        finally:
            smi.terminate()
    return 0


def probe(args) -> None:
    """Each case, ``args.rounds`` times, by every method, with nvidia-smi's means."""
    import h200_validate as hv
    import torch

    import bench_common
    import bench_timing

    device = torch.device("cuda")
    options = bench_timing.TimingOptions()
    timer = bench_timing.make_timer(options, device, lambda _: None)
    per_us = bench_timing.spin_cycles_per_ms() / 1e3
    flush = hv._l2_flush(torch, device)
    methods = {
        "harness": lambda run: bench_timing.measure(run, timer, options).median,
        "queue": lambda run: hv.independent_cold_ms(torch, run, device),
        **{
            f"queue+gap {gap:g} us": (
                lambda run, cycles=int(gap * per_us): hv.queue_share_ms(
                    torch, run, flush, calls=20, reps=9, pause=lambda: torch.cuda._sleep(cycles)
                )
            )
            for gap in args.gap_us
        },
        "per-call": lambda run: hv.events_per_call_cold_ms(torch, run, device),
    }
    print(f"spin: {per_us:.0f} cycles per us; nvidia-smi every 20 ms (wall-clock seconds)\n")
    print("| case | round | method | ms | vs harness % | SM MHz | mem MHz | W | C |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
    for stem, case in CASES:
        spec = importlib.import_module(stem).SPEC
        settings = bench_common.Settings(device, torch.float16, 16, "flashinfer", seed=0)
        run = spec.prepare(case, settings).run
        label = f"{stem[len('bench_batch_') :]} " + ",".join(str(v) for v in case.values())
        for round_ in range(args.rounds):
            harness_ms = None
            for name, method in methods.items():
                since = time.time()
                ms = method(run)
                until = time.time()
                time.sleep(0.05)  # let nvidia-smi catch up before reading its log
                harness_ms = ms if name == "harness" else harness_ms
                print(
                    f"| {label} | {round_} | {name} | {ms:.4f} | {(ms / harness_ms - 1) * 100:+.2f} "
                    f"| {smi_means(args.smi_log, since, until)} |",
                    flush=True,
                )
        run = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    raise SystemExit(main())
