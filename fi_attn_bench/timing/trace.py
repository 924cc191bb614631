"""Profiler device events and their attribution to calls: every kernel, memset and copy a call launches, whatever its name."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

from fi_attn_bench.timing.options import NoKernelCaptured, TimingError
from fi_attn_bench.timing.statistics import Batch, quantile

DEVICE_ACTIVITIES = frozenset(("kernel", "gpu_memset", "gpu_memcpy"))


KERNEL_NAME_LIMIT = 100


# A call whose first kernel started this much later after the work before it than the
# batch's typical call waited for the CPU to launch it: the queue ran dry.
STARVED_GAP_NS = 10_000


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
    bookkeeping activity.  Whether events name their activity is asked once per recording,
    because asking each event costs two caught AttributeErrors per event.
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


def profile_device_events(body: Callable[[], None], sync: Callable[[], None]) -> list[DeviceEvent]:
    """Run ``body`` under the torch profiler (device activity only) and return its GPU work."""
    from torch.profiler import ProfilerActivity, profile

    sync()  # nothing launched earlier may still run when the profiler starts
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        body()
        sync()
    return extract_device_events(prof)


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


def split_rounds(
    events: Sequence[DeviceEvent],
    order: Sequence[int],
    calls: Sequence[Sequence[int]],
    calibrations: Sequence[Calibration],
    *,
    pattern: re.Pattern | None = None,
    attribution: str = "sum",
) -> list[list[Batch]]:
    """Split one recording of interleaved rounds into each implementation's batches.

    Batch ``b`` of the recording belongs to implementation ``order[b]`` and holds [lead] +
    calls x ([flush] run()) with that implementation's calibrated event count (known:
    ``call_count`` set), the calls taken in turn from ``calls[order[b]]``.  Raises
    TimingError when the recording's event count fits neither with nor without the leads.
    """
    events = sorted(events, key=_start)
    taken = [iter(counts) for counts in calls]
    layout = [(index, next(taken[index])) for index in order]
    body = sum(
        count * (calibrations[i].flush_count + calibrations[i].call_count) for i, count in layout
    )
    for lead in dict.fromkeys((calibrations[0].lead_count, 0)):
        if len(events) != body + lead * len(layout):
            continue
        found: list[list[Batch]] = [[] for _ in calls]
        position = 0
        for index, count in layout:
            calibration = calibrations[index]
            size = lead + count * (calibration.flush_count + calibration.call_count)
            chunk = events[position : position + size]
            found[index].append(
                attribute_events(
                    chunk, count, calibration, pattern=pattern, attribution=attribution
                )
            )
            position += size
        return found
    raise TimingError(
        f"the recording of the interleaved rounds holds {len(events)} device events, not the "
        f"{body} (+ leads) that the implementations' calibrated calls add up to (does a run() "
        "launch a varying number of kernels?); --timer events does not need the split"
    )
