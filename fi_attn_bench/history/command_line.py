"""``fi-attn-history``: add runs to the store, find change points, draw the dashboard,
write the baseline.  Exit codes: 0 done, 2 bad input, a query that matches nothing or an
unusable store or output, 130 interrupted (Ctrl-C); every error is one ``error:`` line."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from pathlib import Path

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.history import bisect_command_line
from fi_attn_bench.history.reading import NotARunError, csv_paths, runs_in_file
from fi_attn_bench.results.run_rows import file_digest
from fi_attn_bench.results.run_store import DEFAULT_STORE_NAME, RunStore, StoreError
from fi_attn_bench.summarizer.output import (
    OutputTarget,
    input_named,
    is_sqlite_file,
    missing_folder,
    overwrite_error,
    unwritable,
    write_atomically,
)
from fi_attn_bench.summarizer.terminal import terminal_text

EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 2, 130
DEBUG_ENVIRONMENT = "FI_ATTN_HISTORY_DEBUG"  # set: an unexpected error shows its traceback
DEFAULT_STORE = Path("results") / DEFAULT_STORE_NAME
BRANCH_ENVIRONMENT = ("FI_ATTN_HISTORY_BRANCH", "GITHUB_HEAD_REF", "GITHUB_REF_NAME")


class UsageError(Exception):
    """A bad argument found after parsing (exit 2)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fi-attn-history",
        description="Remember every benchmark run; find change points on clock-normalized time.",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add", help="ingest result CSVs (files or directories) as runs")
    add.add_argument("inputs", nargs="+", metavar="CSV_OR_DIR")
    add.add_argument(
        "--store", help=f"store file (default: {DEFAULT_STORE_NAME} beside the first input)"
    )
    add.add_argument(
        "--branch",
        help="branch the runs belong to (default: $FI_ATTN_HISTORY_BRANCH, $GITHUB_HEAD_REF or $GITHUB_REF_NAME)",
    )
    detect = commands.add_parser("detect", help="list change points per case")
    _add_query_options(detect)
    detect.add_argument("--json", action="store_true", help="one JSON object per change point")
    report = commands.add_parser("report", help="write the dashboard (HTML) and a short Markdown")
    _add_query_options(report)
    report.add_argument("--html", metavar="OUT.html")
    report.add_argument("--md", metavar="OUT.md")
    baseline = commands.add_parser("baseline", help="write the baseline run of a branch as CSVs")
    baseline.add_argument("--store", default=str(DEFAULT_STORE))
    baseline.add_argument("--branch", required=True)
    baseline.add_argument("--out", default="baseline", metavar="DIR")
    baseline.add_argument(
        "--median-of",
        type=int,
        metavar="K",
        help="per case, the median of the branch's last K runs",
    )
    bisect_command_line.add_parser(commands)
    return parser


def _add_query_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store", default=str(DEFAULT_STORE), help=f"store file (default: {DEFAULT_STORE})"
    )
    parser.add_argument(
        "--since",
        help="only change points at runs started at or after this UTC date/time, or from this commit on",
    )
    parser.add_argument(
        "--cases",
        metavar="FILTER",
        help="only cases matching NAME=VALUE[,NAME=VALUE...] (api, impl or a case field)",
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {
        "add": run_add,
        "detect": run_detect,
        "report": run_report,
        "baseline": run_baseline,
        "bisect": bisect_command_line.run,
    }
    store = getattr(args, "store", None) or "the history store"
    try:
        return handlers[args.command](args)
    except (StoreError, NotARunError, UsageError) as exc:
        return fail(str(exc))
    except sqlite3.Error as exc:  # a write the disk or the file's permissions refused
        return fail(f"cannot use history store {store}: {exc}")
    except json.JSONDecodeError as exc:
        return fail(f"history store {store} holds a value that is not JSON (tampered?): {exc}")
    except BrokenPipeError:
        stdout_closed()  # `detect | head`: the reader has what it wanted
        return EXIT_OK
    except OSError as exc:
        return fail(f"{exc.filename or store}: {exc.strerror or exc}")
    except KeyboardInterrupt:
        print("error: interrupted; the store holds whole runs only", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as exc:
        if os.environ.get(DEBUG_ENVIRONMENT):
            raise
        return fail(f"internal error: {type(exc).__name__}: {exc}")


def fail(message: str) -> int:
    """One line on stderr, control codes made visible; exit 2."""
    print(f"error: {terminal_text(message)}", file=sys.stderr)
    return EXIT_BAD_INPUT


def say(text: str) -> None:
    """A line on stdout with the terminal's control codes escaped (strings come from CSVs)."""
    print(terminal_text(text))


def stdout_closed() -> None:
    """Point stdout at /dev/null once its reader is gone, so the flush at exit succeeds."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def run_as_program() -> None:
    try:
        status = main()
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_closed()
        status = EXIT_OK
    except KeyboardInterrupt:  # before main's own handler (parsing the arguments)
        print("error: interrupted", file=sys.stderr)
        status = EXIT_INTERRUPTED
    sys.exit(status)


def default_branch() -> str:
    for name in BRANCH_ENVIRONMENT:
        if os.environ.get(name):
            return os.environ[name]
    return ""


def default_add_store(first_input: str) -> Path:
    path = Path(first_input)
    return (path if path.is_dir() else path.parent) / DEFAULT_STORE_NAME


def run_add(args) -> int:
    paths = csv_paths(args.inputs)
    if not paths:
        raise UsageError(f"no CSV files in {', '.join(args.inputs)}")
    store_path = Path(args.store) if args.store else default_add_store(args.inputs[0])
    check_store_target(store_path, paths)
    digests = {path: _digest(path) for path in paths}
    known = _stored_files(store_path, digests.values())
    fresh = [path for path in paths if digests[path] is None or digests[path] not in known]
    runs = [run for path in fresh for run in runs_in_file(path)]  # every file read before any write
    branch = args.branch if args.branch is not None else default_branch()
    added: dict[str, int] = {}  # per run id, results new to the store
    with RunStore.open(store_path, create=True) as store:
        upgrade = store.upgrade()
        if upgrade is not None:
            print(upgrade.message(store_path))
        for run in runs:
            added[run.run_id] = added.get(run.run_id, 0) + store.add_run(run, branch)
        for path in fresh:
            if digests[path] is not None:
                store.record_file(digests[path])
    grown = sum(1 for count in added.values() if count)
    skipped = len(paths) - len(fresh)
    again = f"; {skipped} file(s) added before, not read again" if skipped else ""
    say(
        f"added {grown} run(s), {sum(added.values())} result(s), to {store_path}"
        f" ({len(added) - grown} already stored{again})"
    )
    return EXIT_OK


def check_store_target(store: Path, inputs: list[Path]) -> None:
    """Refuse a store path that is an input, a file that is not SQLite, or cannot be written,
    before anything is read or written."""
    source = input_named(store, inputs)
    if source is not None:
        raise UsageError(f"refusing to use {store} as the history store: it is an input ({source})")
    if store.is_file() and store.stat().st_size and not is_sqlite_file(store):
        raise UsageError(
            f"{store} is not a usable history store: not an SQLite file; nothing written"
        )  # an empty file is a fresh SQLite database
    why = unwritable(store)
    if why is None and store.exists() and not os.access(store, os.W_OK):
        why = "permission denied"
    if why:
        raise UsageError(f"cannot write history store {store}: {why}")


def _digest(path: Path) -> str | None:
    """The file's SHA-256; None when it cannot be read (the reader then says why)."""
    try:
        return file_digest(path)
    except (OSError, ValueError):
        return None


def _stored_files(store_path: Path, digests) -> set[str]:
    """The digests among ``digests`` of files the store holds whole (none without a store)."""
    if not store_path.exists():
        return set()
    with RunStore.open(store_path, create=False) as store:
        return {digest for digest in digests if digest is not None and store.has_file(digest)}


def load_analysis(args):
    from fi_attn_bench.history.analysis import analyze, parse_case_filter

    try:
        terms = parse_case_filter(args.cases)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    require_ruptures()
    with RunStore.open(args.store, create=False) as store:
        history = store.history()
    return analyze(history), terms


def require_ruptures() -> None:
    """The change-point search needs ruptures (the [history] extra): say so in one line."""
    try:
        import ruptures  # noqa: F401
    except ImportError:
        raise UsageError(
            "change-point detection needs ruptures: pip install 'fi-attn-bench[history]'"
        ) from None


def selected_changes(analysis, terms, since: str | None) -> list:
    """The changes --cases and --since keep (the run-wide series only without --cases);
    a --cases filter that matches no series, or a --since that selects no run, is an error."""
    from fi_attn_bench.history.analysis import case_matches

    if terms and not any(case_matches(series.case, terms) for series in analysis.series):
        wanted = ",".join(f"{name}={value}" for name, value in terms.items())
        raise UsageError(f"--cases {wanted} matches no case of the {len(analysis.series)} stored")
    first = since_position(analysis.runs, since)
    position = {run.run_seq: index for index, run in enumerate(analysis.runs)}
    return [
        change
        for change in analysis.changes()
        if position[change.run.run_seq] >= first
        and (case_matches(change.case, terms) if change.case is not None else not terms)
    ]


def since_position(runs, since: str | None) -> int:
    """Position of the first run --since selects: by commit prefix, else by start time
    (UTC); a --since that is neither a stored commit nor a date, or after the newest run,
    is an error rather than an empty answer."""
    if not since:
        return 0
    for position, run in enumerate(runs):
        if run.commit and run.commit.startswith(since):
            return position
    stamp = utc_stamp(since)
    if stamp is None:
        raise UsageError(
            f"--since {since!r} is no stored commit and not a date (YYYY-MM-DD[THH:MM[:SS]], UTC)"
        )
    for position, run in enumerate(runs):
        if run.started_utc >= stamp:
            return position
    newest = runs[-1].started_utc if runs else "none"
    raise UsageError(f"--since {since}: no run started at or after it (newest run: {newest})")


def utc_stamp(text: str) -> str | None:
    """``text`` as the store's start stamps are written (2026-01-02T03:04:05Z), or None."""
    from datetime import datetime, timezone

    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


LEAST_SENSITIVE_SHOWN = 3


def run_detect(args) -> int:
    from fi_attn_bench.history.analysis import (
        case_label,
        change_record,
        least_sensitive,
        sensitivity_note,
        sensitivity_summary,
    )

    analysis, terms = load_analysis(args)
    changes = selected_changes(analysis, terms, args.since)
    if args.json:
        for change in changes:
            print(json.dumps(change_record(change)))  # ensure_ascii: control codes escaped
        return EXIT_OK
    say(
        f"{len(changes)} change point(s) in {len(analysis.series)} series over {len(analysis.runs)} runs"
    )
    for change in changes:
        record = change_record(change)
        scaled = (
            f"clock-scaled (exponent {record['clock_exponent']:.2f})"
            if record["clock_scaled"]
            else "time as measured"
        )
        say(
            f"{record['size_pct']:+7.2f} %  confidence {record['confidence'] or 0:.3f}  "
            f"commit {record['commit'][:12] or '?'}  {record['started_utc']}  {record['case']}  ({scaled})"
        )
    summary = sensitivity_summary(analysis)
    if summary:
        say(f"sensitivity: {summary}")
        for series in least_sensitive(analysis, LEAST_SENSITIVE_SHOWN):
            say(f"  {sensitivity_note(series)}  {case_label(series.case)}")
    return EXIT_OK


def run_report(args) -> int:
    from fi_attn_bench.history.report import HTML, MARKDOWN, HistoryReport

    if not args.html and not args.md:
        raise UsageError("report needs --html OUT.html and/or --md OUT.md")
    check_report_targets(args)
    analysis, terms = load_analysis(args)
    report = HistoryReport(
        analysis, tuple(selected_changes(analysis, terms, args.since)), terms, args.since or ""
    )
    for path, renderer in ((args.html, HTML), (args.md, MARKDOWN)):
        if path:
            created = missing_folder(path)
            write_atomically(Path(path), renderer.render(report))
            if created is not None:  # a mistyped folder should not go unnoticed
                print(f"note: created folder {created} for {path}", file=sys.stderr)
    return EXIT_OK


def check_report_targets(args) -> None:
    """Refuse before reading anything: a target that is the store, another SQLite file, an
    existing data file, the other target, or cannot be written."""
    targets = [
        OutputTarget(Path(path), what)
        for path, what in ((args.html, "dashboard (--html)"), (args.md, "digest (--md)"))
        if path
    ]
    if len(targets) == 2 and os.path.realpath(args.html) == os.path.realpath(args.md):
        raise UsageError("--html and --md need a file each")
    why = overwrite_error(targets, [Path(args.store)])
    if why:
        raise UsageError(why)
    for target in targets:
        why = unwritable(target.path)
        if why:
            raise UsageError(f"cannot write the {target.what} to {target.path}: {why}")


def run_baseline(args) -> int:
    from fi_attn_bench.history.baseline import (
        NoBaselineError,
        baseline_paths,
        branch_runs,
        latest_complete_rows,
        median_rows,
        write_baseline,
    )

    if args.median_of is not None and args.median_of < 1:
        raise UsageError("--median-of must be at least 1")
    out = Path(args.out)
    why = unwritable(out, directory=True) or overwrite_error(
        [OutputTarget(out, "baseline (--out)", (".csv",))], [Path(args.store)]
    )
    if why:
        raise UsageError(why if why.startswith("refusing") else f"cannot write {out}: {why}")
    with RunStore.open(args.store, create=False) as store:
        runs = branch_runs(store, args.branch)
        if not runs:
            raise UsageError(f"no run of branch {args.branch!r} in {args.store}")
        try:
            if args.median_of:
                rows = median_rows(store, runs, args.median_of)
                what = f"median of the last {min(args.median_of, len(runs))} runs"
            else:
                rows, chosen = latest_complete_rows(store, runs)
                what = ", ".join(
                    f"run {run.run_id} (commit {run.commit[:12] or '?'})" for run in chosen
                )
        except NoBaselineError as exc:
            raise UsageError(f"branch {args.branch!r}: {exc}") from None
    columns = tuple(dict.fromkeys(name for run in runs for name in run.columns))
    for path in baseline_paths({row["api"] for row in rows}, out).values():
        if is_sqlite_file(path):
            raise UsageError(f"refusing to write the baseline to {path}: it is an SQLite file")
    paths = write_baseline(rows, columns, out)
    say(f"baseline of {args.branch}: {what} -> {', '.join(str(p) for p in paths)}")
    return EXIT_OK
