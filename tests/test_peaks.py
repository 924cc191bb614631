"""device.peaks: the published table, the cache, precedence and roofline percentages."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from fi_attn_bench.device import peaks as dp
from fi_attn_bench.device.peaks import Peaks

ROOT = Path(__file__).resolve().parent.parent
TINY = dp.MeasureSettings(copy_bytes=1 << 20, gemm_n=32, reps=3, warmup=1)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(dp.CACHE_ENV, str(tmp_path))
    return tmp_path


# --------------------------------------------------------------------------- roofline


def test_roofline_columns_arithmetic():
    peaks = Peaks("NVIDIA H200", 4000.0, 800.0, "bf16", "override")
    columns = dp.roofline_columns(2000.0, 100.0, peaks)
    assert columns == pytest.approx({"pct_peak_bw": 50.0, "pct_peak_tflops": 12.5})


def test_roofline_columns_keep_values_above_peak():
    peaks = Peaks("NVIDIA H200", 4300.0, 790.0, "bf16", "measured 2026-12-02")
    columns = dp.roofline_columns(5160.0, 0.0, peaks)
    assert columns["pct_peak_bw"] == pytest.approx(120.0)
    assert columns["pct_peak_bw"] > dp.PLAUSIBLE_PCT_LIMIT
    assert columns["pct_peak_tflops"] == 0.0


def test_roofline_columns_without_peaks_or_values():
    assert dp.roofline_columns(100.0, 1.0, None) == {}
    peaks = Peaks("x", 1000.0, float("nan"), "fp16", "override")
    assert dp.roofline_columns(250.0, 1.0, peaks) == {"pct_peak_bw": 25.0}
    full = Peaks("x", 1000.0, 100.0, "fp16", "override")
    assert dp.roofline_columns("", float("nan"), full) == {}
    assert dp.roofline_columns("500", -1.0, full) == {"pct_peak_bw": 50.0}


# --------------------------------------------------------------------------- published


@pytest.mark.parametrize(
    ("name", "bandwidth", "tflops"),
    [
        ("NVIDIA H200", 4800.0, 989.0),
        ("NVIDIA H100 80GB HBM3", 3350.0, 989.0),
        ("NVIDIA A100-SXM4-80GB", 2039.0, 312.0),
        ("NVIDIA A100-SXM4-40GB", 1555.0, 312.0),
        ("NVIDIA A100 80GB PCIe", 1935.0, 312.0),
        ("NVIDIA A100-PCIE-40GB", 1555.0, 312.0),
        ("MetaX C500", 1800.0, 280.0),
    ],
)
def test_match_published_real_device_names(name, bandwidth, tflops):
    for dtype in ("bf16", "fp16", "torch.bfloat16", "float16"):
        peaks = dp.match_published(name, dtype)
        assert peaks is not None
        assert (peaks.bandwidth_GB_s, peaks.tflops) == (bandwidth, tflops)
        assert peaks.device == name and peaks.source == dp.SOURCE_PUBLISHED
    assert dp.match_published(name, "bf16").dtype == "bfloat16"


@pytest.mark.parametrize(
    "name",
    [
        "NVIDIA GH200 480GB",  # contains 'H200' but is a different board
        "NVIDIA H100 PCIe",
        "NVIDIA H200 NVL",
        "NVIDIA GeForce RTX 4090",
        "MetaX C550",
        "cpu",
        "",
    ],
)
def test_match_published_rejects_other_devices(name):
    assert dp.match_published(name, "bf16") is None


def test_match_published_unknown_dtype():
    assert dp.match_published("NVIDIA H200", "float32") is None


def test_published_table_marks_unconfirmed_numbers():
    by_name = {entry.name: entry for entry in dp.PUBLISHED_PEAKS}
    assert by_name["MetaX C500"].confirmed is False
    assert "UNCONFIRMED" in by_name["MetaX C500"].note
    assert all(entry.note for entry in dp.PUBLISHED_PEAKS)
    assert {"NVIDIA H200 SXM", "NVIDIA H100 SXM", "NVIDIA A100 SXM4 80GB"} <= set(by_name)
    table = dp.published_table_markdown()
    assert table.count("\n") == len(dp.PUBLISHED_PEAKS) + 1
    assert "| MetaX C500 | 1,800 | 280 | 280 | no |" in table


def test_peaks_validation():
    with pytest.raises(ValueError):
        Peaks("x", -1.0, 10.0, "bf16", "override")
    with pytest.raises(ValueError):
        Peaks("x", 10.0, math.inf, "bf16", "override")
    with pytest.raises(ValueError):
        Peaks("x", 10.0, 10.0, "int8", "override")


# --------------------------------------------------------------------------- cache


def test_cache_path_from_environment(cache_dir):
    assert dp.cache_path() == cache_dir / "peaks.json"


def test_cache_path_default(monkeypatch, tmp_path):
    monkeypatch.delenv(dp.CACHE_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert dp.cache_path() == tmp_path / "fi-attn-bench" / "peaks.json"


def test_cache_round_trip(cache_dir):
    bf16 = Peaks("NVIDIA H200", 4301.5, 791.25, "bfloat16", "measured 2026-12-02")
    fp16 = Peaks("NVIDIA H200", 4301.5, 760.0, "fp16", "measured 2026-12-02")
    other = Peaks("MetaX C500", 1500.0, 200.0, "bf16", "measured 2026-12-01")
    for peaks in (bf16, fp16, other):
        dp.save_cached(peaks)
    assert dp.load_cached("NVIDIA H200", "bf16") == bf16
    assert dp.load_cached("NVIDIA H200", "float16") == fp16
    assert dp.load_cached("MetaX C500", "bfloat16") == other
    assert dp.load_cached("NVIDIA H100 80GB HBM3", "bf16") is None
    newer = Peaks("NVIDIA H200", 4400.0, 800.0, "bf16", "measured 2026-12-03")
    dp.save_cached(newer)
    assert dp.load_cached("NVIDIA H200", "bf16") == newer
    assert dp.load_cached("NVIDIA H200", "fp16") == fp16
    assert [p.name for p in cache_dir.iterdir()] == ["peaks.json"]  # no temporary left
    assert json.loads((cache_dir / "peaks.json").read_text())["version"] == 1


def test_corrupt_cache_reads_as_empty_and_is_replaced(cache_dir):
    (cache_dir / "peaks.json").write_text("{not json")
    assert dp.load_cached("NVIDIA H200", "bf16") is None
    peaks = Peaks("NVIDIA H200", 4300.0, 790.0, "bf16", "measured 2026-12-02")
    dp.save_cached(peaks)
    assert dp.load_cached("NVIDIA H200", "bf16") == peaks


def test_cache_without_directory_is_created(tmp_path, monkeypatch):
    monkeypatch.setenv(dp.CACHE_ENV, str(tmp_path / "a" / "b"))
    peaks = Peaks("cpu", 20.0, 0.5, "bf16", "measured 2026-12-02")
    dp.save_cached(peaks)
    assert dp.load_cached("cpu", "bf16") == peaks


# --------------------------------------------------------------------------- precedence


def test_resolve_published_when_nothing_cached(cache_dir):
    assert dp.resolve_peaks("NVIDIA H200", "bf16") == dp.match_published("NVIDIA H200", "bf16")
    assert dp.resolve_peaks("Unknown GPU", "bf16") is None


def test_resolve_prefers_cache_over_published(cache_dir):
    measured = Peaks("NVIDIA H200", 4300.0, 790.0, "bf16", "measured 2026-12-02")
    dp.save_cached(measured)
    assert dp.resolve_peaks("NVIDIA H200", "bf16") == measured
    # the other dtype is not cached: published
    assert dp.resolve_peaks("NVIDIA H200", "fp16").source == dp.SOURCE_PUBLISHED


def test_resolve_prefers_override_over_cache(cache_dir):
    dp.save_cached(Peaks("NVIDIA H200", 4300.0, 790.0, "bf16", "measured 2026-12-02"))
    both = dp.resolve_peaks("NVIDIA H200", "bf16", bandwidth_override=4000, tflops_override=700)
    assert both == Peaks("NVIDIA H200", 4000.0, 700.0, "bf16", "override")
    partial = dp.resolve_peaks("NVIDIA H200", "bf16", bandwidth_override=4000)
    assert (partial.bandwidth_GB_s, partial.tflops) == (4000.0, 790.0)
    assert partial.source == "override; measured 2026-12-02"


def test_resolve_partial_override_of_unknown_device(cache_dir):
    peaks = dp.resolve_peaks("Unknown GPU", "fp16", tflops_override=100.0)
    assert peaks.tflops == 100.0 and math.isnan(peaks.bandwidth_GB_s)
    assert peaks.source == "override"
    assert dp.roofline_columns(50.0, 25.0, peaks) == {"pct_peak_tflops": 25.0}


# --------------------------------------------------------------------------- measuring


def test_measure_peaks_on_cpu():
    pytest.importorskip("torch")
    peaks = dp.measure_peaks("cpu", "bf16", settings=TINY)
    assert peaks.device == "cpu" and peaks.dtype == "bfloat16"
    assert peaks.source.startswith("measured 20")
    for value in (peaks.bandwidth_GB_s, peaks.tflops):
        assert math.isfinite(value) and value > 0


def test_cli_measures_on_cpu_saves_and_writes_markdown(cache_dir, tmp_path, capsys):
    pytest.importorskip("torch")
    markdown = tmp_path / "out" / "peaks.md"
    argv = ["--device", "cpu", "--dtype", "bf16", "fp16", "--save", "--markdown", str(markdown)]
    argv += ["--copy-mib", "1", "--gemm-n", "32", "--reps", "2"]
    assert dp.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| cpu | bfloat16 |" in printed and "| cpu | float16 |" in printed
    assert "| device | dtype | copy GB/s" in markdown.read_text()
    assert dp.load_cached("cpu", "bf16") is not None
    assert dp.load_cached("cpu", "fp16") is not None


def test_cli_without_gpu_exits_2(capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    assert dp.main(["--device", "cuda"]) == 2
    assert "no GPU" in capsys.readouterr().err


def test_cli_rejects_bad_sizes(capsys):
    pytest.importorskip("torch")
    assert dp.main(["--device", "cpu", "--reps", "0"]) == 2
    assert "at least 1" in capsys.readouterr().err


def test_cli_published_only_needs_no_device(capsys):
    assert dp.main(["--published-only"]) == 0
    assert "UNCONFIRMED" in capsys.readouterr().out


def test_imports_and_matches_without_torch():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from fi_attn_bench.device import peaks as dp\n"
        "assert dp.match_published('NVIDIA H200', 'bf16').bandwidth_GB_s == 4800\n"
        "assert dp.main(['--device', 'cuda']) == 2\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "torch is not installed" in result.stderr


def test_measure_peaks_script_defaults():
    from benchmarks import measure_peaks

    assert measure_peaks.DEFAULT_ARGS[:3] == ("--dtype", "bf16", "fp16")
    assert "--save" in measure_peaks.DEFAULT_ARGS
