"""Summaries and baseline/candidate regression reports of schema-v1 CSVs (exit 0/1/2).

The program lives in ``fi_attn_bench.summarizer``; ``python summarize_results.py --help``.
The seed's module API (its constants, ``load_csv``, ``describe_case``,
``build_summary_markdown``, ...) stays importable from here.
"""

import sys

from fi_attn_bench.summarizer.cli import main, parse_args, run_as_program
from fi_attn_bench.summarizer.seed_api import (
    CASE_COLUMN_ORDER,
    COMMON_LEGACY_COLUMNS,
    EXIT_BENCHMARK_FAILURE,
    EXIT_INPUT_ERROR,
    EXIT_OK,
    INTERNAL_COLUMNS,
    LEGACY_SCHEMAS,
    NUMERIC_COLUMNS,
    RESERVED_COLUMNS,
    SCHEMA_VERSION,
    STATUS_FAILED,
    STATUS_LEGACY_OK,
    STATUS_OK,
    SUCCESS_STATUSES,
    V1_REQUIRED_COLUMNS,
    InputIssue,
    LoadResult,
    best_record,
    build_case_index,
    build_regression_markdown,
    build_summary_markdown,
    case_identity,
    describe_case,
    escape_markdown,
    format_delta,
    format_metric,
    group_by_api,
    load_csv,
    load_inputs,
    parse_float,
)

__all__ = [
    "CASE_COLUMN_ORDER",
    "COMMON_LEGACY_COLUMNS",
    "EXIT_BENCHMARK_FAILURE",
    "EXIT_INPUT_ERROR",
    "EXIT_OK",
    "INTERNAL_COLUMNS",
    "LEGACY_SCHEMAS",
    "NUMERIC_COLUMNS",
    "RESERVED_COLUMNS",
    "SCHEMA_VERSION",
    "STATUS_FAILED",
    "STATUS_LEGACY_OK",
    "STATUS_OK",
    "SUCCESS_STATUSES",
    "V1_REQUIRED_COLUMNS",
    "InputIssue",
    "LoadResult",
    "best_record",
    "build_case_index",
    "build_regression_markdown",
    "build_summary_markdown",
    "case_identity",
    "describe_case",
    "escape_markdown",
    "format_delta",
    "format_metric",
    "group_by_api",
    "load_csv",
    "load_inputs",
    "main",
    "parse_args",
    "parse_float",
    "run_as_program",
]

if __name__ == "__main__":
    sys.exit(run_as_program())
