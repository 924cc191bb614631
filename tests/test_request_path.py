"""The parsed request's path, traced on a real CPU sweep: from the command line to the CSV
writer it enters at most six modules of the package, never goes back up a floor, never climbs
back to a module the path passed before, and revisits no module it had left (bench_all adds
its own two: the suite and its run record).

Every call a package function receives the request in (``SweepRequest``) or its resolved form
(``RunOptions``) is recorded with the package module that passed it; a method of the value
itself is the value's own behaviour, not a module it visits."""

from __future__ import annotations

import inspect
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import SimpleNamespace

from test_structure import FLOORS, room

import bench_batch_decode
from fi_attn_bench import suite
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.sweep.request import SweepRequest
from fi_attn_bench.sweep.run_options import RunOptions

MAX_MODULES = 6
PACKAGE = "fi_attn_bench"
CARRIERS = (SweepRequest, RunOptions)


@dataclass(frozen=True)
class Handover:
    """A call that hands the request on: the package module that made it and the one entered."""

    caller: str
    callee: str
    function: str


def _package_caller(frame) -> str:
    """The nearest package module up the stack (a dataclass ``replace`` or a ``with`` block
    in between is the standard library's, not a module the request visits)."""
    while frame is not None and not frame.f_globals.get("__name__", "").startswith(PACKAGE):
        frame = frame.f_back
    return frame.f_globals["__name__"] if frame is not None else ""


def carries(value: object, depth: int = 2) -> bool:
    """The request itself, or a list or tuple holding it (bench_all's (spec, request) pairs)."""
    if isinstance(value, CARRIERS):
        return True
    if depth and isinstance(value, (list, tuple)):
        return any(carries(item, depth - 1) for item in value)
    return False


def _handover(frame) -> Handover | None:
    module = frame.f_globals.get("__name__", "")
    if not module.startswith(PACKAGE):
        return None
    code = frame.f_code
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    values = [frame.f_locals.get(name) for name in names]
    if values and isinstance(values[0], CARRIERS) and names[0] == "self":
        return None  # the value's own method
    if not any(carries(value) for value in values):
        return None
    return Handover(_package_caller(frame.f_back), module, code.co_name)


_SUSPENDABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


@contextmanager
def traced() -> Iterator[list[Handover]]:
    found: list[Handover] = []
    started: set = set()  # generator frames already entered: a resumption is the same call

    def profile(frame, event, arg):
        if event != "call" or frame in started:
            return
        if frame.f_code.co_flags & _SUSPENDABLE:
            started.add(frame)
        if (handover := _handover(frame)) is not None:
            found.append(handover)

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield found
    finally:
        sys.setprofile(None)
        threading.setprofile(None)


def modules_entered(handovers: list[Handover]) -> list[str]:
    """The package modules the request enters, in the order it first enters them."""
    return list(dict.fromkeys(h.callee for h in handovers))


def upward_handovers(handovers: list[Handover], floors: dict[str, int]) -> list[str]:
    """``caller -> callee`` for each handover from a room to a room on a higher floor."""
    return sorted(
        {
            f"{h.caller} -> {h.callee}.{h.function}"
            for h in handovers
            if h.caller and floors[room(h.callee)] > floors[room(h.caller)]
        }
    )


def climbs_back(handovers: list[Handover]) -> list[str]:
    """``caller -> callee.function`` for each handover into a module the path entered before
    its caller (a call back up the path, whatever the floors)."""
    order = {module: index for index, module in enumerate(modules_entered(handovers))}
    return sorted(
        {
            f"{h.caller} -> {h.callee}.{h.function}"
            for h in handovers
            if h.caller in order and order[h.callee] < order[h.caller]
        }
    )


def revisits(handovers: list[Handover]) -> list[str]:
    """``callee.function`` for each handover into a module the request had left: entered
    before, and handed to another module since (a loop calling one module is one stay)."""
    found, entered, last = set(), set(), ""
    for h in handovers:
        if h.caller == h.callee:  # within a module: no module entered
            continue
        if h.callee != last and h.callee in entered:
            found.add(f"{h.callee}.{h.function}")
        entered.add(h.callee)
        last = h.callee
    return sorted(found)


def test_climbs_back_and_revisits_on_a_made_up_path():
    cl, run, case, options = (
        "fi_attn_bench.command_line",
        "fi_attn_bench.sweep.run",
        "fi_attn_bench.sweep.case",
        "fi_attn_bench.sweep.run_options",
    )
    straight = [
        Handover("", cl, "main"),
        Handover(cl, options, "resolve"),
        Handover(options, options, "_part"),  # within a module
        Handover(cl, run, "run"),
        Handover(run, case, "measure"),
        Handover(run, case, "measure"),  # a loop over cases stays in the module
    ]
    assert climbs_back(straight) == [] and revisits(straight) == []
    back = [*straight, Handover(run, options, "repro"), Handover(run, case, "measure")]
    assert climbs_back(back) == [f"{run} -> {options}.repro"]
    assert revisits(back) == [f"{case}.measure", f"{options}.repro"]
    again = [*straight[:2], Handover(cl, run, "run"), Handover(cl, options, "log")]
    assert climbs_back(again) == []  # the caller entered the module itself, before
    assert revisits(again) == [f"{options}.log"]


def test_a_resumed_generator_is_the_call_it_continues():
    def carried(options):
        yield
        yield

    options = object.__new__(RunOptions)
    module = sys.modules[RunOptions.__module__]
    generator = type(carried)(carried.__code__, module.__dict__)(options)
    with traced() as handovers:
        for _ in generator:
            pass
    assert [h.function for h in handovers] == ["carried"]


def test_upward_handovers_and_modules_entered_on_a_made_up_path():
    path = [
        Handover("fi_attn_bench.command_line", "fi_attn_bench.sweep.run", "run"),
        Handover("fi_attn_bench.sweep.run", "fi_attn_bench.sweep.case", "measure"),
        Handover("fi_attn_bench.sweep.case", "fi_attn_bench.command_line", "callback"),
    ]
    assert modules_entered(path) == [
        "fi_attn_bench.sweep.run",
        "fi_attn_bench.sweep.case",
        "fi_attn_bench.command_line",
    ]
    assert upward_handovers(path, FLOORS) == [
        "fi_attn_bench.sweep.case -> fi_attn_bench.command_line.callback"
    ]
    assert upward_handovers(path[:2], FLOORS) == []


def made_up_frame(module: str, arguments: dict[str, object]) -> SimpleNamespace:
    code = SimpleNamespace(
        co_varnames=tuple(arguments), co_argcount=len(arguments), co_kwonlyargcount=0, co_name="f"
    )
    return SimpleNamespace(
        f_globals={"__name__": module}, f_code=code, f_locals=arguments, f_back=None
    )


def test_a_method_of_the_request_is_no_visit_and_an_argument_is():
    options = object.__new__(RunOptions)
    case = "fi_attn_bench.sweep.case"
    assert _handover(made_up_frame(case, {"self": options})) is None
    assert _handover(made_up_frame(case, {"options": options})) == Handover("", case, "f")
    assert _handover(made_up_frame(case, {"width": 3})) is None
    assert _handover(made_up_frame(case, {"runs": [("spec", options)]})) is not None
    assert _handover(made_up_frame("dataclasses", {"options": options})) is None


CPU_ARGV = ["--backend", "torch", "--device", "cpu", "--preset", "cpu", "--seed", "0"]
CPU_ARGV += ["--filter", "batch_size=1", "--max-time-per-case", "0.05"]


def script_path(tmp_path) -> list[Handover]:
    output = tmp_path / "decode.csv"
    with traced() as handovers:
        code = bench_batch_decode.main([*CPU_ARGV, "--output", str(output)])
    assert code == 0
    assert len(read_stored_rows(str(output)).rows) == 2  # the sweep reached the CSV writer
    return handovers


def test_the_request_enters_at_most_six_modules_and_never_goes_back_up(tmp_path):
    handovers = script_path(tmp_path)
    entered = modules_entered(handovers)
    assert entered[0] == "fi_attn_bench.command_line"  # parsed there, then handed down
    assert len(entered) <= MAX_MODULES, entered
    assert upward_handovers(handovers, FLOORS) == []
    assert climbs_back(handovers) == []
    assert revisits(handovers) == []


def test_bench_all_adds_only_its_own_rooms_to_the_path_and_never_goes_back_up(tmp_path):
    """bench_all hands the same requests on, plus to its own plan and run record."""
    argv = [*CPU_ARGV, "--scripts", "bench_batch_decode", "--output-dir", str(tmp_path / "all")]
    with traced() as handovers:
        assert suite.main(argv) == 0
    alone = set(modules_entered(script_path(tmp_path)))
    extra = set(modules_entered(handovers)) - alone
    assert extra <= {"fi_attn_bench.suite", "fi_attn_bench.suite_record"}, extra
    assert upward_handovers(handovers, FLOORS) == []
    assert climbs_back(handovers) == []
