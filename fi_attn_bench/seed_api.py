"""The seed's helper names (``dtype``, ``setup_workspace``, ``run_with_profiler``, ...), kept importable for users' own scripts."""

from __future__ import annotations

import math
import os
import re
import time

import torch

from fi_attn_bench.timing.l2 import L2Flusher
from fi_attn_bench.timing.options import (
    TimingOptions,
)
from fi_attn_bench.timing.statistics import (
    quantile,
)
from fi_attn_bench.timing.timers import ProfilerTimer

dtype = torch.float16


page_block_size = 16


DEFAULT_WORKSPACE_BYTES = 128 * 1024 * 1024


def _default_device(device=None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def setup_workspace(device=None, size_bytes: int = DEFAULT_WORKSPACE_BYTES) -> torch.Tensor:
    """A uint8 workspace buffer for a FlashInfer wrapper: zero-initialised, as FlashInfer's
    docs require for its first use."""
    return torch.zeros(size_bytes, dtype=torch.uint8, device=_default_device(device))


def setup_paged_kv_indptr(
    batch_size: int, seq_len: int, page_size: int, device=None, *, seed: int = 0
):
    """Page table of ``batch_size`` sequences of ``seq_len`` tokens: (indptr, indices, last_page_len).

    Pages are a seeded permutation of 0..n-1, not the identity, as in a real serving cache.
    """
    pages_per_seq = max(1, math.ceil(seq_len / page_size))
    device = _default_device(device)
    generator = torch.Generator().manual_seed(seed)
    indptr = torch.arange(batch_size + 1, dtype=torch.int32) * pages_per_seq
    indices = torch.randperm(batch_size * pages_per_seq, generator=generator).to(torch.int32)
    last = torch.full((batch_size,), (seq_len - 1) % page_size + 1, dtype=torch.int32)
    return indptr.to(device), indices.to(device), last.to(device)


def get_csv_path(api_name: str, output_dir: str = ".") -> str:
    """``<output_dir>/<api_name>_<YYYYmmdd_HHMMSS>.csv``."""
    return os.path.join(output_dir, f"{api_name}_{time.strftime('%Y%m%d_%H%M%S')}.csv")


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
    device = _default_device(device)
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


def synchronize(device: torch.device) -> None:
    """Wait for the device (torch.cuda covers CUDA and MetaX MACA); no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
