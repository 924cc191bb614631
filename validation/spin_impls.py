"""The --impl plugins that ``python -m validation head-to-head`` measures the harness with.

A slowdown of known size: the script's own FlashInfer run() followed by a GPU spin sized (in
the plugin's plan, against run() alone, interleaved) to make a call ``SPIN_FRACTION`` slower:
``spin_mma`` (fp16 tensor-core work on every SM), ``spin`` (FP32 work on every SM; both need
Triton), ``spin_sleep`` (torch.cuda._sleep, which idles the GPU at low power) and ``spin_auto``
(mma, or sleep for a case too short for mma's fixed cost).  And ``one_instance``: one FlashInfer
callable per case for every impl that names it, an A/A with nothing but the measurement apart.

The sweeps name them ``validation.spin_impls:FACTORY``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import statistics
from collections.abc import Callable, Sequence

from fi_attn_bench.apis import registry

SPIN_FRACTION = 0.02
# The spin's calibration: proportional steps, bursts of run() about as long as a harness round's
# batch (~1/20 of --min-time-ms 500), pairs of bursts per measured slowdown.
CALIBRATION_STEPS = 3
CALIBRATION_MAX_STEP = 4.0
CALIBRATION_BURST_MS = 20.0
CALIBRATION_PAIRS = 4
# A spin whose 0-unit call already adds this share of SPIN_FRACTION cannot be sized to it.
SPIN_GAP_SHARE = 0.5
# Per spin kind: the plugin factory in this file, also the prefix of its CSVs.
SPIN_PLUGINS = {"auto": "spin_auto", "mma": "spin_mma", "busy": "spin", "sleep": "spin_sleep"}


@dataclasses.dataclass(frozen=True)
class Spin:
    """A GPU delay of ``units`` work units: its launch and its measured units per GPU ms."""

    name: str
    launch: Callable[[int], None]
    units_per_ms: float


def _queued_ms(fn, calls: int = 50, lead_ms: float = 5.0) -> float:
    """GPU ms per call of ``fn``: ``calls`` back-to-back calls between two events, queued
    behind a ``lead_ms`` sleep so the GPU never waits for the CPU's launches (events around one
    synchronized call would time the launch of a short call)."""
    import torch

    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(int(lead_ms * _sleep_spin().units_per_ms))
    begin.record()
    for _ in range(calls):
        fn()
    end.record()
    torch.cuda.synchronize()
    return begin.elapsed_time(end) / calls


def _units_per_ms(launch: Callable[[int], None], units: int) -> float:
    """Units per GPU ms of ``launch``: the median of five event-timed ``units`` launches
    (after one discarded), less the time of a zero-unit launch."""
    import torch

    def timed(count: int) -> float:
        times = []
        for _ in range(6):
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            launch(count)
            end.record()
            torch.cuda.synchronize()
            times.append(begin.elapsed_time(end))
        return statistics.median(times[1:])

    return units / (timed(units) - timed(0))


@functools.cache
def _sleep_spin() -> Spin:
    """torch.cuda._sleep: one thread counting SM cycles; the GPU idles at low power meanwhile."""
    import torch

    def launch(cycles: int) -> None:
        torch.cuda._sleep(max(1, cycles))

    return Spin("sleep", launch, _units_per_ms(launch, 1_000_000))


@functools.cache
def _busy_spin() -> Spin:
    """A Triton kernel of dependent FP32 multiply-adds on every SM, ``units`` iterations long:
    it draws power like real kernel work, so a power-limited GPU cannot hand the kernel back
    the time the delay takes (the sleep spin lets the clock rise instead)."""
    import torch
    import triton
    import triton.language as tl

    # One compiled variant for every count: Triton would otherwise specialize on values
    # divisible by 16 and compile again inside a timed calibration (2.9 ms seen on an H100).
    @triton.jit(do_not_specialize=["iterations"])
    def burn(out_ptr, iterations, BLOCK: tl.constexpr):
        offsets = tl.arange(0, BLOCK)
        x = offsets.to(tl.float32) + tl.program_id(0)
        y = x * 0.5
        for _ in range(iterations):
            x = x * 0.99990 + 0.00010
            y = y * 0.99995 + x
        tl.store(out_ptr + tl.program_id(0) * BLOCK + offsets, x + y)

    block = 512
    programs = (
        4 * torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    )
    sink = torch.empty(programs * block, device="cuda", dtype=torch.float32)

    def launch(iterations: int) -> None:
        burn[(programs,)](sink, max(0, iterations), BLOCK=block, num_warps=4)

    launch(1)  # compile
    return Spin("busy", launch, _units_per_ms(launch, 200_000))


@functools.cache
def _mma_spin() -> Spin:
    """A Triton kernel of fp16 tensor-core multiply-accumulates (128x128x128 per step) on every
    SM, ``units`` steps long: the kind of work, and power, of an attention kernel's matmuls."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["iterations"])
    def burn(out_ptr, iterations, BLOCK: tl.constexpr):
        rows = tl.arange(0, BLOCK)
        seed = (rows[:, None] * 7 + rows[None, :] * 3 + tl.program_id(0)) % 17
        tile = (seed.to(tl.float32) * (1.0 / 4096)).to(tl.float16)
        acc = tl.zeros((BLOCK, BLOCK), dtype=tl.float32)
        for _ in range(iterations):
            acc = tl.dot(tile, tile, acc)
        # One float per program: storing the whole tile cost 8.8 us at 0 steps on an H100,
        # more than 2 % of every case under 0.44 ms.
        tl.store(out_ptr + tl.program_id(0), tl.sum(tl.sum(acc, axis=1), axis=0))

    block = 128
    programs = (
        2 * torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    )
    sink = torch.empty(programs, device="cuda", dtype=torch.float32)

    def launch(iterations: int) -> None:
        burn[(programs,)](sink, max(0, iterations), BLOCK=block, num_warps=4)

    launch(1)  # compile
    return Spin("mma", launch, _units_per_ms(launch, 5_000))


def calibrate_units(
    added_fraction: Callable[[int], float], first_units: int, target: float, gap: float
) -> int:
    """Spin units for which ``added_fraction(units)`` (the measured slowdown) reaches ``target``.
    A line through the zero-unit point (``gap``, what a 0-unit spin adds) and the latest
    measurement, since what a unit costs beside the kernel is not what it costs alone (on a
    power-limited GPU the clock the spin leaves the kernel)."""
    units = max(1, first_units)
    for _ in range(CALIBRATION_STEPS):
        per_unit = (added_fraction(units) - gap) / units
        wanted = (target - gap) / per_unit if per_unit > 0 else units * CALIBRATION_MAX_STEP
        units = max(1, round(min(wanted, units * CALIBRATION_MAX_STEP)))
    return units


def choose_spin(
    spins: Sequence[Callable[[], Spin]], gap_of: Callable[[Spin], float]
) -> tuple[Spin, float]:
    """The first of ``spins`` whose 0-unit call adds (``gap_of``) less than SPIN_GAP_SHARE of
    SPIN_FRACTION, else the last, with its gap."""
    for make in spins:
        spin = make()
        gap = gap_of(spin)
        if gap < SPIN_GAP_SHARE * SPIN_FRACTION:
            break
    return spin, gap


def _interleaved_added(
    plain: Callable[[], object], spun: Callable[[], object], calls: int
) -> float:
    """spun/plain - 1 as the median over bursts taken in alternating order (A B, B A, ...), so
    clock and power drift between bursts cancel as in the harness's rounds."""
    ratios = []
    for pair in range(CALIBRATION_PAIRS):
        order = (plain, spun) if pair % 2 == 0 else (spun, plain)
        # Half a burst of lead: a spun call of a short case costs the CPU two launches.
        first, second = (_queued_ms(fn, calls, 5.0 + CALIBRATION_BURST_MS / 2) for fn in order)
        ratios.append(second / first if pair % 2 == 0 else first / second)
    return statistics.median(ratios) - 1.0


def _spin_plugin(context, kind: str, spins: Sequence[Callable[[], Spin]]):
    """The script's own FlashInfer run() on the shared inputs, then a spin sized in plan()
    (once per case) so that a call takes SPIN_FRACTION longer, measured interleaved against
    run() alone in bursts of about CALIBRATION_BURST_MS.  The spin is the first of ``spins``
    whose 0-unit call adds less than SPIN_GAP_SHARE of that (else the last); the fraction
    reached is appended to $H2H_SPIN_LOG when set."""
    from fi_attn_bench.backends.impls import PluginRun

    prepared = _flashinfer_prepared(context)
    run, units, active = prepared.run, [0], [spins[0]()]

    def spun():
        result = run()
        active[0].launch(units[0])
        return result

    def plan() -> None:
        if units[0]:
            return
        _queued_ms(run, 5)
        plain_ms = _queued_ms(run)
        calls = max(3, math.ceil(CALIBRATION_BURST_MS / plain_ms))

        def added(count: int) -> float:
            units[0] = count
            return _interleaved_added(run, spun, calls)

        def gap_of(spin: Spin) -> float:
            active[0] = spin
            return added(0)

        active[0], gap = choose_spin(spins, gap_of)
        first = int(SPIN_FRACTION * plain_ms * active[0].units_per_ms)
        reached = added(calibrate_units(added, first, SPIN_FRACTION, gap))
        log = os.environ.get("H2H_SPIN_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as handle:
                entry = {"case": dict(context.case), "plain_ms": plain_ms, "reached": reached}
                used = {"spin": kind, "used": active[0].name, "units": units[0]}
                handle.write(json.dumps({**entry, **used}) + "\n")

    return PluginRun(run=spun, plan=plan, output=prepared.output)


def _flashinfer_prepared(context):
    """The script's own FlashInfer Prepared (wrapper, plan, output) on the plugin's inputs."""
    spec = registry.spec_of_wrapper(context.api)
    settings = dataclasses.replace(context.settings, impl_kind="flashinfer")
    return spec.prepare(context.case, settings, context.inputs)


# The case's one instance, kept beside its inputs so their id cannot be reused meanwhile.
_ONE_INSTANCE: dict[int, tuple[object, object]] = {}


def one_instance(context):
    """--impl plugin: the script's FlashInfer run(), built once per case for every impl naming
    this plugin, so an A/A times one callable (wrapper, workspace, output) against itself."""
    from fi_attn_bench.backends.impls import PluginRun

    key = id(context.inputs)
    if key not in _ONE_INSTANCE:
        _ONE_INSTANCE.clear()
        _ONE_INSTANCE[key] = (context.inputs, _flashinfer_prepared(context))
    prepared = _ONE_INSTANCE[key][1]
    return PluginRun(run=prepared.run, output=prepared.output)


def spin_auto(context):
    """--impl plugin: run() then the tensor-core spin, or the sleep spin for a case too short
    for the tensor-core spin's fixed cost."""
    return _spin_plugin(context, "auto", (_mma_spin, _sleep_spin))


def spin(context):
    """--impl plugin: run() then the busy spin (see _busy_spin)."""
    return _spin_plugin(context, "busy", (_busy_spin,))


def spin_mma(context):
    """--impl plugin: run() then the tensor-core spin (see _mma_spin)."""
    return _spin_plugin(context, "mma", (_mma_spin,))


def spin_sleep(context):
    """--impl plugin: run() then torch.cuda._sleep, the low-power spin of the first runs."""
    return _spin_plugin(context, "sleep", (_sleep_spin,))
