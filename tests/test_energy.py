"""Energy per call on the CPU: the column logic with stand-in counters, the
loops that read them around each batch, the NVML binding's missing and unsupported paths
(a stand-in ``pynvml``), a MetaX-shaped ``pymxsml``, the rows and the power sampler."""

from __future__ import annotations

import csv
import importlib
import json
import statistics
import time
from types import SimpleNamespace

import pytest
from stand_ins.fake_pynvml import Advancing, FakePynvml, NVMLError_NotSupported, loader, missing
from test_bench_common import FakeTimer, run_main
from test_head_to_head import FAST, PLUGIN

from fi_attn_bench.device import energy as de
from fi_attn_bench.results.schema import OPTIONAL_COLUMN_BY_NAME, Kind, result_record
from fi_attn_bench.sweep import run as sweep_run
from fi_attn_bench.timing import paired
from fi_attn_bench.timing import timers as tt
from fi_attn_bench.timing.energy import (
    BatchEnergy,
    CounterStep,
    CounterTrace,
    EnergyRecorder,
    counter_at,
    energy_per_call,
    energy_windows,
    traced_batches,
)
from fi_attn_bench.timing.loop import MeasureLoop
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.statistics import Batch


def batch(calls, start, wall, energy):
    return BatchEnergy(calls, start, start + wall, energy)


# ------------------------------------------------------------------ the column logic


def test_energy_per_call_is_the_median_over_batches_with_power_over_their_wall_time():
    batches = [batch(10, 0.0, 0.05, 350.0), batch(10, 0.05, 0.05, 300.0), batch(20, 0.1, 0.1, 640)]
    found = energy_per_call(batches, [True] * 3, window_s=0.0)
    assert found.energy_mj == pytest.approx(32.0)  # median of 35, 30, 32 mJ per call
    assert found.avg_power_w == pytest.approx(1290.0 / 0.2 / 1e3)
    assert (found.windows, found.note) == (3, "")
    assert found.columns() == {"energy_mJ": 32.0, "avg_power_W": 6.45, "energy_windows": 3}


def test_only_kept_batches_count_unless_none_was_kept():
    batches = [batch(10, 0.0, 0.05, 300.0), batch(10, 0.05, 0.05, 900.0)]  # the 2nd: throttled
    assert energy_per_call(batches, [True, False], 0.0).energy_mj == pytest.approx(30.0)
    assert energy_per_call(batches, [False, False], 0.0).energy_mj == pytest.approx(60.0)


def test_windows_span_the_counters_needs_and_a_short_tail_joins_the_last():
    batches = [batch(1, 0.01 * i, 0.01, 1.0) for i in range(7)]
    assert [len(w) for w in energy_windows(batches, 0.03)] == [3, 4]
    found = energy_per_call(batches, [True] * 7, 0.03)
    assert found.windows == 2 and found.energy_mj == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("batches", "window_s", "note"),
    [
        ([batch(10, 0, 0.05, None)], 0.0, "energy: the energy counter could not be read"),
        ([batch(10, 0, 0.05, 5.0)], 0.2, "energy: the timed batches lasted 50.0 ms, under the 200"),
        ([batch(10, 0, 0.05, 0.0)], 0.0, "energy: the energy counter did not advance"),
        ([], 0.0, "energy: no timed batch"),
    ],
)
def test_what_the_counter_cannot_tell_is_empty_with_a_note(batches, window_s, note):
    found = energy_per_call(batches, [True] * len(batches), window_s)
    assert found.energy_mj is None and found.columns() == {}
    assert found.note.startswith(note)


# ------------------------------------------------------------------ the traced counter

STEPS = [CounterStep(0.1, 1000.0), CounterStep(0.2, 2000.0), CounterStep(0.3, 4000.0)]


def test_the_counter_between_steps_is_linear_and_beyond_them_follows_the_end_period():
    assert counter_at(STEPS, 0.15) == pytest.approx(1500.0)
    assert counter_at(STEPS, 0.25) == pytest.approx(3000.0)
    assert counter_at(STEPS, 0.05) == pytest.approx(500.0)  # the first period's slope
    assert counter_at(STEPS, 0.35) == pytest.approx(5000.0)  # the last period's slope


def test_traced_batches_read_energy_off_the_steps_inside_their_span():
    batches = [batch(5, 0.08, 0.1, 0.0), batch(5, 0.2, 0.12, 3000.0)]  # raw: quantized reads
    outside = [CounterStep(0.0, 0.0), *STEPS, CounterStep(0.4, 9e9)]  # 0.0, 0.4: not under load
    traced = traced_batches(batches, outside)
    assert [b.energy_mj for b in traced] == pytest.approx([1000.0, 2400.0])
    assert [(b.calls, b.start_s, b.wall_s) for b in traced] == [
        (5, 0.08, pytest.approx(0.1)),
        (5, 0.2, pytest.approx(0.12)),
    ]
    assert traced_batches(batches, STEPS[:1]) is None  # one step: no period under load


class SlowCounter:
    """A GPU drawing ``watts`` whose counter moves only every ``period_s`` (as NVML's)."""

    def __init__(self, watts, period_s, fail_after=None):
        self.watts, self.period_s, self.reads, self.fail_after = watts, period_s, 0, fail_after
        self.began = time.perf_counter()

    def energy_mj(self):
        self.reads += 1
        if self.fail_after is not None and self.reads > self.fail_after:
            return None
        elapsed = time.perf_counter() - self.began
        return (elapsed // self.period_s) * self.period_s * self.watts * 1e3


def _traced_recorder(counter, batches=12, wall_s=0.025):
    trace = CounterTrace(counter, poll_s=0.001)
    recorder = EnergyRecorder(counter, 0.0, trace=trace)
    for _ in range(batches):
        recorder.start()
        time.sleep(wall_s)
        recorder.stop(10)
    return recorder, trace


def test_a_traced_recorder_gives_each_batch_its_share_where_raw_reads_are_quantized():
    counter = SlowCounter(watts=200.0, period_s=0.04)
    untraced = EnergyRecorder(counter, 0.0)
    for _ in range(6):
        untraced.start()
        time.sleep(0.025)
        untraced.stop(10)
    raw = [b.energy_mj for b in untraced.batches]
    assert {round(mj) for mj in raw} <= {0, 8000, 16000}  # whole steps of 40 ms at 200 W
    recorder, trace = _traced_recorder(counter)
    assert {b.energy_mj for b in recorder.batches} == {None}  # only the trace reads the counter
    found = recorder.estimate([True] * len(recorder.batches))
    assert not trace.polling  # the estimate stopped the polling
    assert found.note == "" and found.avg_power_w == pytest.approx(200.0, rel=0.1)
    per_batch = [b.energy_mj / b.wall_s / 1e3 for b in found.batches]
    assert statistics.median(per_batch) == pytest.approx(200.0, rel=0.1)


def test_a_trace_that_cannot_read_or_saw_too_few_steps_leaves_a_note():
    failing = SlowCounter(watts=200.0, period_s=0.01, fail_after=3)
    recorder, _ = _traced_recorder(failing, batches=1)
    assert (
        recorder.estimate([True]).note
        == "energy: the energy counter could not be read while tracing"
    )
    slow = SlowCounter(watts=200.0, period_s=10.0)
    recorder, _ = _traced_recorder(slow, batches=2, wall_s=0.005)
    found = recorder.estimate([True, True])
    assert found.energy_mj is None and "stepped fewer than twice" in found.note


def test_recorders_sharing_a_trace_keep_it_polling_until_the_last_one_finishes():
    counter = SlowCounter(watts=100.0, period_s=0.005)
    trace = CounterTrace(counter, poll_s=0.001)
    first, second = (EnergyRecorder(counter, 0.0, trace=trace) for _ in range(2))
    for recorder in (first, second):
        recorder.start()
        time.sleep(0.03)
        recorder.stop(1)
    first.finish()
    assert trace.polling
    second.finish()
    first.finish()  # idempotent: no second release
    assert not trace.polling and trace._holders == 0


class SimulatedGpu:
    """A wall clock and an energy counter that the fake sessions advance together."""

    def __init__(self):
        self.now, self.energy = 0.0, 0.0

    def clock(self):
        return self.now

    def energy_mj(self):
        return self.energy

    def run(self, calls, ms, mj):
        self.now += calls * ms / 1e3 + 0.001  # plus 1 ms of launch and read per batch
        self.energy += calls * mj + 0.08  # an idle GPU's 80 W over that 1 ms


class SimulatedTimer(tt.TimerDefaults):
    """Each contender's fn() returns (ms, mJ) per call; its batches run on ``gpu``, every
    ``drift`` steps of batches 20 % hotter."""

    name, l2 = "profiler", "cold"

    def __init__(self, gpu, drift=None):
        self.gpu, self.drift, self.step = gpu, drift or (lambda step: 1.0), 0

    def sync(self):
        return None

    def open(self, fn, estimate_ms):
        timer = self

        class Session(tt.SessionDefaults):
            def batch(self, calls):
                ms, mj = fn()
                timer.step += 1
                timer.gpu.run(calls, ms, mj * timer.drift(timer.step))
                return Batch((ms,) * calls)

        return Session()


OPTIONS = TimingOptions(
    timer="profiler", min_time_ms=0.0, sustain_ms=0.0, warmup_min_ms=0.0, max_time_s=2.0
)


class KeepEveryThird:
    def __init__(self):
        self.done = 0

    def batches_start(self):
        return None

    def batch_done(self):
        self.done += 1
        return self.done % 3 == 0


def test_the_loop_reads_the_counter_around_each_batch_and_counts_kept_ones():
    gpu = SimulatedGpu()
    timer = SimulatedTimer(gpu, drift=lambda step: 1.0 if step % 3 == 0 else 3.0)
    recorder = EnergyRecorder(gpu, 0.0, clock=gpu.clock)
    session = timer.open(lambda: (1.0, 2.0), 1.0)
    loop = MeasureLoop(OPTIONS, clock=time.perf_counter)
    measured = loop.run(session, 1.0, timer, KeepEveryThird(), recorder)
    assert [b.calls for b in recorder.batches] == loop.batches  # one read pair per batch
    # each batch: 2 mJ per call plus 0.08 mJ of launch gap spread over its calls; the
    # dropped batches (two of three) ran at 3x and do not count
    largest = max(loop.batches)
    assert measured.energy.energy_mj == pytest.approx(2.0 + 0.08 / largest, rel=1e-9)
    assert measured.columns()["energy_mJ"] == measured.energy.energy_mj


def test_head_to_head_gives_a_paired_energy_ratio_that_survives_drift():
    gpu = SimulatedGpu()
    timer = SimulatedTimer(gpu, drift=lambda step: 1.0 + 0.3 * (step // 8 % 2))
    recorders = [EnergyRecorder(gpu, 0.0, clock=gpu.clock) for _ in range(2)]
    contenders = [paired.Contender(lambda: (1.0, 2.0)), paired.Contender(lambda: (1.0, 1.5))]
    outcome = paired.measure_paired(contenders, timer, OPTIONS, energies=recorders)
    ratio = outcome.energy_ratios[1]
    assert ratio is not None and outcome.energy_ratios[0] is None
    assert ratio.ratio == pytest.approx(0.75, rel=0.01)
    assert ratio.interval[0] <= ratio.ratio <= ratio.interval[1]
    assert ratio.energy_columns()["paired_energy_ratio"] == ratio.ratio
    assert outcome.ratios[1].ratio == pytest.approx(1.0)  # the same time, less energy
    assert outcome.measurements[1].energy.energy_mj < outcome.measurements[0].energy.energy_mj


def test_rounds_too_short_for_the_counter_give_a_note_not_a_ratio():
    gpu = SimulatedGpu()
    recorders = [EnergyRecorder(gpu, 10.0, clock=gpu.clock, round_s=10.0) for _ in range(2)]
    contenders = [paired.Contender(lambda: (1.0, 2.0)), paired.Contender(lambda: (1.0, 1.5))]
    outcome = paired.measure_paired(contenders, SimulatedTimer(gpu), OPTIONS, energies=recorders)
    assert outcome.energy_ratios == (None, None)
    assert outcome.energy_notes[1].startswith("paired energy ratio: 0 of ")
    assert "pairs of rounds lasted the 10000 ms the energy counter needs" in outcome.energy_notes[1]


def _rounds(per_call_mj, short_last_pair):
    """One contender's round batches (10 calls, 0.5 s each) with ``per_call_mj``; the last
    pair cut to 10 ms with a wild reading, as a budget cut leaves them."""
    batches = [batch(10, i, 0.5, 10 * per_call_mj) for i in range(8)]
    if short_last_pair:
        batches[-2:] = [batch(10, 6, 0.01, 1000.0), batch(10, 7, 0.01, 1.0)]
    return SimpleNamespace(batches=batches, round_s=0.3, note="")


def test_the_energy_ratio_skips_pairs_of_rounds_too_short_for_the_counter():
    found = paired._energy_ratio(_rounds(1.5, True), _rounds(2.0, True), [True] * 8, 0.25)
    assert found.ratio == pytest.approx(0.75) and found.rounds == 6
    cut = [True] * 4 + [False] * 2 + [True] * 2  # a throttled pair dropped: 2 long pairs left
    too_few = paired._energy_ratio(_rounds(1.5, True), _rounds(2.0, True), cut, 0.25)
    assert too_few == (
        "2 of 3 pairs of rounds lasted the 300 ms the energy counter needs, under 3 "
        "(a larger --min-time-ms makes longer rounds)"
    )


# ------------------------------------------------------------------ reading the device


class SteppedCounter:
    """A counter that moves by 70 mJ every ``period`` of its clock."""

    def __init__(self, period):
        self.now, self.period = 0.0, period

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds

    def energy_mj(self):
        return 70.0 * (self.now // self.period)


@pytest.mark.parametrize("period", [0.001, 0.01, 0.1])
def test_the_probe_measures_the_counters_update_period(period):
    counter = SteppedCounter(period)
    found = de.counter_period_s(counter, counter.clock, counter.sleep)
    assert found == pytest.approx(period, rel=0.05)


def test_a_counter_that_does_not_move_has_no_period():
    counter = SteppedCounter(10.0)
    assert de.counter_period_s(counter, counter.clock, counter.sleep) is None


CUDA = SimpleNamespace(type="cuda", index=0)


@pytest.fixture
def nvml_uuid(monkeypatch):
    monkeypatch.setattr(de, "cuda_device_uuid", lambda device: "GPU-abc")


def fixed_probe(counter):
    return 0.002


def test_nvml_energy_counter_opens_with_its_period_and_reads_mj(nvml_uuid):
    module = FakePynvml({"nvmlDeviceGetTotalEnergyConsumption": Advancing(25)})
    access = de.open_energy_counter(CUDA, load=loader(module), probe=fixed_probe)
    assert access.reason == "" and access.window_s == pytest.approx(0.010)  # 5 updates of 2 ms
    assert access.round_s == pytest.approx(0.006) and access.trace is not None
    first = access.counter.energy_mj()
    assert access.counter.energy_mj() - first == 25.0


def test_without_the_binding_the_reason_says_what_to_install(nvml_uuid):
    access = de.open_energy_counter(CUDA, load=missing, probe=fixed_probe)
    assert access.counter is None
    assert "nvidia-ml-py is not installed" in access.reason and "[nvidia]" in access.reason


def test_an_unsupported_counter_is_a_reason_not_an_error(nvml_uuid):
    module = FakePynvml({"nvmlDeviceGetTotalEnergyConsumption": NVMLError_NotSupported()})
    access = de.open_energy_counter(CUDA, load=loader(module), probe=fixed_probe)
    assert access.counter is None and "Not Supported" in access.reason


def test_a_counter_that_never_moves_is_not_used(nvml_uuid):
    module = FakePynvml({"nvmlDeviceGetTotalEnergyConsumption": 5})
    access = de.open_energy_counter(CUDA, load=loader(module), probe=lambda counter: None)
    assert access.counter is None and "did not move" in access.reason


class FakeMxsml:
    """MetaX-shaped ``pymxsml``: clocks, temperature, board power; no energy counter."""

    MXSML_CLOCK_XCORE = 2
    MXSML_TEMPERATURE_HOTSPOT = 0

    def mxSmlInit(self):
        return None

    def mxSmlGetClocks(self, index, clock):
        return [1600]

    def mxSmlGetTemperatureInfo(self, index, sensor):
        return 4500

    def mxSmlGetBoardPowerInfo(self, index):
        return [SimpleNamespace(power=350.0)]


def test_metax_device_has_telemetry_but_its_energy_stays_empty_with_the_reason(monkeypatch):
    monkeypatch.setattr(de, "cuda_device_uuid", lambda device: None)  # no NVML UUID on MACA
    mxsml = FakeMxsml()

    def load(name):
        if name == "pymxsml":
            return mxsml
        raise ModuleNotFoundError(name)

    access = de.open_energy_counter(CUDA, load=load)
    assert access.counter is None and "pymxsml (MetaX)" in access.reason
    from fi_attn_bench.device import telemetry as tm

    assert tm.open_mxsml(0, load=load).read() == tm.TelemetryReading(1600.0, 45.0, None)


def test_a_cpu_device_has_no_counter():
    access = de.open_energy_counter(SimpleNamespace(type="cpu"), load=missing)
    assert access.counter is None and access.reason == "no energy counter on a cpu device"


# ------------------------------------------------------------------ the rows


def test_registry_holds_the_energy_columns_and_notes():
    kinds = {name: OPTIONAL_COLUMN_BY_NAME[name].kind for name in ("energy_mJ", "notes")}
    assert kinds == {"energy_mJ": Kind.POSITIVE, "notes": Kind.TEXT}
    for name in ("avg_power_W", "GFLOP_per_J", "GB_per_J", "energy_windows"):
        assert name in OPTIONAL_COLUMN_BY_NAME
    for name in ("paired_energy_ratio", "paired_energy_ratio_lo", "paired_energy_ratio_hi"):
        assert name in OPTIONAL_COLUMN_BY_NAME


def test_efficiency_is_derived_from_work_and_energy_where_the_record_is_written():
    record = result_record("api", {"b": 1}, metrics=(2.0, 4e9, 8e12), columns={"energy_mJ": 400.0})
    assert record["GFLOP_per_J"] == pytest.approx(8e12 / 0.4 / 1e9)  # 20,000 GFLOP/J
    assert record["GB_per_J"] == pytest.approx(4e9 / 0.4 / 1e9)
    plain = result_record("api", {"b": 1}, metrics=(2.0, 4e9, 8e12), columns={})
    assert "GFLOP_per_J" not in plain and "GB_per_J" not in plain


class WallPowerCounter:
    """An energy counter of a GPU drawing a constant ``watts`` by the wall clock."""

    def __init__(self, watts):
        self.watts = watts

    def energy_mj(self):
        return time.perf_counter() * self.watts * 1e3


class StampedWallCounter(WallPowerCounter):
    """The same GPU read off the stamps of the batches' edges, so that a batch's difference is
    exactly ``watts`` times its length however late the read comes after its stamp."""

    def __init__(self, watts):
        super().__init__(watts)
        self.stamped = time.perf_counter()

    def clock(self):
        self.stamped = time.perf_counter()
        return self.stamped

    def energy_mj(self):
        return self.stamped * self.watts * 1e3

    def access(self):
        return de.EnergyAccess(self, period_s=0.0, clock=self.clock)


def _rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_rows_carry_energy_and_efficiency_when_a_counter_exists(tmp_path, monkeypatch):
    access = StampedWallCounter(300.0).access()
    monkeypatch.setattr(sweep_run, "open_energy_counter", lambda device: access)
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.002")
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    rows = _rows(out)
    assert rows and {row["status"] for row in rows} == {"ok"}
    for row in rows:
        energy = float(row["energy_mJ"])
        assert energy > 0 and float(row["avg_power_W"]) == pytest.approx(300.0, rel=1e-6)
        assert float(row["GFLOP_per_J"]) == pytest.approx(float(row["flops"]) / energy / 1e6)
        assert float(row["GB_per_J"]) == pytest.approx(float(row["io_bytes"]) / energy / 1e6)
        assert int(row["energy_windows"]) >= 1 and row["notes"] == ""


def test_no_energy_never_opens_the_counter_and_says_so_in_the_rows(tmp_path, monkeypatch):
    def refuse(device):
        raise AssertionError("--no-energy opened the energy counter")

    monkeypatch.setattr(sweep_run, "open_energy_counter", refuse)
    out = tmp_path / "r.csv"
    argv = ["--output", str(out), "--preset", "smoke", "--no-energy"]
    assert run_main(argv, timer=FakeTimer()) == 0
    rows = _rows(out)
    assert rows and {(r["energy_mJ"], r["avg_power_W"]) for r in rows} == {("", "")}
    assert {r["notes"] for r in rows} == {"energy: not read (--no-energy)"}
    assert all("--no-energy" in r["repro"] for r in rows)


def test_rows_without_a_counter_leave_energy_empty_with_the_reason(tmp_path):
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    rows = _rows(out)
    assert {(r["energy_mJ"], r["avg_power_W"], r["GFLOP_per_J"]) for r in rows} == {("",) * 3}
    assert {r["notes"] for r in rows} == {"energy: no energy counter on a cpu device"}


class CpuPowerCounter:
    """A device drawing ``watts`` while this process runs: energy follows the work done, not
    the time other processes held the CPU (a wall-clock counter read late on a loaded
    machine put the wait into a batch's energy)."""

    def __init__(self, watts):
        self.watts = watts

    def energy_mj(self):
        return time.process_time() * self.watts * 1e3


def _paired_rows(tmp_path, monkeypatch, window_s):
    access = de.EnergyAccess(CpuPowerCounter(300.0), period_s=window_s / 20)
    monkeypatch.setattr(sweep_run, "open_energy_counter", lambda device: access)
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.001")
    monkeypatch.setenv("FAKE_BENCH_BURN", "1")
    out = tmp_path / "h.csv"
    argv = ["--impl", "torch", "--impl", f"{PLUGIN}:slow_burn", "--output", str(out), *FAST]
    # calls timed by the CPU time they spend, as the energy is: under load a wall clock's
    # medians hid the preemption of the 1 ms calls and not of the 4 ms ones (6.6 against 3.8)
    timer = tt.WallTimer(clock=time.process_time)
    # the budget is wall time: a loaded machine ran out of it after 4 rounds, too few for a
    # ratio; the stop rule ends the rounds long before it on an idle one
    # in this process: a plugin worker builds its own timer, on the wall clock, not this one
    argv += ["--no-isolation"]
    assert run_main([*argv, "--min-samples", "12", "--max-time-per-case", "10"], timer=timer) == 0
    return {row["impl"]: row for row in _rows(out) if row["batch_size"] == "1"}


def test_head_to_head_rows_give_the_paired_energy_ratio_beside_the_time_ratio(
    tmp_path, monkeypatch
):
    rows = _paired_rows(tmp_path, monkeypatch, window_s=0.0)
    slow = rows["h2h_plugins:slow_burn"]
    time_ratio, energy_ratio = float(slow["paired_ratio"]), float(slow["paired_energy_ratio"])
    # the same power for both: energy per call follows time per call
    assert energy_ratio > 2.0 and energy_ratio == pytest.approx(time_ratio, rel=0.25)
    assert float(slow["paired_energy_ratio_lo"]) <= energy_ratio
    assert rows["torch"]["paired_energy_ratio"] == ""


def test_head_to_head_rows_say_when_the_rounds_are_too_short_for_the_counter(tmp_path, monkeypatch):
    rows = _paired_rows(tmp_path, monkeypatch, window_s=60.0)
    slow = rows["h2h_plugins:slow_burn"]
    assert slow["paired_energy_ratio"] == "" and slow["energy_mJ"] == ""
    assert "pairs of rounds lasted the 9000 ms the energy counter needs" in slow["notes"]
    assert "energy: the timed batches lasted" in slow["notes"]


# ------------------------------------------------------------------ the power sampler


def test_power_integral_interpolates_between_samples_and_needs_both_sides():
    samples = [de.PowerSample(t, w) for t, w in [(0.0, 100.0), (1.0, 300.0), (2.0, 300.0)]]
    assert de.integrate_power(samples, 0.5, 1.5) == pytest.approx(0.5 * (200 + 300) / 2 + 0.5 * 300)
    assert de.integrate_power(samples, 0.0, 2.0) == pytest.approx(200 + 300)
    assert de.integrate_power(samples, -0.1, 1.0) is None  # no sample before the window


def test_sampler_thread_samples_until_stopped():
    readings = iter(range(1, 10_000))
    with de.PowerSampler(lambda: float(next(readings)), interval_s=0.001) as sampler:
        time.sleep(0.05)
    count = len(sampler.samples)
    assert count >= 5
    time.sleep(0.01)
    assert len(sampler.samples) == count  # stopped
    assert [s.watts for s in sampler.samples] == sorted(s.watts for s in sampler.samples)


def test_nvml_power_reader_prefers_the_instant_field():
    field = SimpleNamespace(nvmlReturn=0, value=SimpleNamespace(uiVal=412_000))
    module = FakePynvml(
        {"nvmlDeviceGetFieldValues": lambda ids: [field], "nvmlDeviceGetPowerUsage": 300_000}
    )
    device = de.open_nvml_device("GPU-abc", loader(module)).device
    assert de.nvml_power_reader(device)() == pytest.approx(412.0)
    assert de.nvml_power_reader(device, averaged=True)() == pytest.approx(300.0)
    del module.values["nvmlDeviceGetFieldValues"]  # an older binding: the averaged reading
    assert de.nvml_power_reader(device)() == pytest.approx(300.0)


# ------------------------------------------------------------------ validation/energy_check.py


@pytest.fixture
def energy_check():
    return importlib.import_module("validation.energy_check")


def test_energy_check_compares_the_rows_with_integrated_power_over_the_same_batches(
    energy_check, tmp_path, monkeypatch
):
    access = StampedWallCounter(300.0).access()
    monkeypatch.setattr(sweep_run, "open_energy_counter", lambda device: access)
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.002")
    begin = time.perf_counter()
    sweeps = []
    for index in range(2):
        out = tmp_path / f"s{index}.csv"
        main = lambda argv: run_main(argv, timer=FakeTimer())  # noqa: E731
        code, rows = energy_check.run_sweep(main, ["--preset", "smoke", "--output", str(out)])
        assert code == 0 and len(rows) == 2
        now = time.perf_counter()
        samples = [de.PowerSample(begin - 1, 300.0), de.PowerSample(now + 1, 300.0)]
        sweeps.append(energy_check.case_sweeps(rows, samples, [s.time_s for s in samples]))
    checks = energy_check.combine(sweeps)
    assert [c.case for c in checks] == ["batch_size=1,seq_len=8", "batch_size=2,seq_len=8"]
    for check in checks:
        assert check.sweeps == 2 and check.energy_mj > 0 and check.cv_pct is not None
        # the counter and the samples saw 300 W alike over the same batches
        assert check.window_pct == pytest.approx(0.0, abs=1e-6)
    table = "\n".join(energy_check.energy_table(checks, 2))
    assert "| batch_size=1,seq_len=8 | 1.0000 |" in table and "yes" in table


def test_energy_check_makes_head_to_head_rounds_long_enough_for_the_counter(energy_check):
    assert energy_check.h2h_round_ms(0.001) == 50.0  # 3 updates of 1 ms fit the default
    argv = energy_check.h2h_arguments(["flashinfer:fa2", "flashinfer:fa3"], 0.100)
    assert argv[:4] == ["--impl", "flashinfer:fa2", "--impl", "flashinfer:fa3"]
    # 3 updates of 100 ms with a 10 % margin, 20 such rounds, a budget 2.5 times that
    assert argv[4:] == ["--batch-ms", "330", "--min-time-ms", "6600", "--max-time-per-case", "16.5"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--script", "ragged", "--sweeps", "1"], "--sweeps must be at least 2"),
        (["--script", "ragged", "--", "--impl", "x"], "set by this check"),
        (["--script", "nope"], "invalid choice"),
    ],
)
def test_energy_check_refuses_bad_arguments_before_any_work(
    energy_check, tmp_path, capsys, argv, message
):
    with pytest.raises(SystemExit) as raised:
        energy_check.parse([*argv[:2], "--out", str(tmp_path / "e.md"), *argv[2:]])
    assert raised.value.code == 2 and message in capsys.readouterr().err


def test_energy_check_never_overwrites_a_report_or_its_csvs(energy_check, tmp_path, capsys):
    (tmp_path / "e_sweep2.csv").write_text("kept")
    with pytest.raises(SystemExit):
        energy_check.parse(["--script", "ragged", "--out", str(tmp_path / "e.md")])
    assert "e_sweep2.csv exists" in capsys.readouterr().err


def test_doctor_reports_the_energy_counter_or_why_not():
    from fi_attn_bench import doctor

    readable = de.EnergyAccess(WallPowerCounter(1.0), period_s=0.002)
    result = doctor.check_telemetry((("nvml", None),), True, readable)
    evidence = dict(result.evidence)
    assert evidence["energy_mJ"].startswith("readable (NVML), counter updates every 2.00 ms")
    missing = de.EnergyAccess(None, reason="nvidia-ml-py is not installed")
    evidence = dict(doctor.check_telemetry((("nvml", None),), False, missing).evidence)
    assert evidence["energy_mJ"] == "unreadable: nvidia-ml-py is not installed"


def test_the_head_to_head_line_shows_the_energy_ratio_beside_the_time_ratio(
    tmp_path, monkeypatch, capsys
):
    _paired_rows(tmp_path, monkeypatch, window_s=0.0)
    lines = [line for line in capsys.readouterr().out.splitlines() if "paired:" in line]
    assert lines and all(", energy " in line for line in lines)


def test_energy_check_lengthens_the_sweeps_only_for_a_slow_counter(energy_check):
    assert energy_check.sweep_arguments(0.001, []) == []  # 3 windows of 5 ms fit 500 ms
    assert energy_check.sweep_arguments(0.1, []) == [  # 3 windows of 5 updates of 100 ms
        "--min-time-ms",
        "1500",
        "--max-time-per-case",
        "2.25",
    ]
    assert energy_check.sweep_arguments(0.1, ["--min-time-ms", "100"]) == []


@pytest.fixture
def stand_in_gpu(energy_check, monkeypatch):
    """A CUDA device that is not there, a 300 W counter and sampler, and the fake script."""
    import torch

    access = de.EnergyAccess(WallPowerCounter(300.0), period_s=0.0005)
    monkeypatch.setattr(sweep_run, "open_energy_counter", lambda device: access)
    monkeypatch.setattr(de, "open_energy_counter", lambda device: access)
    monkeypatch.setattr(
        de,
        "open_power_sampler",
        lambda device, interval_s, averaged=False: de.PowerSampler(lambda: 300.0, 0.001),
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(energy_check, "versions", lambda device: ["- GPU: stand-in"])
    monkeypatch.setitem(energy_check.SCRIPTS, "ragged", "fake_bench_script")
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.002")


def test_energy_check_writes_its_report_end_to_end(energy_check, stand_in_gpu, tmp_path):
    out = tmp_path / "e.md"
    argv = ["--script", "ragged", "--sweeps", "2", "--out", str(out), "--", "--preset", "smoke"]
    assert energy_check.main([*argv, "--device", "cpu"]) == 0
    text = out.read_text()
    assert "update period 0.50 ms" in text and "exit codes [0, 0]" in text
    assert "python -m validation energy --script ragged --sweeps 2" in text
    assert text.count("| batch_size=") == 2
    assert (tmp_path / "e_sweep1.csv").exists() and (tmp_path / "e_sweep2.csv").exists()
    raw = json.loads((tmp_path / "e_raw.json").read_text())
    assert len(raw["sweeps"]) == 2 and all(row["batches"] for row in raw["sweeps"][0])
    assert raw["power"] and raw["power_averaged"] and raw["counter"]


def test_energy_check_keeps_the_report_of_the_sweeps_done_when_cut_short(
    energy_check, stand_in_gpu, tmp_path, monkeypatch
):
    sweeps = energy_check.run_sweep

    def cut_at_the_second(main, argv):
        if (tmp_path / "e_sweep1.csv").exists():
            raise KeyboardInterrupt  # the call's time limit
        return sweeps(main, argv)

    monkeypatch.setattr(energy_check, "run_sweep", cut_at_the_second)
    out = tmp_path / "e.md"
    argv = ["--script", "ragged", "--sweeps", "2", "--out", str(out), "--", "--preset", "smoke"]
    with pytest.raises(KeyboardInterrupt):
        energy_check.main([*argv, "--device", "cpu"])
    text = out.read_text()
    assert "Sweeps: 1 of 2" in text and text.count("| batch_size=") == 2


def test_energy_check_allows_for_a_power_reading_averaged_over_the_trailing_second(energy_check):
    """Idle at 100 W, then a case at 600 W for 4 s; the reading is the true power's mean over
    the trailing second, as nvmlDeviceGetPowerUsage reports it.  Integrated over the batches
    as they are, it misses the rise; over the steady batches half a window later it agrees."""

    def true_watts(t):
        return 600.0 if 10.0 <= t < 14.0 else 100.0

    def averaged(t, step=0.001):
        return statistics.fmean(true_watts(t - k * step) for k in range(1000))

    samples = [de.PowerSample(t / 100, averaged(t / 100)) for t in range(800, 1700)]
    times = [s.time_s for s in samples]
    batches = [
        BatchEnergy(10, 10.0 + 0.1 * i, 10.1 + 0.1 * i, 600.0 * 0.1 * 1e3) for i in range(40)
    ]
    as_is = sum(de.integrate_power(samples, b.start_s, b.end_s, times) for b in batches)
    assert sum(b.energy_mj for b in batches) / (as_is * 1e3) - 1 > 0.05
    steady = energy_check.steady_agreement_pct(batches, samples, times, averaged_s=1.0)
    assert steady == pytest.approx(0.0, abs=0.5)
    without_lag = energy_check.steady_agreement_pct(batches, samples, times, averaged_s=0.0)
    assert without_lag > 5.0  # point samples are integrated as they are, start included
    assert energy_check.steady_agreement_pct(batches[:5], samples, times, 1.0) is None  # 0.5 s
