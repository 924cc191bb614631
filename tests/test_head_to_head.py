"""Head to head: --impl parsing and plugins, interleaved rounds, paired ratio,
verdicts and the --fail-if-slower gate (CPU; fake timers and the fake script)."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Literal

import pytest
import torch
from stand_ins import fake_flashinfer
from test_bench_common import EXPLODING, NO_GPU, read_rows, run_main

import bench_batch_decode
from fi_attn_bench.backends import flashinfer_api as fc
from fi_attn_bench.backends import impls
from fi_attn_bench.backends.choice import Probe
from fi_attn_bench.errors import UsageError
from fi_attn_bench.timing import paired, timers
from fi_attn_bench.timing.options import TimingError, TimingOptions
from fi_attn_bench.timing.statistics import Batch
from fi_attn_bench.timing.trace import Calibration, DeviceEvent, split_rounds

PLUGIN = "tests/h2h_plugins.py"
ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- the interval of a median


def _coverage(n: int, k: int) -> float:
    return 1.0 - 2.0 * paired._binomial_cdf(k - 1, n)


def test_median_interval_ranks_are_the_narrowest_with_95pct_coverage():
    assert [paired.median_interval_ranks(n) for n in (1, 5)] == [None, None]
    assert paired.median_interval_ranks(6) == (1, 6)
    assert paired.median_interval_ranks(10) == (2, 9)
    assert paired.median_interval_ranks(20) == (6, 15)
    for n in range(6, 300):
        k, high = paired.median_interval_ranks(n)
        assert high == n + 1 - k
        assert _coverage(n, k) >= 0.95
        assert k == n // 2 or _coverage(n, k + 1) < 0.95


def test_median_interval_covers_the_true_median_95pct_of_the_time():
    gen = torch.Generator().manual_seed(1)
    hits = 0
    for _ in range(2000):
        values = torch.empty(15).exponential_(generator=gen).tolist()  # median ln 2
        low, high = paired.median_interval(values)
        hits += low <= math.log(2) <= high
    assert 0.95 <= hits / 2000 <= 0.995  # rank interval of n=15 covers 96.5 %


@pytest.mark.parametrize(
    ("interval", "verdict"),
    [((1.01, 1.02), "slower"), ((0.97, 0.99), "faster"), ((0.99, 1.01), "same"), (None, "")],
)
def test_verdict_comes_from_the_interval(interval, verdict):
    assert paired.PairedRatio(1.0, 20, interval).verdict == verdict


@pytest.mark.parametrize(
    ("interval", "same_within", "verdict"),
    [
        ((1.001, 1.004), 0.25, "same"),  # excludes 1, but not beyond the margin
        ((1.001, 1.004), 0.0, "slower"),
        ((1.003, 1.01), 0.25, "slower"),
        ((0.99, 0.9974), 0.25, "faster"),
        ((0.99, 0.998), 0.25, "same"),
    ],
)
def test_a_verdict_needs_the_whole_interval_beyond_the_same_within_margin(
    interval, same_within, verdict
):
    assert paired.PairedRatio(1.0, 20, interval, same_within).verdict == verdict


def test_measured_ratios_carry_the_sweeps_same_within_margin():
    options = dataclasses.replace(OPTIONS, same_within_pct=5.0)
    outcome = paired.measure_paired([contender(1.0), contender(1.03)], DriftTimer(), options)
    ratio = outcome.ratios[1]
    assert ratio.interval[0] > 1.0 and ratio.verdict == "same"  # 3 % is within 5 %


def test_slower_beyond_needs_the_lower_end_above_the_threshold():
    ratio = paired.PairedRatio(1.05, 20, (1.03, 1.07))
    assert ratio.slower_beyond(2.0) and not ratio.slower_beyond(3.0)
    assert not paired.PairedRatio(1.05, 3, None).slower_beyond(0.0)


def test_round_order_alternates():
    assert [paired.round_order(r, 2) for r in range(4)] == [(0, 1), (1, 0), (0, 1), (1, 0)]
    assert paired.round_order(1, 3) == (2, 1, 0)


# ---------------------------------------------------------------- rounds with a fake timer


class DriftTimer(timers.TimerDefaults):
    """Every batch's samples are the contender's own time (``fn()`` returns it) times a
    clock factor that drifts batch by batch, as a power-limited GPU does."""

    name, l2 = "profiler", "cold"

    def __init__(self, drift=lambda step: 1.0 + 0.1 * math.sin(step / 40.0), jitter=0.002):
        self.drift, self.jitter, self.step = drift, jitter, 0
        self.log: list[tuple[int, int]] = []  # (contender id, calls) of every batch
        self.gen = torch.Generator().manual_seed(0)

    def sync(self):
        return None

    def open(self, fn, estimate_ms):
        timer = self

        class Session(timers.SessionDefaults):
            def batch(self, calls):
                base = fn()
                timer.log.append((base, calls))
                timer.step += 1
                factor = timer.drift(timer.step)
                noise = torch.randn(calls, generator=timer.gen) * timer.jitter
                return Batch(tuple(float(base * factor * (1 + e)) for e in noise))

        return Session()


OPTIONS = TimingOptions(
    timer="profiler", min_time_ms=0.0, sustain_ms=0.0, warmup_min_ms=0.0, max_time_s=2.0
)


def contender(ms):
    return paired.Contender(fn=lambda: ms)


def test_a_b_rounds_alternate_and_the_ratio_survives_drift():
    timer = DriftTimer()
    outcome = paired.measure_paired([contender(1.0), contender(1.03)], timer, OPTIONS)
    order = [base for base, _ in timer.log if timer.log]
    rounds = [tuple(order[i : i + 2]) for i in range(0, len(order), 2)]
    assert rounds[:4] == [(1.0, 1.03), (1.03, 1.0), (1.0, 1.03), (1.03, 1.0)]
    medians = [m.median for m in outcome.measurements]
    ratio = outcome.ratios[1]
    assert ratio.verdict == "slower" and abs(ratio.ratio - 1.03) < 0.003
    assert ratio.interval[0] > 1.0 and ratio.rounds >= paired.MIN_ROUNDS
    assert outcome.ratios[0] is None  # the baseline has no ratio to itself
    assert len(outcome.round_medians[0]) == ratio.rounds
    assert all(m > 0 for m in medians)


def test_a_a_is_same_and_its_interval_holds_one():
    outcome = paired.measure_paired([contender(1.0), contender(1.0)], DriftTimer(), OPTIONS)
    ratio = outcome.ratios[1]
    assert ratio.verdict == "same"
    assert ratio.interval[0] <= 1.0 <= ratio.interval[1]
    assert ratio.half_width_pct() <= OPTIONS.noise_target_pct


class OrderTimer(DriftTimer):
    """No drift; the second batch of every round runs ``second`` times slower (what the
    GPU state a round's first batch leaves does to the next one)."""

    def __init__(self, second=1.02):
        super().__init__(drift=lambda step: second if step % 2 == 0 else 1.0)


def test_an_order_effect_cancels_in_each_pair_of_rounds():
    outcome = paired.measure_paired([contender(1.0), contender(1.0)], OrderTimer(), OPTIONS)
    ratio = outcome.ratios[1]
    assert abs(ratio.ratio - 1.0) < 0.002 and ratio.verdict == "same"
    assert ratio.half_width_pct() <= OPTIONS.noise_target_pct  # the rounds alone: +-2 %


def test_pair_ratios_are_each_pairs_geometric_mean_and_skip_an_odd_last_round():
    values, baseline = [1.02, 0.98, 1.5, 1.0, 7.0], [1.0, 1.0, 1.0, 1.5, 1.0]
    assert paired.pair_ratios(values, baseline) == pytest.approx([(1.02 * 0.98) ** 0.5, 1.0])
    assert paired.pair_ratios([1.0, 1.0], [0.0, 1.0]) == []  # a round without baseline time
    ratio = paired.paired_ratio([1.0] * 13, [1.0] * 13)
    assert (ratio.ratio, ratio.rounds, ratio.interval) == (1.0, 12, (1.0, 1.0))
    assert paired.paired_ratio([1.0] * 11, [1.0] * 11).interval is None  # 5 pairs: too few


def test_a_round_is_kept_only_with_its_partner():
    assert paired.kept_in_pairs([True, False, True, True, False]) == [
        False,
        False,
        True,
        True,
        False,
    ]
    assert paired.kept_in_pairs([True, True, True]) == [True, True, True]


def test_a_spent_budget_still_ends_on_a_whole_pair_of_rounds():
    options = dataclasses.replace(OPTIONS, max_time_s=1e-9)
    timer = DriftTimer()
    outcome = paired.measure_paired([contender(1.0), contender(1.0)], timer, options)
    assert len(timer.log) == 4 and outcome.ratios[1].rounds == 2  # A B, B A: one pair


def test_the_loop_waits_for_each_impls_min_time():
    options = TimingOptions(
        timer="profiler", min_time_ms=50.0, sustain_ms=0.0, warmup_min_ms=0.0, max_time_s=5.0
    )
    timer = DriftTimer(drift=lambda step: 1.0)
    outcome = paired.measure_paired([contender(0.5), contender(0.5)], timer, options)
    for measurement in outcome.measurements:
        assert measurement.timed_ms >= 50.0
    assert outcome.ratios[1].rounds >= paired.MIN_ROUNDS


def test_a_failing_check_fails_that_contender_only():
    def broken():
        raise RuntimeError("wrong values")

    failing = paired.Contender(fn=lambda: 1.0, after_warm_up=broken)
    outcome = paired.measure_paired(
        [contender(1.0), failing, contender(2.0)], DriftTimer(), OPTIONS
    )
    assert isinstance(outcome.errors[1], RuntimeError) and outcome.measurements[1] is None
    assert outcome.measurements[0] is not None and outcome.ratios[2].verdict == "slower"


def test_without_the_baseline_there_is_no_ratio():
    def broken():
        raise RuntimeError("baseline broke")

    outcome = paired.measure_paired(
        [paired.Contender(lambda: 1.0, broken), contender(1.0)], DriftTimer(), OPTIONS
    )
    assert outcome.ratios == (None, None) and outcome.measurements[1] is not None


def test_a_baseline_that_failed_before_the_rounds_gives_no_ratio():
    outcome = paired.measure_paired(
        [contender(1.0), contender(2.0)], DriftTimer(), OPTIONS, baseline=-1
    )
    assert outcome.ratios == (None, None)
    assert all(m is not None for m in outcome.measurements)


def test_a_baseline_that_fails_to_prepare_fails_its_row_and_no_ratio_is_written(
    tmp_path, quick_script
):
    out = tmp_path / "h.csv"
    argv = [f"b={PLUGIN}:raises_on_two", "--impl", "torch", "--impl", f"{PLUGIN}:same"]
    assert run_main(["--impl", *argv, "--output", str(out), *FAST]) == 1
    rows = _by_impl(read_rows(out))
    assert rows[("2", "b")]["status"] == "failed"
    assert rows[("2", "torch")]["paired_ratio"] == ""  # nothing to pair with
    assert rows[("2", "h2h_plugins:same")]["paired_ratio"] == ""
    assert rows[("1", "h2h_plugins:same")]["baseline_impl"] == "b"


# ---------------------------------------------------------------- the profiler's split


def _events(layout, lead=True):
    """Device events of [lead] + calls x (flush, run's kernels) per (impl, calls) batch."""
    events, t = [], 0
    names = {0: ("a1",), 1: ("b1", "b2")}
    for impl, calls in layout:
        if lead:
            events.append(DeviceEvent("spin", t, 100))
            t += 200
        for _ in range(calls):
            events.append(DeviceEvent("flush", t, 40))
            t += 50
            for name in names[impl]:
                events.append(DeviceEvent(name, t, 10 * (impl + 1)))
                t += 20
    return events


CALIBRATIONS = [
    Calibration(1, 1, frozenset({"a1"}), frozenset({"flush"}), 1, frozenset({"spin"})),
    Calibration(2, 1, frozenset({"b1", "b2"}), frozenset({"flush"}), 1, frozenset({"spin"})),
]


@pytest.mark.parametrize("lead", [True, False])
def test_split_rounds_gives_each_impl_its_batches(lead):
    layout = [(0, 3), (1, 2), (1, 4), (0, 3)]
    found = split_rounds(
        _events(layout, lead), [0, 1, 1, 0], [[3, 3], [2, 4]], CALIBRATIONS, attribution="sum"
    )
    assert [len(b.samples_ms) for b in found[0]] == [3, 3]
    assert [len(b.samples_ms) for b in found[1]] == [2, 4]
    assert {s for b in found[0] for s in b.samples_ms} == {10 / 1e6}
    assert {s for b in found[1] for s in b.samples_ms} == {40 / 1e6}
    assert found[1][0].kernels == frozenset({"b1", "b2"})


def test_split_rounds_refuses_a_recording_that_does_not_add_up():
    events = _events([(0, 3), (1, 2)])[:-1]
    with pytest.raises(TimingError, match="interleaved rounds"):
        split_rounds(events, [0, 1], [[3], [2]], CALIBRATIONS)


# ---------------------------------------------------------------- --impl parsing


def test_impl_names_targets_and_kinds():
    flashinfer = fake_flashinfer.make_module("0.6.1")
    api = "BatchPrefillWithPagedKVCacheWrapper"
    found = impls.parse_impls(
        ["flashinfer", "flashinfer:fa3", "torch", f"mine={PLUGIN}:same", "h2h_plugins:same"],
        api,
        flashinfer,
        default="flashinfer",
    )
    assert [(i.name, i.kind, i.wrapper_backend) for i in found] == [
        ("flashinfer", "flashinfer", "auto"),
        ("flashinfer:fa3", "flashinfer", "fa3"),
        ("torch", "torch", "auto"),
        ("mine", "plugin", "auto"),
        ("h2h_plugins:same", "plugin", "auto"),
    ]
    assert found[3].factory.__name__ == "same" and not found[2].checked


def test_the_same_impl_twice_needs_names():
    flashinfer = fake_flashinfer.make_module("0.6.1")
    api = "BatchDecodeWithPagedKVCacheWrapper"
    with pytest.raises(UsageError, match="given twice; name each one"):
        impls.parse_impls(["flashinfer", "flashinfer"], api, flashinfer, "flashinfer")
    named = impls.parse_impls(["a=flashinfer:fa2", "b=flashinfer:fa2"], api, flashinfer, "x")
    assert [i.name for i in named] == ["a", "b"]


def test_backends_come_from_the_installed_wrapper():
    new, old = fake_flashinfer.make_module("0.6.1"), fake_flashinfer.make_module("0.2.6")
    decode = "BatchDecodeWithPagedKVCacheWrapper"
    offer = fc.wrapper_backends(fc.wrapper_class(new, decode), decode)
    assert "auto" in offer.values and offer.source in ("docstring", "candidates")
    assert fc.wrapper_backends(fc.wrapper_class(old, decode), decode) == fc.BackendOffer(
        ("auto",), "none"
    )


def test_backends_are_read_from_the_docstring():
    class Wrapper:
        def __init__(self, workspace, backend: str = "auto"):
            """Build it.

            Parameters
            ----------
            backend : str
                The implementation backend, could be ``auto``/``fa2`` or ``new-one``.
            jit_args : list
                Not ``this``.
            """

    offer = fc.wrapper_backends(Wrapper, "AnyWrapper")
    assert offer == fc.BackendOffer(("auto", "fa2", "new-one"), "docstring")


def test_backends_of_a_literal_or_an_open_signature():
    class Typed:
        def __init__(self, workspace, backend: Literal["fa2", "fa3"] = "fa2"):
            pass

    class Open:
        def __init__(self, workspace, **kwargs):
            pass

    assert fc.wrapper_backends(Typed, "X") == fc.BackendOffer(("auto", "fa2", "fa3"), "signature")
    api = "BatchMLAPagedAttentionWrapper"
    assert fc.wrapper_backends(Open, api) == fc.BackendOffer(
        fc.CANDIDATE_BACKENDS[api], "candidates"
    )


def test_unknown_backend_is_refused_listing_the_available_ones():
    flashinfer = fake_flashinfer.make_module("0.6.1")
    api = "BatchMLAPagedAttentionWrapper"
    with pytest.raises(UsageError, match=r"unknown FlashInfer backend 'fa9'.*flashinfer:fa2"):
        impls.parse_impl("flashinfer:fa9", api, flashinfer)
    with pytest.raises(UsageError, match="takes no backend argument"):
        impls.parse_impl(
            "flashinfer:fa2",
            "BatchDecodeWithPagedKVCacheWrapper",
            fake_flashinfer.make_module("0.2.6"),
        )


def test_resolved_backend_is_read_where_the_wrapper_keeps_it():
    assert fc.resolved_backend(SimpleNamespace(_backend="fa3")) == "fa3"
    assert fc.resolved_backend(SimpleNamespace(_backend="auto")) == ""
    assert fc.resolved_backend(object()) == ""


# ---------------------------------------------------------------- bad input: exit 2, no work


GPU_PROBE = Probe(
    cuda_available=lambda: True, import_flashinfer=lambda: fake_flashinfer.make_module("0.6.1")
)


@pytest.mark.parametrize(
    ("impl", "message"),
    [
        ("tests/no_such_plugin.py:make", "no such plugin file"),
        ("no_such_module_xyz:make", "cannot import no_such_module_xyz (ModuleNotFoundError"),
        (f"{PLUGIN}:missing", "has no attribute 'missing'"),
        (f"{PLUGIN}:NOT_CALLABLE", "NOT_CALLABLE is a int, not callable"),
        (f"{PLUGIN}:no_argument", "must take one argument"),
        ("nonsense", "expected flashinfer, flashinfer:BACKEND, torch"),
    ],
)
def test_a_broken_plugin_exits_2_before_any_case(impl, message, capsys):
    assert run_main(["--impl", "torch", "--impl", impl], spec=EXPLODING) == 2
    assert message in capsys.readouterr().err


def test_unknown_backend_exits_2_before_any_case(capsys):
    spec = EXPLODING.__class__(
        **{**EXPLODING.__dict__, "api": "BatchDecodeWithPagedKVCacheWrapper"}
    )
    assert run_main(["--impl", "flashinfer:fa9"], spec=spec, probe=GPU_PROBE) == 2
    err = capsys.readouterr().err
    assert "unknown FlashInfer backend 'fa9'" in err and "flashinfer:auto" in err


def test_flashinfer_impl_without_a_gpu_exits_2(capsys):
    assert run_main(["--impl", "flashinfer:fa2"], spec=EXPLODING, probe=NO_GPU) == 2
    err = capsys.readouterr().err
    assert "error: --impl flashinfer:fa2: no GPU available" in err and "--backend" not in err


def test_flashinfer_impl_that_cannot_import_names_the_impl_and_the_reason(capsys):
    no_import = Probe(cuda_available=lambda: True, import_flashinfer=_no_flashinfer)
    argv = ["--impl", "torch", "--impl", "a=flashinfer"]
    assert run_main(argv, spec=EXPLODING, probe=no_import) == 2
    err = capsys.readouterr().err
    assert "error: --impl a=flashinfer: FlashInfer cannot be imported (ModuleNotFoundError" in err
    assert "--backend" not in err


def _no_flashinfer():
    raise ModuleNotFoundError("No module named 'flashinfer'")


def test_unknown_baseline_exits_2(capsys):
    argv = ["--impl", "torch", "--impl", f"{PLUGIN}:same", "--baseline-impl", "x"]
    assert run_main(argv, spec=EXPLODING) == 2
    assert "--baseline-impl 'x' is none of the --impl names" in capsys.readouterr().err


def test_negative_same_within_exits_2(capsys):
    argv = ["--impl", "torch", "--impl", f"{PLUGIN}:same", "--same-within", "-1"]
    assert run_main(argv, spec=EXPLODING) == 2
    assert "--same-within" in capsys.readouterr().err


def test_fail_if_slower_with_one_impl_exits_2(capsys):
    assert run_main(["--impl", "torch", "--fail-if-slower", "1"], spec=EXPLODING) == 2
    assert "give two or more --impl" in capsys.readouterr().err


# ---------------------------------------------------------------- whole runs on the CPU


FAST = ["--preset", "smoke", "--max-time-per-case", "0.3", "--min-samples", "3"]


@pytest.fixture
def quick_script(monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_SLEEP", "0.001")
    monkeypatch.setenv("FAKE_BENCH_BURN", "1")  # a plugin worker that sleeps fails own_clock


def _by_impl(rows):
    return {(row["batch_size"], row["impl"]): row for row in rows}


def test_one_row_per_case_and_impl_with_paired_columns(tmp_path, quick_script):
    out = tmp_path / "h.csv"
    argv = ["--impl", "torch", "--impl", f"{PLUGIN}:same", "--output", str(out), *FAST]
    assert run_main(argv) == 0
    rows = _by_impl(read_rows(out))
    assert set(rows) == {(b, i) for b in "12" for i in ("torch", "h2h_plugins:same")}
    plugin = rows[("1", "h2h_plugins:same")]
    assert plugin["check"] == "pass" and plugin["backend"] == ""
    assert plugin["baseline_impl"] == "torch" and float(plugin["paired_ratio"]) > 0
    assert int(plugin["paired_rounds"]) >= 1
    assert f"--impl torch --impl {PLUGIN}:same" in plugin["repro"]
    assert "--same-within" not in plugin["repro"]  # the default is not repeated
    assert rows[("1", "torch")]["paired_ratio"] == "" and rows[("1", "torch")]["backend"] == "torch"


def test_a_plugin_that_raises_fails_that_row_only(tmp_path, quick_script, capsys):
    out = tmp_path / "h.csv"
    argv = ["--impl", "torch", "--impl", f"{PLUGIN}:raises_on_two", "--output", str(out), *FAST]
    assert run_main(argv) == 1
    rows = _by_impl(read_rows(out))
    failed = rows[("2", "h2h_plugins:raises_on_two")]
    assert failed["status"] == "failed" and "cannot do batch_size 2" in failed["error"]
    assert rows[("2", "torch")]["status"] == "ok"
    assert rows[("1", "h2h_plugins:raises_on_two")]["status"] == "ok"
    assert "1 of 4 rows failed" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("factory", "error"), [("wrong", "CorrectnessError"), ("not_a_run", "TypeError")]
)
def test_wrong_values_or_return_fail_the_plugins_rows(tmp_path, quick_script, factory, error):
    out = tmp_path / "h.csv"
    argv = ["--impl", "torch", "--impl", f"{PLUGIN}:{factory}", "--output", str(out), *FAST]
    assert run_main(argv) == 1
    rows = _by_impl(read_rows(out))
    assert {rows[(b, f"h2h_plugins:{factory}")]["error_type"] for b in "12"} == {error}
    assert {rows[(b, "torch")]["status"] for b in "12"} == {"ok"}


def test_fail_if_slower_exits_1_naming_the_slower_impl(tmp_path, quick_script, capsys):
    out = tmp_path / "h.csv"
    base = ["--impl", "torch", "--impl", f"{PLUGIN}:slow", "--output", str(out), *FAST]
    assert run_main([*base, "--filter", "batch_size=1"]) == 0
    gate = ["--filter", "batch_size=1", "--fail-if-slower", "50", "--force"]
    assert run_main([*base, *gate]) == 1
    printed = capsys.readouterr().out
    assert "--fail-if-slower 50: h2h_plugins:slow is slower than torch" in printed
    row = _by_impl(read_rows(out))[("1", "h2h_plugins:slow")]
    assert row["paired_verdict"] == "slower" and float(row["paired_ratio_lo"]) > 1.5


def test_same_within_widens_what_is_called_same_and_goes_into_the_repro(tmp_path, quick_script):
    out = tmp_path / "h.csv"
    argv = ["--impl", "torch", "--impl", f"{PLUGIN}:slow", "--output", str(out), *FAST]
    assert run_main([*argv, "--filter", "batch_size=1", "--same-within", "1000"]) == 0
    row = _by_impl(read_rows(out))[("1", "h2h_plugins:slow")]
    assert float(row["paired_ratio_lo"]) > 1.5 and row["paired_verdict"] == "same"
    assert "--same-within 1000" in row["repro"]


def test_the_sweep_ends_with_each_impls_verdicts_and_geomean(tmp_path, quick_script, capsys):
    out = tmp_path / "h.csv"
    argv = ["--impl", "torch", "--impl", f"slow={PLUGIN}:slow", "--output", str(out), *FAST]
    assert run_main(argv) == 0
    ratios = [float(row["paired_ratio"]) for row in read_rows(out) if row["impl"] == "slow"]
    geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
    printed = capsys.readouterr().out
    assert (
        f"Head to head, slow/torch over 2 cases: 0 faster, 0 same, 2 slower; geomean ratio {geomean:.4f}"
        in printed
    )


def test_tally_counts_cases_without_an_interval_apart():
    from fi_attn_bench.sweep.run import tally_lines

    found = [paired.PairedRatio(0.5, 20, (0.4, 0.6)), paired.PairedRatio(2.0, 4, None)]
    assert tally_lines("a", {"b": found}) == [
        "Head to head, b/a over 2 cases: 1 faster, 0 same, 0 slower, 1 without an interval; "
        "geomean ratio 1.0000"
    ]


def test_example_sdpa_plugin_passes_the_decode_check_on_the_cpu(tmp_path):
    out = tmp_path / "d.csv"
    argv = [
        "--device", "cpu", "--impl", "torch", "--impl", "examples/sdpa_decode_plugin.py:make",
        "--filter", "batch_size=2", "--max-time-per-case", "0.2", "--output", str(out),
    ]  # fmt: skip
    assert bench_batch_decode.main(argv) == 0
    rows = read_rows(out)
    plugin = [row for row in rows if row["impl"] == "sdpa_decode_plugin:make"]
    assert [row["check"] for row in plugin] == ["pass"]
    assert float(plugin[0]["plan_ms"]) > 0 and float(plugin[0]["max_abs_err"]) < 0.016


def test_resume_reruns_a_case_with_all_its_impls(tmp_path, quick_script, monkeypatch):
    out = tmp_path / "h.csv"
    impl_args = ["--impl", "torch", "--impl", f"{PLUGIN}:same"]
    monkeypatch.setenv("FAKE_BENCH_OOM", "2")  # the fake script's run() fails at batch_size 2
    assert run_main([*impl_args, "--output", str(out), *FAST]) == 1
    first = _by_impl(read_rows(out))
    assert first[("2", "torch")]["status"] == "failed"
    assert first[("2", "h2h_plugins:same")]["status"] == "ok"
    monkeypatch.delenv("FAKE_BENCH_OOM")
    assert run_main([*impl_args, "--resume", str(out), *FAST]) == 0
    rows = read_rows(out)
    assert len(rows) == 4 and {row["status"] for row in rows} == {"ok"}
    again = _by_impl(rows)
    assert again[("1", "torch")]["time_ms"] == first[("1", "torch")]["time_ms"]  # kept
    assert again[("2", "h2h_plugins:same")]["paired_ratio"] != ""  # measured with its baseline


def test_profiler_rounds_calibrate_each_impl_then_split_one_recording():
    """ProfilerTimer's two round methods on a scripted profiler: one recording of one call
    per impl, then one recording of all rounds, split back per impl."""
    recordings = []
    layout = []  # (impl, calls) of every batch the loop ran

    def profile(body, sync):
        recordings.append(body)
        if body in calls_of:  # calibration: one call of one impl
            return _events([(calls_of[body], 1)], lead=False)[1:]  # no flush either
        body()
        return _events(layout)

    calls_of = {}
    timer = timers.ProfilerTimer(
        TimingOptions(attribution="sum"), torch.device("cpu"), None, profile=profile
    )
    base = Calibration(None, 1, flush_names=frozenset({"flush"}), lead_count=1)
    sessions = [SimpleNamespace(fn=lambda: None, calibration=base, calls=[]) for _ in range(2)]
    sessions[1].fn = lambda: 1
    calls_of.update({sessions[0].fn: 0, sessions[1].fn: 1})
    timer.calibrate_rounds(sessions)
    assert [s.calibration.call_count for s in sessions] == [1, 2]

    def loop():
        for index, calls in [(0, 3), (1, 2), (1, 4), (0, 5)]:
            sessions[index].calls.append(calls)
            layout.append((index, calls))
        return [0, 1, 1, 0]

    found = timer.record_rounds(sessions, loop)
    assert len(recordings) == 3
    assert [[len(b.samples_ms) for b in batches] for batches in found] == [[3, 5], [2, 4]]
    assert {s for b in found[1] for s in b.samples_ms} == {40 / 1e6}


def test_one_named_impl_is_its_rows_impl_and_its_repro(tmp_path, quick_script):
    out = tmp_path / "h.csv"
    argv = ["--impl", "mine=torch", "--filter", "batch_size=1", "--output", str(out), *FAST]
    assert run_main(argv) == 0
    (row,) = read_rows(out)
    assert row["impl"] == "mine" and row["paired_ratio"] == "" and row["backend"] == "torch"
    assert "--impl mine=torch" in row["repro"]


def test_a_module_plugin_imports_from_the_current_directory(tmp_path, monkeypatch):
    """``python bench.py --impl mod:make`` puts the script's directory on sys.path, not the
    user's: the harness resolves ``mod`` from the current directory too."""
    (tmp_path / "plugin_in_cwd_34.py").write_text("from h2h_plugins import same as make\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", ".")])
    impl = impls.parse_impl("plugin_in_cwd_34:make", "FakeAttentionWrapper", None)
    assert impl.name == "plugin_in_cwd_34:make" and callable(impl.factory)


@pytest.mark.parametrize("typed", [f"{PLUGIN}:same", f"./{PLUGIN}:same", f"{ROOT}/{PLUGIN}:same"])
def test_a_file_plugins_default_name_is_its_stem_and_factory(typed):
    impl = impls.parse_impl(typed, "FakeAttentionWrapper", None)
    assert impl.name == "h2h_plugins:same"


def test_the_repro_of_an_unnamed_file_plugin_names_it_as_typed(tmp_path, quick_script):
    out = tmp_path / "h.csv"
    argv = ["--impl", "torch", "--impl", f"./{PLUGIN}:same", "--output", str(out), *FAST]
    assert run_main([*argv, "--filter", "batch_size=1"]) == 0
    rows = read_rows(out)
    assert [row["impl"] for row in rows] == ["torch", "h2h_plugins:same"]
    assert f"--impl torch --impl ./{PLUGIN}:same" in rows[0]["repro"]
