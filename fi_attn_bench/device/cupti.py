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

import torch

from fi_attn_bench.device.cupti_records import (  # noqa: F401 - re-exported: the timer and tests use them from here
    KERNEL,
    MEMCPY,
    MEMSET,
    ActivityRecord,
    LayoutError,
    RecordReader,
    layouts_from,
)

# An odd size no attention wrapper sets: with the value sequence, what tells a marker apart.
MARKER_BYTES = 4093

BUFFER_BYTES = 8 * 1024 * 1024  # per CUPTI activity buffer (FlashInfer's and the samples' size)
MAX_LIMIT_REACHED = 12  # CUPTI_ERROR_MAX_LIMIT_REACHED: cuptiActivityGetNextRecord's "no more"

# CUpti_BuffersCallbackRequestFunc and CUpti_BuffersCallbackCompleteFunc
_REQUESTED = ctypes.CFUNCTYPE(
    None,
    ctypes.POINTER(ctypes.c_void_p),
    ctypes.POINTER(ctypes.c_size_t),
    ctypes.POINTER(ctypes.c_size_t),
)
_COMPLETED = ctypes.CFUNCTYPE(
    None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t
)


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


def _loaded_library(name: str) -> str | None:
    """The path of the shared library ``name`` this process has mapped, if any."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if name in path.rsplit("/", 1)[-1]:
                    return path
    except OSError:
        return None
    return None


def _libcupti(bindings) -> ctypes.CDLL:
    """The libcupti that cupti-python loaded (one CUPTI per process: a second copy would
    trace apart from the first), its functions typed."""
    try:
        bindings.get_timestamp()  # cupti-python opens its libcupti on first use
    except Exception as exc:  # noqa: BLE001 - no driver or no library: name it
        raise CuptiUnavailable(f"CUPTI cannot start ({type(exc).__name__}: {exc})") from exc
    path = _loaded_library("libcupti.so")
    if path is None:
        raise CuptiUnavailable("cupti-python runs, but no libcupti.so is mapped in this process")
    library = ctypes.CDLL(path)
    pointer, size = ctypes.c_void_p, ctypes.c_size_t
    library.cuptiActivityGetNextRecord.argtypes = [pointer, size, ctypes.POINTER(pointer)]
    library.cuptiActivityRegisterCallbacks.argtypes = [_REQUESTED, _COMPLETED]
    for function in ("cuptiActivityEnable", "cuptiActivityDisable", "cuptiActivityFlushAll"):
        getattr(library, function).argtypes = [ctypes.c_uint32]
    return library


def _c_string(pointer: int) -> str:
    return demangle(ctypes.string_at(pointer).decode(errors="replace"))


class CuptiTracer:
    """Kernel, memset and memcpy records between ``start()`` and ``stop()``.

    The activity buffers are ours (ctypes arrays) and are read as bytes
    (``cupti_records``); cupti-python supplies the record layouts and the library.  The
    buffer callbacks are registered at each start: torch's profiler registers its own when
    it starts, and CUPTI keeps one pair per process."""

    def __init__(self):
        self.cupti = _import("cupti.cupti")
        self.library = _libcupti(self.cupti)
        kinds = self.cupti.ActivityKind
        self.enabled = tuple(int(k) for k in (kinds.CONCURRENT_KERNEL, kinds.MEMSET, kinds.MEMCPY))
        codes = {KERNEL: (int(kinds.CONCURRENT_KERNEL), int(kinds.KERNEL))}
        codes.update({MEMSET: (int(kinds.MEMSET),), MEMCPY: (int(kinds.MEMCPY),)})
        try:
            layouts = layouts_from(self.cupti, codes)
        except LayoutError as exc:
            raise CuptiUnavailable(f"cupti-python's record layouts do not fit: {exc}") from exc
        self.reader = RecordReader(layouts, _c_string)
        self.records: list[ActivityRecord] = []
        self.failure: str | None = None
        self.tracing = False
        self._held: dict[int, ctypes.Array] = {}  # buffers CUPTI is filling, by address
        self._spare: list[ctypes.Array] = []
        self._callbacks = (_REQUESTED(self._requested), _COMPLETED(self._completed))

    def _requested(self, buffer, size, max_records) -> None:
        try:
            array = self._spare.pop() if self._spare else (ctypes.c_uint64 * (BUFFER_BYTES // 8))()
            address = ctypes.addressof(array)
            self._held[address] = array
            buffer[0], size[0], max_records[0] = address, BUFFER_BYTES, 0
        except Exception as exc:  # noqa: BLE001 - an exception must not cross into CUPTI
            self.failure = f"allocating an activity buffer failed ({exc})"
            buffer[0], size[0] = None, 0

    def _completed(self, context, stream_id, buffer, size, valid) -> None:
        array = self._held.pop(buffer, None)
        try:
            if array is not None and valid:
                view = memoryview(array).cast("B")
                self.records.extend(self.reader.read(view, self._offsets(buffer, valid)))
        except Exception as exc:  # noqa: BLE001 - an exception must not cross into CUPTI
            self.failure = f"reading an activity buffer failed ({type(exc).__name__}: {exc})"
        finally:
            if array is not None:
                self._spare.append(array)

    def _offsets(self, address: int, valid: int) -> list[int]:
        record, found = ctypes.c_void_p(), []
        next_record = self.library.cuptiActivityGetNextRecord
        while (status := next_record(address, valid, ctypes.byref(record))) == 0:
            found.append(record.value - address)
        if status != MAX_LIMIT_REACHED:
            self.failure = f"cuptiActivityGetNextRecord returned {status}"
        return found

    def _call(self, function: str, *arguments) -> None:
        status = getattr(self.library, function)(*arguments)
        if status != 0:
            raise CuptiUnavailable(
                f"{function} returned CUPTI error {status}; is another profiler (nsys, ncu) "
                "attached?"
            )

    def start(self) -> None:
        self.records, self.failure = [], None
        self._call("cuptiActivityRegisterCallbacks", *self._callbacks)
        for kind in self.enabled:
            self._call("cuptiActivityEnable", kind)
        self.tracing = True

    def stop(self) -> list[ActivityRecord]:
        """Stop tracing (the GPU work must be finished) and return the records.  Records CUPTI
        dropped show as a lost marker or a call with less work (``timing.activity``)."""
        if not self.tracing:
            return []
        self.tracing = False
        try:
            self._call("cuptiActivityFlushAll", 1)  # forced: delivers the buffers in use too
        finally:
            for kind in self.enabled:
                self.library.cuptiActivityDisable(kind)
        records, self.records = self.records, []
        if self.failure:
            raise CuptiUnavailable(self.failure)
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
