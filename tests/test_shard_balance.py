"""benchmarks/shard_balance.py on a hand-made sweep whose shard totals are known."""

from __future__ import annotations

import csv
import os

import pytest

import bench_batch_decode
from benchmarks import shard_balance
from fi_attn_bench.sweep.sharding import case_wall_s
from fi_attn_bench.timing.options import TimingOptions

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SPEC = bench_batch_decode.SPEC
BIG_MS, SMALL_MS = 100.0, 0.01


def write_sweep(path, big_index=0, cases=8):
    """The decode smoke preset's first cases: one 100 ms call, the others 10 us."""
    fields = ["api", *SPEC.case_fields, "status", "time_ms", "samples"]
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(fields)
        for i, case in enumerate(SPEC.presets["smoke"][:cases]):
            big = i == big_index
            cells = [case[f] for f in SPEC.case_fields]
            writer.writerow(
                [SPEC.api, *cells, "ok", BIG_MS if big else SMALL_MS, 20 if big else 1000]
            )
    return path


def row(rows, shards, split):
    return next(r for r in rows if r.shards == shards and r.split == split)


def test_shard_totals_against_a_hand_computed_split(tmp_path, capsys):
    write_sweep(tmp_path / "sweep.csv")
    # one case holds nearly all the GPU time: no 2-way split is even in time_ms (exit 1)
    assert (
        shard_balance.main([str(tmp_path), "--shards", "2", "--report", str(tmp_path / "r.md")])
        == 1
    )
    timing = TimingOptions()
    big, small = case_wall_s(BIG_MS, timing, 20), case_wall_s(SMALL_MS, timing, 1000)
    mean = (big + 7 * small) / 2
    cases = shard_balance.load_sweep([str(tmp_path)], shard_balance.load_specs())
    truth = shard_balance.truths(cases, timing, use_samples=True)
    items = shard_balance.split_items(cases, {}, timing)
    rows = shard_balance.balance_rows(cases, items, truth, (2,))
    # cost-from: the 100 ms case alone, the seven small ones together
    assert row(rows, 2, "cost-from").wall == pytest.approx(max(big, 7 * small) / mean)
    # count: cases 0, 2, 4, 6 (the big one and three small) against 1, 3, 5, 7
    assert row(rows, 2, "count").wall == pytest.approx((big + 3 * small) / mean)
    time_mean = (BIG_MS + 7 * SMALL_MS) / 2
    assert row(rows, 2, "count").time_ms == pytest.approx((BIG_MS + 3 * SMALL_MS) / time_mean)
    out = capsys.readouterr().out
    assert "| 2 | cost-from |" in out and "| 2 | count |" in out
    assert "<= 1.10 FAIL |" in out and "<= 1.05 FAIL |" in out
    assert out.rstrip().endswith("N=2 predicted, N=2 cost-from).")
    assert (tmp_path / "r.md").read_text() == out


def test_holdout_costs_come_from_the_other_sweep(tmp_path):
    write_sweep(tmp_path / "a.csv", big_index=0)
    write_sweep(tmp_path / "b.csv", big_index=1)  # another sweep: another case is slow
    specs = shard_balance.load_specs()
    cases = shard_balance.load_sweep([str(tmp_path / "a.csv")], specs)
    other = {c.key: c for c in shard_balance.load_sweep([str(tmp_path / "b.csv")], specs)}
    timing = TimingOptions()
    truth = shard_balance.truths(cases, timing, use_samples=True)
    rows = shard_balance.balance_rows(
        cases, shard_balance.split_items(cases, other, timing), truth, (2,)
    )
    # judged on sweep a, a split made with sweep b's costs puts a's slow case with three others
    assert row(rows, 2, "cost-from holdout").wall > row(rows, 2, "cost-from").wall


def test_every_requested_shard_count_and_split_is_reported(tmp_path, capsys):
    write_sweep(tmp_path / "a.csv")
    assert shard_balance.main([str(tmp_path / "a.csv"), "--holdout", str(tmp_path / "a.csv")]) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    splits = ("predicted", "predicted, wall only", "cost-from", "cost-from half")
    splits += ("cost-from holdout", "time_ms alone", "count")
    for n in (2, 4, 8):
        for split in splits:
            assert any(line.startswith(f"| {n} | {split} |") for line in lines), (n, split)


def test_bad_input_exits_2(tmp_path, capsys):
    assert shard_balance.main([str(tmp_path / "missing.csv")]) == 2
    (tmp_path / "empty.csv").write_text("api,status\n")
    assert shard_balance.main([str(tmp_path / "empty.csv")]) == 2
    assert "no ok row" in capsys.readouterr().err


def test_targets_are_met_on_both_truths_or_the_split_fails(tmp_path, capsys):
    write_sweep(tmp_path / "a.csv")
    assert shard_balance.main([str(tmp_path / "a.csv"), "--shards", "1"]) == 0  # 1 shard: even
    assert (
        capsys.readouterr()
        .out.rstrip()
        .endswith("Targets: PASS (2 of 2 splits within their target).")
    )
    even, uneven_gpu = (
        shard_balance.BalanceRow(4, "predicted", 1.09, 1.09, 1.10),
        shard_balance.BalanceRow(4, "cost-from", 1.01, 1.06, 1.05),
    )
    assert shard_balance.missed([even, uneven_gpu]) == [uneven_gpu]  # time_ms counts too
    assert shard_balance.missed([shard_balance.BalanceRow(8, "count", 1.5, 1.5, None)]) == []
