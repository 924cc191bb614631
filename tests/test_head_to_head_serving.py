"""Head to head with the serving batches and the throttle policy: varied-length cases measured by several implementations on shared inputs, the
paired rounds judged by the telemetry watch, and the resume key (case, workload, impl)."""

from __future__ import annotations

import csv

import fake_bench_script
import h2h_plugins
from test_bench_common import read_rows
from test_head_to_head import DriftTimer, contender
from test_shard_sweeps import all_keys, run

import bench_batch_decode
from fi_attn_bench.results.schema import csv_fieldnames
from fi_attn_bench.timing import paired
from fi_attn_bench.timing.options import TimingOptions

OPTIONS = TimingOptions(
    timer="profiler", min_time_ms=0.0, sustain_ms=0.0, warmup_min_ms=0.0, max_time_s=2.0
)


class RoundWatch:
    """A throttle-policy watch that judges the rounds listed in ``throttled`` (1-based)."""

    def __init__(self, throttled=(), every=False):
        self.throttled, self.every = set(throttled), every
        self.starts, self.done = 0, 0

    def batches_start(self):
        self.starts += 1

    def batch_done(self):
        self.done += 1
        return not (self.every or self.done in self.throttled)


def test_paired_rounds_call_the_watch_once_per_round_and_drop_throttled_rounds_for_all():
    timer, watch = DriftTimer(), RoundWatch(throttled={3, 4})  # one pair of rounds: A B, B A
    outcome = paired.measure_paired([contender(1.0), contender(1.03)], timer, OPTIONS, watch=watch)
    rounds = len(timer.log) // 2
    assert watch.starts == 1 and watch.done == rounds
    dropped = [calls for _, calls in timer.log[4:8]]  # rounds 3 and 4: two batches each
    assert [len(medians) for medians in outcome.round_medians] == [rounds - 2, rounds - 2]
    baseline, other = outcome.measurements
    assert baseline.discarded_samples + other.discarded_samples == sum(dropped)
    assert baseline.throttled_samples == baseline.discarded_samples > 0
    assert outcome.ratios[1].rounds == 2 * ((rounds - 2) // 2)
    assert outcome.ratios[1].verdict == "slower"
    assert len(baseline.samples) + len(other.samples) == sum(c for _, c in timer.log) - sum(dropped)


def test_a_throttled_round_takes_its_partner_round_with_it():
    timer, watch = DriftTimer(), RoundWatch(throttled={2})  # round 1 (A B) pairs with it
    outcome = paired.measure_paired([contender(1.0), contender(1.03)], timer, OPTIONS, watch=watch)
    rounds = len(timer.log) // 2
    throttled = [calls for _, calls in timer.log[2:4]]
    dropped = [calls for _, calls in timer.log[0:4]]
    baseline, other = outcome.measurements
    assert [len(medians) for medians in outcome.round_medians] == [rounds - 2, rounds - 2]
    assert baseline.throttled_samples + other.throttled_samples == sum(throttled)
    assert baseline.discarded_samples + other.discarded_samples == sum(dropped)
    assert outcome.ratios[1].verdict == "slower"


def test_paired_rounds_keep_every_round_when_every_round_ran_throttled():
    options = TimingOptions(
        timer="profiler", min_time_ms=0.0, sustain_ms=0.0, warmup_min_ms=0.0, max_time_s=0.05
    )
    timer, watch = DriftTimer(), RoundWatch(every=True)
    outcome = paired.measure_paired([contender(1.0), contender(1.0)], timer, options, watch=watch)
    rounds = len(timer.log) // 2
    assert watch.done == rounds  # the stop rule saw no kept round: it ran to the budget
    for measurement, medians in zip(outcome.measurements, outcome.round_medians, strict=True):
        assert len(medians) == rounds and measurement.discarded_samples == 0
        assert measurement.throttled_samples == len(measurement.samples)


DECODE_FAST = ["--device", "cpu", "--max-time-per-case", "0.1", "--min-samples", "3"]
PLUGIN = "h2h_plugins:recording"  # by module name: the test reads the module's SEEN_INPUTS
TWO = ["--impl", "torch", "--impl", PLUGIN]


def _header(path):
    with open(path, newline="") as handle:
        return next(csv.reader(handle))


def test_a_varied_batch_is_measured_by_every_impl_on_the_same_inputs(tmp_path):
    out = tmp_path / "d.csv"
    h2h_plugins.SEEN_INPUTS.clear()
    argv = [*DECODE_FAST, *TWO, "--batch", "2d@10+1d@90", "--imbalance", "--output", str(out)]
    argv.append("--no-isolation")  # the plugin records its inputs in this process
    assert bench_batch_decode.main(argv) == 0
    fields = (*bench_batch_decode.CASE_FIELDS, "workload", "impl")
    assert _header(out) == csv_fieldnames(fields)  # each identity column once
    rows = read_rows(out)
    assert [(r["workload"], r["impl"]) for r in rows] == [
        ("2d@10+1d@90", "torch"),
        ("2d@10+1d@90", PLUGIN),
    ]
    plugin = rows[1]
    assert plugin["check"] == "pass" and plugin["num_requests"] == "3"
    assert plugin["baseline_impl"] == "torch" and plugin["paired_ratio"] != ""
    assert all(float(r["uniform_twin_ms"]) > 0 for r in rows)  # each impl's own twin
    # the varied case and its twin: one inputs object each, made once, the plugin got them
    assert len(h2h_plugins.SEEN_INPUTS) == 2
    varied, twin = h2h_plugins.SEEN_INPUTS
    assert varied.table.kv_lens.tolist() == [10, 10, 90]
    twin_lens = twin.table.kv_lens.tolist()
    assert len(twin_lens) == 3 and sum(twin_lens) == 110 and max(twin_lens) - min(twin_lens) <= 1


def test_resume_keys_rows_by_workload_and_impl(tmp_path, capsys):
    out = tmp_path / "d.csv"
    # the same batch_size and mean lengths: only the workload tells the two cases apart
    batches = ["--batch", "2d@10+1d@90", "--batch", "1d@30+2d@40"]
    assert bench_batch_decode.main([*DECODE_FAST, *TWO, *batches, "--output", str(out)]) == 0
    rows = read_rows(out)
    assert len({tuple(r[f] for f in bench_batch_decode.CASE_FIELDS) for r in rows}) == 1
    header = _header(out)
    gone = [r for r in rows if (r["workload"], r["impl"]) == ("1d@30+2d@40", PLUGIN)]
    assert len(gone) == 1
    with open(out, "w", newline="") as handle:  # that one row lost, as by a crash
        writer = csv.DictWriter(handle, fieldnames=header)
        writer.writeheader()
        writer.writerows(r for r in rows if r is not gone[0])
    capsys.readouterr()
    assert bench_batch_decode.main([*DECODE_FAST, *TWO, *batches, "--resume", str(out)]) == 0
    assert "1 of 2 cases already ok" in capsys.readouterr().out
    again = read_rows(out)
    assert sorted((r["workload"], r["impl"]) for r in again) == sorted(
        (r["workload"], r["impl"]) for r in rows
    )
    first = {(r["workload"], r["impl"]): r["time_ms"] for r in rows}
    for row in again:
        if row["workload"] == "2d@10+1d@90":
            assert row["time_ms"] == first[(row["workload"], row["impl"])]  # kept, not rerun


def test_shards_of_a_paired_sweep_hold_every_case_with_every_impl_and_resume(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.001")
    two = ["--impl", "torch", "--impl", "tests/h2h_plugins.py:same"]
    for index in range(2):
        assert run([*two, "--shard", f"{index}/2", "--output", str(tmp_path / "r.csv")]) == 0
    shards = [tmp_path / f"r.shard{index}of2.csv" for index in range(2)]
    rows = [row for path in shards for row in read_rows(path)]
    fields = fake_bench_script.FIELDS
    pairs = sorted((tuple(r[f] for f in fields), r["impl"]) for r in rows)
    expected = sorted((key, impl) for key in all_keys() for impl in ("torch", "h2h_plugins:same"))
    assert pairs == expected and {r["status"] for r in rows} == {"ok"}
    # a finished shard resumes as done: its rows (case and impl) are all its own cases
    assert run([*two, "--resume", str(shards[0])]) == 0
    assert len(read_rows(shards[0])) == len([r for r in rows if r["shard"] == "0"])
