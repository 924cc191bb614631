"""CUPTI activity records read straight from the activity buffer's bytes (pure: tested with
stand-in buffers).

Each field is read at the offset that cupti-python's numpy dtype for that record struct gives
(``activity_kernel10_dtype`` and so on: the struct versions the installed CUPTI writes), with
one precompiled ``struct.Struct`` per kind.  A record then costs a few microseconds, against
about 60 us when cupti-python hands each one over as a Python object (docs/DESIGN.md).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

KERNEL, MEMSET, MEMCPY = "kernel", "memset", "memcpy"

# CUpti_ActivityMemoryKind and CUpti_ActivityMemcpyKind values, for the names a row lists
MEMORY_KINDS = {1: "Pageable", 2: "Pinned", 3: "Device", 4: "Array", 5: "Managed"}
COPY_KINDS = {1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA"}
COPY_KINDS.update({8: "DtoD", 9: "HtoH", 10: "PtoP"})

_PLACE = ("start", "end", "correlation_id", "stream_id", "context_id", "device_id")
FIELDS: Mapping[str, tuple[str, ...]] = {
    KERNEL: (*_PLACE, "name"),
    MEMSET: (*_PLACE, "bytes", "value", "memory_kind"),
    MEMCPY: (*_PLACE, "bytes", "copy_kind"),
}
# cupti-python's dtype for each kind's struct: the highest version it defines is the one its
# CUPTI writes (``activity_memcpy_pto_p4_dtype`` is another struct and does not match).
DTYPE_NAMES = {
    KERNEL: re.compile(r"activity_kernel(\d+)_dtype"),
    MEMSET: re.compile(r"activity_memset(\d+)_dtype"),
    MEMCPY: re.compile(r"activity_memcpy(\d+)_dtype"),
}
_FORMATS = {("u", 1): "B", ("u", 2): "H", ("u", 4): "I", ("u", 8): "Q"}
_FORMATS.update({("i", 1): "b", ("i", 2): "h", ("i", 4): "i", ("i", 8): "q"})
_KIND_FIELD = struct.Struct("<i")  # every CUPTI record opens with its CUpti_ActivityKind


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


class LayoutError(RuntimeError):
    """The bindings describe no struct, or one without a field the timer reads."""


@dataclass(frozen=True)
class RecordLayout:
    """Where one kind's fields lie in its record: ``unpack`` reads them all at once, in the
    order of ``FIELDS[kind]``."""

    kind: str
    struct: struct.Struct
    order: tuple[int, ...]  # FIELDS[kind][i] is the struct's order[i]-th value

    @classmethod
    def from_dtype(cls, kind: str, dtype) -> RecordLayout:
        """The layout of ``dtype`` (a numpy structured dtype) for ``FIELDS[kind]``."""
        wanted = FIELDS[kind]
        fields = dtype.fields or {}
        missing = [name for name in wanted if name not in fields]
        if missing:
            raise LayoutError(f"the {kind} record has no field {', '.join(missing)}")
        placed = sorted((fields[name][1], name, fields[name][0]) for name in wanted)
        text, position = "<", 0
        for offset, name, field in placed:
            code = _FORMATS.get((field.kind, field.itemsize))
            if code is None:
                raise LayoutError(f"the {kind} record's {name} is a {field}, not an integer")
            text += f"{offset - position}x{code}" if offset > position else code
            position = offset + field.itemsize
        names = [name for _, name, _ in placed]
        return cls(kind, struct.Struct(text), tuple(names.index(name) for name in wanted))

    def unpack(self, view, offset: int) -> tuple[int, ...]:
        values = self.struct.unpack_from(view, offset)
        return tuple(values[index] for index in self.order)


def layouts_from(bindings, kind_codes: Mapping[str, Iterable[int]]) -> dict[int, RecordLayout]:
    """Each CUpti_ActivityKind value of ``kind_codes`` mapped to its kind's layout, from the
    highest-numbered dtype ``bindings`` (the ``cupti.cupti`` module) defines for it."""
    layouts = {}
    for kind, codes in kind_codes.items():
        versions = [
            (int(match.group(1)), name)
            for name in dir(bindings)
            if (match := DTYPE_NAMES[kind].fullmatch(name))
        ]
        if not versions:
            raise LayoutError(f"cupti-python defines no {kind} record dtype")
        layout = RecordLayout.from_dtype(kind, getattr(bindings, max(versions)[1]))
        layouts.update(dict.fromkeys(codes, layout))
    return layouts


class RecordReader:
    """Our records from a buffer's bytes and its records' offsets; ``read_name`` turns a
    kernel record's name pointer into the name (cached per pointer: a sweep launches few
    kernels, CUPTI keeps each name for the module's life)."""

    def __init__(self, layouts: Mapping[int, RecordLayout], read_name: Callable[[int], str]):
        self.layouts = dict(layouts)
        self._read_name = read_name
        self._names: dict[int, str] = {}

    def name(self, pointer: int) -> str:
        found = self._names.get(pointer)
        if found is None:
            found = self._names[pointer] = self._read_name(pointer) if pointer else "?"
        return found

    def read(self, view, offsets: Iterable[int]) -> list[ActivityRecord]:
        """The records at ``offsets`` of ``view``; kinds without a layout are left out."""
        found = []
        for offset in offsets:
            layout = self.layouts.get(_KIND_FIELD.unpack_from(view, offset)[0])
            if layout is not None:
                found.append(self._record(layout, layout.unpack(view, offset)))
        return found

    def _record(self, layout: RecordLayout, values: tuple[int, ...]) -> ActivityRecord:
        place = values[:6]
        if layout.kind == KERNEL:
            return ActivityRecord(KERNEL, self.name(values[6]), *place)
        if layout.kind == MEMSET:
            memory = MEMORY_KINDS.get(values[8], "Unknown")
            return ActivityRecord(MEMSET, f"Memset ({memory})", *place, values[6], values[7])
        copy = COPY_KINDS.get(values[7], "Unknown")
        return ActivityRecord(MEMCPY, f"Memcpy {copy}", *place, values[6])
