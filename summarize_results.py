"""Summaries and baseline/candidate regression reports of schema-v1 CSVs (exit 0/1/2).

The program lives in ``fi_attn_bench.summarizer``; ``python summarize_results.py --help``.
The seed's module API (its constants, ``load_csv``, ``describe_case``,
``build_summary_markdown``, ...) stays importable from here.
"""

import sys

from fi_attn_bench.summarizer.process import prepare_process

if __name__ == "__main__":
    prepare_process()

from fi_attn_bench.summarizer import seed_api  # noqa: E402
from fi_attn_bench.summarizer.command_line import main, parse_args, run_as_program  # noqa: E402
from fi_attn_bench.summarizer.seed_api import *  # noqa: E402, F403 - the seed's names, listed once there

__all__ = [*seed_api.__all__, "main", "parse_args", "run_as_program"]

if __name__ == "__main__":
    sys.exit(run_as_program())
