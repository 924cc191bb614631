"""Where a recording's readout time goes, torch profiler against CUPTI (run on a GPU).

    python benchmarks/profiler_readout.py [--calls 2000] [--repeats 3]

Times, for the same queued calls of one decode case (bs 16, kv 1024, hd 128; L2 flush
before each call, as the timers queue them): the torch profiler's stop, its
``kineto_results.events()``, the harness's extraction of device events and their split into
calls; and the CUPTI tracer's stop (flush and record conversion) and its split into calls.
Prints one line per part with the median over ``--repeats`` recordings, in ms.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def decode_run(device):
    from fi_attn_bench.apis import decode
    from fi_attn_bench.cases.inputs import prepare_case
    from fi_attn_bench.cases.spec import Settings

    case = decode.decode_case(batch_size=16, seq_len_kv=1024, head_dim=128)
    return prepare_case(decode.SPEC, case, Settings(device, torch.float16, 16, "flashinfer")).run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    asked = parser.parse_args()
    from torch.profiler import ProfilerActivity, profile

    from fi_attn_bench.device.cupti import CuptiTracer, MemsetMarker
    from fi_attn_bench.timing.activity import split_calls
    from fi_attn_bench.timing.l2 import L2Flusher
    from fi_attn_bench.timing.trace import Calibration, attribute_recording, extract_device_events

    device = torch.device("cuda")
    run, flush = decode_run(device), L2Flusher(device).flush
    parts: dict[str, list[float]] = {}

    def took(name, started):
        parts.setdefault(name, []).append((time.perf_counter() - started) * 1e3)

    for _ in range(asked.repeats):
        torch.cuda.synchronize()
        prof = profile(activities=[ProfilerActivity.CUDA])
        prof.__enter__()
        started = time.perf_counter()
        for _ in range(asked.calls):
            flush()
            run()
        torch.cuda.synchronize()
        took("profiler: queue and run", started)
        started = time.perf_counter()
        prof.__exit__(None, None, None)
        took("profiler: stop", started)
        started = time.perf_counter()
        raw = list(prof.profiler.kineto_results.events())
        took(f"profiler: events() ({len(raw)} events)", started)
        started = time.perf_counter()
        events = extract_device_events(prof)
        took(f"profiler: device events ({len(events)})", started)
        started = time.perf_counter()
        attribute_recording(events, [asked.calls], Calibration(None, flush_count=1))
        took("profiler: split into calls", started)

        tracer, marker = CuptiTracer(), MemsetMarker(device)
        torch.cuda.synchronize()
        tracer.start()
        started = time.perf_counter()
        for index in range(asked.calls):  # as the cupti timer queues them
            marker(index)
            flush()
            run()
        marker(asked.calls)
        torch.cuda.synchronize()
        took("cupti: queue and run", started)
        started = time.perf_counter()
        records = tracer.stop()
        took(f"cupti: stop ({len(records)} records)", started)
        started = time.perf_counter()
        split_calls(records, [asked.calls])  # the flush counted with run(): cost is the same
        took("cupti: split into calls", started)
    for name, values in parts.items():
        print(f"{name}: {statistics.median(values):.1f} ms (of {len(values)})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
