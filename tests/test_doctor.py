"""The self-checks (timing.selfcheck), the timers' refusal, and fi-attn-bench-doctor, on the CPU:
profiler, CUDA graphs, events and the spin kernel are fakes."""

from __future__ import annotations

import json
import math

import pytest
import torch
from stand_ins import fake_flashinfer
from test_bench_common import NO_GPU, FakeTimer, run_main
from test_bench_gpu_paths import TimelineFlusher, timeline  # noqa: F401 - the fixture

from fi_attn_bench import doctor
from fi_attn_bench.device import telemetry as tm
from fi_attn_bench.timing import options as topts
from fi_attn_bench.timing import selfcheck as sc
from fi_attn_bench.timing import timers
from fi_attn_bench.timing.trace import DeviceEvent

PASS, FAIL, UNAVAILABLE = sc.CheckStatus.PASS, sc.CheckStatus.FAIL, sc.CheckStatus.UNAVAILABLE


def events(*names):
    return [DeviceEvent(name, i * 10, 5) for i, name in enumerate(names)]


def scripted_profile(*recordings):
    """A profiler that returns the given recordings in turn (after running the body)."""
    queue = list(recordings)

    def profile(body, sync):
        body()
        return queue.pop(0)

    return profile


def cpu_probe():
    a = torch.randn(8, 8)
    out = torch.empty(8, 8)
    return sc.ProbeCall(lambda: torch.matmul(a, a, out=out), out, "cpu matmul")


# ---------------------------------------------------------------- profiler_kernels


def test_profiler_check_passes_with_the_same_kernels_each_call():
    profile = scripted_profile(*[events("gemm", "fill")] * 3)
    result = sc.check_profiler_kernels(cpu_probe(), lambda: None, profile)
    assert result.status is PASS and "2 device kernels per call" in result.summary
    assert ("call 1", "fill x1; gemm x1") in result.evidence


@pytest.mark.parametrize(
    ("recordings", "why"),
    [
        ([[], [], []], "recorded no device kernel"),
        ([events("gemm"), events("gemm", "merge"), events("gemm")], "differ between iterations"),
    ],
)
def test_profiler_check_fails_on_missing_or_changing_kernels(recordings, why):
    result = sc.check_profiler_kernels(cpu_probe(), lambda: None, scripted_profile(*recordings))
    assert result.status is FAIL and why in result.summary


def test_profiler_check_fails_when_the_profiler_raises():
    def broken(body, sync):
        raise RuntimeError("CUPTI_ERROR_NOT_INITIALIZED")

    result = sc.check_profiler_kernels(cpu_probe(), lambda: None, broken)
    assert result.status is FAIL and "CUPTI_ERROR_NOT_INITIALIZED" in result.summary


# ---------------------------------------------------------------- l2_flush


class CacheModel:
    """A read that is fast right after itself and slow after a flush that evicts."""

    def __init__(self, line, evicts=True):
        self.line, self.evicts, self.cached = line, evicts, False

    def read(self):
        self.line.now += 0.004 if self.cached else 0.010
        self.cached = True

    def flush(self):
        self.line.now += 0.040
        if self.evicts:
            self.cached = False


@pytest.mark.parametrize(("evicts", "status"), [(True, PASS), (False, FAIL)])
def test_l2_check_compares_cold_and_warm_reads_through_events(timeline, evicts, status):  # noqa: F811
    cache = CacheModel(timeline, evicts)
    result = sc.check_l2_flush(cache.flush, cache.read, "2 x reported L2 50 MiB", 12 << 20)
    assert result.status is status
    evidence = dict(result.evidence)
    assert evidence["L2 size used"] == "2 x reported L2 50 MiB"
    assert evidence["warm read (median)"] == "4.0 us"
    assert evidence["read after the flush (median)"] == ("10.0 us" if evicts else "4.0 us")
    if status is FAIL:
        assert "does not evict" in result.summary


# ---------------------------------------------------------------- cuda_graph


class ReplayingGraph:
    def __init__(self, fn, skip=False):
        self.fn, self.skip = fn, skip

    def replay(self):
        if not self.skip:
            self.fn()


def test_graph_check_passes_when_the_replay_rewrites_the_output():
    profile = scripted_profile(events("gemm"), events("gemm"))
    capture = lambda fn, device: ReplayingGraph(fn)  # noqa: E731
    result = sc.check_cuda_graph(cpu_probe(), torch.device("cpu"), lambda: None, profile, capture)
    assert result.status is PASS and "kernel counts equal" in result.summary


def test_graph_check_fails_when_the_replay_leaves_nan():
    profile = scripted_profile(events("gemm"), [])
    capture = lambda fn, device: ReplayingGraph(fn, skip=True)  # noqa: E731
    probe = cpu_probe()
    result = sc.check_cuda_graph(probe, torch.device("cpu"), lambda: None, profile, capture)
    assert result.status is FAIL and "left NaN" in result.summary
    assert math.isnan(float(probe.output[0, 0]))


def test_graph_check_fails_on_a_kernel_count_mismatch_or_a_failed_capture():
    profile = scripted_profile(events("gemm", "fill"), events("gemm"))
    capture = lambda fn, device: ReplayingGraph(fn)  # noqa: E731
    result = sc.check_cuda_graph(cpu_probe(), torch.device("cpu"), lambda: None, profile, capture)
    assert (
        result.status is FAIL and "replay ran 1 device kernel, the eager call 2" in result.summary
    )

    def refused(fn, device):
        raise RuntimeError("CUDA graphs are disabled on this stack")

    profile = scripted_profile(events("gemm"))
    result = sc.check_cuda_graph(cpu_probe(), torch.device("cpu"), lambda: None, profile, refused)
    assert result.status is FAIL and "disabled on this stack" in result.summary


def test_graph_check_without_replay_kernels_in_the_profile_judges_the_output_only():
    profile = scripted_profile(events("gemm"), [])
    capture = lambda fn, device: ReplayingGraph(fn)  # noqa: E731
    result = sc.check_cuda_graph(cpu_probe(), torch.device("cpu"), lambda: None, profile, capture)
    assert result.status is PASS and "counts not compared" in result.summary


# ---------------------------------------------------------------- spin_kernel


def test_spin_check(monkeypatch):
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: None, raising=False)
    assert sc.check_spin_kernel(lambda: 1.98e6).status is PASS

    def broken():
        raise RuntimeError("no kernel image")

    assert sc.check_spin_kernel(broken).status is FAIL
    monkeypatch.delattr(torch.cuda, "_sleep")
    result = sc.check_spin_kernel(lambda: 1.0)
    assert result.status is FAIL and "_sleep is missing" in result.summary


# ---------------------------------------------------------------- timers refuse


def test_profiler_timer_refuses_without_device_kernels(timeline):  # noqa: F811
    options = topts.TimingOptions(timer="profiler", l2="warm")
    timer = timers.ProfilerTimer(
        options, torch.device("cpu"), TimelineFlusher(timeline), profile=lambda body, sync: []
    )
    with pytest.raises(sc.SelfCheckFailed, match="self-check 'profiler_kernels' failed"):
        timer.self_check()


def test_cold_timers_refuse_a_flush_that_does_not_evict(timeline, monkeypatch):  # noqa: F811
    cache = CacheModel(timeline, evicts=False)
    monkeypatch.setattr(sc, "l2_probe", lambda device, l2_bytes: cache.read)
    flusher = TimelineFlusher(timeline)
    flusher.flush = cache.flush
    timer = timers.EventsTimer(
        topts.TimingOptions(timer="events", l2="cold"), torch.device("cpu"), flusher
    )
    with pytest.raises(sc.SelfCheckFailed, match="self-check 'l2_flush' failed"):
        timer.self_check()
    cache.evicts = True
    timer.self_check()  # a working flush: no refusal, and only once per timer
    cache.evicts = False
    timer.self_check()


def test_cuda_graph_timer_refuses_when_the_replay_misses_kernels(timeline):  # noqa: F811
    # the timeline's fake graph advances the clock but never runs the captured call
    timer = timers.CudaGraphTimer(
        topts.TimingOptions(timer="cuda_graph", l2="warm"),
        torch.device("cpu"),
        profile=scripted_profile(events("gemm"), []),
    )
    with pytest.raises(
        sc.SelfCheckFailed, match="self-check 'cuda_graph' failed: the replay left NaN"
    ):
        timer.self_check()


class RefusingTimer(FakeTimer):
    def self_check(self):
        sc.require(sc.CheckResult("cuda_graph", FAIL, "capture raised"), "cuda_graph")


def test_a_failed_self_check_exits_2_before_any_case(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=RefusingTimer()) == 2
    err = capsys.readouterr().err
    assert "self-check 'cuda_graph' failed: capture raised" in err
    assert not out.exists()


# ---------------------------------------------------------------- doctor


def test_doctor_on_the_cpu_reports_unavailable_and_exits_0(tmp_path, capsys):
    assert doctor.main(["--output-dir", str(tmp_path / "reports"), "--device", "cpu"]) == 0
    written = sorted(p.name for p in (tmp_path / "reports").iterdir())
    assert len(written) == 2 and written[0].endswith(".json") and written[1].endswith(".md")
    report = json.loads((tmp_path / "reports" / written[0]).read_text())
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    assert set(statuses) == {*doctor.DEVICE_CHECKS, "telemetry", "flashinfer_api"}
    assert all(statuses[name] == "unavailable" for name in doctor.DEVICE_CHECKS)
    assert report["exit_code"] == 0
    markdown = (tmp_path / "reports" / written[1]).read_text()
    assert "| l2_flush | **unavailable** | no GPU: the device is cpu |" in markdown
    assert "profiler_kernels  unavailable" in capsys.readouterr().out


def test_doctor_never_overwrites_a_report(tmp_path):
    first = doctor.fresh_paths(str(tmp_path), "20261204_170000")
    for path in first:
        open(path, "w").write("kept")
    second = doctor.fresh_paths(str(tmp_path), "20261204_170000")
    assert second == (
        str(tmp_path / "doctor_20261204_170000_2.md"),
        str(tmp_path / "doctor_20261204_170000_2.json"),
    )
    report = doctor.diagnose(torch.device("cpu"), load=lambda: None)
    md, js = doctor.write_report(report, str(tmp_path))
    md2, js2 = doctor.write_report(report, str(tmp_path))
    assert len({md, js, md2, js2}) == 4
    assert all(open(path).read() == "kept" for path in first)


def test_doctor_bad_output_dir_exits_2(tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("")
    assert doctor.main(["--output-dir", str(target), "--device", "cpu"]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert doctor.main(["--no-such-flag"]) == 2


@pytest.mark.parametrize("release", tuple(fake_flashinfer.RELEASES))
def test_flashinfer_api_check_reads_both_releases(release):
    module = fake_flashinfer.make_module(release)
    report = doctor.diagnose(torch.device("cpu"), load=lambda: module)
    check = {c.name: c for c in report.checks}["flashinfer_api"]
    assert check.status is PASS and check.summary.startswith("4 of 4 wrappers")
    evidence = dict(check.evidence)
    decode = evidence["BatchDecodeWithPagedKVCacheWrapper"]
    assert "run(out=) accepted" in decode
    assert ("no backend parameter" in decode) == (release == "0.2.6")
    assert "num_qo_heads" in evidence["BatchDecodeWithPagedKVCacheWrapper.plan"]
    assert dict(report.environment)["flashinfer"] == (
        "0.6.1" if release == "0.6.1" else "0.0.0+unknown"
    )


def test_flashinfer_api_check_fails_without_any_wrapper():
    import types

    check = doctor.check_flashinfer_api(types.ModuleType("flashinfer"))
    assert check.status is FAIL and "0 of 4 wrappers" in check.summary


def test_telemetry_check_lists_each_field_of_each_source():
    class Source:
        source = "nvml"

        def read(self):
            return tm.TelemetryReading(1755.0, None, ("sw_power_cap",))

        def max_sm_clock_mhz(self):
            return 1980.0

    result = doctor.check_telemetry((("nvml", Source()), ("pymxsml", None)), power_readable=True)
    assert result.status is PASS
    assert result.summary == "readable: sm_clock_MHz, max_sm_clock_MHz, throttle_reasons"
    evidence = dict(result.evidence)
    assert (
        evidence["nvml temperature_C"] == "unreadable" and evidence["nvml sm_clock_MHz"] == "1755"
    )
    assert evidence["pymxsml"].startswith("not available")
    nothing = doctor.check_telemetry((("nvml", None), ("pymxsml", None)), power_readable=False)
    assert nothing.status is UNAVAILABLE


def test_markdown_shows_every_check_with_its_evidence():
    report = doctor.DoctorReport(
        "2026-12-04T17:00:00Z",
        (("device", "cuda:0"),),
        (
            sc.CheckResult(
                "cuda_graph", FAIL, "the replay left NaN | x", (("NaN left", "7 of 8"),)
            ),
            sc.unavailable("telemetry", "no library"),
        ),
    )
    markdown = doctor.render_markdown(report)
    assert "| cuda_graph | **fail** | the replay left NaN \\| x |" in markdown
    assert "## cuda_graph: fail" in markdown and "- NaN left: `7 of 8`" in markdown
    assert report.exit_code == 1 and doctor.report_json(report)["exit_code"] == 1


def test_timer_verdicts_follow_the_checks_each_timer_requires():
    results = (
        sc.CheckResult("profiler_kernels", PASS, ""),
        sc.CheckResult("l2_flush", FAIL, ""),
        sc.unavailable("cuda_graph", "no GPU"),
    )
    verdicts = dict(sc.timer_verdicts(results))
    assert verdicts["--timer profiler --l2 cold"] == "refuses to run (exit 2): l2_flush failed"
    assert verdicts["--timer profiler --l2 warm"] == "runs (profiler_kernels passed)"
    assert verdicts["--timer events --l2 cold"].startswith("refuses")
    assert verdicts["--timer events --l2 warm"] == "runs (needs no self-check)"
    assert verdicts["--timer cuda_graph --l2 warm"] == "not checked: cuda_graph unavailable"
    assert sc.required_checks("wall", "warm") == ()


def test_on_the_cpu_no_timer_is_said_to_run_or_to_depend_on_nothing():
    """On the CPU every GPU check is unavailable: the events timer was said to "depend on no
    check", which read as if it ran there."""
    results = tuple(
        sc.unavailable(name, "no GPU") for name in ("profiler_kernels", "l2_flush", "cuda_graph")
    )
    verdicts = dict(sc.timer_verdicts(results))
    assert verdicts["--timer events --l2 warm"] == (
        "not checked: no GPU check ran here (on a GPU it needs none)"
    )
    assert all(verdict.startswith("not checked") for verdict in verdicts.values())


def test_real_probe_falls_back_to_a_matmul_and_says_why():
    probe = doctor.real_probe(torch.device("cpu"), None)
    assert probe.label.endswith("(FlashInfer not importable)")
    probe.run()
    assert torch.isfinite(probe.output).all()


def test_bench_all_exits_2_when_the_shared_timer_refuses(tmp_path, capsys):
    import fake_bench_script

    from fi_attn_bench import suite

    refusing = RefusingTimer()
    code = suite.main(
        ["--output-dir", str(tmp_path), "--preset", "smoke"],
        probe=NO_GPU,
        timer_factory=lambda options, device, log: refusing,
        specs=[fake_bench_script.SPEC],
    )
    assert code == 2
    assert "self-check 'cuda_graph' failed" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.csv"))


def test_a_check_that_raises_is_reported_as_failed():
    def broken():
        raise torch.OutOfMemoryError("CUDA out of memory")

    result = doctor._guarded("l2_flush", broken)
    assert result.status is FAIL and "OutOfMemoryError: CUDA out of memory" in result.summary
