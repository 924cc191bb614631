"""The plugin worker's answers read as plain data: every number, text, list and tensor the
sweep takes from the worker (``fi_attn_bench.sweep.isolation``) passes one of these readers,
which check its type, size and range and raise ``WorkerError`` naming what was wrong."""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from fi_attn_bench.results.schema import OPTIONAL_COLUMN_NAMES
from fi_attn_bench.timing.energy import CallEnergy
from fi_attn_bench.timing.integrity import IntegrityError
from fi_attn_bench.timing.statistics import Measurement

MAX_MESSAGE_BYTES = 8 << 20  # one JSON message
MAX_TENSOR_BYTES = 16 << 30  # one output tensor's bytes
MAX_SAMPLES = 10_000_000
MAX_TEXT = 20_000  # characters of one text cell or error message
DTYPES = {
    name: getattr(torch, name)
    for name in ("float32", "float16", "bfloat16", "float64", "float8_e4m3fn", "float8_e5m2")
    if hasattr(torch, name)
}


class WorkerError(RuntimeError):
    """The worker died, hung, or answered with something other than the protocol's data."""


class RemoteError(RuntimeError):
    """An error raised in the worker, by its type's name and message (never its object)."""


def int_field(message: Mapping, key: str) -> int:
    value = message.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_TENSOR_BYTES:
        raise WorkerError(f"the plugin worker sent {key}={value!r}, not an integer in range")
    return value


def float_field(message: Mapping, key: str) -> float:
    value = message.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WorkerError(f"the plugin worker sent {key}={value!r}, not a finite number")
    return float(value)


def list_field(message: Mapping, key: str) -> list:
    value = message.get(key)
    if not isinstance(value, list):
        raise WorkerError(f"the plugin worker sent {key} as {type(value).__name__}, not a list")
    return value


def text_field(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise WorkerError(
            f"the plugin worker sent {what} that is not a text of at most {MAX_TEXT} characters"
        )
    return value


def error_text(error: object) -> str:
    if not isinstance(error, dict):
        return "no reason given"
    return f"{error.get('type')}: {str(error.get('message'))[:MAX_TEXT]}"


def columns(found: object) -> dict[str, object]:
    """The worker's columns: registered optional ones, with scalar values."""
    if not isinstance(found, dict):
        raise WorkerError("the plugin worker sent columns that are not an object")
    columns: dict[str, object] = {}
    for name, value in found.items():
        if name not in OPTIONAL_COLUMN_NAMES:
            raise WorkerError(f"the plugin worker sent an unregistered column {name[:80]!r}")
        if isinstance(value, str):
            value = text_field(value, f"column {name}")
        elif value is not None and not isinstance(value, (bool, int, float)):
            raise WorkerError(f"the plugin worker sent column {name} as {type(value).__name__}")
        columns[name] = value
    return columns


def samples(found: object, what: str) -> tuple[float, ...]:
    if not isinstance(found, list) or len(found) > MAX_SAMPLES:
        raise WorkerError(f"the plugin worker sent {what} that is not a list of samples")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in found):
        raise WorkerError(f"the plugin worker sent {what} with a non-number")
    values = tuple(float(v) for v in found)
    if not all(math.isfinite(v) and v >= 0 for v in values):
        raise WorkerError(f"the plugin worker sent {what} with a negative or non-finite value")
    return values


def energy(found: object) -> CallEnergy | None:
    if found is None:
        return None
    if not isinstance(found, dict):
        raise WorkerError("the plugin worker sent energy that is not an object")
    values = {}
    for key in ("energy_mj", "avg_power_w"):
        value = found.get(key)
        values[key] = None if value is None else float_field(found, key)
    return CallEnergy(
        values["energy_mj"],
        values["avg_power_w"],
        int_field(found, "windows"),
        text_field(found.get("note", ""), "an energy note"),
    )


def measurement(found: object) -> Measurement | None:
    if found is None:
        return None
    if not isinstance(found, dict):
        raise WorkerError("the plugin worker sent a measurement that is not an object")
    kernels = found.get("kernels")
    if not isinstance(kernels, list) or len(kernels) > 1000:
        raise WorkerError("the plugin worker sent kernel names that are not a short list")
    per_call = found.get("per_call")
    if not isinstance(per_call, bool):
        raise WorkerError("the plugin worker sent per_call that is not true or false")
    runs = int_field(found, "runs_per_sample")
    if runs < 1:
        raise WorkerError(f"the plugin worker sent runs_per_sample={runs}")
    try:
        return Measurement(
            samples(found.get("samples"), "samples"),
            text_field(found.get("timer"), "a timer name"),
            text_field(found.get("l2"), "an L2 mode"),
            tuple(text_field(k, "a kernel name") for k in kernels),
            runs,
            per_call,
            float_field(found, "batch_gpu_ms"),
            int_field(found, "starved_calls"),
            throttled_samples=int_field(found, "throttled_samples"),
            discarded_samples=int_field(found, "discarded_samples"),
            energy=energy(found.get("energy")),
        )
    except WorkerError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. no sample: the worker's data is malformed
        raise WorkerError(f"the plugin worker sent an invalid measurement: {exc}") from None


def rebuilt_error(found: object) -> Exception | None:
    """The worker's error as this process's exception, by name and message only."""
    if found is None:
        return None
    if not isinstance(found, dict):
        raise WorkerError("the plugin worker sent an error that is not an object")
    name = text_field(found.get("type"), "an error type")
    message = text_field(found.get("message"), "an error message")
    if name == IntegrityError.__name__ and isinstance(found.get("check"), str):
        check = text_field(found["check"], "a check name")
        prefix = f"integrity check {check} failed: "
        return IntegrityError(check, message.removeprefix(prefix))
    if not name.isidentifier():
        raise WorkerError(f"the plugin worker sent an error type {name[:80]!r}")
    return type(name, (RemoteError,), {})(message)


def tensor(header: object, raw: bytes) -> torch.Tensor:
    if not isinstance(header, dict):
        raise WorkerError("the plugin worker described a tensor with something else")
    dtype = DTYPES.get(str(header.get("dtype")))
    shape = header.get("shape")
    if dtype is None:
        raise WorkerError(
            f"the plugin worker sent a tensor of dtype {str(header.get('dtype'))[:40]!r}"
        )
    if not isinstance(shape, list) or not all(isinstance(n, int) and 0 <= n for n in shape):
        raise WorkerError("the plugin worker sent a tensor shape that is not a list of sizes")
    count = math.prod(shape)
    if count * torch.empty((), dtype=dtype).element_size() != len(raw):
        raise WorkerError(f"the plugin worker sent {len(raw)} bytes for a tensor of shape {shape}")
    if not raw:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype).reshape(shape)
