"""The conditions a case ran under: SM clock, temperature, clock throttle reasons.

Read before a case, after it, and at the boundaries between its timed batches (the
measuring loop's hook), never inside a timed call: one read is a few NVML calls, about
10 us, against batches of ~50 ms of GPU work.  The readings give the row's
``sm_clock_*``, ``temp_*`` and ``throttle_reasons`` columns (``conditions_columns``).

Sources, first that opens wins:

* NVIDIA: NVML through ``nvidia-ml-py`` (``pynvml``, the ``[nvidia]`` extra; ``nvml.py``),
  the device named by its UUID as in ``power.py``.  ``nvmlDeviceGetClockInfo`` / ``GetMaxClockInfo``
  (``NVML_CLOCK_SM``, MHz), ``nvmlDeviceGetTemperature`` (``NVML_TEMPERATURE_GPU``, C),
  ``nvmlDeviceGetCurrentClocksEventReasons`` (driver r535+; ``...ThrottleReasons`` before),
  a bitmask decoded by ``THROTTLE_REASON_BITS``.
* MetaX: ``pymxsml`` (ships with MACA as ``/opt/maca/share/mxsml/pymxsml-*.whl``) when it
  imports.  Unverified on a C500 (read from public code that uses it, not run here):
  ``mxSmlGetClocks(index, MXSML_CLOCK_XCORE)`` returns the compute clocks in MHz (a list:
  the largest is taken); ``mxSmlGetTemperatureInfo(index, MXSML_TEMPERATURE_HOTSPOT)``
  returns hundredths of a degree (gpustack divides by 100; mxtop divides values above
  1000 by 100, which is what ``mxsml_celsius`` does).  No max-clock or throttle-reason
  call is known, so those columns stay empty on MetaX.
* Otherwise (CPU, ROCm, no driver) no source: the columns stay empty.

Every read is best-effort: a missing symbol, a failing call or a raising binding reads as
None and never fails a case.
"""

from __future__ import annotations

import importlib
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

from fi_attn_bench.device.nvml import NvmlDevice, is_missing_function, open_nvml_device
from fi_attn_bench.device.power import cuda_device_uuid

NVML_CLOCK_SM = 1  # nvmlClockType_t
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t

# nvmlClocksEventReasons bits (nvml.h, nvmlClocksThrottleReason* before r535)
THROTTLE_REASON_BITS: Mapping[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}

# The reasons call under its current name first, then the one drivers before r535 export.
NVML_REASON_FUNCTIONS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)

# Left out of the row: every read follows a synchronize (before a case, between batches), when
# the GPU has just gone idle, so this reason would show in every row and tell nothing.
IDLE_REASONS = frozenset({"gpu_idle"})


@dataclass(frozen=True)
class TelemetryReading:
    """One read of the device; None where the source cannot tell."""

    sm_clock_mhz: float | None = None
    temperature_c: float | None = None
    throttle_reasons: tuple[str, ...] | None = None


class Telemetry(Protocol):
    """A device's readable conditions (``source`` names the library: nvml, pymxsml)."""

    source: str

    def read(self) -> TelemetryReading: ...

    def max_sm_clock_mhz(self) -> float | None: ...


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """The named bits of an NVML reasons mask, in bit order; unknown bits as ``bit_0x...``."""
    names = [name for bit, name in THROTTLE_REASON_BITS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASON_BITS)
    bit = 1
    while unknown >= bit:
        if unknown & bit:
            names.append(f"bit_{bit:#x}")
        bit <<= 1
    return tuple(names)


def conditions_columns(
    readings: Sequence[TelemetryReading], max_clock_mhz: float | None
) -> dict[str, object]:
    """The row's condition columns from a case's readings in time order (empty where unknown)."""
    columns: dict[str, object] = {}
    clocks = [r.sm_clock_mhz for r in readings if r.sm_clock_mhz is not None]
    if clocks:
        columns["sm_clock_mean_MHz"] = statistics.fmean(clocks)
        columns["sm_clock_min_MHz"] = min(clocks)
    if max_clock_mhz is not None:
        columns["sm_clock_max_MHz"] = max_clock_mhz
    temperatures = [r.temperature_c for r in readings if r.temperature_c is not None]
    if temperatures:
        columns["temp_start_C"], columns["temp_end_C"] = temperatures[0], temperatures[-1]
    reasons = [r.throttle_reasons for r in readings if r.throttle_reasons is not None]
    if reasons:
        seen = dict.fromkeys(n for names in reasons for n in names if n not in IDLE_REASONS)
        columns["throttle_reasons"] = ";".join(seen)
    return columns


def _guarded(read: Callable[[], float | None]) -> float | None:
    try:
        return read()
    except Exception:  # noqa: BLE001 - a reading is best-effort: never fail a case for it
        return None


class NvmlTelemetry:
    """SM clock, max clock, temperature and throttle reasons of one NVML device."""

    source = "nvml"

    def __init__(self, device: NvmlDevice):
        self.device = device

    def _number(self, function: str, *args) -> float | None:
        value = self.device.read(function, *args)
        return _guarded(lambda: float(value)) if value is not None else None

    def sm_clock_mhz(self) -> float | None:
        return self._number("nvmlDeviceGetClockInfo", NVML_CLOCK_SM)

    def max_sm_clock_mhz(self) -> float | None:
        return self._number("nvmlDeviceGetMaxClockInfo", NVML_CLOCK_SM)

    def temperature_c(self) -> float | None:
        return self._number("nvmlDeviceGetTemperature", NVML_TEMPERATURE_GPU)

    def throttle_reasons(self) -> tuple[str, ...] | None:
        for function in NVML_REASON_FUNCTIONS:
            try:
                mask = int(self.device.call(function))
            except Exception as exc:  # noqa: BLE001 - a reading is best-effort
                if is_missing_function(exc):
                    continue  # an older binding or driver: try the name before r535
                return None
            return decode_throttle_reasons(mask)
        return None

    def read(self) -> TelemetryReading:
        return TelemetryReading(self.sm_clock_mhz(), self.temperature_c(), self.throttle_reasons())


def mxsml_celsius(raw: float) -> float:
    """pymxsml's temperature in C: values above 1000 are hundredths of a degree (unverified)."""
    return raw / 100.0 if raw > 1000 else raw


def _largest_number(value) -> float | None:
    """The largest number in a scalar or a sequence of them (mxSmlGetClocks returns a list;
    an array of the binding iterates the same way)."""
    try:
        items = [value] if isinstance(value, (str, bytes)) else list(value)
    except TypeError:  # a scalar
        items = [value]
    numbers = []
    for item in items:
        try:
            numbers.append(float(item))
        except (TypeError, ValueError):
            continue
    return max(numbers) if numbers else None


class MxsmlTelemetry:
    """Compute clock and hotspot temperature of one MetaX device through ``pymxsml``."""

    source = "pymxsml"

    def __init__(self, module: ModuleType, index: int):
        self.module, self.index = module, index

    def sm_clock_mhz(self) -> float | None:
        clock = getattr(self.module, "MXSML_CLOCK_XCORE", None)
        if clock is None:
            return None
        return _guarded(lambda: _largest_number(self.module.mxSmlGetClocks(self.index, clock)))

    def max_sm_clock_mhz(self) -> float | None:
        return None  # no such call known in pymxsml

    def temperature_c(self) -> float | None:
        sensor = getattr(self.module, "MXSML_TEMPERATURE_HOTSPOT", None)
        if sensor is None:
            return None
        raw = _guarded(lambda: float(self.module.mxSmlGetTemperatureInfo(self.index, sensor)))
        return None if raw is None else mxsml_celsius(raw)

    def read(self) -> TelemetryReading:
        return TelemetryReading(self.sm_clock_mhz(), self.temperature_c(), None)


def readable_fields(telemetry: Telemetry) -> dict[str, str]:
    """Each field of one read: its value, or "unreadable" (the doctor's evidence)."""
    reading = telemetry.read()
    values = {
        "sm_clock_MHz": reading.sm_clock_mhz,
        "max_sm_clock_MHz": telemetry.max_sm_clock_mhz(),
        "temperature_C": reading.temperature_c,
        "throttle_reasons": None
        if reading.throttle_reasons is None
        else (";".join(reading.throttle_reasons) or "(none active)"),
    }
    return {name: _shown(value) for name, value in values.items()}


def _shown(value: float | str | None) -> str:
    if value is None:
        return "unreadable"
    return f"{value:g}" if isinstance(value, float) else str(value)


def visible_index(torch_index: int, environ: Mapping[str, str] = os.environ) -> int:
    """The management library's index of a torch device: through ``MACA_VISIBLE_DEVICES`` or
    ``CUDA_VISIBLE_DEVICES`` when one lists integers (unverified on MetaX), else itself."""
    for name in ("MACA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        listed = [text.strip() for text in environ.get(name, "").split(",") if text.strip()]
        if listed and all(text.isdigit() for text in listed) and torch_index < len(listed):
            return int(listed[torch_index])
    return torch_index


def open_mxsml(index: int, load=importlib.import_module) -> MxsmlTelemetry | None:
    """pymxsml's reader of MetaX device ``index``; None where it does not import or start."""
    try:
        module = load("pymxsml")
        module.mxSmlInit()
    except Exception:  # noqa: BLE001 - not installed, no driver, or a failing init
        return None
    return MxsmlTelemetry(module, index)


def open_nvml_telemetry(uuid: str, load=importlib.import_module) -> NvmlTelemetry | None:
    device = open_nvml_device(uuid, load).device
    return NvmlTelemetry(device) if device is not None else None


def _anything_readable(telemetry: Telemetry) -> bool:
    reading = telemetry.read()
    return reading != TelemetryReading() or telemetry.max_sm_clock_mhz() is not None


def open_telemetry(device) -> Telemetry | None:
    """NVML on NVIDIA, pymxsml on MetaX, whichever opens and reads something; else None."""
    if getattr(device, "type", None) != "cuda":
        return None
    uuid = cuda_device_uuid(device)
    candidates = [open_nvml_telemetry(uuid) if uuid else None]
    if candidates[0] is None:
        candidates.append(open_mxsml(visible_index(device.index or 0)))
    for telemetry in candidates:
        if telemetry is not None and _anything_readable(telemetry):
            return telemetry
    return None
