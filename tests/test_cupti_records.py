"""CUPTI activity buffers read as bytes: stand-in buffers laid out as CUPTI 13.0's structs
(the offsets cupti-python 13.0.0's dtypes give), read by the reader and by the tracer's
buffer callbacks, without a GPU."""

from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from fi_attn_bench.device import cupti
from fi_attn_bench.device.cupti_records import (
    KERNEL,
    MEMCPY,
    MEMSET,
    ActivityRecord,
    LayoutError,
    RecordLayout,
    RecordReader,
    layouts_from,
)

CONCURRENT_KERNEL, MEMSET_CODE, MEMCPY_CODE, OVERHEAD = 10, 2, 1, 17


def _dtype(size: int, fields: dict[str, tuple[str, int]]) -> np.dtype:
    names = list(fields)
    return np.dtype(
        {
            "names": names,
            "formats": [fields[n][0] for n in names],
            "offsets": [fields[n][1] for n in names],
            "itemsize": size,
        }
    )


PLACE_KERNEL = {"start": ("<u8", 16), "end": ("<u8", 24), "device_id": ("<u4", 40)}
PLACE_KERNEL.update({"context_id": ("<u4", 44), "stream_id": ("<u4", 48)})
KERNEL10 = _dtype(
    216,
    {"kind": ("<i4", 0), **PLACE_KERNEL, "correlation_id": ("<u4", 92), "name": ("<i8", 104)},
)
PLACE_COPY = {"start": ("<u8", 16), "end": ("<u8", 24), "device_id": ("<u4", 32)}
PLACE_COPY.update({"context_id": ("<u4", 36), "stream_id": ("<u4", 40)})
PLACE_COPY.update({"correlation_id": ("<u4", 44), "bytes": ("<u8", 8)})
MEMSET4 = _dtype(
    88, {"kind": ("<i4", 0), "value": ("<u4", 4), **PLACE_COPY, "memory_kind": ("<u2", 50)}
)
MEMCPY6 = _dtype(96, {"kind": ("<i4", 0), "copy_kind": ("<u1", 4), **PLACE_COPY})
BINDINGS = SimpleNamespace(
    activity_kernel9_dtype=_dtype(8, {"kind": ("<i4", 0)}),  # an older version: not read
    activity_kernel10_dtype=KERNEL10,
    activity_memset4_dtype=MEMSET4,
    activity_memcpy6_dtype=MEMCPY6,
    activity_memcpy_pto_p4_dtype=_dtype(8, {"kind": ("<i4", 0)}),  # another struct
)
CODES = {KERNEL: (CONCURRENT_KERNEL,), MEMSET: (MEMSET_CODE,), MEMCPY: (MEMCPY_CODE,)}
NAMES = {0x1000: "_ZN10flashinfer4demoEv", 0x2000: "merge"}


def _record(dtype: np.dtype, **values) -> bytes:
    array = np.zeros(1, dtype=dtype)
    for name, value in values.items():
        array[name] = value
    return array.tobytes()


def _buffer() -> tuple[bytes, list[int], list[ActivityRecord]]:
    """A buffer of a kernel, an overhead record (a kind not asked for), a memset, a memcpy and
    a second kernel, at their offsets, and the records the reader must give."""
    place = dict(device_id=0, context_id=1, stream_id=7)
    parts = [
        _record(KERNEL10, kind=CONCURRENT_KERNEL, start=100, end=250, correlation_id=5,
                name=0x1000, **place),
        _record(_dtype(32, {"kind": ("<i4", 0)}), kind=OVERHEAD),
        _record(MEMSET4, kind=MEMSET_CODE, value=9, bytes=4093, start=300, end=310,
                correlation_id=6, memory_kind=3, **place),
        _record(MEMCPY6, kind=MEMCPY_CODE, copy_kind=8, bytes=64, start=320, end=330,
                correlation_id=7, **place),
        _record(KERNEL10, kind=CONCURRENT_KERNEL, start=400, end=470, correlation_id=8,
                name=0x2000, **place),
    ]  # fmt: skip
    offsets, position = [], 0
    for part in parts:
        offsets.append(position)
        position += len(part)
    expected = [
        ActivityRecord(KERNEL, "flashinfer::demo()", 100, 250, 5, 7, 1, 0),
        ActivityRecord(MEMSET, "Memset (Device)", 300, 310, 6, 7, 1, 0, 4093, 9),
        ActivityRecord(MEMCPY, "Memcpy DtoD", 320, 330, 7, 7, 1, 0, 64),
        ActivityRecord(KERNEL, "merge", 400, 470, 8, 7, 1, 0),
    ]
    return b"".join(parts), offsets, expected


def _reader() -> RecordReader:
    return RecordReader(layouts_from(BINDINGS, CODES), lambda p: cupti.demangle(NAMES[p]))


def test_each_kind_is_read_at_its_dtype_offsets_and_other_kinds_are_left_out():
    data, offsets, expected = _buffer()
    assert _reader().read(memoryview(data), offsets) == expected


def test_a_name_pointer_is_read_once():
    data, offsets, _ = _buffer()
    reads = []
    reader = RecordReader(layouts_from(BINDINGS, CODES), lambda p: reads.append(p) or "k")
    reader.read(memoryview(data), offsets + offsets)
    assert sorted(reads) == [0x1000, 0x2000]


def test_the_highest_struct_version_is_the_one_read():
    layouts = layouts_from(BINDINGS, CODES)
    assert layouts[CONCURRENT_KERNEL].struct.size == 112  # kernel10's fields, up to name
    memcpy = RecordLayout.from_dtype(MEMCPY, MEMCPY6)
    assert (layouts[MEMCPY_CODE].struct.format, layouts[MEMCPY_CODE].order) == (
        memcpy.struct.format,
        memcpy.order,
    )


def test_bindings_without_a_field_or_a_struct_are_a_layout_error_naming_it():
    no_name = SimpleNamespace(**{**vars(BINDINGS), "activity_kernel10_dtype": MEMSET4})
    with pytest.raises(LayoutError, match="kernel record has no field name"):
        layouts_from(no_name, CODES)
    without = SimpleNamespace(activity_memset4_dtype=MEMSET4)
    with pytest.raises(LayoutError, match="no kernel record dtype"):
        layouts_from(without, CODES)


def _tracer_over(data: bytes, offsets: list[int]) -> tuple[cupti.CuptiTracer, int]:
    """A tracer whose stand-in library walks ``offsets`` of a buffer it requested, filled
    with ``data`` as CUPTI would fill it."""
    tracer = object.__new__(cupti.CuptiTracer)
    tracer.reader, tracer.records, tracer.failure = _reader(), [], None
    tracer._held, tracer._spare = {}, []
    pointer, size, most = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    tracer._requested(ctypes.pointer(pointer), ctypes.pointer(size), ctypes.pointer(most))
    assert size.value == cupti.BUFFER_BYTES and pointer.value in tracer._held
    ctypes.memmove(pointer.value, data, len(data))

    def next_record(address, valid, record):
        current = record._obj.value
        index = 0 if current is None else offsets.index(current - address) + 1
        if index == len(offsets):
            return cupti.MAX_LIMIT_REACHED
        record._obj.value = address + offsets[index]
        return 0

    tracer.library = SimpleNamespace(cuptiActivityGetNextRecord=next_record)
    return tracer, pointer.value


def test_a_completed_buffer_is_read_and_its_memory_kept_for_the_next_request():
    data, offsets, expected = _buffer()
    tracer, address = _tracer_over(data, offsets)
    tracer._completed(None, 0, address, cupti.BUFFER_BYTES, len(data))
    assert tracer.records == expected and tracer.failure is None
    assert not tracer._held and len(tracer._spare) == 1


def test_a_buffer_that_cannot_be_read_fails_the_stop_naming_why():
    data, offsets, _ = _buffer()
    tracer, address = _tracer_over(data, offsets)
    tracer.reader = RecordReader(layouts_from(BINDINGS, CODES), lambda pointer: 1 / 0)
    tracer._completed(None, 0, address, cupti.BUFFER_BYTES, len(data))
    assert tracer.failure.startswith("reading an activity buffer failed (ZeroDivisionError")
    tracer.tracing = True
    tracer.enabled = ()
    tracer.library.cuptiActivityFlushAll = lambda flag: 0
    with pytest.raises(cupti.CuptiUnavailable, match="reading an activity buffer failed"):
        tracer.stop()


def test_a_record_walk_that_ends_in_an_error_is_named():
    data, offsets, _ = _buffer()
    tracer, address = _tracer_over(data, offsets)
    tracer.library.cuptiActivityGetNextRecord = lambda *arguments: 1  # INVALID_PARAMETER
    tracer._completed(None, 0, address, cupti.BUFFER_BYTES, len(data))
    assert tracer.records == [] and tracer.failure == "cuptiActivityGetNextRecord returned 1"
