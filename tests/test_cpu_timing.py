"""CPU timing honesty: a CPU run pins its torch threads and records
them, a row whose noise is still above the target when its budget ran out says so in
``notes``, and one sample's noise is unknown (empty), not 0."""

from __future__ import annotations

import dataclasses
import json
import math

import fake_bench_script
import torch
from test_bench_common import read_rows, run_main

import bench_batch_decode
from fi_attn_bench.backends.choice import Probe
from fi_attn_bench.results.schema import result_record
from fi_attn_bench.sweep.case import row_notes
from fi_attn_bench.sweep.run_options import DEFAULT_CPU_THREADS
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.statistics import Measurement

FAST = ["--max-time-per-case", "0.05", "--min-samples", "3", "--preset", "smoke"]
GPU = Probe(cuda_available=lambda: True, import_flashinfer=lambda: None)


def _recording_threads(seen: list[int]):
    def prepare(case, settings, inputs=None):
        seen.append(torch.get_num_threads())
        return fake_bench_script.prepare(case, settings, inputs)

    return dataclasses.replace(fake_bench_script.SPEC, prepare=prepare)


def test_a_cpu_run_pins_and_records_its_threads_then_restores_them(tmp_path):
    before = torch.get_num_threads()
    for given, expected in (([], DEFAULT_CPU_THREADS), (["--threads", "2"], 2)):
        seen: list[int] = []
        out = tmp_path / f"t{expected}.csv"
        argv = [*FAST, *given, "--output", str(out)]
        assert run_main(argv, spec=_recording_threads(seen)) == 0
        assert set(seen) == {expected}
        rows = read_rows(out)
        assert {row["cpu_threads"] for row in rows} == {str(expected)}
        assert ("--threads 2" in rows[0]["repro"]) == (expected == 2)
        assert torch.get_num_threads() == before


def test_threads_on_a_gpu_run_is_refused(capsys):
    argv = [*FAST, "--backend", "torch", "--device", "cuda", "--threads", "2"]
    assert run_main(argv, probe=GPU) == 2
    err = capsys.readouterr().err
    assert "error: --threads sets the threads of a CPU run; this run is on cuda" in err


def test_one_sample_has_unknown_noise_not_zero():
    one = Measurement(samples=(0.5,), timer="wall", l2="warm")
    assert math.isnan(one.noise_pct)
    row = result_record("A", {"b": 1}, metrics=(0.5, 1.0, 1.0), columns=one.columns())
    assert row["noise_pct"] == "" and row["samples"] == 1
    assert row_notes(one, TimingOptions()) == ["noisy: 1 sample, noise unknown (target 1%)"]
    two = Measurement(samples=(0.5, 0.5), timer="wall", l2="warm")
    assert two.noise_pct == 0.0 and row_notes(two, TimingOptions()) == []


def _decode_on_the_cpu(path, *extra: str) -> list[dict[str, str]]:
    argv = ["--device", "cpu", "--filter", "batch_size=1", "--output", str(path), *extra]
    assert bench_batch_decode.main([*argv, "--max-time-per-case", "0.05"]) == 0
    return read_rows(path)


def test_cpu_rows_over_the_noise_target_are_marked_noisy(tmp_path):
    """An unreachable target: every row ends on its budget and says how noisy it was; a
    target every row meets: no note."""
    rows = _decode_on_the_cpu(tmp_path / "tight.csv", "--noise-target", "1e-9")
    assert rows and all(row["status"] == "ok" for row in rows)
    for row in rows:
        noisy = [item for item in row["notes"].split("; ") if item.startswith("noisy: ")]
        assert len(noisy) == 1, row["notes"]
        assert noisy[0].startswith("noisy: noise ") and noisy[0].endswith(
            "> target 1e-09% (median_ci)"
        )
    loose = _decode_on_the_cpu(tmp_path / "loose.csv", "--noise-target", "1e9")
    assert loose and not any("noisy" in row["notes"] for row in loose)


def test_the_summary_lists_the_noisy_rows_and_its_verdict_line_counts_them(tmp_path, capsys):
    from fi_attn_bench.summarizer.command_line import main as summarize

    tight = tmp_path / "tight.csv"
    rows = _decode_on_the_cpu(tight, "--noise-target", "1e-9")
    quiet = _decode_on_the_cpu(tmp_path / "loose.csv", "--noise-target", "1e9")
    capsys.readouterr()
    report, as_json = tmp_path / "s.md", tmp_path / "s.json"
    argv = [str(tight), "--output", str(report), "--json", str(as_json)]
    assert summarize(argv) == 0
    verdict = capsys.readouterr().out.splitlines()[0]
    assert verdict.startswith("Verdict: PASS") and verdict.endswith(
        f"; {len(rows)} row{'s' * (len(rows) != 1)} noisy (see the report)"
    )
    text = report.read_text()
    assert f"- Noisy rows: {len(rows)} (noise above the target" in text
    assert "## Noisy Rows" in text and text.count("noisy: noise ") == len(rows)
    assert [entry["note"] for entry in json.loads(as_json.read_text())["noisy"]] == [
        row["notes"] for row in rows
    ]
    assert summarize([str(tmp_path / "loose.csv"), "--output", str(report)]) == 0
    assert "noisy" not in capsys.readouterr().out and "Noisy" not in report.read_text()
    assert quiet
