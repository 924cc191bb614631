"""The benchmark harness shared by the ``bench_batch_*.py`` scripts.

A script declares *what* to measure (a :class:`BenchmarkSpec`); ``main_for(spec, argv)``
does the rest: command line, backend choice, per-case preparation, warm-up, correctness
check, timing (``bench_timing``), crash-safe CSV rows, resume and exit codes
(0 all ok, 1 a case failed, 2 bad arguments or unusable backend, 130 interrupted).

The seed's helpers (``dtype``, ``page_block_size``, ``setup_workspace``,
``setup_paged_kv_indptr``, ``get_csv_path``, ``compute_reps``, ``run_with_profiler``)
stay importable for users' own scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import gc
import glob
import importlib
import math
import os
import re
import shlex
import sys
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch

import flashinfer_compat
from bench_timing import (
    ATTRIBUTIONS,
    CPU_TIMER,
    DRIFT_BLOCKS,
    STARVED_WARN_FRACTION,
    STOP_RULES,
    TIMER_NAMES,
    WIDE_SPREAD_NOTE_PCT,
    L2Flusher,
    Measurement,
    NoKernelCaptured,
    PhaseClock,
    ProfilerTimer,
    Timer,
    TimingError,
    TimingOptions,
    make_timer,
    measure,
    quantile,
)
from benchmark_result import (
    HARNESS_VERSION,
    OPTIONAL_COLUMN_NAMES,
    STATUS_OK,
    ResultCsvWriter,
    csv_fieldnames,
    execute_benchmark_case,
    format_cell,
    read_result_rows,
)
from gpu_power import PowerMonitor, open_power_monitor

__all__ = [
    "BenchmarkSpec",
    "CorrectnessError",
    "Measurement",
    "NoKernelCaptured",
    "Prepared",
    "RunOptions",
    "Settings",
    "TimingError",
    "TimingOptions",
    "build_parser",
    "compute_reps",
    "dtype",
    "get_csv_path",
    "main_for",
    "page_block_size",
    "parse_filter",
    "run_with_profiler",
    "setup_paged_kv_indptr",
    "setup_workspace",
    "synchronize",
]

# ---------------------------------------------------------------- seed-compatible helpers

dtype = torch.float16
page_block_size = 16
DEFAULT_WORKSPACE_BYTES = 128 * 1024 * 1024


def _default_device(device=None) -> torch.device:
    if device is not None:
        return torch.device(device)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def setup_workspace(device=None, size_bytes: int = DEFAULT_WORKSPACE_BYTES) -> torch.Tensor:
    """A uint8 workspace buffer for a FlashInfer wrapper: zero-initialised, as FlashInfer's
    docs require for its first use."""
    return torch.zeros(size_bytes, dtype=torch.uint8, device=_default_device(device))


def setup_paged_kv_indptr(
    batch_size: int, seq_len: int, page_size: int, device=None, *, seed: int = 0
):
    """Page table of ``batch_size`` sequences of ``seq_len`` tokens: (indptr, indices, last_page_len).

    Pages are a seeded permutation of 0..n-1, not the identity, as in a real serving cache.
    """
    pages_per_seq = max(1, math.ceil(seq_len / page_size))
    device = _default_device(device)
    generator = torch.Generator().manual_seed(seed)
    indptr = torch.arange(batch_size + 1, dtype=torch.int32) * pages_per_seq
    indices = torch.randperm(batch_size * pages_per_seq, generator=generator).to(torch.int32)
    last = torch.full((batch_size,), (seq_len - 1) % page_size + 1, dtype=torch.int32)
    return indptr.to(device), indices.to(device), last.to(device)


def get_csv_path(api_name: str, output_dir: str = ".") -> str:
    """``<output_dir>/<api_name>_<YYYYmmdd_HHMMSS>.csv``."""
    return os.path.join(output_dir, f"{api_name}_{time.strftime('%Y%m%d_%H%M%S')}.csv")


def compute_reps(
    estimated_ms: float, target_ms: float = 25.0, min_reps: int = 10, max_reps: int = 1000
) -> int:
    """Repetitions so that one timed batch holds about ``target_ms`` of work."""
    wanted = math.ceil(target_ms / max(float(estimated_ms), 1e-6))
    return max(min_reps, min(max_reps, wanted))


def _pattern_from(target_kernels) -> str | None:
    if not target_kernels:
        return None
    if isinstance(target_kernels, str):
        return target_kernels
    return "|".join(re.escape(name) for name in target_kernels)


def run_with_profiler(
    fn,
    target_kernels=None,
    warmup: int = 3,
    reps: int | None = None,
    *,
    l2: str = "warm",
    device=None,
) -> float:
    """Median GPU ms of one ``fn()`` under the torch profiler: every kernel, or those matching
    ``target_kernels`` (a regex or a list of names). Raises NoKernelCaptured if none ran."""
    device = _default_device(device)
    options = TimingOptions(timer="profiler", l2=l2, kernel_pattern=_pattern_from(target_kernels))
    timer = ProfilerTimer(options, device, L2Flusher(device))
    for _ in range(max(warmup, 1)):
        fn()
    timer.sync()
    start = time.perf_counter()
    fn()
    timer.sync()
    estimate = (time.perf_counter() - start) * 1e3
    session = timer.open(fn, estimate)
    calls = reps or compute_reps(estimate)
    session.record(lambda: session.batch(calls))
    return quantile(sorted(s for batch in session.result() for s in batch.samples_ms), 0.5)


# ---------------------------------------------------------------- the script interface


@dataclass(frozen=True)
class Settings:
    """Resolved options handed to a script's prepare()."""

    device: torch.device
    dtype: torch.dtype
    page_size: int
    backend: str  # "flashinfer" | "torch"
    seed: int  # RNG seed for this case's inputs (derived from --seed and the case)
    workspace_bytes: int = DEFAULT_WORKSPACE_BYTES


@dataclass
class Prepared:
    """What a script builds for one case."""

    run: Callable[[], object]
    output: torch.Tensor | None
    reference: Callable[[], torch.Tensor] | None
    plan_ms: float
    kernel_pattern: str | None = None


@dataclass(frozen=True)
class BenchmarkSpec:
    """One script = one spec: its API, case fields, presets and named functions."""

    api: str
    script: str
    case_fields: tuple[str, ...]
    presets: Mapping[str, tuple[Mapping[str, int], ...]]
    prepare: Callable[[Mapping[str, int], Settings], Prepared]
    io_bytes: Callable[[Mapping[str, int], int], float]
    flops: Callable[[Mapping[str, int]], float]


class UsageError(ValueError):
    """Bad command-line input: exit 2 before any GPU work."""


class NoMatchingCase(UsageError):
    """The filters leave no case of the preset (bench_all.py leaves such a script out)."""


class CorrectnessError(RuntimeError):
    """run()'s output disagrees with the reference; carries the check's columns."""

    def __init__(self, message: str, result_columns: Mapping[str, object]):
        super().__init__(message)
        self.result_columns = dict(result_columns)


class NonFiniteOutput(RuntimeError):
    """run() wrote NaN or infinity."""


# ---------------------------------------------------------------- cases and filters

FILTER_OPS: Mapping[str, Callable[[float, float], bool]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<=": lambda a, b: a <= b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    ">": lambda a, b: a > b,
    "=": lambda a, b: a == b,
}
_TERM = re.compile(
    r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(==|!=|<=|>=|<|>|=)\s*(-?[0-9]+(?:\.[0-9]+)?)\s*$"
)


@dataclass(frozen=True)
class FilterTerm:
    name: str
    op: str
    value: float

    def matches(self, case: Mapping[str, int]) -> bool:
        return FILTER_OPS[self.op](float(case[self.name]), self.value)


def parse_filter(text: str, fields: Sequence[str]) -> tuple[FilterTerm, ...]:
    """``batch_size<=16,head_dim=128`` -> terms (all must hold). Raises UsageError."""
    terms = []
    for part in text.split(","):
        match = _TERM.match(part)
        if not match:
            raise UsageError(
                f"malformed filter term {part.strip()!r}: expected FIELD OP NUMBER with OP one of "
                f"== != < <= > >= (valid fields: {', '.join(fields)})"
            )
        name, op, value = match.groups()
        if name not in fields:
            raise UsageError(f"unknown filter field {name!r}; valid fields: {', '.join(fields)}")
        terms.append(FilterTerm(name, op, float(value)))
    return tuple(terms)


def select_cases(cases: Sequence[Mapping[str, int]], terms: Sequence[FilterTerm]) -> list[dict]:
    return [dict(case) for case in cases if all(term.matches(case) for term in terms)]


def case_text(case: Mapping[str, object], fields: Sequence[str]) -> str:
    """``batch_size=16,seq_len_kv=1024,...``: readable, and a valid exact --filter."""
    return ",".join(f"{name}={format_cell(case[name])}" for name in fields)


def case_key(case: Mapping[str, object], fields: Sequence[str]) -> tuple[str, ...]:
    return tuple(format_cell(case.get(name, "")) for name in fields)


def case_seed(seed: int, case: Mapping[str, object], fields: Sequence[str]) -> int:
    """Deterministic per-case seed (stable across processes, unlike hash())."""
    return zlib.crc32(f"{seed}|{case_text(case, fields)}".encode()) & 0x7FFFFFFF


# ---------------------------------------------------------------- command line

DTYPES: Mapping[str, torch.dtype] = {"float16": torch.float16, "bfloat16": torch.bfloat16}
DTYPE_ALIASES: Mapping[str, str] = {"fp16": "float16", "half": "float16", "bf16": "bfloat16"}
BACKEND_CHOICES = ("auto", "flashinfer", "torch")
DEFAULT_TOLERANCE = 1.6e-2


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


def build_parser(spec: BenchmarkSpec) -> argparse.ArgumentParser:
    """The command line shared by every bench_batch_*.py script."""
    parser = argparse.ArgumentParser(
        prog=spec.script,
        description=f"Benchmark {spec.api}; one CSV row per case (schema v1).",
        epilog="Exit codes: 0 all ok, 1 a case failed, 2 bad arguments or backend unavailable, 130 interrupted.",
    )
    cases = parser.add_argument_group("cases")
    cases.add_argument(
        "--preset",
        choices=sorted(spec.presets),
        help="case grid (default: 'default'; 'cpu' when running on the CPU)",
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
        default=page_block_size,
        help=f"tokens per KV page (default {page_block_size})",
    )
    cases.add_argument("--seed", type=int, default=0, help="input RNG seed (default 0)")
    cases.add_argument(
        "--workspace-mb",
        type=_positive(int),
        default=DEFAULT_WORKSPACE_BYTES // 2**20,
        help="wrapper workspace size in MiB (default 128)",
    )
    where = parser.add_argument_group("backend and device")
    where.add_argument(
        "--backend",
        choices=BACKEND_CHOICES,
        default="auto",
        help="auto: flashinfer if it imports and a GPU exists, else the torch reference (default auto)",
    )
    where.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda if available)")
    timing = parser.add_argument_group("timing")
    timing.add_argument(
        "--timer",
        choices=TIMER_NAMES,
        help="profiler (default), cuda_graph (warm L2 only) or events; the CPU uses wall-clock",
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
        default=10,
        help="at least this many samples (default 10)",
    )
    timing.add_argument(
        "--noise-target",
        type=_positive(float),
        default=1.0,
        help="stop once the noise (see --stop-rule) is <= this %% (default 1.0)",
    )
    timing.add_argument(
        "--min-time-ms",
        "--min-measure-ms",  # its name before harness 0.3.0, when it counted wall time
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
        default=2.0,
        help="measurement budget per case in seconds (default 2)",
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
    check = parser.add_argument_group("correctness")
    check.add_argument(
        "--check",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compare run()'s output with the float32 reference (default on)",
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
    out.add_argument("--output", help="CSV path (default <output-dir>/<api>_<YYYYmmdd_HHMMSS>.csv)")
    out.add_argument(
        "--output-dir", default=".", help="directory of the default CSV path (default .)"
    )
    out.add_argument(
        "--resume",
        metavar="CSV",
        help="rerun only the cases not ok in CSV (or measured by another harness version), updating it in place",
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
    return parser


# ---------------------------------------------------------------- backend and device


def _import_flashinfer():
    return importlib.import_module("flashinfer")


@dataclass(frozen=True)
class Probe:
    """How the harness looks at the machine (tests replace it)."""

    cuda_available: Callable[[], bool] = torch.cuda.is_available
    import_flashinfer: Callable[[], object] = _import_flashinfer


@dataclass(frozen=True)
class BackendChoice:
    backend: str
    device: torch.device
    flashinfer: object = None  # the imported module when backend is flashinfer
    note: str = ""  # one line saying why auto fell back to torch


def _parse_device(text: str | None, has_gpu: bool) -> torch.device | None:
    if text is None:
        return None
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError) as exc:
        raise UsageError(f"invalid --device {text!r}: {exc}") from None
    if device.type not in ("cuda", "cpu"):
        raise UsageError(f"--device must be cuda, cuda:N or cpu, got {text!r}")
    if device.type == "cuda" and not has_gpu:
        raise UsageError(
            f"--device {text} but torch sees no GPU (torch.cuda.is_available() is False)"
        )
    return device


def _try_flashinfer(probe: Probe) -> tuple[object, str]:
    try:
        return probe.import_flashinfer(), ""
    except Exception as exc:  # noqa: BLE001 - any import failure means "cannot run"
        return None, f"FlashInfer cannot be imported ({type(exc).__name__}: {exc})"


def resolve_backend(requested: str, device_text: str | None, probe: Probe) -> BackendChoice:
    """auto -> flashinfer when it imports and a GPU exists, else torch (with a note)."""
    has_gpu = bool(probe.cuda_available())
    device = _parse_device(device_text, has_gpu)
    gpu = torch.device("cuda") if has_gpu else None
    if requested == "torch":
        return BackendChoice("torch", device or gpu or torch.device("cpu"))
    if requested == "flashinfer":
        if device is not None and device.type == "cpu":
            raise UsageError("--backend flashinfer needs a GPU device, got --device cpu")
        if not has_gpu:
            raise UsageError(
                "--backend flashinfer: no GPU available (torch.cuda.is_available() is False)"
            )
        module, why = _try_flashinfer(probe)
        if module is None:
            raise UsageError(f"--backend flashinfer: {why}")
        return BackendChoice("flashinfer", device or gpu, module)
    if device is not None and device.type == "cpu":
        return BackendChoice(
            "torch", device, note="--device cpu: running the torch reference backend"
        )
    if not has_gpu:
        return BackendChoice(
            "torch",
            torch.device("cpu"),
            note="no GPU available: running the torch reference backend on the CPU",
        )
    module, why = _try_flashinfer(probe)
    if module is None:
        return BackendChoice(
            "torch", device or gpu, note=f"{why}: running the torch reference backend on the GPU"
        )
    return BackendChoice("flashinfer", device or gpu, module)


def _concrete(device: torch.device) -> torch.device:
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


# ---------------------------------------------------------------- resolved options


@dataclass(frozen=True)
class RunOptions:
    """Everything a sweep needs, resolved from the command line."""

    preset: str
    cases: tuple[Mapping[str, int], ...]
    backend: str
    device: torch.device
    dtype_name: str
    page_size: int
    seed: int
    workspace_bytes: int
    timing: TimingOptions
    check: bool
    rtol: float
    atol: float
    output: str
    resume: bool
    verbose: bool
    peak_bandwidth: float | None = None
    peak_tflops: float | None = None
    flashinfer_version: str = ""

    def settings(self, case: Mapping[str, int], fields: Sequence[str]) -> Settings:
        return Settings(
            device=self.device,
            dtype=DTYPES[self.dtype_name],
            page_size=self.page_size,
            backend=self.backend,
            seed=case_seed(self.seed, case, fields),
            workspace_bytes=self.workspace_bytes,
        )


def _timing_options(args, device: torch.device) -> TimingOptions:
    timer, l2 = args.timer or "profiler", args.l2
    if device.type == "cpu":
        timer, l2 = "wall", "warm"
    elif timer == "cuda_graph":
        if l2 == "cold":
            raise UsageError(
                "--timer cuda_graph replays back-to-back calls (warm L2 only); use --l2 warm, or --timer events / profiler for cold L2"
            )
        l2 = "warm"
    pattern = args.kernel_pattern
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"invalid --kernel-pattern {pattern!r}: {exc}") from None
    return TimingOptions(
        timer=timer,
        l2=l2 or "cold",
        kernel_pattern=pattern,
        attribution=args.attribution,
        stop_rule=args.stop_rule,
        noise_target_pct=args.noise_target,
        min_samples=args.min_samples,
        max_time_s=args.max_time_per_case,
        batch_target_ms=args.batch_ms,
        warmup_min_ms=args.warmup_ms,
        warmup_max_ms=max(TimingOptions.warmup_max_ms, 5 * args.warmup_ms),
        # steady-state clocks are a GPU matter; the CPU reference needs neither
        sustain_ms=0.0 if device.type == "cpu" else args.sustain_ms,
        min_time_ms=0.0 if device.type == "cpu" else args.min_time_ms,
        enough_samples=args.enough_samples,
        verbose=args.verbose,
    )


def _select(spec: BenchmarkSpec, preset: str, filters: Sequence[str]) -> tuple[dict, ...]:
    terms = [term for text in filters for term in parse_filter(text, spec.case_fields)]
    cases = select_cases(spec.presets[preset], terms)
    if not cases:
        raise NoMatchingCase(f"no case of preset {preset!r} matches --filter {' '.join(filters)}")
    return tuple(cases)


def _output_path(spec: BenchmarkSpec, args) -> tuple[str, bool]:
    if args.resume:
        if args.output and os.path.abspath(args.output) != os.path.abspath(args.resume):
            raise UsageError("--resume CSV updates that file; do not give a different --output")
        if not os.path.isfile(args.resume):
            raise UsageError(f"--resume: no such file {args.resume!r}")
        return args.resume, True
    return args.output or get_csv_path(spec.api, args.output_dir), False


def _preset_for(spec: BenchmarkSpec, args, device: torch.device) -> str:
    if args.preset:
        return args.preset
    if device.type == "cpu" and "cpu" in spec.presets:
        return "cpu"
    return "default" if "default" in spec.presets else sorted(spec.presets)[0]


def resolve_options(spec: BenchmarkSpec, args, choice: BackendChoice) -> RunOptions:
    device = choice.device
    preset = _preset_for(spec, args, device)
    output, resume = _output_path(spec, args)
    version = (
        flashinfer_compat.flashinfer_version(choice.flashinfer) or ""
        if choice.flashinfer is not None
        else ""
    )
    return RunOptions(
        preset=preset,
        cases=_select(spec, preset, args.filter),
        backend=choice.backend,
        device=device,
        dtype_name=args.dtype,
        page_size=args.page_size,
        seed=args.seed,
        workspace_bytes=args.workspace_mb * 2**20,
        timing=_timing_options(args, device),
        check=args.check,
        rtol=args.rtol,
        atol=args.atol,
        output=output,
        resume=resume,
        verbose=args.verbose,
        peak_bandwidth=args.peak_bandwidth,
        peak_tflops=args.peak_tflops,
        flashinfer_version=str(version),
    )


def repro_command(spec: BenchmarkSpec, options: RunOptions, case: Mapping[str, int]) -> str:
    """One command line that reruns exactly this case with the same settings."""
    timing = options.timing
    words = [
        "python", spec.script,
        "--filter", case_text(case, spec.case_fields),
        "--preset", options.preset,
        "--dtype", options.dtype_name,
        "--page-size", str(options.page_size),
        "--backend", options.backend,
        "--device", str(options.device),
    ]  # fmt: skip
    if options.device.type != "cpu":
        words += ["--timer", timing.timer, "--l2", timing.l2]
    if timing.kernel_pattern:
        words += ["--kernel-pattern", timing.kernel_pattern]
    if timing.attribution != TimingOptions.attribution:
        words += ["--attribution", timing.attribution]
    if timing.stop_rule != TimingOptions.stop_rule:
        words += ["--stop-rule", timing.stop_rule]
    if options.workspace_bytes != DEFAULT_WORKSPACE_BYTES:
        words += ["--workspace-mb", str(options.workspace_bytes // 2**20)]
    if options.seed:
        words += ["--seed", str(options.seed)]
    if not options.check:
        words.append("--no-check")
    elif (options.rtol, options.atol) != (DEFAULT_TOLERANCE, DEFAULT_TOLERANCE):
        words += ["--rtol", repr(options.rtol), "--atol", repr(options.atol)]
    return " ".join(shlex.quote(word) for word in words)


# ---------------------------------------------------------------- environment stamp


def runtime_version() -> str:
    """CUDA / MACA / HIP runtime that torch was built with, feature-detected."""
    for attribute in ("maca", "musa", "hip", "cuda"):
        value = getattr(torch.version, attribute, None)
        if value:
            return f"{attribute.upper()} {value}"
    return ""


def _query(fn: Callable[[], object]) -> str:
    """A device property as text; empty where this build cannot say."""
    try:
        return str(fn())
    except Exception:  # noqa: BLE001 - an environment stamp must never stop a sweep
        return ""


def environment_columns(options: RunOptions) -> dict[str, object]:
    device = options.device
    if device.type == "cuda":
        name = _query(lambda: torch.cuda.get_device_name(device))
        capability = _query(lambda: "{}.{}".format(*torch.cuda.get_device_capability(device)))
        runtime = runtime_version()
    else:
        name, capability, runtime = "cpu", "", ""
    return {
        "backend": options.backend,
        "device": name,
        "compute_capability": capability,
        "runtime": runtime,
        "torch_version": torch.__version__,
        "flashinfer_version": options.flashinfer_version,
        "harness_version": HARNESS_VERSION,
        "dtype": options.dtype_name,
        "page_size": options.page_size,
        "timer": options.timing.timer,
        "l2": options.timing.l2,
    }


@dataclass(frozen=True)
class Roofline:
    """device_peaks (optional module) bound to this sweep's device and dtype."""

    module: object = None
    peaks: object = None

    def columns(self, record: Mapping[str, object]) -> dict[str, object]:
        if self.peaks is None or record.get("status") != STATUS_OK:
            return {}
        try:
            values = self.module.roofline_columns(
                record["bandwidth_GB_s"], record["tflops"], self.peaks
            )
        except Exception:  # noqa: BLE001 - roofline is decoration, never a failure
            return {}
        return {k: v for k, v in dict(values).items() if k in OPTIONAL_COLUMN_NAMES}


def load_roofline(options: RunOptions, device_name: str) -> Roofline:
    try:
        module = importlib.import_module("device_peaks")
        peaks = module.resolve_peaks(
            device_name,
            options.dtype_name,
            bandwidth_override=options.peak_bandwidth,
            tflops_override=options.peak_tflops,
        )
    except Exception:  # noqa: BLE001 - a missing or broken module leaves the columns empty
        return Roofline()
    return Roofline(module, peaks)


# ---------------------------------------------------------------- one case


def synchronize(device: torch.device) -> None:
    """Wait for the device (torch.cuda covers CUDA and MetaX MACA); no-op on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _output_of(prepared: Prepared, result: object):
    if prepared.output is not None:
        return prepared.output
    if isinstance(result, (tuple, list)) and result:
        return result[0]
    return result


def _require_finite(tensor) -> None:
    if (
        isinstance(tensor, torch.Tensor)
        and tensor.is_floating_point()
        and not bool(torch.isfinite(tensor).all())
    ):
        raise NonFiniteOutput("run() produced NaN or infinite values")


def verify_output(prepared: Prepared, options: RunOptions) -> dict[str, object]:
    """One checked call: poison the output, run, compare with the float32 reference."""
    skipped = {"check": "skipped"}
    wanted = options.check and options.backend != "torch" and prepared.reference is not None
    if not wanted:
        result = prepared.run()
        synchronize(options.device)
        _require_finite(_output_of(prepared, result))
        return skipped
    reference_module = importlib.import_module("attention_reference")
    if prepared.output is not None:
        reference_module.poison_(prepared.output)
    result = prepared.run()
    synchronize(options.device)
    actual = _output_of(prepared, result)
    if not isinstance(actual, torch.Tensor):
        raise TypeError("nothing to check: Prepared.output is None and run() returned no tensor")
    expected = prepared.reference()
    tolerance = reference_module.Tolerance(rtol=options.rtol, atol=options.atol)
    outcome = reference_module.check_output(actual, expected, tolerance)
    del expected, actual, result
    columns = {
        "check": "pass" if outcome.passed else "fail",
        "max_abs_err": float(outcome.max_abs_err),
        "mismatch_frac": float(outcome.mismatch_frac),
        "check_rtol": options.rtol,
        "check_atol": options.atol,
    }
    if not outcome.passed:
        raise CorrectnessError(outcome.message, columns)
    return columns


@dataclass
class CaseRunner:
    """Measures one case: prepare, warm up, check, time (the timer is the test seam)."""

    spec: BenchmarkSpec
    options: RunOptions
    timer: Timer
    log: Callable[[str], None] = print
    timed_ms: float = 0.0  # time inside timed runs over all cases (for the cost ratio)
    batch_gpu_ms: float = 0.0  # GPU time of the timed batches, L2 flushes included
    phases: PhaseClock = field(default_factory=PhaseClock)  # where the sweep's wall time went
    details: str = ""  # printed under the case's line: --verbose details, warnings
    power: PowerMonitor | None = None  # the GPU's power-limit counters around each case

    def __call__(self, case: Mapping[str, int]):
        partial: dict[str, object] = {}
        try:
            return self._measure(case, partial)
        except Exception as exc:
            if getattr(exc, "result_columns", None) is None:
                exc.result_columns = partial
            raise

    def _measure(self, case, partial):
        options, timing = self.options, self.options.timing
        torch.manual_seed(case_seed(options.seed, case, self.spec.case_fields))
        settings = options.settings(case, self.spec.case_fields)
        prepared = self.phases.run("prepare", lambda: self.spec.prepare(case, settings))
        partial["plan_ms"] = prepared.plan_ms
        if prepared.kernel_pattern and not timing.kernel_pattern and timing.verbose:
            self.log(
                f"  note: the script suggests --kernel-pattern {prepared.kernel_pattern!r}; counting every kernel"
            )

        def timed() -> Measurement:
            return measure(
                prepared.run,
                self.timer,
                timing,
                after_warm_up=lambda: partial.update(verify_output(prepared, options)),
                phases=self.phases,
            )

        measurement, power = self.power.around(timed) if self.power else (timed(), {})
        self.timed_ms += measurement.timed_ms
        self.batch_gpu_ms += measurement.batch_gpu_ms
        element_size = torch.empty((), dtype=DTYPES[options.dtype_name]).element_size()
        io_bytes = self.spec.io_bytes(case, element_size)
        flops = self.spec.flops(case)
        extra = {**partial, **measurement.columns(), **power, "io_bytes": io_bytes, "flops": flops}
        notes = [_describe(measurement)] if timing.verbose else []
        if measurement.starved_fraction > STARVED_WARN_FRACTION:
            notes.append(_starved_note(measurement))
        if measurement.timer != CPU_TIMER and measurement.noise_pct > WIDE_SPREAD_NOTE_PCT:
            notes.append(_wide_spread_note(measurement))
        self.details = "\n".join(notes)
        return measurement.median, io_bytes, flops, extra


def _describe(measurement: Measurement) -> str:
    kernels = "; ".join(measurement.kernels) or "(none recorded)"
    how = (
        "" if measurement.per_call else " (batch means: device events could not be split per call)"
    )
    return (
        f"  {len(measurement.samples)} samples{how}, median {measurement.median:.4f} ms, "
        f"min {measurement.min:.4f} ms, noise {measurement.noise_pct:.2f}%; kernels: {kernels}"
    )


def _starved_note(measurement: Measurement) -> str:
    return (
        f"  note: {measurement.starved_calls} of {len(measurement.samples)} calls started late, "
        "after the GPU had waited for the CPU to launch them; their samples include the wait "
        "(the CPU needs longer to launch a call than the GPU to run it)"
    )


def _wide_spread_note(measurement: Measurement) -> str:
    drift = measurement.drift_pct
    blocks = (
        f"; the medians of {DRIFT_BLOCKS} consecutive blocks of its samples put this one "
        f"within +-{drift:.1f}% (drift_pct)"
        if math.isfinite(drift)
        else ""
    )
    return (
        f"  note: samples spread {measurement.noise_pct:.1f}% (IQR / median): its calls ran at "
        "different speeds (on a GPU at its power limit: stretches at different clocks), so this "
        f"median may move by a few % between runs{blocks}; judge a change of it against that"
    )


def freeze_startup_objects() -> None:
    """Collect once, then keep everything alive so far (torch, flashinfer, the harness)
    out of later collections, which then look at the cases' own objects only: a full
    collection with torch loaded takes about 0.17 s (CPU of the CI machine)."""
    gc.collect()
    gc.freeze()


def release_memory(device: torch.device) -> None:
    """After a failed case: drop garbage, let the allocator give memory back."""
    gc.collect()
    if device.type == "cuda":
        try:
            torch.cuda.synchronize(device)
        except Exception:  # noqa: BLE001 - a broken context will fail the next case visibly
            pass
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- storage and resume


@dataclass
class ResultStore:
    """Where finished rows go: appended (fresh sweep) or compacted atomically (resume)."""

    writer: ResultCsvWriter
    fields: tuple[str, ...]
    resume: bool
    rows: dict[tuple[str, ...], Mapping[str, object]] = field(default_factory=dict)

    def put(self, record: Mapping[str, object]) -> None:
        if not self.resume:
            self.writer.append(record)
            return
        self.rows[case_key(record, self.fields)] = record
        self.writer.write_all(self.rows.values())


def resume_todo(
    cases: Sequence[Mapping[str, int]], rows: Mapping[tuple[str, ...], Mapping], fields
) -> tuple[list[Mapping[str, int]], int]:
    """The cases a resumed sweep still runs, and how many of them were ok but measured by
    another harness version (``HARNESS_VERSION``; none recorded: older), whose time_ms
    must not sit in one file with this version's."""
    todo, stale = [], 0
    for case in cases:
        row = rows.get(case_key(case, fields), {})
        if row.get("status") != STATUS_OK:
            todo.append(case)
        elif row.get("harness_version", "") != HARNESS_VERSION:
            todo.append(case)
            stale += 1
    return todo, stale


def _conflicts(row: Mapping[str, str], options: RunOptions) -> list[str]:
    wanted = {
        "dtype": options.dtype_name,
        "page_size": str(options.page_size),
        "backend": options.backend,
    }
    return [
        f"{name}={row[name]} (now {value})"
        for name, value in wanted.items()
        if row.get(name) and row[name] != value
    ]


def load_resume_rows(
    path: str, spec: BenchmarkSpec, options: RunOptions
) -> dict[tuple[str, ...], dict]:
    """Rows of a resume CSV by case, one per case (an ok row wins over a failed one)."""
    try:
        header, rows = read_result_rows(path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"--resume {path}: cannot read it ({type(exc).__name__}: {exc})") from None
    if not header:
        return {}
    missing = [name for name in ("api", "status", *spec.case_fields) if name not in header]
    if missing:
        raise UsageError(
            f"--resume {path}: not a {spec.script} result file (missing columns: {', '.join(missing)})"
        )
    by_case: dict[tuple[str, ...], dict] = {}
    for row in rows:
        if row.get("api") != spec.api:
            raise UsageError(f"--resume {path}: holds rows of {row.get('api')!r}, not {spec.api}")
        if row.get("status") == STATUS_OK and _conflicts(row, options):
            raise UsageError(
                f"--resume {path}: measured with {', '.join(_conflicts(row, options))}; pass the same options"
            )
        key = case_key(row, spec.case_fields)
        if by_case.get(key, {}).get("status") != STATUS_OK or row.get("status") == STATUS_OK:
            by_case[key] = row
    return by_case


# ---------------------------------------------------------------- progress


def _remove_stale_temporaries(path: str) -> None:
    """Leftovers of an atomic rewrite killed before its rename (``<path>.tmp<pid>``)."""
    for leftover in glob.glob(f"{glob.escape(path)}.tmp*"):
        with contextlib.suppress(OSError):
            os.remove(leftover)


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@dataclass
class Progress:
    """Per-case lines (stdout) and an ETA; a tqdm bar on stderr when it is a terminal."""

    total: int
    bar: object = None
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    @classmethod
    def start(cls, total: int) -> Progress:
        bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                bar = tqdm(total=total, unit="case", file=sys.stderr, leave=False)
            except ImportError:
                bar = None
        return cls(total, bar)

    def eta(self) -> str:
        if not self.done:
            return "?"
        per_case = (time.monotonic() - self.started) / self.done
        return _clock_text(per_case * (self.total - self.done))

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def finished(self, text: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.line(text)
        else:
            self.line(f"{text}  [ETA {self.eta()}]")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


ERROR_KEEP_HEAD, ERROR_KEEP_TAIL = 1500, 500  # a JIT log can be megabytes; CSV readers cap fields
PRINTED_ERROR_LIMIT = 300


def clip_error(message: str) -> str:
    """The stored error: head and tail of a long message (compiler errors end with the cause)."""
    if len(message) <= ERROR_KEEP_HEAD + ERROR_KEEP_TAIL:
        return message
    cut = len(message) - ERROR_KEEP_HEAD - ERROR_KEEP_TAIL
    return (
        f"{message[:ERROR_KEEP_HEAD]} [... {cut} characters cut ...] {message[-ERROR_KEEP_TAIL:]}"
    )


def _one_line(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    more = len(first) > PRINTED_ERROR_LIMIT or first != message.strip()
    return first[:PRINTED_ERROR_LIMIT] + (" ... (full message in the CSV)" if more else "")


def _summary_line(index: int, total: int, text: str, record: Mapping[str, object]) -> str:
    head = f"[{index}/{total}] {text}: "
    if record["status"] == STATUS_OK:
        return f"{head}{record['time_ms']:.3f}ms, {record['bandwidth_GB_s']:.2f} GB/s, {record['tflops']:.2f} TFLOPs"
    return f"{head}FAILED: {record['error_type']}: {_one_line(str(record['error']))}"


# ---------------------------------------------------------------- the sweep


@dataclass
class Sweep:
    spec: BenchmarkSpec
    options: RunOptions
    timer: Timer
    log: Callable[[str], None] = print

    def run(self) -> int:
        spec, options = self.spec, self.options
        writer = ResultCsvWriter(options.output, csv_fieldnames(spec.case_fields))
        store = ResultStore(writer, spec.case_fields, options.resume)
        todo = list(options.cases)
        if options.resume:
            store.rows = load_resume_rows(options.output, spec, options)
            _remove_stale_temporaries(options.output)
            todo, stale = resume_todo(todo, store.rows, spec.case_fields)
            note = (
                f"; {stale} ok case(s) measured by another harness version are measured again"
                if stale
                else ""
            )
            self.log(
                f"Resuming {options.output}: {len(options.cases) - len(todo)} of {len(options.cases)} cases already ok{note}"
            )
            if not todo:
                return 0
        elif os.path.exists(options.output):
            self.log(f"Overwriting {options.output}")
            os.remove(options.output)
        metadata = environment_columns(options)
        roofline = load_roofline(options, str(metadata["device"]))
        return self._loop(todo, store, metadata, roofline)

    def _loop(self, todo, store, metadata, roofline) -> int:
        spec, options = self.spec, self.options
        power = open_power_monitor(options.device)
        runner = CaseRunner(spec, options, self.timer, self.log, power=power)
        freeze_startup_objects()
        progress = Progress.start(len(todo))
        failed, index, started = 0, 0, time.monotonic()
        try:
            for index, case in enumerate(todo, 1):
                runner.details = ""
                record = self._one(runner, case, metadata, roofline)
                store.put(record)
                text = case_text(case, spec.case_fields)
                progress.finished(_summary_line(index, len(todo), text, record))
                if runner.details:
                    progress.line(runner.details)
                if record["status"] != STATUS_OK:
                    failed += 1
                    progress.line(f"  repro: {record['repro']}")
                    release_memory(options.device)
                elif options.device.type == "cuda":
                    torch.cuda.empty_cache()  # the next case's inputs get unfragmented memory
        except KeyboardInterrupt:
            progress.close()
            where = (
                case_text(todo[index - 1], spec.case_fields) if index else "before the first case"
            )
            self.log(
                f"\nInterrupted at case {index}/{len(todo)} ({where}); the CSV holds every finished case."
            )
            self.log(f"Results saved to {options.output}; continue with --resume {options.output}")
            return 130
        progress.close()
        self.log(_cost_line(runner, time.monotonic() - started))
        self.log(f"\nResults saved to {options.output}")
        if failed:
            self.log(f"{failed} of {len(todo)} cases failed")
        return 1 if failed else 0

    def _one(self, runner, case, metadata, roofline) -> dict:
        repro = repro_command(self.spec, self.options, case)
        known = {**metadata, "repro": repro, **_static_columns(self.spec, case, self.options)}
        record = execute_benchmark_case(self.spec.api, case, lambda: runner(case), known)
        record["error"] = clip_error(str(record["error"]))
        record.update(roofline.columns(record))
        return record


def _cost_line(runner: CaseRunner, wall_s: float) -> str:
    """How much of the sweep's wall time was spent inside timed runs, and where the rest went."""
    timed_s = runner.timed_ms / 1e3
    ratio = f"{wall_s / timed_s:.1f}x" if timed_s > 0 else "n/a"
    line = f"Sweep wall time {wall_s:.1f} s; time inside timed runs {timed_s:.2f} s (wall/timed {ratio})"
    if runner.batch_gpu_ms > 0:
        line += (
            f"; GPU busy in timed batches {runner.batch_gpu_ms / 1e3:.2f} s (L2 flushes included)"
        )
    if runner.phases.seconds:
        line += f"; by phase: {runner.phases.describe()}"
    return line


def _static_columns(spec: BenchmarkSpec, case, options: RunOptions) -> dict[str, object]:
    """io_bytes and flops known before the run, so failed rows carry them too."""
    try:
        element_size = torch.empty((), dtype=DTYPES[options.dtype_name]).element_size()
        return {
            "io_bytes": float(spec.io_bytes(case, element_size)),
            "flops": float(spec.flops(case)),
        }
    except Exception:  # noqa: BLE001 - the run itself will report a broken formula
        return {}


# ---------------------------------------------------------------- main


TimerFactory = Callable[[TimingOptions, torch.device, Callable[[str], None]], Timer]


def parse_command_line(spec: BenchmarkSpec, argv) -> argparse.Namespace | int:
    try:
        return build_parser(spec).parse_args(argv)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2


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
    args = parse_command_line(spec, argv)
    if isinstance(args, int):
        return args
    try:
        return _run(spec, args, probe or Probe(), timer_factory)
    except UsageError as exc:
        print(f"{spec.script}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nInterrupted.", file=sys.stderr)
        return 130


def _run(spec: BenchmarkSpec, args, probe: Probe, timer_factory: TimerFactory) -> int:
    for text in args.filter:  # syntax first: no import, no device query for a typo
        parse_filter(text, spec.case_fields)
    if args.list:
        return list_cases(spec, args, probe)
    return execute(spec, plan(spec, args, probe), timer_factory)


def plan(spec: BenchmarkSpec, args, probe: Probe) -> RunOptions:
    """Every check of the command line, no GPU work: raises UsageError (exit 2)."""
    choice = resolve_backend(args.backend, args.device, probe)
    options = resolve_options(spec, args, choice)
    if choice.note:
        print(choice.note, file=sys.stderr)
    return options


def execute(spec: BenchmarkSpec, options: RunOptions, timer_factory: TimerFactory) -> int:
    """The sweep ``plan`` resolved: exit 0, 1 when a case failed, 130 when interrupted."""
    device = _concrete(options.device)
    options = replace(options, device=device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    print(
        f"{spec.api}: {len(options.cases)} case(s) (preset {options.preset}), backend "
        f"{options.backend} on {device}, timer {options.timing.timer}, L2 {options.timing.l2}",
        flush=True,
    )
    timer = timer_factory(options.timing, device, print if options.verbose else (lambda _: None))
    return Sweep(spec, options, timer).run()


def list_cases(spec: BenchmarkSpec, args, probe: Probe) -> int:
    """Print the cases a run would measure (the CPU preset where it would fall back)."""
    on_cpu = args.device == "cpu" or (args.backend != "flashinfer" and not probe.cuda_available())
    preset = _preset_for(spec, args, torch.device("cpu" if on_cpu else "cuda"))
    cases = _select(spec, preset, args.filter)
    print(f"{spec.api}: preset {preset}, {len(cases)} cases")
    for case in cases:
        print(case_text(case, spec.case_fields))
    return 0
