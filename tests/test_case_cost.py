"""A case's wall time by phase in its row (``cost_*_s``), and --cost-from reading it back."""

from __future__ import annotations

import csv

import pytest
from test_shard_sweeps import SPEC, _listed

from fi_attn_bench.results.schema import COST_PHASES, OPTIONAL_COLUMN_BY_NAME
from fi_attn_bench.sweep.cost import CaseCost, case_cost, measured_wall_s
from fi_attn_bench.sweep.run_options import cost_timing

COLUMNS = [f"cost_{name}_s" for name, _ in COST_PHASES]


def test_every_cost_column_is_registered():
    assert all(OPTIONAL_COLUMN_BY_NAME[name].kind.value == "non_negative" for name in COLUMNS)


def test_phases_are_grouped_and_timing_split_into_calls_flushes_and_the_rest():
    before = {"prepare": 1.0, "warm-up": 2.0, "timing": 5.0}
    after = {
        "prepare": 1.5,
        "warm-up": 2.25,
        "sustain": 0.25,
        "set-up": 0.125,
        "calibrate": 0.125,
        "timing": 6.0,
        "readout": 0.5,
        "check": 0.0625,
        "integrity": 0.0625,
    }
    cost = case_cost(before, after, wall_s=3.0, timed_ms=600.0, batch_gpu_ms=800.0)
    assert cost == CaseCost(
        prepare=0.5,
        warm_up=0.5,
        calibration=0.25,
        timed=0.6,
        l2_flush=pytest.approx(0.2),
        readout=0.5,
        checks=0.125,
        other=pytest.approx(3.0 - 2.675),
    )
    assert cost.wall_s == pytest.approx(3.0)


def test_other_is_never_negative_and_no_batch_time_means_no_flush():
    cost = case_cost({}, {"prepare": 2.0}, wall_s=1.0, timed_ms=10.0, batch_gpu_ms=0.0)
    assert cost.other == 0.0 and cost.l2_flush == 0.0


def test_measured_wall_reads_the_columns_and_skips_empty_cells():
    row = {**CaseCost(prepare=1.0, timed=2.5).columns(), "cost_other_s": ""}
    assert measured_wall_s(row) == pytest.approx(3.5)
    assert measured_wall_s({"time_ms": "1"}) is None


def test_a_sweep_row_carries_its_case_cost(tmp_path):
    from test_bench_common import read_rows, run_main

    out = tmp_path / "out.csv"
    assert run_main(["--backend", "torch", "--output", str(out)]) == 0
    rows = read_rows(out)
    assert rows and all(row["status"] == "ok" for row in rows)
    for row in rows:
        values = [float(row[name]) for name in COLUMNS]
        assert all(v >= 0 for v in values)
        assert float(row["cost_timed_s"]) > 0  # the timed calls took time
        assert float(row["cost_warm_up_s"]) > 0


def _previous(path, timer: str, wall: dict[int, float]) -> None:
    timing = cost_timing_defaults()
    fields = ["schema_version", "api", "batch_size", "seq_len", "status", "time_ms"]
    fields += ["bandwidth_GB_s", "tflops", "error_type", "error", "timer", "l2", *COLUMNS]
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(fields)
        for batch, seconds in wall.items():
            costs = CaseCost(other=seconds).columns()
            writer.writerow(
                ["1", SPEC.api, batch, 8, "ok", 0.01, 1.0, 1.0, "", "", timer, timing.l2]
                + [costs[name] for name in COLUMNS]
            )


def cost_timing_defaults():
    from fi_attn_bench.command_line import build_parser

    return cost_timing(build_parser(SPEC).parse_args([]))


def test_cost_from_uses_the_recorded_wall_time_of_the_same_timer(tmp_path, capsys):
    previous = tmp_path / "prev.csv"
    _previous(previous, cost_timing_defaults().timer, {1: 42.0, 2: 0.5})
    _, out = _listed(["--shard", "0/2", "--cost-from", str(previous)], capsys)
    _, others = _listed(["--shard", "1/2", "--cost-from", str(previous)], capsys)
    assert "batch_size=1,seq_len=8  ~42.00 s (measured)" in out + others


def test_cost_from_models_the_cost_of_another_timers_rows(tmp_path, capsys):
    previous = tmp_path / "prev.csv"
    _previous(previous, "events", {1: 42.0})
    _, out = _listed(["--shard", "0/2", "--cost-from", str(previous)], capsys)
    _, others = _listed(["--shard", "1/2", "--cost-from", str(previous)], capsys)
    assert "~42.00 s" not in out + others
