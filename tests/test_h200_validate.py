"""benchmarks/h200_validate.py's report, on the CPU: the GPU parts (sweeps, references) are
replaced by recorded H200 sweeps and made-up fidelity readings, so a report bug is found here
rather than after minutes of device time."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import h200_validate as hv  # noqa: E402

RECORDED = ROOT / "benchmarks" / "results" / "h200_validation_v6" / "call4_9ace158"


def recorded_sweeps(scripts, index, out_dir, extra):
    folder = out_dir / f"sweep{index}"
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    for script in scripts:
        csv_path = folder / f"{Path(script).stem}.csv"
        shutil.copy(RECORDED / f"sweep{index}" / csv_path.name, csv_path)
        runs.append(hv.SweepRun(script, index, csv_path, 15.0, 0, 4.0, "timing 5 s", 6.0, 0))
    return runs


def fake_fidelity(script, l2, rows, rounds=1, main_only=False):
    others = {} if main_only else {"per-call events (v5)": 0.104, "paired events": 0.1}
    return [
        hv.FidelityCase("batch_size=1", 0.1, 0.1, 0.1, "", others),
        hv.FidelityCase("batch_size=2", 0.1, 0.1, 0.1, "", {**others, "paired events": 0.2}),
        hv.FidelityCase("batch_size=3", float("nan"), float("nan"), float("nan"), "OOM"),
    ]


def validation_report(tmp_path, monkeypatch, *options):
    monkeypatch.setattr(hv, "run_sweep_in_one_process", recorded_sweeps)
    monkeypatch.setattr(hv, "_header_from_gpu", lambda args: ["# Harness validation", ""])
    monkeypatch.setattr(hv, "fidelity", fake_fidelity)
    path = tmp_path / "report.md"
    argv = ["--sweeps", "2", "--one-process", "--out", str(tmp_path / "out")]
    argv += ["--report", str(path), "--fidelity-scripts", "bench_batch_decode.py", *options]
    assert hv.main(argv) == 0
    return path.read_text(encoding="utf-8")


@pytest.fixture
def report(tmp_path, monkeypatch):
    return validation_report(tmp_path, monkeypatch)


def test_main_reference_only_drops_the_other_columns(tmp_path, monkeypatch):
    text = validation_report(tmp_path, monkeypatch, "--main-reference-only")
    fidelity = text[text.index("## Fidelity") :].splitlines()
    header = next(line for line in fidelity if "| harness ms |" in line)
    table = [line for line in fidelity if line.startswith("| bench_batch_decode.py")]
    assert "diff % vs" not in header and "- against" not in text
    assert "compare the harness with the other references" not in text
    assert {line.count("|") for line in table} == {header.count("|")}
    assert hv.other_references("cold", main_only=True) == {}
    assert set(hv.other_references("cold")) == set(hv.COLD_REFERENCES)


def test_report_gates_the_recorded_sweeps_and_counts_each_reference(report):
    assert "compare the harness with the other references" in report
    assert "| 0 vs 1 | 0 | **Verdict: PASS** — 93 matched cases, none failing |" in report
    assert "## Repeatability over 2 invocations" in report
    assert "- cases: 2; within ±3%: 2; max |diff|: 0.00%" in report
    # 0.1 vs 0.104: -3.85 %, outside; 0.1 vs 0.1 and 0.2: inside once, -50 % once
    assert "- against per-call events (v5): within ±3%: 0 of 2; max |diff|: 3.85%" in report
    assert "- against paired events: within ±3%: 1 of 2; max |diff|: 50.00%" in report


def test_report_table_has_a_cell_for_every_column_in_every_row(report):
    fidelity = report[report.index("## Fidelity") :].splitlines()
    header = next(line for line in fidelity if "| harness ms |" in line)
    table = [line for line in fidelity if line.startswith("| bench_batch_decode.py")]
    assert "| diff % vs paired events |" in header
    assert len(table) == 3
    assert {line.count("|") for line in table} == {header.count("|")}
    assert "error: OOM" in table[2]


def test_interleaved_takes_a_b_b_a_per_round_and_reports_medians():
    order = []

    def reader(name, values):
        readings = iter(values)

        def read():
            order.append(name)
            return next(readings)

        return read

    reference = reader("ref", [1.0, 3.0, 1.1, 1.2])  # one odd reading
    other = reader("other", [2.0, 2.2, 2.1, 2.3])
    harness = reader("harness", [1.0, 1.1, 1.2, 1.3])
    found = hv.interleaved(reference, {"other": other}, harness, rounds=2)
    assert order == ["ref", "other", "harness", "harness", "other", "ref"] * 2
    assert found == (pytest.approx(1.15), {"other": pytest.approx(2.15)}, pytest.approx(1.15))


def test_one_round_of_interleaved_is_the_mean_of_each_pair():
    found = hv.interleaved(iter([1.0, 2.0]).__next__, {}, iter([4.0, 6.0]).__next__)
    assert found == (1.5, {}, 5.0)


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
    assert hv.queue_share_ms(fake_torch, run, flush, calls=4, reps=3) == 3.0
    assert hv.queue_share_ms(fake_torch, run, flush, calls=4, reps=3, pause=pause) == 3.0


def test_fidelity_rounds_below_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as stopped:
        hv.main(["--fidelity-rounds", "0"])
    assert stopped.value.code == 2
    assert "--fidelity-rounds must be 1 or more" in capsys.readouterr().err


def _repeat(cv, noise, drift=float("nan")):
    return hv.Repeat("s.py", f"case cv={cv}", 0.2, cv, noise, drift)


def test_flag_lines_say_whether_a_per_run_flag_singles_out_the_moving_cases():
    stats = [_repeat(2.76, 10.5, 6.8), _repeat(0.2, 5.5, 1.0), _repeat(0.77, 2.3, 1.9)]
    noise = hv.flag_lines(stats, "noise_pct", 5.0, lambda s: s.max_noise_pct)
    assert noise == [
        "- noise_pct > 5% in any invocation: 2 cases, CV 0.20-2.76%; never: 1 cases, CV 0.77-0.77%"
    ]
    drift = hv.flag_lines(stats, "drift_pct", 3.0, lambda s: s.max_drift_pct)
    assert drift[0].endswith("1 cases, CV 2.76-2.76%; never: 2 cases, CV 0.20-0.77%")
    # CSVs of a harness that did not record drift_pct: no line rather than a made-up one
    assert hv.flag_lines([_repeat(1.0, 2.0)], "drift_pct", 3.0, lambda s: s.max_drift_pct) == []


def test_repeatability_reads_cv_and_the_largest_spread_and_drift(tmp_path):
    header = "schema_version,api,batch_size,status,time_ms,noise_pct,drift_pct\n"
    runs = []
    for index, (time_ms, noise, drift) in enumerate([(0.2, 1.0, ""), (0.21, 6.0, "2.5")]):
        path = tmp_path / f"{index}.csv"
        path.write_text(header + f"1,A,8,ok,{time_ms},{noise},{drift}\n1,A,1,ok,0.01,1,1\n")
        runs.append(hv.SweepRun("s.py", index, path, 1.0, 0, 0.5, "", 0.5))
    (case,) = hv.repeatability({"s.py": runs})  # the 10 us case is below 50 us
    assert case.case == "batch_size=8" and case.mean_ms == pytest.approx(0.205)
    assert case.cv_pct == pytest.approx(0.007071 / 0.205 * 100, rel=1e-3)
    assert (case.max_noise_pct, case.max_drift_pct) == (6.0, 2.5)
