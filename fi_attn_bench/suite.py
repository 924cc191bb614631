"""All four benchmark scripts in one process, one CSV each: ``python bench_all.py [options]``.

The same sweeps and CSVs as running ``bench_batch_decode.py``, ``bench_batch_prefill_paged.py``,
``bench_batch_prefill_ragged.py`` and ``bench_batch_mla.py`` one after the other, minus three
process starts and three profiler start-ups, which cost seconds each (docs/DESIGN.md).

Every option of the scripts applies, except ``--output`` (one CSV per script goes to
``--output-dir``, with ``bench_all.json`` recording the run) and ``--resume``, which here takes
that directory: ``--resume DIR`` resumes each script's CSV and runs the scripts that never
started.  ``--shard I/N`` (or torchrun, or a Slurm array) splits all the scripts' cases pooled,
so the shards balance over the whole suite; each shard records its part in its own
``bench_all.shardIofN.json``.  A ``--filter`` term naming a field a script does not have leaves that script
out, and so does a filter that none of its cases match; a field no script has is an error.
Exit codes: 0 all cases ok, 1 some case failed, 2 bad input (before any GPU work), 130 interrupted.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from fi_attn_bench.apis import registry
from fi_attn_bench.backends.choice import Probe
from fi_attn_bench.cases.selection import parse_filter
from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.command_line import (
    TimerFactory,
    execute,
    list_cases,
    list_shard,
    listing_options,
    parse_command_line,
    plan,
)
from fi_attn_bench.errors import NoMatchingCase, UsageError
from fi_attn_bench.program import rerun_words
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.suite_command_line import FACE, SuiteRequest, parse_suite_command_line, prog
from fi_attn_bench.suite_record import (
    RECORD_NAME,
    SuiteRecord,
    mark_finished,
    read_record,
    record_name,
    resumed_shard,
    scripts_in_order,
    write_record,
)
from fi_attn_bench.sweep.environment import new_run_id
from fi_attn_bench.sweep.launch import detect_launch
from fi_attn_bench.sweep.request import SweepRequest
from fi_attn_bench.sweep.run_options import RunOptions
from fi_attn_bench.sweep.shard_plan import (
    ShardRequest,
    describe_shard,
    shard_request,
    split_runs,
)
from fi_attn_bench.sweep.sharding import ShardSpec, parse_shard
from fi_attn_bench.timing.timers import make_timer

NOT_HERE = ("--output",)


def load_specs(names: Sequence[str] | None = None) -> list[BenchmarkSpec]:
    return registry.specs(names)


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
    """(spec, its SweepRequest) of the scripts that will run; an exit code when the parser refused
    the command line; UsageError on other bad input."""
    chosen = []
    for spec in specs:
        asked = parse_command_line(spec, argv, prog=prog())
        if isinstance(asked, int):
            return asked
        given = [flag for flag in NOT_HERE if getattr(asked, flag[2:])]
        if given:
            raise UsageError(
                f"not here: {' and '.join(given)}; {prog()} writes one CSV per script, "
                "into --output-dir"
            )
        chosen.append((spec, asked))
    filters = chosen[0][1].filter if chosen else []
    known = union_fields(specs)  # a typo or a field no script has: exit 2
    named = {term.name for text in filters for term in parse_filter(text, known)}
    kept = []
    for spec, asked in chosen:
        missing = sorted(named - set(spec.case_fields))
        if missing:
            print(
                f"{prog()}: {spec.script}: no field {', '.join(missing)}; left out",
                file=sys.stderr,
            )
        else:
            kept.append((spec, asked))
    return kept


def main(
    argv: Sequence[str] | None = None,
    *,
    probe: Probe | None = None,
    timer_factory: TimerFactory = make_timer,
    specs: Sequence[BenchmarkSpec] | None = None,
) -> int:
    asked = parse_suite_command_line(argv)
    if isinstance(asked, int):  # --help, --version, or a usage error
        return asked
    try:
        prepared = _prepare(asked, probe or Probe(), specs)
    except UsageError as exc:
        print(f"{prog()}: error: {exc}", file=sys.stderr)
        return 2
    if isinstance(prepared, int):  # --list, or the parser refused the scripts' options
        return prepared
    return _run_all(prepared, shared_timers(timer_factory))


@dataclass(frozen=True)
class SuitePlan:
    """The scripts' resolved options (this shard's part when sharded) and the shard's line."""

    runs: tuple[tuple[BenchmarkSpec, RunOptions], ...]
    shard: ShardSpec | None = None
    preamble: str = ""  # which shard, its cases and cost; printed before the first sweep
    record: SuiteRecord | None = None  # marked finished in ``directory`` once every script ends
    directory: str = ""


def _prepare(own: SuiteRequest, probe, specs) -> SuitePlan | int:
    """Every check and the run record, no GPU work; the scripts' options, or an exit code."""
    if own.resume:
        record, again = _resume_record(own)
        specs = scripts_in_order(specs if specs is not None else load_specs(), record)
        chosen = _recorded_requests(specs, record, again)
    else:
        specs = list(specs) if specs is not None else load_specs(own.scripts or None)
        chosen = plan_all(specs, own.script_words)
    if isinstance(chosen, int):
        return chosen
    if own.resume:
        chosen = [
            (spec, _resumed(asked, own.resume, record.csv_of(spec.script)))
            for spec, asked in chosen
        ]
    prepared = _resolve(chosen, probe)
    if prepared is None:
        return 0
    directory = own.resume or chosen[0][1].output_dir
    if not own.resume:
        names = tuple(os.path.basename(options.output) for _, options in prepared.runs)
        scripts = tuple(spec.script for spec, _ in prepared.runs)
        asked_by_script = {spec.script: asked for spec, asked in chosen}
        requests = tuple(asked_by_script[script] for script in scripts)
        record = SuiteRecord(scripts, names, requests)
        moved = write_record(directory, record, force=chosen[0][1].force, shard=prepared.shard)
        if moved:
            print(f"Moved the earlier run's {record_name(prepared.shard)} aside to {moved}")
    words = [*rerun_words(FACE, _face_file()), "--resume", directory]
    words += ["--shard", str(prepared.shard)] if prepared.shard is not None else []
    hint = shlex.join(words)
    run_id = _suite_run_id(prepared.runs)
    runs = tuple(
        (spec, replace(options, resume_command=hint, run_id=options.run_id or run_id))
        for spec, options in prepared.runs
    )
    return replace(prepared, runs=runs, record=record, directory=directory)


def _face_file() -> str | None:
    """Where bench_all.py lives (it sits beside the scripts it imports)."""
    found = importlib.util.find_spec("bench_all")
    return found.origin if found is not None else None


def _suite_run_id(runs) -> str:
    """One id for every script of this run: a resumed run's own (any of its CSVs'), else a
    fresh one."""
    for _, options in runs:
        if options.resume and os.path.exists(options.output):
            ids = [row.get("run_id", "") for row in read_stored_rows(options.output).rows]
            found = next((text for text in ids if text), "")
            if found:
                return found
    return new_run_id()


@dataclass(frozen=True)
class ResumeAgain:
    """What ``--resume DIR`` changes in the recorded requests: the directory, --verbose, and
    the shard given on the command line (None: the recorded one, or the launcher's)."""

    directory: str
    verbose: bool
    shard: str | None


def _resume_record(own: SuiteRequest) -> tuple[SuiteRecord, ResumeAgain]:
    """``--resume DIR``: the record it finishes (a shard's: --shard I/N, the launcher's shard,
    or the only shard record there) and what the resumed run changes in it."""
    given = own.resume_words
    if own.scripts or given.others:
        raise UsageError(
            f"--resume {own.resume} repeats the interrupted run's options (recorded in its "
            f"{RECORD_NAME}); give no other option but --verbose and --shard I/N"
        )
    explicit = parse_shard(given.shard) if given.shard is not None else None
    launched = detect_launch(os.environ, explicit_shard=explicit is not None).shard
    shard = explicit or resumed_shard(own.resume, launched)
    record = read_record(own.resume, shard)
    given_shard = str(shard) if shard is not None and shard != launched else None
    return record, ResumeAgain(own.resume, given.verbose, given_shard)


def _recorded_requests(
    specs: Sequence[BenchmarkSpec], record: SuiteRecord, again: ResumeAgain
) -> list[tuple[BenchmarkSpec, SweepRequest]] | int:
    """Each recorded script's request as the resumed run asks it; a record that holds only
    the older ``argv`` is parsed again."""
    if not record.requests:
        tail = ["--verbose"] if again.verbose else []
        tail += ["--shard", again.shard] if again.shard is not None else []
        return plan_all(specs, [*record.argv, "--output-dir", again.directory, *tail])
    chosen = []
    for spec in specs:
        recorded = record.request_of(spec.script)
        asked = replace(
            recorded,
            output_dir=again.directory,
            verbose=recorded.verbose or again.verbose,
            shard=again.shard if again.shard is not None else recorded.shard,
        )
        chosen.append((spec, asked))
    return chosen


def _resumed(asked: SweepRequest, directory: str, csv_name: str) -> SweepRequest:
    """A script's options in a resumed run: its CSV resumed, or written afresh if never started."""
    path = os.path.join(directory, csv_name)
    started = os.path.exists(path)
    return replace(asked, resume=path if started else None, output=None if started else path)


def _run_all(prepared: SuitePlan, timer) -> int:
    runs, preamble, codes = prepared.runs, prepared.preamble, []
    try:
        for spec, options in runs:
            code = execute(spec, options, timer, preamble)
            preamble = ""
            codes.append(code)
            print(flush=True)
            if code == 130:  # the sweep printed how to continue
                return 130
    except KeyboardInterrupt:
        print(f"\nInterrupted; continue with:\n  {runs[0][1].resume_command}", file=sys.stderr)
        return 130
    except UsageError as exc:  # a timer's self-check failed (SelfCheckFailed)
        print(f"{prog()}: error: {exc}", file=sys.stderr)
        return 2
    if prepared.record is not None:
        mark_finished(prepared.directory, prepared.record, prepared.shard)
    return max(codes, default=0)


def _resolve(chosen, probe) -> SuitePlan | None:
    """Each chosen script's options (``plan``), this shard's part of them when sharded (all
    scripts' cases split pooled), or None after listing the cases (--list); the same scripts
    are left out either way."""
    request = shard_request(chosen[0][1], os.environ) if chosen else ShardRequest()
    listing = bool(chosen) and chosen[0][1].list
    announce = _once(lambda text: print(text, file=sys.stderr))
    runs, left_out = [], []
    for spec, asked in chosen:
        try:
            if listing and request.shard is None:
                list_cases(spec, asked, probe)
            elif listing:
                runs.append((spec, listing_options(spec, asked, probe)))
            else:
                runs.append((spec, plan(spec, asked, probe, announce, request)))
        except NoMatchingCase as exc:  # --fib: the dataset has no workload of this script
            left_out.append((spec.script, str(exc) if asked.fib else "no case matches --filter"))
    if len(left_out) == len(chosen):
        fib = chosen[0][1].fib if chosen else None
        raise UsageError(
            f"no script measures a workload of --fib {fib}" if fib
            else "no script has a case that matches --filter"
        )  # fmt: skip
    for script, why in left_out:
        print(f"{prog()}: {script}: {why}; left out", file=sys.stderr)
    if listing:
        if request.shard is not None:
            list_shard(runs, request)
        return None
    if request.shard is None:
        return SuitePlan(tuple(runs))
    sharded = split_runs(runs, request)
    for script in sharded.empty:
        print(f"{prog()}: {script}: no case in shard {request.shard}", file=sys.stderr)
    return SuitePlan(sharded.runs, request.shard, describe_shard(sharded))


def _once(say: Callable[[str], None]) -> Callable[[str], None]:
    """``say`` for each distinct text once: the note on what --backend resolved to is the same for every script."""
    said: set[str] = set()

    def once(text: str) -> None:
        if text not in said:
            said.add(text)
            say(text)

    return once


if __name__ == "__main__":
    raise SystemExit(main())
