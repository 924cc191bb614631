"""Summarize and compare FlashInfer benchmark CSV files.

Summary mode:    summarize_results.py A.csv B.csv ... [--output summary.md]
Regression mode: summarize_results.py --baseline B.csv... --candidate C.csv...
                 [--fail-on-regression PERCENT] [--output report.md]
A directory argument stands for every *.csv under it; ``--output -`` writes the
report to standard output.  Otherwise the verdict, warnings and a compact table go to
stdout.  No output path may be an input or an existing data file.

Exit codes: 0 valid input and nothing failed; 1 a failed case, a candidate missing a
baseline case, or a regression beyond the gate; 2 bad arguments, unreadable or
invalid input, runs that measured different things (schema.Compare.MUST_MATCH
columns; see --allow-difference), or a report that cannot be written; 130 interrupted.  A reader that
closes stdout early (``| head``) does not change the exit code.

The work is load -> validate -> compare -> render (package ``summarizer``); this
module is the command line (the seed's importable API is ``summarizer.seed_api``).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import math
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.program import program_name
from fi_attn_bench.summarizer.comparability import MUST_MATCH_COLUMNS
from fi_attn_bench.summarizer.contest import (
    DEFAULT_CONTEST,
    SUSPICIOUS_SPEEDUP,
    ContestOptions,
)
from fi_attn_bench.summarizer.loading import load_run, load_runs
from fi_attn_bench.summarizer.markdown_text import DEFAULT_MAX_REPORT_BYTES
from fi_attn_bench.summarizer.model import (
    EXIT_BENCHMARK_FAILURE,
    EXIT_INPUT_ERROR,
    EXIT_OK,
    Gate,
    ReportKind,
    Verdict,
    plural,
    summarize,
    summary_plot_rows,
)
from fi_attn_bench.summarizer.output import (
    OutputTarget,
    is_stdout,
    missing_folder,
    overwrite_error,
    unwritable,
    write_report,
)
from fi_attn_bench.summarizer.paths import expand_paths
from fi_attn_bench.summarizer.renderers import JSON, MARKDOWN, TERMINAL
from fi_attn_bench.summarizer.terminal import terminal_text, terminal_width

# main's exit codes stay beside it; the seed's record-level API is summarize_results.py's.
__all__ = [
    "EXIT_BENCHMARK_FAILURE",
    "EXIT_INPUT_ERROR",
    "EXIT_OK",
    "build_parser",
    "main",
    "parse_args",
    "run_as_program",
]

EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a process that SIGINT ended
MIN_REPORT_BYTES = 4096
STDERR_ISSUE_LIMIT = 50
ALLOWABLE_DIFFERENCES = tuple(column.name for column in MUST_MATCH_COLUMNS)


# --------------------------------------------------------------------- command


@dataclass(frozen=True)
class ReportOptions:
    """Where and how big the reports are, and what they list."""

    output: Path
    json_path: Path | None
    max_bytes: int
    plot_dir: Path | None
    only_changed: bool = False
    bmf_path: Path | None = None  # Bencher Metric Format JSON (summarizer.bmf)


def column_list(text: str) -> list[str]:
    """--allow-difference's value: comma-separated must-match column names."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in names if name not in ALLOWABLE_DIFFERENCES]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{', '.join(unknown) or 'no column'}: name columns among "
            + ", ".join(ALLOWABLE_DIFFERENCES)
        )
    return names


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name("summarize_results.py"), description=__doc__.split("\n")[0]
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
        "--fail-on-energy-regression",
        type=float,
        metavar="PERCENT",
        help="Regression mode: return 1 when a matched case's energy_mJ rises by more than "
        "this percentage (rows without energy on either side are never gated).",
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
        "--bmf",
        type=Path,
        metavar="PATH",
        help="Also write Bencher Metric Format JSON (bencher run --adapter json): the run's "
        "cases, or the candidate's in regression mode.",
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
        "--noise-from",
        type=Path,
        metavar="STORE",
        help="Regression mode: a fi-attn-history store; a case with 10 or more runs there "
        "regresses only past 3 x sqrt(2) x its run-to-run noise (what two runs of the same "
        "code show), besides the gate and the significance test.",
    )
    parser.add_argument(
        "--allow-difference",
        type=column_list,
        action="extend",
        metavar="COLUMN[,COLUMN...]",
        help="Regression mode: compare runs that differ in these columns, which otherwise "
        f"make the comparison exit 2 ({', '.join(ALLOWABLE_DIFFERENCES)}); the report "
        "states the differences at the top.",
    )
    parser.add_argument(
        "--all-runs",
        action="store_true",
        help="Read every file given as one run; by default, files holding several runs of "
        "the same cases give their newest run (noted on stdout and in the report).",
    )
    parser.add_argument(
        "--suspicious-speedup",
        type=speedup_factor,
        default=SUSPICIOUS_SPEEDUP,
        metavar="FACTOR",
        help="Head to head: flag a speedup over the baseline implementation above FACTOR as "
        f"suspicious in the contest score, with its numbers (default {SUSPICIOUS_SPEEDUP:g}; "
        "a row above the device's peak bandwidth is flagged too).",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    return parser


def speedup_factor(text: str) -> float:
    """--suspicious-speedup's value: a number above 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 1.0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number above 1")
    return value


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
    _check_energy_gate(parser, args.fail_on_energy_regression, regression_mode)
    if args.max_report_bytes < MIN_REPORT_BYTES:
        parser.error(f"--max-report-bytes must be at least {MIN_REPORT_BYTES}")
    if not regression_mode:
        for name in (
            "only_changed",
            "baseline_samples",
            "candidate_samples",
            "allow_difference",
            "noise_from",
        ):
            if getattr(args, name):
                parser.error(f"--{name.replace('_', '-')} requires regression mode")
    if (args.baseline_samples is None) != (args.candidate_samples is None):
        parser.error("--baseline-samples and --candidate-samples go together: give both")
    if is_stdout(args.json) or (args.json is not None and _same_path(args.json, args.output)):
        parser.error("--json needs a file of its own")
    if args.bmf is not None and (
        is_stdout(args.bmf) or any(_same_path(args.bmf, p) for p in (args.output, args.json) if p)
    ):
        parser.error("--bmf needs a file of its own")
    return args


def _same_path(first: Path, second: Path) -> bool:
    return first == second or os.path.realpath(first) == os.path.realpath(second)


def _check_energy_gate(parser, pct: float | None, regression_mode: bool) -> None:
    """--fail-on-energy-regression: regression mode, a finite, non-negative percentage."""
    if pct is None:
        return
    if not regression_mode:
        parser.error("--fail-on-energy-regression requires regression mode")
    if not math.isfinite(pct) or pct < 0:
        parser.error("--fail-on-energy-regression must be a finite, non-negative percentage")


def main(argv=None) -> int:
    """Run the command; every outcome is an exit code, never a traceback.

    An unexpected error (a bug, or memory exhausted) is reported in one line and
    gives exit 2; SUMMARIZE_DEBUG=1 re-raises it instead, with its traceback.
    """
    args = parse_args(argv)
    try:
        return _run(args)
    except KeyboardInterrupt:  # reports are written atomically: nothing half-written remains
        print("error: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get("SUMMARIZE_DEBUG"):
            raise
        print(f"error: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR


def _run(args: argparse.Namespace) -> int:
    options = ReportOptions(
        args.output, args.json, args.max_report_bytes, args.plot_dir, args.only_changed, args.bmf
    )
    error = _output_error(options)
    plots_module = None
    if error is None and options.plot_dir is not None:
        plots_module, error = _import_plots()
    if error is None:
        error = _expand_arguments(args)
    if error is None:
        error = _overwrite_error(args, options, plots_module)
    if error is not None:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    if args.baseline is not None:
        model = _regression(args, options, plots_module)
        if model is None:
            return EXIT_INPUT_ERROR
        for why in _young_noise_store(args, model):
            print(f"warning: {why}", file=sys.stderr)
        idle = _idle_checks(args, model) + _implausible_times(model.matched, "time_ms_candidate")
        if idle:
            status = _report(model, options, plots_module)
            for why in idle:
                print(f"error: {why}", file=sys.stderr)
            return max(status, EXIT_INPUT_ERROR)
    else:
        contest = ContestOptions(args.suspicious_speedup)
        model = _summary(args.csv, options, plots_module, args.all_runs, contest)
        implausible = _implausible_times(model.frame, "time_ms")
        if implausible:
            status = _report(model, options, plots_module)
            print(f"error: {implausible[0]}", file=sys.stderr)
            return max(status, EXIT_INPUT_ERROR)
    return _report(model, options, plots_module)


def _implausible_times(table, column: str) -> list[str]:
    """Why no run measured these times: past MAX_PLAUSIBLE_TIME_MS (1e308 passes the
    seed's finite-and-positive rule, which the reader keeps), as one line (exit 2)."""
    import numpy as np

    from fi_attn_bench.results.schema import MAX_PLAUSIBLE_TIME_MS

    if table is None or column not in getattr(table, "columns", ()):
        return []
    times = table[column].to_numpy(dtype=float)
    with np.errstate(invalid="ignore"):
        count = int((times > MAX_PLAUSIBLE_TIME_MS).sum())
    if not count:
        return []
    return [
        f"{plural(count, 'row')} with {column} beyond {MAX_PLAUSIBLE_TIME_MS:g} ms "
        f"(largest {np.nanmax(times):g}): not a measured time; check the CSV"
    ]


def _idle_checks(args: argparse.Namespace, model) -> list[str]:
    """The gates asked for that could check nothing (exit 2 after the reports): an energy
    gate with no case measured on both sides."""
    if model.verdict is Verdict.NOT_COMPARABLE or not len(model.matched):
        return []
    idle = []
    if args.fail_on_energy_regression is not None:
        delta = model.matched["energy_mJ_delta_pct"].to_numpy(dtype=float)
        if not (delta == delta).any():
            idle.append(
                "--fail-on-energy-regression: no matched case has energy_mJ on both sides,"
                " so the energy gate checked nothing"
            )
    return idle


def _young_noise_store(args: argparse.Namespace, model) -> list[str]:
    """A --noise-from store that knows no matched case's run-to-run noise (fewer than 10 runs
    of each): said on stderr, the gate then judging as without it; not exit 2, since a CI
    workflow's history starts empty and must still gate its first runs (docs/CI.md)."""
    from fi_attn_bench.results.series_noise import MIN_SERIES_RUNS

    if model.verdict is Verdict.NOT_COMPARABLE or not len(model.matched):
        return []
    idle = []
    if args.noise_from is not None:
        noise = model.matched["run_noise_pct"].to_numpy(dtype=float)
        if not (noise == noise).any():
            idle.append(
                f"--noise-from {args.noise_from}: no matched case has {MIN_SERIES_RUNS} or more"
                " runs there, so run-to-run noise excused nothing"
            )
    return idle


def _output_error(options: ReportOptions) -> str | None:
    """Why one of the outputs cannot be written, checked before anything is written."""
    for path, what, folder in (
        (options.output, "summary report", False),
        (options.json_path, "json report", False),
        (options.plot_dir, "plots", True),
        (options.bmf_path, "BMF file", False),
    ):
        why = None if path is None else unwritable(path, directory=folder)
        if why:
            return f"cannot write {what} to {path}: {why}"
    return None


def _expand_arguments(args: argparse.Namespace) -> str | None:
    """Directories become the CSV files under them (sorted), in place; why not, when a
    directory holds none."""
    for name in ("csv", "baseline", "candidate"):
        paths = getattr(args, name)
        if paths:
            files, why = expand_paths(paths, "*.csv")
            if why:
                return why
            setattr(args, name, files)
    return None


def _overwrite_error(args: argparse.Namespace, options: ReportOptions, plots_module):
    """Why an output would replace an input or an existing data file (None: it would not)."""
    from fi_attn_bench.summarizer.rank_test import SAMPLES_PATTERN

    inputs = [*(args.csv or ()), *(args.baseline or ()), *(args.candidate or ())]
    if args.noise_from is not None:
        inputs.append(args.noise_from)
    for paths in (args.baseline_samples, args.candidate_samples):
        inputs += expand_paths(paths or [], SAMPLES_PATTERN)[0]
    targets = [
        OutputTarget(options.output, "report (--output)"),
        OutputTarget(options.json_path, "JSON report (--json)"),
        OutputTarget(options.bmf_path, "BMF file (--bmf)"),
    ]
    if options.plot_dir is not None:
        suffixes = plots_module.PLOT_FILE_SUFFIXES
        targets.append(OutputTarget(options.plot_dir, "plots (--plot-dir)", suffixes))
    return overwrite_error(targets, inputs)


def _summary(
    paths, options: ReportOptions, plots_module, all_runs: bool = False, contest=DEFAULT_CONTEST
):
    """The summary model of the newest run among ``paths`` (every file with ``all_runs``)."""
    result = load_run(paths, all_runs=all_runs)
    _print_note(result.note, options)
    return summarize(result, contest)


def _regression(args: argparse.Namespace, options: ReportOptions, plots_module):
    """The regression model, or None after printing why a samples file is unusable."""
    from fi_attn_bench.summarizer.regression import compare

    samples = None
    if args.baseline_samples or args.candidate_samples:
        samples = _run_samples(args.baseline_samples or [], args.candidate_samples or [])
        if samples is None:
            return None
    run_noise = None
    if args.noise_from is not None:
        run_noise = _run_noise(args.noise_from)
        if run_noise is None:
            return None
    gate = Gate(
        args.fail_on_regression,
        allowed_differences=tuple(args.allow_difference or ()),
        energy_threshold_pct=args.fail_on_energy_regression,
    )
    sides = load_runs(
        [(args.baseline, "baseline"), (args.candidate, "candidate")], all_runs=args.all_runs
    )
    for side in sides:
        _print_note(side.note, options)
    return compare(*sides, gate, samples, run_noise)


def _print_note(note: str, options: ReportOptions) -> None:
    """The runs left out, on stdout; on stderr while stdout carries the report."""
    if note:
        print(
            terminal_text(f"note: {note}"),
            file=sys.stderr if is_stdout(options.output) else sys.stdout,
        )


def _run_samples(baseline, candidate):
    """Both sides' raw samples, or None after printing the one-line reason."""
    from fi_attn_bench.summarizer.rank_test import RunSamples, SamplesError, read_samples

    try:
        return RunSamples(read_samples(baseline), read_samples(candidate))
    except SamplesError as exc:
        print(f"error: samples: {exc}", file=sys.stderr)
        return None


def _run_noise(store: Path):
    """The cases' run-to-run noise from a history store, or None after printing why not."""
    from fi_attn_bench.summarizer.run_noise import NoiseError, read_run_noise

    try:
        return read_run_noise(store)
    except NoiseError as exc:
        print(f"error: --noise-from: {exc}", file=sys.stderr)
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
    only_changed = options.only_changed
    markdown = MARKDOWN.render(model, options.max_bytes, links, only_changed=only_changed)
    to_stdout = is_stdout(options.output)
    if not to_stdout:
        _say(TERMINAL.render(model, terminal_width(), only_changed=only_changed))
    if not _write(options.output, markdown, "Summary"):
        return EXIT_INPUT_ERROR
    if options.json_path is not None and not _write(
        options.json_path, JSON.render(model), "JSON", quiet=to_stdout
    ):
        return EXIT_INPUT_ERROR
    if options.bmf_path is not None and not _write_bmf(model, options.bmf_path, to_stdout):
        return EXIT_INPUT_ERROR
    if model.verdict is Verdict.NOT_COMPARABLE:
        print(terminal_text(f"error: {model.reason}"), file=sys.stderr)
    _print_issues(model.issues)
    return EXIT_INPUT_ERROR if plots_failed else model.exit_code


def _write_bmf(model, path: Path, quiet: bool) -> bool:
    from fi_attn_bench.summarizer.bmf import bmf_json

    return _write(path, bmf_json(model), "BMF", quiet=quiet)


def _say(text: str) -> None:
    """A line on stdout; a reader that stopped reading (``| head``) changes nothing."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        _stdout_closed()


def _stdout_closed() -> None:
    """Point stdout at /dev/null once its reader is gone, so later writes and the flush at
    exit succeed (Python's documented SIGPIPE recipe) and the verdict's exit code stands."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def _write(path: Path, text: str, what: str, quiet: bool = False) -> bool:
    created = missing_folder(path)
    try:
        write_report(path, text)
    except OSError as exc:
        if isinstance(exc, BrokenPipeError) and is_stdout(path):
            _stdout_closed()  # the report went to a reader that stopped reading
            return True
        print(f"error: cannot write {what.lower()} report to {path}: {exc}", file=sys.stderr)
        return False
    if created is not None:  # a mistyped folder should not go unnoticed
        print(f"note: created folder {created} for the {what.lower()} report", file=sys.stderr)
    if not is_stdout(path) and not quiet:
        _say(f"{what} saved to {path}")
    return True


_LINE_PREFIX = re.compile(r"line (\d+): ")


def _print_issues(issues) -> None:
    """One stderr line per distinct problem: rows of a file failing the same way (a
    schema_version 2 file: every row) are one line naming their first lines."""
    grouped: dict[tuple, list[str]] = {}
    for index, issue in enumerate(issues):
        found = _LINE_PREFIX.match(issue.message)
        if found:
            key = (issue.group, issue.source, issue.message[found.end() :], None)
            grouped.setdefault(key, []).append(found.group(1))
        else:  # no line to name: each is its own line
            grouped[(issue.group, issue.source, issue.message, index)] = []
    shown = list(grouped.items())[:STDERR_ISSUE_LIMIT]
    for (group, source, message, _), lines in shown:
        where = _line_list(lines)
        text = f"error: {group}: {source}: {where}{message}"
        print(terminal_text(text), file=sys.stderr)
    if len(grouped) > STDERR_ISSUE_LIMIT:
        print(
            f"error: ... and {plural(len(grouped) - STDERR_ISSUE_LIMIT, 'more issue')} "
            "(see the report)",
            file=sys.stderr,
        )


def _line_list(lines: list[str]) -> str:
    if not lines:
        return ""
    if len(lines) == 1:
        return f"line {lines[0]}: "
    first = ", ".join(lines[:3])
    more = f", … ({len(lines)} rows)" if len(lines) > 3 else ""
    return f"lines {first}{more}: "


def _import_plots():
    """(plots module, None) or (None, why plotting is unavailable)."""
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
    """Call plots with the model's tables; links relative to the report file."""
    options.plot_dir.mkdir(parents=True, exist_ok=True)
    if model.kind is ReportKind.REGRESSION:
        paths = plots_module.render_regression_plots(
            regression_plot_rows(model), model.gate.threshold_pct, options.plot_dir
        )
    else:
        paths = plots_module.render_summary_plots(summary_plot_rows(model), options.plot_dir)
        if model.head_to_head:
            forest = importlib.import_module("fi_attn_bench.summarizer.forest_plot")
            paths += forest.render_forest_plots(model.head_to_head, options.plot_dir)
    report_dir = options.output.resolve().parent
    return [Path(os.path.relpath(Path(p).resolve(), report_dir)).as_posix() for p in paths]


def regression_plot_rows(model):
    """The rows plots.render_regression_plots reads."""
    return model.labelled("matched")[["api", "case_label", "state", "speedup"]]


def run_as_program(argv: list[str] | None = None) -> int:
    """``main`` for a whole process (``summarize_results.py``, ``fi-attn-summarize``)."""
    # A short-lived process that allocates millions of small objects: the cyclic collector's
    # passes over them cost ~0.1-0.2 s of a 200k-row regression and free nothing (peak RSS
    # of the 1M-row summary and of the regression measured the same with it off).
    gc.disable()
    status = main(argv)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _stdout_closed()
    # The process ends here: spare the interpreter's shutdown collections a walk over
    # every object (numpy's included), a sizeable part of a short run's wall time.
    gc.freeze()
    return status
