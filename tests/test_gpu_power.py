"""The power-limit columns: arithmetic, the NVML binding's failure paths (a stand-in
``pynvml``), and the rows."""

from __future__ import annotations

import csv
from types import SimpleNamespace

import pytest
import torch
from stand_ins.fake_pynvml import (
    FakePynvml,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    loader,
    missing,
)
from test_bench_common import FakeTimer, run_main

from fi_attn_bench.device import power as gp
from fi_attn_bench.results.schema import OPTIONAL_COLUMN_BY_NAME
from fi_attn_bench.sweep import run as sweep_run


def reading(wall_s, capped_s=None, energy_j=None):
    return gp.PowerReading(
        int(wall_s * 1e9),
        None if capped_s is None else int(capped_s * 1e9),
        None if energy_j is None else int(energy_j * 1e3),
    )


def test_columns_from_two_readings():
    # 2 s apart: 0.5 s more at the cap, 1400 J more -> 25 %, 700 W
    columns = gp.power_columns(reading(10, 3.0, 5000), reading(12, 3.5, 6400))
    assert columns == {"power_capped_pct": pytest.approx(25.0), "power_W": pytest.approx(700.0)}


def test_columns_are_clamped_to_the_window_and_left_out_where_unknown():
    # a counter that moved by more than the window (or backwards) cannot mean more than 100 %
    assert gp.power_columns(reading(0, 0.0), reading(1, 3.0)) == {"power_capped_pct": 100.0}
    assert gp.power_columns(reading(0, 5.0), reading(1, 4.0)) == {"power_capped_pct": 0.0}
    assert gp.power_columns(reading(0, None, 10), reading(1, None, 110)) == {
        "power_W": pytest.approx(100.0)
    }
    assert gp.power_columns(reading(1, 0.0, 0), reading(1, 1.0, 1)) == {}  # no time passed


class ScriptedCounters:
    """Counters that advance by fixed steps on every read."""

    def __init__(self, capped_step_ns, energy_step_mj):
        self.capped, self.energy = 0, 0
        self.capped_step, self.energy_step = capped_step_ns, energy_step_mj

    def capped_ns(self):
        self.capped += self.capped_step
        return self.capped

    def energy_mj(self):
        self.energy += self.energy_step
        return self.energy


def ticking_clock(step_ns):
    now = [0]

    def clock():
        now[0] += step_ns
        return now[0]

    return clock


def test_monitor_measures_the_work_it_wraps():
    monitor = gp.PowerMonitor(ScriptedCounters(400_000_000, 300_000), ticking_clock(1_000_000_000))
    result, columns = monitor.around(lambda: "done")
    assert result == "done"
    assert columns == {"power_capped_pct": pytest.approx(40.0), "power_W": pytest.approx(300.0)}


def power_nvml(violation=123_456, energy=789, **kwargs):
    return FakePynvml(
        {
            "nvmlDeviceGetViolationStatus": lambda policy: (
                SimpleNamespace(referenceTime=0, violationTime=violation)
                if policy == gp.NVML_PERF_POLICY_POWER
                else None
            ),
            "nvmlDeviceGetTotalEnergyConsumption": energy,
        },
        **kwargs,
    )


def test_nvml_counters_read_through_the_binding():
    module = power_nvml()
    counters = gp.NvmlCounters.open("GPU-abc", load=loader(module))
    assert (counters.capped_ns(), counters.energy_mj()) == (123_456, 789)
    assert ("nvmlDeviceGetViolationStatus", (gp.NVML_PERF_POLICY_POWER,)) in module.calls


def test_nvml_counter_the_device_lacks_reads_as_none():
    module = power_nvml(violation=0, energy=NVMLError_NotSupported())
    module.values["nvmlDeviceGetViolationStatus"] = NVMLError_NotSupported()
    counters = gp.NvmlCounters.open("GPU-abc", load=loader(module))
    assert (counters.capped_ns(), counters.energy_mj()) == (None, None)


@pytest.mark.parametrize(
    "load",
    [
        missing,  # nvidia-ml-py not installed
        loader(power_nvml(init_error=NVMLError_LibraryNotFound())),  # no driver library
        loader(power_nvml(uuids=())),  # no device with this UUID
    ],
)
def test_no_counters_without_nvml_or_the_device(load):
    assert gp.NvmlCounters.open("GPU-abc", load=load) is None


def test_nvml_uuid_names_the_device_as_nvml_does():
    class Properties:
        uuid = "58f7c7d1-0000-1111-2222-333344445555"

    assert gp.nvml_uuid(Properties()) == "GPU-58f7c7d1-0000-1111-2222-333344445555"
    assert gp.nvml_uuid(object()) is None  # a torch without device UUIDs


def test_no_monitor_for_a_cpu_run():
    assert gp.open_power_monitor(torch.device("cpu")) is None


def test_columns_are_registered_for_writer_and_reader():
    assert {"power_capped_pct", "power_W"} <= set(OPTIONAL_COLUMN_BY_NAME)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_rows_carry_the_power_columns_when_a_monitor_exists(tmp_path, monkeypatch):
    def monitor(device):
        # every case: 1 s per read, 0.6 s of it capped, 650 J
        counters = ScriptedCounters(600_000_000, 650_000)
        return gp.PowerMonitor(counters, ticking_clock(1_000_000_000))

    monkeypatch.setattr(sweep_run, "open_power_monitor", monitor)
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    rows = _rows(out)
    assert rows and all(row["status"] == "ok" for row in rows)
    assert [float(row["power_capped_pct"]) for row in rows] == [pytest.approx(60.0)] * len(rows)
    assert [float(row["power_W"]) for row in rows] == [pytest.approx(650.0)] * len(rows)


def test_rows_leave_the_power_columns_empty_without_nvml(tmp_path):
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    rows = _rows(out)
    assert rows and {(row["power_capped_pct"], row["power_W"]) for row in rows} == {("", "")}
