"""CUPTI activity records of this process's GPU work, through NVIDIA's ``cupti-python`` (the
``[nvidia]`` extra), and the marker that brackets each timed call.

Only the device-side kinds are enabled: kernels (``CONCURRENT_KERNEL``), memsets and memcpys.
Runtime and driver API records are not: tracing the API as well distorts launches
(tile-ai/TileOPs #1891 read a three-kernel call as 6517 us against 297.6 us).  A kernel
record's ``correlation_id`` is the number CUPTI gave the API call that launched it, in launch
order, so the work one call launched lies between the correlation ids of two markers launched
right before and after it, whichever stream it ran on and whenever it ran.  The marker is a
one-byte-value ``cuMemsetD8Async`` of ``MARKER_BYTES`` on a buffer of its own: a memset
record carries its size and value, so markers are told apart from run()'s work and numbered.
"""

from __future__ import annotations

import ctypes
import functools
import importlib
import importlib.util
from collections.abc import Callable
from typing import NamedTuple

import torch

KERNEL, MEMSET, MEMCPY = "kernel", "memset", "memcpy"

# An odd size no attention wrapper sets: with the value sequence, what tells a marker apart.
MARKER_BYTES = 4093

BUFFER_BYTES = 8 * 1024 * 1024  # per CUPTI activity buffer (FlashInfer's and the samples' size)

# CUpti_ActivityMemoryKind and CUpti_ActivityMemcpyKind values, for the names a row lists
_MEMORY_KINDS = {1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed"}
_COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA"}
_COPY_KINDS.update({8: "DtoD", 9: "HtoH", 10: "PtoP"})


class ActivityRecord(NamedTuple):
    """One CUPTI record of GPU work (a named tuple: a sweep reads 100k+ of them)."""

    kind: str  # KERNEL, MEMSET or MEMCPY
    name: str
    start_ns: int
    end_ns: int
    correlation_id: int  # the launching API call's, in launch order
    stream_id: int
    context_id: int
    device_id: int
    bytes: int = 0  # memset / memcpy size
    value: int = 0  # memset value

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns


class CuptiUnavailable(RuntimeError):
    """cupti-python cannot trace here; the message names why."""


def cupti_importable() -> bool:
    """A CUDA (not MACA or ROCm) torch with cupti-python installed: the CUPTI timer's platform."""
    version = torch.version
    if not getattr(version, "cuda", None) or getattr(version, "maca", None):
        return False
    if getattr(version, "hip", None):
        return False
    try:
        return importlib.util.find_spec("cupti") is not None
    except (ImportError, ValueError):
        return False


def _import(name: str):
    try:
        return importlib.import_module(name)
    except Exception as exc:  # noqa: BLE001 - any import failure means no tracing here
        raise CuptiUnavailable(
            f"{name} cannot be imported ({type(exc).__name__}: {exc}); install the [nvidia] "
            "extra (cupti-python, CUDA 13+), or pick --timer profiler"
        ) from exc


@functools.cache
def _cxa_demangle() -> Callable | None:
    try:
        demangle = ctypes.CDLL("libstdc++.so.6").__cxa_demangle
    except (OSError, AttributeError):
        return None
    demangle.restype = ctypes.c_void_p
    return demangle


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str:
    """A kernel's C++ name as the torch profiler shows it (CUPTI records the mangled symbol);
    the symbol itself where it does not demangle.  Cached: a sweep has few distinct kernels."""
    function = _cxa_demangle()
    if function is None or not name.startswith("_Z"):
        return name
    status = ctypes.c_int()
    pointer = function(name.encode(), None, None, ctypes.byref(status))
    if not pointer or status.value != 0:
        return name
    try:
        return ctypes.string_at(pointer).decode(errors="replace")
    finally:
        ctypes.CDLL(None).free(ctypes.c_void_p(pointer))


def to_record(activity, kinds) -> ActivityRecord | None:
    """Our record of one CUPTI activity (None for a kind we did not ask for); ``kinds``:
    ``ActivityKind``'s three values as plain ints (an enum comparison per record costs)."""
    kind = int(activity.kind)
    if kind == kinds[0]:
        return ActivityRecord(
            KERNEL,
            demangle(activity.name),
            activity.start,
            activity.end,
            activity.correlation_id,
            activity.stream_id,
            activity.context_id,
            activity.device_id,
        )
    if kind == kinds[1]:
        memory = _MEMORY_KINDS.get(int(activity.memory_kind), "Unknown")
        return ActivityRecord(
            MEMSET,
            f"Memset ({memory})",
            activity.start,
            activity.end,
            activity.correlation_id,
            activity.stream_id,
            activity.context_id,
            activity.device_id,
            activity.bytes,
            activity.value,
        )
    if kind == kinds[2]:
        return ActivityRecord(
            MEMCPY,
            f"Memcpy {_COPY_KINDS.get(int(activity.copy_kind), 'Unknown')}",
            activity.start,
            activity.end,
            activity.correlation_id,
            activity.stream_id,
            activity.context_id,
            activity.device_id,
            activity.bytes,
        )
    return None


class CuptiTracer:
    """Kernel, memset and memcpy records between ``start()`` and ``stop()``.

    The buffer callbacks are registered at each start: torch's profiler registers its own
    when it starts, and CUPTI keeps one pair per process."""

    def __init__(self):
        self.cupti = _import("cupti.cupti")
        kinds = self.cupti.ActivityKind
        self.enabled = (kinds.CONCURRENT_KERNEL, kinds.MEMSET, kinds.MEMCPY)
        self.kinds = tuple(int(kind) for kind in self.enabled)
        self.records: list[ActivityRecord] = []
        self.tracing = False

    def _requested(self):
        return BUFFER_BYTES, 0

    def _completed(self, activities) -> None:
        kinds, keep = self.kinds, self.records.append
        for activity in activities:
            record = to_record(activity, kinds)
            if record is not None:
                keep(record)

    def start(self) -> None:
        self.records = []
        try:
            self.cupti.activity_register_callbacks(self._requested, self._completed)
            for kind in self.enabled:
                self.cupti.activity_enable(kind)
        except Exception as exc:  # noqa: BLE001 - cuptiError or a binding mismatch: name it
            raise CuptiUnavailable(
                f"CUPTI refused to start tracing ({type(exc).__name__}: {exc}); is another "
                "profiler (nsys, ncu) attached?"
            ) from exc
        self.tracing = True

    def stop(self) -> list[ActivityRecord]:
        """Stop tracing (the GPU work must be finished) and return the records.  Records CUPTI
        dropped show as a lost marker or a call with less work (``timing.activity``)."""
        if not self.tracing:
            return []
        self.tracing = False
        try:
            self.cupti.activity_flush_all(1)
        finally:
            for kind in self.enabled:
                self.cupti.activity_disable(kind)
        records, self.records = self.records, []
        return records


class MemsetMarker:
    """Launches ``cuMemsetD8Async`` of ``MARKER_BYTES`` with a given value on the current
    stream: one marker record, no kernel."""

    def __init__(self, device: torch.device):
        self.driver = _import("cuda.bindings.driver")
        self.buffer = torch.empty(MARKER_BYTES, dtype=torch.uint8, device=device)
        self.pointer = self.driver.CUdeviceptr(self.buffer.data_ptr())
        self.memset: Callable = self.driver.cuMemsetD8Async
        self._stream = (None, None)  # the last stream's handle and its CUstream

    def __call__(self, value: int) -> None:
        handle = torch.cuda.current_stream().cuda_stream
        if self._stream[0] != handle:  # one CUstream per stream, not one per marker
            self._stream = (handle, self.driver.CUstream(handle))
        (status,) = self.memset(self.pointer, value & 0xFF, MARKER_BYTES, self._stream[1])
        if int(status) != 0:
            raise CuptiUnavailable(f"the marker's cuMemsetD8Async failed: {status}")
