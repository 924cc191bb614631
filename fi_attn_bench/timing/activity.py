"""Which CUPTI records belong to which timed call (pure: tested with stand-in records).

The harness launches a marker (``device.cupti.MemsetMarker``: a memset of ``MARKER_BYTES``
whose value counts up) before each timed call, ahead of its L2 flush, and one closing each
batch, numbered in launch order.  A record belongs to call ``i`` when its correlation id (its
launch's number) lies between call ``i``'s marker and the next, past the flush's records:
every kernel, memset and memcpy the call launched, on any stream, whenever the GPU ran it.
The GPU thus runs flush -> run() back to back, as under the profiler timer, and the
queue-ahead spin, launched before a batch's first marker, belongs to no call.  Records
of another device or context (another process's, under a shared tracer) are left out.
Anything that does not add up (a marker missing or out of order, a call without work, calls
launching differing work) raises ``TimingError`` naming it: never a guessed time.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass

from fi_attn_bench.device.cupti import MARKER_BYTES, MEMSET, ActivityRecord
from fi_attn_bench.timing.options import NoKernelCaptured, TimingError
from fi_attn_bench.timing.statistics import Batch
from fi_attn_bench.timing.trace import count_starved


@dataclass(frozen=True)
class FlushLayout:
    """What one L2 flush launches, from a recording of a flush alone (none: warm L2)."""

    count: int = 0
    names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class CallWork:
    """One call's records, the flush records launched before them, and its markers."""

    start_marker: ActivityRecord
    end_marker: ActivityRecord
    records: tuple[ActivityRecord, ...]
    flush: tuple[ActivityRecord, ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(sorted(r.name for r in self.records))

    @property
    def ready_ns(self) -> int:
        """When the work before run() ended: its flush, else its start marker."""
        return max((r.end_ns for r in self.flush), default=self.start_marker.end_ns)


def is_marker(record: ActivityRecord, marker_bytes: int = MARKER_BYTES) -> bool:
    return record.kind == MEMSET and record.bytes == marker_bytes


def _markers(
    records: Sequence[ActivityRecord], count: int, first_value: int, marker_bytes: int
) -> list[ActivityRecord]:
    """The ``count`` markers in launch order, checked against the values launched."""
    markers = sorted((r for r in records if is_marker(r, marker_bytes)), key=_correlation)
    if len(markers) != count:
        raise TimingError(
            f"CUPTI delivered {len(markers)} call markers, not the {count} the timed calls "
            f"launched: records were lost, or run() sets {marker_bytes}-byte buffers itself"
        )
    for index, marker in enumerate(markers):
        expected = (first_value + index) % 256
        if marker.value != expected:
            raise TimingError(
                f"call marker {index} of the recording holds {marker.value}, not {expected}: "
                "a marker record was lost or another memset of the marker's size came between"
            )
    places = {(m.device_id, m.context_id) for m in markers}
    if len(places) > 1:
        raise TimingError(f"the call markers ran on several devices or contexts: {places}")
    return markers


def _correlation(record: ActivityRecord) -> int:
    return record.correlation_id


def markers_launched(batches: Sequence[int]) -> int:
    """A batch of ``n`` calls launches ``n + 1`` markers: one before each call (ahead of its
    flush) and one closing the batch."""
    return sum(calls + 1 for calls in batches if calls > 0)


def split_calls(
    records: Sequence[ActivityRecord],
    batches: Sequence[int],
    first_value: int = 0,
    flush: FlushLayout = FlushLayout(),
    marker_bytes: int = MARKER_BYTES,
    same_work: bool = True,
) -> list[CallWork]:
    """Each call's records, batch after batch (``batches``: calls per batch, each batch
    launched as marker + calls x ([flush] run() marker)): the records launched between a
    call's marker and the next, less its flush's (the first ``flush.count`` of them, which
    must bear the flush's names).  Raises TimingError when the recording does not add up
    (``same_work``: when the calls did not all launch the same work, too)."""
    markers = _markers(records, markers_launched(batches), first_value, marker_bytes)
    if not markers:
        return []
    place = (markers[0].device_id, markers[0].context_id)
    work = sorted(
        (
            r
            for r in records
            if not is_marker(r, marker_bytes) and (r.device_id, r.context_id) == place
        ),
        key=_correlation,
    )
    ids = [r.correlation_id for r in work]
    found, position = [], 0
    for calls in batches:
        for index in range(position, position + calls):
            begin, end = markers[index], markers[index + 1]
            low = bisect.bisect_right(ids, begin.correlation_id)
            high = bisect.bisect_left(ids, end.correlation_id)
            found.append(_call(begin, end, work[low:high], flush, len(found)))
        position += calls + 1 if calls > 0 else 0
    _require_work(found)
    if same_work:
        _require_same_work(found)
    return found


def _call(begin, end, launched, flush: FlushLayout, index: int) -> CallWork:
    head = tuple(launched[: flush.count])
    if len(head) < flush.count or any(r.name not in flush.names for r in head):
        raise TimingError(
            f"timed call {index}: the first {flush.count} records after its marker are not "
            f"the L2 flush's ({'; '.join(sorted(flush.names))[:200]})"
        )
    return CallWork(begin, end, tuple(launched[flush.count :]), head)


def _require_work(found: Sequence[CallWork]) -> None:
    empty = [index for index, call in enumerate(found) if not call.records]
    if empty:
        raise NoKernelCaptured(
            f"CUPTI recorded no GPU work between the markers of {len(empty)} of "
            f"{len(found)} timed calls (the first: call {empty[0]}); does run() launch "
            "anything on this device?"
        )


def _require_same_work(found: Sequence[CallWork]) -> None:
    first = found[0].names()
    for index, call in enumerate(found[1:], start=1):
        if call.names() != first:
            raise TimingError(
                f"timed call {index} launched {len(call.records)} records "
                f"({'; '.join(call.names())[:300]}), call 0 launched {len(first)} "
                f"({'; '.join(first)[:300]}): records were lost, or run() launches varying work"
            )


def call_time_ms(call: CallWork, attribution: str, pattern: re.Pattern | None = None) -> float:
    """One call's sample: "sum" of its records' durations; "span", first start to last end;
    "stream", from the end of the work before it (its L2 flush, else its marker) to its last
    end: the time the call held the stream, launch gaps included."""
    counted = [r for r in call.records if pattern is None or pattern.search(r.name)]
    if not counted:
        seen = "; ".join(sorted({r.name for r in call.records}))
        raise NoKernelCaptured(
            f"no kernel matched --kernel-pattern {pattern.pattern!r}; kernels seen: {seen}"
        )
    end = max(r.end_ns for r in counted)
    if attribution == "stream":
        return (end - call.ready_ns) / 1e6
    if attribution == "span":
        return (end - min(r.start_ns for r in counted)) / 1e6
    return sum(r.duration_ns for r in counted) / 1e6


def batches_of(
    found: Sequence[CallWork],
    calls: Sequence[int],
    attribution: str,
    pattern: re.Pattern | None = None,
) -> list[Batch]:
    """The recording's calls cut into the loop's batches (``calls`` per batch), each with
    its samples, the names it counted, its GPU time (first marker to last, flushes between
    included) and, for "stream", how many calls waited for their own launch."""
    batches, position = [], 0
    for count in calls:
        chunk = found[position : position + count]
        position += count
        if not chunk:
            continue
        samples = tuple(call_time_ms(call, attribution, pattern) for call in chunk)
        names = frozenset(
            r.name
            for call in chunk
            for r in call.records
            if pattern is None or pattern.search(r.name)
        )
        gpu_ms = (chunk[-1].end_marker.start_ns - chunk[0].start_marker.end_ns) / 1e6
        gaps = [min(r.start_ns for r in c.records) - c.ready_ns for c in chunk]
        starved = count_starved(gaps) if attribution == "stream" else 0
        batches.append(Batch(samples, names, gpu_ms=gpu_ms, starved=starved))
    return batches
