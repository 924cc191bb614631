"""``python -m validation PART``: the entry point, and the parts that run on the CPU as dry runs."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from validation import features, sharded
from validation.__main__ import PARTS

ROOT = Path(__file__).resolve().parent.parent
CPU_SWEEP = "--device cpu --backend torch --preset cpu --scripts bench_batch_decode"


def validation(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "validation", *args], cwd=ROOT, capture_output=True, text=True
    )


def test_help_lists_every_part_and_each_part_has_a_main():
    done = validation("--help")
    assert done.returncode == 0
    for name, part in PARTS.items():
        assert f"  {name} " in done.stdout
        assert callable(importlib.import_module(f"validation.{part.module}").main)


@pytest.mark.parametrize(("args", "message"), [((), "usage:"), (("bogus",), "error: unknown part")])
def test_no_part_or_an_unknown_one_exits_2_with_a_message(args, message):
    done = validation(*args)
    assert done.returncode == 2 and message in done.stderr


def test_a_part_names_itself_in_its_usage():
    done = validation("shard-report", "--help")
    assert done.returncode == 0 and done.stdout.startswith(
        "usage: python -m validation shard-report"
    )


def test_every_features_step_runs_a_known_part():
    assert {step.part_args[0] for step in features.STEPS} <= set(PARTS)


def test_sharded_part_compares_a_torchrun_sweep_with_one_process_on_the_cpu(tmp_path):
    done = validation("sharded", str(tmp_path), "--mode", "one", "--sweep-args", CPU_SWEEP)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "same cases" in done.stdout
    assert "--fail-on-regression 5: exit 0" in done.stdout
    assert (tmp_path / "one" / "regression.md").exists()
    assert len(list((tmp_path / "one" / "A").glob("*.shard0of1.csv"))) == 1


def test_utilization_keeps_each_gpus_highest_use_and_memory(tmp_path):
    samples = tmp_path / "gpu_use.csv"
    samples.write_text("0, 10 %, 500 MiB\n1, 90 %, 100 MiB\n0, 70 %, 300 MiB\nbroken line\n")
    assert sharded.utilization(samples) == ["  cuda:0  70 %  500 MiB", "  cuda:1  90 %  100 MiB"]


def test_serving_report_tables_the_imbalance_and_gates_the_pair(tmp_path):
    for side in "ab":
        (tmp_path / side).mkdir()
        shutil.copy(ROOT / "tests/fixtures/real_csv/h100_paged_serving.csv", tmp_path / side)
    done = validation("serving", str(tmp_path), "--steps", "report")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "A/A gate (5 %): exit 0" in done.stdout
    assert (tmp_path / "imbalance.md").read_text().count("\n| paged prefill |") >= 1
    assert (tmp_path / "aa.json").exists() and (tmp_path / "summary.md").exists()


def test_serving_refuses_an_unknown_step(tmp_path):
    done = validation("serving", str(tmp_path), "--steps", "a,warp")
    assert done.returncode == 2 and "unknown --steps warp" in done.stderr


def test_full_preset_predicts_and_measures_a_cpu_dry_run(tmp_path):
    sweep = "--device cpu --backend torch --preset cpu"
    done = validation("full-preset", str(tmp_path), "--sweep-args", sweep)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "predicted: " in done.stdout and "measured:  bench_all.py exit 0" in done.stdout
    assert len(list(tmp_path.glob("*.csv"))) == 4


def test_integrity_report_lists_each_flagged_row_and_the_cost_of_the_checks():
    from validation.integrity import Sweep, report

    honest = {"api": "decode", "case": "a", "status": "ok", "integrity": "pass"}
    flagged = {"api": "decode", "case": "b", "status": "failed", "integrity": "timeline"}
    off = {"api": "decode", "case": "a", "status": "ok", "integrity": "off"}
    sweeps = [
        Sweep("float16 default, checks on #0", 0, 30.0, 22.0, (honest, flagged)),
        Sweep("float16 default, checks off #1", 0, 28.0, 20.0, (off, off), checks=False),
        Sweep("float16 x.py --impl torch", 0, 9.0, 5.0, (honest,), default_preset=False),
    ]
    text = report(sweeps, exploits_exit=0)
    assert "## Flagged rows: 1" in text and "case b" not in text and "b integrity=timeline" in text
    assert "+10.0%" in text  # 22 s on against 20 s off
    assert "| float16 default, checks off #1 | 0 | 2 | 2 | 0 | 0 |" in text  # "off" isn't a flag


def test_integrity_part_refuses_a_folder_that_holds_results(tmp_path):
    (tmp_path / "old.csv").write_text("kept\n")
    done = validation("integrity", str(tmp_path))
    assert done.returncode == 2 and "nothing is overwritten" in done.stderr
    assert (tmp_path / "old.csv").read_text() == "kept\n"


def test_history_series_runs_fresh_sweeps_that_become_a_real_history(tmp_path):
    from benchmarks.history_sources import real_runs, save_real_history

    sweep = CPU_SWEEP + " --filter batch_size=1 --min-time-ms 10"
    done = validation("history-series", str(tmp_path), "--runs", "3", "--sweep-args", sweep)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count(": exit 0,") == 3
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == 3 and all(len(list(run.glob("*.csv"))) == 1 for run in runs)
    fixture = tmp_path / "runs.csv.gz"
    assert save_real_history(tmp_path / "runs", fixture).endswith("3 runs x 2 cases")
    real = real_runs(fixture)
    assert real.time_ms.shape == (3, 2) and real.decode.all()
    gated = validation("history-series", str(tmp_path), "--gate", "5")
    assert gated.returncode == 0, gated.stdout + gated.stderr
    table = (tmp_path / "gate.md").read_text()
    assert "A/A pairs: 2 " in table and "| alone |" in table and "| --noise-from |" in table


def write_history_runs(folder: Path, factors: list[float]) -> None:
    """One run folder per factor: the real H100 decode rows with times scaled by it."""
    import pandas as pd

    real = pd.read_csv(ROOT / "tests/fixtures/real_csv/h100_decode_default.csv", dtype=str)
    for index, factor in enumerate(factors):
        frame = real.fillna("")
        frame["time_ms"] = [repr(float(t) * factor) for t in real["time_ms"]]
        frame["timestamp_utc"] = f"2026-01-01T00:{index:02d}:00Z"
        frame["notes"] = f"energy: run {index}"  # real runs differ beside their times
        run = folder / "runs" / f"run{index:02d}"
        run.mkdir(parents=True)
        frame.to_csv(run / "decode.csv", index=False)


def test_history_series_gate_compares_medians_of_runs(tmp_path):
    # Baselines: medians of [1, 1.3] [1.3, 1] [1, 1]; candidates: 1, 1, 1.3: the third fails.
    write_history_runs(tmp_path, [1.0, 1.3, 1.0, 1.0, 1.3])
    gate = ("--gate", "15", "--baseline-runs", "2", "--candidate-runs", "1")
    done = validation("history-series", str(tmp_path), *gate)
    assert done.returncode == 0, done.stdout + done.stderr
    table = (tmp_path / "gate-2x1.md").read_text()
    assert "A/A pairs: 3 (baseline the median of 2 runs, candidate a run after it, " in table
    assert "| alone | 1 | 27 |" in table


def test_history_series_gate_stops_at_a_pair_the_summarizer_refuses(tmp_path):
    write_history_runs(tmp_path, [1.0, 1.0, 1.0])
    broken = tmp_path / "runs" / "run01" / "decode.csv"
    broken.write_text(broken.read_text().replace(",float16,", ",bfloat16,"))
    done = validation("history-series", str(tmp_path), "--gate", "5")
    assert done.returncode == 1
    assert done.stdout.startswith("--gate: ") and ": exit 2: " in done.stdout
    assert not (tmp_path / "gate.md").exists()


def test_history_series_alternates_sweeps_and_tables_their_noise(tmp_path):
    sweep = CPU_SWEEP + " --filter batch_size=1"
    sweeps = (
        "--sweep-args",
        sweep + " --min-time-ms 5",
        "--sweep-args",
        sweep + " --min-time-ms 20",
    )
    done = validation("history-series", str(tmp_path), "--runs", "3", *sweeps)
    assert done.returncode == 0, done.stdout + done.stderr
    for folder in ("runs-1", "runs-2"):
        runs = sorted((tmp_path / folder).iterdir())
        assert len(runs) == 3 and all(len(list(run.glob("*.csv"))) == 1 for run in runs)
    order = [line.split()[0] for line in done.stdout.splitlines() if ": exit 0," in line]
    assert order == ["runs-1", "runs-2"] * 3  # interleaved, run after run
    noise = validation("history-series", str(tmp_path), "--noise")
    assert noise.returncode == 0, noise.stdout + noise.stderr
    table = (tmp_path / "noise.md").read_text()
    assert "| case | ms | runs-1 (3 runs) | runs-2 (3 runs) |" in table
    rows = [line for line in table.splitlines() if line.startswith("| BatchDecode")]
    assert rows and all(line.count("(") == 3 for line in rows)  # a noise and a slow count each
    assert "| median over cases | |" in table


def test_history_series_noise_without_runs_is_one_line_and_exit_2(tmp_path):
    done = validation("history-series", str(tmp_path), "--noise")
    assert done.returncode == 2 and done.stdout == f"--noise: no runs folder in {tmp_path}\n"


@pytest.mark.parametrize("table", [("--noise",), ("--gate", "5")])
def test_history_series_tables_refuse_a_run_that_is_not_one_in_one_line(tmp_path, table):
    """The last run: --gate reads it into the first pair's noise store before comparing."""
    write_history_runs(tmp_path, [1.0, 1.0, 1.0])
    (tmp_path / "runs" / "run02" / "decode.csv").write_text("hello,world\n1,2\n")
    done = validation("history-series", str(tmp_path), *table)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        done.stdout.startswith(f"{table[0]}: fi-attn-history add: ")
        and "not a benchmark run" in done.stdout
    )
    assert len(done.stdout.splitlines()) == 1 and "Traceback" not in done.stderr


def test_history_series_stops_at_sweep_options_the_scripts_refuse(tmp_path):
    done = validation("history-series", str(tmp_path), "--runs", "3", "--sweep-args=--bogus")
    assert done.returncode == 2
    assert done.stdout.count("exit 2") == 1


def test_history_series_gate_without_runs_is_one_line_and_exit_2(tmp_path):
    done = validation("history-series", str(tmp_path / "none"), "--gate", "5")
    assert done.returncode == 2 and done.stdout.startswith("--gate: fewer than 3 runs in ")
    assert "Traceback" not in done.stderr


def test_integrity_report_gives_the_default_and_judge_cost_and_passes_the_weaker_set():
    from validation.integrity import Sweep, cost_line, report

    weak = {"api": "decode", "case": "a", "status": "ok", "integrity": "pass_weak"}
    off = {"api": "decode", "case": "a", "status": "ok", "integrity": "off"}
    sweeps = [
        Sweep("on #0", 0, 30.0, 22.0, (weak,)),
        Sweep("off #1", 0, 28.0, 20.0, (off,), checks=False),
        Sweep("judge #2", 0, 30.0, 25.0, (weak,), judge=True),
    ]
    line = cost_line(sweeps)
    assert "default checks 22.0 s: +9.1% of sweep wall" in line  # (22 - 20) / 22
    assert "--judge 25.0 s: +20.0% of sweep wall" in line  # (25 - 20) / 25
    assert "## Flagged rows: 0" in report(sweeps, exploits_exit=None)
