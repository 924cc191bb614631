"""One case: prepare, warm up, check against the reference, time."""

from __future__ import annotations

import gc
import importlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

import torch

from fi_attn_bench.backends.impls import DEFAULT_IMPL, Impl, prepare_impl
from fi_attn_bench.cases import serving
from fi_attn_bench.cases.selection import case_seed
from fi_attn_bench.cases.spec import DTYPES, BenchmarkSpec, Prepared
from fi_attn_bench.device.energy import EnergyAccess
from fi_attn_bench.device.power import PowerMonitor
from fi_attn_bench.device.sync import synchronize
from fi_attn_bench.device.telemetry import Telemetry
from fi_attn_bench.results.schema import NOISY_NOTE, append_note
from fi_attn_bench.sweep.cost import case_cost
from fi_attn_bench.sweep.run_options import RunOptions
from fi_attn_bench.timing.conditions import CaseConditions
from fi_attn_bench.timing.energy import EnergyRecorder
from fi_attn_bench.timing.fresh import SAMPLE_RATES
from fi_attn_bench.timing.integrity import (
    IntegrityError,
    IntegrityProbe,
    Subject,
    integrity_column,
)
from fi_attn_bench.timing.loop import PhaseClock, measure
from fi_attn_bench.timing.options import (
    CPU_TIMER,
    TimingOptions,
)
from fi_attn_bench.timing.paired import Contender, PairedOutcome, PairedRatio, measure_paired
from fi_attn_bench.timing.statistics import (
    DRIFT_BLOCKS,
    STARVED_WARN_FRACTION,
    WIDE_SPREAD_NOTE_PCT,
    Measurement,
    stop_noise_pct,
)
from fi_attn_bench.timing.timers import Timer
from fi_attn_bench.wording import counted


def row_notes(measurement: Measurement, timing: TimingOptions) -> list[str]:
    """The row's ``notes`` column (its one writer): a measurement whose noise, as the stop
    rule judges it, is still above the target once sampling ended (the budget ran out)."""
    if len(measurement.samples) < 2:
        return [f"{NOISY_NOTE} 1 sample, noise unknown (target {timing.noise_target_pct:g}%)"]
    noise = stop_noise_pct(measurement.samples, timing.stop_rule)
    if noise > timing.noise_target_pct:
        return [
            f"{NOISY_NOTE} noise {noise:.1f}% > target {timing.noise_target_pct:g}% "
            f"({timing.stop_rule})"
        ]
    return []


class CorrectnessError(RuntimeError):
    """run()'s output disagrees with the reference."""


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


@dataclass(frozen=True)
class CheckOutcome:
    """The check's CSV columns, and why it failed (None when it passed or was skipped);
    ``output``: a copy of the checked call's output, when asked to keep one."""

    columns: Mapping[str, object]
    failure: str | None = None
    output: torch.Tensor | None = None


def _kept(tensor, keep: bool) -> torch.Tensor | None:
    return tensor.clone() if keep and isinstance(tensor, torch.Tensor) else None


def verify_output(
    prepared: Prepared, options: RunOptions, impl: Impl = DEFAULT_IMPL, keep: bool = False
) -> CheckOutcome:
    """One checked call: poison the output, run, compare with the float32 reference
    (``keep``: return a copy of the output, for the integrity checks)."""
    wanted = options.check and impl.checked and prepared.reference is not None
    if not wanted:
        result = prepared.run()
        synchronize(options.device)
        actual = _output_of(prepared, result)
        _require_finite(actual)
        return CheckOutcome({"check": "skipped"}, output=_kept(actual, keep))
    checking = importlib.import_module("fi_attn_bench.cases.checking")
    if prepared.output is not None:
        checking.poison_(prepared.output)
    result = prepared.run()
    synchronize(options.device)
    actual = _output_of(prepared, result)
    if not isinstance(actual, torch.Tensor):
        raise TypeError("nothing to check: Prepared.output is None and run() returned no tensor")
    expected = prepared.reference()
    tolerance = checking.Tolerance(rtol=options.rtol, atol=options.atol)
    outcome = checking.check_output(actual, expected, tolerance)
    kept = _kept(actual, keep and outcome.passed)
    del expected, actual, result
    columns = {
        "check": "pass" if outcome.passed else "fail",
        "max_abs_err": float(outcome.max_abs_err),
        "mismatch_frac": float(outcome.mismatch_frac),
        "check_rtol": options.rtol,
        "check_atol": options.atol,
    }
    return CheckOutcome(columns, None if outcome.passed else outcome.message, kept)


@dataclass(frozen=True)
class CaseResult:
    """What one case gave: its measurement or the error that stopped it, the optional
    columns measured on the way (plan time, check, power), and notes for the log."""

    measurement: Measurement | None
    columns: Mapping[str, object]
    notes: tuple[str, ...] = ()
    error: Exception | None = None
    ratio: PairedRatio | None = None  # head to head: against the baseline implementation
    round_medians_ms: tuple[float, ...] = ()  # head to head: the median of each kept round


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
    power: PowerMonitor | None = None  # the GPU's power-limit counters around each case
    telemetry: Telemetry | None = None  # clocks, temperature, throttle reasons (none: empty)
    conditions: CaseConditions | None = None  # made on the first case; keeps the max clock
    # the energy counter read around each timed batch (None or no counter: empty, noted)
    energy: EnergyAccess | None = None

    def __call__(self, case: Mapping[str, int]) -> tuple[CaseResult, ...]:
        """One CaseResult per ``--impl`` (their order), each with the case's cost columns;
        never raises an Exception: a failure is a CaseResult with its error."""
        before, started = dict(self.phases.seconds), time.perf_counter()
        timed, gpu = self.timed_ms, self.batch_gpu_ms
        results = self._paired(case) if self.options.paired else self._single(case)
        cost = case_cost(
            before,
            self.phases.seconds,
            time.perf_counter() - started,
            self.timed_ms - timed,
            self.batch_gpu_ms - gpu,
        )
        for result in results:
            result.columns.update(cost.columns())
        return results

    def _single(self, case: Mapping[str, int]) -> tuple[CaseResult, ...]:
        columns: dict[str, object] = {}  # filled as the case goes, kept when it fails
        try:
            measurement = self._measure(case, columns)
        except Exception as exc:  # noqa: BLE001 - a failed case is data, not a crash
            columns.update(self._integrity_columns(exc))
            return (CaseResult(None, columns, error=exc),)
        columns.update(self._integrity_columns(None))
        return (self._finished(measurement, columns),)

    def _integrity_columns(self, error: Exception | None) -> dict[str, str]:
        """The integrity column of a row that got as far as timing (none for one that did not)."""
        if error is not None and not isinstance(error, IntegrityError):
            return {}
        return integrity_column(self._integrity_on(), error, self.timer.name)

    def _integrity_on(self) -> bool:
        return self.options.integrity and self.options.check

    def _probe(self, prepared: Prepared) -> IntegrityProbe | None:
        """The integrity checks of one implementation (None: switched off, or no reference)."""
        if not self._integrity_on() or prepared.reference is None:
            return None
        subject = Subject(
            run=prepared.run,
            output=prepared.output,
            reference=prepared.reference,
            inputs=prepared.inputs,
            device=self.options.device,
            tolerance=checking_tolerance(self.options),
        )
        rate = SAMPLE_RATES["judge" if self.options.judge else "default"]
        return IntegrityProbe(subject, self.timer.name, self.timer.stopwatch, rate=rate)

    def _finished(self, measurement: Measurement, columns: dict[str, object]) -> CaseResult:
        self.timed_ms += measurement.timed_ms
        self.batch_gpu_ms += measurement.batch_gpu_ms
        columns.update(measurement.columns())
        for note in row_notes(measurement, self.options.timing):
            append_note(columns, note)
        append_note(columns, self._energy_note(measurement))
        return CaseResult(measurement, columns, self._notes(measurement))

    def _prepare(self, case, impl: Impl, columns, shared: Prepared | None) -> Prepared:
        settings = self.options.settings(case, self.spec.case_fields)
        prepared = self.phases.run(
            "prepare", lambda: prepare_impl(self.spec, impl, case, settings, shared)
        )
        columns["plan_ms"] = prepared.plan_ms
        if prepared.resolved_backend:
            columns["resolved_backend"] = prepared.resolved_backend
        return prepared

    def _checker(
        self, prepared: Prepared, impl: Impl, columns, probe: IntegrityProbe | None = None
    ) -> Callable[[], None]:
        def check() -> None:
            found = verify_output(prepared, self.options, impl, keep=probe is not None)
            if probe is not None:
                probe.verified = found.output
            columns.update(found.columns)
            if found.failure is not None:
                raise CorrectnessError(found.failure)

        return check

    def _measure(self, case, columns: dict[str, object]) -> Measurement:
        options, timing = self.options, self.options.timing
        torch.manual_seed(case_seed(options.seed, case, self.spec.case_fields))
        impl = options.impls[0]
        prepared = self._prepare(case, impl, columns, None)
        if prepared.kernel_pattern and not timing.kernel_pattern and timing.verbose:
            self.log(
                f"  note: the script suggests --kernel-pattern {prepared.kernel_pattern!r}; counting every kernel"
            )
        probe = self._probe(prepared)
        check = self._checker(prepared, impl, columns, probe)
        conditions = self._conditions()
        energy = self._recorder()

        def timed() -> Measurement:
            return measure(
                prepared.run,
                self.timer,
                timing,
                after_warm_up=check,
                phases=self.phases,
                watch=conditions,
                energy=energy,
                timed_fn=probe.timed_fn() if probe else None,
                audits=probe.audits() if probe else (),
            )

        conditions.begin()
        try:
            if self.power is None:
                return timed()
            measurement, power = self.power.around(timed)
            columns.update(power)
            return measurement
        finally:
            conditions.end()
            columns.update(conditions.columns())
            _note_probe(columns, probe)

    def _recorder(self) -> EnergyRecorder | None:
        """A fresh reader of the energy counter for one implementation of a case."""
        access = self.energy
        if access is None or access.counter is None:
            return None
        return EnergyRecorder(
            access.counter,
            access.window_s,
            clock=access.clock,
            trace=access.trace,
            round_s=access.round_s,
        )

    def _energy_note(self, measurement: Measurement) -> str:
        """Why the row has no energy, if it has none ("" when it has)."""
        if measurement.energy is not None:
            return measurement.energy.note
        reason = self.energy.reason if self.energy is not None else ""
        return f"energy: {reason or 'the energy counter was not read'}"

    def _conditions(self) -> CaseConditions:
        if self.conditions is None:
            self.conditions = CaseConditions(self.telemetry, self.options.timing)
        return self.conditions

    def _paired(self, case) -> tuple[CaseResult, ...]:
        """Every --impl of the case in interleaved rounds (``measure_paired``)."""
        options = self.options
        impls = options.impls
        torch.manual_seed(case_seed(options.seed, case, self.spec.case_fields))
        columns: list[dict[str, object]] = [{} for _ in impls]
        errors: list[Exception | None] = [None] * len(impls)
        contenders: dict[int, Contender] = {}
        probes: dict[int, IntegrityProbe | None] = {}
        shared: Prepared | None = None
        for index, impl in enumerate(impls):
            try:
                prepared = self._prepare(case, impl, columns[index], shared)
            except Exception as exc:  # noqa: BLE001 - this impl's row fails, the others go on
                errors[index] = exc
                if isinstance(exc, IntegrityError):  # the static screen, under --judge
                    columns[index].update(self._integrity_columns(exc))
                continue
            shared = shared or prepared
            probes[index] = self._probe(prepared)
            contenders[index] = Contender(
                prepared.run,
                self._checker(prepared, impl, columns[index], probes[index]),
                timed_fn=probes[index].timed_fn() if probes[index] else None,
                audits=probes[index].audits() if probes[index] else (),
            )
        del shared
        try:
            outcome, power = self._rounds(contenders, columns)
        except Exception as exc:  # noqa: BLE001 - the rounds failed: every measured impl fails
            return tuple(
                CaseResult(None, columns[i], error=errors[i] or exc) for i in range(len(impls))
            )
        for index, probe in probes.items():
            error = outcome.errors[list(contenders).index(index)] if outcome else None
            columns[index].update(self._integrity_columns(error))
            _note_probe(columns[index], probe)
        return self._paired_results(contenders, outcome, power, columns, errors)

    def _rounds(self, contenders: Mapping[int, Contender], columns: list[dict[str, object]]):
        positions = list(contenders)
        baseline = (
            positions.index(self.options.baseline) if self.options.baseline in contenders else -1
        )

        conditions = self._conditions()
        energies = [self._recorder() for _ in positions]

        def timed() -> PairedOutcome:
            return measure_paired(
                [contenders[i] for i in positions],
                self.timer,
                self.options.timing,
                baseline=baseline,
                phases=self.phases,
                watch=conditions,
                energies=energies if any(energies) else (),
            )

        if not contenders:
            return None, {}
        conditions.begin()
        try:
            if self.power is None:
                return timed(), {}
            return self.power.around(timed)
        finally:
            conditions.end()
            for index in contenders:  # the case's conditions: every measured impl's row
                columns[index].update(conditions.columns())

    def _paired_results(
        self, contenders, outcome, power, columns, errors
    ) -> tuple[CaseResult, ...]:
        impls, baseline = self.options.impls, self.options.baseline
        positions = list(contenders)
        results = []
        for index, impl in enumerate(impls):
            if index not in contenders:
                results.append(CaseResult(None, columns[index], error=errors[index]))
                continue
            at = positions.index(index)
            columns[index].update(power)
            measurement, error = outcome.measurements[at], outcome.errors[at]
            if measurement is None:
                results.append(CaseResult(None, columns[index], error=error))
                continue
            ratio = outcome.ratios[at]
            if ratio is not None:
                columns[index].update(ratio.columns(impls[baseline].name))
            elif index == baseline:
                columns[index].update(
                    baseline_impl=impl.name, paired_rounds=len(outcome.round_medians[at])
                )
            _add_energy_ratio(columns[index], outcome, at)
            result = self._finished(measurement, columns[index])
            rounds = outcome.round_medians[at]
            results.append(replace(result, ratio=ratio, round_medians_ms=rounds))
        return tuple(results)

    def _notes(self, measurement: Measurement) -> tuple[str, ...]:
        notes = [_describe(measurement)] if self.options.timing.verbose else []
        if self.options.timing.verbose and self.options.timing.throttle_policy != "off":
            notes.append(_throttle_note(measurement, self.conditions))
        if measurement.starved_fraction > STARVED_WARN_FRACTION:
            notes.append(_starved_note(measurement))
        if measurement.timer != CPU_TIMER and measurement.noise_pct > WIDE_SPREAD_NOTE_PCT:
            notes.append(_wide_spread_note(measurement))
        return tuple(notes)


def checking_tolerance(options: RunOptions):
    """The check's tolerance, as ``verify_output`` uses it."""
    checking = importlib.import_module("fi_attn_bench.cases.checking")
    return checking.Tolerance(rtol=options.rtol, atol=options.atol)


def _note_probe(columns: dict[str, object], probe: IntegrityProbe | None) -> None:
    """What the integrity checks could not see or do, in the row's notes."""
    if probe is None:
        return
    for note in (probe.blind_spot(), *probe.notes):
        append_note(columns, note)


def _add_energy_ratio(columns: dict[str, object], outcome: PairedOutcome, at: int) -> None:
    """The paired energy ratio's columns, or the note that says why there is none."""
    ratio = outcome.energy_ratios[at] if outcome.energy_ratios else None
    if ratio is not None:
        columns.update(ratio.energy_columns())
    elif outcome.energy_notes:
        append_note(columns, outcome.energy_notes[at])


def _describe(measurement: Measurement) -> str:
    kernels = "; ".join(measurement.kernels) or "(none recorded)"
    how = (
        "" if measurement.per_call else " (batch means: device events could not be split per call)"
    )
    return (
        f"  {counted(len(measurement.samples), 'sample')}{how}, median {measurement.median:.4f} ms, "
        f"min {measurement.min:.4f} ms, noise {measurement.noise_pct:.2f}%; kernels: {kernels}"
    )


def _throttle_note(measurement: Measurement, conditions: CaseConditions | None) -> str:
    policy = conditions.options.throttle_policy if conditions else "off"
    if conditions is None or not conditions.policy_active:
        return (
            f"  note: --throttle-policy {policy} inactive: the SM clock or its maximum is not "
            "readable here (see fi-attn-bench-doctor's telemetry check); every sample kept"
        )
    threshold = f"{conditions.threshold_mhz:.0f} MHz"
    if measurement.throttled_samples and not measurement.discarded_samples:
        return (
            f"  note: every batch ran below {threshold} (--throttle-policy {policy}); "
            f"all {counted(measurement.throttled_samples, 'sample')} kept"
        )
    if conditions.throttled_batches and not measurement.throttled_samples:
        return (
            f"  note: {conditions.throttled_batches} batches ran below {threshold} but none was "
            "dropped: the profiler's recording could not be split by batch (one mean sample)"
        )
    return (
        f"  note: --throttle-policy {policy} discarded {counted(measurement.discarded_samples, 'sample')} "
        f"({conditions.throttled_batches} batches with an SM clock below {threshold})"
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


def case_work(spec: BenchmarkSpec, case, options: RunOptions) -> tuple[float, float]:
    """(io_bytes, flops) of one run(), from the script's formulas, known before the run."""
    element_size = torch.empty((), dtype=DTYPES[options.dtype_name]).element_size()
    return float(spec.io_bytes(case, element_size)), float(spec.flops(case))


def with_uniform_twin(
    runner: CaseRunner, case, results: tuple[CaseResult, ...]
) -> tuple[CaseResult, ...]:
    """A measured varied case's results with their uniform twin's time (``uniform_twin_ms``,
    ``imbalance_pct``), the twin measured by the same runner as any case (every --impl, the
    twin of each result at its position); a twin that fails leaves both columns out of that
    result and adds a note."""
    measured = [r for r in results if r.error is None and _positive(r.measurement.median)]
    if serving.workload_of(case) is None or not measured:  # a failed row fails on its own
        return results
    twins = runner(serving.twin_case(runner.spec, case))
    return tuple(
        _with_twin(runner, result, twin) for result, twin in zip(results, twins, strict=True)
    )


def _with_twin(runner: CaseRunner, result: CaseResult, twin: CaseResult) -> CaseResult:
    if result.error is not None or not _positive(result.measurement.median):
        return result
    error = twin.error
    if error is None and not _positive(twin.measurement.median):
        error = ValueError(f"time_ms {twin.measurement.median!r} is not positive")
    if error is not None:
        release_memory(runner.options.device)
        note = f"  uniform twin failed: {type(error).__name__}: {error}"
        return replace(result, notes=(*result.notes, note))
    twin_ms = twin.measurement.median
    imbalance = {
        "uniform_twin_ms": twin_ms,
        "imbalance_pct": (result.measurement.median / twin_ms - 1.0) * 100.0,
    }
    return replace(result, columns={**result.columns, **imbalance})


def _positive(value: float) -> bool:
    return math.isfinite(value) and value > 0
