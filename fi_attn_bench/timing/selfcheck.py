"""Self-checks of what the timers rely on: one implementation each, run by the doctor on a
real case and by each timer on a small probe before a sweep's first case.

* ``profiler_kernels``: the profiler records device kernels for a call, the same set each
  call (MetaX's profiling API gave no complete device timeline on some MACA versions).
* ``l2_flush``: a read of a buffer that fits in L2 takes longer after the flush than
  after reading it once (the flush evicts; the L2 size torch reports is right enough).
* ``cuda_graph``: a replay of a captured call runs every kernel: its output, poisoned with
  NaN before the replay, equals the eager output, and it launches as many device kernels.
* ``spin_kernel``: ``torch.cuda._sleep``, the queue-ahead spin, exists and spins.
* ``cupti_attribution``: CUPTI's records, split by the call markers, give each call its own
  work: calls alternating between the probe and the probe plus work on a second stream get
  exactly their own records (the doctor also holds the probe's against the profiler's).

A check reports pass, fail or unavailable with its evidence (``CheckResult``); a timer
refuses to run where a check it depends on failed (``SelfCheckFailed``, exit 2).
"""

from __future__ import annotations

import enum
import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from fi_attn_bench.errors import UsageError
from fi_attn_bench.timing.l2 import L2Flusher, l2_flush_bytes
from fi_attn_bench.timing.queue import elapsed_ms, enqueue_calls, spin_cycles_per_ms
from fi_attn_bench.timing.trace import DeviceEvent, profile_device_events, shorten_kernel_name
from fi_attn_bench.wording import counted

# A read of L2 / 4 bytes (fits in L2 with room to spare) must take this much longer after
# the flush than warm: an evicting flush makes it an HBM read (H200 README: a small decode
# case, 11.3 us warm, 15.8 us cold); a flush that evicts nothing leaves the ratio near 1.
L2_COLD_WARM_MIN_RATIO = 1.10
L2_PROBE_FRACTION = 4
L2_REPEATS = 21
PROFILER_ITERATIONS = 3
QUEUE_AHEAD_CYCLES = 20_000_000  # ~10 ms at 2 GHz, far more than queueing the reads takes
GRAPH_RTOL = 1e-3  # the replay runs the same kernels on the same inputs as the eager call


# What each timer relies on: it refuses to run (exit 2) where one of these checks fails.
TIMER_CHECKS: dict[tuple[str, str], tuple[str, ...]] = {
    ("profiler", "cold"): ("profiler_kernels", "l2_flush"),
    ("profiler", "warm"): ("profiler_kernels",),
    ("events", "cold"): ("l2_flush",),
    ("events", "warm"): (),
    ("cuda_graph", "warm"): ("cuda_graph",),
    ("cupti", "cold"): ("cupti_attribution", "l2_flush"),
    ("cupti", "warm"): ("cupti_attribution",),
}

CUPTI_CHECK_PAIRS = 4  # probe calls alternating with probe + second-stream calls


def required_checks(timer: str, l2: str) -> tuple[str, ...]:
    """The checks a timer with this L2 mode depends on (none for the CPU's wall clock)."""
    return TIMER_CHECKS.get((timer, l2), ())


def timer_verdicts(results: Sequence[CheckResult]) -> tuple[tuple[str, str], ...]:
    """For each GPU timer and L2 mode: whether it runs here, given these check results."""
    by_name = {result.name: result for result in results}
    timer_checks = {name for needed in TIMER_CHECKS.values() for name in needed}
    gpu_checked = any(
        name in by_name and by_name[name].status is not CheckStatus.UNAVAILABLE
        for name in timer_checks
    )
    verdicts = []
    for (timer, l2), needed in TIMER_CHECKS.items():
        failed = [n for n in needed if n in by_name and by_name[n].failed]
        unknown = [
            n for n in needed if n not in by_name or by_name[n].status is CheckStatus.UNAVAILABLE
        ]
        if failed:
            verdict = f"refuses to run (exit 2): {', '.join(failed)} failed"
        elif unknown:
            verdict = f"not checked: {', '.join(unknown)} unavailable"
        else:
            verdict = f"runs ({', '.join(needed)} passed)"
        if not needed:  # nothing to refuse it for; on the CPU no GPU timer runs at all
            verdict = (
                "runs (needs no self-check)"
                if gpu_checked
                else "not checked: no GPU check ran here (on a GPU it needs none)"
            )
        verdicts.append((f"--timer {timer} --l2 {l2}", verdict))
    return tuple(verdicts)


class CheckStatus(enum.Enum):
    PASS = "pass"
    FAIL = "fail"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome: a one-line summary and the evidence behind it (name, value)."""

    name: str
    status: CheckStatus
    summary: str
    evidence: tuple[tuple[str, str], ...] = ()

    @property
    def failed(self) -> bool:
        return self.status is CheckStatus.FAIL


class SelfCheckFailed(UsageError):
    """A timer's self-check failed: the timer refuses to run (exit 2)."""


def require(result: CheckResult, timer: str) -> None:
    """Raise ``SelfCheckFailed`` naming the check when it failed."""
    if result.failed:
        raise SelfCheckFailed(
            f"the {timer} timer refuses to run: self-check '{result.name}' failed: "
            f"{result.summary} (run fi-attn-bench-doctor for the full report)"
        )


def unavailable(name: str, why: str) -> CheckResult:
    return CheckResult(name, CheckStatus.UNAVAILABLE, why)


@dataclass(frozen=True)
class ProbeCall:
    """A call the checks time, capture and profile, and the tensor it writes."""

    run: Callable[[], object]
    output: torch.Tensor
    label: str


def matmul_probe(device: torch.device, size: int = 512) -> ProbeCall:
    """A small fp16 matmul into a preallocated output (the timers' self-check probe)."""
    a = torch.randn(size, size, device=device, dtype=torch.float16)
    b = torch.randn(size, size, device=device, dtype=torch.float16)
    out = torch.empty(size, size, device=device, dtype=torch.float16)
    return ProbeCall(lambda: torch.matmul(a, b, out=out), out, f"torch.matmul {size}x{size} fp16")


def _kernel_set(events: Sequence[DeviceEvent]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(Counter(shorten_kernel_name(e.name) for e in events).items()))


def check_profiler_kernels(
    probe: ProbeCall,
    sync: Callable[[], None],
    profile: Callable[..., list[DeviceEvent]] = profile_device_events,
    iterations: int = PROFILER_ITERATIONS,
) -> CheckResult:
    """Profile ``iterations`` single calls: each must record device kernels, the same set."""
    name = "profiler_kernels"
    try:
        probe.run()
        sync()
        recorded = [_kernel_set(profile(probe.run, sync)) for _ in range(iterations)]
    except Exception as exc:  # noqa: BLE001 - a profiler that raises is the finding
        return CheckResult(
            name, CheckStatus.FAIL, f"the profiler raised {type(exc).__name__}: {exc}"
        )
    evidence = tuple(
        (f"call {i + 1}", "; ".join(f"{k} x{n}" for k, n in kernels) or "(nothing recorded)")
        for i, kernels in enumerate(recorded)
    )
    evidence = (("probe", probe.label), *evidence)
    if not all(recorded):
        return CheckResult(
            name, CheckStatus.FAIL, "the profiler recorded no device kernel for a call", evidence
        )
    if len(set(recorded)) > 1:
        return CheckResult(
            name, CheckStatus.FAIL, "the calls' kernel sets differ between iterations", evidence
        )
    count = sum(n for _, n in recorded[0])
    return CheckResult(
        name,
        CheckStatus.PASS,
        f"{counted(count, 'device kernel')} per call, the same in each of {counted(iterations, 'call')}",
        evidence,
    )


def flush_timings(
    read: Callable[[], object], before: Callable[[], object], repeats: int
) -> list[float]:
    """ms of ``read`` between an event pair, each preceded by ``before`` (not timed), all
    queued behind a spin so that no read waits for its launch (a wait would count as warm
    time and hide the flush's effect)."""
    if hasattr(torch.cuda, "_sleep"):
        torch.cuda._sleep(QUEUE_AHEAD_CYCLES)
    pairs = enqueue_calls(read, repeats, before)
    torch.cuda.synchronize()
    return list(elapsed_ms(pairs))


def check_l2_flush(
    flush: Callable[[], None],
    read: Callable[[], object],
    l2_note: str,
    probe_bytes: int,
    timings: Callable[..., list[float]] = flush_timings,
    repeats: int = L2_REPEATS,
) -> CheckResult:
    """Cold (flush before) against warm (the same read before) median time of ``read``."""
    name = "l2_flush"
    evidence = [("L2 size used", l2_note), ("probe", f"sum of {probe_bytes / 2**20:.1f} MiB")]
    try:
        read()
        flush()
        warm = statistics.median(timings(read, read, repeats))
        cold = statistics.median(timings(read, flush, repeats))
    except Exception as exc:  # noqa: BLE001 - a flush or read that raises is the finding
        return CheckResult(
            name, CheckStatus.FAIL, f"raised {type(exc).__name__}: {exc}", tuple(evidence)
        )
    ratio = cold / warm if warm > 0 else math.inf
    evidence += [
        ("warm read (median)", f"{warm * 1e3:.1f} us"),
        ("read after the flush (median)", f"{cold * 1e3:.1f} us"),
        ("cold / warm", f"{ratio:.2f} (pass >= {L2_COLD_WARM_MIN_RATIO:.2f})"),
    ]
    if ratio < L2_COLD_WARM_MIN_RATIO:
        return CheckResult(
            name,
            CheckStatus.FAIL,
            f"a read after the flush is only {ratio:.2f}x the warm read: the flush does not "
            "evict L2 (is the reported L2 size right?)",
            tuple(evidence),
        )
    return CheckResult(
        name, CheckStatus.PASS, f"cold read {ratio:.2f}x the warm read", tuple(evidence)
    )


def l2_probe(device: torch.device, l2_bytes: int) -> Callable[[], object]:
    """A bandwidth-bound read of L2 / ``L2_PROBE_FRACTION`` bytes."""
    numel = max(l2_bytes // L2_PROBE_FRACTION // 4, 1024)
    buffer = torch.ones(numel, device=device, dtype=torch.float32)
    result = torch.empty((), device=device, dtype=torch.float32)
    return lambda: torch.sum(buffer, dim=0, out=result)


def check_device_l2(flusher: L2Flusher, device: torch.device) -> CheckResult:
    """``check_l2_flush`` for the flush the timers use, with the L2 size they assume."""
    flush_bytes, note = l2_flush_bytes(torch.cuda.get_device_properties(device))
    read = l2_probe(device, flush_bytes // 2)
    return check_l2_flush(flusher.flush, read, note, flush_bytes // 2 // L2_PROBE_FRACTION)


def capture_graph(fn: Callable[[], object], device: torch.device, calls: int = 1):
    """A CUDA graph of ``calls`` calls of ``fn``, captured after one call on a side stream
    (so that lazy initialisation happens outside the capture)."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return graph


def check_cuda_graph(
    probe: ProbeCall,
    device: torch.device,
    sync: Callable[[], None],
    profile: Callable[..., list[DeviceEvent]] = profile_device_events,
    capture: Callable[..., object] = capture_graph,
) -> CheckResult:
    """Capture one call, poison its output with NaN, replay: equal to eager, same kernels."""
    name = "cuda_graph"
    evidence: list[tuple[str, str]] = [("probe", probe.label)]
    try:
        probe.run()
        sync()
        expected = probe.output.detach().clone()
        eager_kernels = len(profile(probe.run, sync))
        graph = capture(probe.run, device)
        probe.output.fill_(math.nan)
        graph.replay()
        sync()
        replay_kernels = len(profile(graph.replay, sync))
    except Exception as exc:  # noqa: BLE001 - a capture that raises is the finding
        return CheckResult(
            name, CheckStatus.FAIL, f"capture or replay raised {type(exc).__name__}: {exc}",
            tuple(evidence),
        )  # fmt: skip
    return _graph_verdict(probe.output, expected, eager_kernels, replay_kernels, evidence)


def _graph_verdict(output, expected, eager_kernels, replay_kernels, evidence) -> CheckResult:
    name = "cuda_graph"
    nan_left = int(torch.isnan(output).sum())
    evidence += [
        ("device kernels, eager call", str(eager_kernels)),
        ("device kernels, replay", str(replay_kernels)),
        ("NaN left after the replay", f"{nan_left} of {output.numel()}"),
    ]
    if nan_left:
        why = "the replay left NaN in the poisoned output: not every kernel ran"
    elif not torch.allclose(output.float(), expected.float(), rtol=GRAPH_RTOL, atol=GRAPH_RTOL):
        why = "the replay's output differs from the eager call's"
    elif replay_kernels and replay_kernels != eager_kernels:
        why = f"the replay ran {counted(replay_kernels, 'device kernel')}, the eager call {eager_kernels}"
    else:
        compared = (
            "kernel counts equal"
            if replay_kernels
            else "the profiler records no kernel inside a replay: counts not compared"
        )
        return CheckResult(
            name, CheckStatus.PASS, f"replay output equals eager; {compared}", tuple(evidence)
        )
    return CheckResult(name, CheckStatus.FAIL, why, tuple(evidence))


def check_spin_kernel(measure: Callable[[], float] = spin_cycles_per_ms) -> CheckResult:
    """``torch.cuda._sleep`` exists and spins (the queue-ahead kernel)."""
    name = "spin_kernel"
    if not hasattr(torch.cuda, "_sleep"):
        return CheckResult(
            name,
            CheckStatus.FAIL,
            "torch.cuda._sleep is missing: no queue-ahead spin, so the first calls of a batch "
            "of short cases may wait for their launch (timers still run)",
        )
    try:
        rate = measure()
    except Exception as exc:  # noqa: BLE001 - a spin that raises is the finding
        return CheckResult(name, CheckStatus.FAIL, f"torch.cuda._sleep raised: {exc}")
    return CheckResult(
        name,
        CheckStatus.PASS,
        "torch.cuda._sleep spins",
        (("spin rate", f"{rate:,.0f} cycles per ms"),),
    )


def second_stream_call(run: Callable[[], object], device: torch.device) -> Callable[[], None]:
    """``run`` plus a small matmul on a second stream joined both ways, as a call that
    launches work on two streams would."""
    side = torch.cuda.Stream(device)
    a = torch.randn(256, 256, device=device)
    out = torch.empty_like(a)

    def call() -> None:
        run()
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            torch.mm(a, a, out=out)
        torch.cuda.current_stream(device).wait_stream(side)

    return call


def check_cupti_attribution(
    probe: ProbeCall,
    tracer,
    marker: Callable[[int], None],
    sync: Callable[[], None],
    two_streams: Callable[[], None],
    profile: Callable[..., list[DeviceEvent]] | None = None,
) -> CheckResult:
    """Calls alternating between ``probe.run`` and ``two_streams`` (the probe plus work on a
    second stream), each after a marker (one more closes them), under ``tracer``: each call must get its own
    records, the second-stream work on another stream than the markers', and (``profile``
    given: the doctor) the probe's records must name the kernels the profiler sees."""
    from fi_attn_bench.timing.activity import split_calls

    name = "cupti_attribution"
    evidence: list[tuple[str, str]] = [("probe", probe.label)]
    try:
        probe.run()
        two_streams()
        sync()
        expected = sorted(e.name for e in profile(probe.run, sync)) if profile else None
        tracer.start()
        try:
            for index in range(2 * CUPTI_CHECK_PAIRS):
                marker(index)
                (probe.run if index % 2 == 0 else two_streams)()
            marker(2 * CUPTI_CHECK_PAIRS)
            sync()
        finally:
            records = tracer.stop()
        calls = split_calls(records, [2 * CUPTI_CHECK_PAIRS], same_work=False)
    except Exception as exc:  # noqa: BLE001 - a tracer or attribution failure is the finding
        return CheckResult(name, CheckStatus.FAIL, f"{type(exc).__name__}: {exc}", tuple(evidence))
    return _cupti_verdict(calls, expected, evidence)


def _cupti_verdict(calls, expected, evidence) -> CheckResult:
    name = "cupti_attribution"
    plain = {call.names() for call in calls[0::2]}
    joined = {call.names() for call in calls[1::2]}
    marker_stream = calls[0].start_marker.stream_id
    extra = Counter(calls[1].names()) - Counter(calls[0].names())
    other_streams = {r.stream_id for r in calls[1].records} - {marker_stream}
    evidence += [
        ("records per probe call", "; ".join(shorten_kernel_name(n) for n in calls[0].names())),
        ("added by the second stream", "; ".join(shorten_kernel_name(n) for n in extra)),
        ("streams of a two-stream call", str(len({r.stream_id for r in calls[1].records}))),
    ]
    if expected is not None:
        evidence.append(("profiler's kernels of the probe", str(len(expected))))
    if len(plain) != 1 or len(joined) != 1:
        why = "calls that launched the same work got different records: misattributed"
    elif not extra or sum(extra.values()) != len(calls[1].records) - len(calls[0].records):
        why = "the second stream's work was not attributed to the call that launched it"
    elif not other_streams:
        why = "no record of a two-stream call ran on a stream other than the markers'"
    elif expected is not None and len(expected) != len(calls[0].records):
        why = (
            f"CUPTI attributed {len(calls[0].records)} records to the probe call, the "
            f"profiler saw {len(expected)} kernels"
        )
    else:
        return CheckResult(
            name,
            CheckStatus.PASS,
            f"{counted(len(calls), 'call')} each got exactly its own records, second stream included",
            tuple(evidence),
        )
    return CheckResult(name, CheckStatus.FAIL, why, tuple(evidence))
