"""Why do the profiler's and CUDA events' cold-L2 times of the same run() differ?

`h200_validate.py` found the harness's profiler time (kernel span, L2 flushed before each
call) 1-20% below CUDA events around the same run() with the same flush.  This script
times a few default cases every way at once, in one process, so the cause can be read
off one table:

  A  harness: profiler, span          B  harness: profiler, sum      C  harness: events
  D  events, back-to-back queue (flush, spin, start, run, stop) x N
  E  events, synchronized after every call (flush, spin, start, run, stop, sync)
  F  the kernels of D as the profiler sees them (sum of run()'s kernel durations)

If F ~ D, run()'s kernels really run longer in D's loop than in A's; if F ~ A, the events
add time that is not run()'s kernels.

    python benchmarks/h200_timing_diagnose.py
"""

from __future__ import annotations

import importlib
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = (
    ("bench_batch_decode", dict(batch_size=16, seq_len_q=1, seq_len_kv=2048, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_decode", dict(batch_size=256, seq_len_q=1, seq_len_kv=8192, num_qo_heads=32, num_kv_heads=8, head_dim=64)),
    ("bench_batch_prefill_paged", dict(batch_size=16, seq_len=4096, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_mla", dict(batch_size=256, seq_len=8192, num_heads=128, head_dim_ckv=512, head_dim_kpe=64)),
    ("bench_batch_mla", dict(batch_size=16, seq_len=1024, num_heads=128, head_dim_ckv=512, head_dim_kpe=64)),
)  # fmt: skip


def clocks() -> str:
    query = "--query-gpu=clocks.sm,clocks.mem,power.draw,temperature.gpu"
    try:
        out = subprocess.run(
            ["nvidia-smi", query, "--format=csv,noheader"], capture_output=True, text=True
        )
        return out.stdout.strip()
    except OSError:
        return "n/a"


def harness(prepared_run, device, **overrides) -> float:
    import bench_timing as bt

    options = bt.TimingOptions(**overrides)
    timer = bt.make_timer(options, device, lambda _: None)
    return bt.measure(prepared_run, timer, options).median


def events_loop(torch, run, flush, reps: int, sync_each: bool) -> float:
    pairs = []
    for _ in range(reps):
        flush.bitwise_not_()
        torch.cuda._sleep(50_000)
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        pairs.append((start, stop))
        if sync_each:
            stop.synchronize()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in pairs)


def kernels_of_events_loop(torch, run, flush, reps: int) -> float:
    """Profile loop D; per call, sum the kernels launched by run() (not flush/spin)."""
    from torch.profiler import ProfilerActivity, profile

    import bench_timing as bt

    one = bt.profile_device_events(run, torch.cuda.synchronize)
    names = {e.name for e in one}
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        events_loop(torch, run, flush, reps, sync_each=False)
    events = [e for e in bt.extract_device_events(prof) if e.name in names]
    events.sort(key=lambda e: e.start_ns)
    per = len(one)
    calls = [events[i : i + per] for i in range(0, len(events) - per + 1, per)]
    return statistics.median(sum(e.duration_ns for e in c) / 1e6 for c in calls)


def main() -> int:
    import torch

    import bench_common

    device = torch.device("cuda")
    flush = torch.empty(
        2 * torch.cuda.get_device_properties(device).L2_cache_size, dtype=torch.uint8, device=device
    )
    print(f"clocks before: {clocks()}")
    print(
        "| case | A prof span | B prof sum | C harness events | D events queue | E events sync | F kernels of D |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for module_name, case in CASES:
        spec = importlib.import_module(module_name).SPEC
        settings = bench_common.Settings(device, torch.float16, 16, "flashinfer", seed=0)
        prepared = spec.prepare(case, settings)
        run = prepared.run
        a = harness(run, device, timer="profiler", l2="cold", attribution="span")
        b = harness(run, device, timer="profiler", l2="cold", attribution="sum")
        c = harness(run, device, timer="events", l2="cold")
        for _ in range(50):
            flush.bitwise_not_()
            run()
        d = events_loop(torch, run, flush, 100, sync_each=False)
        e = events_loop(torch, run, flush, 100, sync_each=True)
        f = kernels_of_events_loop(torch, run, flush, 50)
        text = ",".join(f"{k}={v}" for k, v in case.items())
        print(
            f"| {module_name[11:]} {text} | {a:.4f} | {b:.4f} | {c:.4f} | {d:.4f} | {e:.4f} | {f:.4f} |",
            flush=True,
        )
        del prepared, run
        torch.cuda.empty_cache()
    print(f"clocks after: {clocks()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
