"""Summarize and compare FlashInfer benchmark CSV files."""

import argparse
import csv
import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# Oracle-only change: import the sibling file, never the product's top-level benchmark_result.
if __package__:
    from .benchmark_result import (
        NUMERIC_COLUMNS,
        RESERVED_COLUMNS,
        SCHEMA_VERSION,
        STATUS_FAILED,
        STATUS_LEGACY_OK,
        STATUS_OK,
    )
else:  # run as a program: sys.path[0] is this folder, so this is the sibling file
    from benchmark_result import (
        NUMERIC_COLUMNS,
        RESERVED_COLUMNS,
        SCHEMA_VERSION,
        STATUS_FAILED,
        STATUS_LEGACY_OK,
        STATUS_OK,
    )


EXIT_OK = 0
EXIT_BENCHMARK_FAILURE = 1
EXIT_INPUT_ERROR = 2
SUCCESS_STATUSES = frozenset((STATUS_OK, STATUS_LEGACY_OK))

CASE_COLUMN_ORDER = (
    "batch_size",
    "seq_len",
    "seq_len_q",
    "seq_len_kv",
    "num_heads",
    "num_qo_heads",
    "num_kv_heads",
    "head_dim",
    "head_dim_qk",
    "head_dim_vo",
    "head_dim_ckv",
    "head_dim_kpe",
)

COMMON_LEGACY_COLUMNS = frozenset(("api", *NUMERIC_COLUMNS))
LEGACY_SCHEMAS = (
    COMMON_LEGACY_COLUMNS
    | frozenset(
        (
            "batch_size",
            "seq_len_q",
            "seq_len_kv",
            "num_qo_heads",
            "num_kv_heads",
            "head_dim",
        )
    ),
    COMMON_LEGACY_COLUMNS
    | frozenset(
        (
            "batch_size",
            "seq_len",
            "num_heads",
            "head_dim_ckv",
            "head_dim_kpe",
        )
    ),
    COMMON_LEGACY_COLUMNS
    | frozenset(
        (
            "batch_size",
            "seq_len",
            "num_qo_heads",
            "num_kv_heads",
            "head_dim",
        )
    ),
    COMMON_LEGACY_COLUMNS
    | frozenset(
        (
            "batch_size",
            "seq_len",
            "num_qo_heads",
            "num_kv_heads",
            "head_dim_qk",
            "head_dim_vo",
        )
    ),
)
V1_REQUIRED_COLUMNS = frozenset(
    (
        "schema_version",
        "api",
        "status",
        *NUMERIC_COLUMNS,
        "error_type",
        "error",
    )
)
INTERNAL_COLUMNS = frozenset(("_source", "_line"))


@dataclass
class InputIssue:
    source: str
    message: str
    group: str = "input"


@dataclass
class LoadResult:
    group: str
    paths: list
    records: list = field(default_factory=list)
    issues: list = field(default_factory=list)

    @property
    def valid_sources(self):
        return {record["_source"] for record in self.records}


def parse_float(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _metric_error(record, column):
    value = parse_float(record.get(column))
    if value is None:
        return f"{column} must be a finite number"
    if column == "time_ms" and value <= 0:
        return "time_ms must be greater than zero"
    if column != "time_ms" and value < 0:
        return f"{column} must not be negative"
    record[column] = value
    return None


def _matches_known_schema(fieldnames):
    return any(schema.issubset(fieldnames) for schema in LEGACY_SCHEMAS)


def _validate_headers(fieldnames):
    if not fieldnames:
        return None, "CSV header is missing"
    if any(name is None or not name for name in fieldnames):
        return None, "CSV contains an empty header name"
    if any(name != name.strip() for name in fieldnames):
        return None, "CSV header names must not contain surrounding whitespace"
    if len(fieldnames) != len(set(fieldnames)):
        return None, "CSV contains duplicate header names"

    names = frozenset(fieldnames)
    has_v1_marker = "schema_version" in names or "status" in names
    if has_v1_marker:
        missing = sorted(V1_REQUIRED_COLUMNS - names)
        if missing:
            return None, f"schema v1 is missing columns: {', '.join(missing)}"
        if not _matches_known_schema(names):
            return None, "CSV does not match a known FlashInfer benchmark schema"
        return "v1", None

    if not _matches_known_schema(names):
        return None, "CSV does not match a known legacy FlashInfer schema"
    return "legacy", None


def _validate_row(raw_row, schema, source, line_number):
    if None in raw_row:
        return None, "row has more values than the CSV header"
    if any(value is None for value in raw_row.values()):
        return None, "row has fewer values than the CSV header"

    record = {key: value.strip() for key, value in raw_row.items()}
    if not record.get("api"):
        return None, "api must not be empty"

    if schema == "v1":
        if record.get("schema_version") != SCHEMA_VERSION:
            return None, (
                "unsupported schema_version "
                f"{record.get('schema_version')!r}; expected {SCHEMA_VERSION!r}"
            )
        status = record.get("status")
        if status not in (STATUS_OK, STATUS_FAILED):
            return None, f"unsupported status {status!r}"
        if status == STATUS_OK and (
            record.get("error_type") or record.get("error")
        ):
            return None, "successful rows must not contain error details"
        if status == STATUS_FAILED and not (
            record.get("error_type") or record.get("error")
        ):
            return None, "failed rows must contain error_type or error"
    else:
        record["schema_version"] = ""
        record["status"] = STATUS_LEGACY_OK
        record["error_type"] = ""
        record["error"] = ""

    if record["status"] in SUCCESS_STATUSES:
        for column in NUMERIC_COLUMNS:
            error = _metric_error(record, column)
            if error:
                return None, error

    record["_source"] = source
    record["_line"] = line_number
    return record, None


def load_csv(path, group="input"):
    source = str(path)
    records = []
    issues = []
    try:
        with path.open("r", encoding="utf-8-sig", newline="") as csv_file:
            reader = csv.DictReader(csv_file)
            schema, error = _validate_headers(reader.fieldnames)
            if error:
                return [], [InputIssue(source, error, group)]

            for line_number, row in enumerate(reader, 2):
                record, row_error = _validate_row(
                    row, schema, source, line_number
                )
                if row_error:
                    issues.append(
                        InputIssue(
                            source,
                            f"line {line_number}: {row_error}",
                            group,
                        )
                    )
                else:
                    records.append(record)
    except (OSError, UnicodeError, csv.Error) as exc:
        return [], [InputIssue(source, f"unable to read CSV: {exc}", group)]

    if not records and not issues:
        issues.append(InputIssue(source, "CSV contains no benchmark rows", group))
    if issues:
        return [], issues
    return records, []


def load_inputs(paths, group="input"):
    result = LoadResult(group=group, paths=list(paths))
    for path in paths:
        records, issues = load_csv(path, group)
        result.records.extend(records)
        result.issues.extend(issues)
    return result


def _case_columns(record):
    columns = [
        key
        for key in record
        if key not in RESERVED_COLUMNS
        and key not in INTERNAL_COLUMNS
        and not key.startswith("_")
    ]
    order = {name: index for index, name in enumerate(CASE_COLUMN_ORDER)}
    return sorted(columns, key=lambda name: (order.get(name, len(order)), name))


def describe_case(record):
    parts = [
        f"{key}={record[key]}"
        for key in _case_columns(record)
        if str(record.get(key, "")).strip()
    ]
    return ", ".join(parts) if parts else "n/a"


def case_identity(record):
    values = tuple(
        (key, str(record.get(key, "")).strip())
        for key in _case_columns(record)
    )
    return record["api"], values


def group_by_api(records):
    grouped = defaultdict(list)
    for record in records:
        grouped[record["api"]].append(record)
    return dict(grouped)


def best_record(records, column):
    candidates = [
        record for record in records if record["status"] in SUCCESS_STATUSES
    ]
    if not candidates:
        return None
    key = lambda record: record[column]
    return min(candidates, key=key) if column == "time_ms" else max(
        candidates, key=key
    )


def _escape_markdown_fragment(value):
    text = str(value)
    for old, new in (
        ("\\", "\\\\"),
        ("|", "\\|"),
        ("`", "\\`"),
        ("*", "\\*"),
        ("_", "\\_"),
        ("#", "\\#"),
        ("[", "\\["),
        ("]", "\\]"),
        ("<", "&lt;"),  # the dump shows "<": its HTML rendering decoded the entity
        (">", "&gt;"),
    ):
        text = text.replace(old, new)
    return text


def escape_markdown(value):
    normalized = str(value).replace("\r\n", "\n").replace("\r", "\n")
    return "<br>".join(
        _escape_markdown_fragment(part) for part in normalized.split("\n")
    )


def format_metric(value):
    return f"{value:.6g}"


def format_delta(value):
    if math.isinf(value):
        return "+∞%" if value > 0 else "-∞%"
    return f"{value:+.2f}%"


def _status_text(records):
    statuses = Counter(record["status"] for record in records)
    return ", ".join(
        f"{key}={value}" for key, value in sorted(statuses.items())
    )


def _input_file_lines(result):
    records_by_source = defaultdict(list)
    issues_by_source = defaultdict(list)
    for record in result.records:
        records_by_source[record["_source"]].append(record)
    for issue in result.issues:
        issues_by_source[issue.source].append(issue)

    lines = ["## Input Files", "", "| File | Rows | Status |", "|---|---:|---|"]
    for path in result.paths:
        source = str(path)
        file_records = records_by_source[source]
        if issues_by_source[source]:
            status = "invalid"
        else:
            status = _status_text(file_records)
        lines.append(
            f"| {escape_markdown(source)} | {len(file_records)} | "
            f"{escape_markdown(status)} |"
        )
    lines.append("")
    return lines


def _input_error_lines(issues):
    if not issues:
        return []
    lines = ["## Input Errors", ""]
    for issue in issues:
        lines.append(
            f"- **{escape_markdown(issue.group)}** — "
            f"{escape_markdown(issue.source)}: "
            f"{escape_markdown(issue.message)}"
        )
    lines.append("")
    return lines


def _failure_lines(records):
    failures = [
        record for record in records if record["status"] == STATUS_FAILED
    ]
    if not failures:
        return []
    lines = [
        "## Failure Details",
        "",
        "| API | Case | Source | Error |",
        "|---|---|---|---|",
    ]
    for record in failures:
        error = f"{record.get('error_type', '')}: {record.get('error', '')}"
        lines.append(
            f"| {escape_markdown(record['api'])} | "
            f"{escape_markdown(describe_case(record))} | "
            f"{escape_markdown(record['_source'])} | "
            f"{escape_markdown(error.strip(': '))} |"
        )
    lines.append("")
    return lines


def _grouped_failure_lines(grouped_records):
    failures = [
        (group, record)
        for group, record in grouped_records
        if record["status"] == STATUS_FAILED
    ]
    if not failures:
        return []
    lines = [
        "## Failure Details",
        "",
        "| Run | API | Case | Source | Error |",
        "|---|---|---|---|---|",
    ]
    for group, record in failures:
        error = f"{record.get('error_type', '')}: {record.get('error', '')}"
        lines.append(
            f"| {escape_markdown(group)} | "
            f"{escape_markdown(record['api'])} | "
            f"{escape_markdown(describe_case(record))} | "
            f"{escape_markdown(record['_source'])} | "
            f"{escape_markdown(error.strip(': '))} |"
        )
    lines.append("")
    return lines


def build_summary_markdown(result):
    lines = [
        "# FlashInfer Benchmark Summary",
        "",
        f"- Input files: {len(result.paths)}",
        f"- Valid files: {len(result.valid_sources)}",
        f"- Total rows: {len(result.records)}",
        "",
    ]
    lines.extend(_input_file_lines(result))

    for api, api_records in sorted(group_by_api(result.records).items()):
        lines.extend(
            [
                f"## API: {escape_markdown(api)}",
                "",
                f"- Rows: {len(api_records)}",
                f"- Status: {escape_markdown(_status_text(api_records))}",
            ]
        )
        for column in NUMERIC_COLUMNS:
            record = best_record(api_records, column)
            if record is None:
                continue
            label = "Minimum" if column == "time_ms" else "Maximum"
            lines.append(
                f"- {label} {column}: {format_metric(record[column])} "
                f"({escape_markdown(describe_case(record))}; "
                f"source={escape_markdown(record['_source'])})"
            )
        lines.append("")

    lines.extend(_failure_lines(result.records))
    lines.extend(_input_error_lines(result.issues))
    if any(
        record["status"] == STATUS_LEGACY_OK for record in result.records
    ):
        lines.extend(
            [
                "## Compatibility Note",
                "",
                "- `legacy_inferred_ok` means the legacy CSV had no explicit "
                "status column; success was inferred only after validating its "
                "known FlashInfer schema and performance metrics.",
                "",
            ]
        )
    return "\n".join(lines).rstrip() + "\n"


def build_case_index(records, group):
    index = {}
    duplicate_keys = set()
    issues = []
    for record in records:
        key = case_identity(record)
        if key in index:
            first = index[key]
            issues.append(
                InputIssue(
                    record["_source"],
                    "duplicate case also found at "
                    f"{first['_source']}:{first['_line']}: "
                    f"{record['api']} ({describe_case(record)})",
                    group,
                )
            )
            duplicate_keys.add(key)
        else:
            index[key] = record
    for key in duplicate_keys:
        index.pop(key, None)
    return index, issues


def _percent_delta(baseline, candidate):
    if baseline == 0:
        return 0.0 if candidate == 0 else math.inf
    return (candidate / baseline - 1.0) * 100.0


def _is_threshold_regression(deltas, threshold):
    if threshold is None:
        return False
    return (
        deltas["time_ms"] > threshold
        or deltas["bandwidth_GB_s"] < -threshold
        or deltas["tflops"] < -threshold
    )


def build_regression_markdown(baseline, candidate, threshold=None):
    baseline_index, baseline_duplicates = build_case_index(
        baseline.records, "baseline"
    )
    candidate_index, candidate_duplicates = build_case_index(
        candidate.records, "candidate"
    )
    comparison_issues = baseline_duplicates + candidate_duplicates

    baseline_keys = set(baseline_index)
    candidate_keys = set(candidate_index)
    matched_keys = sorted(baseline_keys & candidate_keys)
    missing_keys = sorted(baseline_keys - candidate_keys)
    new_keys = sorted(candidate_keys - baseline_keys)

    lines = [
        "# FlashInfer Benchmark Regression",
        "",
        f"- Baseline files: {len(baseline.paths)}",
        f"- Candidate files: {len(candidate.paths)}",
        f"- Matched cases: {len(matched_keys)}",
        f"- Missing candidate cases: {len(missing_keys)}",
        f"- New candidate cases: {len(new_keys)}",
        "- Regression gate: "
        + ("report only" if threshold is None else f"{threshold:g}%"),
        "",
        "## Matched Cases",
        "",
        "| API | Case | State | Time ms (base → cand, Δ) | "
        "Bandwidth GB/s (base → cand, Δ) | TFLOPS (base → cand, Δ) | Sources |",
        "|---|---|---|---|---|---|---|",
    ]

    threshold_failed = False
    candidate_failed = False
    for key in matched_keys:
        base_record = baseline_index[key]
        candidate_record = candidate_index[key]
        base_success = base_record["status"] in SUCCESS_STATUSES
        candidate_success = candidate_record["status"] in SUCCESS_STATUSES
        deltas = None

        if base_success and candidate_success:
            deltas = {
                column: _percent_delta(
                    base_record[column], candidate_record[column]
                )
                for column in NUMERIC_COLUMNS
            }
            regressed = _is_threshold_regression(deltas, threshold)
            state = "regression" if regressed else "compared"
            threshold_failed = threshold_failed or regressed
        elif base_success and not candidate_success:
            state = "candidate failed"
            candidate_failed = True
        elif not base_success and candidate_success:
            state = "recovered"
        else:
            state = "both failed"
            candidate_failed = True

        if deltas:
            metric_cells = [
                f"{format_metric(base_record[column])} → "
                f"{format_metric(candidate_record[column])}, "
                f"{format_delta(deltas[column])}"
                for column in NUMERIC_COLUMNS
            ]
        else:
            metric_cells = ["n/a", "n/a", "n/a"]
        sources = f"{base_record['_source']} → {candidate_record['_source']}"
        lines.append(
            f"| {escape_markdown(key[0])} | "
            f"{escape_markdown(describe_case(base_record))} | "
            f"{escape_markdown(state)} | "
            f"{escape_markdown(metric_cells[0])} | "
            f"{escape_markdown(metric_cells[1])} | "
            f"{escape_markdown(metric_cells[2])} | "
            f"{escape_markdown(sources)} |"
        )
    lines.append("")

    if missing_keys:
        lines.extend(["## Missing Candidate Cases", ""])
        for key in missing_keys:
            record = baseline_index[key]
            lines.append(
                f"- {escape_markdown(record['api'])}: "
                f"{escape_markdown(describe_case(record))} "
                f"(baseline source={escape_markdown(record['_source'])})"
            )
        lines.append("")

    if new_keys:
        lines.extend(["## New Candidate Cases", ""])
        for key in new_keys:
            record = candidate_index[key]
            lines.append(
                f"- {escape_markdown(record['api'])}: "
                f"{escape_markdown(describe_case(record))} "
                f"(candidate source={escape_markdown(record['_source'])})"
            )
            if record["status"] == STATUS_FAILED:
                candidate_failed = True
        lines.append("")

    grouped_failures = [
        ("baseline", record)
        for record in baseline.records
        if record["status"] == STATUS_FAILED
    ] + [
        ("candidate", record)
        for record in candidate.records
        if record["status"] == STATUS_FAILED
    ]
    if grouped_failures:
        lines.extend(_grouped_failure_lines(grouped_failures))

    all_issues = baseline.issues + candidate.issues + comparison_issues
    lines.extend(_input_error_lines(all_issues))

    comparison_failed = (
        candidate_failed or bool(missing_keys) or threshold_failed
    )
    return (
        "\n".join(lines).rstrip() + "\n",
        comparison_failed,
        comparison_issues,
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="summarize_results.py", description=__doc__
    )
    parser.add_argument(
        "csv",
        nargs="*",
        type=Path,
        help="Benchmark CSV files for summary mode.",
    )
    parser.add_argument(
        "--baseline",
        nargs="+",
        type=Path,
        help="Baseline CSV files for regression mode.",
    )
    parser.add_argument(
        "--candidate",
        nargs="+",
        type=Path,
        help="Candidate CSV files for regression mode.",
    )
    parser.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PERCENT",
        help="Return 1 when a metric regresses by more than this percentage.",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("flashinfer_benchmark_summary.md"),
        help="Markdown report output path.",
    )
    args = parser.parse_args(argv)

    regression_mode = args.baseline is not None or args.candidate is not None
    if regression_mode:
        if args.csv:
            parser.error("positional CSV files cannot be used with regression mode")
        if args.baseline is None or args.candidate is None:
            parser.error("regression mode requires both --baseline and --candidate")
    elif not args.csv:
        parser.error("provide CSV files or use --baseline with --candidate")

    if args.fail_on_regression is not None:
        if not regression_mode:
            parser.error("--fail-on-regression requires regression mode")
        if not math.isfinite(args.fail_on_regression):
            parser.error("--fail-on-regression must be finite")
        if args.fail_on_regression < 0:
            parser.error("--fail-on-regression must not be negative")
    return args


def _write_report(path, markdown):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(markdown, encoding="utf-8")
    print(f"Summary saved to {path}")


def main(argv=None):
    args = parse_args(argv)
    if args.baseline is not None:
        baseline = load_inputs(args.baseline, "baseline")
        candidate = load_inputs(args.candidate, "candidate")
        markdown, comparison_failed, comparison_issues = (
            build_regression_markdown(
                baseline, candidate, args.fail_on_regression
            )
        )
        _write_report(args.output, markdown)
        if baseline.issues or candidate.issues or comparison_issues:
            return EXIT_INPUT_ERROR
        return EXIT_BENCHMARK_FAILURE if comparison_failed else EXIT_OK

    result = load_inputs(args.csv)
    markdown = build_summary_markdown(result)
    _write_report(args.output, markdown)
    if result.issues:
        return EXIT_INPUT_ERROR
    if any(record["status"] == STATUS_FAILED for record in result.records):
        return EXIT_BENCHMARK_FAILURE
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())

