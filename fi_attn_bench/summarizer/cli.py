"""Summarize and compare FlashInfer benchmark CSV files.

Summary mode:    summarize_results.py A.csv B.csv ... [--output summary.md]
Regression mode: summarize_results.py --baseline B.csv... --candidate C.csv...
                 [--fail-on-regression PERCENT] [--output report.md]
A directory argument stands for every *.csv under it; ``--output -`` writes the
report to standard output.  Otherwise the verdict and a compact table go to stdout.

Exit codes: 0 valid input and nothing failed; 1 a failed case, a candidate missing a
baseline case, or a regression beyond the gate; 2 bad arguments, unreadable or
invalid input, or a report that cannot be written.

The work is load -> validate -> compare -> render (package ``summarizer``); this
module is the command line and keeps the seed's importable API.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench.results.schema import CASE_COLUMN_ORDER, HARNESS_VERSION
from fi_attn_bench.summarizer.frames import case_labels, frame_case_columns
from fi_attn_bench.summarizer.inputs import expand_paths
from fi_attn_bench.summarizer.loading import (
    INTERNAL_COLUMNS,
    LEGACY_SCHEMAS,
    SUCCESS_STATUSES,
    V1_REQUIRED_COLUMNS,
    InputIssue,
    LoadResult,
    load_csv,
    load_inputs,
    load_run,
    parse_float,
)
from fi_attn_bench.summarizer.markdown import (
    DEFAULT_MAX_REPORT_BYTES,
    escape_markdown,
    format_delta,
    format_metric,
    regression_markdown,
    summary_markdown,
)
from fi_attn_bench.summarizer.model import (
    EXIT_BENCHMARK_FAILURE,
    EXIT_INPUT_ERROR,
    EXIT_OK,
    CaseState,
    Gate,
    Verdict,
    summarize,
    summary_plot_rows,
)
from fi_attn_bench.summarizer.output import is_stdout, model_json, unwritable, write_report
from fi_attn_bench.summarizer.terminal import regression_console, summary_console, terminal_width

__all__ = [
    "CASE_COLUMN_ORDER",
    "LEGACY_SCHEMAS",
    "V1_REQUIRED_COLUMNS",
    "best_record",
    "build_case_index",
    "group_by_api",
    "EXIT_OK",
    "EXIT_BENCHMARK_FAILURE",
    "EXIT_INPUT_ERROR",
    "SUCCESS_STATUSES",
    "INTERNAL_COLUMNS",
    "CaseState",
    "Gate",
    "InputIssue",
    "LoadResult",
    "Verdict",
    "build_regression_markdown",
    "build_summary_markdown",
    "case_identity",
    "describe_case",
    "escape_markdown",
    "format_delta",
    "format_metric",
    "load_csv",
    "load_inputs",
    "main",
    "parse_args",
    "parse_float",
]

MIN_REPORT_BYTES = 4096
STDERR_ISSUE_LIMIT = 50


# ------------------------------------------------------------- seed-level API


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


# --------------------------------------------------------------------- command


@dataclass(frozen=True)
class ReportOptions:
    """Where and how big the reports are, and what they list."""

    output: Path
    json_path: Path | None
    max_bytes: int
    plot_dir: Path | None
    only_changed: bool = False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="summarize_results.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "csv", nargs="*", type=Path, help="Benchmark CSV files or directories for summary mode."
    )
    parser.add_argument(
        "--baseline",
        nargs="+",
        type=Path,
        help="Baseline CSV files or directories (one run) for regression mode.",
    )
    parser.add_argument(
        "--candidate",
        nargs="+",
        type=Path,
        help="Candidate CSV files or directories (one run) for regression mode.",
    )
    parser.add_argument(
        "--fail-on-regression",
        type=float,
        metavar="PERCENT",
        help="Return 1 when a metric regresses by more than this percentage and the change "
        "is significant (rank test on raw samples, else beyond the medians' uncertainty).",
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=Path("flashinfer_benchmark_summary.md"),
        help="Markdown report output path; '-' writes it to standard output.",
    )
    parser.add_argument(
        "--json", type=Path, metavar="PATH", help="Also write the complete result as JSON."
    )
    parser.add_argument(
        "--max-report-bytes",
        type=int,
        default=DEFAULT_MAX_REPORT_BYTES,
        metavar="BYTES",
        help="Cut long Markdown tables (with a note) before the report exceeds this size "
        f"(default {DEFAULT_MAX_REPORT_BYTES}).",
    )
    parser.add_argument(
        "--plot-dir",
        type=Path,
        metavar="DIR",
        help="Write PNG plots here (needs matplotlib) and link them from the report.",
    )
    parser.add_argument(
        "--only-changed",
        action="store_true",
        help="Regression mode: the matched table lists only changed cases (a state other "
        "than compared, or a significant change past the gate, or past 10%% without one); "
        "stdout always does.",
    )
    parser.add_argument(
        "--baseline-samples",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="Raw samples of the baseline (*.samples.jsonl.gz files or directories): "
        "a Mann-Whitney U test decides significance where both sides have them.",
    )
    parser.add_argument(
        "--candidate-samples",
        nargs="+",
        type=Path,
        metavar="PATH",
        help="Raw samples of the candidate (see --baseline-samples).",
    )
    parser.add_argument(
        "--all-runs",
        action="store_true",
        help="Read every file given as one run; by default, files holding several runs of "
        "the same cases give their newest run (noted on stdout and in the report).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {HARNESS_VERSION}")
    return parser


def parse_args(argv=None) -> argparse.Namespace:
    parser = build_parser()
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
    if args.max_report_bytes < MIN_REPORT_BYTES:
        parser.error(f"--max-report-bytes must be at least {MIN_REPORT_BYTES}")
    if not regression_mode:
        for name in ("only_changed", "baseline_samples", "candidate_samples"):
            if getattr(args, name):
                parser.error(f"--{name.replace('_', '-')} requires regression mode")
    if is_stdout(args.json) or (args.json is not None and args.json == args.output):
        parser.error("--json needs a file of its own")
    return args


def main(argv=None) -> int:
    """Run the command; every outcome is an exit code, never a traceback.

    An unexpected error (a bug, or memory exhausted) is reported in one line and
    gives exit 2; SUMMARIZE_DEBUG=1 re-raises it instead, with its traceback.
    """
    args = parse_args(argv)
    try:
        return _run(args)
    except Exception as exc:
        if os.environ.get("SUMMARIZE_DEBUG"):
            raise
        print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR


def _run(args: argparse.Namespace) -> int:
    options = ReportOptions(
        args.output, args.json, args.max_report_bytes, args.plot_dir, args.only_changed
    )
    error = _output_error(options)
    plots_module = None
    if error is None and options.plot_dir is not None:
        plots_module, error = _import_plots()
    if error is None:
        _expand_arguments(args)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if args.baseline is not None:
        model = _regression(args, options, plots_module)
        if model is None:
            return EXIT_INPUT_ERROR
    else:
        model = _summary(args.csv, options, plots_module, args.all_runs)
    return _report(model, options, plots_module)


def _output_error(options: ReportOptions) -> str | None:
    """Why one of the outputs cannot be written, checked before anything is written."""
    for path, what, folder in (
        (options.output, "summary report", False),
        (options.json_path, "json report", False),
        (options.plot_dir, "plots", True),
    ):
        why = None if path is None else unwritable(path, directory=folder)
        if why:
            return f"cannot write {what} to {path}: {why}"
    return None


def _expand_arguments(args: argparse.Namespace) -> None:
    """Directories become the CSV files under them (sorted), in place; one without any
    stays, and the reader reports it as an input error."""
    for name in ("csv", "baseline", "candidate"):
        paths = getattr(args, name)
        if paths:
            setattr(args, name, expand_paths(paths, "*.csv")[0])


def _summary(paths, options: ReportOptions, plots_module, all_runs: bool = False):
    """The summary model of the newest run among ``paths`` (every file with ``all_runs``)."""
    result = load_run(paths, all_runs=all_runs)
    _print_note(result.note, options)
    return summarize(result)


def _regression(args: argparse.Namespace, options: ReportOptions, plots_module):
    """The regression model, or None after printing why a samples file is unusable."""
    from fi_attn_bench.summarizer.regression import compare

    samples = None
    if args.baseline_samples or args.candidate_samples:
        samples = _run_samples(args.baseline_samples or [], args.candidate_samples or [])
        if samples is None:
            return None
    sides = [
        load_run(paths, group, all_runs=args.all_runs)
        for paths, group in ((args.baseline, "baseline"), (args.candidate, "candidate"))
    ]
    for side in sides:
        _print_note(side.note, options)
    return compare(*sides, Gate(args.fail_on_regression), samples)


def _print_note(note: str, options: ReportOptions) -> None:
    """The runs left out, on stdout; on stderr while stdout carries the report."""
    if note:
        print(f"note: {note}", file=sys.stderr if is_stdout(options.output) else sys.stdout)


def _run_samples(baseline, candidate):
    """Both sides' raw samples, or None after printing the one-line reason."""
    from fi_attn_bench.summarizer.samples import RunSamples, SamplesError, read_samples

    try:
        return RunSamples(read_samples(baseline), read_samples(candidate))
    except SamplesError as exc:
        print(f"error: samples: {exc}", file=sys.stderr)
        return None


def _report(model, options: ReportOptions, plots_module) -> int:
    """Plots, Markdown, JSON, stderr; the model decides the exit code.

    A plot that fails is reported and gives exit 2, but the reports are still written.
    """
    plots_failed = False
    try:
        links = _render_plots(model, options, plots_module) if plots_module else []
    except Exception as exc:  # noqa: BLE001 - a broken plot must not hide the verdict
        print(f"error: plotting failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        links, plots_failed = [], True
    regression = hasattr(model, "matched")
    render = regression_markdown if regression else summary_markdown
    markdown = render(model, options.max_bytes, links, only_changed=options.only_changed)
    to_stdout = is_stdout(options.output)
    if not to_stdout:
        console = regression_console if regression else summary_console
        print(console(model, terminal_width(), only_changed=options.only_changed), flush=True)
    if not _write(options.output, markdown, "Summary"):
        return EXIT_INPUT_ERROR
    if options.json_path is not None and not _write(
        options.json_path, model_json(model), "JSON", quiet=to_stdout
    ):
        return EXIT_INPUT_ERROR
    _print_issues(model.issues)
    return EXIT_INPUT_ERROR if plots_failed else model.exit_code


def _write(path: Path, text: str, what: str, quiet: bool = False) -> bool:
    try:
        write_report(path, text)
    except OSError as exc:
        print(f"error: cannot write {what.lower()} report to {path}: {exc}", file=sys.stderr)
        return False
    if not is_stdout(path) and not quiet:
        print(f"{what} saved to {path}")
    return True


def _print_issues(issues) -> None:
    for issue in issues[:STDERR_ISSUE_LIMIT]:
        print(f"error: {issue.group}: {issue.source}: {issue.message}", file=sys.stderr)
    if len(issues) > STDERR_ISSUE_LIMIT:
        print(
            f"error: ... and {len(issues) - STDERR_ISSUE_LIMIT} more (see the report)",
            file=sys.stderr,
        )


def _import_plots():
    """(report_plots module, None) or (None, why plotting is unavailable)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return None, "--plot-dir needs matplotlib: pip install 'fi-attn-bench[plot]'"
    try:
        plots = importlib.import_module("fi_attn_bench.summarizer.plots")
    except ImportError as exc:
        return None, f"--plot-dir needs the plots module: {exc}"
    return plots, None


def _render_plots(model, options: ReportOptions, plots_module) -> list[str]:
    """Call report_plots with the model's tables; links relative to the report file."""
    from fi_attn_bench.summarizer.regression import RegressionModel

    options.plot_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(model, RegressionModel):
        paths = plots_module.render_regression_plots(
            regression_plot_rows(model), model.gate.threshold_pct, options.plot_dir
        )
    else:
        paths = plots_module.render_summary_plots(summary_plot_rows(model), options.plot_dir)
    report_dir = options.output.resolve().parent
    return [Path(os.path.relpath(Path(p).resolve(), report_dir)).as_posix() for p in paths]


def regression_plot_rows(model):
    """The rows report_plots.render_regression_plots reads."""
    return model.labelled("matched")[["api", "case_label", "state", "speedup"]]


def run_as_program(argv: list[str] | None = None) -> int:
    """``main`` for a whole process (``summarize_results.py``, ``fi-attn-summarize``)."""
    # A short-lived process that allocates millions of small objects: the cyclic collector's
    # passes over them cost ~0.1-0.2 s of a 200k-row regression and free nothing (peak RSS
    # of the 1M-row summary and of the regression measured the same with it off).
    gc.disable()
    status = main(argv)
    # The process ends here: spare the interpreter's shutdown collections a walk over
    # every object (numpy's included), a sizeable part of a short run's wall time.
    gc.freeze()
    return status
