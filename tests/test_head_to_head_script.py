"""validation.head_to_head and its plugins (validation.spin_impls): tables, plot and plugin logic
on real harness CSVs and fakes (CPU)."""

from __future__ import annotations

import csv
import importlib
import json
import re
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

import bench_batch_decode
from validation import head_to_head, spin_impls

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def h2h(monkeypatch):
    """head_to_head as on a machine with FlashInfer (its sweeps are replaced where they run)."""
    monkeypatch.setattr(head_to_head, "flashinfer_missing", lambda: None)
    return head_to_head


@pytest.mark.parametrize("part", ["aa", "aa-one", "spin", "backends"])
def test_without_flashinfer_a_measuring_part_stops_before_preparing_any_case(
    tmp_path, monkeypatch, capsys, part
):
    """It spent 8 minutes preparing cases that all failed."""
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # import flashinfer: ImportError
    swept = []
    monkeypatch.setattr(head_to_head, "_sweep", lambda *args: swept.append(args))
    assert head_to_head.main([str(tmp_path / "out"), "--part", part]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(f"error: --part {part} measures FlashInfer")
    assert swept == [] and not (tmp_path / "out").exists()


@pytest.fixture
def impls():
    """validation.spin_impls, the plugins head_to_head sweeps with (fresh per test: it caches
    one instance per case)."""
    return importlib.reload(spin_impls)


def _sweep(path: Path, *impls: str, extra: tuple[str, ...] = ()) -> None:
    argv = ["--device", "cpu", "--filter", "batch_size=2", "--max-time-per-case", "0.3", *extra]
    for impl in impls:
        argv += ["--impl", impl]
    assert bench_batch_decode.main([*argv, "--output", str(path)]) == 0


def test_report_reads_aa_cost_and_backends(tmp_path, h2h):
    _sweep(tmp_path / "aa_bench_batch_decode.csv", "a=torch", "b=torch")
    _sweep(
        tmp_path / "backends_bench_batch_decode.csv", "torch", "examples/sdpa_decode_plugin.py:make"
    )
    _sweep(
        tmp_path / "spin_bench_batch_decode.csv",
        "base=torch",
        "spin=examples/sdpa_decode_plugin.py:make",
    )
    # The sleep spin's CSV: the same sweep's rows (a second sweep of the same command line
    # cost a worker start and its timing on a loaded runner, and the report reads rows only).
    shutil.copy(
        tmp_path / "spin_bench_batch_decode.csv", tmp_path / "spin_sleep_bench_batch_decode.csv"
    )
    reached = [
        {"case": {}, "plain_ms": 0.2, "reached": 0.021, "spin": "busy", "used": "busy"},
        {"case": {}, "plain_ms": 0.01, "reached": 0.3, "spin": "busy", "used": "busy"},
        {"case": {}, "plain_ms": 0.3, "reached": 0.005, "spin": "sleep"},
    ]
    (tmp_path / "spin_reached.jsonl").write_text("".join(json.dumps(e) + "\n" for e in reached))
    walls = {
        "single_bench_batch_decode": {"wall_s": 10.0, "sweep_s": 6.0},
        "aa_bench_batch_decode": {"wall_s": 21.0, "sweep_s": 12.6},
    }
    (tmp_path / "walls.json").write_text(json.dumps(walls))
    assert h2h.main([str(tmp_path), "--part", "report", "--scripts", "decode"]) == 0
    text = (tmp_path / "report.md").read_text()
    aa = next(line for line in text.splitlines() if line.startswith("| decode | two instances"))
    assert aa.count("|") == 10  # one case >= 20 us with its spread, holds-1 and verdict counts
    assert "| decode | one instance |" not in text  # no aa-one CSV here
    assert "| decode | 10.0 | 21.0 | 2.10 | 6.0 | 12.6 | 2.10 |" in text
    for kind, reached in (("busy", "2.10%"), ("sleep", "0.50%")):  # the sleep entry: old format
        section = text.split(f"a 2% {kind} spin against itself")[1].split("## ")[0]
        called = re.search(r"\| decode \| 1 \| ([01])/1 \(\d+%\) \|", section)  # share slower
        assert called, section
        assert ("Not called slower: decode batch_size=2," in section) == (called[1] == "0")
        assert f"cases >= 50 us: median {reached}, range {reached} to {reached}" in section
        assert f"; spin used: {kind} 1" in section
    assert "sdpa_decode_plugin:make / torch over 1 case:" in text
    svg = (tmp_path / "backends_BatchDecodeWithPagedKVCacheWrapper.svg").read_text()
    assert svg.startswith("<svg") and svg.count("<circle") == 1


def test_unknown_script_name_is_refused(tmp_path, h2h, capsys):
    with pytest.raises(SystemExit) as exit_info:
        h2h.main([str(tmp_path), "--part", "report", "--scripts", "nope"])
    assert exit_info.value.code == 2
    assert "unknown --scripts nope" in capsys.readouterr().err


def test_unbalanced_sweep_args_are_refused_before_any_sweep(tmp_path, h2h, capsys):
    with pytest.raises(SystemExit) as exit_info:
        h2h.main([str(tmp_path / "new"), "--part", "aa", "--sweep-args", "--filter 'a"])
    assert exit_info.value.code == 2
    assert '--sweep-args "--filter \'a": No closing quotation' in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


def test_sweep_runs_a_script_and_records_its_wall_times(tmp_path, h2h, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.001")
    extra = ["--preset", "smoke", "--max-time-per-case", "0.1"]
    impls = ["a=torch", "b=tests/h2h_plugins.py:same"]
    h2h._sweep(tmp_path, "aa", "tests/fake_bench_script.py", impls, extra)
    entry = json.loads((tmp_path / "walls.json").read_text())["aa_fake_bench_script"]
    assert entry["exit"] == 0 and 0 < entry["sweep_s"] < entry["wall_s"]
    rows = h2h._rows(tmp_path / "aa_fake_bench_script.csv")
    assert sorted(row["impl"] for row in rows) == ["a", "a", "b", "b"]


def _power_limited_call(units: int) -> float:
    """A model of a spun call on a power-limited GPU: a 1 % launch gap, and each spin unit
    costs 0.4 of its nominal 0.001 because the kernel meanwhile runs at a higher clock."""
    return 0.01 + 0.0004 * units


@pytest.mark.parametrize("first_units", [1, 20, 2000])
def test_spin_calibration_reaches_the_slowdown_despite_gap_and_power_rebate(impls, first_units):
    units = impls.calibrate_units(_power_limited_call, first_units, 0.02, _power_limited_call(0))
    # exact answer 25 units
    assert _power_limited_call(units) == pytest.approx(0.02, rel=0.1)


def test_spin_calibration_grows_a_spin_that_measured_no_slowdown(impls):
    seen = []

    def nothing_yet(units: int) -> float:
        seen.append(units)
        return 0.0 if units < 30 else 0.0005 * units

    units = impls.calibrate_units(nothing_yet, 10, target=0.02, gap=0.0)
    assert seen[:2] == [10, 40]  # bounded steps: x CALIBRATION_MAX_STEP, no division by zero
    assert units == 40


def test_sweep_args_reach_every_script_after_the_preset(tmp_path, h2h, monkeypatch):
    seen = []
    monkeypatch.setattr(h2h, "_sweep", lambda out, tag, script, impls, extra: seen.append(extra))
    argv = [str(tmp_path), "--part", "aa", "--scripts", "decode,mla"]
    assert h2h.main([*argv, "--sweep-args", "--noise-target 0.5 --filter 'head_dim=128'"]) == 0
    wanted = ["--preset", "default", "--noise-target", "0.5", "--filter", "head_dim=128"]
    aa = [*wanted, "--samples-dir", str(tmp_path / "samples")]  # the A/A keeps its rounds
    assert seen == [wanted, aa] * 2  # single and aa sweeps of two scripts


@pytest.mark.parametrize(
    ("flag", "factory"),
    [([], "spin_auto"), (["--spin", "busy"], "spin"), (["--spin", "mma"], "spin_mma")],
)
def test_spin_part_sweeps_each_script_against_the_chosen_spin_plugin(
    tmp_path, h2h, monkeypatch, flag, factory
):
    seen = []
    monkeypatch.setenv("H2H_SPIN_LOG", "")  # part_spin sets it; restored after the test
    monkeypatch.setattr(
        h2h, "_sweep", lambda out, tag, script, impls, extra: seen.append((tag, impls))
    )
    assert h2h.main([str(tmp_path), "--part", "spin", "--scripts", "paged", *flag]) == 0
    assert seen == [(factory, ["base=flashinfer", f"spin=validation.spin_impls:{factory}"])]


def _fake_spin(impls, name: str):
    return lambda: impls.Spin(name, lambda units: None, 1.0)


@pytest.mark.parametrize(
    ("gaps", "chosen"),
    [
        ({"mma": 0.004, "sleep": 0.001}, ("mma", 0.004)),  # mma's fixed cost fits: mma
        ({"mma": 0.3, "sleep": 0.006}, ("sleep", 0.006)),  # a short case: the finer sleep spin
        ({"mma": 0.3, "sleep": 0.2}, ("sleep", 0.2)),  # none fits: the last, not an error
    ],
)
def test_the_auto_spin_takes_the_first_whose_fixed_cost_leaves_room_for_the_target(
    impls, gaps, chosen
):
    spins = (_fake_spin(impls, "mma"), _fake_spin(impls, "sleep"))
    spin, gap = impls.choose_spin(spins, lambda s: gaps[s.name])
    assert (spin.name, gap) == chosen


def test_aa_report_splits_a_case_outside_the_band_by_round_order(tmp_path, h2h):
    aa = tmp_path / "aa_bench_batch_decode.csv"
    samples_dir = str(tmp_path / "samples")
    _sweep(aa, "a=torch", "b=torch", extra=("--samples-dir", samples_dir))
    rows = h2h._rows(aa)
    for row in rows:  # push b's ratio out of the band; its rounds stay as measured
        if row["impl"] == "b":
            row.update(paired_ratio="1.01", paired_ratio_lo="0.99", paired_ratio_hi="1.03")
    with open(aa, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    assert h2h.main([str(tmp_path), "--part", "report", "--scripts", "decode"]) == 0
    text = (tmp_path / "report.md").read_text()
    found = re.search(
        r"Outside \+-0\.5 %: decode \(two instances\) batch_size=2,.*: 1\.0100 \[0\.9900, 1\.0300\]"
        r" \(rounds A B (\d\.\d{4}), B A (\d\.\d{4})\)",
        text,
    )
    assert found, text


def test_order_split_shows_an_order_effect_the_paired_ratio_hides(h2h):
    from fi_attn_bench.summarizer.rank_test import case_key

    row = {"schema_version": "1", "api": "X", "batch_size": "2", "impl": "b", "status": "ok"}
    a, b = (case_key("X", {"batch_size": "2"}, impl) for impl in ("a", "b"))
    rounds = {a: [1.0, 1.0, 1.0, 1.0], b: [1.02, 0.98, 1.02, 0.98]}
    assert h2h._order_split(rounds, row) == " (rounds A B 1.0200, B A 0.9800)"
    assert h2h._order_split({}, row) == ""  # no samples file: nothing to add


def test_one_instance_hands_every_impl_of_a_case_the_same_callable(impls, monkeypatch):
    built = []

    def prepared(context):
        built.append(context.inputs)
        return SimpleNamespace(run=lambda: len(built), output=object())

    monkeypatch.setattr(impls, "_flashinfer_prepared", prepared)
    case_inputs, next_inputs = object(), object()
    a, b = (impls.one_instance(SimpleNamespace(inputs=case_inputs)) for _ in "ab")
    assert a.run is b.run and a.output is b.output and built == [case_inputs]
    c = impls.one_instance(SimpleNamespace(inputs=next_inputs))  # the next case: its own
    assert c.run is not a.run and built == [case_inputs, next_inputs]


def test_aa_one_sweeps_one_instance_as_both_impls_and_reports_it(tmp_path, h2h, monkeypatch):
    seen = []
    monkeypatch.setattr(h2h, "_sweep", lambda out, tag, script, impls, extra: seen.append(impls))
    assert h2h.main([str(tmp_path), "--part", "aa-one", "--scripts", "decode"]) == 0
    one = "validation.spin_impls:one_instance"
    assert seen == [[f"a={one}", f"b={one}"]]
    _sweep(tmp_path / "aaone_bench_batch_decode.csv", "a=torch", "b=torch")
    assert h2h.main([str(tmp_path), "--part", "report", "--scripts", "decode"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| decode | one instance | 1 |" in text


def test_margin_line_recounts_verdicts_from_the_intervals_at_each_margin(h2h):
    def row(low, high):
        return {"paired_ratio": str((low + high) / 2), "paired_ratio_lo": str(low),
                "paired_ratio_hi": str(high)}  # fmt: skip

    pairs = [(None, row(1.002, 1.004)), (None, row(1.003, 1.01)), (None, row(0.99, 1.01))]
    line = h2h._margin_line("Called slower", pairs, ("slower",))
    assert line == "Called slower at --same-within 0 / 0.1 / 0.25 / 0.5 %: 2 / 2 / 1 / 0 of 3"


def test_backends_report_gives_each_impl_its_own_line_and_plot_rows(tmp_path, h2h, capsys):
    """Three implementations: each case is listed once per implementation against the
    baseline, named, never twice under the first one's name."""
    plugin = "examples/sdpa_decode_plugin.py:make"
    _sweep(tmp_path / "backends_bench_batch_decode.csv", "torch", f"p={plugin}", f"q={plugin}")
    capsys.readouterr()
    assert h2h.main([str(tmp_path), "--part", "report", "--scripts", "decode"]) == 0
    printed = capsys.readouterr().out
    lines = [line for line in printed.splitlines() if line.startswith("- decode: ")]
    assert [line.split(" over ")[0] for line in lines] == [
        "- decode: p / torch",
        "- decode: q / torch",
    ]
    assert all(" over 1 case: geomean " in line for line in lines)
    svg = (tmp_path / "backends_BatchDecodeWithPagedKVCacheWrapper.svg").read_text()
    labels = re.findall(r'<text x="8" y="\d+">([^<]*)</text>', svg)[1:]
    assert [label.split(":")[0] for label in labels] == ["p", "q"]
    assert svg.count("<circle") == 2
