"""Summaries and baseline/candidate regression reports of schema-v1 CSVs (exit 0/1/2).

The program lives in ``fi_attn_bench.summarizer``; ``python summarize_results.py --help``.
"""

import sys

from fi_attn_bench.summarizer.cli import main, run_as_program

__all__ = ["main"]

if __name__ == "__main__":
    sys.exit(run_as_program())
