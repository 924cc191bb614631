"""The timer and profiler functions a measurement trusts, and whether any was replaced.

A worker process (``fi_attn_bench.sweep.worker``) takes a ``snapshot`` before it imports a
plugin and compares it before and after each case (``replaced``): a plugin that swaps
``time.perf_counter``, ``torch.cuda.Event.elapsed_time``, the profiler's entry points or
any function or method of the harness's timing modules fails the case.  This catches
Python-level patches by assignment, a function's code object swapped in place (``__code__``),
the stdlib and torch functions the worker reports and checks through (``json``, the pipe's
``Connection``, ``torch.Tensor``'s methods) and a torch function or dispatch mode left on; it
cannot see memory written through ctypes, nor a plugin that rewrites this module's own code
first (docs/INTEGRITY.md, threat model).
"""

from __future__ import annotations

import importlib
import inspect
import time
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType

import torch

from fi_attn_bench.timing.fresh import active_modes

HARNESS_MODULES = (
    "fi_attn_bench.timing.timers",
    "fi_attn_bench.timing.loop",
    "fi_attn_bench.timing.paired",
    "fi_attn_bench.timing.trace",
    "fi_attn_bench.timing.queue",
    "fi_attn_bench.timing.statistics",
    "fi_attn_bench.timing.integrity",
    "fi_attn_bench.timing.l2",
    "fi_attn_bench.timing.profiled",
    "fi_attn_bench.timing.guard",
    "fi_attn_bench.timing.fresh",
    "fi_attn_bench.timing.cpu_times",
    "fi_attn_bench.cases.checking",
    "fi_attn_bench.cases.reference",
    "fi_attn_bench.cases.inputs",
    "fi_attn_bench.device.sync",
)
"""Modules whose functions, classes and methods time, check or report a measurement (the
fresh values' refresher and the reference included: a no-op refresher or a reference that
echoes the plugin disarms the sampled checks)."""

REPORTING_MODULES = ("json", "json.encoder", "multiprocessing.connection", "torch.nn.functional")
"""Modules outside the harness whose functions the worker reports or checks through: a
plugin that rewrites ``Connection.send_bytes`` or ``json.dumps`` edits the worker's answer."""

TENSOR_CLASSES = (torch.Tensor, torch._C.TensorBase)
"""Every method of these (clone, copy_, the comparisons): the checks read outputs with them."""

CLOCK_NAMES = (
    "perf_counter",
    "perf_counter_ns",
    "monotonic",
    "monotonic_ns",
    "process_time",
    "thread_time",
    "time",
    "sleep",
)


def _members(owner: object) -> Iterator[tuple[str, object]]:
    """The attributes of a class as its ``__dict__`` holds them (no descriptor lookup)."""
    for name, value in vars(owner).items():
        if inspect.isfunction(value) or isinstance(value, (staticmethod, classmethod, property)):
            yield name, value


def _with_code(items: Iterator[tuple[str, object]]) -> Iterator[tuple[str, object]]:
    """Each item, and for a function (or the one a static, class method or property wraps) its
    code object and defaults: assigning ``__code__`` keeps the function's identity."""
    for name, value in items:
        yield name, value
        inner = [value]
        if isinstance(value, (staticmethod, classmethod)):
            inner = [value.__func__]
        elif isinstance(value, property):
            inner = [value.fget, value.fset, value.fdel]
        for index, function in enumerate(inner):
            if inspect.isfunction(function):
                yield f"{name}.<{index}>.__code__", function.__code__
                yield f"{name}.<{index}>.__defaults__", function.__defaults__
                yield f"{name}.<{index}>.__kwdefaults__", function.__kwdefaults__


def _module_callables(module: ModuleType) -> Iterator[tuple[str, object]]:
    for name, value in list(vars(module).items()):
        if inspect.isfunction(value) or inspect.isclass(value) or inspect.isbuiltin(value):
            yield f"{module.__name__}.{name}", value
            if inspect.isclass(value) and value.__module__ == module.__name__:
                for member, found in _members(value):
                    yield f"{module.__name__}.{name}.{member}", found


def _torch_timing() -> Iterator[tuple[str, object]]:
    yield "torch.cuda.synchronize", torch.cuda.synchronize
    yield "torch.cuda.Event", torch.cuda.Event
    for name, value in _members(torch.cuda.Event):
        yield f"torch.cuda.Event.{name}", value
    profiler = importlib.import_module("torch.profiler")
    for name in ("profile", "ProfilerActivity", "record_function", "schedule"):
        found = getattr(profiler, name, None)
        if found is not None:
            yield f"torch.profiler.{name}", found
    for owner in inspect.getmro(profiler.profile):
        if owner.__module__.startswith("torch"):
            for name, value in _members(owner):
                yield f"{owner.__module__}.{owner.__qualname__}.{name}", value
    autograd = importlib.import_module("torch.autograd.profiler")
    yield "torch.autograd.profiler.profile", autograd.profile
    for name, value in _members(autograd.profile):
        yield f"torch.autograd.profiler.profile.{name}", value


def snapshot(modules: Sequence[ModuleType] = ()) -> dict[str, object]:
    """Every guarded object by its dotted name (the objects themselves, so that an id is
    never reused by a replacement); ``modules``: more of the caller's to guard (a room above
    this one cannot be imported from here)."""
    found: dict[str, object] = {f"time.{name}": getattr(time, name) for name in CLOCK_NAMES}
    found.update(_torch_timing())
    for name in HARNESS_MODULES + REPORTING_MODULES:
        found.update(_with_code(_module_callables(importlib.import_module(name))))
    for module in modules:
        found.update(_with_code(_module_callables(module)))
    for owner in TENSOR_CLASSES:
        for name, value in list(vars(owner).items()):
            found[f"{owner.__module__}.{owner.__qualname__}.{name}"] = value
    return found


def replaced(before: Mapping[str, object], modules: Sequence[ModuleType] = ()) -> list[str]:
    """The names whose object is not the one ``before`` holds (a missing one counts)."""
    now = snapshot(modules)
    missing = object()
    changed = sorted(name for name, value in before.items() if now.get(name, missing) is not value)
    return changed + active_modes()
