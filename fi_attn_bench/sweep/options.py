"""A sweep's resolved options: cases, output, timing, tolerances; and the repro command of a case."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from fi_attn_bench.backends import flashinfer_api as flashinfer_compat
from fi_attn_bench.backends.impls import DEFAULT_IMPL, TORCH_IMPL, Impl
from fi_attn_bench.backends.selection import BackendChoice
from fi_attn_bench.cases.selection import case_seed, case_text, parse_filter, select_cases
from fi_attn_bench.cases.spec import DTYPES, BenchmarkSpec, Settings
from fi_attn_bench.errors import NoMatchingCase, UsageError
from fi_attn_bench.seed_api import DEFAULT_WORKSPACE_BYTES, get_csv_path
from fi_attn_bench.timing.options import (
    TimingOptions,
)

DEFAULT_TOLERANCE = 1.6e-2


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
    # Head to head (--impl, --baseline-impl, --fail-if-slower): the implementations measured
    # per case, which one the paired ratios are taken against, and the CI gate's threshold.
    chosen_impls: tuple[Impl, ...] = ()  # empty: the one --backend names
    baseline: int = 0
    fail_if_slower_pct: float | None = None

    @property
    def impls(self) -> tuple[Impl, ...]:
        """The implementations measured per case (``--impl``, else the ``--backend`` one)."""
        if self.chosen_impls:
            return self.chosen_impls
        return (TORCH_IMPL if self.backend == TORCH_IMPL.kind else DEFAULT_IMPL,)

    @property
    def paired(self) -> bool:
        """Several implementations per case: measured in interleaved rounds."""
        return len(self.impls) > 1

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


def select_for_preset(spec: BenchmarkSpec, preset: str, filters: Sequence[str]) -> tuple[dict, ...]:
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


def preset_for(spec: BenchmarkSpec, args, device: torch.device) -> str:
    if args.preset:
        return args.preset
    if device.type == "cpu" and "cpu" in spec.presets:
        return "cpu"
    return "default" if "default" in spec.presets else sorted(spec.presets)[0]


def resolve_options(
    spec: BenchmarkSpec,
    args,
    choice: BackendChoice,
    impls: tuple[Impl, ...] = (),
    baseline: int = 0,
) -> RunOptions:
    device = choice.device
    preset = preset_for(spec, args, device)
    output, resume = _output_path(spec, args)
    version = (
        flashinfer_compat.flashinfer_version(choice.flashinfer) or ""
        if choice.flashinfer is not None
        else ""
    )
    return RunOptions(
        preset=preset,
        cases=select_for_preset(spec, preset, args.filter),
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
        chosen_impls=impls,
        baseline=baseline,
        fail_if_slower_pct=getattr(args, "fail_if_slower", None),
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
    if options.paired or options.impls[0].name != options.backend:
        for impl in options.impls:
            named = impl.name != impl.target
            words += ["--impl", f"{impl.name}={impl.target}" if named else impl.target]
    if options.baseline:
        words += ["--baseline-impl", options.impls[options.baseline].name]
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
