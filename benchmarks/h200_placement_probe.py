"""Why does a 12 us decode case read 12.1 us in one process and 13.1 us in the next?

`h200_validate.py` (v5) found the default sweep's decode case batch 1, kv 2048, head_dim 64
bimodal across processes (12.1 vs 13.1 us, +8%: a false alarm at `--fail-on-regression 5`)
while each process's own samples agree within 3-4%.  This probe separates the suspects,
for a few short cases, in one process:

* placement: the inputs are built afresh ``--placements`` times (the earlier ones kept
  alive, so each set lands at other addresses); the harness's ``time_ms`` per placement.
* where the time goes: per call, from one profiler recording of the harness's cold-L2
  sequence (flush, run()) x N: flush end -> first kernel start (``lead``), each
  kernel's duration, the gaps between run()'s kernels; medians.

Run it in several processes (``--processes``) to see the between-process part:

    python benchmarks/h200_placement_probe.py --processes 3 --placements 6

``--cases long`` runs two large ragged prefill cases instead (v10: a case at the power cap
reads slower on each later placement, so the shift is the GPU warming, not the addresses).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SHORT_CASES = (
    ("bench_batch_decode", dict(batch_size=1, seq_len_q=1, seq_len_kv=2048, num_qo_heads=32, num_kv_heads=8, head_dim=64)),
    ("bench_batch_decode", dict(batch_size=1, seq_len_q=1, seq_len_kv=2048, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_decode", dict(batch_size=16, seq_len_q=1, seq_len_kv=512, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_prefill_paged", dict(batch_size=4, seq_len=256, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
)  # fmt: skip

# v10: the default sweep's two cases whose time_ms split 4.60 / 4.69 ms (and 1.57 / 1.59 ms)
# between processes while each process's samples agreed within 1-2%.
LONG_CASES = (
    ("bench_batch_prefill_ragged", dict(batch_size=16, seq_len=4096, num_qo_heads=32, num_kv_heads=4, head_dim_qk=192, head_dim_vo=128)),
    ("bench_batch_prefill_ragged", dict(batch_size=64, seq_len=1024, num_qo_heads=32, num_kv_heads=4, head_dim_qk=192, head_dim_vo=128)),
)  # fmt: skip
CASES = {"short": SHORT_CASES, "long": LONG_CASES}


def breakdown(bt, torch, run, flusher, calls: int, events: bool = False) -> dict[str, float]:
    """Median per-call lead gap, kernel durations and inter-kernel gaps (us), cold L2;
    ``events``: a timing event recorded before and after each run(), as the harness does."""
    flush_names = {e.name for e in bt.profile_device_events(flusher.flush, torch.cuda.synchronize)}
    run_count = len(bt.profile_device_events(run, torch.cuda.synchronize))

    pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
             for _ in range(calls)]  # fmt: skip

    def loop():
        torch.cuda._sleep(20_000_000)  # ~10 ms: the CPU queues every call before the GPU starts
        for start, stop in pairs:
            flusher.flush()
            if events:
                start.record()
            run()
            if events:
                stop.record()

    recorded = bt.profile_device_events(loop, torch.cuda.synchronize)
    recorded.sort(key=lambda e: e.start_ns)
    parts: dict[str, list[float]] = {}
    if events:
        parts["event_pair"] = [a.elapsed_time(b) * 1e3 for a, b in pairs]
    for i, event in enumerate(recorded):
        if event.name not in flush_names or i + run_count >= len(recorded):
            continue
        body = recorded[i + 1 : i + 1 + run_count]
        if any(e.name in flush_names for e in body):
            continue
        parts.setdefault("lead", []).append((body[0].start_ns - event.end_ns) / 1e3)
        for k, e in enumerate(body):
            parts.setdefault(f"k{k}", []).append(e.duration_ns / 1e3)
            if k:
                parts.setdefault(f"gap{k}", []).append((e.start_ns - body[k - 1].end_ns) / 1e3)
        parts.setdefault("stream", []).append((body[-1].end_ns - event.end_ns) / 1e3)
    return {name: statistics.median(values) for name, values in parts.items()}


def per_stream(streams: int, calls: int) -> None:
    """The first case on the default stream and on ``streams`` new ones: harness time_ms and
    the per-call breakdown with and without the timing events."""
    import torch

    import bench_common
    import bench_timing as bt

    device = torch.device("cuda")
    options = bt.TimingOptions()
    timer = bt.make_timer(options, device, lambda _: None)
    flusher = bt.L2Flusher(device)
    module_name, case = SHORT_CASES[0]
    settings = bench_common.Settings(device, torch.float16, 16, "flashinfer", seed=0)
    prepared = importlib.import_module(module_name).SPEC.prepare(case, settings)
    for index, stream in enumerate(
        [torch.cuda.current_stream()] + [torch.cuda.Stream() for _ in range(streams)]
    ):
        with torch.cuda.stream(stream):
            median = bt.measure(prepared.run, timer, options).median * 1e3
            for events in (False, True):
                parts = breakdown(bt, torch, prepared.run, flusher, calls, events)
                cells = " ".join(f"{k}={v:.2f}" for k, v in parts.items())
                print(f"| stream {index} | events {events} | {median:.2f} | {cells} |", flush=True)


def one_process(cases: str, placements: int, calls: int) -> None:
    import torch

    import bench_common
    import bench_timing as bt

    device = torch.device("cuda")
    options = bt.TimingOptions()
    timer = bt.make_timer(options, device, lambda _: None)
    flusher = bt.L2Flusher(device)
    keep = []
    for module_name, case in CASES[cases]:
        spec = importlib.import_module(module_name).SPEC
        text = ",".join(
            f"{k}={v}" for k, v in case.items() if k not in ("seq_len_q", "num_qo_heads")
        )
        for placement in range(placements):
            settings = bench_common.Settings(device, torch.float16, 16, "flashinfer", seed=0)
            prepared = spec.prepare(case, settings)
            keep.append(prepared)  # the next placement's tensors land elsewhere
            keep.append(torch.empty(1 << (20 + placement), dtype=torch.uint8, device=device))
            median = bt.measure(prepared.run, timer, options).median * 1e3
            parts = breakdown(bt, torch, prepared.run, flusher, calls)
            cells = " ".join(f"{k}={v:.2f}" for k, v in parts.items())
            print(
                f"| {module_name[11:]} {text} | {placement} | {median:.2f} | {cells} |", flush=True
            )
        keep.clear()
        torch.cuda.empty_cache()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--placements", type=int, default=6)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument(
        "--streams", type=int, default=0, help="the first case on N new streams instead"
    )
    parser.add_argument(
        "--cases", choices=sorted(CASES), default="short", help="which cases (default short)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child or args.processes <= 1:
        if args.streams:
            per_stream(args.streams, args.calls)
        else:
            one_process(args.cases, args.placements, args.calls)
        return 0
    print("| case | placement | harness time_ms (us) | per-call medians (us) |")
    print("|---|---:|---:|---|")
    for process in range(args.processes):
        print(f"| process {process} | | | |", flush=True)
        command = [sys.executable, __file__, "--child", "--placements", str(args.placements)]
        command += ["--calls", str(args.calls), "--streams", str(args.streams)]
        command += ["--cases", args.cases]
        subprocess.run(command, check=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
