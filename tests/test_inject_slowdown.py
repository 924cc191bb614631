"""validation.gate_sensitivity on the CPU: the spin injection, the case selection and the
gate's reading; the sweeps themselves need a GPU."""

from __future__ import annotations

import shutil
from pathlib import Path

import fake_bench_script
import pytest
import torch

from fi_attn_bench.cases.inputs import prepare_case
from fi_attn_bench.cases.spec import Settings
from validation import gate_sensitivity as inj

ROOT = Path(__file__).resolve().parent.parent

SWEEPS = ROOT / "tests/fixtures/validation"  # two H200 sweeps of the same code, 3 rows a script


def test_spin_lasts_the_asked_share_of_the_baseline_call():
    assert inj.spin_cycles(5.0, 0.2, 1_980_000) == 19_800  # 5 % of 0.2 ms at 1.98 GHz
    assert inj.spin_cycles(3.0, 0.0, 1e6) == 1  # never a zero-cycle spin


def test_slowed_spec_spins_after_each_run_and_keeps_only_the_long_cases(monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0")
    spec = fake_bench_script.SPEC
    chosen = {
        inj.case_key(case, spec.case_fields): 100 * i
        for i, case in enumerate(spec.presets["default"][:3], 1)
    }
    spins = []
    slowed = inj.slowed_spec(spec, chosen, spins.append)
    assert [inj.case_key(c, spec.case_fields) for c in slowed.presets["default"]] == list(chosen)
    settings = Settings(torch.device("cpu"), torch.float32, 16, "torch", 0)
    prepared = prepare_case(slowed, slowed.presets["default"][1], settings)
    prepared.run()
    prepared.run()
    assert spins == [200, 200]
    zero = inj.slowed_spec(spec, dict.fromkeys(chosen, 0), spins.append)
    prepare_case(zero, zero.presets["default"][0], settings).run()
    assert spins == [200, 200]  # the A/A partner runs the same wrapper without a spin


def test_long_cases_keep_ok_rows_of_50_us_and_more():
    fields = ("batch_size", "seq_len")
    rows = [
        {"batch_size": "1", "seq_len": "8", "status": "ok", "time_ms": "0.049"},
        {"batch_size": "2", "seq_len": "8", "status": "ok", "time_ms": "0.050"},
        {"batch_size": "3", "seq_len": "8", "status": "failed", "time_ms": ""},
    ]
    assert inj.long_cases(rows, fields) == {(2, 8): 0.05}


def test_detection_counts_changes_above_the_target_that_were_not_flagged():
    rows = [
        inj.GateRow("Decode", "a", 0.2, 7.5, True),
        inj.GateRow("Decode", "b", 0.3, 6.5, False),
        inj.GateRow("MLA", "c", 1.0, 4.0, False),
    ]
    found = inj.detection("A vs p8", rows)
    assert (found.cases, found.flagged, found.above_target) == (3, 1, 2)
    assert found.missed == ("Decode b (+6.5%)",)
    assert found.median_change_pct == pytest.approx(6.5)
    assert "| A vs p8 | 3 | +6.50 | 1 | 2 | 1 | Decode b (+6.5%) |" in inj.table([found], 5)


def test_gate_runs_the_summarizer_and_reads_its_json(tmp_path):
    for label, sweep in (("A", "sweep0"), ("A2", "sweep1")):
        (tmp_path / label).mkdir()
        for name in ("bench_batch_decode.csv", "bench_batch_mla.csv"):
            shutil.copy(SWEEPS / sweep / name, tmp_path / label / name)
    rows = inj.run_gate(tmp_path, "A2", 5.0)
    assert len(rows) == 6  # every matched case of the two scripts
    assert (tmp_path / "gate_A_A2.md").exists()
    assert all(abs(row.change_pct) < 50 for row in rows)
    flagged = [row for row in rows if row.flagged]
    assert all(row.change_pct > 5.0 for row in flagged)


def test_throttle_effect_reads_the_verbose_notes_and_tabulates(tmp_path, monkeypatch, capsys):
    from test_bench_common import FakeTimer, run_main
    from test_telemetry import ScriptedTelemetry

    from fi_attn_bench.sweep import run as sweep_run
    from validation import throttle_policy as te

    monkeypatch.setattr(
        sweep_run, "open_telemetry", lambda device: ScriptedTelemetry([2000, 2000, 1000] * 50)
    )
    out = tmp_path / "r.csv"
    argv = ["--output", str(out), "--preset", "smoke", "--throttle-policy", "discard"]
    assert run_main([*argv, "--verbose", "--min-samples", "30"], timer=FakeTimer()) == 0
    log = capsys.readouterr().out
    notes = te.notes_by_case(log)
    assert set(notes) == {"batch_size=1,seq_len=8", "batch_size=2,seq_len=8"}
    assert all(count and count > 0 and not every for count, every in notes.values())
    rows = list(__import__("csv").DictReader(open(out)))
    found = te.observations("fake", "discard", rows, ("batch_size", "seq_len"), log)
    found += te.observations("fake", "discard", rows, ("batch_size", "seq_len"), log)
    text = te.table(found)
    assert "| fake batch_size=1,seq_len=8 | discard | 2 | 1.0000 | 0.00 |" in text
    assert te.notes_by_case(
        "[1/1] a=1: 1 ms\n  note: every batch ran below 1500 MHz (x); all 40 samples kept"
    ) == {"a=1": (0, True)}


def test_the_whole_run_on_the_cpu_with_a_sleeping_spin(tmp_path, capsys):
    import dataclasses
    import time

    fields = ("batch_size", "seq_len", "num_qo_heads", "num_kv_heads", "head_dim")  # a real layout
    cases = tuple(dict(zip(fields, (b, 8, 4, 1, 8), strict=True)) for b in (1, 2, 3))
    spec = dataclasses.replace(
        fake_bench_script.SPEC, case_fields=fields, presets={"default": cases}
    )
    plans = {"fake": (spec, "batch_size<=2")}
    spins = []

    def spinner():
        def spin(cycles):
            spins.append(cycles)
            time.sleep(cycles / 1e6 / 1e3)  # 1e6 "cycles" per ms

        return inj.Spinner(spin, 1e6)

    assert inj.main([str(tmp_path)], plans=plans, make_spinner=spinner) == 0
    for label in ("A_all", "A", "p3", "p5", "p8", "A2"):
        assert (tmp_path / label / "fake.csv").exists(), label
    assert len(inj.read_rows(tmp_path / "A" / "fake.csv")) == 2  # both cases take ~5 ms
    baseline = {
        r["batch_size"]: float(r["time_ms"]) for r in inj.read_rows(tmp_path / "A" / "fake.csv")
    }
    assert max(spins) == inj.spin_cycles(8.0, max(baseline.values()), 1e6)
    out = capsys.readouterr().out
    assert "| A vs p8 | 2 |" in out and "A/A false alarms:" in out
    first = (tmp_path / "inject_slowdown.md").read_text()
    assert first.startswith("Gate: summarize_results.py")
    assert inj.main([str(tmp_path), "--gate-only"], plans=plans, make_spinner=spinner) == 0

    # Another summarizer (an older checkout's) gates the same CSVs; --tag keeps the first reports.
    marker = tmp_path / "called"
    other = tmp_path / "older_summarize_results.py"
    other.write_text(
        "import pathlib, runpy, sys\n"
        f"pathlib.Path({str(marker)!r}).write_text('yes')\n"
        f"sys.argv[0] = {str(inj.SUMMARIZER)!r}\n"
        f"runpy.run_path({str(inj.SUMMARIZER)!r}, run_name='__main__')\n"
    )
    before = ["--gate-only", "--summarizer", str(other), "--tag", "_before"]
    assert inj.main([str(tmp_path), *before], plans=plans, make_spinner=spinner) == 0
    assert marker.read_text() == "yes"
    assert (tmp_path / "inject_slowdown_before.md").exists()
    assert (tmp_path / "gate_A_p8_before.json").exists() and (tmp_path / "gate_A_p8.json").exists()
    assert (tmp_path / "inject_slowdown.md").read_text().startswith("Gate: summarize_results.py")


def test_a_missing_summarizer_is_refused_before_any_sweep(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        inj.main([str(tmp_path), "--summarizer", str(tmp_path / "nope.py")], plans={})
    assert exit_info.value.code == 2
    assert "--summarizer" in capsys.readouterr().err and not any(tmp_path.iterdir())


def test_throttle_effect_end_to_end_on_the_cpu(tmp_path, monkeypatch, capsys):
    from test_telemetry import ScriptedTelemetry

    from fi_attn_bench.sweep import run as sweep_run
    from validation import throttle_policy as te

    monkeypatch.setattr(
        sweep_run, "open_telemetry", lambda device: ScriptedTelemetry([2000, 1000, 2000] * 500)
    )
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.001")
    plans = {"fake": (fake_bench_script.SPEC, "batch_size=1")}
    assert te.main([str(tmp_path), "--rounds", "2"], plans=plans) == 0
    text = (tmp_path / "throttle_effect.md").read_text()
    lines = [line for line in text.splitlines() if line.startswith("| fake")]
    assert [line.split(" | ")[1] for line in lines] == ["off", "discard", "pause"]
    assert lines[0].split(" | ")[5] == "-, -"  # policy off: no note, nothing discarded
    assert all(n.isdigit() for n in lines[1].split(" | ")[5].split(", "))
    assert (tmp_path / "pause_r2" / "fake.log").exists()
