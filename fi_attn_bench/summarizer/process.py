"""The summarizer as a process of its own (``summarize_results.py``, ``fi-attn-summarize``):
settings that must be made before numpy loads, then the program."""

from __future__ import annotations

import gc
import os


def prepare_process() -> None:
    """Call before anything imports numpy; a library import leaves both settings alone."""
    gc.disable()  # run_as_program's reason; made this early, it also spares the imports ~20 ms
    # No summarizer step calls BLAS, but OpenBLAS's idle worker spun ~0.1 s of CPU on a
    # 2-core machine during a 200k-row summary; a user's own setting is kept.
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def run() -> int:
    """The ``fi-attn-summarize`` console script."""
    prepare_process()
    from fi_attn_bench.summarizer.command_line import run_as_program

    return run_as_program()
