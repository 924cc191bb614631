"""The seed's importable summarizer API, for ``summarize_results.py`` to re-export.

Record-level helpers over the seed's dict records (``load_csv``/``LoadResult.records``),
built on the package's readers and renderers. Only the top-level face imports this
module: the package itself works on tables and models, never through it.
"""

from __future__ import annotations

from fi_attn_bench.results.schema import (
    CASE_COLUMN_ORDER,
    NUMERIC_COLUMNS,
    RESERVED_COLUMNS,
    SCHEMA_VERSION,
    STATUS_FAILED,
    STATUS_LEGACY_OK,
    STATUS_OK,
)
from fi_attn_bench.summarizer import loading
from fi_attn_bench.summarizer.frames import case_labels, frame_case_columns
from fi_attn_bench.summarizer.loading import (
    LEGACY_SCHEMAS,
    SUCCESS_STATUSES,
    V1_REQUIRED_COLUMNS,
    InputIssue,
    LoadResult,
    load_csv,
    load_inputs,
    parse_float,
)
from fi_attn_bench.summarizer.markdown import regression_markdown, summary_markdown
from fi_attn_bench.summarizer.markdown_text import (
    DEFAULT_MAX_REPORT_BYTES,
    escape_markdown,
    format_delta,
    format_metric,
)
from fi_attn_bench.summarizer.model import (
    EXIT_BENCHMARK_FAILURE,
    EXIT_INPUT_ERROR,
    EXIT_OK,
    Gate,
    summarize,
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
    "parse_float",
]

# The columns every legacy layout shares (LEGACY_SCHEMAS adds each wrapper's case columns).
COMMON_LEGACY_COLUMNS = frozenset(("api", *NUMERIC_COLUMNS))
# A set, as the seed's was; the reader keeps its own ordered tuple.
INTERNAL_COLUMNS = frozenset(loading.INTERNAL_COLUMNS)


def _record_frame(record: dict):
    import pandas as pd

    return pd.DataFrame([{key: value for key, value in record.items() if key != "api"}])


def describe_case(record: dict) -> str:
    """ "name=value, ..." of the record's non-empty case parameters, or "n/a"."""
    frame = _record_frame(record)
    return str(case_labels(frame, frame_case_columns(frame))[0])


def case_identity(record: dict) -> tuple:
    """(api, ((parameter, value), ...)): what makes two rows the same case."""
    frame = _record_frame(record)
    return record["api"], tuple(
        (name, str(record.get(name, "")).strip()) for name in frame_case_columns(frame)
    )


def group_by_api(records) -> dict[str, list[dict]]:
    """Records per API, in input order."""
    grouped: dict[str, list[dict]] = {}
    for record in records:
        grouped.setdefault(record["api"], []).append(record)
    return grouped


def best_record(records, column: str):
    """The first successful record with the minimum time or maximum throughput."""
    candidates = [record for record in records if record["status"] in SUCCESS_STATUSES]
    if not candidates:
        return None
    pick = min if column == "time_ms" else max
    return pick(candidates, key=lambda record: record[column])


def build_case_index(records, group: str):
    """(case identity -> record, duplicate issues); duplicated cases are left out."""
    index, duplicates, issues = {}, set(), []
    for record in records:
        key = case_identity(record)
        if key not in index:
            index[key] = record
            continue
        first = index[key]
        issues.append(
            InputIssue(
                record["_source"],
                f"duplicate case also found at {first['_source']}:{first['_line']}: "
                f"{record['api']} ({describe_case(record)})",
                group,
            )
        )
        duplicates.add(key)
    for key in duplicates:
        index.pop(key, None)
    return index, issues


def build_summary_markdown(result: LoadResult, max_bytes: int = DEFAULT_MAX_REPORT_BYTES) -> str:
    """The summary report of one run."""
    return summary_markdown(summarize(result), max_bytes)


def build_regression_markdown(
    baseline, candidate, threshold=None, max_bytes=DEFAULT_MAX_REPORT_BYTES
):
    """(markdown, comparison failed, duplicate-case issues): the seed's triple."""
    from fi_attn_bench.summarizer.regression import compare

    model = compare(baseline, candidate, Gate(threshold))
    markdown = regression_markdown(model, max_bytes)
    return markdown, model.comparison_failed, list(model.comparison_issues)
