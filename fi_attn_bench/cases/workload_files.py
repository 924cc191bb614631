"""``--workload FILE``: JSON Lines of batches, ours or flashinfer-bench's (torch-free).

Our lines (one batch each; blank lines are skipped)::

    {"name": "chat-1", "requests": [{"q_len": 1, "kv_len": 4096}, {"q_len": 512, "kv_len": 2048}]}
    {"q_lens": [1, 1, 512], "kv_lens": [4096, 900, 2048]}     # parallel lists
    {"kv_lens": [4096, 900]}                                   # q_lens omitted: decode, 1 each

flashinfer-bench lines (``{"definition": ..., "workload": {"uuid", "axes", "inputs"}}``) keep
their per-request lengths in the index tensors of a ``.safetensors`` file; ``fib_batch`` reads
them (docs/SERVING.md has the field mapping).
"""

from __future__ import annotations

import json
import os
import re
import struct
from collections.abc import Mapping, Sequence

from fi_attn_bench.cases.workloads import Batch, Workload, WorkloadError, check_batch

_SAFETENSORS_INTS = {"I32": "i", "I64": "q", "U32": "I", "U64": "Q", "I16": "h", "U8": "B"}


def read_safetensors_ints(path: str, key: str) -> list[int]:
    """One integer tensor of a ``.safetensors`` file, flattened (the format: an 8-byte
    little-endian header size, a JSON header of dtype/shape/data_offsets, then the data)."""
    with open(path, "rb") as handle:
        (size,) = struct.unpack("<Q", handle.read(8))
        header = json.loads(handle.read(size))
        if key not in header:
            raise WorkloadError(f"{path}: no tensor {key!r} (has {', '.join(sorted(header))})")
        entry = header[key]
        code = _SAFETENSORS_INTS.get(entry["dtype"])
        if code is None:
            raise WorkloadError(f"{path}: tensor {key!r} is {entry['dtype']}, not integers")
        begin, end = entry["data_offsets"]
        handle.seek(8 + size + begin)
        data = handle.read(end - begin)
    return list(struct.unpack(f"<{len(data) // struct.calcsize(code)}{code}", data))


def _diffs(indptr: Sequence[int]) -> list[int]:
    return [b - a for a, b in zip(indptr, indptr[1:], strict=False)]


def _fib_tensor(inputs: Mapping, name: str, base_dir: str) -> list[int] | None:
    """An input tensor of a flashinfer-bench workload, or None when it is not there."""
    spec = inputs.get(name)
    if spec is None:
        return None
    if spec.get("type") != "safetensors":
        raise WorkloadError(
            f"input {name!r} is {spec.get('type')!r}: per-request lengths are only known "
            "from a safetensors tensor"
        )
    path = spec["path"] if os.path.isabs(spec["path"]) else os.path.join(base_dir, spec["path"])
    return read_safetensors_ints(path, spec.get("tensor_key", name))


_PAGE_SIZE = re.compile(r"_ps([0-9]+)(?:_|$)")


def fib_batch(line: Mapping, base_dir: str) -> Batch:
    """A flashinfer-bench workload as a batch: q_len from ``qo_indptr`` (1 each when absent:
    decode), kv_len from ``kv_indptr`` (tokens for ragged definitions; pages of the
    definition's ``_ps<N>`` page size for paged ones, the last one ``kv_last_page_len`` long
    where given, else full as in FIB's references)."""
    definition = str(line.get("definition", ""))
    inputs = line["workload"].get("inputs", {})
    kv_indptr = _fib_tensor(inputs, "kv_indptr", base_dir)
    if kv_indptr is None:
        raise WorkloadError(f"definition {definition!r}: no kv_indptr input")
    qo_indptr = _fib_tensor(inputs, "qo_indptr", base_dir)
    counts = _diffs(kv_indptr)
    q_lens = _diffs(qo_indptr) if qo_indptr is not None else [1] * len(counts)
    if "ragged" in definition:
        return Batch.of(q_lens, counts)
    last = _fib_tensor(inputs, "kv_last_page_len", base_dir)
    match = _PAGE_SIZE.search(definition)
    page_size = int(match.group(1)) if match else None
    if page_size is None:
        raise WorkloadError(f"definition {definition!r}: no _ps<N> page size in its name")
    if last is None:  # every page full, as FIB's references read a page table (docs/FIB.md)
        last = [page_size] * len(counts)
    return Batch.of(
        q_lens, [(p - 1) * page_size + tail for p, tail in zip(counts, last, strict=True)]
    )


def _ints(value: object, what: str) -> list[int]:
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise WorkloadError(f"{what} must be a list of integers")
    return value


def own_batch(line: Mapping) -> Batch:
    """One of our lines: ``requests`` objects or parallel ``q_lens`` / ``kv_lens`` lists."""
    if "requests" in line:
        requests = line["requests"]
        if not isinstance(requests, list) or not all(isinstance(r, dict) for r in requests):
            raise WorkloadError('"requests" must be a list of {"q_len":..., "kv_len":...}')
        q_lens = _ints([r.get("q_len", 1) for r in requests], '"q_len" of each request')
        kv_lens = _ints([r.get("kv_len") for r in requests], '"kv_len" of each request')
        return Batch.of(q_lens, kv_lens)
    if "kv_lens" in line:
        kv_lens = _ints(line["kv_lens"], '"kv_lens"')
        q_lens = _ints(line.get("q_lens", [1] * len(kv_lens)), '"q_lens"')
        if len(q_lens) != len(kv_lens):
            raise WorkloadError(f'"q_lens" has {len(q_lens)} entries, "kv_lens" {len(kv_lens)}')
        return Batch.of(q_lens, kv_lens)
    raise WorkloadError('expected "requests", "kv_lens" or a flashinfer-bench "workload"')


def _line_workload(text: str, path: str, number: int) -> Workload:
    where = f"{path}:{number}"
    try:
        line = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{where}:{exc.colno}: not JSON: {exc.msg}") from None
    if not isinstance(line, dict):
        raise WorkloadError(f"{where}:1: expected a JSON object")
    try:
        fib = isinstance(line.get("workload"), dict)
        batch = fib_batch(line, os.path.dirname(path)) if fib else own_batch(line)
        batch = check_batch(batch, "batch")
    except WorkloadError as exc:
        raise WorkloadError(f"{where}: {exc}") from None
    except (OSError, KeyError, ValueError, struct.error) as exc:
        raise WorkloadError(f"{where}: {type(exc).__name__}: {exc}") from None
    name = line.get("name") or (line["workload"].get("uuid") if fib else None)
    label = str(name) if name else f"{os.path.basename(path)}:{number}"
    return Workload(label, batch, ("--workload", f"{path}:{number}"))


def split_line_suffix(argument: str) -> tuple[str, int | None]:
    """``FILE`` or ``FILE:LINE`` (when FILE itself does not exist) -> (path, line or None)."""
    path, colon, line = argument.rpartition(":")
    if colon and line.isdigit() and not os.path.exists(argument):
        return path, int(line)
    return argument, None


def editor_lines(text: str) -> list[str]:
    """The lines as a text editor numbers them: split at line feeds only (``str.splitlines``
    also splits at form feeds and other separators, which would shift the numbers); the
    file was opened in text mode, so CR LF and CR are already line feeds."""
    return text.removesuffix("\n").split("\n") if text else []


def _why_none(lines: Sequence[str], only: int | None) -> str:
    if only is None:
        return "no batch (every line is blank)" if lines else "no batch (the file is empty)"
    if only > len(lines) or only < 1:
        return f"no line {only} (the file has {len(lines)} line{'s' * (len(lines) != 1)})"
    return f"line {only} is blank"


def read_workload_file(argument: str) -> tuple[Workload, ...]:
    """Every batch of a JSON Lines file (or only line N of ``FILE:N``), in file order."""
    path, only = split_line_suffix(argument)
    try:
        with open(path, encoding="utf-8") as handle:
            lines = editor_lines(handle.read())
    except (OSError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"--workload {path}: cannot read it ({exc})") from None
    chosen = [(n, t) for n, t in enumerate(lines, 1) if t.strip() and only in (None, n)]
    if not chosen:
        raise WorkloadError(f"--workload {argument}: {_why_none(lines, only)}")
    workloads = tuple(_line_workload(text, path, n) for n, text in chosen)
    seen: dict[str, int] = {}
    for w, (n, _) in zip(workloads, chosen, strict=True):
        if w.label in seen:
            raise WorkloadError(
                f"{path}:{n}: name {w.label!r} already used on line {seen[w.label]}"
            )
        seen[w.label] = n
    return workloads
