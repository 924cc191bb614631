"""Plugins out of the harness's reach: ``--impl`` plugins run in a worker process
(``fi_attn_bench.sweep.worker``) and this process keeps the statistics, the verdicts and
every byte written.

Per case the parent sends the case, times the worker's batch beacons with its own clock,
reads the reply as plain data (JSON and raw tensor bytes, types and sizes checked), checks
the outputs it asked for against a reference it computes itself, rebuilds each row's
measurement from the raw samples, and holds those against its clock, a floor no kernel can
beat and the paired ratio (``crosscheck``).  A worker that dies, hangs or sends malformed
data fails that case's rows with the reason (``WorkerError``); the next case gets a new one.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import secrets
import statistics
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import torch

from fi_attn_bench.backends.impls import PLUGIN, TORCH_IMPL, Impl, impl_settings
from fi_attn_bench.cases.checking import check_output
from fi_attn_bench.cases.inputs import prepare_case
from fi_attn_bench.cases.selection import case_seed
from fi_attn_bench.device import peaks as device_peaks
from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.schema import (
    OWN_CLOCK,
    PAIRED_RATIO,
    TIMED_OUTPUT,
    TIMER_IDENTITY,
    WORK_FLOOR,
)
from fi_attn_bench.sweep import crosscheck, worker_start
from fi_attn_bench.sweep import worker_data as data
from fi_attn_bench.sweep.case import (
    CaseResult,
    CaseRunner,
    CorrectnessError,
    case_work,
    checking_tolerance,
)
from fi_attn_bench.sweep.crosscheck import BatchWindow
from fi_attn_bench.sweep.worker import (
    CHECKED,
    TIMED,
    WorkerSetup,
    spec_reference,
    worker_main,
)
from fi_attn_bench.sweep.worker_data import MAX_MESSAGE_BYTES, MAX_TENSOR_BYTES, WorkerError
from fi_attn_bench.timing.fresh import SAMPLE_RATES, Refresher
from fi_attn_bench.timing.integrity import (
    FRESH_TIMERS,
    IN_LOOP_TIMERS,
    SAMPLED_IN_LOOP,
    IntegrityError,
    floating_tensors,
)
from fi_attn_bench.timing.paired import paired_ratio
from fi_attn_bench.timing.statistics import Measurement
from fi_attn_bench.timing.timers import CudaGraphTimer, EventsTimer, ProfilerTimer, WallTimer

READY_S = 300.0  # the worker's start: torch's import, the plugins' import, the timer's checks
PONG_S = 60.0  # the worker's loop answers a ping at once; a loaded machine may delay it
SILENCE_S = 600.0  # no message for this long: the worker hangs (a batch beacons every few ms)
PARENT_COLUMNS = frozenset(("check", "max_abs_err", "mismatch_frac", "check_rtol", "check_atol"))
"""Columns this process writes from its own check, whatever the worker says."""

REAL_TIMERS = (WallTimer, EventsTimer, ProfilerTimer, CudaGraphTimer)


def isolates(isolation: bool, impls: Sequence[Impl], timer) -> bool:
    """Whether this sweep runs its plugins in a worker: isolation on, a plugin among the
    impls, and a timer the worker can build itself (a test's scripted timer is in-process)."""
    return (
        isolation and any(impl.kind == PLUGIN for impl in impls) and isinstance(timer, REAL_TIMERS)
    )


# ---------------------------------------------------------------- the worker process


@dataclass
class Reply:
    """One case's answer as received: the result message, the tensors' bytes, the batch
    windows by this process's clock."""

    result: dict
    tensors: list[bytes]
    windows: list[BatchWindow]
    span_ms: float
    busy_ms: float | None = None  # the worker ran or waited for a CPU, first beacon to result


def runqueue_wait_ms(pid: int | None) -> float:
    """How long the worker's main thread has waited, runnable, for a CPU (the kernel's
    ``/proc/PID/schedstat``, which the worker cannot forge); 0 where it cannot be read."""
    try:
        with open(f"/proc/{pid}/schedstat") as handle:
            return int(handle.read().split()[1]) / 1e6
    except (OSError, ValueError, IndexError):
        return 0.0


_TICK_MS = 1e3 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 10.0


def busy_ms(pid: int | None) -> float | None:
    """How long the worker's threads have run on a CPU or waited, runnable, for one (the
    kernel's counts, which the worker cannot forge): torch's intra-op threads compute while
    the main thread waits for them (the main thread alone read 197 ms for 497 ms of honest
    samples).  CPU time: the live threads' ``schedstat``, or the process's ``stat`` (in clock
    ticks, but with its ended threads) where that is more; waits: the live threads'.  None
    where not readable."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rpartition(")")[2].split()
        ticks_ms = (int(fields[11]) + int(fields[12])) * _TICK_MS  # utime + stime
    except (OSError, ValueError, IndexError):
        return None
    ran = waited = 0.0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as handle:
                counts = handle.read().split()
            ran, waited = ran + int(counts[0]) / 1e6, waited + int(counts[1]) / 1e6
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile: the process's stat still counts it
    return max(ran, ticks_ms) + waited


class Worker:
    """One worker process and its pipe."""

    def __init__(self, setup: WorkerSetup):
        context = worker_start.context_for(setup.options.device.type)
        first = self._start(context, setup)
        if (
            worker_start.forked(context) and first.get("kind") == "respawn"
        ):  # the fork server's torch is not this process's
            self.close()
            worker_start.give_up_forking()
            first = self._start(multiprocessing.get_context("spawn"), setup)
        if first.get("kind") == "failed":
            self.close()
            error = first.get("error")
            if isinstance(error, dict) and error.get("type") == UsageError.__name__:
                # load_factory refused a plugin (not callable, no argument): bad input, exit 2
                raise UsageError(data.text_field(error.get("message"), "a usage error"))
            raise WorkerError(f"the plugin worker could not start: {data.error_text(error)}")
        if first.get("kind") != "ready":
            self.close()
            raise WorkerError("the plugin worker did not start with the protocol's first message")

    def _start(self, context, setup: WorkerSetup) -> dict:
        self.conn, child = context.Pipe()
        target, args = worker_main, (child, setup)
        if worker_start.forked(context):
            target = worker_start.forked_worker_main
            args = (child, setup, worker_start.ParentStderr(), torch.__file__, dict(os.environ))
        self.process = context.Process(
            target=target, args=args, name="fi-attn-bench-plugin-worker", daemon=True
        )
        self.process.start()
        child.close()
        return self._message(READY_S, "while starting")

    def _raw(self, timeout_s: float, what: str, limit: int = MAX_MESSAGE_BYTES) -> bytes:
        if not self.conn.poll(timeout_s):
            raise WorkerError(f"the plugin worker sent nothing for {timeout_s:g} s {what} (hung?)")
        try:
            return self.conn.recv_bytes(limit)
        except (EOFError, ConnectionResetError):
            raise WorkerError(f"the plugin worker died {what} ({self._exit()})") from None
        except OSError as exc:
            raise WorkerError(
                f"the plugin worker sent a message over {limit} bytes {what}: {exc}"
            ) from None

    def _message(self, timeout_s: float, what: str) -> dict:
        raw = self._raw(timeout_s, what)
        try:
            found = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            raise WorkerError(f"the plugin worker sent a message that is not JSON {what}") from None
        if not isinstance(found, dict):
            raise WorkerError(
                f"the plugin worker sent a {type(found).__name__}, not an object, {what}"
            )
        return found

    def _exit(self) -> str:
        self.process.join(1.0)
        code = self.process.exitcode
        return "still running" if code is None else f"exit code {code}"

    def case(self, case: Mapping[str, int]) -> Reply:
        """Send one case and read its answer, timing the batch beacons."""
        nonce = secrets.token_hex(16)  # echoed by every message of the case's answer
        try:
            self.conn.send(("case", dict(case), nonce))
        except OSError as exc:  # the worker is gone (it ended itself after the last case)
            raise WorkerError(f"the plugin worker could not be sent the case: {exc}") from None
        windows: list[BatchWindow] = []
        begun: dict[int, float] = {}
        waited: dict[int, float] = {}
        busy_from: float | None = None  # the worker's busy_ms at the first beacon
        first = last = None
        while True:
            message = self._message(SILENCE_S, "during a case")
            if message.get("nonce") != nonce:
                raise WorkerError(
                    "the plugin worker sent a message without the case's nonce (a reply written "
                    "by something other than the worker's loop)"
                )
            now = time.perf_counter()
            kind = message.get("kind")
            if kind == "begin":
                begun[data.int_field(message, "session")] = now
                waited[data.int_field(message, "session")] = runqueue_wait_ms(self.process.pid)
                if busy_from is None:
                    busy_from = busy_ms(self.process.pid)
                first = now if first is None else first
            elif kind == "end":
                session = data.int_field(message, "session")
                if session not in begun:
                    raise WorkerError("the plugin worker ended a batch it never began")
                windows.append(
                    BatchWindow(
                        session,
                        (now - begun.pop(session)) * 1e3,
                        data.int_field(message, "samples"),
                        data.float_field(message, "sum_ms"),
                        max(data.float_field(message, "harness_ms"), 0.0),
                        preempted_ms=max(
                            runqueue_wait_ms(self.process.pid) - waited.pop(session, 0.0), 0.0
                        ),
                    )
                )
                last = now
            elif kind == "result":
                tensors = [
                    self._tensor_bytes(entry) for entry in data.list_field(message, "tensors")
                ]
                span = (last - first) * 1e3 if first is not None and last is not None else 0.0
                self._pong(nonce)
                return Reply(
                    message, tensors, windows, span, _busy_since(busy_from, self.process.pid)
                )
            else:
                raise WorkerError(f"the plugin worker sent an unknown message kind {kind!r}")

    def _pong(self, nonce: str) -> None:
        """The worker's loop must still be there to answer a ping after its reply: a reply
        written into the pipe by a plugin that then ended the worker (or left the loop stuck,
        or let its real reply follow) gets no pong."""
        try:
            self.conn.send(("ping",))
        except OSError as exc:
            raise WorkerError(f"the plugin worker was gone right after its reply: {exc}") from None
        answer = self._message(PONG_S, "after its reply")
        if answer.get("kind") != "pong" or answer.get("nonce") != nonce:
            raise WorkerError(
                "the plugin worker did not answer a ping after its reply with the case's nonce "
                "(a reply written by something other than the worker's loop)"
            )

    def _tensor_bytes(self, entry: object) -> bytes:
        if not isinstance(entry, dict):
            raise WorkerError("the plugin worker described a tensor with something else")
        declared = data.int_field(entry, "bytes")
        if not 0 <= declared <= MAX_TENSOR_BYTES:
            raise WorkerError(f"the plugin worker declared a tensor of {declared} bytes")
        raw = self._raw(SILENCE_S, "sending a tensor", limit=max(declared, 1))
        if len(raw) != declared:
            raise WorkerError(
                f"the plugin worker sent {len(raw)} bytes for a {declared}-byte tensor"
            )
        return raw

    def close(self) -> None:
        """Ask the worker to stop; end it if it does not (it is this process's child)."""
        try:
            self.conn.send(("stop",))
        except (OSError, ValueError):
            pass
        self.process.join(5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(5.0)
        self.conn.close()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)
        self.conn.close()


# ---------------------------------------------------------------- plain-data readers

# ---------------------------------------------------------------- the parent's runner


@dataclass
class IsolatedCaseRunner(CaseRunner):
    """``CaseRunner`` whose cases run in the plugin worker; each row is rebuilt and judged
    here (see the module docstring).  ``close()`` ends the worker."""

    worker: Worker | None = None
    reference_device: torch.device | None = None
    started: list[float] = field(default_factory=list)  # seconds each worker took to start

    def __call__(self, case: Mapping[str, int]) -> tuple[CaseResult, ...]:
        impls = self.options.impls
        try:
            reply = self._ask(case)
        except WorkerError as exc:
            self._drop_worker()
            return tuple(CaseResult(None, {}, error=exc) for _ in impls)
        except KeyboardInterrupt:  # the worker ignores Ctrl-C: end it now, not after a case
            self._drop_worker()
            raise
        try:
            return self._judged(case, reply)
        except Exception as exc:  # noqa: BLE001 - malformed data, or this process's reference failed
            return tuple(CaseResult(None, {}, error=exc) for _ in impls)
        finally:
            if reply.result.get("replaced"):
                self._drop_worker()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def _drop_worker(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def _ask(self, case) -> Reply:
        if self.worker is None:
            began = time.perf_counter()
            where = spec_reference(self.spec)
            if where is None:
                raise UsageError(
                    f"{self.spec.api}'s BenchmarkSpec was made at run time (it is no module's "
                    "top-level name): --impl plugins run in a worker process, which imports it "
                    "by name; define it at a module's top level, or run with --no-isolation"
                )
            setup = WorkerSetup(where, self.options, energy=_picklable(self.energy))
            self.worker = self.phases.run("worker start", lambda: Worker(setup))
            self.started.append(time.perf_counter() - began)
        return self.phases.run("worker case", lambda: self.worker.case(case))

    def _judged(self, case, reply: Reply) -> tuple[CaseResult, ...]:
        message = reply.result
        found = data.list_field(message, "impls")
        impls = self.options.impls
        if len(found) != len(impls):
            raise WorkerError(
                f"the plugin worker answered for {len(found)} of {len(impls)} implementations"
            )
        replaced = [
            data.text_field(n, "a replaced name") for n in data.list_field(message, "replaced")
        ]
        phases = message.get("phases")
        if isinstance(phases, dict):
            for name, seconds in phases.items():
                if (
                    isinstance(name, str)
                    and isinstance(seconds, (int, float))
                    and math.isfinite(seconds)
                ):
                    self.phases.add(f"worker {name[:40]}", max(float(seconds), 0.0))
        headers = data.list_field(message, "tensors")
        if len(headers) != len(reply.tensors):
            raise WorkerError("the plugin worker's tensors and their descriptions disagree")
        tensors = [data.tensor(h, raw) for h, raw in zip(headers, reply.tensors, strict=True)]
        expected = _LazyReference(self, case)
        rows = [
            self._row(case, impl, entry, tensors, expected, reply, replaced)
            for impl, entry in zip(impls, found, strict=True)
        ]
        return self._with_ratios(rows)

    def _row(self, case, impl: Impl, entry, tensors, expected, reply: Reply, replaced) -> _Row:
        if not isinstance(entry, dict) or entry.get("name") != impl.name:
            raise WorkerError(f"the plugin worker's answer for {impl.name} is missing or misnamed")
        columns = data.columns(entry.get("columns"))
        error = data.rebuilt_error(entry.get("error"))
        # this process writes the check columns from its own check, except for a row the
        # worker failed on its own check (a plugin may fail itself: its columns say how)
        failed_itself = type(error).__name__ == CorrectnessError.__name__
        if self.options.check and impl.checked and not failed_itself:
            for name in PARENT_COLUMNS:
                columns.pop(name, None)
        measurement = data.measurement(entry.get("measurement"))
        rounds = data.samples(entry.get("round_medians"), "round medians")
        if replaced:
            names = ", ".join(replaced[:6]) + (" ..." if len(replaced) > 6 else "")
            error = IntegrityError(
                TIMER_IDENTITY,
                f"timer or profiler functions changed during the case: {names} (the worker "
                "compares them with a snapshot taken before any plugin was imported)",
            )
        outputs = entry.get("outputs")
        if not isinstance(outputs, dict):
            raise WorkerError("the plugin worker sent outputs that are not an object")
        row = _Row(impl, columns, measurement, rounds, error, entry.get("session"))
        if row.error is None:
            self._check_outputs(row, outputs, tensors, expected)
        if row.error is None and measurement is not None and self._integrity_on():
            row.error = self._crosschecks(case, row, reply, expected)
        return row

    def _output(self, outputs, role: str, tensors) -> torch.Tensor | None:
        index = outputs.get(role)
        if index is None:
            return None
        if not isinstance(index, int) or not 0 <= index < len(tensors):
            raise WorkerError(f"the plugin worker named tensor {index!r} for its {role} output")
        return tensors[index]

    def _check_outputs(self, row: _Row, outputs, tensors, expected: _LazyReference) -> None:
        """The checked call's output and a timed call's, against this process's reference."""
        options = self.options
        if not (options.check and row.impl.checked):
            return
        reference = expected.value()
        if reference is None:
            return
        checked = self._output(outputs, CHECKED, tensors)
        if checked is None:
            row.error = WorkerError("the plugin worker sent no output of the checked call")
            return
        tolerance = checking_tolerance(options)
        outcome = _compare(checked, reference, tolerance)
        row.columns.update(
            check="pass" if outcome.passed else "fail",
            max_abs_err=float(outcome.max_abs_err),
            mismatch_frac=float(outcome.mismatch_frac),
            check_rtol=options.rtol,
            check_atol=options.atol,
        )
        if not outcome.passed:
            row.error = CorrectnessError(outcome.message)
            return
        timed = self._output(outputs, TIMED, tensors)
        if self._timed_output_due(row) and timed is None:
            row.error = WorkerError("the plugin worker sent no output of a timed call")
            return
        if timed is not None:
            found = _compare(timed, reference, tolerance)
            if not found.passed:
                row.error = IntegrityError(
                    TIMED_OUTPUT,
                    "a timed call's output, checked by the harness against its own reference: "
                    + found.message,
                )

    def _timed_output_due(self, row: _Row) -> bool:
        """A timed call's output is sent for this process's check where the timer reuses the
        checked call's values; under fresh values the worker checks sampled calls on theirs."""
        return (
            row.measurement is not None
            and self.options.integrity
            and row.impl.kind == PLUGIN
            and self.timer.name in IN_LOOP_TIMERS
            and self.timer.name not in FRESH_TIMERS
        )

    def _crosschecks(self, case, row: _Row, reply: Reply, expected) -> Exception | None:
        measurement = row.measurement
        on_cpu = self.options.device.type == "cpu"
        session = row.session if isinstance(row.session, int) else None
        if row.impl.kind == PLUGIN and session is None:
            return WorkerError("the plugin worker did not say which timer session timed it")
        failure = crosscheck.span_failure(reply.windows, reply.span_ms)
        if failure is None and on_cpu:
            failure = crosscheck.idle_failure(reply.windows, reply.busy_ms)
        if failure is None and session is not None:
            windows = reply.windows
            if on_cpu and self.options.integrity and self.timer.name in FRESH_TIMERS:
                costs = expected.harness_costs(self._sample_chance())
                windows = crosscheck.allow_harness_time(windows, session, costs)
            failure = crosscheck.clock_failure(windows, session, on_cpu)
            if failure is None and self._batches_are_the_samples(measurement):
                failure = crosscheck.batch_sum_failure(reply.windows, session, measurement.samples)
        if failure is not None:
            return IntegrityError(OWN_CLOCK, failure)
        floor, basis = self._floor(case)
        failure = crosscheck.floor_failure(measurement.median, floor, basis)
        return IntegrityError(WORK_FLOOR, failure) if failure else None

    def _sample_chance(self):
        """The chance the worker checks timed call n (``timing.fresh.SampleRate``), or None."""
        if self.timer.name not in SAMPLED_IN_LOOP:
            return None
        return SAMPLE_RATES["judge" if self.options.judge else "default"].chance

    def _batches_are_the_samples(self, measurement: Measurement) -> bool:
        """Whether the row's samples are exactly its batches' (not read from a profiler's
        recording afterwards, no throttled batch dropped)."""
        return self.timer.name != "profiler" and not measurement.discarded_samples

    def _floor(self, case) -> tuple[float, str]:
        io_bytes, flops = case_work(self.spec, case, self.options)
        if self.options.device.type == "cpu":
            threads = max(torch.get_num_threads(), 1)
            bandwidth = crosscheck.CPU_PEAK_GB_S_PER_THREAD * threads
            tflops = crosscheck.CPU_PEAK_TFLOPS_PER_THREAD * threads
            return crosscheck.floor_ms(io_bytes, flops, bandwidth, tflops), (
                f"the CPU floor's declared {bandwidth:g} GB/s and {tflops:g} TFLOP/s"
            )
        bandwidth, tflops, source = _device_peaks(self.options)
        if self.timer.l2 == "warm":
            bandwidth *= crosscheck.WARM_L2_BANDWIDTH_FACTOR
        return crosscheck.floor_ms(io_bytes, flops, bandwidth, tflops), (
            f"{bandwidth:g} GB/s and {tflops:g} TFLOP/s ({source}, L2 {self.timer.l2})"
        )

    def _with_ratios(self, rows: Sequence[_Row]) -> tuple[CaseResult, ...]:
        """Each row's result; head to head, the paired ratio from the rounds' medians, and
        a row whose medians' ratio disagrees with it fails."""
        options = self.options
        base = rows[options.baseline] if options.paired else None
        for row in rows:
            if base is None or row is base or row.error is not None or row.measurement is None:
                continue
            row.ratio = None
            if base.error is None and base.measurement is not None:
                row.ratio = paired_ratio(row.rounds, base.rounds, options.timing.same_within_pct)
            if row.ratio is not None and row.impl.kind == PLUGIN and self._integrity_on():
                failure = crosscheck.paired_failure(
                    row.measurement.samples, base.measurement.samples, row.ratio
                )
                if failure is not None:
                    row.error = IntegrityError(PAIRED_RATIO, failure)
        return tuple(self._result(row, base) for row in rows)

    def _result(self, row: _Row, base: _Row | None) -> CaseResult:
        columns = {k: v for k, v in row.columns.items() if not k.startswith("paired_ratio")}
        if row.error is not None or row.measurement is None:
            columns.update(self._integrity_columns(row.error))
            return CaseResult(None, columns, error=row.error or WorkerError("no measurement"))
        columns.update(self._integrity_columns(None))
        if row.ratio is not None and base is not None:
            columns.update(row.ratio.columns(base.impl.name))
        result = self._finished(row.measurement, columns)
        return replace(result, ratio=row.ratio, round_medians_ms=row.rounds)


@dataclass
class _Row:
    impl: Impl
    columns: dict[str, object]
    measurement: Measurement | None
    rounds: tuple[float, ...]
    error: Exception | None
    session: object
    ratio: object = None


class _LazyReference:
    """The case's float32 reference, computed here once when a row needs it (on the
    device, after the worker finished the case)."""

    def __init__(self, runner: IsolatedCaseRunner, case):
        self.runner, self.case, self.found, self.done = runner, case, None, False
        self.prepared = None
        self.reference_ms = 0.0
        self.costs: crosscheck.HarnessCosts | None = None

    def value(self) -> torch.Tensor | None:
        if not self.done:
            self.done = True
            runner = self.runner
            options, spec = runner.options, runner.spec
            torch.manual_seed(case_seed(options.seed, self.case, spec.case_fields))
            settings = impl_settings(TORCH_IMPL, options.settings(self.case, spec.case_fields))
            self.prepared = runner.phases.run(
                "parent reference", lambda: prepare_case(spec, self.case, settings, None)
            )
            if self.prepared.reference is None:
                return None
            started = time.perf_counter()
            found = runner.phases.run("parent reference", self.prepared.reference)
            self.found = found.detach().to("cpu")
            self.reference_ms = (time.perf_counter() - started) * 1e3
        return self.found

    def harness_costs(self, chance) -> crosscheck.HarnessCosts:
        """What a refresh of fresh values (median of 5, on this process's own copy of the
        inputs) and a reference call cost here, to bound the worker's time between calls."""
        if self.costs is None:
            self.value()
            refresh_ms = 0.0
            inputs = getattr(self.prepared, "inputs", None)
            tensors = floating_tensors(inputs) if inputs is not None else []
            if tensors:
                refresher = Refresher.of(inputs, tensors, self.runner.options.device)
                times = []
                for _ in range(5):
                    started = time.perf_counter()
                    refresher()
                    times.append((time.perf_counter() - started) * 1e3)
                refresh_ms = statistics.median(times)
            self.costs = crosscheck.HarnessCosts(refresh_ms, self.reference_ms, chance)
        return self.costs


def _busy_since(start: float | None, pid: int | None) -> float | None:
    """The worker's CPU time plus runqueue wait since ``start`` (None: not readable); 0 when
    the worker was gone when its result came (it ran no more)."""
    if start is None:
        return None
    now = busy_ms(pid)
    return 0.0 if now is None else max(now - start, 0.0)


def _picklable(value):
    """``value`` where it pickles (a test's stand-in counter), else None: the worker then
    opens the device's own (NVML handles do not cross processes)."""
    try:
        pickle.dumps(value)
    except Exception:  # noqa: BLE001 - any reason it cannot cross: the worker opens its own
        return None
    return value


def _compare(actual: torch.Tensor, expected: torch.Tensor, tolerance):
    if tuple(actual.shape) != tuple(expected.shape):
        raise WorkerError(
            f"the plugin worker sent an output of shape {list(actual.shape)}, the reference "
            f"has {list(expected.shape)}"
        )
    return check_output(actual, expected, tolerance)


def _device_peaks(options) -> tuple[float, float, str]:
    """The highest bandwidth and rate any source knows for this GPU (the floor is
    conservative): published, measured or given."""
    name = device_peaks.device_name(options.device)
    found = [
        p
        for p in (
            device_peaks.match_published(name, options.dtype_name),
            device_peaks.resolve_peaks(
                name,
                options.dtype_name,
                bandwidth_override=options.peak_bandwidth,
                tflops_override=options.peak_tflops,
            ),
        )
        if p is not None
    ]
    bandwidth = max(
        (p.bandwidth_GB_s for p in found if math.isfinite(p.bandwidth_GB_s)), default=0.0
    )
    tflops = max((p.tflops for p in found if math.isfinite(p.tflops)), default=0.0)
    return bandwidth, tflops, f"peaks of {name}" if found else f"no peaks known for {name}"


def case_runner_class(isolation: bool, impls: Sequence[Impl], timer) -> type[CaseRunner]:
    """The runner a sweep measures with (``isolates``); given the two settings, not the run
    options, so the request's path does not pass through this module."""
    return IsolatedCaseRunner if isolates(isolation, impls, timer) else CaseRunner
