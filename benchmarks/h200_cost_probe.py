"""Where a sweep's time goes that is not a timed run(): process start, profiler start and
stop, trace reading (of real decode calls too), the L2 flush.  Prints a short Markdown report (run on a GPU machine).

    python benchmarks/h200_cost_probe.py [--calls 1000 4000 16000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STARTUP = """
import time, json
t = [time.perf_counter()]
import torch; t.append(time.perf_counter())
torch.zeros(1, device="cuda"); torch.cuda.synchronize(); t.append(time.perf_counter())
try:
    import flashinfer  # noqa: F401
except Exception:
    pass
t.append(time.perf_counter())
import bench_common  # noqa: F401
t.append(time.perf_counter())
print(json.dumps([b - a for a, b in zip(t, t[1:])]))
"""


def startup_table() -> list[str]:
    """Seconds for import torch, CUDA context, import flashinfer, the harness's own modules."""
    import json

    runs = []
    for _ in range(3):
        started = time.perf_counter()
        out = subprocess.run(
            [sys.executable, "-c", STARTUP], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        total = time.perf_counter() - started
        runs.append([*json.loads(out.strip().splitlines()[-1]), total])
    names = ["import torch", "CUDA context", "import flashinfer", "import bench_common", "total"]
    best = [min(r[i] for r in runs) for i in range(len(names))]
    return [
        "| step | best of 3, s |",
        "|---|---:|",
        *(f"| {n} | {b:.2f} |" for n, b in zip(names, best, strict=True)),
    ]


def profiler_table(call_counts) -> list[str]:
    """Wall ms of profiler start, stop and reading for loops of N event-timed tiny calls."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import bench_timing as bt

    x = torch.randn(1024, device="cuda")
    rows = [
        "| calls | loop ms | start ms | stop ms | read ms | raw events | device events |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for calls in (0, *call_counts):
        timings = []
        for _ in range(3):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            prof = profile(activities=[ProfilerActivity.CUDA])
            prof.__enter__()
            t1 = time.perf_counter()
            bt.enqueue_calls(lambda: x.add_(1.0), calls, before=lambda: x.mul_(0.5))
            torch.cuda.synchronize()
            t2 = time.perf_counter()
            prof.__exit__(None, None, None)
            t3 = time.perf_counter()
            raw = list(prof.profiler.kineto_results.events())
            events = bt.device_events_from_kineto(raw)
            t4 = time.perf_counter()
            timings.append(((t2 - t1), (t1 - t0), (t3 - t2), (t4 - t3), len(raw), len(events)))
        loop, start, stop, read, raw, dev = (
            statistics.median(c) for c in zip(*timings, strict=True)
        )
        rows.append(
            f"| {calls} | {loop * 1e3:.0f} | {start * 1e3:.1f} | {stop * 1e3:.1f} | "
            f"{read * 1e3:.1f} | {raw:.0f} | {dev:.0f} |"
        )
    return rows


KERNELS_ONLY = {"CONCURRENT_KERNEL", "GPU_MEMSET", "GPU_MEMCPY"}


def _decode_run():
    """run() of the smallest default decode case (the one whose samples cost the most)."""
    import torch

    import bench_batch_decode
    import bench_common

    case = min(bench_batch_decode.SPEC.presets["default"], key=lambda c: c["seq_len_kv"])
    settings = bench_common.Settings(torch.device("cuda"), torch.float16, 16, "flashinfer", 0)
    return case, bench_batch_decode.SPEC.prepare(case, settings).run


def readout_table(call_counts) -> list[str]:
    """Per timed call of the profiler timer's own sequence (flush, decode run(), event):
    profiler stop, kineto event listing, device-event extraction and attribution, by the
    activities recorded (all CUDA ones, or kernels/memsets/memcpys only where this torch
    takes an activity filter)."""
    import collections

    import torch
    from torch.profiler import ProfilerActivity, profile

    import bench_timing as bt

    case, run = _decode_run()
    flusher = bt.L2Flusher(torch.device("cuda"))
    for _ in range(20):
        flusher.flush()
        run()
    variants = {"all CUDA activities": [ProfilerActivity.CUDA]}
    filtered = [{ProfilerActivity.CUDA: sorted(KERNELS_ONLY)}]  # torch >= 2.12's filter form
    try:
        with profile(activities=filtered):
            run()
        variants["kernels, memsets, memcpys only"] = filtered
    except Exception as exc:  # noqa: BLE001 - an older torch: say so and go on
        print(f"activity filter not taken by torch {torch.__version__}: {exc!r}"[:300])
    rows = [
        f"case: {case}",
        "",
        "| activities | calls | loop ms | stop us/call | list us/call | extract us/call "
        "| attribute us/call | raw events/call | by name |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, activities in variants.items():
        for calls in call_counts:
            torch.cuda.synchronize()
            prof = profile(activities=activities)
            prof.__enter__()
            t0 = time.perf_counter()
            bt.enqueue_chain(run, calls, before=flusher.flush)
            torch.cuda.synchronize()
            t1 = time.perf_counter()
            prof.__exit__(None, None, None)
            t2 = time.perf_counter()
            raw = list(prof.profiler.kineto_results.events())
            t3 = time.perf_counter()
            events = bt.device_events_from_kineto(raw)
            t4 = time.perf_counter()
            cal = bt.Calibration(call_count=None, flush_count=1)
            batches = bt.attribute_recording(events, [calls], cal, attribution="stream")
            t5 = time.perf_counter()
            kinds = collections.Counter(  # what the trace records per call, by name
                bt.shorten_kernel_name(e.name(), 40) for e in raw
            )
            per = lambda a, b, n=calls: (b - a) * 1e6 / n  # noqa: E731
            median_us = statistics.median(batches[0].samples_ms) * 1e3
            rows.append(
                f"| {name} | {calls} | {(t1 - t0) * 1e3:.0f} | {per(t1, t2):.1f} | "
                f"{per(t2, t3):.1f} | {per(t3, t4):.1f} | {per(t4, t5):.1f} | "
                f"{len(raw) / calls:.1f} | "
                + ", ".join(f"{k} {v / calls:.2f}" for k, v in kinds.most_common())
                + f" (median {median_us:.2f} us) |"
            )
    return rows


FIRST_SESSION = """
import json, sys, threading, time
import torch
try:
    import flashinfer  # noqa: F401  (as in a sweep: its modules loaded before the session)
except Exception:
    pass
from torch.profiler import ProfilerActivity, profile
torch.zeros(1, device="cuda"); torch.cuda.synchronize()

def session():
    marks = [time.perf_counter()]
    prof = profile(activities=[ProfilerActivity.CUDA])
    prof.prepare_trace(); marks.append(time.perf_counter())
    prof.start_trace(); marks.append(time.perf_counter())
    torch.zeros(1, device="cuda").add_(1); torch.cuda.synchronize()
    prof.stop_trace(); marks.append(time.perf_counter())
    return [b - a for a, b in zip(marks, marks[1:])]

def work(seconds):  # pure-Python work: how far it gets shows whether the GIL was free
    end, count = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        count += 1
    return count

if sys.argv[1] == "serial":
    first = session(); second = session()
    print(json.dumps({"first": first, "second": second, "work": work(2.0)}))
else:
    box = {}
    thread = threading.Thread(target=lambda: box.setdefault("first", session()))
    started = time.perf_counter(); thread.start(); count = work(2.0); thread.join()
    print(json.dumps({"first": box["first"], "work": count, "wall": time.perf_counter() - started}))
"""


def first_session_table() -> list[str]:
    """The first profiler session of a process, split into prepare / start / stop, and whether
    it can run in a thread while the main thread works (its host work releases the GIL)."""
    import json

    def child(mode: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-c", FIRST_SESSION, mode],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return json.loads(out.strip().splitlines()[-1])

    serial, threaded = child("serial"), child("thread")
    row = lambda name, s: f"| {name} | {s[0]:.2f} | {s[1]:.2f} | {s[2]:.2f} |"  # noqa: E731
    return [
        "| session | prepare s | start s | stop s |",
        "|---|---:|---:|---:|",
        row("first (serial)", serial["first"]),
        row("second (serial)", serial["second"]),
        row("first (in a thread)", threaded["first"]),
        "",
        f"2 s of pure-Python counting on the main thread: {serial['work']:,} alone, "
        f"{threaded['work']:,} while the thread ran the first session "
        f"(thread + counting took {threaded['wall']:.2f} s of wall time)",
    ]


def flush_table() -> list[str]:
    """GPU us of L2 flush variants (CUDA events, median of 50)."""
    import torch

    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    variants = {
        "bitwise_not_ 2x L2 (harness 0.2)": (2 * l2, lambda b: b.bitwise_not_()),
        "fill_ 2x L2 (harness 0.3)": (2 * l2, lambda b: b.fill_(7)),
        "zero_ 2x L2": (2 * l2, lambda b: b.zero_()),
        "zero_ 1x L2 (nvbench)": (l2, lambda b: b.zero_()),
    }
    rows = [f"L2 reported: {l2 / 2**20:.1f} MiB", "", "| flush | GPU us |", "|---|---:|"]
    for name, (size, body) in variants.items():
        buffer = torch.empty(size, dtype=torch.uint8, device="cuda")
        for _ in range(5):
            body(buffer)
        pairs = []
        for _ in range(50):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            body(buffer)
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize()
        us = statistics.median(s.elapsed_time(e) for s, e in pairs) * 1e3
        rows.append(f"| {name} | {us:.1f} |")
        del buffer
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, nargs="+", default=[1000, 4000, 16000])
    parser.add_argument(
        "--readout-only", action="store_true", help="only the readout of real decode calls"
    )
    parser.add_argument(
        "--first-session-only", action="store_true", help="only the first profiler session"
    )
    args = parser.parse_args()
    import torch

    if args.first_session_only:
        print("## First profiler session of a process\n", *first_session_table(), sep="\n")
        return 0

    print(f"# Cost probe on {torch.cuda.get_device_name(0)}, torch {torch.__version__}\n")
    started = time.perf_counter()
    torch.zeros(1, device="cuda")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]):
        torch.zeros(1, device="cuda").add_(1)
    print(f"first profiler session of the process: {time.perf_counter() - started:.2f} s\n")
    print("## Profiler readout of decode calls (flush, run(), event)\n")
    print(*readout_table(args.calls), sep="\n")
    if args.readout_only:
        return 0
    print("## Process start\n", *startup_table(), sep="\n")
    print("\n## Profiler start, stop and reading (tiny kernel, flush stand-in, event pair)\n")
    print(*profiler_table(args.calls), sep="\n")
    print("\n## L2 flush\n", *flush_table(), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
