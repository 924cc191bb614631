"""The seed's helper names (``dtype``, ``setup_workspace``, ``run_with_profiler``, ...), kept
importable for users' own scripts: a door that only re-exports; no module of the package
imports it."""

from __future__ import annotations

from fi_attn_bench.backends.wrapper import setup_workspace
from fi_attn_bench.cases.inputs import setup_paged_kv_indptr
from fi_attn_bench.cases.spec import DEFAULT_DTYPE as dtype
from fi_attn_bench.cases.spec import DEFAULT_PAGE_SIZE as page_block_size
from fi_attn_bench.cases.spec import DEFAULT_WORKSPACE_BYTES
from fi_attn_bench.device.sync import synchronize
from fi_attn_bench.sweep.outputs import get_csv_path
from fi_attn_bench.timing.profiled import compute_reps, run_with_profiler

__all__ = [
    "DEFAULT_WORKSPACE_BYTES",
    "compute_reps",
    "dtype",
    "get_csv_path",
    "page_block_size",
    "run_with_profiler",
    "setup_paged_kv_indptr",
    "setup_workspace",
    "synchronize",
]
