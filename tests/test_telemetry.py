"""Run conditions (clock, temperature, throttle reasons) and the throttle policy, on the CPU:
NVML and pymxsml are stand-ins; the loop runs a fake timer."""

from __future__ import annotations

import csv
import ctypes
from types import SimpleNamespace

import pytest
from stand_ins.fake_pynvml import (
    FakePynvml,
    NVMLError,
    NVMLError_FunctionNotFound,
    NVMLError_LibraryNotFound,
    NVMLError_NotSupported,
    loader,
    missing,
)
from test_bench_common import FakeTimer, run_main

from fi_attn_bench.device import telemetry as tm
from fi_attn_bench.sweep import run as sweep_run
from fi_attn_bench.timing import conditions as tc
from fi_attn_bench.timing import loop as tloop
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.statistics import Batch


def nvml(clock=1500, max_clock=1980, temp=55, reasons=0x4):
    module = FakePynvml(
        {
            "nvmlDeviceGetClockInfo": clock,
            "nvmlDeviceGetMaxClockInfo": max_clock,
            "nvmlDeviceGetTemperature": temp,
            "nvmlDeviceGetCurrentClocksEventReasons": reasons,
            "nvmlDeviceGetCurrentClocksThrottleReasons": NVMLError_FunctionNotFound(),
        }
    )
    return tm.open_nvml_telemetry("GPU-abc", load=loader(module)), module


def test_nvml_reads_clock_temperature_and_decoded_reasons():
    telemetry, module = nvml(reasons=0x4 | 0x40)
    assert telemetry.read() == tm.TelemetryReading(
        1500, 55, ("sw_power_cap", "hw_thermal_slowdown")
    )
    assert telemetry.max_sm_clock_mhz() == 1980
    assert ("nvmlDeviceGetClockInfo", (tm.NVML_CLOCK_SM,)) in module.calls
    assert ("nvmlDeviceGetTemperature", (tm.NVML_TEMPERATURE_GPU,)) in module.calls


def test_nvml_failing_calls_and_missing_functions_read_as_none():
    telemetry, module = nvml(
        clock=NVMLError_NotSupported(), temp=RuntimeError("boom"), reasons=NVMLError()
    )
    del module.values["nvmlDeviceGetMaxClockInfo"]  # a binding without the function
    assert telemetry.read() == tm.TelemetryReading(None, None, None)
    assert telemetry.max_sm_clock_mhz() is None


def test_nvml_reasons_fall_back_to_the_pre_r535_name():
    telemetry, module = nvml(reasons=NVMLError_FunctionNotFound())  # a driver before r535
    module.values["nvmlDeviceGetCurrentClocksThrottleReasons"] = 0x1
    assert telemetry.read().throttle_reasons == ("gpu_idle",)
    del module.values["nvmlDeviceGetCurrentClocksEventReasons"]  # an older binding
    assert telemetry.read().throttle_reasons == ("gpu_idle",)
    module.values["nvmlDeviceGetCurrentClocksThrottleReasons"] = NVMLError_FunctionNotFound()
    assert telemetry.read().throttle_reasons is None


def test_reason_bits_decode_in_order_and_keep_unknown_bits():
    assert tm.decode_throttle_reasons(0) == ()
    assert tm.decode_throttle_reasons(0x4 | 0x1) == ("gpu_idle", "sw_power_cap")
    assert tm.decode_throttle_reasons(0x200 | 0x8) == ("hw_slowdown", "bit_0x200")


def test_no_nvml_no_telemetry():
    assert tm.open_nvml_telemetry("GPU-abc", load=missing) is None
    broken = FakePynvml(init_error=NVMLError_LibraryNotFound())
    assert tm.open_nvml_telemetry("GPU-abc", load=loader(broken)) is None
    assert tm.open_telemetry(SimpleNamespace(type="cpu")) is None


class FakeMxsml:
    MXSML_CLOCK_XCORE = 2
    MXSML_TEMPERATURE_HOTSPOT = 0

    def __init__(self, clocks=(1600, 1200), temperature=4775, fail_init=False):
        self.clocks, self.temperature, self.fail_init = clocks, temperature, fail_init

    def mxSmlInit(self):
        if self.fail_init:
            raise RuntimeError("no driver")

    def mxSmlGetClocks(self, index, clock):
        assert clock == self.MXSML_CLOCK_XCORE
        return list(self.clocks) if isinstance(self.clocks, tuple) else self.clocks

    def mxSmlGetTemperatureInfo(self, index, sensor):
        if isinstance(self.temperature, Exception):
            raise self.temperature
        return self.temperature


def test_pymxsml_reads_scaled_temperature_and_largest_clock():
    telemetry = tm.open_mxsml(0, load=lambda name: FakeMxsml())
    assert telemetry.read() == tm.TelemetryReading(1600.0, 47.75, None)
    assert telemetry.max_sm_clock_mhz() is None
    assert tm.mxsml_celsius(47.0) == 47.0  # already in degrees
    as_array = FakeMxsml(clocks=(ctypes.c_uint * 2)(1500, 1550), temperature=5012)
    assert tm.open_mxsml(0, load=lambda name: as_array).read() == tm.TelemetryReading(1550.0, 50.12)
    scalar = FakeMxsml(clocks=1400)
    assert tm.open_mxsml(0, load=lambda name: scalar).sm_clock_mhz() == 1400.0


def test_pymxsml_missing_failing_or_incomplete_reads_nothing():
    def missing(name):
        raise ModuleNotFoundError(name)

    assert tm.open_mxsml(0, load=missing) is None
    assert tm.open_mxsml(0, load=lambda name: FakeMxsml(fail_init=True)) is None
    broken = FakeMxsml(clocks=("n/a",), temperature=RuntimeError("x"))
    assert tm.open_mxsml(0, load=lambda name: broken).read() == tm.TelemetryReading()
    bare = SimpleNamespace(mxSmlInit=lambda: None)  # a build without these constants
    assert tm.open_mxsml(0, load=lambda name: bare).read() == tm.TelemetryReading()


def test_visible_index_follows_the_visible_devices_list():
    assert tm.visible_index(1, {"MACA_VISIBLE_DEVICES": "4,6"}) == 6
    assert tm.visible_index(1, {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b"}) == 1
    assert tm.visible_index(0, {}) == 0


def reading(clock=None, temp=None, reasons=None):
    return tm.TelemetryReading(clock, temp, reasons)


def test_condition_columns_from_readings():
    readings = [
        reading(1980, 44, ()),
        reading(1260, 60, ("sw_power_cap",)),
        reading(1500, 67, ("sw_power_cap", "hw_slowdown")),
    ]
    assert tm.conditions_columns(readings, 1980) == {
        "sm_clock_mean_MHz": pytest.approx(1580),
        "sm_clock_min_MHz": 1260,
        "sm_clock_max_MHz": 1980,
        "temp_start_C": 44,
        "temp_end_C": 67,
        "throttle_reasons": "sw_power_cap;hw_slowdown",
    }
    assert tm.conditions_columns([reading(), reading()], None) == {}
    idle = [reading(reasons=("gpu_idle",)), reading(reasons=("gpu_idle", "sw_power_cap"))]
    assert tm.conditions_columns(idle, None) == {"throttle_reasons": "sw_power_cap"}
    assert tm.conditions_columns([reading(reasons=())], None) == {"throttle_reasons": ""}


def test_readable_fields_name_each_field():
    telemetry, _ = nvml(temp=NVMLError_NotSupported(), reasons=0)
    assert tm.readable_fields(telemetry) == {
        "sm_clock_MHz": "1500",
        "max_sm_clock_MHz": "1980",
        "temperature_C": "unreadable",
        "throttle_reasons": "(none active)",
    }


class ScriptedTelemetry:
    source = "scripted"

    def __init__(self, clocks, max_clock=2000):
        self.clocks, self.max_clock = list(clocks), max_clock

    def read(self):
        clock = self.clocks.pop(0) if self.clocks else 2000
        return tm.TelemetryReading(clock, 50, ())

    def max_sm_clock_mhz(self):
        return self.max_clock


@pytest.mark.parametrize(
    ("before", "after", "throttled"),
    [(2000, 2000, False), (1400, 2000, True), (2000, 1400, True), (None, None, False)],
)
def test_a_batch_is_throttled_when_either_boundary_reads_below(before, after, throttled):
    assert tc.is_throttled(reading(before), reading(after), 1500) is throttled
    assert not tc.is_throttled(reading(before), reading(after), None)


def run_loop(policy, clocks, batches, sleeps=None, max_clock=2000):
    """The measuring loop over scripted batches with a scripted clock at each boundary."""
    options = TimingOptions(
        min_samples=1, min_time_ms=0.0, throttle_policy=policy, cooldown_ms=20, max_time_s=60
    )
    queue = iter(batches)

    class Session:
        runs_per_sample = 1

        def batch(self, calls):
            return Batch(next(queue))

        def record(self, loop):
            loop()

    done = iter([False] * (len(batches) - 1) + [True])
    stop = lambda samples, elapsed, options, runs: next(done)  # noqa: E731
    conditions = tc.CaseConditions(
        ScriptedTelemetry(clocks, max_clock),
        options,
        sleep=[].append if sleeps is None else sleeps.append,
    )
    conditions.begin()  # reading 0: before the case
    timer = SimpleNamespace(name="profiler", l2="cold")
    measurement = tloop.MeasureLoop(options, stop=stop).run(Session(), 1.0, timer, conditions)
    conditions.end()
    return measurement, conditions


# readings: before the case, then the batch boundaries (start, after each batch)
SLOW_SECOND_BATCH = [2000, 2000, 2000, 1200, 1900, 1950]
BATCHES = [(1.0, 1.0), (1.3, 1.3, 1.3), (1.0,), (1.0,)]


def test_discard_drops_the_samples_of_throttled_batches():
    m, conditions = run_loop("discard", SLOW_SECOND_BATCH, BATCHES)
    # batch 2 ended at 1200 MHz and batch 3 started there: both below 75 % of 2000
    assert m.samples == (1.0, 1.0, 1.0)
    assert (m.throttled_samples, m.discarded_samples) == (4, 4)
    assert conditions.throttled_batches == 2
    assert conditions.columns()["sm_clock_min_MHz"] == 1200


def test_pause_also_rests_after_each_throttled_batch():
    sleeps = []
    m, _ = run_loop("pause", SLOW_SECOND_BATCH, BATCHES, sleeps)
    assert m.samples == (1.0, 1.0, 1.0) and sleeps == [0.02, 0.02]


def test_off_keeps_everything_and_still_reads_conditions():
    m, conditions = run_loop("off", SLOW_SECOND_BATCH, BATCHES)
    assert len(m.samples) == 7 and m.discarded_samples == 0
    assert len(conditions.readings) == 7  # before, start, 4 batches, after
    assert not conditions.policy_active


def test_every_batch_throttled_keeps_them_all():
    m, _ = run_loop("discard", [1000] * 7, BATCHES)
    assert len(m.samples) == 7
    assert (m.throttled_samples, m.discarded_samples) == (7, 0)


def test_no_maximum_clock_no_judgement():
    m, conditions = run_loop("discard", SLOW_SECOND_BATCH, BATCHES, max_clock=None)
    assert len(m.samples) == 7 and not conditions.policy_active


def test_kept_batches_cannot_drop_what_it_cannot_match():
    one_mean = [Batch((1.0,))]  # a recording that gave one mean sample for three batches
    assert tloop.kept_batches(one_mean, [True, False, True]) == (one_mean, 0, 0)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_rows_carry_the_conditions_when_telemetry_exists(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_run, "open_telemetry", lambda device: ScriptedTelemetry([1800]))
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    rows = _rows(out)
    assert rows and all(row["status"] == "ok" for row in rows)
    first = rows[0]
    assert float(first["sm_clock_min_MHz"]) == 1800 and float(first["sm_clock_max_MHz"]) == 2000
    assert float(first["temp_start_C"]) == 50 and first["throttle_reasons"] == ""


def test_rows_leave_the_conditions_empty_without_telemetry(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_run, "open_telemetry", lambda device: None)
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    columns = ("sm_clock_mean_MHz", "sm_clock_max_MHz", "temp_start_C", "throttle_reasons")
    assert {tuple(row[c] for c in columns) for row in _rows(out)} == {("",) * 4}


def test_a_raising_telemetry_never_fails_a_case(tmp_path, monkeypatch):
    telemetry, _ = nvml(clock=RuntimeError("x"), max_clock=RuntimeError("y"), temp=40)
    monkeypatch.setattr(sweep_run, "open_telemetry", lambda device: telemetry)
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    rows = _rows(out)
    assert {row["status"] for row in rows} == {"ok"}
    assert {(row["sm_clock_mean_MHz"], row["temp_end_C"]) for row in rows} == {("", "40.0")}


def test_unknown_throttle_policy_exits_2_naming_the_choices(tmp_path, capsys):
    argv = ["--output", str(tmp_path / "r.csv"), "--throttle-policy", "sometimes"]
    assert run_main(argv, timer=FakeTimer()) == 2
    err = capsys.readouterr().err
    assert "--throttle-policy" in err and "'off', 'discard', 'pause'" in err
    assert not (tmp_path / "r.csv").exists()


def test_threshold_above_100_exits_2(tmp_path, capsys):
    argv = ["--output", str(tmp_path / "r.csv"), "--throttle-threshold", "120"]
    assert run_main(argv, timer=FakeTimer()) == 2
    assert "<= 100" in capsys.readouterr().err


def test_verbose_note_counts_discarded_samples_and_repro_keeps_the_policy(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(
        sweep_run, "open_telemetry", lambda device: ScriptedTelemetry([2000, 2000, 1000] * 50)
    )
    out = tmp_path / "r.csv"
    argv = ["--output", str(out), "--preset", "smoke", "--throttle-policy", "discard"]
    assert run_main([*argv, "--verbose", "--min-samples", "30"], timer=FakeTimer()) == 0
    printed = capsys.readouterr().out
    assert "--throttle-policy discard discarded" in printed and "below 1500 MHz" in printed
    assert "--throttle-policy discard --throttle-threshold 75" in _rows(out)[0]["repro"]


def test_verbose_note_says_when_the_policy_cannot_judge(tmp_path, capsys):
    out = tmp_path / "r.csv"
    argv = ["--output", str(out), "--preset", "smoke", "--throttle-policy", "pause", "--verbose"]
    assert run_main(argv, timer=FakeTimer()) == 0
    assert "--throttle-policy pause inactive" in capsys.readouterr().out
