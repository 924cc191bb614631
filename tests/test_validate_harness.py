"""validation.harness's report, on the CPU: the GPU parts (JIT warm-up, sweeps,
fidelity readings) are replaced by recorded H200 sweeps and made-up readings, so a report bug
is found here rather than after minutes of device time."""

from __future__ import annotations

import ast
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from validation import harness as vh

ROOT = Path(__file__).resolve().parent.parent

# Two H200 default sweeps (commit 9ace158), three rows per script, trimmed from the archive
# that commits up to 2cb946f hold under benchmarks/results/h200_validation_v6/call4_9ace158.
RECORDED = ROOT / "tests" / "fixtures" / "validation"


def recorded_sweeps(scripts, index, out_dir):
    folder = out_dir / f"sweep{index}"
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    for script in scripts:
        csv_path = folder / f"{Path(script).stem}.csv"
        shutil.copy(RECORDED / f"sweep{index}" / csv_path.name, csv_path)
        runs.append(vh.SweepRun(script, index, csv_path, 15.0, 0, 4.0, "timing 5 s", 6.0, 0))
    return runs


def fake_fidelity(script, rows, rounds=1):
    return [
        vh.FidelityCase("batch_size=1", 0.1, 0.1, 0.1),
        vh.FidelityCase("batch_size=2", 0.104, 0.1, 0.1),  # +4 %: outside ±3 %
        vh.FidelityCase("batch_size=3", float("nan"), float("nan"), float("nan"), "OOM"),
    ]


def validation_report(tmp_path, monkeypatch, *options):
    monkeypatch.setattr(vh, "run_sweep", recorded_sweeps)
    monkeypatch.setattr(vh, "header_lines", lambda argv: ["# Harness validation", ""])
    monkeypatch.setattr(vh, "fidelity", fake_fidelity)
    monkeypatch.setattr(vh, "warm_jit", lambda out, scripts: pytest.fail("JIT warm-up ran"))
    argv = ["--sweeps", "2", "--out", str(tmp_path / "out"), "--skip-jit-warm-up"]
    argv += ["--fidelity-scripts", "bench_batch_decode.py", *options]
    assert vh.main(argv) == 0
    return (tmp_path / "out" / "validation.md").read_text(encoding="utf-8")


@pytest.fixture
def report(tmp_path, monkeypatch):
    return validation_report(tmp_path, monkeypatch)


def test_report_gates_the_recorded_sweeps_and_counts_the_cases_within_3_pct(report):
    assert "| 0 vs 1 | 0 | **Verdict: PASS** — 12 matched cases, none failing |" in report
    assert "- pairs: 1; exit 0: 1" in report
    assert "## Repeatability over 2 invocations" in report
    assert "- cases: 2; within ±3%: 1; max |diff|: 4.00%" in report
    assert "| fidelity (cases >= 20 us) | 1 of 2 within ±3 %, max 4.00 % |" in report
    assert "| pairs passing the 5 % gate | 1 of 1 |" in report


def test_cost_table_adds_the_scripts_of_a_sweep(report):
    # four scripts x (15 s wall, 4 s timed): 60 s wall, 16 s GPU, 3.75x
    assert "| 0 | 60.0 | 16.0 | 3.75 |" in report
    assert "| sweep wall time | 60.0-60.0 s (2 sweeps) |" in report
    assert "| wall / GPU time in timed calls | 3.75-3.75x |" in report


def test_repeatability_of_the_recorded_sweeps_counts_cases_of_50_us_or_more(report):
    # 8 of the 12 fixture cases average >= 50 us; the largest CV is MLA's 0.2796 / 0.2775 ms
    # (0.53 %); paged prefill's 11 us case moved 4.2 % and is left out
    assert "- cases: 8; CV <= 1%: 8; max CV: 0.53%" in report
    assert "| repeatability (cases >= 50 us) | 8 of 8 at CV <= 1 %, max 0.53 % |" in report


def test_report_table_has_a_cell_for_every_column_in_every_row(report):
    fidelity = report[report.index("## Fidelity") :].splitlines()
    header = next(line for line in fidelity if "| harness ms |" in line)
    table = [line for line in fidelity if line.startswith("| bench_batch_decode.py")]
    assert len(table) == 3
    assert {line.count("|") for line in table} == {header.count("|")}
    assert "error: OOM" in table[2]


def test_skip_fidelity_leaves_the_section_out(tmp_path, monkeypatch):
    text = validation_report(tmp_path, monkeypatch, "--skip-fidelity")
    assert "## Fidelity" not in text and "fidelity (cases" not in text
    assert "## False alarms" in text


def test_interleaved_takes_a_b_b_a_per_round_and_reports_medians():
    order = []

    def reader(name, values):
        readings = iter(values)

        def read():
            order.append(name)
            return next(readings)

        return read

    reference = reader("ref", [1.0, 3.0, 1.1, 1.2])  # one odd reading
    harness = reader("harness", [1.0, 1.1, 1.2, 1.3])
    found = vh.interleaved(reference, harness, rounds=2)
    assert order == ["ref", "harness", "harness", "ref"] * 2
    assert found == (pytest.approx(1.15), pytest.approx(1.15))


def test_one_round_of_interleaved_is_the_mean_of_each_pair():
    found = vh.interleaved(iter([1.0, 2.0]).__next__, iter([4.0, 6.0]).__next__)
    assert found == (1.5, 5.0)


def test_queue_share_takes_the_flushes_and_any_pause_off_the_queue():
    clock = [0.0]

    def advance(ms):
        return lambda: clock.__setitem__(0, clock[0] + ms)

    class Event:
        def __init__(self, enable_timing):
            self.at = None

        def record(self):
            self.at = clock[0]

        def elapsed_time(self, other):
            return other.at - self.at

    fake_torch = SimpleNamespace(cuda=SimpleNamespace(Event=Event, synchronize=lambda: None))
    run, flush, pause = advance(3.0), advance(1.0), advance(5.0)
    assert vh.queue_share_ms(fake_torch, run, flush, calls=4, reps=3) == 3.0
    assert vh.queue_share_ms(fake_torch, run, flush, calls=4, reps=3, pause=pause) == 3.0


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--fidelity-rounds", "0"], "--fidelity-rounds must be 1 or more"),
        (["--sweeps", "-1"], "--sweeps must be 0 or more"),
    ],
)
def test_bad_counts_are_a_usage_error(tmp_path, capsys, option, message):
    with pytest.raises(SystemExit) as stopped:
        vh.main(["--out", str(tmp_path / "out"), *option])
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # before any GPU work or file


def _repeat(cv, noise, drift=float("nan")):
    return vh.Repeat("s.py", f"case cv={cv}", 0.2, cv, noise, drift)


def test_flag_lines_say_whether_a_per_run_flag_singles_out_the_moving_cases():
    stats = [_repeat(2.76, 10.5, 6.8), _repeat(0.2, 5.5, 1.0), _repeat(0.77, 2.3, 1.9)]
    noise = vh.flag_lines(stats, "noise_pct", 5.0, lambda s: s.max_noise_pct)
    assert noise == [
        "- noise_pct > 5% in any invocation: 2 cases, CV 0.20-2.76%; never: 1 cases, CV 0.77-0.77%"
    ]
    drift = vh.flag_lines(stats, "drift_pct", 3.0, lambda s: s.max_drift_pct)
    assert drift[0].endswith("1 cases, CV 2.76-2.76%; never: 2 cases, CV 0.20-0.77%")
    # CSVs of a harness that did not record drift_pct: no line rather than a made-up one
    assert vh.flag_lines([_repeat(1.0, 2.0)], "drift_pct", 3.0, lambda s: s.max_drift_pct) == []


def test_repeatability_reads_cv_and_the_largest_spread_and_drift(tmp_path):
    header = "schema_version,api,batch_size,status,time_ms,noise_pct,drift_pct\n"
    runs = []
    for index, (time_ms, noise, drift) in enumerate([(0.2, 1.0, ""), (0.21, 6.0, "2.5")]):
        path = tmp_path / f"{index}.csv"
        path.write_text(header + f"1,A,8,ok,{time_ms},{noise},{drift}\n1,A,1,ok,0.01,1,1\n")
        runs.append(vh.SweepRun("s.py", index, path, 1.0, 0, 0.5, "", 0.5))
    (case,) = vh.repeatability({"s.py": runs})  # the 10 us case is below 50 us
    assert case.case == "batch_size=8" and case.mean_ms == pytest.approx(0.205)
    assert case.cv_pct == pytest.approx(0.007071 / 0.205 * 100, rel=1e-3)
    assert (case.max_noise_pct, case.max_drift_pct) == (6.0, 2.5)


def test_the_script_imports_no_private_harness_name():
    """Public API only: the faces, the scripts' SPEC, fi_attn_bench.timing's public names."""
    tree = ast.parse((ROOT / "validation" / "harness.py").read_text(encoding="utf-8"))
    allowed = {
        "benchmark_result": None,
        "bench_common": None,
        "fi_attn_bench.timing": {"TimingOptions", "measure", "make_timer", "L2Flusher"},
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] in {"fi_attn_bench", "benchmark_result", "bench_common"}:
                assert node.module in allowed, node.module
                names = {alias.name for alias in node.names}
                assert allowed[node.module] is None or names <= allowed[node.module]
                assert not any(name.startswith("_") for name in names)
        if isinstance(node, ast.Import):
            assert not any(alias.name.startswith("fi_attn_bench") for alias in node.names)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            assert node.value.id not in {"bt", "timers", "tloop", "trace"}, node.attr


def test_timing_public_names_load_without_importing_torch_first():
    import subprocess

    code = (
        "import sys, fi_attn_bench.timing as t; assert 'torch' not in sys.modules; "
        "print(sorted(t.__all__))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "['L2Flusher', 'TimingOptions', 'make_timer', 'measure']"
