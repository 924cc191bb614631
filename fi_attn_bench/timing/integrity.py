"""Integrity checks: the timed calls did the work that the checked call did.

One check of run()'s output before timing (``verify_output``) says nothing about the timed
calls: a plugin could compute once and then return early, cache its output, hand the work to
a thread or stream the timer does not see, or detect the profiler.  After the timed loop,
with the same run(), buffers and timer (so a call cannot tell it is checked):

In this order, each phase for every implementation of a case before the next:

* ``graph_capture`` (cuda_graph): a replay of K captured calls runs the eager call's kernels
  K times over (a kernel left out of the capture replays as nothing while stale output passes);
* ``timed_output``: one timed call, drawn at random among all of them, had its output poisoned
  (NaN) before it and copied the moment it returned; the copy must equal the checked call's
  output (a copy that is wrong while the buffer turns right a moment later fails ``timeline``
  instead).  Under the profiler and CUDA-graph timers, whose recordings have no room for a
  foreign kernel, that call runs right after the timed loop, under the same profiler or as a
  graph replay.  On the CPU with one torch thread, other threads may not spend CPU time
  during the timed calls (``timeline``: work handed to a thread);
* ``fresh_inputs``: once late work settled, new random values (from the OS's entropy, not the
  case seed) are written into the same input tensors in place and one call runs, unpoisoned,
  as the timed calls ran (under the profiler, or as a replay); its output must match the
  float32 reference on the new values (``timeline`` where only the copy taken the moment it
  returned was wrong, or it left a thread of its own running, or, on the CPU with one torch
  thread, other threads spent CPU time during the last of the tries, none of which passed);
* ``fresh_inputs_time``: that call may not take more than ``TIME_FACTOR`` times the slower of
  the timed median and a control call on the old values right before it (a cache keyed on a
  fingerprint of the inputs computes only on new values); a slow one is retried on new
  values, each checked.  Under the profiler both calls are timed by the GPU work each one's
  own recording holds, and the control alone sets the limit.

A failed check raises ``IntegrityError`` (the row fails, ``integrity`` names the check).
"""

from __future__ import annotations

import dataclasses
import math
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from fi_attn_bench.cases.checking import Tolerance, check_output, poison_
from fi_attn_bench.results.schema import (
    CPU_TIMER,
    FRESH_INPUTS,
    FRESH_INPUTS_TIME,
    GRAPH_CAPTURE,
    INPUTS_WRITTEN,
    INTEGRITY_OFF,
    INTEGRITY_PASS,
    INTEGRITY_PASS_WEAK,
    TIMED_OUTPUT,
    TIMELINE,
)
from fi_attn_bench.timing.cpu_times import (
    OTHER_THREADS_SHARE,
    CpuTimes,
    other_threads_cpu_s,
)
from fi_attn_bench.timing.fresh import (
    SAMPLE_RATES,
    FreshCalls,
    Refresher,
    SampledFailure,
    SampleRate,
    active_modes,
)
from fi_attn_bench.timing.timers import HostStopwatch, Stopwatch

TIME_FACTOR = 5.0
"""A call on fresh values may take this many times the timed median before it is flagged: a
CPU call right after the checks' float32 work took up to 3.3x (pages the allocator gave back);
an output cache is 30-1000x faster than the work it skips."""

TIME_SLACK_MS = 0.05
"""... plus this much (ms): a GPU call's launch, a CPU call's host jitter."""

TIME_RETRIES = 2
"""More fresh calls before a slow one, or one during which other threads were busy, is flagged
(each on new values): a thread that does run()'s work is busy in every one, another thread
of the process that a loaded machine let run late (a sampler, a leftover) in one."""

THREAD_JOIN_S = 10.0
"""How long a thread run() left behind may take to finish before the output is read."""

SETTLE_STEP_S, SETTLE_MAX_S, QUIET_CPU_S = 0.001, 0.05, 0.0002
"""Before new values are written, the device is synchronized and the process waited on in
steps until its other threads spent less than QUIET_CPU_S of CPU in one step (at most
SETTLE_MAX_S): work an earlier call left to a thread finishes on the old values instead of
landing on the new ones."""

LATE_WAIT_S = 0.5
"""How long an output that was wrong on return is watched for turning right (late work)."""

IN_LOOP_TIMERS = (CPU_TIMER, "events")
"""Timers whose samples are taken call by call, so one call may be poisoned inside the loop."""

FRESH_TIMERS = (CPU_TIMER, "profiler")
"""Timers that refresh the inputs before every timed call (``timing.fresh``); the others run
the weaker set (``pass_weak``)."""

SAMPLED_IN_LOOP = (CPU_TIMER,)
"""Fresh timers whose drawn calls are checked in the loop, right after they return; the
profiler's recording has no room for the reference's kernels, so its last timed call is
checked after the loop instead (on the values it saw: no refresh came after it)."""

BLIND_SPOTS = {
    "events": "integrity: the events timer times only run()'s own stream (work on another "
    "stream is checked for completion on return, not timed)",
    "cuda_graph": "integrity: the cuda_graph timer times only the captured work (the replay's "
    "kernels and output are checked against eager calls)",
}
"""What a timer cannot see, noted on its rows."""


class IntegrityError(RuntimeError):
    """A timed call did less or other work than the checked one; ``check`` names how."""

    def __init__(self, check: str, reason: str):
        super().__init__(f"integrity check {check} failed: {reason}")
        self.check = check


def integrity_column(
    enabled: bool, error: BaseException | None = None, timer_name: str = CPU_TIMER
) -> dict[str, str]:
    """The row's ``integrity`` column (its one writer): ``pass_weak`` where the timer ran
    the weaker set (no fresh values per timed call, see ``FRESH_TIMERS``)."""
    if not enabled:
        return {"integrity": INTEGRITY_OFF}
    if isinstance(error, IntegrityError):
        return {"integrity": error.check}
    return {"integrity": INTEGRITY_PASS if timer_name in FRESH_TIMERS else INTEGRITY_PASS_WEAK}


def floating_tensors(inputs: object) -> list[Tensor]:
    """The floating-point tensors among a script's inputs (a tensor, a dataclass, a sequence
    or mapping of them, nested): the values run() computes on; index tensors stay as planned."""
    found: dict[int, Tensor] = {}
    for tensor in _tensors(inputs, depth=0):
        if tensor.is_floating_point() and tensor.numel():
            found.setdefault(id(tensor), tensor)
    return list(found.values())


def _tensors(value: object, depth: int) -> Iterator[Tensor]:
    if depth > 4:
        return
    if isinstance(value, Tensor):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for item in dataclasses.fields(value):
            yield from _tensors(getattr(value, item.name), depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item, depth + 1)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item, depth + 1)


def refill_(tensors: list[Tensor]) -> None:
    """New standard-normal values, in place, from a seed nobody can predict."""
    for tensor in tensors:
        generator = torch.Generator(device=tensor.device)
        generator.manual_seed(secrets.randbits(63))
        if tensor.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            tensor.normal_(generator=generator)
        else:  # fp8 and other storage types: drawn in float32 and converted
            drawn = torch.randn(tensor.shape, generator=generator, device=tensor.device)
            tensor.copy_(drawn)


@dataclass(frozen=True)
class Subject:
    """What the checks run and compare: one implementation's run() on one case."""

    run: Callable[[], object]
    output: Tensor | None  # the buffer run() writes; None: run() returns its output
    reference: Callable[[], Tensor]  # the float32 reference on the inputs' current values
    inputs: object
    device: torch.device
    tolerance: Tolerance

    def output_of(self, result: object) -> Tensor:
        if self.output is not None:
            return self.output
        if isinstance(result, (tuple, list)) and result:
            result = result[0]
        if not isinstance(result, Tensor):
            raise TypeError("nothing to check: no output buffer and run() returned no tensor")
        if type(result) is not Tensor:  # a subclass can defer its work until it is read
            raise TypeError(
                f"run() returned a {type(result).__qualname__}, not a plain torch.Tensor (a "
                "subclass runs its own code when the harness reads it)"
            )
        return result

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)


@dataclass
class TimedCallSentinel:
    """run() for the timed loop.  Each call is, with probability 1 / (its number), poisoned
    before and copied the moment it returns (reservoir sampling: the last copy is of a call
    chosen uniformly among all timed calls, however many the stop rule lets run); the copy
    is judged after the loop.  About ln(calls) + 1 calls pay for a fill and a copy.  On the
    CPU it also keeps the CPU time of the process and of the calling thread (``CpuTimes``)."""

    subject: Subject
    # seeded from the OS's entropy once: a draw per call costs no system call
    draw: Callable[[], float] = field(
        default_factory=lambda: random.Random(secrets.randbits(64)).random
    )
    calls: int = 0
    snapshot: Tensor | None = None
    cpu: CpuTimes | None = None

    def __call__(self) -> object:
        self.calls += 1
        on_cpu = self.subject.device.type == "cpu"
        if on_cpu:
            self.cpu = self.cpu or CpuTimes.now()
            started = time.perf_counter()
        if self.draw() * self.calls >= 1.0:
            result = self.subject.run()
        else:
            result = self._poisoned()
        if on_cpu:
            self.cpu = self.cpu.after_call(time.perf_counter() - started)
        return result

    def _poisoned(self) -> object:
        if self.subject.output is not None:
            poison_(self.subject.output)
        result = self.subject.run()
        self.snapshot = self.subject.output_of(result).clone()
        return result


@dataclass(frozen=True)
class FreshCall:
    """One call on fresh values: its time per run(), the output copied on its return, the
    output once the device and its threads finished, and the threads it left running."""

    ms: float
    snapshot: Tensor
    final: Tensor
    leftover_threads: int
    control_ms: float  # a call on the values the timed calls saw, just before
    other_threads_ms: float = 0.0  # CPU time of the process's other threads during the call
    by_device_work: bool = False  # both times are GPU work in a profile, not the timed median's


def device_work_ms(events) -> float:
    """The GPU work in a profile: the sum of its kernels', memsets' and copies' durations."""
    return sum(event.duration_ns for event in events) / 1e6


def _graph(session) -> object | None:
    return getattr(session, "graph", None)


def _profile(session) -> Callable | None:
    """The profiler a profiler session records with (None under other timers)."""
    timer = getattr(session, "timer", None)
    if getattr(timer, "name", "") != "profiler":
        return None
    return getattr(timer, "profile", None)


@dataclass
class IntegrityProbe:
    """The integrity checks of one implementation on one case (see the module docstring).

    ``verified`` is the checked call's output, kept by the correctness check."""

    subject: Subject
    timer_name: str
    stopwatch: Callable[[], Stopwatch | None]  # the timer's; None: calls cannot be timed
    verified: Tensor | None = None
    sentinel: TimedCallSentinel | None = None
    clock: Callable[[], float] = time.perf_counter
    notes: list[str] = field(default_factory=list)
    rate: SampleRate = SAMPLE_RATES["default"]  # of the sampled checks (``--judge``: more)
    fresh: FreshCalls | None = None
    refresher: Refresher | None = None
    cpu: CpuTimes | None = None

    def timed_fn(self) -> Callable[[], object]:
        """What the timer calls: fresh values and sampled checks under ``FRESH_TIMERS``, the
        poisoning sentinel where samples are taken call by call, else run() itself."""
        tensors = floating_tensors(self.subject.inputs)
        if self.timer_name in FRESH_TIMERS and tensors:  # no inputs: nothing to refresh
            self.refresher = Refresher.of(self.subject.inputs, tensors, self.subject.device)
            self.fresh = FreshCalls(
                self.subject.run,
                self.refresher,
                self._sampled_check,
                rate=self.rate if self.timer_name in SAMPLED_IN_LOOP else None,
                on_first=self._start_cpu,
                on_call=self._count_cpu,
            )
            return self.fresh
        if self.timer_name not in IN_LOOP_TIMERS:
            return self.subject.run
        self.sentinel = TimedCallSentinel(self.subject)
        return self.sentinel

    def _start_cpu(self) -> None:
        if self.subject.device.type == "cpu":
            self.cpu = CpuTimes.now()

    def _count_cpu(self, wall_s: float) -> None:
        if self.subject.device.type == "cpu":
            self.cpu = (self.cpu or CpuTimes.now()).after_call(wall_s)

    def _sampled_check(self, result: object) -> SampledFailure | None:
        """A drawn timed call's output, copied as it was on return, against the reference
        on that call's own values (the reference measured as an implementation is not
        checked against itself)."""
        if self.subject.run is self.subject.reference:
            return None
        modes = active_modes()  # a mode would run deferred work in the harness's reads below
        if modes:
            return SampledFailure(f"{modes[0]} when a timed call's output was read", False)
        snapshot = self.subject.output_of(result).clone()
        self.subject.sync()
        overwritten = self.refresher.overwritten() if self.refresher is not None else None
        if overwritten is not None:
            return SampledFailure(f"run() wrote into {overwritten}", False, INPUTS_WRITTEN)
        expected = self.subject.reference()
        found = check_output(snapshot, expected, self.subject.tolerance)
        if found.passed:
            return None
        return SampledFailure(found.message, self._turns_right(self.subject.output, expected))

    def blind_spot(self) -> str:
        return BLIND_SPOTS.get(self.timer_name, "")

    # ---------------------------------------------------------------- timed_output

    def check_timed_output(self, session, measurement=None) -> None:
        """The poisoned timed call's output against the checked call's; on the CPU, with one
        torch thread, the CPU time other threads spent during the timed calls.  Under
        ``FRESH_TIMERS``: the sampled calls' checks on their own values."""
        if self.fresh is not None:
            self._check_other_threads(self.cpu)
            if self.fresh.rate is None:
                self._check_last_call(self.fresh)
            self._check_sampled_calls(self.fresh)
            return
        self._check_other_threads(self.sentinel.cpu if self.sentinel is not None else None)
        if self.verified is None:
            return
        snapshot = self.sentinel.snapshot if self.sentinel is not None else None
        if snapshot is None:
            snapshot = self._poisoned_call(session)
        self.subject.sync()
        found = check_output(snapshot, self.verified, self.subject.tolerance)
        if found.passed:
            return
        if self._turns_right(self.subject.output, self.verified):
            raise IntegrityError(
                TIMELINE,
                "a timed call's output was unfinished when run() returned and right a moment "
                "later (work left on another stream or thread): " + found.message,
            )
        raise IntegrityError(
            TIMED_OUTPUT,
            "a timed call's output (poisoned before it) differs from the checked call's: "
            + found.message,
        )

    def _check_last_call(self, fresh: FreshCalls) -> None:
        """The last timed call's output on the values it saw (none came after it, unless
        another implementation of a head-to-head case ran later: then noted, not checked)."""
        if fresh.calls == 0:
            return
        if self.refresher is not None and not self.refresher.wrote_last():
            self.notes.append(
                "integrity: another implementation's calls refreshed the shared inputs after "
                "this one's last timed call, so that call was not checked"
            )
            return
        fresh.checked += 1
        fresh.failure = self._sampled_check(fresh.result)

    def _check_sampled_calls(self, fresh: FreshCalls) -> None:
        failure = fresh.failure
        if failure is None:
            return
        checked = f"{fresh.checked} of {fresh.calls} timed calls, drawn at random, were checked"
        if fresh.rate is None:
            checked = f"the last of {fresh.calls} timed calls was checked"
        if failure.check == INPUTS_WRITTEN:
            reason = f"a timed call changed the fresh values it was given ({checked}): "
            raise IntegrityError(INPUTS_WRITTEN, reason + failure.message)
        if failure.late:
            raise IntegrityError(
                TIMELINE,
                "a timed call's output was unfinished when run() returned and right a moment "
                f"later (work left on another stream or thread; {checked}): {failure.message}",
            )
        raise IntegrityError(
            TIMED_OUTPUT,
            "a timed call's output differs from the reference on the fresh values it was "
            f"given ({checked}): {failure.message}",
        )

    def _check_other_threads(self, cpu: CpuTimes | None) -> None:
        if cpu is None or torch.get_num_threads() != 1:  # torch's own threads work in calls
            return
        if cpu.other_threads_s > cpu.other_threads_limit_s():
            raise IntegrityError(
                TIMELINE,
                f"other threads used {cpu.other_threads_s * 1e3:.4g} ms of CPU while the "
                f"timed calls took {cpu.calls_wall_s * 1e3:.4g} ms of wall time (limit "
                f"{cpu.other_threads_limit_s() * 1e3:.4g} ms): work handed to a thread is not "
                "in the calls' time",
            )

    def _turns_right(self, buffer: Tensor | None, expected: Tensor) -> bool:
        """Whether ``buffer`` (run()'s output) matches ``expected`` within ``LATE_WAIT_S``,
        once the device and any late thread had time to finish."""
        if buffer is None:
            return False
        deadline = self.clock() + LATE_WAIT_S
        while True:
            self.subject.sync()
            if check_output(buffer, expected, self.subject.tolerance).passed:
                return True
            if self.clock() >= deadline:
                return False
            time.sleep(0.01)

    def _poisoned_call(self, session) -> Tensor:
        """One call as the timer runs them, after the timed loop, its output poisoned."""
        copies: list[Tensor] = []
        graph = _graph(session)

        def body() -> None:
            if self.subject.output is not None:
                poison_(self.subject.output)
            result = graph.replay() if graph is not None else self.subject.run()
            copies.append(self.subject.output_of(result).clone())

        if graph is not None and self.subject.output is None:
            body = self._eager_copy(copies)
        self._as_timed(session, body)
        return copies[0]

    def _eager_copy(self, copies: list[Tensor]) -> Callable[[], None]:
        """A graph of a run() that returns its output has no buffer to read: run it eagerly."""
        self.notes.append("integrity: run() returns its output, so replays were not checked")

        def body() -> None:
            copies.append(self.subject.output_of(self.subject.run()).clone())

        return body

    def _as_timed(self, session, body: Callable[[], None]) -> list | None:
        """``body`` under the profiler where the timer is the profiler; its device events."""
        profile = _profile(session)
        if profile is None:
            body()
            self.subject.sync()
            return None
        return profile(body, self.subject.sync)

    # ---------------------------------------------------------------- fresh inputs

    def check_fresh_inputs(self, session, measurement) -> None:
        """fresh_inputs, timeline and fresh_inputs_time (see the module docstring).  The time
        limit is ``TIME_FACTOR`` times the slower of the timed median and a control call on
        the values already seen, timed just before after another (whatever the checks' own work did to
        caches and the allocator, it did to both).  A slow call, or one during which other
        threads were busy, is retried on new values."""
        tensors = floating_tensors(self.subject.inputs)
        if not tensors:
            self.notes.append("integrity: no floating-point inputs to refresh")
            return
        timed = self.stopwatch() is not None  # a scripted timer's samples are no call's time
        for _ in range(1 + TIME_RETRIES):
            self._settle()
            found = self._checked_fresh_call(session, tensors)
            basis = found.control_ms
            if not found.by_device_work:
                basis = max(measurement.median, basis)
            limit = self.time_limit_ms(basis)
            busy_limit = self._other_threads_limit_ms(found.ms)
            if found.other_threads_ms <= busy_limit and (found.ms <= limit or not timed):
                return
        if found.other_threads_ms > busy_limit:
            raise IntegrityError(
                TIMELINE,
                f"other threads used {found.other_threads_ms:.4g} ms of CPU during one call on "
                f"new values that took {found.ms:.4g} ms itself (limit {busy_limit:.4g} ms, "
                f"{1 + TIME_RETRIES} tries): work handed to a thread",
            )
        raise IntegrityError(
            FRESH_INPUTS_TIME,
            f"a call on new input values took {found.ms:.4g} ms, one on the values the timed "
            f"calls saw {found.control_ms:.4g} ms just before, the timed median "
            f"{measurement.median:.4g} ms (limit {limit:.4g} ms, {1 + TIME_RETRIES} tries): "
            "the timed calls skipped work that new values need (an output cache?)",
        )

    def _checked_fresh_call(self, session, tensors: list[Tensor]) -> FreshCall:
        """One call on new values, its output checked."""
        found = self._fresh_call(session, tensors)
        # the reference measured as an implementation is not checked against itself
        expected = found.final if self.subject.run is self.subject.reference else None
        expected = self.subject.reference() if expected is None else expected
        early = check_output(found.snapshot, expected, self.subject.tolerance)
        if not early.passed and not self._turns_right(found.final, expected):
            raise IntegrityError(
                FRESH_INPUTS, "on new input values written in place: " + early.message
            )
        if not early.passed:
            raise IntegrityError(
                TIMELINE,
                "the output read on the calling stream the moment run() returned was not "
                "finished (work left on another stream or thread, or still running): "
                + early.message,
            )
        if found.leftover_threads:
            raise IntegrityError(
                TIMELINE, f"run() left {found.leftover_threads} thread(s) of its own running"
            )
        return found

    def _fresh_call(self, session, tensors: list[Tensor]) -> FreshCall:
        """A control call on the values already seen, then one on new values, both as the
        timer runs them, with nothing but the settling and the refill between them."""
        profile = _profile(session)
        if profile is not None:
            return self._profiled_fresh_call(profile, tensors)
        graph = _graph(session)
        per_call = getattr(session, "calls_per_replay", 1) if graph is not None else 1
        call = graph.replay if graph is not None else self.subject.run
        if graph is not None and self.subject.output is None:
            call, per_call = self.subject.run, 1
        before = set(threading.enumerate())
        taken: list[object] = []

        def timed_call() -> object:
            watch = self.stopwatch() or HostStopwatch(self.clock)
            watch.start()
            result = call()
            watch.stop()
            taken.append(watch)
            return result

        def body() -> None:
            call()  # the control is the second of two back-to-back calls, as timed ones ran
            timed_call()
            self._settle()
            refill_(tensors)
            others = other_threads_cpu_s()
            output = self.subject.output_of(timed_call())
            taken.extend((output.clone(), output, other_threads_cpu_s() - others))

        self._as_timed(session, body)
        leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        for thread in leftover:
            thread.join(THREAD_JOIN_S)
        self.subject.sync()
        control, watch, snapshot, final, others_s = taken
        return FreshCall(
            watch.ms() / per_call,
            snapshot,
            final,
            len(leftover),
            control.ms() / per_call,
            others_s * 1e3 if self.subject.device.type == "cpu" else 0.0,
        )

    def _profiled_fresh_call(self, profile: Callable, tensors: list[Tensor]) -> FreshCall:
        """Under the profiler, the control and the call on new values are each one recording,
        timed by their GPU work: a call's wall time would hide the work a cache skips behind
        the host waits of its lookup (seen on an H100: a fingerprint cache passed)."""
        before = set(threading.enumerate())
        outputs: list[Tensor] = []

        def one_call() -> None:
            output = self.subject.output_of(self.subject.run())
            outputs.extend((output.clone(), output))

        self.subject.run()  # the control is the second of two calls, as timed ones ran
        control = profile(one_call, self.subject.sync)
        self._settle()
        refill_(tensors)
        fresh = profile(one_call, self.subject.sync)
        leftover = [t for t in threading.enumerate() if t not in before and t.is_alive()]
        for thread in leftover:
            thread.join(THREAD_JOIN_S)
        self.subject.sync()
        return FreshCall(
            device_work_ms(fresh),
            outputs[2],
            outputs[3],
            len(leftover),
            device_work_ms(control),
            by_device_work=True,
        )

    def _other_threads_limit_ms(self, call_ms: float) -> float:
        """Other threads' CPU time allowed during one CPU call (with one torch thread)."""
        if self.subject.device.type != "cpu" or torch.get_num_threads() != 1:
            return math.inf
        return OTHER_THREADS_SHARE * call_ms + QUIET_CPU_S * 1e3

    def _settle(self) -> None:
        """Synchronize, then wait until the process's other threads are quiet (see
        ``SETTLE_STEP_S``)."""
        self.subject.sync()
        deadline = time.perf_counter() + SETTLE_MAX_S
        while time.perf_counter() < deadline:
            before = other_threads_cpu_s()
            time.sleep(SETTLE_STEP_S)
            if other_threads_cpu_s() - before < QUIET_CPU_S:
                return

    def time_limit_ms(self, median_ms: float) -> float:
        return max(TIME_FACTOR * median_ms, median_ms + TIME_SLACK_MS)

    # ---------------------------------------------------------------- graph capture

    def check_graph_capture(self, session, measurement=None) -> None:
        """cuda_graph: a replay of K captured calls runs the eager call's kernels K times."""
        graph, profile = _graph(session), getattr(getattr(session, "timer", None), "profile", None)
        if graph is None or profile is None:
            return
        eager = Counter(e.name for e in profile(self.subject.run, self.subject.sync))
        if not eager:
            self.notes.append("integrity: the profiler saw no kernel: graph kernels not compared")
            return
        replayed = Counter(e.name for e in profile(graph.replay, self.subject.sync))
        calls = session.calls_per_replay
        expected = Counter({name: count * calls for name, count in eager.items()})
        if replayed != expected:
            missing = sorted((expected - replayed).elements())
            extra = sorted((replayed - expected).elements())
            raise IntegrityError(
                GRAPH_CAPTURE,
                f"a replay of {calls} captured calls ran {sum(replayed.values())} kernels, "
                f"{calls} eager calls run {sum(expected.values())} (missing: "
                f"{_names(missing)}; extra: {_names(extra)})",
            )

    def audits(self) -> tuple[Callable, ...]:
        """The checks after the timed loop, in order; each phase runs for every implementation
        of a case before the next (``fresh_inputs`` rewrites inputs they share)."""
        return (self.check_graph_capture, self.check_timed_output, self.check_fresh_inputs)


def _names(names: list[str]) -> str:
    if not names:
        return "none"
    counts = Counter(names)
    return ", ".join(f"{count}x {name[:60]}" for name, count in counts.items())
