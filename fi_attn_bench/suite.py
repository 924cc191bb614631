"""All four benchmark scripts in one process, one CSV each: ``python bench_all.py [options]``.

The same sweeps and CSVs as running ``bench_batch_decode.py``, ``bench_batch_prefill_paged.py``,
``bench_batch_prefill_ragged.py`` and ``bench_batch_mla.py`` one after the other, minus three
process starts and three profiler start-ups: on the H200 each process spent about 4 s starting
and 5 s in its first profiler session (``benchmarks/results/h200_validation_v4``).

Every option of the scripts applies, except ``--output`` (one CSV per script goes to
``--output-dir``); ``--resume`` takes the directory of an earlier run.  ``--shard I/N`` (or
torchrun, or a Slurm array) splits all the scripts' cases pooled, so the shards balance over
the whole suite.  A ``--filter`` term naming a field a script does not have leaves that script
out, and so does a filter that none of its cases match; a field no script has is an error.
Exit codes: 0 all cases ok, 1 some case failed, 2 bad input (before any GPU work), 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from functools import partial

from fi_attn_bench.backends.selection import Probe
from fi_attn_bench.cases.selection import parse_filter
from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.cli import (
    TimerFactory,
    execute,
    list_cases,
    list_shard,
    listing_options,
    parse_command_line,
    plan,
)
from fi_attn_bench.errors import NoMatchingCase, UsageError
from fi_attn_bench.sweep.options import RunOptions
from fi_attn_bench.sweep.shard_plan import (
    ShardRequest,
    describe_shard,
    shard_request,
    split_runs,
)
from fi_attn_bench.sweep.sharding import ShardSpec, shard_of_path
from fi_attn_bench.timing.timers import make_timer

SCRIPTS = (
    "bench_batch_decode",
    "bench_batch_prefill_paged",
    "bench_batch_prefill_ragged",
    "bench_batch_mla",
)
NOT_HERE = ("--output", "--resume")


def load_specs(names: Sequence[str] = SCRIPTS) -> list[BenchmarkSpec]:
    return [importlib.import_module(name).SPEC for name in names]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="All four benchmark scripts in one process, one CSV each in --output-dir.",
        epilog="Every other option is the scripts' own: see python bench_batch_decode.py --help.",
    )
    parser.add_argument(
        "--scripts",
        nargs="+",
        choices=SCRIPTS,
        default=list(SCRIPTS),
        metavar="NAME",
        help=f"which scripts, in this order (default all: {' '.join(SCRIPTS)})",
    )
    return parser


def shared_timers(factory: TimerFactory) -> TimerFactory:
    """One timer per timing setup for the whole process: the profiler starts up once."""
    made = {}

    def get(options, device, log):
        key = (options, str(device))
        if key not in made:
            made[key] = factory(options, device, log)
        return made[key]

    return get


def union_fields(specs: Sequence[BenchmarkSpec]) -> list[str]:
    return sorted({name for spec in specs for name in spec.case_fields})


def plan_all(specs, argv) -> list[tuple[BenchmarkSpec, object]] | int:
    """(spec, parsed args) of the scripts that will run; an exit code when argparse refused
    the command line; UsageError on other bad input."""
    chosen = []
    for spec in specs:
        args = parse_command_line(spec, argv)
        if isinstance(args, int):
            return args
        given = [flag for flag in NOT_HERE if getattr(args, flag[2:])]
        if args.resume and os.path.isdir(args.resume):
            given.remove("--resume")  # the directory of an earlier bench_all.py run
        if given:
            raise UsageError(
                f"not here: {' and '.join(given)}; bench_all.py writes one CSV per script, "
                "into --output-dir (--resume takes the directory of an earlier run)"
            )
        chosen.append((spec, args))
    filters = chosen[0][1].filter if chosen else []
    known = union_fields(specs)  # a typo or a field no script has: exit 2
    named = {term.name for text in filters for term in parse_filter(text, known)}
    kept = []
    for spec, args in chosen:
        missing = sorted(named - set(spec.case_fields))
        if missing:
            print(
                f"bench_all.py: {spec.script}: no field {', '.join(missing)}; left out",
                file=sys.stderr,
            )
        else:
            kept.append((spec, args))
    return kept


def main(
    argv: Sequence[str] | None = None,
    *,
    probe: Probe | None = None,
    timer_factory: TimerFactory = make_timer,
    specs: Sequence[BenchmarkSpec] | None = None,
) -> int:
    own, rest = build_parser().parse_known_args(argv)
    specs = list(specs) if specs is not None else load_specs(own.scripts)
    probe = probe or Probe()
    try:
        chosen = plan_all(specs, rest)
        if isinstance(chosen, int):
            return chosen
        runs = _resolve(chosen, probe)
    except UsageError as exc:
        print(f"bench_all.py: error: {exc}", file=sys.stderr)
        return 2
    if runs is None:  # --list
        return 0
    runs, preamble = runs
    timer = shared_timers(timer_factory)
    codes = []
    try:
        for spec, options in runs:
            code = execute(spec, options, timer, preamble)
            preamble = ""
            codes.append(code)
            print(flush=True)
            if code == 130:
                return 130
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        return 130
    return max(codes, default=0)


def _resolve(chosen, probe) -> tuple[list[tuple[BenchmarkSpec, RunOptions]], str] | None:
    """Each chosen script's options (``plan``) and a line saying which shard they are, or
    None after listing the cases (--list).  A shard splits all scripts' cases pooled."""
    request = shard_request(chosen[0][1], os.environ) if chosen else ShardRequest()
    listing = bool(chosen and chosen[0][1].list)
    if listing and request.shard is None:
        for spec, args in chosen:
            list_cases(spec, args, probe)
        return None
    runs, left_out = [], []
    for spec, args in chosen:
        if args.resume:
            args = resume_in_directory(spec, args, request.shard)
        try:
            resolve = listing_options if listing else partial(plan, request=request)
            runs.append((spec, resolve(spec, args, probe)))
        except NoMatchingCase:
            left_out.append(spec.script)
    if not runs:
        raise UsageError("no script has a case that matches --filter")
    for script in left_out:
        print(f"bench_all.py: {script}: no case matches --filter; left out", file=sys.stderr)
    if listing:
        list_shard(runs, request)
        return None
    if request.shard is None:
        return runs, ""
    sharded = split_runs(runs, request)
    for script in sharded.empty:
        print(f"bench_all.py: {script}: no case in shard {request.shard}", file=sys.stderr)
    return list(sharded.runs), describe_shard(sharded)


def resume_in_directory(spec: BenchmarkSpec, args, shard: ShardSpec | None) -> argparse.Namespace:
    """``--resume DIR``: this script's CSV of the earlier run in DIR (its shard's, when
    sharded) is resumed; a script without one there starts a new CSV in DIR."""
    directory = args.resume
    suffix = f".{shard.tag}.csv" if shard else ".csv"
    found = sorted(
        name
        for name in os.listdir(directory)
        if name.startswith(f"{spec.api}_")
        and name.endswith(suffix)
        and (shard is not None or shard_of_path(name) is None)
    )
    if len(found) > 1:
        raise UsageError(
            f"--resume {directory}: {len(found)} CSVs of {spec.api} there "
            f"({', '.join(found)}); resume each with {spec.script} --resume CSV"
        )
    resumed = argparse.Namespace(**vars(args))
    resumed.resume = os.path.join(directory, found[0]) if found else None
    resumed.output_dir = directory
    if not found:
        print(f"bench_all.py: {spec.script}: no CSV in {directory}; a new one", file=sys.stderr)
    return resumed


if __name__ == "__main__":
    raise SystemExit(main())
