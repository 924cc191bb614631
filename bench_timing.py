"""How one ``run()`` is timed: timers, L2 flushing, warm-up, adaptive repetitions.

The method, in pseudo-code::

    estimate = warm_up(run)                    # absorbs JIT / first-call costs
    check()                                    # the correctness check (the caller's)
    sustain(run)                               # back-to-back calls: steady-state clocks
    session = timer.open(run, estimate)        # the flush's and the spin's device events
    def loop():                                # one loop, one stop hook
        while True:
            samples += session.batch(calls)    # [spin] event + calls x ([flush] run() event)
            if should_stop(samples, elapsed):  # noise target met after min time, or budget
                break
    session.record(loop)                       # profiler: ONE recording around the whole loop
    samples = session.result()                 # profiler: per-call times from the recording
    return Measurement(samples)                # median -> time_ms; quartiles, noise computed there

The median, not the mean, is reported: a few samples disturbed by clocks, other processes
or the profiler itself must not move the result.  Timers never look for kernel names: the
profiler timer counts every kernel, memset and memcpy one ``run()`` launches, found by
stream order (the count per call is the one that divides the recording evenly), optionally
restricted by a user pattern.  With cold L2 each call follows its own L2 flush, queued
behind a spin so that no call waits for its own launch; the profiler reads a call from the
end of its flush to the end of its last kernel, and no timing event sits between the two
(its record would be timed with the call: ``enqueue_chain``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import re
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple, Protocol, TypeVar

import torch

T = TypeVar("T")

TIMER_NAMES = ("profiler", "cuda_graph", "events")  # GPU timers a user may pick
CPU_TIMER = "wall"
ATTRIBUTIONS = ("auto", "sum", "span", "stream")
STOP_RULES = ("spread", "median_ci")
MEDIAN_CI_FACTOR = 1.57  # McGill notch: 95% interval of a median is +-1.57 IQR / sqrt(n)

FALLBACK_L2_BYTES = 128 * 1024 * 1024  # when the device does not report its L2 size
DEVICE_ACTIVITIES = frozenset(("kernel", "gpu_memset", "gpu_memcpy"))
SIMILAR_WARMUP_FRACTION = 0.15  # two warm-up calls within 15% of each other are "similar"
KERNEL_NAME_LIMIT = 100
SUSTAIN_CHUNK_MS = 10.0  # the sustain phase checks the clock after about this much work
SUSTAIN_STEADY_CHUNKS = 3
# A call whose first kernel started this much later after the work before it than the
# batch's typical call waited for the CPU to launch it: the queue ran dry.
STARVED_GAP_NS = 10_000
STARVED_WARN_FRACTION = 0.01
# Samples spread wider than this (IQR / median, %): the calls ran at different speeds for
# stretches of time, and the median moves between runs (H200, 5 invocations: the 7 cases
# above 5 % in any of them had a CV of time_ms of 1.35-2.7 %; the 59 cases >= 50 us never
# above it, 0.95 % or less; benchmarks/results/h200_validation_v8).
WIDE_SPREAD_NOTE_PCT = 5.0
# Consecutive blocks of a case's samples whose medians tell drift from jitter (non-overlapping
# batch means): a GPU at its power limit runs for stretches at one clock, so neighbouring
# samples are not independent and the interval from all samples alone is too narrow (H200 v8:
# 0.2-0.4 % for a median that moved 1.9 % between runs).  Student's t for DRIFT_BLOCKS - 1
# degrees of freedom.  Reported in a note; it does not decide when to stop (``should_stop``).
DRIFT_BLOCKS = 5
DRIFT_T95 = 2.776


class TimingError(RuntimeError):
    """The timer could not produce a trustworthy sample."""


class NoKernelCaptured(TimingError):
    """The profiler saw no GPU kernel for run(): never report such a case as a time."""


@dataclass(frozen=True)
class TimingOptions:
    """Everything that decides how a case is timed (one value per sweep)."""

    timer: str = "profiler"
    l2: str = "cold"
    kernel_pattern: str | None = None
    # Per-call sample from the profiler: "sum" of kernel durations; "span", first start ->
    # last end; "stream", end of the GPU work before the call (its L2 flush) -> last end: the
    # time the call held the stream, launch gaps between dependent kernels included (H200:
    # 1.4 us before a paged prefill kernel; decode's kernels overlap the flush's tail).
    # "auto" is stream when L2 is cold and sum when warm (back-to-back warm calls of small
    # cases outrun the CPU's launches, so anything but the sum would count host gaps).
    attribution: str = "auto"
    # Noise judged as the median's 95% interval (shrinks with samples, so jittery short
    # kernels stop early) or as the samples' IQR/median (does not shrink with samples).
    stop_rule: str = "median_ci"
    noise_target_pct: float = 1.0
    min_samples: int = 10
    max_time_s: float = 2.0  # per-case budget of the measurement loop (wall clock)
    warmup_min_calls: int = 3
    # The sustain phase that follows holds the clocks steady; warm-up only absorbs JIT and
    # first-call costs and estimates the time per call.
    warmup_min_ms: float = 10.0
    warmup_max_ms: float = 250.0
    batch_target_ms: float = 50.0  # GPU time per batch: how often the stop hook looks
    # Back-to-back calls before timing, so that clocks and power reach the steady state a
    # busy server sees: a GPU fresh from idle runs a compute-bound kernel ~10% faster for
    # the first tens of ms (H200: prefill 4.2 ms vs 4.7 ms sustained, sweep-to-sweep CV 8%).
    sustain_ms: float = 200.0
    # ... ending earlier, after at least sustain_min_ms, once the last SUSTAIN_STEADY_CHUNKS
    # chunks of calls took GPU times within sustain_steady_pct of each other: a GPU that
    # the previous case kept busy is already there.
    sustain_min_ms: float = 50.0
    sustain_steady_pct: float = 1.0
    # The stop hook waits until the timed calls add up to this much GPU time (nvbench's
    # --min-time default, 0.5 s): a long case's samples cost little besides their own GPU
    # time, so it takes more of them (sweep-to-sweep CV of large prefill and MLA) ...
    min_time_ms: float = 500.0
    # ... or until this many samples are in: each costs a flush and its trace reading
    # (~0.1 ms of host time), which a 15 us case would otherwise pay 30,000 times ...
    enough_samples: int = 1000
    # ... for a case whose calls are shorter than this (ms): a longer call's sample costs
    # less host time than GPU time, so it always waits for min_time_ms.  Calls of ~0.2 ms
    # that switch clocks for stretches otherwise stopped after ~200 ms of them, and their
    # median moved with the mix of clocks that window caught (H200 v8, v9: CV 1.0-2.8 %;
    # with the full window, v9 call 3: 0.2-0.4 %, all 61 cases >= 50 us within 1 %).
    enough_samples_below_ms: float = 0.1
    min_batch_calls: int = 10
    max_batch_calls: int = 1000
    graph_target_ms: float = 2.0  # GPU time of one CUDA-graph replay
    max_graph_calls: int = 100
    launch_cover_cycles: int = 200_000  # events + warm L2: GPU spin before each call hides launch
    # Cold L2: a spin kernel ahead of each batch, long enough for the CPU to queue the whole
    # batch before the GPU reaches it, so no timed call waits for its own launch.
    queue_ahead_min_ms: float = 0.05
    queue_ahead_max_ms: float = 20.0
    verbose: bool = False

    @property
    def effective_attribution(self) -> str:
        """The attribution "auto" resolves to for this L2 mode."""
        if self.attribution != "auto":
            return self.attribution
        return "stream" if self.l2 == "cold" else "sum"

    def __post_init__(self):
        if self.attribution not in ATTRIBUTIONS:
            raise ValueError(f"attribution must be one of {', '.join(ATTRIBUTIONS)}")
        if self.stop_rule not in STOP_RULES:
            raise ValueError(f"stop_rule must be one of {', '.join(STOP_RULES)}")
        if self.min_samples < 1 or self.noise_target_pct <= 0 or self.max_time_s <= 0:
            raise ValueError("min_samples >= 1, noise target > 0 and time budget > 0 required")


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    position = (len(sorted_values) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    weight = position - low
    return sorted_values[low] * (1.0 - weight) + sorted_values[high] * weight


@dataclass(frozen=True)
class Measurement:
    """Raw samples of one case (ms per run()) and how they were taken; statistics computed once."""

    samples: tuple[float, ...]
    timer: str
    l2: str
    kernels: tuple[str, ...] = ()
    runs_per_sample: int = 1  # a CUDA-graph sample averages several runs
    per_call: bool = True  # False when some profiler batch fell back to its mean per call
    # GPU time of the timed batches, L2 flushes between calls included (0: not known)
    batch_gpu_ms: float = 0.0
    starved_calls: int = 0  # "stream" samples that include a wait for the CPU (see Batch)

    def __post_init__(self):
        if not self.samples:
            raise TimingError("no timed sample")
        if not all(math.isfinite(s) and s >= 0 for s in self.samples):
            raise TimingError(f"invalid timed samples: {self.samples[:5]}")

    @cached_property
    def _sorted(self) -> tuple[float, ...]:
        return tuple(sorted(self.samples))

    @cached_property
    def median(self) -> float:
        return quantile(self._sorted, 0.5)

    @cached_property
    def min(self) -> float:
        return self._sorted[0]

    @cached_property
    def max(self) -> float:
        return self._sorted[-1]

    @cached_property
    def q1(self) -> float:
        return quantile(self._sorted, 0.25)

    @cached_property
    def q3(self) -> float:
        return quantile(self._sorted, 0.75)

    @property
    def timed_ms(self) -> float:
        """Device (or wall) time spent in the timed runs: the cost side of the sweep."""
        return sum(self.samples) * self.runs_per_sample

    @property
    def starved_fraction(self) -> float:
        return self.starved_calls / len(self.samples)

    @cached_property
    def noise_pct(self) -> float:
        """Interquartile range relative to the median, in percent."""
        if self.median <= 0:
            return math.inf
        return (self.q3 - self.q1) / self.median * 100.0

    @cached_property
    def drift_pct(self) -> float:
        """How far the median of these samples may sit from another run's (``drift_ci_pct``)."""
        return drift_ci_pct(self.samples)

    def columns(self) -> dict[str, object]:
        """The optional CSV columns this measurement fills (median goes to time_ms)."""
        return {
            "samples": len(self.samples),
            "time_min_ms": self.min,
            "time_q1_ms": self.q1,
            "time_q3_ms": self.q3,
            "time_max_ms": self.max,
            "noise_pct": self.noise_pct,
            "drift_pct": self.drift_pct,
            "timer": self.timer,
            "l2": self.l2,
            "kernels": ";".join(self.kernels),
        }


@dataclass(frozen=True)
class Batch:
    """What one batch of timed calls gave: samples in ms and the kernel names counted."""

    samples_ms: tuple[float, ...]
    kernels: frozenset[str] = frozenset()
    per_call: bool = True  # False: one sample per batch (its events could not be split by call)
    gpu_ms: float = 0.0  # GPU time of the batch's calls, their flushes included (0: not known)
    # Calls whose first kernel started more than STARVED_GAP_NS later after the preceding
    # work than the batch's median call: the CPU had not launched them in time, and a
    # "stream" sample counts that wait.  The queue-ahead spin exists to keep this at 0.
    starved: int = 0


class TimerSession(Protocol):
    def batch(self, calls: int) -> Batch: ...


class Timer(Protocol):
    """A timing method; tests inject fakes through this seam."""

    name: str
    l2: str

    def open(self, fn: Callable[[], object], estimate_ms: float) -> TimerSession: ...

    def sync(self) -> None: ...


# ---------------------------------------------------------------- kernel names and events


def _strip_params(name: str) -> str:
    depth = 0
    for index, char in enumerate(name):
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(depth - 1, 0)
        elif char == "(" and depth == 0 and index > 0:
            return name[:index]
    return name


def _collapse_templates(name: str, keep_depth: int) -> str:
    out, depth = [], 0
    for char in name:
        if char == "<":
            depth += 1
            if depth == keep_depth + 1:
                out.append("<…>")
            if depth > keep_depth:
                continue
        elif char == ">":
            depth = max(depth - 1, 0)
            if depth >= keep_depth:
                continue
        elif depth > keep_depth:
            continue
        out.append(char)
    return "".join(out)


def shorten_kernel_name(name: str, limit: int = KERNEL_NAME_LIMIT) -> str:
    """A readable kernel name: no ``void``, no parameter list; long template args collapsed."""
    short = name.strip()
    if short.startswith("void "):
        short = short[5:]
    short = _strip_params(short).strip()
    for keep_depth in (1, 0):
        if len(short) <= limit:
            break
        short = _collapse_templates(short, keep_depth)
    return short.replace("<…><…>", "<…>")


class DeviceEvent(NamedTuple):
    """One GPU activity (kernel, memset or memcpy) on the device timeline.

    A named tuple, not a dataclass: a recording holds one per kernel of every timed call
    (100k+ per sweep), and a tuple is built several times faster."""

    name: str
    start_ns: int
    duration_ns: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


def _start(event: DeviceEvent) -> int:
    return event.start_ns


# kineto activity types that are not GPU work (annotations, API calls, syncs, bookkeeping)
NON_WORK_ACTIVITIES = frozenset(
    (
        "cpu_op",
        "user_annotation",
        "gpu_user_annotation",
        "external_correlation",
        "cuda_runtime",
        "cuda_driver",
        "cpu_instant_event",
        "python_function",
        "overhead",
        "cuda_sync",
        "cuda_profiler_range",
        "privateuse1_runtime",
        "privateuse1_driver",
        "xpu_runtime",
        "mtia_runtime",
        "collective_comm",
    )
)


def _is_other_device_work(event, named: bool) -> bool:
    """Not on the CPU, not an annotation, not a known bookkeeping activity (``named``: the
    build's events name their activity).  The device type is asked first: most events of a
    recording are CPU-side API calls, and each question is a call into C++."""
    if event.device_type() == torch.autograd.DeviceType.CPU:
        return False
    annotation = getattr(event, "is_user_annotation", None)
    if callable(annotation) and annotation():
        return False
    return not named or str(event.activity_type()) not in NON_WORK_ACTIVITIES


def device_events_from_kineto(raw_events: Iterable) -> list[DeviceEvent]:
    """GPU work among kineto events (``prof.profiler.kineto_results.events()``), by start.

    Kernels, memsets and memcpys by activity type; where a build names its activities
    differently (none of those three found) or not at all (torch 2.11's events have no
    ``activity_type``), every non-CPU event that is not an annotation or a known
    bookkeeping activity.  Whether events name their activity is asked once per recording:
    asking each event of torch 2.11 raised and caught an AttributeError twice per event,
    76 us per decode call of the H200's trace reading (``benchmarks/h200_cost_probe.py``).
    """
    raw = list(raw_events)
    named = bool(raw) and hasattr(raw[0], "activity_type")
    work = [e for e in raw if str(e.activity_type()) in DEVICE_ACTIVITIES] if named else []
    if not work:
        work = [e for e in raw if _is_other_device_work(e, named)]
    events = [DeviceEvent(e.name(), e.start_ns(), e.duration_ns()) for e in work]
    events.sort(key=_start)
    return events


def device_events_from_function_events(raw_events: Iterable) -> list[DeviceEvent]:
    """GPU work among ``prof.events()`` (slower; used when kineto results are not exposed)."""
    events = []
    for e in raw_events:
        if e.device_type == torch.autograd.DeviceType.CPU or getattr(
            e, "is_user_annotation", False
        ):
            continue
        start_us = e.time_range.start
        events.append(
            DeviceEvent(e.name, int(start_us * 1000), int(e.time_range.elapsed_us() * 1000))
        )
    return sorted(events, key=_start)


def extract_device_events(prof) -> list[DeviceEvent]:
    """Device events of a finished ``torch.profiler.profile``, sorted by start time."""
    try:
        raw = prof.profiler.kineto_results.events()
    except AttributeError:
        return device_events_from_function_events(prof.events())
    return device_events_from_kineto(raw)


def _counted(events: Iterable[DeviceEvent], pattern: re.Pattern | None) -> list[DeviceEvent]:
    return [e for e in events if pattern is None or pattern.search(e.name)]


def _call_time_ms(
    events: Sequence[DeviceEvent], attribution: str, predecessor_end_ns: int | None = None
) -> float:
    """One call's time; "stream" without a known predecessor falls back to the span."""
    end = max(e.end_ns for e in events)
    if attribution == "stream" and predecessor_end_ns is not None:
        return (end - predecessor_end_ns) / 1e6
    if attribution in ("span", "stream"):
        return (end - min(e.start_ns for e in events)) / 1e6
    return sum(e.duration_ns for e in events) / 1e6


@dataclass(frozen=True)
class Calibration:
    """Device events one run() launches, one L2 flush launches (0 when L2 stays warm) and
    the batch's lead launches (the queue-ahead spin; 0 when the build has none).

    ``call_count`` None: not known yet; a recording of whole batches tells it (see
    ``infer_call_layout``), which spares a profiler session per case.
    """

    call_count: int | None
    flush_count: int = 0
    call_names: frozenset[str] = frozenset()
    flush_names: frozenset[str] = frozenset()
    lead_count: int = 0
    lead_names: frozenset[str] = frozenset()


def attribute_events(
    events: Sequence[DeviceEvent],
    calls: int,
    calibration: Calibration,
    *,
    pattern: re.Pattern | None = None,
    attribution: str = "sum",
) -> Batch:
    """Split a batch's device events into per-call samples by stream order.

    The batch ran [lead] + ``calls`` x ([flush][run()]), so its sorted events are the lead's
    then groups of ``flush_count + call_count``; each call's sample is the time of its
    counted events (for "stream", from the end of the work just before the call).  When
    the count does not divide evenly, the batch gives one sample: the counted time of
    every event that is neither lead nor flush, divided by ``calls``.
    """
    events = sorted(events, key=_start)
    group = calibration.flush_count + calibration.call_count
    lead = len(events) - calls * group
    if group > 0 and lead in (0, calibration.lead_count):
        body = events[lead:]
        lead_ok = not calibration.lead_names or all(
            e.name in calibration.lead_names for e in events[:lead]
        )
        if lead_ok and _aligned(body, group, calibration):
            return _per_call(events[:lead], body, calls, group, calibration, pattern, attribution)
    return _batch_mean(events, calls, calibration, pattern)


def _per_call(lead, body, calls, group, calibration, pattern, attribution) -> Batch:
    samples, names, gaps = [], set(), []
    previous_end = max((e.end_ns for e in lead), default=None)
    for index in range(calls):
        flush = body[index * group : index * group + calibration.flush_count]
        call = body[index * group + calibration.flush_count : (index + 1) * group]
        counted = _counted(call, pattern)
        predecessor = max(e.end_ns for e in flush) if flush else previous_end
        if counted:
            samples.append(_call_time_ms(counted, attribution, predecessor))
            names.update(e.name for e in counted)
            if predecessor is not None:
                gaps.append(min(e.start_ns for e in call) - predecessor)
        previous_end = max(e.end_ns for e in call)
    if not samples:
        raise NoKernelCaptured(_no_kernel_message(body, pattern))
    gpu_ms = (max(e.end_ns for e in body) - min(e.start_ns for e in body)) / 1e6
    starved = count_starved(gaps) if attribution == "stream" else 0
    return Batch(tuple(samples), frozenset(names), gpu_ms=gpu_ms, starved=starved)


def count_starved(gaps_ns: Sequence[int]) -> int:
    """Calls that waited for their launch: a gap between the preceding work's end and the
    call's first kernel longer than the median gap by more than ``STARVED_GAP_NS``."""
    if not gaps_ns:
        return 0
    limit = quantile(sorted(gaps_ns), 0.5) + STARVED_GAP_NS
    return sum(gap > limit for gap in gaps_ns)


def _aligned(events: Sequence[DeviceEvent], group: int, calibration: Calibration) -> bool:
    """Each group starts with the flush's kernels and continues with run()'s, by name."""
    for start in range(0, len(events), group):
        flush = events[start : start + calibration.flush_count]
        call = events[start + calibration.flush_count : start + group]
        if calibration.flush_names and any(e.name not in calibration.flush_names for e in flush):
            return False
        if calibration.call_names and any(e.name not in calibration.call_names for e in call):
            return False
    return True


def _batch_mean(
    events: Sequence[DeviceEvent], calls: int, calibration: Calibration, pattern
) -> Batch:
    flush_only = (calibration.flush_names | calibration.lead_names) - calibration.call_names
    if calibration.flush_count and not (calibration.flush_names - calibration.call_names):
        raise TimingError(
            f"cannot attribute {len(events)} device events to {calls} calls: the L2 flush and "
            "run() launch kernels of the same name; use --l2 warm or --timer events"
        )
    counted = _counted((e for e in events if e.name not in flush_only), pattern)
    if not counted:
        raise NoKernelCaptured(_no_kernel_message(events, pattern))
    total_ms = sum(e.duration_ns for e in counted) / 1e6
    return Batch((total_ms / calls,), frozenset(e.name for e in counted), per_call=False)


def _no_kernel_message(events: Sequence[DeviceEvent], pattern: re.Pattern | None) -> str:
    if pattern is None or not events:
        return "the profiler captured no GPU kernel for run()"
    seen = sorted({shorten_kernel_name(e.name) for e in events})
    return (
        f"no kernel matched --kernel-pattern {pattern.pattern!r}; kernels seen: {'; '.join(seen)}"
    )


# ---------------------------------------------------------------- L2 flush


def l2_flush_bytes(properties) -> tuple[int, str]:
    """Size of the L2 flush buffer (2x L2) and where the L2 size came from."""
    l2 = int(getattr(properties, "L2_cache_size", 0) or 0)
    if l2 > 0:
        return (
            2 * l2,
            f"L2 flush buffer {2 * l2 / 2**20:.0f} MiB (2 x reported L2 {l2 / 2**20:.1f} MiB)",
        )
    return 2 * FALLBACK_L2_BYTES, (
        f"device reports no L2 size; L2 flush buffer {2 * FALLBACK_L2_BYTES / 2**20:.0f} MiB "
        f"(2 x assumed {FALLBACK_L2_BYTES / 2**20:.0f} MiB)"
    )


class L2Flusher:
    """Evicts the L2 by writing a buffer twice its size (allocated on first use).

    Write only, a new byte value each time (41 us on the H200), not read and write
    (``bitwise_not_``, 79 us; harness 0.2 and earlier): both leave the L2 full of the
    buffer's dirty lines, so run() meets the same cache either way, and the flush is most
    of the GPU time a short case's sample costs.  The read+write flush was chosen when the
    smallest decode cases outran the CPU's launches behind the shorter flush
    (``benchmarks/results/h200_validation_v4``); the queue-ahead spin ahead of each batch
    has kept the queue full since.
    """

    def __init__(self, device: torch.device, log: Callable[[str], None] = lambda _: None):
        self.device = device
        self._log = log
        self._buffer: torch.Tensor | None = None
        self._duration_ms: float | None = None
        self._value = 0

    def duration_ms(self) -> float:
        """GPU time of one flush (measured once with CUDA events)."""
        if self._duration_ms is None:
            self.flush()
            self._duration_ms = statistics.median(_event_times(self.flush, 5))
        return self._duration_ms

    def flush(self) -> None:
        if self._buffer is None:
            size, note = l2_flush_bytes(torch.cuda.get_device_properties(self.device))
            self._log(note)
            self._buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        self._value = (self._value + 1) % 256  # every line rewritten, never with what it held
        self._buffer.fill_(self._value)


# ---------------------------------------------------------------- timers


def _cuda_sync(device: torch.device) -> Callable[[], None]:
    return lambda: torch.cuda.synchronize(device)


def _event_times(body: Callable[[], object], repeats: int) -> list[float]:
    """ms of ``body`` between a CUDA event pair, ``repeats`` times (synchronizes)."""
    pairs = enqueue_calls(body, repeats)
    torch.cuda.synchronize()
    return _elapsed(pairs)


def _elapsed(pairs) -> tuple[float, ...]:
    return tuple(start.elapsed_time(end) for start, end in pairs)


def spin_cycles_per_ms(cycles: int = 2_000_000) -> float:
    """GPU cycles per ms of ``torch.cuda._sleep`` (the spin kernel): one warm-up spin, then
    the median of three event-timed spins of ``cycles``.  Raises where the build lacks it."""
    spin = lambda: torch.cuda._sleep(cycles)  # noqa: E731
    spin()
    ms = statistics.median(_event_times(spin, 3))
    return cycles / max(ms, 1e-6)


class QueueAhead:
    """A spin kernel ahead of a batch that holds the GPU while the CPU queues the batch
    (nvbench's blocking kernel), so that no timed call waits for its own launch.

    It spins for the CPU's expected lead over the GPU: ``calls`` x (host time per call -
    GPU time per call), measured on the previous batch (the warm-up's estimate before the
    first), plus the first call's own launch, counted twice (the first launch after a
    synchronize is the slowest: with the lead alone, the first call of every batch of a
    millisecond-long case started late on the H200), plus a small floor.  Builds without
    ``torch.cuda._sleep`` get no spin.
    """

    def __init__(self, options: TimingOptions):
        self.options = options
        self.available = hasattr(torch.cuda, "_sleep")
        self.host_ms_per_call: float | None = None
        self._cycles_per_ms: float | None = None
        self.events = EventPool()

    def spin_ms(self, calls: int, gpu_ms_per_call: float, fallback_host_ms: float) -> float:
        host = self.host_ms_per_call if self.host_ms_per_call is not None else fallback_host_ms
        lead = calls * max(host - gpu_ms_per_call, 0.0) + 2.0 * host
        lead += self.options.queue_ahead_min_ms
        return min(lead, self.options.queue_ahead_max_ms)

    def prepare(self) -> bool:
        """Measure the spin kernel's cycles per ms once; False when there is no usable spin."""
        if self.available and self._cycles_per_ms is None:
            try:
                self._cycles_per_ms = spin_cycles_per_ms()
            except Exception:  # noqa: BLE001 - a build whose spin kernel fails: time without it
                self.available = False
        return self.available

    def hold(self, calls: int, gpu_ms_per_call: float, fallback_host_ms: float) -> None:
        if self.prepare():
            ms = self.spin_ms(calls, gpu_ms_per_call, fallback_host_ms)
            torch.cuda._sleep(max(1, int(ms * self._cycles_per_ms)))

    def spin(self, cycles: int) -> None:
        """A spin of ``cycles`` when the build has a working spin kernel."""
        if self.available:
            try:
                torch.cuda._sleep(cycles)
            except Exception:  # noqa: BLE001 - a build without the spin kernel: time without it
                self.available = False

    def batch(
        self,
        fn: Callable[[], object],
        calls: int,
        before: Callable[[], object] | None,
        gpu_ms_per_call: float,
        fallback_host_ms: float,
        chain: bool = False,
    ) -> list[tuple[object, object]]:
        """Spin, queue the calls (``enqueue_chain`` when ``chain``, else ``enqueue_calls``),
        remember the CPU's time per call."""
        self.hold(calls, gpu_ms_per_call, fallback_host_ms)
        started = time.perf_counter()
        enqueue = enqueue_chain if chain else enqueue_calls
        pairs = enqueue(fn, calls, before, self.events)
        self.host_ms_per_call = (time.perf_counter() - started) * 1e3 / max(calls, 1)
        return pairs


class EventPool:
    """Timing events kept for the next batch (a batch's pairs are read before the next is
    queued): creating two events for every timed call costs host time on every call."""

    def __init__(self):
        self._pairs: list[tuple[object, object]] = []

    def take(self, count: int) -> list[tuple[object, object]]:
        while len(self._pairs) < count:
            self._pairs.append(
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
            )
        return self._pairs[:count]

    def chain(self, count: int) -> list[object]:
        """``count + 1`` events for a chain of ``count`` calls (see ``enqueue_chain``)."""
        pairs = self.take((count + 2) // 2)
        return [event for pair in pairs for event in pair][: count + 1]


def enqueue_calls(
    fn: Callable[[], object],
    calls: int,
    before: Callable[[], object] | None = None,
    pool: EventPool | None = None,
) -> list[tuple[object, object]]:
    """Queue ``calls`` x ([before] [start event] fn() [end event]); the event pairs.

    With the L2 flush as ``before``, the events timer's cold-L2 sequence: what CUDA events
    with a flush before each call read, the start event's own record included (see
    ``enqueue_chain``).  Events come from ``pool`` when given (read them before reusing it).
    """
    pairs = (pool or EventPool()).take(calls)
    for start, end in pairs:
        if before is not None:
            before()
        start.record()
        fn()
        end.record()
    return pairs


def enqueue_chain(
    fn: Callable[[], object],
    calls: int,
    before: Callable[[], object] | None = None,
    pool: EventPool | None = None,
) -> list[tuple[object, object]]:
    """Queue event + ``calls`` x ([before] fn() event); the pairs of consecutive events,
    each around one [before] fn().

    No event sits between ``before`` (the L2 flush) and fn(): the GPU front end spends
    3.2-3.8 us on an event record there before run()'s first kernel starts (H200, a
    different amount on each stream), a quarter of a 13 us decode case and the source of
    its between-process jumps (``benchmarks/results/h200_validation_v6``).  The profiler
    reads run()'s time off its kernels, so it times this sequence; the pairs only steer
    the stop hook.
    """
    events = (pool or EventPool()).chain(calls)
    events[0].record()
    for event in events[1:]:
        if before is not None:
            before()
        fn()
        event.record()
    return list(zip(events[:-1], events[1:], strict=True))


def _queued_samples(
    session, calls: int, before: Callable[[], object] | None, chain: bool = False
) -> tuple[float, ...]:
    """One queued batch of a session (``timer``, ``fn``, ``estimate_ms``, ``flush_ms``,
    ``run_ms``): spin, queue, synchronize, read the event pairs; the median is kept to
    size the next batch's spin.  ``chain``: the pairs also hold ``before`` (the flush),
    whose calibrated time comes off each sample."""
    timer = session.timer
    gpu_ms = session.flush_ms + session.run_ms
    pairs = timer.queue.batch(session.fn, calls, before, gpu_ms, session.estimate_ms, chain)
    timer.sync()
    samples = _elapsed(pairs)
    if chain and before is not None:
        samples = tuple(max(sample - session.flush_ms, 0.0) for sample in samples)
    session.run_ms = statistics.median(samples) if samples else 0.0
    return samples


class WallTimer:
    """CPU device: perf_counter around each call (no kernels, no L2 control)."""

    name = CPU_TIMER
    l2 = "warm"

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self._clock = clock

    def sync(self) -> None:
        return None

    def open(self, fn, estimate_ms):
        return _WallSession(fn, self._clock)


@dataclass
class _WallSession:
    fn: Callable[[], object]
    clock: Callable[[], float]

    def batch(self, calls: int) -> Batch:
        samples = []
        for _ in range(calls):
            start = self.clock()
            self.fn()
            samples.append((self.clock() - start) * 1e3)
        return Batch(tuple(samples))


class EventsTimer:
    """A CUDA event pair around each call.

    Cold L2: the batch is [queue-ahead spin] + calls x [flush, start, run(), end]; each
    sample includes the start event's record (1.4-4 us on the H200, see ``enqueue_chain``),
    which the profiler's samples do not.  Warm L2: a short GPU spin precedes each call so
    that the start event is not recorded while the GPU waits for the CPU to launch run().
    """

    name = "events"

    def __init__(self, options: TimingOptions, device: torch.device, flusher: L2Flusher):
        self.options, self.device, self.flusher = options, device, flusher
        self.l2 = options.l2
        self.sync = _cuda_sync(device)
        self.queue = QueueAhead(options)

    def _cover_launch(self) -> None:
        self.queue.spin(self.options.launch_cover_cycles)

    def set_up(self) -> None:
        """The flush buffer and its duration, once per timer (see ``measure``)."""
        if self.l2 == "cold":
            self.flusher.duration_ms()

    def open(self, fn, estimate_ms):
        flush_ms = self.flusher.duration_ms() if self.l2 == "cold" else 0.0
        return _EventsSession(self, fn, estimate_ms, flush_ms)


@dataclass
class _EventsSession:
    timer: EventsTimer
    fn: Callable[[], object]
    estimate_ms: float
    flush_ms: float
    run_ms: float = 0.0  # median of the last batch

    def batch(self, calls: int) -> Batch:
        timer = self.timer
        if timer.l2 == "cold":
            samples = _queued_samples(self, calls, timer.flusher.flush)
        else:
            pairs = enqueue_calls(self.fn, calls, timer._cover_launch, timer.queue.events)
            timer.sync()
            samples = _elapsed(pairs)
        return Batch(samples, gpu_ms=sum(samples) + calls * self.flush_ms)


class CudaGraphTimer:
    """Replays a CUDA graph of K run() calls; sample = replay time / K (warm L2 only)."""

    name = "cuda_graph"
    l2 = "warm"

    def __init__(self, options: TimingOptions, device: torch.device):
        self.options, self.device = options, device
        self.sync = _cuda_sync(device)

    def open(self, fn, estimate_ms):
        calls = _clamp(
            math.ceil(self.options.graph_target_ms / max(estimate_ms, 1e-6)),
            1,
            self.options.max_graph_calls,
        )
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            fn()
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                for _ in range(calls):
                    fn()
        except Exception as exc:
            raise TimingError(
                f"CUDA graph capture of run() failed: {type(exc).__name__}: {exc}"
            ) from exc
        graph.replay()
        self.sync()
        return _GraphSession(self, graph, calls)


@dataclass
class _GraphSession:
    timer: CudaGraphTimer
    graph: object
    calls_per_replay: int
    events: EventPool = field(default_factory=EventPool)

    @property
    def runs_per_sample(self) -> int:
        return self.calls_per_replay

    def batch(self, calls: int) -> Batch:
        pairs = enqueue_calls(self.graph.replay, calls, pool=self.events)
        self.timer.sync()
        replays = _elapsed(pairs)
        return Batch(tuple(r / self.calls_per_replay for r in replays), gpu_ms=sum(replays))


def profile_device_events(body: Callable[[], None], sync: Callable[[], None]) -> list[DeviceEvent]:
    """Run ``body`` under the torch profiler (device activity only) and return its GPU work."""
    from torch.profiler import ProfilerActivity, profile

    sync()  # nothing launched earlier may still run when the profiler starts
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        body()
        sync()
    return extract_device_events(prof)


class ProfilerTimer:
    """torch.profiler around a batch of calls; every kernel/memset/memcpy of run() counted."""

    name = "profiler"

    def __init__(
        self,
        options: TimingOptions,
        device: torch.device,
        flusher: L2Flusher,
        profile: Callable[..., list[DeviceEvent]] = profile_device_events,
    ):
        self.options, self.device, self.flusher = options, device, flusher
        self.l2 = options.l2
        self.sync = _cuda_sync(device)
        self._profile = profile
        self._pattern = re.compile(options.kernel_pattern) if options.kernel_pattern else None
        self.queue = QueueAhead(options)
        self._flush_events: list[DeviceEvent] | None = None
        self._lead_events: list[DeviceEvent] | None = None

    def _flush_calibration(self) -> list[DeviceEvent]:
        if self.l2 != "cold":
            return []
        if self._flush_events is None:  # the same buffer every case: calibrate once
            self.flusher.flush()
            self._flush_events = self._profile(self.flusher.flush, self.sync)
        return self._flush_events

    def _lead_calibration(self) -> list[DeviceEvent]:
        """What the queue-ahead spin launches (nothing when the build has no spin)."""
        if self._lead_events is None:
            self._lead_events = []
            if self.queue.prepare():
                self._lead_events = self._profile(lambda: self.queue.hold(1, 0.0, 0.0), self.sync)
        return self._lead_events

    def set_up(self) -> None:
        """The spin's and the flush's calibration profiles, once per timer: the first profiler
        session of a process took about 5 s on the H200 (see ``measure``)."""
        self._lead_calibration()
        self._flush_calibration()

    def open(self, fn, estimate_ms):
        """A session for one case.  run()'s own event count comes from the case's recording
        (``infer_call_layout``), not from a profiler session of its own, one profiler
        start and stop less per case."""
        lead = self._lead_calibration()
        flush = self._flush_calibration()
        if self.l2 == "cold" and not flush:
            raise NoKernelCaptured(
                "the profiler captured no GPU kernel of the L2 flush, so it cannot tell the "
                "flush's work from run()'s (is the device profiler usable on "
                f"{self.device}? --timer events does not need it; --l2 warm needs no flush)"
            )
        calibration = Calibration(
            call_count=None,
            flush_count=len(flush),
            flush_names=frozenset(e.name for e in flush),
            lead_count=len(lead),
            lead_names=frozenset(e.name for e in lead),
        )
        flush_ms = sum(e.duration_ns for e in flush) / 1e6
        return _ProfilerSession(self, fn, calibration, estimate_ms, flush_ms)


@dataclass
class _ProfilerSession:
    """One profiler recording around the whole measurement loop of a case.

    Every batch runs a chain of calls with an event after each (``enqueue_chain``), so the
    stop hook judges provisional times as the batches come; when the loop ends, the
    recording is split by stream order into per-call profiler samples, which replace the
    provisional ones.  One recording per
    case, not one per batch: each profiler start/stop left the GPU idle for tens of ms,
    and a GPU that idles half the time runs compute-bound kernels faster (cooler, less
    power-capped) than one under the steady load the events reference sees.
    """

    timer: ProfilerTimer
    fn: Callable[[], object]
    calibration: Calibration
    estimate_ms: float
    flush_ms: float
    run_ms: float = 0.0  # median of the last batch
    calls: list[int] = field(default_factory=list)
    events: list[DeviceEvent] = field(default_factory=list)

    def record(self, loop: Callable[[], None]) -> None:
        """Run the measurement loop under the profiler."""
        self.events = self.timer._profile(loop, self.timer.sync)

    def batch(self, calls: int) -> Batch:
        """[queue-ahead spin] + event + calls x ([flush] run() event): provisional samples."""
        timer = self.timer
        flush = timer.flusher.flush if timer.l2 == "cold" else None
        samples = _queued_samples(self, calls, flush, chain=True)
        self.calls.append(calls)
        return Batch(samples)

    def result(self) -> list[Batch]:
        """The recording's per-call samples, batch by batch."""
        return attribute_recording(
            self.events,
            self.calls,
            self.calibration,
            pattern=self.timer._pattern,
            attribution=self.timer.options.effective_attribution,
        )


def infer_call_layout(
    events: Sequence[DeviceEvent], calls: Sequence[int], calibration: Calibration
) -> Calibration | None:
    """The calibration completed with run()'s event count and names, from a recording of
    batches ``calls`` (each [lead] + calls x ([flush] run())), sorted by start.

    The count is the one that divides the recording evenly, with or without the leads,
    and its names are the first call's; None when no count >= 1 fits.
    """
    total = sum(calls)
    for lead in dict.fromkeys((calibration.lead_count, 0)):
        body = len(events) - lead * len(calls)
        if total <= 0 or body <= 0 or body % total:
            continue
        count = body // total - calibration.flush_count
        if count >= 1:
            first = events[lead + calibration.flush_count : lead + calibration.flush_count + count]
            names = frozenset(e.name for e in first)
            return dataclasses.replace(calibration, call_count=count, call_names=names)
    return None


def attribute_recording(
    events: Sequence[DeviceEvent],
    calls: Sequence[int],
    calibration: Calibration,
    *,
    pattern: re.Pattern | None = None,
    attribution: str = "sum",
) -> list[Batch]:
    """Split one recording of several batches (each [lead] + calls x group) into batches.

    When the event count fits neither with nor without the leads, the whole recording
    gives one mean sample (see ``attribute_events``).
    """
    events = sorted(events, key=_start)
    if calibration.call_count is None:
        inferred = infer_call_layout(events, calls, calibration)
        if inferred is None:
            return [_batch_mean(events, sum(calls), calibration, pattern)]
        calibration = inferred
    group = calibration.flush_count + calibration.call_count
    body = sum(calls) * group
    for lead in dict.fromkeys((calibration.lead_count, 0)):
        if len(events) == body + lead * len(calls):
            batches, position = [], 0
            for count in calls:
                size = lead + count * group
                chunk = events[position : position + size]
                batches.append(
                    attribute_events(
                        chunk, count, calibration, pattern=pattern, attribution=attribution
                    )
                )
                position += size
            return batches
    return [
        attribute_events(events, sum(calls), calibration, pattern=pattern, attribution=attribution)
    ]


def make_timer(options: TimingOptions, device: torch.device, log: Callable[[str], None]) -> Timer:
    """The timer named by ``options`` for ``device`` (wall clock on a CPU device)."""
    if device.type == "cpu":
        return WallTimer()
    flusher = L2Flusher(device, log)
    if options.timer == "profiler":
        return ProfilerTimer(options, device, flusher)
    if options.timer == "events":
        return EventsTimer(options, device, flusher)
    if options.timer == "cuda_graph":
        return CudaGraphTimer(options, device)
    raise ValueError(f"unknown timer {options.timer!r}")


# ---------------------------------------------------------------- warm-up and the loop


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def warm_up(
    fn: Callable[[], object],
    sync: Callable[[], None],
    options: TimingOptions,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Call run() until warm; return the estimated wall ms per synchronized call.

    At least ``warmup_min_calls`` calls and ``warmup_min_ms`` after the first call (JIT),
    ending when two consecutive calls take similar time, or after ``warmup_max_ms``.
    """
    start = clock()
    fn()
    sync()
    first_done = clock()
    times: list[float] = [(first_done - start) * 1e3]
    while True:
        before = clock()
        fn()
        sync()
        after = clock()
        times.append((after - before) * 1e3)
        since_first = (after - first_done) * 1e3
        similar = abs(times[-1] - times[-2]) <= SIMILAR_WARMUP_FRACTION * max(times[-2], 1e-9)
        enough = len(times) >= options.warmup_min_calls and since_first >= options.warmup_min_ms
        if (enough and similar) or since_first >= options.warmup_max_ms:
            return sorted(times[-3:])[len(times[-3:]) // 2]


def stop_noise_pct(samples: Sequence[float], rule: str = "spread") -> float:
    """Noise the stop hook compares with its target, in % of the median.

    ``spread``: IQR / median (what ``noise_pct`` reports; per-call jitter does not shrink
    with more samples).  ``median_ci``: half-width of the median's 95% interval,
    1.57 IQR / sqrt(n) / median, which does shrink: jittery short kernels stop early.
    """
    ordered = sorted(samples)
    median = quantile(ordered, 0.5)
    if median <= 0:
        return math.inf
    spread = (quantile(ordered, 0.75) - quantile(ordered, 0.25)) / median * 100.0
    if rule == "median_ci":
        return MEDIAN_CI_FACTOR * spread / math.sqrt(len(ordered))
    return spread


def drift_ci_pct(samples: Sequence[float], blocks: int = DRIFT_BLOCKS) -> float:
    """Half-width of the median's 95% interval judged from ``blocks`` consecutive blocks of
    the samples (in the order they were taken), in % of the median: t x stdev(block
    medians) / sqrt(blocks).  Jitter between single calls hardly moves the block medians;
    stretches at another clock do, which is what makes a median move between runs.  NaN
    when there are fewer samples than blocks: nothing to judge by."""
    size = len(samples) // blocks
    if size < 1:
        return math.nan
    medians = [statistics.median(samples[i * size : (i + 1) * size]) for i in range(blocks)]
    median = statistics.median(samples)
    if median <= 0:
        return math.inf
    return DRIFT_T95 * statistics.stdev(medians) / math.sqrt(blocks) / median * 100.0


def should_stop(
    samples: Sequence[float], elapsed_s: float, options: TimingOptions, runs_per_sample: int = 1
) -> bool:
    """The stop hook: the time budget spent, or the noise target met with at least
    ``min_samples``, once the samples add up to ``min_time_ms`` of timed GPU time or (calls
    shorter than ``enough_samples_below_ms``) number ``enough_samples``, whichever first.

    The blocks' interval (``drift_ci_pct``) does not decide: sampling on while the blocks
    disagreed followed the GPU into its slower clock state (H200 v9, harness 0.5.0: five
    decode and ragged cases that sampled on read 2-4 % slower than in the invocations where
    they stopped at the usual window, and 6 of 61 cases >= 50 us had a CV above 1 %).  It is
    reported instead (``Measurement.drift_pct``: the row, and the wide-spread note)."""
    if not samples:
        return False
    if elapsed_s >= options.max_time_s:
        return True
    if len(samples) < options.min_samples:
        return False
    timed_ms = sum(samples) * runs_per_sample
    if timed_ms < options.min_time_ms and not _enough_samples(samples, options):
        return False
    return stop_noise_pct(samples, options.stop_rule) <= options.noise_target_pct


def _enough_samples(samples: Sequence[float], options: TimingOptions) -> bool:
    """``enough_samples`` in, for a case whose calls are short enough that their samples
    cost more host time than GPU time (``enough_samples_below_ms``)."""
    if len(samples) < options.enough_samples:
        return False
    return statistics.median(samples) < options.enough_samples_below_ms


def batch_calls(
    per_call_ms: float, remaining_s: float, wall_ms: float, options: TimingOptions
) -> int:
    """Calls in the next batch: enough GPU time to amortize the timer, within the budget."""
    wanted = math.ceil(options.batch_target_ms / max(per_call_ms, 1e-6))
    wanted = _clamp(wanted, options.min_batch_calls, options.max_batch_calls)
    affordable = max(1, int(remaining_s * 1e3 / max(wall_ms, 1e-6)))
    return min(wanted, affordable)


@dataclass
class MeasureLoop:
    """One measurement loop with a stop hook (tests swap ``clock`` and the timer)."""

    options: TimingOptions
    clock: Callable[[], float] = time.perf_counter
    stop: Callable[[Sequence[float], float, TimingOptions, int], bool] = should_stop
    batches: list[int] = field(default_factory=list)  # calls per batch, for inspection
    # "timing": the loop itself; "readout": the rest (profiler start, stop and trace reading)
    phases: PhaseClock = field(default_factory=lambda: PhaseClock())  # defined below

    def run(self, session: TimerSession, estimate_ms: float, timer: Timer) -> Measurement:
        samples: list[float] = []  # what the stop hook sees
        start = self.clock()
        runs = getattr(session, "runs_per_sample", 1)  # a CUDA-graph sample replays several runs
        batches: list[Batch] = []
        looped = [start, start]  # when the loop body began and ended

        def loop() -> None:
            looped[0] = self.clock()
            try:
                sample_until_stop()
            finally:
                looped[1] = self.clock()

        def sample_until_stop() -> None:
            per_call = estimate_ms
            while True:
                remaining = self.options.max_time_s - (self.clock() - start)
                calls = batch_calls(per_call * runs, remaining, estimate_ms * runs, self.options)
                self.batches.append(calls)
                batch = session.batch(calls)
                batches.append(batch)
                samples.extend(batch.samples_ms)
                if self.stop(samples, self.clock() - start, self.options, runs):
                    break
                per_call = max(quantile(sorted(samples), 0.5), 1e-6)

        with gc_paused():
            if hasattr(session, "record"):  # a timer that records the whole loop
                session.record(loop)
                batches = session.result()
            else:
                loop()
        body = looped[1] - looped[0]
        self.phases.add("timing", body)
        self.phases.add("readout", self.clock() - start - body)
        return _measurement(batches, timer, runs)


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection inside: a full collection of a process holding torch
    takes 0.1-0.2 s, which would stall the queue of calls or the trace reading (timeit
    disables it for the same reason).  Refcounting still frees almost everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _measurement(batches: Sequence[Batch], timer: Timer, runs: int) -> Measurement:
    samples = tuple(sample for batch in batches for sample in batch.samples_ms)
    kernels = {name for batch in batches for name in batch.kernels}
    names = tuple(sorted({shorten_kernel_name(k) for k in kernels}))
    split = all(batch.per_call for batch in batches)
    gpu_ms = sum(batch.gpu_ms for batch in batches)
    starved = sum(batch.starved for batch in batches)
    return Measurement(samples, timer.name, timer.l2, names, runs, split, gpu_ms, starved)


def is_steady(chunk_ms: Sequence[float], elapsed_ms: float, options: TimingOptions) -> bool:
    """Sustained long enough: ``sustain_ms`` spent, or ``sustain_min_ms`` spent and the
    last chunks' GPU times agree within ``sustain_steady_pct`` (clocks settled)."""
    if elapsed_ms >= options.sustain_ms:
        return True
    last = sorted(chunk_ms[-SUSTAIN_STEADY_CHUNKS:])
    if elapsed_ms < options.sustain_min_ms or len(last) < SUSTAIN_STEADY_CHUNKS:
        return False
    return last[-1] - last[0] <= options.sustain_steady_pct / 100.0 * quantile(last, 0.5)


def sustain(
    fn: Callable[[], object],
    timer: Timer,
    options: TimingOptions,
    estimate_ms: float,
    clock: Callable[[], float] = time.perf_counter,
) -> int:
    """Keep the GPU busy with back-to-back calls (L2 flushes included when cold) until
    ``is_steady``, so timing starts at steady-state clocks; a no-op on the CPU.  Chunks of
    about ``SUSTAIN_CHUNK_MS`` of calls between a CUDA event pair, synchronized.  Returns
    the number of chunks run."""
    if timer.name == CPU_TIMER or options.sustain_ms <= 0:
        return 0
    flusher = getattr(timer, "flusher", None) if timer.l2 == "cold" else None
    chunk = _clamp(math.ceil(SUSTAIN_CHUNK_MS / max(estimate_ms, 1e-3)), 1, 1000)
    started = clock()
    chunk_ms: list[float] = []
    while True:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(chunk):
            if flusher is not None:
                flusher.flush()
            fn()
        end.record()
        timer.sync()
        chunk_ms.append(begin.elapsed_time(end))
        if is_steady(chunk_ms, (clock() - started) * 1e3, options):
            return len(chunk_ms)


@dataclass
class PhaseClock:
    """Wall seconds per phase of a sweep (prepare, set-up, warm-up, check, sustain,
    calibrate, timing, readout), so the sweep can say where its time went."""

    seconds: dict[str, float] = field(default_factory=dict)
    clock: Callable[[], float] = time.perf_counter

    def run(self, phase: str, body: Callable[[], T]) -> T:
        started = self.clock()
        try:
            return body()
        finally:
            self.add(phase, self.clock() - started)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def describe(self) -> str:
        return ", ".join(f"{name} {value:.1f} s" for name, value in self.seconds.items())


def measure(
    fn: Callable[[], object],
    timer: Timer,
    options: TimingOptions,
    clock: Callable[[], float] = time.perf_counter,
    after_warm_up: Callable[[], object] = lambda: None,
    phases: PhaseClock | None = None,
) -> Measurement:
    """Set the timer up, warm up, run ``after_warm_up`` (the correctness check), hold the GPU
    at steady state, open the timer, sample until the stop hook.

    The timer's one-time set-up comes first: done between sustain and timing, the first
    profiler session's seconds of host work would leave the first case's GPU idle, fresh
    from idle when its timing starts."""
    phases = phases or PhaseClock(clock=clock)
    phases.run("set-up", getattr(timer, "set_up", lambda: None))
    estimate = phases.run("warm-up", lambda: warm_up(fn, timer.sync, options, clock))
    phases.run("check", after_warm_up)
    phases.run("sustain", lambda: sustain(fn, timer, options, estimate, clock))

    session = phases.run("calibrate", lambda: timer.open(fn, estimate))
    return MeasureLoop(options, clock, phases=phases).run(session, estimate, timer)
