"""The device's energy counter, and a power sampler to check it against.

* NVIDIA: ``nvmlDeviceGetTotalEnergyConsumption`` (mJ since the driver loaded, Volta and
  later) through ``nvidia-ml-py`` (``device.nvml``).  The counter moves in steps; its
  update period is measured once when it is opened (``counter_period_s``), and the energy
  windows of a case span ``ENERGY_WINDOW_UPDATES`` of them (used by ``timing.energy``).
* MetaX: ``pymxsml`` offers board power (``mxSmlGetBoardPowerInfo``) but no energy counter
  known to this harness, so the columns stay empty with that note.
* Elsewhere (a CPU run, no binding, an unsupported counter) the columns stay empty and the
  row's notes say why; nothing is estimated in place of the counter.

``PowerSampler`` integrates sampled board power over wall-time windows: the independent
check of the counter that ``python -m validation energy`` runs on a GPU.
"""

from __future__ import annotations

import bisect
import importlib
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import ModuleType
from typing import Protocol

from fi_attn_bench.device.nvml import NvmlDevice, open_nvml_device
from fi_attn_bench.device.power import cuda_device_uuid

PROBE_BUDGET_S = 0.5  # how long the period probe may watch the counter, once per sweep
PROBE_INTERVAL_S = 0.0005
PROBE_STEPS = 5  # counter changes the probe waits for (4 periods)
NVML_FIELD_POWER_INSTANT = 186  # NVML_FI_DEV_POWER_INSTANT: mW, not averaged (driver r530+)
# A window spans at least this many updates of the counter: with the steps traced, what is
# left is the counter's own noise per update, which a few updates average down.
ENERGY_WINDOW_UPDATES = 5
# A head-to-head round's energy mixes its neighbours' power over the counter periods at
# its two ends; a round of this many updates keeps that under a sixth of their difference.
PAIRED_ROUND_UPDATES = 3
TRACE_POLL_S = 0.005  # how often the trace reads the counter: a step's time within 5 ms


class EnergyCounter(Protocol):
    """A device's cumulative energy counter, in mJ; None when a read fails."""

    def energy_mj(self) -> float | None: ...


@dataclass(frozen=True)
class CounterStep:
    """The counter changed to ``energy_mj`` at ``time_s`` (midway between two polls)."""

    time_s: float
    energy_mj: float


class PollingThread:
    """Calls ``tick`` every ``interval_s`` in a daemon thread between start() and stop()."""

    def __init__(self, tick: Callable[[], None], interval_s: float, name: str):
        self.tick, self.interval_s, self.name = tick, interval_s, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.tick()


class CounterTrace:
    """The counter's steps, polled every ``poll_s`` in a background thread while at least
    one recorder holds it (the loops of a head-to-head case share one)."""

    def __init__(
        self,
        counter: EnergyCounter,
        poll_s: float = TRACE_POLL_S,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.counter, self.poll_s, self.clock = counter, poll_s, clock
        self.failed = False  # a read failed while polling
        self._steps: list[CounterStep] = []
        self._holders = 0
        self._lock = threading.Lock()
        self._poller = PollingThread(self._poll, poll_s, "energy-trace")
        self._last: float | None = None
        self._read_at = 0.0

    def acquire(self) -> None:
        with self._lock:
            self._holders += 1
            if self._holders == 1:
                self._steps, self.failed = [], False
                self._last, self._read_at = self.counter.energy_mj(), self.clock()
                self._poller.start()

    def release(self) -> None:
        with self._lock:
            self._holders -= 1
            if self._holders <= 0:
                self._poller.stop()

    @property
    def polling(self) -> bool:
        return self._poller.running

    def steps(self) -> tuple[CounterStep, ...]:
        return tuple(self._steps)

    def _poll(self) -> None:
        value, now = self.counter.energy_mj(), self.clock()
        if value is None:
            self.failed = True
        elif value != self._last:
            self._steps.append(CounterStep((self._read_at + now) / 2.0, value))
            self._last = value
        self._read_at = now


class NvmlEnergy:
    """NVML's total-energy counter of one device, in mJ."""

    source = "nvml"

    def __init__(self, device: NvmlDevice):
        self.device = device

    def energy_mj(self) -> float | None:
        value = self.device.read("nvmlDeviceGetTotalEnergyConsumption")
        return None if value is None else float(value)


@dataclass(frozen=True)
class EnergyAccess:
    """The counter a sweep reads, its update period, or why there is none (``reason``)."""

    counter: EnergyCounter | None
    period_s: float = 0.0
    reason: str = ""
    trace: CounterTrace | None = None  # the counter's steps while batches run
    clock: Callable[[], float] = time.perf_counter  # what the batches' edges are stamped with

    @property
    def window_s(self) -> float:
        """The shortest window of batches whose counter difference is trusted."""
        return ENERGY_WINDOW_UPDATES * self.period_s

    @property
    def round_s(self) -> float:
        """The shortest head-to-head round whose energy is trusted."""
        return PAIRED_ROUND_UPDATES * self.period_s


def counter_period_s(
    counter: EnergyCounter,
    clock: Callable[[], float] = time.perf_counter,
    sleep: Callable[[float], None] = time.sleep,
    budget_s: float = PROBE_BUDGET_S,
) -> float | None:
    """The counter's update period: the median time between its changes while it is watched
    for up to ``budget_s`` (an idle GPU still draws tens of W); None without two changes."""
    changes: list[float] = []
    last = counter.energy_mj()
    began = clock()
    while len(changes) < PROBE_STEPS and clock() - began < budget_s:
        sleep(PROBE_INTERVAL_S)
        value = counter.energy_mj()
        if value is None:
            return None
        if value != last:
            changes.append(clock())
            last = value
    gaps = [later - earlier for earlier, later in pairwise(changes)]
    return statistics.median(gaps) if gaps else None


def open_nvml_energy(uuid: str, load=importlib.import_module, probe=counter_period_s):
    """NVML's energy counter of this device with its period, or why it cannot be used."""
    opened = open_nvml_device(uuid, load)
    if opened.device is None:
        return EnergyAccess(None, reason=opened.reason)
    value, why = opened.device.read_or_reason("nvmlDeviceGetTotalEnergyConsumption")
    if value is None:
        return EnergyAccess(None, reason=f"NVML's energy counter is unreadable ({why})")
    counter = NvmlEnergy(opened.device)
    period = probe(counter)
    if period is None:
        return EnergyAccess(
            None, reason=f"NVML's energy counter did not move twice in {PROBE_BUDGET_S:g} s"
        )
    return EnergyAccess(counter, period, trace=CounterTrace(counter))


def pymxsml_importable(load: Callable[[str], ModuleType] = importlib.import_module) -> bool:
    try:
        load("pymxsml")
    except Exception:  # noqa: BLE001 - not installed or broken
        return False
    return True


def open_energy_counter(
    device, load=importlib.import_module, probe=counter_period_s
) -> EnergyAccess:
    """The energy counter of a torch device: NVML on NVIDIA, else why there is none."""
    kind = getattr(device, "type", None)
    if kind != "cuda":
        return EnergyAccess(None, reason=f"no energy counter on a {kind} device")
    uuid = cuda_device_uuid(device)
    access = open_nvml_energy(uuid, load, probe) if uuid else None
    if access is not None and access.counter is not None:
        return access
    if pymxsml_importable(load):
        return EnergyAccess(None, reason="pymxsml (MetaX) offers board power, no energy counter")
    return access or EnergyAccess(None, reason="the device has no NVML UUID")


@dataclass(frozen=True)
class PowerSample:
    time_s: float
    watts: float


class PowerSampler:
    """Samples board power every ``interval_s`` in a background thread; ``energy_j`` is the
    trapezoid integral of the samples over a wall-time window (same clock as the caller)."""

    def __init__(
        self,
        read_watts: Callable[[], float | None],
        interval_s: float = 0.005,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.read_watts, self.interval_s, self.clock = read_watts, interval_s, clock
        self.samples: list[PowerSample] = []
        self._poller = PollingThread(self.sample_once, interval_s, "power-sampler")

    def sample_once(self) -> None:
        watts = self.read_watts()
        if watts is not None:
            self.samples.append(PowerSample(self.clock(), watts))

    def __enter__(self) -> PowerSampler:
        self.sample_once()
        self._poller.start()
        return self

    def __exit__(self, *exc) -> None:
        self._poller.stop()

    def energy_j(self, start_s: float, end_s: float) -> float | None:
        """Joules between two clock readings; None without samples on both sides."""
        return integrate_power(self.samples, start_s, end_s)

    def frozen(self) -> tuple[list[PowerSample], list[float]]:
        """The samples so far and their times, for many ``integrate_power`` calls."""
        samples = list(self.samples)
        return samples, [sample.time_s for sample in samples]


def _watts_at(samples: Sequence[PowerSample], times: Sequence[float], at: float) -> float:
    """Power at ``at``, linear between the samples around it (inside their span)."""
    right = bisect.bisect_left(times, at)
    if times[right] == at:
        return samples[right].watts
    earlier, later = samples[right - 1], samples[right]
    weight = (at - earlier.time_s) / (later.time_s - earlier.time_s)
    return earlier.watts + weight * (later.watts - earlier.watts)


def integrate_power(
    samples: Sequence[PowerSample],
    start_s: float,
    end_s: float,
    times: Sequence[float] | None = None,
) -> float | None:
    """Trapezoid integral in J of linearly interpolated power from ``start_s`` to ``end_s``;
    None without a sample at or beyond both ends.  ``times``: the samples' times, when the
    caller keeps them (many windows over one long recording)."""
    if end_s <= start_s or not samples:
        return None
    times = times if times is not None else [sample.time_s for sample in samples]
    if times[0] > start_s or times[-1] < end_s:
        return None
    inside = samples[bisect.bisect_right(times, start_s) : bisect.bisect_left(times, end_s)]
    points = [
        PowerSample(start_s, _watts_at(samples, times, start_s)),
        *inside,
        PowerSample(end_s, _watts_at(samples, times, end_s)),
    ]
    return sum((b.time_s - a.time_s) * (a.watts + b.watts) / 2.0 for a, b in pairwise(points))


def nvml_power_reader(device: NvmlDevice, averaged: bool = False) -> Callable[[], float | None]:
    """Board power in W: NVML's instantaneous field where the driver has it, else (or with
    ``averaged``) ``nvmlDeviceGetPowerUsage`` (averaged over up to 1 s on recent GPUs)."""

    def instant() -> float | None:
        try:
            (value,) = device.call("nvmlDeviceGetFieldValues", [NVML_FIELD_POWER_INSTANT])
        except Exception:  # noqa: BLE001 - an older binding or driver
            return None
        return value.value.uiVal / 1e3 if value.nvmlReturn == 0 else None

    def averaged_power() -> float | None:
        milliwatts = device.read("nvmlDeviceGetPowerUsage")
        return None if milliwatts is None else milliwatts / 1e3

    return averaged_power if averaged or instant() is None else instant


def open_power_sampler(
    device, load=importlib.import_module, interval_s: float = 0.005, averaged: bool = False
):
    """A ``PowerSampler`` of a CUDA device through NVML, or None (with no NVML device)."""
    uuid = cuda_device_uuid(device)
    opened = open_nvml_device(uuid, load) if uuid else None
    if opened is None or opened.device is None:
        return None
    read = nvml_power_reader(opened.device, averaged)
    return PowerSampler(read, interval_s) if read() is not None else None
