"""A FlashInfer-Bench (FIB) dataset folder read into frozen values, every check before GPU work.

Two layouts (docs/FIB.md)::

    DIR/definitions/**/*.json    FIB's dataset: definitions, workloads (JSON Lines of workload
    DIR/workloads/**/*.jsonl     traces), solutions; safetensors paths are relative to DIR
    DIR/solutions/**/*.json

    DIR/*.json                   FLASHINFER_TRACE_DUMP_DIR: FlashInfer's own definition dumps

Hostile folders are refused with one line (``FibError``, exit 2): files that are not JSON,
names that leave DIR (``..``, absolute paths, symlinks pointing out), files or shapes past the
limits below.  Nothing here imports torch; safetensors headers are read by ``fib.tensors``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from fi_attn_bench.errors import UsageError

MAX_JSON_BYTES = 16 << 20
"""Largest definition, solution or workload file read (16 MiB; FIB's largest are ~100 KiB)."""
MAX_WORKLOADS = 100_000
"""Most workloads one dataset may list."""
MAX_FILES = 10_000
"""Most files one of definitions/, workloads/, solutions/ may hold."""
MAX_AXIS = 1 << 31
"""Largest axis value (2^31: past any int32 index FlashInfer takes)."""
MAX_TENSOR_BYTES = 1 << 36
"""Largest single input (64 GiB: a KV cache filling an H200)."""

INPUT_KINDS = ("random", "scalar", "safetensors")


class FibError(UsageError):
    """A malformed or hostile FIB dataset (exit 2, before any GPU work)."""


@dataclass(frozen=True)
class TensorSpec:
    """One input or output of a definition: its axis names (None: a scalar) and dtype."""

    shape: tuple[str, ...] | None
    dtype: str
    optional: bool = False


@dataclass(frozen=True)
class Definition:
    """The fields of a FIB Definition the harness reads (the file keeps the rest)."""

    name: str
    op_type: str
    axes: Mapping[str, int | None]  # const axes: their value; var axes: None
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    tags: tuple[str, ...]
    path: str  # the file it came from

    def const(self, axis: str) -> int | None:
        return self.axes.get(axis)


@dataclass(frozen=True)
class InputSource:
    """Where one workload input comes from: ``random``, a ``scalar`` value, or a tensor of a
    ``safetensors`` file (``path`` resolved inside DIR)."""

    kind: str
    value: float | int | bool | None = None
    path: str = ""
    tensor_key: str = ""


@dataclass(frozen=True)
class Workload:
    """One FIB workload: its definition, uuid, var-axis values and input sources."""

    definition: str
    uuid: str
    axes: Mapping[str, int]
    inputs: Mapping[str, InputSource]
    where: str  # file:line, for messages


@dataclass(frozen=True)
class Solution:
    """A FIB Solution: its build spec and its source files by relative path."""

    name: str
    definition: str
    author: str
    language: str
    entry_file: str
    entry_symbol: str
    destination_passing_style: bool
    sources: Mapping[str, str]
    path: str


@dataclass(frozen=True)
class Dataset:
    """A whole folder: ``root`` is its real path; workloads in file order."""

    root: str
    definitions: Mapping[str, Definition]
    workloads: tuple[Workload, ...]
    solutions: Mapping[str, Solution]
    layout: str  # "dataset" or "dump"


# ---------------------------------------------------------------------------------------
# Files inside DIR
# ---------------------------------------------------------------------------------------


def inside(root: str, path: str, what: str) -> str:
    """``path``'s real location, which must lie inside ``root`` (FibError otherwise)."""
    real = os.path.realpath(path)
    if real != root and not real.startswith(root + os.sep):
        raise FibError(f"{what} {path!r} leads outside the dataset folder {root}")
    return real


def _files(root: str, folder: str, suffix: str) -> list[str]:
    """The ``suffix`` files under ``root/folder``, sorted; symlinks must stay inside root."""
    top = os.path.join(root, folder)
    if not os.path.isdir(top):
        return []
    found = []
    for here, dirs, names in os.walk(top):
        for name in sorted(dirs):
            full = os.path.join(here, name)
            if os.path.islink(full):
                inside(root, full, "folder link")
        for name in names:
            if name.endswith(suffix):
                full = os.path.join(here, name)
                inside(root, full, "file")
                found.append(full)
        if len(found) > MAX_FILES:
            raise FibError(f"{top}: more than {MAX_FILES} {suffix} files")
    return sorted(found)


def _read_text(path: str) -> str:
    try:
        if not os.path.isfile(path):
            raise FibError(f"{path}: not a regular file")
        if os.path.getsize(path) > MAX_JSON_BYTES:
            raise FibError(f"{path}: larger than {MAX_JSON_BYTES >> 20} MiB")
        with open(path, encoding="utf-8") as handle:
            return handle.read(MAX_JSON_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        raise FibError(f"{path}: cannot read it ({exc})") from None


def _json(text: str, where: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise FibError(f"{where}:{exc.lineno}: not JSON: {exc.msg}") from None
    except RecursionError:
        raise FibError(f"{where}: JSON nested too deeply") from None


def _object(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise FibError(f"{where}: expected a JSON object, got {type(value).__name__}")
    return value


def _text(record: Mapping, key: str, where: str) -> str:
    value = record.get(key)
    if not isinstance(value, str) or not value or len(value) > 1000:
        raise FibError(f"{where}: {key!r} must be a non-empty string")
    return value


def _count(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_AXIS:
        raise FibError(f"{where}: {value!r} is not a whole number in 0..{MAX_AXIS}")
    return value


# ---------------------------------------------------------------------------------------
# Definitions
# ---------------------------------------------------------------------------------------


def _tensor_spec(value: object, where: str, axes: Mapping[str, int | None]) -> TensorSpec:
    spec = _object(value, where)
    shape = spec.get("shape")
    if shape is not None:
        if not isinstance(shape, list) or not all(isinstance(a, str) for a in shape):
            raise FibError(f"{where}: shape must be a list of axis names or null")
        unknown = [a for a in shape if a not in axes]
        if unknown:
            raise FibError(f"{where}: shape names axis {unknown[0]!r}, which axes lacks")
        shape = tuple(shape)
    dtype = spec.get("dtype")
    if not isinstance(dtype, str):
        raise FibError(f"{where}: dtype must be a string")
    return TensorSpec(shape, dtype, bool(spec.get("optional", False)))


def _axes(value: object, where: str) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for name, axis in _object(value, f"{where}: axes").items():
        axis = _object(axis, f"{where}: axis {name!r}")
        kind = axis.get("type")
        if kind == "var":
            out[name] = None
        elif kind == "const":
            # A dump leaves a const axis it could not read without a value: known, not guessed.
            has = "value" in axis
            out[name] = _count(axis["value"], f"{where}: axis {name!r}") if has else None
        else:
            raise FibError(f"{where}: axis {name!r} has type {kind!r}, not 'const' or 'var'")
    return out


def parse_definition(record: object, where: str) -> Definition:
    """A Definition from its JSON (FIB's or a FLASHINFER_TRACE_DUMP file)."""
    record = _object(record, where)
    axes = _axes(record.get("axes", {}), where)
    tensors = {}
    for part in ("inputs", "outputs"):
        specs = _object(record.get(part, {}), f"{where}: {part}")
        tensors[part] = {
            k: _tensor_spec(v, f"{where}: {part[:-1]} {k!r}", axes) for k, v in specs.items()
        }
    tags = record.get("tags", [])
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise FibError(f"{where}: tags must be a list of strings")
    return Definition(
        name=_safe_name(_text(record, "name", where), where),
        op_type=_text(record, "op_type", where),
        axes=axes,
        inputs=tensors["inputs"],
        outputs=tensors["outputs"],
        tags=tuple(tags),
        path=where,
    )


def _safe_name(name: str, where: str) -> str:
    """Names become file names of traces: no separators, no dot-only names, printable."""
    if "/" in name or "\\" in name or name in (".", "..") or not name.isprintable():
        raise FibError(f"{where}: name {name!r} cannot be a file name")
    return name


def _definitions(paths: list[str]) -> dict[str, Definition]:
    found: dict[str, Definition] = {}
    for path in paths:
        definition = parse_definition(_json(_read_text(path), path), path)
        if definition.name in found:
            raise FibError(
                f"{path}: definition {definition.name!r} already read from "
                f"{found[definition.name].path}"
            )
        found[definition.name] = definition
    return found


# ---------------------------------------------------------------------------------------
# Workloads
# ---------------------------------------------------------------------------------------


def _input_source(root: str, name: str, value: object, where: str) -> InputSource:
    spec = _object(value, f"{where}: input {name!r}")
    kind = spec.get("type")
    if kind == "random":
        return InputSource("random")
    if kind == "scalar":
        scalar = spec.get("value")
        if not isinstance(scalar, int | float) or (
            isinstance(scalar, float) and not math.isfinite(scalar)
        ):
            raise FibError(f"{where}: scalar input {name!r} needs a finite number value")
        return InputSource("scalar", value=scalar)
    if kind == "safetensors":
        relative = _text(spec, "path", f"{where}: input {name!r}")
        key = _text(spec, "tensor_key", f"{where}: input {name!r}")
        if os.path.isabs(relative):
            raise FibError(f"{where}: input {name!r}: path {relative!r} must be relative to DIR")
        path = inside(root, os.path.join(root, relative), f"{where}: input {name!r}: path")
        return InputSource("safetensors", path=path, tensor_key=key)
    raise FibError(f"{where}: input {name!r} has type {kind!r}, not one of {INPUT_KINDS}")


def parse_workload(root: str, record: object, where: str) -> Workload:
    """One line of a workloads JSONL file (a FIB workload trace)."""
    record = _object(record, where)
    body = _object(record.get("workload"), f"{where}: workload")
    axes = {
        k: _count(v, f"{where}: axis {k!r}")
        for k, v in _object(body.get("axes", {}), f"{where}: axes").items()
    }
    inputs = _object(body.get("inputs", {}), f"{where}: inputs")
    return Workload(
        definition=_text(record, "definition", where),
        uuid=_safe_name(_text(body, "uuid", where), where),
        axes=axes,
        inputs={k: _input_source(root, k, v, where) for k, v in inputs.items()},
        where=where,
    )


def _lines(path: str) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(_read_text(path).split("\n"), 1):
        if line.strip():
            yield number, line


def _workloads(root: str, paths: list[str]) -> list[Workload]:
    found: list[Workload] = []
    seen: dict[tuple[str, str], str] = {}
    for path in paths:
        for number, line in _lines(path):
            where = f"{path}:{number}"
            workload = parse_workload(root, _json(line, where), where)
            key = (workload.definition, workload.uuid)
            if key in seen:
                raise FibError(f"{where}: workload {workload.uuid!r} already on {seen[key]}")
            seen[key] = where
            found.append(workload)
            if len(found) > MAX_WORKLOADS:
                raise FibError(f"{root}: more than {MAX_WORKLOADS} workloads")
    return found


# ---------------------------------------------------------------------------------------
# Solutions
# ---------------------------------------------------------------------------------------


def _source_path(path: object, where: str) -> str:
    if not isinstance(path, str) or not path or os.path.isabs(path):
        raise FibError(f"{where}: source path {path!r} must be a relative file name")
    if ".." in path.replace("\\", "/").split("/"):
        raise FibError(f"{where}: source path {path!r} leaves the solution's folder")
    return path


def parse_solution(record: object, where: str) -> Solution:
    """A FIB Solution JSON (its sources inline, as FIB keeps them)."""
    record = _object(record, where)
    spec = _object(record.get("spec"), f"{where}: spec")
    entry = _text(spec, "entry_point", f"{where}: spec")
    if entry.count("::") != 1:
        raise FibError(f"{where}: entry_point {entry!r} is not FILE::FUNCTION")
    entry_file, entry_symbol = entry.split("::")
    sources = {}
    for source in record.get("sources") or []:
        source = _object(source, f"{where}: source")
        content = source.get("content")
        if not isinstance(content, str):
            raise FibError(f"{where}: source {source.get('path')!r} has no text content")
        sources[_source_path(source.get("path"), where)] = content
    if entry_file not in sources:
        raise FibError(f"{where}: entry file {entry_file!r} is not among its sources")
    return Solution(
        name=_safe_name(_text(record, "name", where), where),
        definition=_text(record, "definition", where),
        author=str(record.get("author", "")),
        language=_text(spec, "language", f"{where}: spec"),
        entry_file=entry_file,
        entry_symbol=entry_symbol,
        destination_passing_style=bool(spec.get("destination_passing_style", True)),
        sources=sources,
        path=where,
    )


def _solutions(paths: list[str]) -> dict[str, Solution]:
    found: dict[str, Solution] = {}
    for path in paths:
        solution = parse_solution(_json(_read_text(path), path), path)
        if solution.name in found:
            raise FibError(f"{path}: solution {solution.name!r} already read from another file")
        found[solution.name] = solution
    return found


# ---------------------------------------------------------------------------------------
# The folder
# ---------------------------------------------------------------------------------------


def read_dataset(directory: str) -> Dataset:
    """Every definition, workload and solution of ``directory`` (FibError: one line)."""
    if not os.path.isdir(directory):
        raise FibError(f"--fib {directory}: not a folder")
    root = os.path.realpath(directory)
    is_dataset = any(os.path.isdir(os.path.join(root, d)) for d in ("definitions", "workloads"))
    if is_dataset:
        definitions = _definitions(_files(root, "definitions", ".json"))
        workloads = _workloads(root, _files(root, "workloads", ".jsonl"))
        solutions = _solutions(_files(root, "solutions", ".json"))
    else:  # FLASHINFER_TRACE_DUMP_DIR: definition files side by side
        names = sorted(n for n in os.listdir(root) if n.endswith(".json"))
        definitions = _definitions([inside(root, os.path.join(root, n), "file") for n in names])
        workloads, solutions = [], {}
    if not definitions:
        raise FibError(f"--fib {directory}: no definition (definitions/*.json or dump *.json)")
    return Dataset(
        root=root,
        definitions=definitions,
        workloads=tuple(workloads),
        solutions=solutions,
        layout="dataset" if is_dataset else "dump",
    )
