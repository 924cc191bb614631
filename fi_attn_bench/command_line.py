"""A benchmark script's command line: parse, plan (no GPU work), then run the sweep; exit codes live here."""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import TextIO

import torch

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.backends import impls
from fi_attn_bench.backends.choice import (
    ImplKindChoice,
    Probe,
    concrete_device,
    resolve_impl_kind,
)
from fi_attn_bench.cases import serving
from fi_attn_bench.cases.selection import case_text, parse_filter
from fi_attn_bench.cases.spec import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_WORKSPACE_BYTES,
    DTYPE_ALIASES,
    DTYPES,
    BenchmarkSpec,
)
from fi_attn_bench.command_line_groups import add_fib_arguments, add_serving_arguments
from fi_attn_bench.errors import UsageError
from fi_attn_bench.fib.dataset import read_dataset
from fi_attn_bench.fib.selection import notes_of
from fi_attn_bench.fib.solutions import impl_resolver
from fi_attn_bench.fib.traces import write_traces
from fi_attn_bench.program import program_name
from fi_attn_bench.sweep.outputs import STDOUT, writes_stdout
from fi_attn_bench.sweep.request import SweepRequest
from fi_attn_bench.sweep.run import Sweep
from fi_attn_bench.sweep.run_options import (
    COMMAND_LINE_CASES,
    CPU_MAX_TIME_S,
    DEFAULT_CPU_THREADS,
    DEFAULT_TOLERANCE,
    RunOptions,
    preset_for,
    resolve_options,
    selected_cases,
)
from fi_attn_bench.sweep.selection_record import recorded_selection, resume_selection
from fi_attn_bench.sweep.shard_plan import (
    ShardRequest,
    describe_shard,
    shard_arguments,
    shard_log,
    shard_request,
    split_runs,
)
from fi_attn_bench.sweep.sharding import SHARD_BY
from fi_attn_bench.timing.options import (
    ATTRIBUTIONS,
    STOP_RULES,
    THROTTLE_POLICIES,
    TIMER_NAMES,
    TimingOptions,
)
from fi_attn_bench.timing.timers import Timer, make_timer
from fi_attn_bench.wording import counted

BACKEND_CHOICES = ("auto", "flashinfer", "torch")


def _dtype_arg(text: str) -> str:
    name = DTYPE_ALIASES.get(text.lower(), text.lower())
    if name not in DTYPES:
        valid = ", ".join([*DTYPES, *DTYPE_ALIASES])
        raise argparse.ArgumentTypeError(f"unsupported dtype {text!r} (choose from {valid})")
    return name


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if not value > 0 or (isinstance(value, float) and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
        return value

    return parse


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def build_parser(spec: BenchmarkSpec, prog: str | None = None) -> argparse.ArgumentParser:
    """The command line shared by every bench_batch_*.py script (``prog``: the program the
    user ran, when another one parses this command line, as bench_all.py does)."""
    parser = argparse.ArgumentParser(
        prog=prog or spec.script,
        description=f"Benchmark {spec.api}; one CSV row per case (schema v1).",
        epilog="Exit codes: 0 all ok, 1 a case failed, 2 bad arguments or backend unavailable, 130 interrupted.",
    )
    parser.add_argument("--version", action="version", version=VERSION_TEXT)
    cases = parser.add_argument_group("cases")
    cases.add_argument(
        "--preset",
        choices=serving.preset_names(spec),
        help="case grid (default: 'default'; 'cpu' when running on the CPU; "
        "'serving': varied-length batches)",
    )
    cases.add_argument(
        "--filter",
        action="append",
        default=[],
        help=f"keep cases matching every term, e.g. 'batch_size<=16,{spec.case_fields[-1]}!=64' (ops == != < <= > >=; fields: {', '.join(spec.case_fields)})",
    )
    cases.add_argument("--list", action="store_true", help="print the selected cases and exit")
    cases.add_argument(
        "--dtype",
        type=_dtype_arg,
        default="float16",
        help="float16 (fp16) or bfloat16 (bf16); default float16",
    )
    cases.add_argument(
        "--page-size",
        type=_positive(int),
        default=DEFAULT_PAGE_SIZE,
        help=f"tokens per KV page (default {DEFAULT_PAGE_SIZE})",
    )
    cases.add_argument("--seed", type=int, default=0, help="input RNG seed (default 0)")
    cases.add_argument(
        "--workspace-mb",
        type=_positive(int),
        default=DEFAULT_WORKSPACE_BYTES // 2**20,
        help="wrapper workspace size in MiB (default 128)",
    )
    add_serving_arguments(parser)
    add_fib_arguments(parser)
    where = parser.add_argument_group("backend and device")
    where.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="auto: flashinfer if it imports and a GPU exists, else the torch reference (default auto)",
    )
    where.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    where.add_argument(
        "--threads",
        type=_positive(int),
        metavar="N",
        help=f"torch threads of a CPU run (default {DEFAULT_CPU_THREADS}: times independent of "
        "the core count and of other work on the machine); recorded as cpu_threads",
    )
    head = parser.add_argument_group("head to head")
    head.add_argument(
        "--impl",
        action="append",
        default=[],
        metavar="[NAME=]IMPL",
        help="implementation to measure, repeatable: flashinfer (default), flashinfer:BACKEND "
        "(the wrapper's backend=, e.g. fa2, fa3), torch (the reference), MODULE:FACTORY or "
        "FILE.py:FACTORY (a plugin); two or more are measured in interleaved rounds with a "
        "paired ratio against the baseline; NAME= names one (the same impl twice: A/A)",
    )
    head.add_argument(
        "--baseline-impl",
        metavar="NAME",
        help="the implementation paired ratios are taken against (default: the first --impl)",
    )
    head.add_argument(
        "--fail-if-slower",
        type=_non_negative_float,
        metavar="PCT",
        help="exit 1 when an implementation is slower than the baseline by more than PCT %% "
        "with its 95%% interval excluding it (interval's lower end > 1 + PCT/100)",
    )
    head.add_argument(
        "--same-within",
        type=_non_negative_float,
        default=TimingOptions.same_within_pct,
        metavar="PCT",
        help="call an implementation faster or slower only when its paired ratio's whole 95%% "
        "interval lies beyond 1 -+ PCT/100 (default %(default)g: the harness's own A/A "
        "offsets); 0: whenever the interval excludes 1",
    )
    timing = parser.add_argument_group("timing")
    timing.add_argument(
        "--timer",
        choices=TIMER_NAMES,
        help="profiler (default), cupti (NVIDIA, cupti-python), cuda_graph (warm L2 only) or "
        "events; the CPU uses wall-clock",
    )
    timing.add_argument(
        "--l2",
        choices=("cold", "warm"),
        help="L2 flushed before each timed call (cold, default) or not (warm; default for cuda_graph)",
    )
    timing.add_argument(
        "--kernel-pattern",
        help="regex: count only kernels whose name matches (default: every kernel of run())",
    )
    timing.add_argument(
        "--attribution",
        choices=ATTRIBUTIONS,
        default=TimingOptions.attribution,
        help="profiler per-call time: sum of kernel durations, first start to last end (span), "
        "end of the L2 flush before the call to last end (stream: the time the call held "
        "the stream), or auto (default: stream with cold L2, sum with warm L2)",
    )
    timing.add_argument(
        "--min-samples",
        type=_positive(int),
        default=TimingOptions.min_samples,
        help=f"at least this many samples (default {TimingOptions.min_samples})",
    )
    timing.add_argument(
        "--noise-target",
        type=_positive(float),
        default=TimingOptions.noise_target_pct,
        help="stop once the noise (see --stop-rule) is <= this %% "
        f"(default {TimingOptions.noise_target_pct})",
    )
    timing.add_argument(
        "--min-time-ms",
        "--min-measure-ms",  # the former name, kept so that old command lines still run
        dest="min_time_ms",
        type=_non_negative_float,
        default=TimingOptions.min_time_ms,
        help="sample until the timed calls add up to this much GPU time (ms) ... "
        f"(default {TimingOptions.min_time_ms:g}, nvbench's --min-time)",
    )
    timing.add_argument(
        "--enough-samples",
        type=_positive(int),
        default=TimingOptions.enough_samples,
        help="... or, for calls shorter than "
        f"{TimingOptions.enough_samples_below_ms:g} ms, until this many samples, whichever "
        f"comes first (default {TimingOptions.enough_samples})",
    )
    timing.add_argument(
        "--max-time-per-case",
        type=_positive(float),
        help=f"measurement budget per case in seconds (default {TimingOptions.max_time_s:g}; "
        f"{CPU_MAX_TIME_S:g} on the CPU)",
    )
    timing.add_argument(
        "--stop-rule",
        choices=STOP_RULES,
        default=TimingOptions.stop_rule,
        help="noise judged as the median's 95%% interval (median_ci, default: shrinks with "
        "samples) or as IQR/median (spread: stricter, costs more for jittery short kernels)",
    )
    timing.add_argument(
        "--sustain-ms",
        type=_non_negative_float,
        default=TimingOptions.sustain_ms,
        help="at most this many ms of back-to-back calls before timing so clocks reach steady "
        f"state; ends after {TimingOptions.sustain_min_ms:g} ms once they are steady "
        f"(default {TimingOptions.sustain_ms:g}; 0 measures a GPU fresh from idle)",
    )
    timing.add_argument(
        "--batch-ms",
        type=_positive(float),
        default=TimingOptions.batch_target_ms,
        help=f"device time one timed batch aims for; amortizes profiler start/stop (default {TimingOptions.batch_target_ms:g})",
    )
    timing.add_argument(
        "--warmup-ms",
        type=_positive(float),
        default=TimingOptions.warmup_min_ms,
        help=f"minimum warm-up after the first call (default {TimingOptions.warmup_min_ms:g})",
    )
    throttle = parser.add_argument_group("throttle policy (see README, 'Run conditions')")
    throttle.add_argument(
        "--throttle-policy",
        choices=THROTTLE_POLICIES,
        default=TimingOptions.throttle_policy,
        help="off (default); discard: drop the samples of a batch during which the SM clock "
        "read below --throttle-threshold of its maximum; pause: drop them and let the GPU "
        "rest --cooldown-ms before the next batch (needs NVML clocks)",
    )
    throttle.add_argument(
        "--throttle-threshold",
        type=_positive(float),
        metavar="PCT",
        default=TimingOptions.throttle_threshold_pct,
        help=f"%% of the maximum SM clock below which a batch counts as throttled "
        f"(default {TimingOptions.throttle_threshold_pct:g}, nvbench's)",
    )
    throttle.add_argument(
        "--cooldown-ms",
        type=_non_negative_float,
        default=TimingOptions.cooldown_ms,
        help=f"rest after a throttled batch with --throttle-policy pause "
        f"(default {TimingOptions.cooldown_ms:g})",
    )
    throttle.add_argument(
        "--energy",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read the GPU's energy counter while the timed batches run (a thread polls it "
        "every 5 ms) for energy_mJ and the paired energy ratio (default on where NVML reads; "
        "--no-energy leaves those columns empty)",
    )
    check = parser.add_argument_group("correctness")
    check.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compare run()'s output with the float32 reference (default on)",
    )
    check.add_argument(
        "--integrity",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="check that the timed calls did the checked call's work: a poisoned timed "
        "call, a call on fresh input values (its output, when it finished, its time) and, "
        "under cuda_graph, the replay's kernels; a failed check fails the row and names "
        "itself in the integrity column (default on; needs --check)",
    )
    check.add_argument(
        "--judge",
        action="store_true",
        help="every strict check on: more timed calls checked on their fresh values, and a "
        "plugin whose source reaches into the harness (the static screen's findings) fails "
        "its rows instead of warning (docs/INTEGRITY.md)",
    )
    check.add_argument(
        "--isolation",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="run --impl plugins in a worker process of their own, out of reach of the "
        "harness's statistics, checks and files, and hold their samples against the "
        "harness's clock, a floor of bytes and FLOPs at the device's peaks and the paired "
        "ratio (default on; --no-isolation runs them in this process)",
    )
    check.add_argument(
        "--rtol",
        type=_non_negative_float,
        default=DEFAULT_TOLERANCE,
        help="check relative tolerance (default 0.016)",
    )
    check.add_argument(
        "--atol",
        type=_non_negative_float,
        default=DEFAULT_TOLERANCE,
        help="check absolute tolerance (default 0.016)",
    )
    out = parser.add_argument_group("output")
    out.add_argument(
        "--output",
        help="CSV path (default <output-dir>/<api>_<YYYYmmdd_HHMMSS>.csv); - writes the CSV to "
        "stdout and everything else to stderr",
    )
    out.add_argument(
        "--output-dir", default=".", help="directory of the default CSV path (default .)"
    )
    out.add_argument(
        "--resume",
        metavar="CSV",
        help="rerun only the cases not ok in CSV (or measured by another harness version), updating it in place",
    )
    out.add_argument(
        "--force",
        action="store_true",
        help="move an existing --output file (or samples file) aside to <name>.bak-<timestamp> "
        "and start afresh; without it such a file is never touched",
    )
    out.add_argument(
        "--samples-dir",
        metavar="DIR",
        help="also write each ok case's raw samples to DIR/<csv-stem>.samples.jsonl.gz",
    )
    out.add_argument(
        "--peak-bandwidth",
        type=_positive(float),
        metavar="GB/s",
        help="device peak bandwidth for pct_peak_bw",
    )
    out.add_argument(
        "--peak-tflops",
        type=_positive(float),
        metavar="TFLOPS",
        help="device peak TFLOPS for pct_peak_tflops",
    )
    out.add_argument(
        "--verbose", action="store_true", help="print kernel names, samples and noise per case"
    )
    shards = parser.add_argument_group(
        "shards (automatic under torchrun and Slurm job arrays; see README 'Many GPUs')"
    )
    shards.add_argument(
        "--shard",
        metavar="I/N",
        help="run shard I of N (0 <= I < N) of the selected cases; its CSV name carries "
        ".shardIofN (default: RANK/WORLD_SIZE under torchrun, the task under a Slurm array)",
    )
    shards.add_argument(
        "--shard-by",
        choices=SHARD_BY,
        default="cost",
        help="cost: balance predicted (or --cost-from) wall time per shard (default); "
        "count: case i to shard i mod N",
    )
    shards.add_argument(
        "--cost-from",
        metavar="CSV_OR_STORE",
        help="a previous sweep's CSV (or a directory of CSVs), or a fi-attn-history store "
        "(each case's newest ok run): its time_ms replaces the predicted call time of the "
        "cases it holds (default: the store fi-attn-history.sqlite beside the results, "
        "where there is one)",
    )
    return parser


TimerFactory = Callable[[TimingOptions, torch.device, Callable[[str], None]], Timer]


def parse_command_line(spec: BenchmarkSpec, argv, prog: str | None = None) -> SweepRequest | int:
    """The command line parsed once into a SweepRequest, or argparse's exit code."""
    try:
        parsed = build_parser(spec, prog).parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    return SweepRequest.from_fields(vars(parsed))


def main_for(
    spec: BenchmarkSpec,
    argv: Sequence[str] | None = None,
    *,
    probe: Probe | None = None,
    timer_factory: TimerFactory = make_timer,
) -> int:
    """The whole command line of a benchmark script; returns the exit code.

    ``probe`` and ``timer_factory`` are seams for tests (machine probing, fake timers).
    """
    prog = program_name(spec.script)
    asked = parse_command_line(spec, argv, prog)
    if isinstance(asked, int):
        return asked
    try:
        return _run(spec, asked, probe or Probe(), timer_factory)
    except UsageError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        return 130


def _run(spec: BenchmarkSpec, asked, probe: Probe, timer_factory: TimerFactory) -> int:
    for text in asked.filter:  # syntax first: no import, no device query for a typo
        parse_filter(text, spec.case_fields)
    if asked.batch or asked.workload or asked.fib:  # bad input, before probing the machine
        selected_cases(spec, asked, COMMAND_LINE_CASES)
    request = shard_request(asked, os.environ)
    if asked.list:
        if request.shard is not None:
            return list_shard([(spec, listing_options(spec, asked, probe))], request)
        return list_cases(spec, asked, probe)
    options = plan(spec, asked, probe, request=request)
    if request.shard is None:
        return execute(spec, options, timer_factory)
    sharded = split_runs([(spec, options)], request)
    if not sharded.runs:
        print(f"{describe_shard(sharded)}: nothing to run", file=sys.stderr)
        return 0
    return execute(*sharded.runs[0], timer_factory, preamble=describe_shard(sharded))


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def plan(
    spec: BenchmarkSpec,
    asked,
    probe: Probe,
    announce: Callable[[str], None] = _to_stderr,
    request: ShardRequest | None = None,
) -> RunOptions:
    """Every check of the command line, no GPU work: raises UsageError (exit 2).

    ``announce`` prints the note on what --backend resolved to (bench_all.py prints it once for all scripts);
    ``request``: a sharded sweep's, whose CSV (``shard_arguments``) is checked like any other."""
    request = request or ShardRequest()
    has_gpu = bool(probe.cuda_available())
    device_text = request.device_text(asked.device, has_gpu)
    if device_text != asked.device and request.launch.local_rank >= torch.cuda.device_count():
        raise UsageError(
            f"{request.launch.origin}: LOCAL_RANK {request.launch.local_rank} but "
            f"{counted(torch.cuda.device_count(), 'GPU')} visible; start at most that many processes per node"
        )
    if request.shard is not None:
        if asked.output == STDOUT:
            raise UsageError("--output - writes one CSV to stdout; a shard writes its own file")
        asked = shard_arguments(spec, asked, request)
    asking = [text for text in asked.impl if impls.names_flashinfer(text)]
    impl_kind = "flashinfer" if asking else asked.backend
    asked_by = f"--impl {asking[0]}" if asking else ""
    choice = resolve_impl_kind(impl_kind, device_text, probe, asked_by)
    if asked.judge and not asked.isolation:
        raise UsageError("--judge runs --impl plugins in a worker process: drop --no-isolation")
    other = impl_resolver(asked.fib, asked.judge)  # --impl fib:NAME, a solution of --fib
    chosen = impls.parse_impls(
        asked.impl,
        spec.api,
        choice.flashinfer,
        default=choice.impl_kind,
        other=other,
        judge=asked.judge,
        isolated=asked.isolation,
    )
    for impl in chosen:
        for finding in impl.screened:
            announce(f"warning: --impl {impl.target}: {finding.describe()}")
    baseline = impls.baseline_index(chosen, asked.baseline_impl)
    if asked.fail_if_slower is not None and len(chosen) < 2:
        raise UsageError("--fail-if-slower compares implementations: give two or more --impl")
    options = resolve_options(spec, asked, choice, chosen, baseline)
    if choice.note:
        announce(choice.note)
    if asked.fib:
        for line in notes_of(read_dataset(asked.fib)):
            announce(line)
    return options


def execute(
    spec: BenchmarkSpec, options: RunOptions, timer_factory: TimerFactory, preamble: str = ""
) -> int:
    """The sweep ``plan`` resolved: exit 0, 1 when a case failed, 130 when interrupted.
    A shard that is not the launcher's rank 0 prints into ``<csv>.log`` instead."""
    device = concrete_device(options.device)
    options = replace(options, device=device)
    if serving.has_workloads(options.cases):
        spec = serving.with_workload_field(spec)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    with (
        shard_log(options.shard, options.log_path),
        _rows_stream(options.output) as csv_stream,
        _torch_threads(options.cpu_threads),
    ):
        if preamble:
            print(preamble)
        shard = f", shard {options.shard}" if options.shard else ""
        print(
            f"{spec.api}: {counted(len(options.cases), 'case')} (preset {options.preset}{shard}), "
            f"{_what_is_measured(options)} on {device}, timer {options.timing.timer}, "
            f"L2 {options.timing.l2}",
            flush=True,
        )
        log = print if options.verbose else (lambda _: None)
        timer = timer_factory(options.timing, device, log)
        timer.self_check()  # SelfCheckFailed is a UsageError: exit 2 before any case
        code = Sweep(spec, options, timer, csv_stream=csv_stream).run()
    if options.fib_traces and code != 130:
        written = write_traces(options.output, options.fib_traces, options.fib)
        print(f"fib: {written.describe()}", flush=True)
    return code


@contextlib.contextmanager
def _torch_threads(count: int | None) -> Iterator[None]:
    """torch's intra-op threads set to ``count`` for the sweep (None: left alone), then back."""
    if count is None:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def _rows_stream(output: str) -> Iterator[TextIO | None]:
    """``--output -``: yields stdout for the rows and sends everything else printed to stderr,
    so that stdout is the CSV alone (``... --output - | other-tool``); else yields None."""
    if not writes_stdout(output):
        yield None
        return
    stream = sys.stdout
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield stream
    except BrokenPipeError:
        # Point stdout at devnull so the interpreter's final flush cannot raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), stream.fileno())
        raise UsageError(
            "--output -: the reader of stdout closed it; the sweep stopped (rows not delivered)"
        ) from None


def _what_is_measured(options: RunOptions) -> str:
    if not options.paired:
        return f"backend {options.impls[0].name}"
    names = ", ".join(impl.name for impl in options.impls)
    return (
        f"implementations {names} in interleaved rounds "
        f"(baseline {options.impls[options.baseline].name})"
    )


def listing_options(spec: BenchmarkSpec, asked, probe: Probe) -> RunOptions:
    """The options --list shows cases of: no FlashInfer import, no device query."""
    choice = ImplKindChoice("torch", _list_device(asked, probe))
    return resolve_options(spec, asked, choice, listing=True)


def _ends_quietly_when_the_reader_leaves(listing: Callable[..., int]) -> Callable[..., int]:
    """A listing piped into a reader that stops early (``--list | head``) exits 0 quietly."""

    @functools.wraps(listing)
    def wrapped(*args, **kwargs) -> int:
        try:
            return listing(*args, **kwargs)
        except BrokenPipeError:
            # Point stdout at devnull so the interpreter's final flush cannot raise again.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0

    return wrapped


@_ends_quietly_when_the_reader_leaves
def list_shard(runs, request: ShardRequest) -> int:
    """--list --shard: this shard's cases (of every run given) with their predicted cost."""
    sharded = split_runs(runs, request)
    print(describe_shard(sharded))
    costs = {(c.run, c.case): c for c in sharded.costed}
    mine = {(c.run, c.case) for c in sharded.mine()}
    for run, (spec, options) in enumerate(runs):
        picked = [i for i in range(len(options.cases)) if (run, i) in mine]
        print(
            f"{spec.api}: preset {options.preset}, {len(picked)} of {counted(len(options.cases), 'case')}"
        )
        for i in picked:
            cost = costs[(run, i)]
            how = "measured" if cost.measured else "predicted"
            text = case_text(options.cases[i], spec.case_fields)
            print(f"{text}  ~{cost.item.cost_us / 1e6:.2f} s ({how})")
    return 0


def _list_device(asked, probe: Probe) -> torch.device:
    on_cpu = asked.device == "cpu" or (asked.backend != "flashinfer" and not probe.cuda_available())
    return torch.device("cpu" if on_cpu else "cuda")


@_ends_quietly_when_the_reader_leaves
def list_cases(spec: BenchmarkSpec, asked, probe: Probe) -> int:
    """Print the cases a run would measure (the CPU preset where it would fall back)."""
    preset = preset_for(spec, asked, _list_device(asked, probe))
    filters = tuple(asked.filter)
    if asked.resume and os.path.isfile(asked.resume):  # the selection the resumed sweep would run
        recorded = recorded_selection(asked.resume, spec)
        selection = resume_selection(spec, asked, recorded, asked.resume, preset)
        preset, filters = selection.preset, selection.filters
    cases = selected_cases(spec, asked, preset, filters)
    print(f"{spec.api}: preset {preset}, {counted(len(cases), 'case')}")
    if serving.has_workloads(cases):
        spec = serving.with_workload_field(spec)
    for case in cases:
        print(case_text(case, spec.case_fields))
    return 0
