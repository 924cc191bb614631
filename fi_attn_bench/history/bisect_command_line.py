"""``fi-attn-history bisect``: its options, the checks made before any run, and the report.

Exit codes: 0 the first bad revision is named; 3 cannot tell (a step's repeat budget ended
undecided, every revision left was skipped, or good and bad measure the same); 2 bad input,
found before any run or when good or bad itself does not run; 130 interrupted (worktrees and
environments removed)."""

from __future__ import annotations

import argparse
import contextlib
import shlex
import shutil
import signal
import sys
import threading
from pathlib import Path

import fi_attn_bench
from fi_attn_bench.history.bisect_sources import BisectInputError
from fi_attn_bench.history.bisect_stats import (
    DEFAULT_ALPHA,
    DEFAULT_TRIM,
    SIGNED_RANK,
    TESTS,
    fewest_repeats_for,
)
from fi_attn_bench.results.run_store import DEFAULT_STORE_NAME, RunStore

EXIT_BAD_INPUT, EXIT_INTERRUPTED = 2, 130
DEFAULT_STORE = Path("results") / DEFAULT_STORE_NAME
DEFAULT_SCRIPT = "bench_batch_decode"
DEFAULT_BRANCH = "bisect"
# BisectSettings' defaults (a test holds them equal), here so that --help imports no more
DEFAULT_MAX_REPEATS, DEFAULT_MIN_CHANGE_PCT, DEFAULT_TEST = 100, 1.0, SIGNED_RANK
DEFAULT_RUN_TIMEOUT_S = 1800.0
# Case fields the bench scripts' --filter does not take (they name the API and the impl).
NOT_FILTER_FIELDS = ("api", "impl")


def add_parser(commands) -> None:
    bisect_parser = commands.add_parser(
        "bisect",
        help="find the revision (commit or wheel version) that changed a case's time",
        description="Bisect commits of --repo (each in a git worktree of its own) or wheels "
        "of --versions DIR, comparing fresh runs with a rank test until it decides; "
        "exit 0 named, 3 cannot tell, 2 bad input.",
    )
    ends = bisect_parser.add_argument_group("what to bisect")
    ends.add_argument("--good", metavar="REV", help="a revision (or version) at the old time")
    ends.add_argument("--bad", metavar="REV", help="a later revision (or version) at the new time")
    ends.add_argument(
        "--case",
        metavar="EXPR",
        help="the case: NAME=VALUE[,NAME=VALUE...] (api, impl or a case field), one case of "
        "COMMAND's output",
    )
    ends.add_argument("--repo", default=".", metavar="PATH", help="git repository (default .)")
    ends.add_argument(
        "--versions", metavar="DIR", help="bisect the wheels in DIR by version instead of commits"
    )
    ends.add_argument(
        "--from-change",
        type=int,
        metavar="N",
        help="good, bad and case from detect's N-th change point (from 1) in --store",
    )
    how = bisect_parser.add_argument_group("how to run a revision")
    how.add_argument(
        "--impl",
        metavar="FILE.py:FACTORY",
        help="without COMMAND: the plugin, as a path inside the repository, that the default "
        f"command ({DEFAULT_SCRIPT}.py --impl {{rev_dir}}/FILE.py:FACTORY) measures",
    )
    how.add_argument("--script", default=DEFAULT_SCRIPT, help="the default command's bench script")
    how.add_argument(
        "--setup", default="", metavar="SHELL", help="run once per revision in its directory"
    )
    how.add_argument("--run-timeout", type=float, default=DEFAULT_RUN_TIMEOUT_S, metavar="S")
    how.add_argument(
        "command_argv",
        nargs="*",
        metavar="-- COMMAND",
        help="what one run is; {rev_dir}, {python}, {output} and {rev} are replaced",
    )
    statistics = bisect_parser.add_argument_group("statistics")
    statistics.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    statistics.add_argument(
        "--test", choices=TESTS, default=DEFAULT_TEST,
        help="signed-rank (default): Wilcoxon on the log ratios of runs that shared a round; "
        "mann-whitney: Pinpoint's test on the two sides' runs",
    )  # fmt: skip
    statistics.add_argument(
        "--trim", type=float, default=DEFAULT_TRIM, metavar="K",
        help="signed-rank: leave out pairs of runs whose |log ratio| is over K times the "
        "median one (a run that met a slow spell of the machine); 0 keeps every pair",
    )  # fmt: skip
    statistics.add_argument(
        "--max-repeats", type=int, default=DEFAULT_MAX_REPEATS, metavar="N",
        help="runs of each revision within one step before it says cannot tell",
    )  # fmt: skip
    statistics.add_argument(
        "--min-change", type=float, default=DEFAULT_MIN_CHANGE_PCT, metavar="PCT",
        help="good and bad within this of each other are the same (nothing to bisect)",
    )  # fmt: skip
    statistics.add_argument("--seed", type=int, default=0, help="order of each round's runs")
    store = bisect_parser.add_argument_group("history store")
    store.add_argument("--store", default=str(DEFAULT_STORE))
    store.add_argument("--no-store", action="store_true", help="keep the runs out of the store")
    store.add_argument("--branch", default=DEFAULT_BRANCH, help="the bisect runs' branch")


def settings_from(args):
    from fi_attn_bench.history.bisect import BisectSettings

    if not 0 < args.alpha < 0.5:
        raise BisectInputError(f"--alpha {args.alpha:g} must lie between 0 and 0.5")
    fewest = fewest_repeats_for(args.alpha, args.test)
    if args.max_repeats < fewest:
        raise BisectInputError(
            f"--max-repeats {args.max_repeats} is too few: a rank test at alpha {args.alpha:g} "
            f"needs {fewest} runs a side to decide"
        )
    if not args.min_change > 0:
        raise BisectInputError("--min-change must be above 0")
    if not (args.trim == 0 or args.trim >= 1):
        raise BisectInputError(f"--trim {args.trim:g} must be 0 (keep every pair) or at least 1")
    return BisectSettings(
        alpha=args.alpha,
        max_repeats=args.max_repeats,
        min_change_pct=args.min_change,
        seed=args.seed,
        test=args.test,
        trim=args.trim,
    )


def case_terms(text: str | None) -> dict[str, str]:
    from fi_attn_bench.history.analysis import parse_case_filter

    try:
        terms = parse_case_filter(text)
    except ValueError as exc:
        raise BisectInputError(str(exc).replace("--cases", "--case")) from None
    if not terms:
        raise BisectInputError(
            "--case names the case to bisect, e.g. --case batch_size=4,seq_len_kv=200"
        )
    return terms


def default_command(args, terms: dict[str, str]) -> tuple[str, ...]:
    """The harness's own script sweeping the named case: --impl from the worktree (git), the
    installed FlashInfer or --impl (wheels)."""
    script = Path(fi_attn_bench.__file__).resolve().parent.parent / f"{args.script}.py"
    if not script.is_file():
        raise BisectInputError(f"--script {args.script}: no {script}")
    argv = ["{python}", str(script)]
    if args.impl:
        argv += ["--impl", args.impl if args.versions else "{rev_dir}/" + args.impl]
    elif not args.versions:
        raise BisectInputError(
            "give --impl FILE.py:FACTORY (a plugin in the repository) or -- COMMAND"
        )
    fields = ",".join(f"{k}={v}" for k, v in terms.items() if k not in NOT_FILTER_FIELDS)
    if fields:
        argv += ["--filter", fields]
    return (*argv, "--output", "{output}")


def check_command(argv: tuple[str, ...]) -> None:
    program = argv[0]
    if program != "{python}" and "{" not in program and shutil.which(program) is None:
        raise BisectInputError(f"COMMAND {program!r} is not found")


def run_bisect(args) -> int:
    """Everything that can be checked is checked before the first run."""
    from fi_attn_bench.history.bisect import EndpointFailed, bisect
    from fi_attn_bench.history.bisect_runs import CommandProber, RunCommand
    from fi_attn_bench.history.bisect_sources import (
        Environments,
        Worktrees,
        commit_line,
        version_line,
        wheels_in,
    )

    if args.versions and (args.from_change is not None or args.repo != "."):
        raise BisectInputError(
            "--versions bisects wheels: it takes neither --repo nor --from-change"
        )
    settings = settings_from(args)
    good, bad, case_text = args.good, args.bad, args.case
    if args.from_change is not None:
        from fi_attn_bench.history.bisect_change import change_ends

        ends = change_ends(Path(args.store), args.from_change)
        good, bad = good or ends.good_commit, bad or ends.bad_commit
        case_text = case_text or ",".join(f"{k}={v}" for k, v in ends.case_terms.items())
        print(f"change point {args.from_change}: {ends.description}")
    terms = case_terms(case_text)
    if args.versions:
        revisions = version_line(wheels_in(Path(args.versions)), good, bad)
    else:
        if not good or not bad:
            raise BisectInputError("bisect needs --good and --bad (or --from-change N)")
        revisions = commit_line(Path(args.repo), good, bad)
    argv = tuple(args.command_argv) or default_command(args, terms)
    check_command(argv)
    command = RunCommand(argv=argv, setup=args.setup, timeout_s=args.run_timeout)
    print(
        f"bisecting {len(revisions)} revisions from {revisions[0]} to {revisions[-1]}; case "
        f"{case_text}; command: {shlex.join(argv)}",
        flush=True,
    )
    with contextlib.ExitStack() as stack:
        source = Environments(Path.cwd()) if args.versions else Worktrees(Path(args.repo))
        stack.enter_context(source)
        store = None
        if not args.no_store:
            store = stack.enter_context(RunStore.open(args.store, create=True))
        prober = CommandProber(
            source, command, terms, case_text, store, args.branch, on_run=print_run
        )
        stack.callback(prober.close)
        try:
            result = bisect(revisions, prober, settings, on_step=print_step)
        except EndpointFailed as exc:
            raise BisectInputError(str(exc)) from None
    print_result(result, args)
    return result.exit_code


def print_run(record) -> None:
    mark = "." if record.counted else "w"
    if record.failure:
        mark = "x"
    print(mark, end="", flush=True)


def print_step(step) -> None:
    print()
    print(step.describe(), flush=True)


def print_result(result, args) -> None:
    from fi_attn_bench.history.bisect import Outcome

    print(result.summary())
    if result.skipped:
        print(f"skipped (did not build or run): {', '.join(map(str, result.skipped))}")
    print(f"{result.probes} revisions probed, {len(result.steps)} steps")
    if result.outcome is not Outcome.FOUND:
        print(f"exit {result.exit_code}: cannot tell")
    if not args.no_store:
        print(f"runs stored in {args.store} (branch {args.branch})")


def main(argv: list[str] | None = None) -> int:
    """For the tests: the bisect alone, as ``fi-attn-history bisect ARGS``."""
    parser = argparse.ArgumentParser(prog="fi-attn-history")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return run(parser.parse_args(["bisect", *(argv or [])]))


def _stop_on_terminate(signum, frame) -> None:
    raise KeyboardInterrupt  # so that a killed bisect removes its worktrees as Ctrl-C does


def run(args) -> int:
    from fi_attn_bench.results.run_store import StoreError

    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _stop_on_terminate) if main_thread else None
    try:
        return run_bisect(args)
    except (BisectInputError, StoreError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("\ninterrupted: worktrees and environments removed", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
