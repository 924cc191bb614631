"""A FIB workload's input tensors: safetensors headers checked at plan time, values loaded per
case on the device; ``random`` inputs drawn from the case's seed; ``scalar`` inputs as numbers."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch

from fi_attn_bench.fib.dataset import MAX_TENSOR_BYTES, FibError, InputSource

DTYPES: Mapping[str, torch.dtype] = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
_SAFETENSORS_DTYPES = {
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
INDEX_DTYPES = ("int32", "int64")


def _safe_open(path: str):
    try:
        from safetensors import safe_open
    except ImportError:
        raise FibError(
            "--fib reads safetensors inputs with the safetensors package: pip install safetensors"
        ) from None
    try:
        return safe_open(path, framework="pt", device="cpu")
    except FileNotFoundError:
        raise FibError(f"{path}: no such safetensors file") from None
    except Exception as exc:  # noqa: BLE001 - the library's own error types vary by version
        raise FibError(f"{path}: not a safetensors file ({type(exc).__name__}: {exc})") from None


def tensor_bytes(shape: Sequence[int], dtype: str) -> int:
    size = DTYPES[dtype].itemsize if dtype in DTYPES else 1
    return math.prod(shape) * size


def check_file_tensor(
    source: InputSource, name: str, shape: Sequence[int], dtype: str | None
) -> None:
    """The file holds ``source.tensor_key`` with this shape and dtype (None: any integer)."""
    with _safe_open(source.path) as handle:
        if source.tensor_key not in handle.keys():
            raise FibError(f"{source.path}: no tensor {source.tensor_key!r} for input {name!r}")
        piece = handle.get_slice(source.tensor_key)
        found_shape, found = list(piece.get_shape()), _SAFETENSORS_DTYPES.get(piece.get_dtype())
    if found_shape != list(shape):
        raise FibError(
            f"{source.path}: {source.tensor_key!r} has shape {found_shape}, input {name!r} "
            f"needs {list(shape)}"
        )
    wanted = INDEX_DTYPES if dtype is None else (dtype,)
    if found not in wanted:
        raise FibError(
            f"{source.path}: {source.tensor_key!r} is {found or piece.get_dtype()}, input "
            f"{name!r} needs {' or '.join(wanted)}"
        )


def check_size(name: str, shape: Sequence[int], dtype: str, where: str) -> None:
    if tensor_bytes(shape, dtype) > MAX_TENSOR_BYTES:
        raise FibError(
            f"{where}: input {name!r} of shape {list(shape)} is larger than "
            f"{MAX_TENSOR_BYTES >> 30} GiB"
        )


def load_file_tensor(source: InputSource) -> torch.Tensor:
    """The tensor on the CPU (its header was checked when the case was planned)."""
    with _safe_open(source.path) as handle:
        return handle.get_tensor(source.tensor_key)


def materialize(
    source: InputSource,
    shape: Sequence[int],
    dtype: torch.dtype,
    device: torch.device,
    gen: torch.Generator,
) -> torch.Tensor:
    """A floating-point input on ``device``: the file's values, or standard-normal ones."""
    if source.kind == "random":
        return torch.randn(tuple(shape), dtype=dtype, device=device, generator=gen)
    return load_file_tensor(source).to(device=device, dtype=dtype)
