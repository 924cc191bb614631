"""Which profiler reading of a cold-L2 run() matches CUDA events with an L2 flush?

`h200_timing_diagnose.py` showed the harness's profiler time below the events reference
for two reasons that one table could not separate: event overhead on small cases, and
run()'s kernels themselves taking longer in the reference's call sequence.  This script
times each case under several call sequences, all queued ahead of the GPU by one long spin
so that no reading contains the CPU's launch of run(), and reads each profile two ways:

  span    first kernel start of run() -> last kernel end of run()
  stream  end of the GPU work just before run() -> last kernel end of run(): the time the
          call held the stream, as a CUDA event pair sees it when the launch is queued

Sequences per call (x N, one profile each):
  plain   flush, run                     (the harness's profiler batch before this change)
  event   flush, event, run, event       (the harness's events timer)
  spin    flush, spin, event, run, event (h200_validate's independent reference)

Columns: R = h200_validate.independent_cold_ms (no profiler), then each sequence/reading
as % difference from R; EV = the events of sequence `event`. Warm: G = CUDA-graph replay
(h200_validate.independent_warm_ms), Wsum = profiler sum of back-to-back calls,
Wstr = profiler stream reading of back-to-back calls (previous call's end -> this end).

    python benchmarks/h200_timing_variants.py
"""

from __future__ import annotations

import importlib
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

CALLS = 60
QUEUE_SPIN_CYCLES = 40_000_000  # ~20 ms at 2 GHz: the CPU queues every call before the GPU starts
REFERENCE_SPIN_CYCLES = 50_000

CASES = (
    ("bench_batch_decode", dict(batch_size=16, seq_len_q=1, seq_len_kv=2048, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_decode", dict(batch_size=64, seq_len_q=1, seq_len_kv=512, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_decode", dict(batch_size=64, seq_len_q=1, seq_len_kv=32768, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_decode", dict(batch_size=256, seq_len_q=1, seq_len_kv=8192, num_qo_heads=32, num_kv_heads=8, head_dim=64)),
    ("bench_batch_prefill_paged", dict(batch_size=1, seq_len=1024, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_prefill_paged", dict(batch_size=16, seq_len=4096, num_qo_heads=32, num_kv_heads=4, head_dim=128)),
    ("bench_batch_prefill_ragged", dict(batch_size=2, seq_len=3000, num_qo_heads=32, num_kv_heads=4, head_dim_qk=192, head_dim_vo=128)),
    ("bench_batch_prefill_ragged", dict(batch_size=16, seq_len=4096, num_qo_heads=32, num_kv_heads=4, head_dim_qk=192, head_dim_vo=128)),
    ("bench_batch_mla", dict(batch_size=16, seq_len=1024, num_heads=128, head_dim_ckv=512, head_dim_kpe=64)),
    ("bench_batch_mla", dict(batch_size=256, seq_len=8192, num_heads=128, head_dim_ckv=512, head_dim_kpe=64)),
)  # fmt: skip


def readings(events, n_before: int, n_run: int, calls: int) -> tuple[float, float] | None:
    """Median span and stream readings (ms) of profiled calls laid out as
    [queue spin] + calls x ([n_before kernels][n_run kernels])."""
    per = n_before + n_run
    body = events[len(events) - calls * per :]
    if len(events) - calls * per not in (0, 1) or any(
        body[i].start_ns < body[i - 1].start_ns for i in range(1, len(body))
    ):
        return None
    spans, streams = [], []
    previous_end = events[0].end_ns if len(events) > calls * per else None
    for index in range(calls):
        group = body[index * per : (index + 1) * per]
        before, run = group[:n_before], group[n_before:]
        end = max(e.end_ns for e in run)
        spans.append((end - min(e.start_ns for e in run)) / 1e6)
        predecessor = max(e.end_ns for e in before) if before else previous_end
        if predecessor is not None:
            streams.append((end - predecessor) / 1e6)
        previous_end = end
    return statistics.median(spans), statistics.median(streams) if streams else float("nan")


def main() -> int:
    import h200_validate as hv
    import torch
    from h200_timing_diagnose import clocks

    import bench_common
    import bench_timing as bt

    device = torch.device("cuda")
    sync = torch.cuda.synchronize
    flush = hv._l2_flush_buffer(torch, device)

    def spin(cycles):
        torch.cuda._sleep(cycles)

    count = lambda body: len(bt.profile_device_events(body, sync))  # noqa: E731
    n_flush = count(flush.bitwise_not_)
    n_spin = count(lambda: spin(REFERENCE_SPIN_CYCLES))
    print(f"clocks before: {clocks()}; kernels per flush {n_flush}, per spin {n_spin}")
    header = "| case | R ms | plain span | plain stream | event span | event stream | EV | spin span | spin stream | G ms | Wsum | Wstr |"
    print(header)
    print("|---|" + "---:|" * (header.count("|") - 2))

    def profiled(run, before, n_before, n_run, with_events):
        pairs = []

        def body():
            spin(QUEUE_SPIN_CYCLES)
            for _ in range(CALLS):
                before()
                if with_events:
                    a, b = (
                        torch.cuda.Event(enable_timing=True),
                        torch.cuda.Event(enable_timing=True),
                    )
                    a.record()
                    run()
                    b.record()
                    pairs.append((a, b))
                else:
                    run()

        events = bt.profile_device_events(body, sync)
        events.sort(key=lambda e: e.start_ns)
        found = readings(events, n_before, n_run, CALLS)
        ev = statistics.median(a.elapsed_time(b) for a, b in pairs) if pairs else float("nan")
        return found or (float("nan"), float("nan")), ev

    for module_name, case in CASES:
        spec = importlib.import_module(module_name).SPEC
        settings = bench_common.Settings(device, torch.float16, 16, "flashinfer", seed=0)
        prepared = spec.prepare(case, settings)
        run = prepared.run
        for _ in range(3):
            run()
        n_run = count(run)
        reference = hv.independent_cold_ms(torch, run, device)  # sustains ~200 ms itself
        plain, _ = profiled(run, flush.bitwise_not_, n_flush, n_run, False)
        event, ev = profiled(run, flush.bitwise_not_, n_flush, n_run, True)

        def flush_spin():
            flush.bitwise_not_()
            spin(REFERENCE_SPIN_CYCLES)

        spun, _ = profiled(run, flush_spin, n_flush + n_spin, n_run, True)
        graph = hv.independent_warm_ms(torch, run)
        warm, _ = profiled(run, lambda: None, 0, n_run, False)
        warm_sum = bt.measure(
            run,
            bt.make_timer(bt.TimingOptions(l2="warm"), device, print),
            bt.TimingOptions(l2="warm"),
        ).median

        def pct(value, base):
            return f"{(value / base - 1) * 100:+.1f}%"

        cells = [
            f"{reference:.4f}",
            pct(plain[0], reference), pct(plain[1], reference),
            pct(event[0], reference), pct(event[1], reference), pct(ev, reference),
            pct(spun[0], reference), pct(spun[1], reference),
            f"{graph:.4f}", pct(warm_sum, graph), pct(warm[1], graph),
        ]  # fmt: skip
        text = ",".join(f"{k}={v}" for k, v in case.items())
        print(f"| {module_name[11:]} {text} | " + " | ".join(cells) + " |", flush=True)
        del prepared, run
        torch.cuda.empty_cache()
    print(f"clocks after: {clocks()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
