"""A sharded sweep's plan: which shard this process runs, the cases in it, where it writes.

One split serves a script alone and ``bench_all.py`` alike: ``split_runs`` pools the cases of
every script it is given (a script alone is a pool of one), so a suite's shards balance over
all four scripts' cases.  Costs come from ``sharding`` (prediction) or a previous sweep's CSVs
(``--cost-from``): every process given the same command line computes the same split.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace

from fi_attn_bench.cases.selection import case_key
from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.reader import read_file, result_layout
from fi_attn_bench.results.run_store import DEFAULT_STORE_NAME, RunStore, StoreError
from fi_attn_bench.results.schema import STATUS_OK
from fi_attn_bench.sweep.cost import measured_wall_s
from fi_attn_bench.sweep.launch import Launch, detect_launch, process_started, run_tag
from fi_attn_bench.sweep.outputs import default_csv_path, probe_directory
from fi_attn_bench.sweep.request import SweepRequest
from fi_attn_bench.sweep.run_options import RunOptions, cost_timing
from fi_attn_bench.sweep.selection_record import recorded_selection, resume_selection
from fi_attn_bench.sweep.sharding import (
    SPLITTERS,
    ShardItem,
    ShardSpec,
    Split,
    case_call_ms,
    case_item,
    cost_us,
    parse_shard,
    reference_peaks,
    shard_of_path,
    with_shard_tag,
)
from fi_attn_bench.sweep.storage import load_resume_rows
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.wording import counted

EXPLICIT = "--shard"
SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class ShardRequest:
    """This process's shard (None: the whole sweep), where that came from, and how to split."""

    shard: ShardSpec | None = None
    origin: str = ""  # "--shard", "--resume" (its file name), or the launcher
    by: str = "cost"
    cost_from: str | None = None  # result CSVs or a history store
    launch: Launch = field(default_factory=Launch)
    timing: TimingOptions = field(default_factory=TimingOptions)  # what cases are costed by

    @property
    def leader(self) -> bool:
        return self.launch.leader

    def device_text(self, given: str | None, has_gpu: bool) -> str | None:
        """An explicit --device wins; under torchrun with a GPU, cuda:LOCAL_RANK."""
        if given is not None or self.launch.local_rank is None or not has_gpu:
            return given
        return f"cuda:{self.launch.local_rank}"


def shard_request(asked, environ: Mapping[str, str]) -> ShardRequest:
    """--shard wins over the launcher, which wins over a --resume file's shard tag."""
    text = getattr(asked, "shard", None)
    launch = detect_launch(environ, explicit_shard=text is not None)
    by, cost_from = getattr(asked, "shard_by", "cost"), getattr(asked, "cost_from", None)
    if cost_from and not os.path.exists(cost_from):
        raise UsageError(f"--cost-from: no such file or directory {cost_from!r}")
    resume = getattr(asked, "resume", None)
    if text is not None:
        shard, origin = parse_shard(text), EXPLICIT
        if launch.shard is not None and launch.shard != shard:
            if launch.same_command > 1:  # every process would run this shard into one CSV
                raise UsageError(
                    f"--shard {shard} under {launch.origin} with {launch.same_command} "
                    f"processes: each would run shard {shard} into the same CSV; drop --shard "
                    "(the launcher gives each process its own) or start one process"
                )
            print(
                f"note: --shard {shard} overrides {launch.origin}'s shard {launch.shard}",
                file=sys.stderr,
            )
    elif launch.shard is not None:
        shard, origin = launch.shard, launch.origin
    elif resume and shard_of_path(resume) is not None:
        shard, origin = shard_of_path(resume), "--resume"
    else:
        if cost_from or by != "cost":
            raise UsageError("--cost-from and --shard-by apply to sharded sweeps: add --shard I/N")
        return ShardRequest(launch=launch)
    if cost_from is None and by == "cost":
        cost_from = default_history_store(asked)
    return ShardRequest(shard, origin, by, cost_from, launch, cost_timing(asked))


def default_history_store(asked) -> str | None:
    """The history store beside the results (``fi-attn-history add``'s default), if one is there."""
    output = getattr(asked, "output", None) or getattr(asked, "resume", None)
    folder = os.path.dirname(output) if output else getattr(asked, "output_dir", None)
    if folder is None:
        return None
    path = os.path.join(folder or ".", DEFAULT_STORE_NAME)
    return path if os.path.isfile(path) else None


# --------------------------------------------------------------------------- costs


def _csv_paths(path: str) -> list[str]:
    if os.path.isdir(path):
        return sorted(
            os.path.join(path, name) for name in os.listdir(path) if name.endswith(".csv")
        )
    return [path]


def is_history_store(path: str) -> bool:
    if not os.path.isfile(path):
        return False
    with open(path, "rb") as handle:
        return handle.read(len(SQLITE_HEADER)) == SQLITE_HEADER


def load_store_rows(path: str) -> list[dict[str, object]]:
    """Per case, the row of its newest ok run in a ``fi-attn-history`` store."""
    try:
        with RunStore.open(path, create=False) as store:
            return store.newest_ok_rows()
    except StoreError as error:
        raise UsageError(f"--cost-from: {error}") from None


def load_measured(path: str, specs: Sequence[BenchmarkSpec]) -> list[dict[str, object]]:
    """The ok rows of a previous sweep's CSV (or of every CSV in a directory), or each case's
    newest ok row in a history store; UsageError when there is none, or a file is no valid
    result CSV of these scripts (the summarizer's rules, with the scripts' case fields as the
    known layouts)."""
    if is_history_store(path):
        return load_store_rows(path)
    layouts = [result_layout(spec.case_fields) for spec in specs]
    paths = _csv_paths(path)
    if not paths:
        raise UsageError(f"--cost-from {path}: no *.csv file in it")
    rows = []
    for csv_path in paths:
        read = read_file(csv_path, layouts=layouts)
        if read.issues:
            issue = read.issues[0]
            more = f" (and {len(read.issues) - 1} more)" if len(read.issues) > 1 else ""
            raise UsageError(f"--cost-from {csv_path}: {issue.message}{more}")
        frame = read.file.frame
        ok = frame[frame["status"] == STATUS_OK]
        rows += [_measured_row(row) for row in ok.to_dict("records")]
    return rows


def _measured_row(row: Mapping[str, object]) -> dict[str, object]:
    """A validated row with its empty cells as "" (the reader holds them as NaN)."""
    return {name: "" if value != value else value for name, value in row.items()}


@dataclass(frozen=True)
class MeasuredCost:
    """What a previous sweep's row says a case costs: its call time and sample count, and
    the case's wall seconds where the row recorded them (``cost_*_s``) with the same timer."""

    time_ms: float
    samples: int | None
    wall_s: float | None = None


def measured_costs(
    rows: Sequence[Mapping[str, str]], spec: BenchmarkSpec, timing: TimingOptions | None = None
) -> dict[tuple[str, ...], MeasuredCost]:
    """time_ms and samples of ``spec``'s cases among ``rows``, by case key (a case's first
    row), with its recorded wall time when the row was timed as ``timing`` times."""
    found: dict[tuple[str, ...], MeasuredCost] = {}
    for row in rows:
        if row.get("api") != spec.api or any(name not in row for name in spec.case_fields):
            continue
        try:
            value = float(row["time_ms"])
            samples = int(row["samples"]) if row.get("samples", "") != "" else None
        except ValueError:
            continue
        same = timing is not None and (row.get("timer"), row.get("l2")) == (
            timing.timer,
            timing.l2,
        )
        wall = measured_wall_s(row) if same else None
        if value > 0 and math.isfinite(value):
            found.setdefault(case_key(row, spec.case_fields), MeasuredCost(value, samples, wall))
    return found


@dataclass(frozen=True)
class CostedCase:
    """One case of a pooled split: whose it is, its key and cost, and where the cost came from."""

    run: int  # index into the runs given to split_runs
    case: int  # index into that run's cases
    item: ShardItem
    measured: bool


def predicted_case_call_ms(
    spec: BenchmarkSpec, options: RunOptions, case: Mapping[str, object]
) -> float:
    """One call's time on the reference roofline (``sharding.predicted_call_ms``), from the
    script's I/O and FLOP formulas for ``case``."""
    peaks = reference_peaks(options.peak_bandwidth, options.peak_tflops, options.dtype_name)
    return case_call_ms(spec, case, options.dtype_name, peaks)


def costed_cases(
    runs: Sequence[tuple[BenchmarkSpec, RunOptions]],
    measured_rows: Sequence[Mapping[str, str]],
    timing: TimingOptions,
) -> list[CostedCase]:
    """Every case of every run with its cost: measured where a row has it, else predicted."""
    costed = []
    for run, (spec, options) in enumerate(runs):
        known = measured_costs(measured_rows, spec, timing)
        for index, case in enumerate(options.cases):
            key = case_key(case, spec.case_fields)
            measured = known.get(key)
            if measured is None:
                call_ms = predicted_case_call_ms(spec, options, case)
                item = case_item((spec.api, *key), call_ms, timing)
            elif measured.wall_s is not None:
                gpu_us = cost_us(measured.time_ms / 1e3)
                item = ShardItem((spec.api, *key), cost_us(measured.wall_s), gpu_us)
            else:
                item = case_item((spec.api, *key), measured.time_ms, timing, measured.samples)
            costed.append(CostedCase(run, index, item, key in known))
    return costed


# --------------------------------------------------------------------------- split


@dataclass(frozen=True)
class ShardedRuns:
    """This shard's part of every run, the split behind it, and the cases' costs."""

    request: ShardRequest
    runs: tuple[tuple[BenchmarkSpec, RunOptions], ...]  # this shard's runs (cases non-empty)
    empty: tuple[str, ...]  # scripts with no case in this shard
    split: Split
    costed: tuple[CostedCase, ...]

    @property
    def total_us(self) -> int:
        return sum(self.split.loads_us)

    def mine(self) -> tuple[CostedCase, ...]:
        return tuple(self.costed[i] for i in self.split.of(self.request.shard))


def split_runs(
    runs: Sequence[tuple[BenchmarkSpec, RunOptions]], request: ShardRequest
) -> ShardedRuns:
    """The runs cut down to this process's shard, with its CSV names and row columns."""
    specs = [spec for spec, _ in runs]
    measured = load_measured(request.cost_from, specs) if request.cost_from else []
    costed = costed_cases(runs, measured, request.timing)
    split = SPLITTERS[request.by]([c.item for c in costed], request.shard.count)
    chosen = {(costed[i].run, costed[i].case) for i in split.of(request.shard)}
    mine, empty = [], []
    for run, (spec, options) in enumerate(runs):
        cases = tuple(case for i, case in enumerate(options.cases) if (run, i) in chosen)
        if not cases:
            empty.append(spec.script)
            continue
        log = "" if request.leader else f"{options.output}.log"
        run_id = options.run_id or launcher_run_id(request.launch)
        options = replace(options, cases=cases, shard=request.shard, log_path=log, run_id=run_id)
        if options.resume:
            check_resumed_rows(spec, options, load_resume_rows(options.output, spec, options))
        mine.append((spec, options))
    return ShardedRuns(request, tuple(mine), tuple(empty), split, tuple(costed))


def launcher_run_id(launch: Launch) -> str:
    """The run id every process of a launcher's sweep shares: its run tag (the array's job id,
    torchrun's start or run id); "" without a launcher, or where the tag is unknown."""
    if not launch.origin:
        return ""
    try:
        tag = run_tag(os.environ, launch.origin, agent_started=process_started(os.getppid()))
    except UsageError:
        return ""
    return f"shards-{tag}"


def shard_arguments(
    spec: BenchmarkSpec, asked: SweepRequest, request: ShardRequest
) -> SweepRequest:
    """``asked`` with this shard's CSV as ``--resume`` or ``--output`` (``plan`` then checks it
    like any other): --resume's or --output's name with the shard's tag, or
    ``<output-dir>/<api>_<run tag>.shardIofN.csv``.  A --resume file names one shard's CSV; a
    shard that wrote none yet starts its own, with the selection that file records."""
    shard = request.shard
    if asked.resume:
        given = asked.resume
        differs = asked.output and os.path.abspath(asked.output) != os.path.abspath(given)
        if differs or not os.path.isfile(given):
            return asked  # plan's own checks refuse it
        _check_split_count(given, shard)
        path = with_shard_tag(given, shard)
        if os.path.isfile(path):
            return replace(asked, resume=path, output=None)
        return replace(_recorded_selection(spec, asked, given), resume=None, output=path)
    if asked.output:
        return replace(asked, output=with_shard_tag(asked.output, shard))
    probe_directory(asked.output_dir, "--output-dir")
    tag = run_tag(os.environ, request.launch.origin, agent_started=process_started(os.getppid()))
    return replace(asked, output=default_csv_path(spec.api, asked.output_dir, f".{shard.tag}", tag))


def _check_split_count(path: str, shard: ShardSpec) -> None:
    tagged = shard_of_path(path)
    if tagged is not None and tagged.count != shard.count:
        raise UsageError(
            f"--resume {path}: written as shard {tagged} of a {tagged.count}-way "
            f"split; this run is split {shard.count} ways (the cases would not match)"
        )


def _recorded_selection(spec: BenchmarkSpec, asked: SweepRequest, path: str) -> SweepRequest:
    """A shard starting its CSV beside another shard's --resume file selects what that file
    records, so that both split the same cases (a differing --preset/--filter: UsageError)."""
    recorded = recorded_selection(path, spec)
    if recorded is None:
        return asked
    chosen = resume_selection(spec, asked, recorded, path, recorded.preset)
    return replace(asked, preset=chosen.preset, filter=tuple(chosen.filters))


def check_resumed_rows(
    spec: BenchmarkSpec, options: RunOptions, rows: Mapping[tuple[str, ...], Mapping]
) -> None:
    """A shard's resume file may hold only the shard's cases: others mean the split changed
    (another --preset, --filter, --cost-from or --shard-by), and the merge would repeat them."""
    if options.shard is None:
        return
    mine = {case_key(case, spec.case_fields) for case in options.cases}
    cases = {key[: len(spec.case_fields)] for key in rows}  # rows are keyed by case and impl
    foreign = [key for key in cases if key not in mine]
    if foreign:
        raise UsageError(
            f"--resume {options.output}: {len(foreign)} of its cases are not in shard "
            f"{options.shard} now; resume with the first run's --preset, --filter, --cost-from "
            "and --shard-by"
        )


@contextlib.contextmanager
def shard_log(shard: ShardSpec | None, log_path: str) -> Iterator[None]:
    """A non-leader shard's output goes to ``log_path`` (appended), not the shared terminal."""
    if not log_path:
        yield
        return
    os.makedirs(os.path.dirname(os.path.abspath(log_path)), exist_ok=True)
    print(f"shard {shard}: log in {log_path}", file=sys.stderr, flush=True)
    with (
        open(log_path, "a", encoding="utf-8") as handle,
        contextlib.redirect_stdout(handle),
        contextlib.redirect_stderr(handle),
    ):
        yield


def describe_shard(sharded: ShardedRuns) -> str:
    """One line: this shard's cases and predicted cost against the whole sweep's."""
    request, mine = sharded.request, sharded.mine()
    cost_s = sum(c.item.cost_us for c in mine) / 1e6
    measured = sum(c.measured for c in sharded.costed)
    source = (
        f"{measured} of {len(sharded.costed)} costs from {request.cost_from}"
        if request.cost_from
        else "predicted costs"
    )
    return (
        f"shard {request.shard} ({request.origin}, split by {request.by}, {source}): "
        f"{len(mine)} of {counted(len(sharded.costed), 'case')}, about {cost_s:.0f} s of "
        f"{sharded.total_us / 1e6:.0f} s"
    )
