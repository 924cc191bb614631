"""The harness's public face for benchmark scripts and users' own scripts.

A script declares *what* to measure (a ``BenchmarkSpec``); ``main_for(spec, argv)`` does the
rest (the ``fi_attn_bench`` package).  The seed's helpers (``dtype``, ``page_block_size``,
``setup_workspace``, ``setup_paged_kv_indptr``, ``get_csv_path``, ``compute_reps``,
``run_with_profiler``) stay importable from here.
"""

from fi_attn_bench.backends.impls import ImplContext, PluginRun
from fi_attn_bench.cases.selection import parse_filter
from fi_attn_bench.cases.spec import BenchmarkSpec, Prepared, Settings
from fi_attn_bench.command_line import build_parser, main_for
from fi_attn_bench.seed_api import (
    compute_reps,
    dtype,
    get_csv_path,
    page_block_size,
    run_with_profiler,
    setup_paged_kv_indptr,
    setup_workspace,
    synchronize,
)
from fi_attn_bench.sweep.case import CorrectnessError
from fi_attn_bench.sweep.run_options import RunOptions
from fi_attn_bench.timing.options import NoKernelCaptured, TimingError, TimingOptions
from fi_attn_bench.timing.statistics import Measurement

__all__ = [
    "BenchmarkSpec",
    "CorrectnessError",
    "ImplContext",
    "Measurement",
    "NoKernelCaptured",
    "PluginRun",
    "Prepared",
    "RunOptions",
    "Settings",
    "TimingError",
    "TimingOptions",
    "build_parser",
    "compute_reps",
    "dtype",
    "get_csv_path",
    "main_for",
    "page_block_size",
    "parse_filter",
    "run_with_profiler",
    "setup_paged_kv_indptr",
    "setup_workspace",
    "synchronize",
]
