"""Was the GPU at its power limit while a case was measured? (NVML through nvidia-ml-py.)

A compute-bound case can hold a GPU at its board power limit; the limiter then lowers the SM
clock, and the case's time follows the limiter and the temperature. Two counters NVML keeps
tell this per case without sampling anything: the time the device spent clocked down for
power (``nvmlDeviceGetViolationStatus``, cumulative ns) and its energy counter
(``nvmlDeviceGetTotalEnergyConsumption``, mJ, Volta and later). Read before and after a
case, they give ``power_capped_pct`` and ``power_W`` for its row.

NVML is read through ``pynvml`` (``nvidia-ml-py``, the ``[nvidia]`` extra; ``device.nvml``).
Elsewhere (no binding, no driver, MetaX's MACA, a CPU run) ``open_power_monitor`` returns
``None`` and the columns stay empty; so does a counter the device does not keep. Reading is
best-effort by design: a failed read never fails a case.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from fi_attn_bench.device.nvml import NvmlDevice, open_nvml_device

NVML_PERF_POLICY_POWER = 0  # nvmlPerfPolicyType_t: clocked down to stay under the power limit


@dataclass(frozen=True)
class PowerReading:
    """One read of the device's counters; ``None`` where the device keeps no such counter."""

    wall_ns: int
    capped_ns: int | None
    energy_mj: int | None


class CounterSource(Protocol):
    def capped_ns(self) -> int | None: ...
    def energy_mj(self) -> int | None: ...


def power_columns(before: PowerReading, after: PowerReading) -> dict[str, float]:
    """The row's columns for the window between two readings (empty where unknown)."""
    elapsed_ns = after.wall_ns - before.wall_ns
    if elapsed_ns <= 0:
        return {}
    columns: dict[str, float] = {}
    if before.capped_ns is not None and after.capped_ns is not None:
        capped = min(max(after.capped_ns - before.capped_ns, 0), elapsed_ns)
        columns["power_capped_pct"] = 100.0 * capped / elapsed_ns
    if before.energy_mj is not None and after.energy_mj is not None:
        joules = max(after.energy_mj - before.energy_mj, 0) / 1e3
        columns["power_W"] = joules / (elapsed_ns / 1e9)
    return columns


class PowerMonitor:
    """Reads the counters of one device; ``window`` measures a block of work between reads."""

    def __init__(self, source: CounterSource, clock=time.monotonic_ns):
        self.source, self.clock = source, clock

    def read(self) -> PowerReading:
        return PowerReading(self.clock(), self.source.capped_ns(), self.source.energy_mj())

    def around(self, work):
        """Run ``work()``; return its result and the power columns of the time it took."""
        before = self.read()
        result = work()
        return result, power_columns(before, self.read())


def cuda_device_uuid(device) -> str | None:
    """NVML's name of a torch CUDA device; None for a CPU device, ROCm, or no UUID."""
    if getattr(device, "type", None) != "cuda":
        return None
    import torch

    if getattr(torch.version, "hip", None):
        return None  # ROCm's torch.cuda is not NVML's
    try:
        return nvml_uuid(torch.cuda.get_device_properties(device))
    except Exception:  # noqa: BLE001 - no properties, no NVML name
        return None


def _whole(value) -> int | None:
    return None if value is None else int(value)


class NvmlCounters:
    """The two NVML counters of one device."""

    def __init__(self, device: NvmlDevice):
        self.device = device

    @classmethod
    def open(
        cls, uuid: str, load: Callable[[str], ModuleType] = importlib.import_module
    ) -> NvmlCounters | None:
        device = open_nvml_device(uuid, load).device
        return cls(device) if device is not None else None

    def capped_ns(self) -> int | None:
        status = self.device.read("nvmlDeviceGetViolationStatus", NVML_PERF_POLICY_POWER)
        return _whole(getattr(status, "violationTime", None))

    def energy_mj(self) -> int | None:
        return _whole(self.device.read("nvmlDeviceGetTotalEnergyConsumption"))


def nvml_uuid(properties) -> str | None:
    """NVML's name for a torch CUDA device: its UUID with the ``GPU-`` prefix (this is what
    stays right under ``CUDA_VISIBLE_DEVICES``, unlike an index)."""
    uuid = getattr(properties, "uuid", None)
    return f"GPU-{uuid}" if uuid else None


def open_power_monitor(device) -> PowerMonitor | None:
    """A monitor for a CUDA device with NVML and at least one counter; otherwise ``None``."""
    uuid = cuda_device_uuid(device)
    counters = NvmlCounters.open(uuid) if uuid else None
    if counters is None:
        return None
    monitor = PowerMonitor(counters)
    first = monitor.read()
    return monitor if (first.capped_ns, first.energy_mj) != (None, None) else None
