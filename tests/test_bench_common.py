"""bench_common: CLI, backend choice, correctness check, fault isolation (CPU, fake timers)."""

from __future__ import annotations

import csv
import dataclasses
import itertools
import re
import shlex
import sys
from types import SimpleNamespace

import fake_bench_script
import pytest
import torch

from fi_attn_bench import command_line, errors, seed_api
from fi_attn_bench.backends import choice as backend_choice
from fi_attn_bench.cases import selection
from fi_attn_bench.cases import spec as script_spec
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import HARNESS_VERSION
from fi_attn_bench.sweep import environment
from fi_attn_bench.sweep import progress as sweep_progress
from fi_attn_bench.sweep import run as sweep_run
from fi_attn_bench.sweep import run_options as sweep_options
from fi_attn_bench.timing import loop as tloop
from fi_attn_bench.timing import profiled, timers
from fi_attn_bench.timing import trace as ttrace
from fi_attn_bench.timing.options import NoKernelCaptured, TimingOptions
from fi_attn_bench.timing.statistics import Batch

NO_GPU = backend_choice.Probe(
    cuda_available=lambda: False, import_flashinfer=lambda: SimpleNamespace(__version__="x")
)
FAST = ["--max-time-per-case", "0.05", "--min-samples", "3"]


def read_rows(path):
    stored = read_stored_rows(path)
    header, rows = list(stored.header), list(stored.rows)
    assert header, f"{path} has no header"
    return rows


class FakeTimer(timers.TimerDefaults):
    """Scripted samples instead of a clock; every batch calls run() once."""

    name = "profiler"
    l2 = "cold"

    def __init__(self, samples=(1.0,) * 10, error=None, starved=0, batches=None):
        self.samples, self.error, self.starved = tuple(samples), error, starved
        self.batches = batches  # a sequence of batches' samples, cycled (default: ``samples``)

    def sync(self):
        return None

    def open(self, fn, estimate_ms):
        if self.error is not None:
            raise self.error
        starved = self.starved
        batches = itertools.cycle(self.batches or (self.samples,))

        class Session(timers.SessionDefaults):
            def batch(self, calls):
                fn()
                return Batch(tuple(next(batches)), frozenset({"fake_kernel"}), starved=starved)

        return Session()


def fake_factory(timer):
    return lambda options, device, log: timer


def run_main(argv, *, timer=None, probe=NO_GPU, spec=fake_bench_script.SPEC):
    factory = fake_factory(timer) if timer is not None else timers.make_timer
    return command_line.main_for(spec, argv, probe=probe, timer_factory=factory)


# ---------------------------------------------------------------- filters and arguments


def test_parse_filter_operators():
    fields = ("batch_size", "seq_len")
    terms = selection.parse_filter("batch_size<=16, seq_len=128", fields)
    assert terms == (
        selection.FilterTerm("batch_size", "<=", 16.0),
        selection.FilterTerm("seq_len", "=", 128.0),
    )
    cases = [{"batch_size": b, "seq_len": s} for b in (1, 16, 64) for s in (128, 256)]
    assert selection.select_cases(cases, terms) == [
        {"batch_size": 1, "seq_len": 128},
        {"batch_size": 16, "seq_len": 128},
    ]
    for text, kept in [
        ("batch_size!=16", 4),
        ("batch_size>16", 2),
        ("batch_size>=16", 4),
        ("batch_size<16", 2),
        ("batch_size==64", 2),
    ]:
        assert len(selection.select_cases(cases, selection.parse_filter(text, fields))) == kept, (
            text
        )


@pytest.mark.parametrize(
    "text", ["batch_size", "batch_size<=", "batch_size~3", "=3", "batch_size<=abc", ""]
)
def test_parse_filter_malformed(text):
    with pytest.raises(errors.UsageError, match="valid fields: batch_size, seq_len"):
        selection.parse_filter(text, ("batch_size", "seq_len"))


def test_parse_filter_unknown_field_names_valid_ones():
    with pytest.raises(
        errors.UsageError,
        match=r"unknown filter field 'head_dim'; valid fields: batch_size, seq_len",
    ):
        selection.parse_filter("head_dim=128", ("batch_size", "seq_len"))


def explode(case, settings, inputs=None):
    raise AssertionError("no case may be prepared")


EXPLODING = script_spec.BenchmarkSpec(**{**fake_bench_script.SPEC.__dict__, "prepare": explode})


def test_bad_filter_exits_2_before_any_work(capsys):
    assert run_main(["--filter", "nope=1"], spec=EXPLODING) == 2
    assert "valid fields: batch_size, seq_len" in capsys.readouterr().err


def test_filter_matching_nothing_exits_2(capsys):
    assert run_main(["--filter", "batch_size>100"]) == 2
    assert "no case" in capsys.readouterr().err


def test_unknown_preset_exits_2_naming_choices(capsys):
    assert run_main(["--preset", "huge"]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'huge'" in err and "smoke" in err and "cpu" in err


def test_unsupported_dtype_exits_2_naming_choices(capsys):
    assert run_main(["--dtype", "float32", "--list"]) == 2
    err = capsys.readouterr().err
    assert "unsupported dtype 'float32'" in err and "bfloat16" in err and "bf16" in err


@pytest.mark.parametrize("alias", ["fp16", "bf16", "float16", "BFLOAT16"])
def test_dtype_aliases_accepted(alias):
    assert run_main(["--dtype", alias, "--list"]) == 0


def test_list_prints_cases_and_runs_nothing(capsys):
    argv = ["--list", "--preset", "default", "--filter", "batch_size<=3"]
    assert run_main(argv, spec=EXPLODING) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [f"batch_size={b},seq_len=8" for b in (1, 2, 3)]


def test_bad_numbers_exit_2():
    assert run_main(["--min-samples", "0"], spec=EXPLODING) == 2
    assert run_main(["--noise-target", "-1"]) == 2
    assert run_main(["--rtol", "nan"]) == 2
    assert run_main(["--page-size", "0"]) == 2


def test_invalid_kernel_pattern_on_gpu_is_usage_error():
    args = command_line.build_parser(fake_bench_script.SPEC).parse_args(["--kernel-pattern", "("])
    with pytest.raises(errors.UsageError, match="invalid --kernel-pattern"):
        sweep_options._timing_options(args, torch.device("cuda"))


def test_cuda_graph_timer_is_warm_only():
    parser = command_line.build_parser(fake_bench_script.SPEC)
    options = sweep_options._timing_options(
        parser.parse_args(["--timer", "cuda_graph"]), torch.device("cuda")
    )
    assert (options.timer, options.l2) == ("cuda_graph", "warm")
    with pytest.raises(errors.UsageError, match="warm L2 only"):
        sweep_options._timing_options(
            parser.parse_args(["--timer", "cuda_graph", "--l2", "cold"]), torch.device("cuda")
        )
    tuned = sweep_options._timing_options(
        parser.parse_args(["--batch-ms", "100", "--warmup-ms", "200"]), torch.device("cuda")
    )
    assert (tuned.batch_target_ms, tuned.warmup_min_ms, tuned.warmup_max_ms) == (
        100.0,
        200.0,
        1000.0,
    )
    default = sweep_options._timing_options(parser.parse_args([]), torch.device("cuda"))
    assert (default.timer, default.l2, default.noise_target_pct, default.min_samples) == (
        "profiler",
        "cold",
        1.0,
        10,
    )
    cpu = sweep_options._timing_options(
        parser.parse_args(["--timer", "events"]), torch.device("cpu")
    )
    assert (cpu.timer, cpu.l2) == ("wall", "warm")


def test_minimum_measurement_options_reach_the_timer_on_a_gpu_only():
    parser = command_line.build_parser(fake_bench_script.SPEC)
    args = parser.parse_args(["--min-time-ms", "700", "--enough-samples", "200"])
    gpu = sweep_options._timing_options(args, torch.device("cuda"))
    assert (gpu.min_time_ms, gpu.enough_samples) == (700.0, 200)
    old_name = parser.parse_args(["--min-measure-ms", "40"])  # the pre-0.3.0 spelling
    assert sweep_options._timing_options(old_name, torch.device("cuda")).min_time_ms == 40.0
    assert sweep_options._timing_options(args, torch.device("cpu")).min_time_ms == 0.0
    with pytest.raises(SystemExit):
        parser.parse_args(["--enough-samples", "0"])


def test_default_output_path_like_the_seed(tmp_path):
    path = seed_api.get_csv_path("SomeWrapper", str(tmp_path))
    name = path.rsplit("/", 1)[-1]
    assert name.startswith("SomeWrapper_") and name.endswith(".csv")
    stamp = name[len("SomeWrapper_") : -4]
    assert len(stamp) == 15 and stamp[8] == "_" and stamp.replace("_", "").isdigit()


# ---------------------------------------------------------------- backend choice


def probe(gpu, flashinfer_ok=True):
    def import_flashinfer():
        if not flashinfer_ok:
            raise ModuleNotFoundError("No module named 'flashinfer'")
        return SimpleNamespace(__version__="0.6.1")

    return backend_choice.Probe(cuda_available=lambda: gpu, import_flashinfer=import_flashinfer)


def test_auto_picks_flashinfer_with_gpu_and_module():
    choice = backend_choice.resolve_impl_kind("auto", None, probe(True))
    assert (choice.impl_kind, choice.device.type, choice.note) == ("flashinfer", "cuda", "")


def test_auto_falls_back_with_one_line_reason():
    no_module = backend_choice.resolve_impl_kind("auto", None, probe(True, flashinfer_ok=False))
    assert (no_module.impl_kind, no_module.device.type) == ("torch", "cuda")
    assert "No module named 'flashinfer'" in no_module.note and "\n" not in no_module.note
    no_gpu = backend_choice.resolve_impl_kind("auto", None, probe(False))
    assert (no_gpu.impl_kind, no_gpu.device.type) == ("torch", "cpu")
    assert "no GPU" in no_gpu.note


def test_explicit_flashinfer_that_cannot_run_is_an_error():
    with pytest.raises(errors.UsageError, match="No module named 'flashinfer'"):
        backend_choice.resolve_impl_kind("flashinfer", None, probe(True, flashinfer_ok=False))
    with pytest.raises(errors.UsageError, match="no GPU"):
        backend_choice.resolve_impl_kind("flashinfer", None, probe(False))
    with pytest.raises(errors.UsageError, match="needs a GPU"):
        backend_choice.resolve_impl_kind("flashinfer", "cpu", probe(True))


def test_explicit_flashinfer_exit_code_2(capsys):
    assert run_main(["--backend", "flashinfer"], probe=probe(False)) == 2
    assert "--backend flashinfer" in capsys.readouterr().err


def test_device_cuda_without_gpu_is_an_error():
    with pytest.raises(errors.UsageError, match="no GPU"):
        backend_choice.resolve_impl_kind("torch", "cuda:0", probe(False))
    with pytest.raises(errors.UsageError, match="invalid --device"):
        backend_choice.resolve_impl_kind("torch", "banana", probe(False))


def test_auto_without_gpu_runs_cpu_preset(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), *FAST], timer=FakeTimer()) == 0
    captured = capsys.readouterr()
    assert captured.err.count("torch reference backend") == 1
    rows = read_rows(out)
    assert len(rows) == len(fake_bench_script.SPEC.presets["cpu"])
    assert {r["backend"] for r in rows} == {"torch"} and {r["device"] for r in rows} == {"cpu"}


# ---------------------------------------------------------------- rows


def test_rows_carry_statistics_environment_and_repro(tmp_path, capsys):
    out = tmp_path / "r.csv"
    timer = FakeTimer(samples=(2.0, 1.0, 3.0, 4.0, 5.0))
    argv = [
        "--output",
        str(out),
        "--preset",
        "smoke",
        "--min-samples",
        "5",
        "--noise-target",
        "100",
    ]
    assert run_main(argv, timer=timer) == 0
    rows = read_rows(out)
    assert len(rows) == 2
    row = rows[0]
    assert row["status"] == "ok" and float(row["time_ms"]) == 3.0
    assert (row["samples"], row["time_min_ms"], row["time_max_ms"]) == ("5", "1.0", "5.0")
    assert float(row["noise_pct"]) == pytest.approx(200 / 3)
    assert float(row["io_bytes"]) == 2 * 1 * 8 * 2 and float(row["flops"]) == 8
    assert float(row["bandwidth_GB_s"]) == pytest.approx(32 / 3.0 / 1e6)
    assert (
        row["kernels"] == "fake_kernel" and row["dtype"] == "float16" and row["page_size"] == "16"
    )
    assert row["torch_version"] == torch.__version__ and row["check"] == "skipped"
    assert row["harness_version"] == HARNESS_VERSION
    assert row["repro"].startswith(
        "python tests/fake_bench_script.py --filter batch_size=1,seq_len=8 --preset smoke"
    )
    out_text = capsys.readouterr().out
    assert (
        "[1/2] batch_size=1,seq_len=8: 3.000ms" in out_text
        and f"Results saved to {out}" in out_text
    )


def test_no_kernel_captured_is_a_failed_row(tmp_path, capsys):
    out = tmp_path / "r.csv"
    timer = FakeTimer(error=NoKernelCaptured("the profiler captured no GPU kernel for one run()"))
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=timer) == 1
    rows = read_rows(out)
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert rows[0]["error_type"] == "NoKernelCaptured" and rows[0]["time_ms"] == ""
    assert rows[0]["io_bytes"] != ""  # known before the run
    text = capsys.readouterr().out
    assert "FAILED: NoKernelCaptured" in text and "repro: python tests/fake_bench_script.py" in text


def test_injected_oom_fails_one_case_only(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_OOM", "2")
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0")
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), *FAST]) == 1
    rows = read_rows(out)
    by_batch = {r["batch_size"]: r for r in rows}
    assert by_batch["2"]["status"] == "failed" and by_batch["2"]["error_type"] == "OutOfMemoryError"
    assert all(by_batch[b]["status"] == "ok" for b in ("1", "3", "4"))


def test_unsupported_case_and_nan_output_are_failed_rows(tmp_path):
    class UnsupportedCase(Exception):
        pass

    def prepare(case, settings, inputs=None):
        if case["batch_size"] == 1:
            raise UnsupportedCase("head_dim 96 not compiled")
        out = torch.full((4,), float("nan"))
        return script_spec.Prepared(run=lambda: out, output=out, reference=None, plan_ms=0.0)

    spec = script_spec.BenchmarkSpec(**{**fake_bench_script.SPEC.__dict__, "prepare": prepare})
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke", *FAST], spec=spec) == 1
    rows = read_rows(out)
    assert [r["error_type"] for r in rows] == ["UnsupportedCase", "NonFiniteOutput"]
    assert rows[0]["error"] == "head_dim 96 not compiled"


def test_repro_command_reruns_exactly_that_case(tmp_path):
    out = tmp_path / "r.csv"
    assert (
        run_main(
            ["--output", str(out), "--preset", "default", "--filter", "batch_size=5", "--no-check"],
            timer=FakeTimer(),
        )
        == 0
    )
    repro = read_rows(out)[0]["repro"]
    words = shlex.split(repro)
    assert words[:2] == ["python", "tests/fake_bench_script.py"] and "--no-check" in words
    again = tmp_path / "again.csv"
    assert run_main([*words[2:], "--output", str(again)], timer=FakeTimer()) == 0
    rows = read_rows(again)
    assert [(r["batch_size"], r["seq_len"]) for r in rows] == [("5", "8")]


def test_repro_repeats_a_timing_budget_that_is_not_the_default(tmp_path):
    """A briefer budget repeats worse between processes: a rerun must time the same way."""
    out = tmp_path / "r.csv"
    argv = ["--output", str(out), "--preset", "smoke", "--no-check", *FAST, "--noise-target", "2"]
    assert run_main(argv, timer=FakeTimer()) == 0
    words = shlex.split(read_rows(out)[0]["repro"])
    budget = dict(zip(words, words[1:], strict=False))  # each option and the word after it
    assert budget["--max-time-per-case"] == "0.05" and budget["--min-samples"] == "3"
    assert budget["--noise-target"] == "2" and "--warmup-ms" not in budget


def test_repro_on_a_gpu_repeats_its_gpu_time_floor_and_sustain_phase(tmp_path):
    options = check_options(tmp_path, device=torch.device("cuda:0"))
    case = fake_bench_script.SPEC.presets["smoke"][0]
    plain = sweep_options.repro_command(fake_bench_script.SPEC, options, case)
    assert "--min-time-ms" not in plain and "--sustain-ms" not in plain
    brief = dataclasses.replace(
        options, timing=dataclasses.replace(options.timing, min_time_ms=100.0, sustain_ms=0.0)
    )
    words = sweep_options.repro_command(fake_bench_script.SPEC, brief, case).split()
    assert words[words.index("--min-time-ms") + 1] == "100"
    assert words[words.index("--sustain-ms") + 1] == "0"


# ---------------------------------------------------------------- correctness check


def check_options(tmp_path, **changes):
    base = sweep_options.RunOptions(
        preset="smoke",
        cases=fake_bench_script.SPEC.presets["smoke"],
        impl_kind="flashinfer",
        device=torch.device("cpu"),
        dtype_name="float16",
        page_size=16,
        seed=0,
        workspace_bytes=1,
        timing=TimingOptions(
            timer="wall", l2="warm", max_time_s=0.05, warmup_min_ms=1, min_samples=3
        ),
        check=True,
        rtol=1.6e-2,
        atol=1.6e-2,
        output=str(tmp_path / "check.csv"),
        resume=False,
        verbose=False,
    )
    return dataclasses.replace(base, **changes)


def spec_writing(write):
    """A spec whose run() calls write(q, out); the reference is 2 * q."""

    def prepare(case, settings, inputs=None):
        q = torch.randn(case["batch_size"], 64, dtype=settings.dtype)
        out = torch.empty_like(q)
        return script_spec.Prepared(
            run=lambda: write(q, out), output=out, reference=lambda: q.float() * 2, plan_ms=0.5
        )

    return script_spec.BenchmarkSpec(**{**fake_bench_script.SPEC.__dict__, "prepare": prepare})


def sweep(spec, options):
    return sweep_run.Sweep(
        spec, options, timers.make_timer(options.timing, options.device, print), log=lambda _: None
    ).run()


def correct(q, out):
    torch.mul(q, 2, out=out)


def test_check_passes_correct_output(tmp_path):
    options = check_options(tmp_path)
    assert sweep(spec_writing(correct), options) == 0
    row = read_rows(options.output)[0]
    assert row["check"] == "pass" and float(row["max_abs_err"]) <= 0.02
    assert float(row["mismatch_frac"]) == 0.0 and float(row["check_rtol"]) == 1.6e-2
    assert float(row["plan_ms"]) == 0.5


def test_check_catches_unwritten_output(tmp_path):
    options = check_options(tmp_path)
    assert sweep(spec_writing(lambda q, out: None), options) == 1
    row = read_rows(options.output)[0]
    assert (row["status"], row["error_type"], row["check"]) == (
        "failed",
        "CorrectnessError",
        "fail",
    )
    assert "NaN" in row["error"]


def test_check_catches_unwritten_output_even_if_buffer_was_correct_before(tmp_path):
    calls = []

    def first_call_only(q, out):
        if not calls:
            torch.mul(q, 2, out=out)
        calls.append(1)

    options = check_options(tmp_path)
    assert (
        sweep(spec_writing(first_call_only), options) == 1
    )  # warm-up wrote it; poisoning exposes it
    assert read_rows(options.output)[0]["error_type"] == "CorrectnessError"


def test_check_catches_perturbed_output(tmp_path):
    options = check_options(tmp_path)
    assert sweep(spec_writing(lambda q, out: torch.mul(q, 2.5, out=out)), options) == 1
    row = read_rows(options.output)[0]
    assert row["error_type"] == "CorrectnessError" and row["check"] == "fail"
    assert float(row["max_abs_err"]) > 0.1 and float(row["mismatch_frac"]) > 0.01


def test_no_check_and_torch_backend_skip(tmp_path):
    wrong = spec_writing(lambda q, out: torch.mul(q, 2.5, out=out))
    for changes in ({"check": False}, {"impl_kind": "torch"}):
        options = check_options(tmp_path, **changes)
        assert sweep(wrong, options) == 0
        assert {r["check"] for r in read_rows(options.output)} == {"skipped"}


def test_custom_tolerances_are_recorded(tmp_path):
    options = check_options(tmp_path, rtol=0.3, atol=0.3)
    assert sweep(spec_writing(lambda q, out: torch.mul(q, 2.1, out=out)), options) == 0
    row = read_rows(options.output)[0]
    assert (float(row["check_rtol"]), float(row["check_atol"])) == (0.3, 0.3) and row[
        "check"
    ] == "pass"


# ---------------------------------------------------------------- roofline and environment


def test_roofline_columns_from_the_peaks_table(tmp_path, monkeypatch):
    seen = {}

    def resolve_peaks(name, dtype, bandwidth_override=None, tflops_override=None):
        seen.update(name=name, dtype=dtype, bw=bandwidth_override)
        return "peaks"

    fake = SimpleNamespace(
        resolve_peaks=resolve_peaks,
        roofline_columns=lambda bw, tflops, peaks: {
            "pct_peak_bw": 12.5,
            "pct_peak_tflops": 1.0,
            "junk": 1,
        },
    )
    monkeypatch.setitem(sys.modules, "fi_attn_bench.device.peaks", fake)
    out = tmp_path / "r.csv"
    assert (
        run_main(
            ["--output", str(out), "--preset", "smoke", "--peak-bandwidth", "1000"],
            timer=FakeTimer(),
        )
        == 0
    )
    row = read_rows(out)[0]
    assert (row["pct_peak_bw"], row["pct_peak_tflops"]) == ("12.5", "1.0")
    assert seen == {"name": "cpu", "dtype": "float16", "bw": 1000.0}


def test_missing_peaks_leave_columns_empty(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "fi_attn_bench.device.peaks", None)
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke"], timer=FakeTimer()) == 0
    assert {r["pct_peak_bw"] for r in read_rows(out)} == {""}


def test_runtime_version_is_feature_detected(monkeypatch):
    monkeypatch.setattr(torch.version, "cuda", None, raising=False)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    assert environment.runtime_version() == ""
    monkeypatch.setattr(torch.version, "cuda", "13.0", raising=False)
    assert environment.runtime_version() == "CUDA 13.0"
    monkeypatch.setattr(torch.version, "maca", "3.7.0", raising=False)
    assert environment.runtime_version() == "MACA 3.7.0"


# ---------------------------------------------------------------- seed helpers


def test_setup_paged_kv_indptr():
    indptr, indices, last = seed_api.setup_paged_kv_indptr(3, 37, 16, device="cpu")
    assert indptr.tolist() == [0, 3, 6, 9]
    assert sorted(indices.tolist()) == list(range(9)) and indices.tolist() != list(range(9))
    assert last.tolist() == [5, 5, 5]
    assert indptr.dtype == indices.dtype == last.dtype == torch.int32


def test_compute_reps_and_workspace():
    assert (
        seed_api.compute_reps(0.01) == 1000
        and seed_api.compute_reps(100.0) == 10
        and seed_api.compute_reps(1.0) == 25
    )
    ws = seed_api.setup_workspace("cpu", 1024)
    assert ws.dtype == torch.uint8 and ws.numel() == 1024
    assert seed_api.dtype == torch.float16 and seed_api.page_block_size == 16


def test_csv_is_plain_and_rectangular(tmp_path):
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "default"], timer=FakeTimer()) == 0
    with open(out, newline="") as handle:
        rows = list(csv.reader(handle))
    assert len({len(r) for r in rows}) == 1 and len(rows) == 9


def test_filter_typo_is_reported_before_probing_the_machine(capsys):
    def boom():
        raise AssertionError("the machine was probed")

    assert run_main(["--filter", "batch_size<<3"], probe=backend_choice.Probe(boom, boom)) == 2
    assert "malformed filter term" in capsys.readouterr().err


def test_list_uses_the_preset_a_run_would_use(capsys):
    assert run_main(["--list"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == "FakeAttentionWrapper: preset cpu, 4 cases"
    assert run_main(["--list"], probe=probe(True)) == 0
    assert "preset default, 8 cases" in capsys.readouterr().out


def test_sweep_freezes_the_objects_alive_before_its_first_case(tmp_path, monkeypatch):
    import gc

    frozen = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(gc.get_freeze_count()))
    assert (
        run_main(["--output", str(tmp_path / "r.csv"), "--preset", "smoke"], timer=FakeTimer()) == 0
    )
    assert len(frozen) == 1


def test_case_whose_calls_waited_for_their_launch_gets_a_note(tmp_path, capsys):
    argv = ["--output", str(tmp_path / "r.csv"), "--preset", "smoke", "--force"]
    assert run_main(argv, timer=FakeTimer(starved=0)) == 0
    assert "started late" not in capsys.readouterr().out
    assert run_main(argv, timer=FakeTimer(starved=1)) == 0  # 1 of 10 samples per batch
    notes = [x for x in capsys.readouterr().out.splitlines() if "started late" in x]
    assert len(notes) == 2  # one per case, under its line
    starved, calls = map(int, re.match(r"  note: (\d+) of (\d+) calls", notes[0]).groups())
    assert starved >= 1 and calls == 10 * starved


def test_case_whose_samples_spread_wide_gets_a_note(tmp_path, capsys):
    argv = ["--output", str(tmp_path / "r.csv"), "--preset", "smoke", "--force"]
    narrow = (1.0, 1.01, 1.02, 1.0, 1.01, 1.02, 1.0, 1.01, 1.02, 1.0)  # IQR / median 2 %
    assert run_main(argv, timer=FakeTimer(samples=narrow)) == 0
    assert "samples spread" not in capsys.readouterr().out
    wide = (1.0, 1.0, 1.0, 1.0, 1.0, 1.13, 1.13, 1.13, 1.0, 1.13)  # 13 % apart, like a clock step
    assert run_main(argv, timer=FakeTimer(samples=wide)) == 0
    notes = [x for x in capsys.readouterr().out.splitlines() if "samples spread" in x]
    assert len(notes) == 2 and notes[0].startswith("  note: samples spread 13.0% (IQR / median)")


def test_wide_spread_note_states_the_blocks_interval_and_the_row_keeps_it(tmp_path, capsys):
    fast, slow = (1.0,) * 10, (1.13,) * 10  # a stretch at a lower clock, one batch long
    argv = ["--output", str(tmp_path / "r.csv"), "--preset", "smoke", "--min-samples", "50"]
    argv += ["--noise-target", "5"]  # stop at 50: the median's interval is 1.57 x 13 / sqrt(50)
    # 30 fast then 20 slow: IQR / median 13 %; 5 blocks of 10 have medians 1, 1, 1, 1.13,
    # 1.13 -> 2.776 x stdev / sqrt(5) / median 1.0 = 8.8 %
    assert run_main(argv, timer=FakeTimer(batches=[fast, fast, fast, slow, slow])) == 0
    notes = [x for x in capsys.readouterr().out.splitlines() if "samples spread" in x]
    assert len(notes) == 2  # one per case
    assert "consecutive blocks of its samples put this one within +-8.8% (drift_pct)" in notes[0]
    with open(tmp_path / "r.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(row["drift_pct"]) for row in rows] == [pytest.approx(8.8, abs=0.05)] * 2
    assert {row["samples"] for row in rows} == {"50"}


def test_sweep_reports_its_cost_ratio(tmp_path, capsys):
    assert (
        run_main(["--output", str(tmp_path / "r.csv"), "--preset", "smoke"], timer=FakeTimer()) == 0
    )
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("Sweep wall time"))
    assert "time inside timed runs 0.02 s" in line  # 2 cases x 10 samples x 1 ms
    phases = line.split("by phase: ")[1]
    assert [p.split()[0] for p in phases.split(", ")] == [
        "prepare", "set-up", "warm-up", "check", "sustain", "calibrate", "timing", "readout",
        "integrity",
    ]  # fmt: skip
    runner = SimpleNamespace(timed_ms=2000.0, batch_gpu_ms=0.0, phases=tloop.PhaseClock())
    assert sweep_run._cost_line(runner, 5.0).endswith("(wall/timed 2.5x)")
    runner.batch_gpu_ms = 2500.0
    assert sweep_run._cost_line(runner, 5.0).endswith(
        "GPU busy in timed batches 2.50 s (L2 flushes included)"
    )
    runner.timed_ms = 0.0
    assert "(wall/timed n/a)" in sweep_run._cost_line(runner, 5.0)


def test_progress_bar_on_a_terminal_and_plain_lines_otherwise(monkeypatch, capsys):
    import io

    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    eta = sweep_progress.Eta([1.0, 1.0], TimingOptions(), clock=iter([0.0, 2.0]).__next__)
    progress = sweep_progress.Progress.start(2, eta)
    assert progress.bar is not None
    eta.case_finished(1.0)
    progress.finished("[1/2] case one: 1.000ms")
    progress.close()
    assert "[1/2] case one: 1.000ms" in capsys.readouterr().out
    assert "1/2" in terminal.getvalue()  # the bar itself goes to stderr
    assert "ETA 0:00:02" in terminal.getvalue()  # the cost-based ETA, not tqdm's count

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    clock = iter([0.0, 2.0]).__next__  # started, then the first ETA read
    eta = sweep_progress.Eta([1.0, 1.0, 1.0], TimingOptions(), clock=clock)
    plain = sweep_progress.Progress.start(3, eta)
    assert plain.bar is None
    eta.case_finished(1.0)
    plain.finished("[1/3] case: 1.000ms")
    assert capsys.readouterr().out == "[1/3] case: 1.000ms  [ETA 0:00:04]\n"


def test_seed_run_with_profiler_counts_every_kernel_or_the_named_ones(monkeypatch):
    trace = []

    def profile(body, sync):
        trace.clear()
        body()
        t, events = 0, []
        for _ in trace:
            for name, duration in (("FillFunctor", 10_000), ("AttentionKernel", 90_000)):
                events.append(ttrace.DeviceEvent(name, t, duration))
                t += duration + 1_000
        return events

    class Event:  # the provisional samples' CUDA events
        def __init__(self, enable_timing=False):
            pass

        def record(self, stream=None):
            pass

        def elapsed_time(self, end):
            return 1.0

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(
        profiled, "ProfilerTimer", lambda o, d, f: timers.ProfilerTimer(o, d, f, profile=profile)
    )
    run = lambda: trace.append(1)  # noqa: E731
    assert seed_api.run_with_profiler(run, device="cpu") == pytest.approx(0.1)
    assert seed_api.run_with_profiler(run, ["AttentionKernel"], device="cpu") == pytest.approx(0.09)
    with pytest.raises(NoKernelCaptured, match="AttentionKernel"):
        seed_api.run_with_profiler(run, ["BatchPrefillWithPagedKVCacheKernel"], device="cpu")


def test_long_multiline_errors_are_clipped_in_csv_and_one_line_on_screen(tmp_path, capsys):
    log = "nvcc error: " + "x" * 200_000 + "\nfatal: head_dim 96 not instantiated"

    def prepare(case, settings, inputs=None):
        raise RuntimeError(log)

    spec = script_spec.BenchmarkSpec(**{**fake_bench_script.SPEC.__dict__, "prepare": prepare})
    out = tmp_path / "r.csv"
    assert run_main(["--output", str(out), "--preset", "smoke", *FAST], spec=spec) == 1
    error = read_rows(out)[0]["error"]
    assert len(error) < 2500 and error.startswith("nvcc error: xxx")
    assert error.endswith("fatal: head_dim 96 not instantiated") and "characters cut" in error
    failed = [x for x in capsys.readouterr().out.splitlines() if "FAILED" in x]
    assert len(failed) == 2 and all(len(x) < 500 for x in failed)
    assert "... (full message in the CSV)" in failed[0]


def test_check_without_any_output_tensor_says_so(tmp_path):
    def prepare(case, settings, inputs=None):
        return script_spec.Prepared(
            run=lambda: None, output=None, reference=lambda: torch.zeros(2), plan_ms=0.0
        )

    spec = script_spec.BenchmarkSpec(**{**fake_bench_script.SPEC.__dict__, "prepare": prepare})
    options = check_options(tmp_path)
    assert sweep(spec, options) == 1
    row = read_rows(options.output)[0]
    assert row["error_type"] == "TypeError" and "nothing to check" in row["error"]


def test_verbose_details_print_under_their_own_case(tmp_path, capsys):
    out = tmp_path / "r.csv"
    argv = ["--output", str(out), "--preset", "smoke", "--verbose"]
    assert run_main(argv, timer=FakeTimer()) == 0
    lines = capsys.readouterr().out.splitlines()
    cases = [i for i, line in enumerate(lines) if re.match(r"\[\d+/\d+\] ", line)]
    assert len(cases) == 2
    for index in cases:  # each case's line, then its measurement details
        assert "samples, median" in lines[index + 1]
    assert "samples, median" not in lines[cases[0] - 1]


def test_rows_take_timer_and_l2_from_the_timer_that_measured_ok_and_failed_alike(tmp_path):
    timer = FakeTimer()
    timer.name, timer.l2 = "events", "warm"
    ok, failed = tmp_path / "ok.csv", tmp_path / "failed.csv"
    assert run_main(["--output", str(ok), "--preset", "smoke", *FAST], timer=timer) == 0
    assert (
        run_main(["--output", str(failed), "--preset", "smoke"], spec=EXPLODING, timer=timer) == 1
    )
    for path in (ok, failed):
        rows = read_rows(path)
        assert rows and all((r["timer"], r["l2"]) == ("events", "warm") for r in rows)
