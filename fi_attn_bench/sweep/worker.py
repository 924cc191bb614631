"""The plugin worker: a process of its own (spawn) where ``--impl`` plugins run.

It runs the harness's own per-case code (``CaseRunner``: prepare, warm up, check, time, the
integrity checks) on the cases the parent sends, and answers with plain data only: JSON
messages and the raw bytes of the output tensors the parent checks itself
(``fi_attn_bench.sweep.isolation`` reads and validates them).  Around every timed batch it
sends a beacon, so that the parent can hold the samples against its own clock.  Before it
imports a plugin it takes a snapshot of the timer and profiler functions
(``timing.guard``) and compares it before and after each case.

Nothing the plugin makes crosses back as an object: the worker converts numbers and texts to
JSON itself, and a plugin that replaces this module's functions is still judged by what the
parent receives.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import pickle
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace

import torch

from fi_attn_bench.backends.impls import PLUGIN, Impl, load_factory
from fi_attn_bench.cases.spec import BenchmarkSpec, Prepared
from fi_attn_bench.device.energy import EnergyAccess, open_energy_counter
from fi_attn_bench.device.power import open_power_monitor
from fi_attn_bench.device.telemetry import open_telemetry
from fi_attn_bench.sweep.case import CaseResult, CaseRunner, CorrectnessError, verify_output
from fi_attn_bench.sweep.run_options import RunOptions
from fi_attn_bench.timing import guard
from fi_attn_bench.timing.integrity import IntegrityError, IntegrityProbe
from fi_attn_bench.timing.statistics import Batch, Measurement
from fi_attn_bench.timing.timers import Timer, make_timer

CHECKED, TIMED = (
    "checked",
    "timed",
)  # the outputs the parent checks: the checked call's, a timed one's


@dataclass(frozen=True)
class WorkerSetup:
    """What the parent hands the worker once (pickled by the parent, a trusted direction)."""

    spec: SpecReference
    options: RunOptions  # plugin impls without their factory: the worker imports them
    timer: Timer | None = None  # a test's injected timer; None: the one make_timer builds
    energy: EnergyAccess | None = None  # the sweep's energy counter if it pickles (a test's)


def spec_reference(spec: BenchmarkSpec) -> SpecReference | None:
    """Where ``spec`` can be imported from by name (a spec holds lambdas: not picklable), or
    a spec of the same API and script that can, with the fields that differ (``--batch``
    adds a case field) where those pickle.  A script's own spec is its ``__mp_main__`` in
    the worker (spawn imports the script again under that name, which is why a script must
    call main_for under ``__name__ == "__main__"``)."""
    found: list[SpecReference] = []
    for name, module in list(sys.modules.items()):
        for attr, value in list(vars(module).items()) if module is not None else ():
            if type(value) is not BenchmarkSpec:  # type(): no attribute of a module is asked
                continue
            where = "__mp_main__" if name == "__main__" else name
            if value is spec:
                found.insert(0, SpecReference(where, attr))
            elif (value.api, value.script) == (spec.api, spec.script):
                changed = {
                    f.name: getattr(spec, f.name)
                    for f in fields(spec)
                    if getattr(spec, f.name) is not getattr(value, f.name)
                    and getattr(spec, f.name) != getattr(value, f.name)
                }
                found.append(SpecReference(where, attr, changed))
    for reference in sorted(found, key=lambda r: (bool(r.changed), r.module == "__mp_main__")):
        try:
            pickle.dumps(reference.changed)
        except Exception:  # noqa: BLE001 - a field made at run time (a closure) cannot cross
            continue
        return reference
    return None


@dataclass(frozen=True)
class SpecReference:
    """A BenchmarkSpec by the module and attribute it is imported from, and fields replaced."""

    module: str
    attr: str
    changed: Mapping[str, object] = field(default_factory=dict)

    def spec(self) -> BenchmarkSpec:
        base = getattr(importlib.import_module(self.module), self.attr)
        return replace(base, **self.changed) if self.changed else base


CASE_NONCE: dict[str, str] = {}
"""The nonce of the case being answered, echoed by its messages: a reply written into the pipe
by a plugin that does not read the worker's memory lacks it."""


def send_json(conn, payload: Mapping[str, object]) -> None:
    if "nonce" in CASE_NONCE:
        payload = {**payload, "nonce": CASE_NONCE["nonce"]}
    conn.send_bytes(json.dumps(payload, allow_nan=False).encode())


class BeaconSession:
    """A timer session that tells the parent when each batch starts and ends."""

    def __init__(self, inner, conn, index: int, fn: object = None):
        self._inner, self._conn, self._index, self._fn = inner, conn, index, fn

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def batch(self, calls: int) -> Batch:
        send_json(self._conn, {"kind": "begin", "session": self._index})
        harness_s = getattr(self._fn, "harness_s", 0.0)  # fresh values' refreshes and checks
        found = self._inner.batch(calls)
        total = float(sum(found.samples_ms))
        harness_ms = (getattr(self._fn, "harness_s", 0.0) - harness_s) * 1e3
        send_json(
            self._conn,
            {"kind": "end", "session": self._index, "samples": len(found.samples_ms),
             "sum_ms": total if math.isfinite(total) else -1.0,
             "harness_ms": harness_ms if math.isfinite(harness_ms) else -1.0},
        )  # fmt: skip
        return found

    def record(self, loop: Callable[[], None]):
        return self._inner.record(loop)


class BeaconTimer:
    """The worker's timer: the real one, its sessions wrapped in ``BeaconSession``."""

    def __init__(self, inner: Timer, conn):
        self._inner, self._conn = inner, conn
        self.opened: list[tuple[object, BeaconSession]] = []  # (the fn it times, session)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    def open(self, fn, estimate_ms):
        opened = self._inner.open(fn, estimate_ms)
        session = BeaconSession(opened, self._conn, len(self.opened), fn)
        self.opened.append((fn, session))
        return session

    def calibrate_rounds(self, sessions) -> None:
        return self._inner.calibrate_rounds([s._inner for s in sessions])

    def record_rounds(self, sessions, loop):
        return self._inner.record_rounds([s._inner for s in sessions], loop)

    def session_of(self, fns: Sequence[object]) -> int | None:
        """The index of the session that timed one of ``fns``."""
        for index, (fn, _) in enumerate(self.opened):
            if any(fn is candidate for candidate in fns):
                return index
        return None


class WorkerCaseRunner(CaseRunner):
    """``CaseRunner`` that keeps, per implementation, what the parent checks: the checked
    call's output, the poisoned timed call's copy, and which timer session timed it.  The
    rows' statistics are left to the parent (``_finished`` adds nothing)."""

    def begin_case(self) -> None:
        self.kept: dict[str, dict[str, object]] = {}
        self._current = ""

    def _prepare(self, case, impl: Impl, columns, shared: Prepared | None) -> Prepared:
        self._current = impl.name
        prepared = super()._prepare(case, impl, columns, shared)
        self.kept[impl.name] = {"run": prepared.run}
        return prepared

    def _probe(self, prepared: Prepared) -> IntegrityProbe | None:
        probe = super()._probe(prepared)
        self.kept.setdefault(self._current, {})["probe"] = probe
        return probe

    def _checker(self, prepared, impl: Impl, columns, probe=None):
        def check() -> None:
            found = verify_output(prepared, self.options, impl, keep=True)
            self.kept.setdefault(impl.name, {})[CHECKED] = found.output
            if probe is not None:
                probe.verified = found.output
            columns.update(found.columns)
            if found.failure is not None:
                raise CorrectnessError(found.failure)

        return check

    def _finished(self, measurement: Measurement, columns: dict[str, object]) -> CaseResult:
        return CaseResult(measurement, columns)

    def outputs(self, name: str) -> dict[str, torch.Tensor]:
        kept = self.kept.get(name, {})
        found = {}
        if isinstance(kept.get(CHECKED), torch.Tensor):
            found[CHECKED] = kept[CHECKED]
        probe = kept.get("probe")
        sentinel = getattr(probe, "sentinel", None)
        if sentinel is not None and isinstance(sentinel.snapshot, torch.Tensor):
            found[TIMED] = sentinel.snapshot
        return found

    def timed_fns(self, name: str) -> list[object]:
        kept = self.kept.get(name, {})
        probe = kept.get("probe")
        # run() itself, or what the integrity probe wraps it in: the poisoning sentinel, or
        # the fresh values' caller (timing.fresh.FreshCalls)
        return [kept.get("run"), getattr(probe, "sentinel", None), getattr(probe, "fresh", None)]


def _cell(value: object) -> object:
    """A column value as JSON holds it (anything else becomes its text)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return str(value)


def _error(exc: BaseException | None) -> dict[str, object] | None:
    if exc is None:
        return None
    check = exc.check if isinstance(exc, IntegrityError) else None
    return {"type": type(exc).__name__, "message": str(exc), "check": check}


def _measurement(found: Measurement | None) -> dict[str, object] | None:
    if found is None:
        return None
    energy = found.energy
    return {
        "samples": [float(s) for s in found.samples],
        "timer": found.timer,
        "l2": found.l2,
        "kernels": list(found.kernels),
        "runs_per_sample": int(found.runs_per_sample),
        "per_call": bool(found.per_call),
        "batch_gpu_ms": float(found.batch_gpu_ms),
        "starved_calls": int(found.starved_calls),
        "throttled_samples": int(found.throttled_samples),
        "discarded_samples": int(found.discarded_samples),
        "energy": None
        if energy is None
        else {
            "energy_mj": _cell(energy.energy_mj),
            "avg_power_w": _cell(energy.avg_power_w),
            "windows": int(energy.windows),
            "note": str(energy.note),
        },
    }


def _send_case(conn, runner: WorkerCaseRunner, timer: BeaconTimer, results, changed) -> None:
    tensors: list[torch.Tensor] = []
    impls = []
    for impl, result in zip(runner.options.impls, results, strict=True):
        outputs = {}
        for role, tensor in runner.outputs(impl.name).items():
            outputs[role] = len(tensors)
            tensors.append(tensor.detach().to("cpu").contiguous())
        impls.append(
            {
                "name": impl.name,
                "error": _error(result.error),
                "columns": {str(k): _cell(v) for k, v in result.columns.items()},
                "measurement": _measurement(result.measurement),
                "round_medians": [float(v) for v in result.round_medians_ms],
                "session": timer.session_of(runner.timed_fns(impl.name)),
                "outputs": outputs,
            }
        )
    header = [
        {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "bytes": t.nbytes}
        for t in tensors
    ]
    phases = {k: float(v) for k, v in runner.phases.seconds.items()}
    send_json(
        conn,
        {
            "kind": "result",
            "impls": impls,
            "tensors": header,
            "replaced": changed,
            "phases": phases,
        },
    )
    for tensor in tensors:
        conn.send_bytes(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")


def _loaded(impl: Impl) -> Impl:
    if impl.kind != PLUGIN or impl.factory is not None or (impl.judged and impl.screened):
        return impl  # a plugin --judge screened out is never imported: its rows fail
    return replace(impl, factory=load_factory(impl.target))


def worker_main(conn, setup: WorkerSetup) -> None:
    """The worker's life: snapshot, import the plugins, then one case per message until
    ``("stop",)`` or the pipe closes."""
    guarded = (sys.modules[__name__], sys.modules[CaseRunner.__module__])
    before = guard.snapshot(guarded)  # before any plugin code runs
    _quiet_stdout()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the sweep's: it ends this process
    options = setup.options
    try:
        if options.cpu_threads is not None:
            torch.set_num_threads(options.cpu_threads)
        options = replace(options, chosen_impls=tuple(_loaded(i) for i in options.impls))
        inner = setup.timer or make_timer(options.timing, options.device, lambda _: None)
        inner.self_check()
        timer = BeaconTimer(inner, conn)
        energy = setup.energy or (
            open_energy_counter(options.device)
            if options.energy
            else EnergyAccess(None, reason="not read (--no-energy)")
        )
        runner = WorkerCaseRunner(
            setup.spec.spec(),
            options,
            timer,
            lambda _: None,
            power=open_power_monitor(options.device),
            telemetry=open_telemetry(options.device),
            energy=energy,
        )
    except BaseException as exc:  # noqa: BLE001 - a plugin's import may even raise SystemExit
        send_json(conn, {"kind": "failed", "error": _error(exc)})
        return
    send_json(conn, {"kind": "ready"})
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message[0] == "ping":  # after a case's reply: this loop is still the one answering
            send_json(conn, {"kind": "pong"})
            continue
        if message[0] != "case":
            return
        CASE_NONCE["nonce"] = str(message[2]) if len(message) > 2 else ""
        runner.begin_case()
        timer.opened.clear()
        runner.phases.seconds.clear()
        changed = guard.replaced(before, guarded)
        results = _case_results(runner, message[1]) if not changed else ()
        changed = changed or guard.replaced(before, guarded)
        _send_case(conn, runner, timer, results or _nothing(options), changed)
        if changed:  # this process's timing can no longer be trusted: the parent starts anew
            try:
                if conn.recv()[0] == "ping":  # the reply above is still this loop's
                    send_json(conn, {"kind": "pong"})
            except (EOFError, OSError):
                pass
            return


def _quiet_stdout() -> None:
    """What the worker prints goes to stderr: the sweep's stdout may be its CSV (--output -),
    which only the sweep writes."""
    sys.stdout.flush()
    os.dup2(2, 1)
    sys.stdout = sys.stderr


def _case_results(runner: WorkerCaseRunner, case) -> tuple[CaseResult, ...]:
    return runner(case)


def _nothing(options: RunOptions) -> tuple[CaseResult, ...]:
    return tuple(CaseResult(None, {}) for _ in options.impls)
