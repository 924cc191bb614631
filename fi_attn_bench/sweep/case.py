"""One case: prepare, warm up, check against the reference, time."""

from __future__ import annotations

import gc
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from fi_attn_bench.cases import serving
from fi_attn_bench.cases.selection import case_seed
from fi_attn_bench.cases.spec import DTYPES, BenchmarkSpec, Prepared
from fi_attn_bench.device.power import PowerMonitor
from fi_attn_bench.seed_api import synchronize
from fi_attn_bench.sweep.options import RunOptions
from fi_attn_bench.timing.loop import PhaseClock, measure
from fi_attn_bench.timing.options import (
    CPU_TIMER,
)
from fi_attn_bench.timing.statistics import (
    DRIFT_BLOCKS,
    STARVED_WARN_FRACTION,
    WIDE_SPREAD_NOTE_PCT,
    Measurement,
)
from fi_attn_bench.timing.timers import Timer


class CorrectnessError(RuntimeError):
    """run()'s output disagrees with the reference; carries the check's columns."""

    def __init__(self, message: str, result_columns: Mapping[str, object]):
        super().__init__(message)
        self.result_columns = dict(result_columns)


class NonFiniteOutput(RuntimeError):
    """run() wrote NaN or infinity."""


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
    reference_module = importlib.import_module("fi_attn_bench.cases.reference")
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


def static_columns(spec: BenchmarkSpec, case, options: RunOptions) -> dict[str, object]:
    """io_bytes, flops and a varied batch's shape, known before the run, so failed rows
    carry them too."""
    shape = serving.shape_columns(case)
    try:
        element_size = torch.empty((), dtype=DTYPES[options.dtype_name]).element_size()
        return {
            **shape,
            "io_bytes": float(spec.io_bytes(case, element_size)),
            "flops": float(spec.flops(case)),
        }
    except Exception:  # noqa: BLE001 - the run itself will report a broken formula
        return shape
