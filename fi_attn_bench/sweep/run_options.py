"""A sweep's resolved options: cases, output, timing, tolerances; and the repro command of a case."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from fi_attn_bench.backends import flashinfer_api
from fi_attn_bench.backends.choice import ImplKindChoice
from fi_attn_bench.backends.impls import DEFAULT_IMPL, TORCH_IMPL, Impl, default_impl_name
from fi_attn_bench.cases import serving
from fi_attn_bench.cases.selection import case_seed, case_text, parse_filter, select_cases
from fi_attn_bench.cases.serving import COMMAND_LINE_CASES
from fi_attn_bench.cases.spec import DEFAULT_WORKSPACE_BYTES, DTYPES, BenchmarkSpec, Settings
from fi_attn_bench.device.cupti import cupti_importable
from fi_attn_bench.errors import NoMatchingCase, UsageError
from fi_attn_bench.fib.selection import FibSelection
from fi_attn_bench.fib.selection import select as fib_select
from fi_attn_bench.program import face_path, rerun_words
from fi_attn_bench.results.reader import StoredRows
from fi_attn_bench.sweep.outputs import (
    check_new_output,
    default_csv_path,
    probe_directory,
    require_regular_file,
    samples_path,
    writes_stdout,
)
from fi_attn_bench.sweep.selection_record import (
    Selection,
    check_unrecorded_cases,
    read_resumed,
    recorded_selection,
    resume_selection,
)
from fi_attn_bench.sweep.sharding import ShardSpec
from fi_attn_bench.timing.options import (
    TimingOptions,
)

DEFAULT_TOLERANCE = 1.6e-2
# The CPU reference is a functional check, not a measurement: its noise stays at 3-33 %, so
# every case would spend the GPU's whole budget without reaching the noise target.
CPU_MAX_TIME_S = 0.2
# One thread: a CPU run's times then depend neither on the core count nor on what else runs
# (torch's default of one thread per core read 87.9 ms and 0.49 ms for one case, oversubscribed).
DEFAULT_CPU_THREADS = 1


def default_max_time_s(device: torch.device) -> float:
    """The per-case measurement budget when --max-time-per-case is not given."""
    return CPU_MAX_TIME_S if device.type == "cpu" else TimingOptions.max_time_s


@dataclass(frozen=True)
class RunOptions:
    """Everything a sweep needs, resolved from the command line."""

    preset: str
    cases: tuple[Mapping[str, int], ...]
    impl_kind: str  # flashinfer or torch: what --backend resolved to
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
    force: bool = False  # move existing outputs aside (checked by plan: nothing else is there)
    samples: str = ""  # gzip JSON Lines of each ok case's raw samples; "" = not written
    filters: tuple[str, ...] = ()  # the --filter texts behind ``cases``
    resume_command: str = ""  # printed after Ctrl-C; "" = this script's own --resume command
    imbalance: bool = False  # also time each varied case's uniform twin
    # A sharded sweep (sweep.shard_plan): the shard these cases are, and where a process
    # that is not the launcher's rank 0 writes what it would print ("" prints).
    shard: ShardSpec | None = None
    log_path: str = ""
    run_id: str = ""  # the invocation's id (results.schema run_id); "" = the sweep makes one
    # Head to head (--impl, --baseline-impl, --fail-if-slower): the implementations measured
    # per case, which one the paired ratios are taken against, and the CI gate's threshold.
    chosen_impls: tuple[Impl, ...] = ()  # empty: the one --backend names
    baseline: int = 0
    fail_if_slower_pct: float | None = None
    cpu_threads: int | None = None  # torch threads of a CPU run (--threads); None on a GPU
    integrity: bool = True  # the timed calls' integrity checks (--no-integrity: off)
    judge: bool = False  # every strict check on (--judge)
    isolation: bool = True  # plugins in a worker process (--no-isolation: in this one)
    energy: bool = True  # read the energy counter around the timed batches (--no-energy: off)
    fib: str = ""  # --fib DIR: the FlashInfer-Bench dataset the cases come from
    fib_traces: str = ""  # --fib-traces DIR: FlashInfer-Bench traces written after the sweep
    # The resumed CSV as planning read it, so that the sweep opens it once; None: not resuming.
    resumed: StoredRows | None = field(default=None, compare=False, repr=False)

    @property
    def impls(self) -> tuple[Impl, ...]:
        """The implementations measured per case (``--impl``, else the ``--backend`` one)."""
        if self.chosen_impls:
            return self.chosen_impls
        return (TORCH_IMPL if self.impl_kind == TORCH_IMPL.kind else DEFAULT_IMPL,)

    @property
    def paired(self) -> bool:
        """Several implementations per case: measured in interleaved rounds."""
        return len(self.impls) > 1

    def repro_command(self, spec: BenchmarkSpec, case: Mapping[str, int]) -> str:
        """The rerun of one case: the options describe themselves, so the sweep that runs
        them does not hand them back to the module that resolved them."""
        return repro_command(spec, self, case)

    def resume_command_of(self, spec: BenchmarkSpec) -> str:
        """The command that finishes this sweep (``resume_command``)."""
        return resume_command(spec, self)

    def settings(self, case: Mapping[str, int], fields: Sequence[str]) -> Settings:
        return Settings(
            device=self.device,
            dtype=DTYPES[self.dtype_name],
            page_size=self.page_size,
            impl_kind=self.impl_kind,
            seed=case_seed(self.seed, case, fields),
            workspace_bytes=self.workspace_bytes,
        )


# cupti becomes the default where it imports once a GPU run shows it cheaper than the
# profiler: on an H100 (VALIDATION.md, "CUPTI timer") its sweep cost 4.2x the timed calls
# against the profiler's 2.5x, cupti-python's record conversion costing ~60 us per record.
CUPTI_IS_DEFAULT = False


def default_gpu_timer() -> str:
    """cupti where it can trace (a CUDA torch with cupti-python) and ``CUPTI_IS_DEFAULT``,
    else the profiler (always on MetaX)."""
    return "cupti" if CUPTI_IS_DEFAULT and cupti_importable() else "profiler"


def _timing_options(asked, device: torch.device) -> TimingOptions:
    timer, l2 = asked.timer or default_gpu_timer(), asked.l2
    if device.type == "cpu":
        timer, l2 = "wall", "warm"
    elif timer == "cuda_graph":
        if l2 == "cold":
            raise UsageError(
                "--timer cuda_graph replays back-to-back calls (warm L2 only); use --l2 warm, or --timer events / profiler for cold L2"
            )
        l2 = "warm"
    pattern = asked.kernel_pattern
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise UsageError(f"invalid --kernel-pattern {pattern!r}: {exc}") from None
    return TimingOptions(
        timer=timer,
        l2=l2 or "cold",
        kernel_pattern=pattern,
        attribution=asked.attribution,
        stop_rule=asked.stop_rule,
        noise_target_pct=asked.noise_target,
        same_within_pct=asked.same_within,
        min_samples=asked.min_samples,
        max_time_s=asked.max_time_per_case or default_max_time_s(device),
        batch_target_ms=asked.batch_ms,
        warmup_min_ms=asked.warmup_ms,
        warmup_max_ms=max(TimingOptions.warmup_max_ms, 5 * asked.warmup_ms),
        # steady-state clocks are a GPU matter; the CPU reference needs neither
        sustain_ms=0.0 if device.type == "cpu" else asked.sustain_ms,
        min_time_ms=0.0 if device.type == "cpu" else asked.min_time_ms,
        enough_samples=asked.enough_samples,
        verbose=asked.verbose,
        **_throttle_options(asked),
    )


def cost_timing(asked) -> TimingOptions:
    """The timing a GPU sweep of these arguments would use: what a shard split costs cases
    by, the same on every machine (a CPU run samples differently)."""
    return _timing_options(asked, torch.device("cuda"))


def _throttle_options(asked) -> dict[str, object]:
    """The throttle policy's fields of TimingOptions (a threshold above 100 % is bad input)."""
    if asked.throttle_threshold > 100:
        raise UsageError(
            f"--throttle-threshold is a % of the maximum clock (<= 100), got {asked.throttle_threshold:g}"
        )
    return {
        "throttle_policy": asked.throttle_policy,
        "throttle_threshold_pct": asked.throttle_threshold,
        "cooldown_ms": asked.cooldown_ms,
    }


def select_for_preset(
    spec: BenchmarkSpec, preset: str, filters: Sequence[str], seed: int = 0
) -> tuple[dict, ...]:
    """The preset's cases (varied-length ones drawn under ``seed``) that pass ``filters``."""
    return _filtered(
        spec, serving.resolve_all(spec, serving.preset_cases(spec, preset), seed), filters, preset
    )


def _filtered(spec, cases, filters: Sequence[str], source: str) -> tuple[dict, ...]:
    terms = [term for text in filters for term in parse_filter(text, spec.case_fields)]
    kept = select_cases(cases, terms)
    if not kept:
        raise NoMatchingCase(f"no case of {source} matches --filter {' '.join(filters)}")
    return tuple(kept)


def fib_selection(spec: BenchmarkSpec, asked) -> FibSelection:
    """``--fib DIR``'s cases for this script, with the run's dtype and page size."""
    if asked.batch or asked.workload or asked.preset:
        raise UsageError("--fib replaces --preset, --batch and --workload; give one of them")
    return fib_select(spec, asked.fib, asked.dtype, asked.page_size, asked.impl)


def selected_cases(
    spec: BenchmarkSpec, asked, preset: str, filters: Sequence[str] | None = None
) -> tuple[dict, ...]:
    """The cases of ``--fib``, ``--batch`` / ``--workload`` when given, else of the preset;
    filtered by ``filters`` (default: ``--filter``)."""
    filters = asked.filter if filters is None else filters
    if getattr(asked, "fib", None):
        cases = serving.resolve_all(spec, fib_selection(spec, asked).cases, asked.seed)
        return _filtered(spec, cases, filters, COMMAND_LINE_CASES)
    batches, files = getattr(asked, "batch", None) or [], getattr(asked, "workload", None) or []
    if not (batches or files):
        return select_for_preset(spec, preset, filters, asked.seed)
    if asked.preset:
        raise UsageError("--batch and --workload replace --preset; give one or the other")
    cases = serving.command_line_cases(spec, batches, files, asked.seed)
    return _filtered(spec, cases, filters, COMMAND_LINE_CASES)


def _output_path(spec: BenchmarkSpec, asked) -> tuple[str, bool]:
    """The CSV and whether it is resumed; every output checked writable, nothing overwritten."""
    if asked.resume:
        if asked.output and os.path.abspath(asked.output) != os.path.abspath(asked.resume):
            raise UsageError("--resume CSV updates that file; do not give a different --output")
        if not os.path.lexists(asked.resume):
            raise UsageError(f"--resume: no such file {asked.resume!r}")
        require_regular_file(asked.resume, "--resume")
        probe_directory(os.path.dirname(asked.resume), "--resume")
        return asked.resume, True
    if asked.output and writes_stdout(asked.output):
        if asked.samples_dir:
            raise UsageError(
                "--samples-dir names its file after the CSV: give --output FILE, not -"
            )
        return asked.output, False
    if asked.output:
        check_new_output(asked.output, "--output", force=asked.force, results_of=spec)
        return asked.output, False
    probe_directory(asked.output_dir, "--output-dir")
    return default_csv_path(spec.api, asked.output_dir), False


def _samples_path(asked, output: str, resume: bool) -> str:
    if not asked.samples_dir:
        return ""
    path = samples_path(asked.samples_dir, output)
    if resume:  # a resumed sweep appends to its samples file
        probe_directory(asked.samples_dir, "--samples-dir")
    else:
        check_new_output(path, "--samples-dir", force=asked.force)
    return path


def _command_line_cases(asked) -> bool:
    """Whether the cases come from --batch, --workload or --fib rather than a preset."""
    return any(getattr(asked, name, None) for name in ("batch", "workload", "fib"))


def preset_for(spec: BenchmarkSpec, asked, device: torch.device) -> str:
    if _command_line_cases(asked):
        return COMMAND_LINE_CASES
    if asked.preset:
        return asked.preset
    if device.type == "cpu" and "cpu" in spec.presets:
        return "cpu"
    return "default" if "default" in spec.presets else sorted(spec.presets)[0]


def run_preset(spec: BenchmarkSpec, asked, device: torch.device) -> str:
    """The preset a sweep runs: ``preset_for``'s, except that ``--preset smoke`` on the CPU
    runs the cpu grid where it is the smaller (a first look: smoke's GPU-sized cases took
    140 s through the CPU reference).  ``--list`` shows the preset asked, for planning."""
    preset = preset_for(spec, asked, device)
    on_cpu_grid = device.type == "cpu" and "cpu" in spec.presets
    if preset == "smoke" and on_cpu_grid and _work(spec, "cpu") < _work(spec, "smoke"):
        return "cpu"
    return preset


def _work(spec: BenchmarkSpec, preset: str) -> float:
    """A preset's FLOPs in all (inf where the script's formula fails on a case)."""
    try:
        return float(sum(spec.flops(case) for case in spec.presets[preset]))
    except Exception:  # noqa: BLE001 - a broken formula fails its case later, and says why
        return float("inf")


def _selection(spec: BenchmarkSpec, asked, device, output: str, resume: bool):
    """The sweep's preset, filters and cases; a resumed sweep's come from its CSV."""
    default_preset = run_preset(spec, asked, device)
    if not resume:
        selection = Selection(default_preset, tuple(asked.filter))
        return selection, selected_cases(spec, asked, selection.preset), None
    stored = read_resumed(output)
    recorded = recorded_selection(output, spec, stored)
    _check_resumed_source(asked, recorded, output)
    selection = resume_selection(spec, asked, recorded, output, default_preset)
    cases = selected_cases(spec, asked, selection.preset, selection.filters)
    if recorded is None:
        check_unrecorded_cases(output, spec, selection, cases, stored)
    return selection, cases, stored


def _check_resumed_source(asked, recorded: Selection | None, output: str) -> None:
    """A sweep of --batch/--workload cases is resumed with them, a preset's without them."""
    given = _command_line_cases(asked)
    if recorded is None or given == (recorded.preset == COMMAND_LINE_CASES):
        return
    if given:
        raise UsageError(
            f"--resume {output}: the interrupted sweep selected {recorded.options_text()}; "
            "give no --batch/--workload to finish it"
        )
    raise UsageError(
        f"--resume {output}: the interrupted sweep measured --batch/--workload cases; "
        "give the same --batch/--workload options to finish it"
    )


def resolve_options(
    spec: BenchmarkSpec,
    asked,
    choice: ImplKindChoice,
    impls: tuple[Impl, ...] = (),
    baseline: int = 0,
    *,
    listing: bool = False,
) -> RunOptions:
    """The sweep's options; ``listing`` (--list): its cases only, no output checked or made."""
    device = choice.device
    if listing:
        output, resume = "", False
        selection, cases, resumed = _selection(spec, asked, device, output, resume)
    elif asked.resume:  # the CSV gives the selection
        output, resume = _output_path(spec, asked)
        selection, cases, resumed = _selection(spec, asked, device, output, resume)
    else:  # a selection with no case creates no output directory
        selection, cases, resumed = _selection(spec, asked, device, "", False)
        output, resume = _output_path(spec, asked)
    dtype_name, page_size = asked.dtype, asked.page_size
    if getattr(asked, "fib", None):
        chosen = fib_selection(spec, asked)
        dtype_name, page_size = chosen.dtype, chosen.page_size
    version = (
        flashinfer_api.flashinfer_version(choice.flashinfer) or ""
        if choice.flashinfer is not None
        else ""
    )
    return RunOptions(
        preset=selection.preset,
        cases=cases,
        impl_kind=choice.impl_kind,
        device=device,
        dtype_name=dtype_name,
        page_size=page_size,
        seed=asked.seed,
        workspace_bytes=asked.workspace_mb * 2**20,
        timing=_timing_options(asked, device),
        check=asked.check,
        rtol=asked.rtol,
        atol=asked.atol,
        output=output,
        resume=resume,
        verbose=asked.verbose,
        peak_bandwidth=asked.peak_bandwidth,
        peak_tflops=asked.peak_tflops,
        flashinfer_version=str(version),
        chosen_impls=impls,
        baseline=baseline,
        fail_if_slower_pct=getattr(asked, "fail_if_slower", None),
        force=asked.force,
        samples="" if listing else _samples_path(asked, output, resume),
        filters=selection.filters,
        imbalance=bool(getattr(asked, "imbalance", False)),
        cpu_threads=_cpu_threads(asked, device, listing),
        integrity=asked.integrity,
        judge=asked.judge,
        isolation=asked.isolation,
        energy=asked.energy,
        fib=getattr(asked, "fib", None) or "",
        fib_traces="" if listing else _fib_traces(asked, output),
        resumed=resumed,
    )


def _fib_traces(asked, output: str) -> str:
    """``--fib-traces DIR``: checked writable now; its traces are read from the sweep's CSV."""
    folder = getattr(asked, "fib_traces", None)
    if not folder:
        return ""
    if not getattr(asked, "fib", None):
        raise UsageError("--fib-traces writes the traces of a --fib run: give --fib DIR")
    if writes_stdout(output):
        raise UsageError("--fib-traces reads the sweep's CSV back: give --output FILE, not -")
    _not_inside_the_inputs(folder, asked.fib)
    probe_directory(folder, "--fib-traces")
    return folder


def _not_inside_the_inputs(folder: str, dataset: str) -> None:
    """Traces written under the dataset's definitions/, workloads/ or solutions/ would be read
    back as its inputs: refused (DIR itself or a new folder is where they go)."""
    target = os.path.realpath(folder)
    for part in ("definitions", "workloads", "solutions"):
        inputs = os.path.realpath(os.path.join(dataset, part))
        if target == inputs or target.startswith(inputs + os.sep):
            raise UsageError(
                f"--fib-traces {folder} is inside the dataset's {part}/, which --fib reads; "
                "give the dataset folder itself or another one"
            )


def _cpu_threads(asked, device: torch.device, listing: bool) -> int | None:
    """--threads on a CPU run (default DEFAULT_CPU_THREADS); a GPU run takes none."""
    given = getattr(asked, "threads", None)
    if device.type == "cpu":
        return given or DEFAULT_CPU_THREADS
    if given and not listing:
        raise UsageError(f"--threads sets the threads of a CPU run; this run is on {device}")
    return None


def _setting_words(spec: BenchmarkSpec, options: RunOptions) -> list[str]:
    """The options, other than the case selection, that a rerun must repeat."""
    timing = options.timing
    words = [
        "--dtype", options.dtype_name,
        "--page-size", str(options.page_size),
        "--backend", options.impl_kind,
        "--device", str(options.device),
    ]  # fmt: skip
    if options.device.type != "cpu":
        words += ["--timer", timing.timer, "--l2", timing.l2]
    elif options.cpu_threads not in (None, DEFAULT_CPU_THREADS):
        words += ["--threads", str(options.cpu_threads)]
    if options.paired or options.impls[0].name != options.impl_kind:
        for impl in options.impls:
            named = impl.name != default_impl_name(impl.target)
            words += ["--impl", f"{impl.name}={impl.target}" if named else impl.target]
    if options.baseline:
        words += ["--baseline-impl", options.impls[options.baseline].name]
    if options.paired and timing.same_within_pct != TimingOptions.same_within_pct:
        words += ["--same-within", f"{timing.same_within_pct:g}"]
    if timing.kernel_pattern:
        words += ["--kernel-pattern", timing.kernel_pattern]
    if timing.attribution != TimingOptions.attribution:
        words += ["--attribution", timing.attribution]
    if timing.stop_rule != TimingOptions.stop_rule:
        words += ["--stop-rule", timing.stop_rule]
    if timing.throttle_policy != TimingOptions.throttle_policy:
        words += ["--throttle-policy", timing.throttle_policy]
        words += ["--throttle-threshold", f"{timing.throttle_threshold_pct:g}"]
        words += ["--cooldown-ms", f"{timing.cooldown_ms:g}"]
    words += _budget_words(options)
    if options.workspace_bytes != DEFAULT_WORKSPACE_BYTES:
        words += ["--workspace-mb", str(options.workspace_bytes // 2**20)]
    if options.seed:
        words += ["--seed", str(options.seed)]
    if options.imbalance:
        words.append("--imbalance")
    if not options.integrity:
        words.append("--no-integrity")
    if options.judge:
        words.append("--judge")
    if not options.isolation:
        words.append("--no-isolation")
    if not options.energy:
        words.append("--no-energy")
    if not options.check:
        words.append("--no-check")
    elif (options.rtol, options.atol) != (DEFAULT_TOLERANCE, DEFAULT_TOLERANCE):
        words += ["--rtol", repr(options.rtol), "--atol", repr(options.atol)]
    return words


def _budget_words(options: RunOptions) -> list[str]:
    """The timing budget where it is not the default: a briefer one repeats worse between
    processes (a fifth of it tripled power-capped prefill's run-to-run noise on an H100)."""
    timing = options.timing
    on_cpu = options.device.type == "cpu"
    budget = [
        ("--min-samples", timing.min_samples, TimingOptions.min_samples),
        ("--noise-target", timing.noise_target_pct, TimingOptions.noise_target_pct),
        ("--max-time-per-case", timing.max_time_s, default_max_time_s(options.device)),
        ("--enough-samples", timing.enough_samples, TimingOptions.enough_samples),
        ("--batch-ms", timing.batch_target_ms, TimingOptions.batch_target_ms),
        ("--warmup-ms", timing.warmup_min_ms, TimingOptions.warmup_min_ms),
    ]
    if not on_cpu:  # the CPU has no GPU-time floor and no sustain phase to repeat
        budget += [
            ("--min-time-ms", timing.min_time_ms, TimingOptions.min_time_ms),
            ("--sustain-ms", timing.sustain_ms, TimingOptions.sustain_ms),
        ]
    return [
        word for flag, value, default in budget if value != default for word in (flag, f"{value:g}")
    ]


def repro_command(spec: BenchmarkSpec, options: RunOptions, case: Mapping[str, int]) -> str:
    """One command line that reruns exactly this case with the same settings."""
    workload = serving.workload_of(case)
    fields = [name for name in spec.case_fields if name != serving.WORKLOAD_FIELD]
    source = list(workload.source) if workload else ["--preset", options.preset]
    words = ["python", spec.script, "--filter", case_text(case, fields), *source]
    words += _setting_words(spec, options)
    return " ".join(shlex.quote(word) for word in words)


def resume_command(spec: BenchmarkSpec, options: RunOptions) -> str:
    """The command that finishes this sweep (its CSV records the case selection)."""
    if options.resume_command:
        return options.resume_command
    face_file = face_path(spec.script, spec.prepare)
    words = [*rerun_words(spec.script, face_file), "--resume", options.output]
    words += _setting_words(spec, options)
    if options.preset == COMMAND_LINE_CASES:  # the CSV cannot rebuild these cases
        sources = dict.fromkeys(serving.workload_of(case).source for case in options.cases)
        words += [word for source in sources for word in source]
    if options.samples:
        words += ["--samples-dir", os.path.dirname(options.samples) or "."]
    return " ".join(shlex.quote(word) for word in words)
