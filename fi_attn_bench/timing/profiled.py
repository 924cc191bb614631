"""One function's median GPU time under the torch profiler, in a single call (the seed's
``run_with_profiler``): the harness's profiler timer without its stopping rules."""

from __future__ import annotations

import math
import re
import time

from fi_attn_bench.device.sync import default_device
from fi_attn_bench.timing.l2 import L2Flusher
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.statistics import quantile
from fi_attn_bench.timing.timers import ProfilerTimer


def compute_reps(
    estimated_ms: float, target_ms: float = 25.0, min_reps: int = 10, max_reps: int = 1000
) -> int:
    """Repetitions so that one timed batch holds about ``target_ms`` of work."""
    wanted = math.ceil(target_ms / max(float(estimated_ms), 1e-6))
    return max(min_reps, min(max_reps, wanted))


def _pattern_from(target_kernels) -> str | None:
    if not target_kernels:
        return None
    if isinstance(target_kernels, str):
        return target_kernels
    return "|".join(re.escape(name) for name in target_kernels)


def run_with_profiler(
    fn,
    target_kernels=None,
    warmup: int = 3,
    reps: int | None = None,
    *,
    l2: str = "warm",
    device=None,
) -> float:
    """Median GPU ms of one ``fn()`` under the torch profiler: every kernel, or those matching
    ``target_kernels`` (a regex or a list of names). Raises NoKernelCaptured if none ran."""
    device = default_device(device)
    options = TimingOptions(timer="profiler", l2=l2, kernel_pattern=_pattern_from(target_kernels))
    timer = ProfilerTimer(options, device, L2Flusher(device))
    for _ in range(max(warmup, 1)):
        fn()
    timer.sync()
    start = time.perf_counter()
    fn()
    timer.sync()
    estimate = (time.perf_counter() - start) * 1e3
    session = timer.open(fn, estimate)
    calls = reps or compute_reps(estimate)
    session.record(lambda: session.batch(calls))
    return quantile(sorted(s for batch in session.result() for s in batch.samples_ms), 0.5)
