"""--shard I/N: parsing, the split (exact partition, deterministic, balanced), the cost
model, and what torchrun's and Slurm's environment variables give a process."""

from __future__ import annotations

import os
import random
import time
from dataclasses import replace
from types import SimpleNamespace

import fake_bench_script
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fi_attn_bench.command_line import build_parser
from fi_attn_bench.errors import UsageError
from fi_attn_bench.sweep import launch as launch_mod
from fi_attn_bench.sweep.launch import detect_launch, run_tag
from fi_attn_bench.sweep.shard_plan import shard_request
from fi_attn_bench.sweep.sharding import (
    FLUSH_MS_PER_SAMPLE,
    LAUNCH_MS,
    ROOFLINE_EFFICIENCY,
    SYNC_MS,
    ShardItem,
    ShardSpec,
    case_wall_s,
    imbalance,
    parse_shard,
    predicted_call_ms,
    predicted_samples,
    reference_peaks,
    shard_of_path,
    split_by_cost,
    split_by_count,
    with_shard_tag,
)
from fi_attn_bench.timing.loop import should_stop
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.statistics import batch_calls

items_strategy = st.lists(
    st.tuples(st.text(min_size=1, max_size=6), st.integers(0, 10**9), st.integers(0, 10**8)),
    unique_by=lambda triple: triple[0],
    max_size=60,
).map(lambda triples: [ShardItem((key,), cost, gpu) for key, cost, gpu in triples])
wall_only_strategy = items_strategy.map(lambda items: [replace(i, gpu_us=0) for i in items])


@pytest.mark.parametrize(
    "text,expected", [("0/1", (0, 1)), ("3/4", (3, 4)), (" 1 / 2 ", (1, 2)), ("0/008", (0, 8))]
)
def test_parse_shard_accepts_i_of_n(text, expected):
    shard = parse_shard(text)
    assert (shard.index, shard.count) == expected


@pytest.mark.parametrize(
    "text,message",
    [
        ("4/4", "I must be in 0..3"),
        ("-1/4", "I must be in 0..3"),
        ("0/0", "N must be >= 1"),
        ("1/-2", "N must be >= 1"),
        ("1", "expected I/N"),
        ("a/b", "expected I/N"),
        ("1/2/3", "expected I/N"),
        ("", "expected I/N"),
    ],
)
def test_parse_shard_says_what_is_wrong(text, message):
    with pytest.raises(UsageError, match=message):
        parse_shard(text)


@pytest.mark.parametrize("split", [split_by_cost, split_by_count])
@settings(max_examples=200, deadline=None)
@given(items=items_strategy, count=st.integers(1, 9))
def test_shards_partition_any_case_list_exactly(split, items, count):
    result = split(items, count)
    assert len(result.shards) == count
    flat = [i for shard in result.shards for i in shard]
    assert sorted(flat) == list(range(len(items)))  # each case in exactly one shard
    assert sum(result.loads_us) == sum(item.cost_us for item in items)
    assert sum(result.gpu_loads_us) == sum(item.gpu_us for item in items)
    for shard, members in enumerate(result.shards):
        assert result.loads_us[shard] == sum(items[i].cost_us for i in members)
        assert list(members) == sorted(members)  # a shard runs its cases in sweep order


@settings(max_examples=100, deadline=None)
@given(items=items_strategy, count=st.integers(1, 9), seed=st.integers(0, 1000))
def test_cost_split_does_not_depend_on_input_order(items, count, seed):
    shuffled = list(items)
    random.Random(seed).shuffle(shuffled)

    def key_sets(case_list):
        split = split_by_cost(case_list, count)
        return [sorted(case_list[i].key for i in shard) for shard in split.shards]

    assert key_sets(items) == key_sets(shuffled)


@settings(max_examples=200, deadline=None)
@given(items=wall_only_strategy, count=st.integers(1, 9))
def test_cost_split_is_within_one_case_of_the_mean(items, count):
    split = split_by_cost(items, count)
    mean = sum(split.loads_us) / count
    assert max(split.loads_us) <= mean + max((i.cost_us for i in items), default=0)


def test_cost_split_beats_count_split_on_skewed_costs():
    # ordered as a grid is: cheap cases first, each row ending in an expensive one
    items = [ShardItem((f"{n:03d}",), 1000 if n % 4 == 3 else 10) for n in range(48)]
    by_cost, by_count = split_by_cost(items, 4), split_by_count(items, 4)
    assert imbalance(by_cost.loads_us) == pytest.approx(1.0)
    assert imbalance(by_count.loads_us) > 3.5


def test_equal_costs_are_broken_by_the_case_key():
    items = [ShardItem(("b",), 5), ShardItem(("a",), 5), ShardItem(("c",), 5)]
    split = split_by_cost(items, 2)
    assert split.shards == ((1, 2), (0,))  # a -> 0, b -> 1, c -> 0 (tie: lowest index)


def test_cost_split_balances_wall_and_gpu_time_at_once():
    # wall 3 + 1 + 1 | 2 + 2 + 1 is even, but puts both GPU-heavy cases (1 and 2) together
    costs = ((3, 0), (2, 10), (2, 10), (1, 0), (1, 0), (1, 0))
    items = [ShardItem((f"{n}",), wall, gpu) for n, (wall, gpu) in enumerate(costs)]
    wall_only = split_by_cost([replace(i, gpu_us=0) for i in items], 2)
    gpu_of_wall_only = [sum(items[i].gpu_us for i in shard) for shard in wall_only.shards]
    assert imbalance(wall_only.loads_us) == pytest.approx(1.0)
    assert imbalance(gpu_of_wall_only) == pytest.approx(2.0)
    both = split_by_cost(items, 2)
    assert imbalance(both.loads_us) == pytest.approx(1.0)
    assert imbalance(both.gpu_loads_us) == pytest.approx(1.0)


def test_cost_split_refines_what_greedy_placement_leaves_uneven():
    # LPT alone gives 7+4 | 5+4+4 = 11 | 13; a swap finds 7+5 | 4+4+4 = 12 | 12
    items = [ShardItem((f"{n}",), cost) for n, cost in enumerate((7, 5, 4, 4, 4))]
    split = split_by_cost(items, 2)
    assert sorted(split.loads_us) == [12, 12]


@pytest.mark.parametrize(
    "call_ms", [0.004, 0.01, 0.03, 0.07, 0.15, 0.4, 1.0, 3.0, 8.0, 40.0, 300.0]
)
@pytest.mark.parametrize("min_time_ms", [100.0, 500.0])
def test_predicted_samples_are_where_the_stop_hook_stops_noise_free_samples(call_ms, min_time_ms):
    timing = replace(TimingOptions(), min_time_ms=min_time_ms)
    samples, estimate_ms, elapsed_s = [], call_ms + SYNC_MS, 0.0
    while True:  # the measuring loop's batches, every sample call_ms, the GPU time its clock
        remaining_s = timing.max_time_s - elapsed_s
        calls = batch_calls(estimate_ms, remaining_s, call_ms + FLUSH_MS_PER_SAMPLE, timing)
        samples += [call_ms] * calls
        elapsed_s += calls * (call_ms + FLUSH_MS_PER_SAMPLE) / 1e3
        estimate_ms = call_ms
        if should_stop(samples, elapsed_s, timing):
            break
    assert predicted_samples(call_ms, timing) == len(samples)


def test_case_cost_is_mostly_fixed_for_small_cases_and_grows_with_the_call():
    timing = TimingOptions()
    tiny, small, big, huge = (case_wall_s(ms, timing) for ms in (0.01, 0.05, 1.0, 50.0))
    assert 0.15 < tiny < small < big < huge
    assert big / tiny < 6  # 100x the call time, a few times the wall time
    assert case_wall_s(50.0, timing) <= timing.max_time_s + 1.0


def test_prediction_uses_the_roofline_at_its_efficiency_plus_the_launch():
    peaks = reference_peaks()
    assert (peaks.bandwidth_GB_s, peaks.tflops) == (4800.0, 989.0)  # published H200
    memory_bound = predicted_call_ms(4.8e9, 1.0, peaks)  # 4.8 GB: 1 ms at peak
    assert memory_bound == pytest.approx(1.0 / ROOFLINE_EFFICIENCY + LAUNCH_MS)
    compute_bound = predicted_call_ms(1.0, 989e9, peaks)
    assert compute_bound == pytest.approx(1.0 / ROOFLINE_EFFICIENCY + LAUNCH_MS)
    assert predicted_call_ms(0.0, 0.0, peaks) == LAUNCH_MS  # an empty call still launches
    assert reference_peaks(1000.0, 100.0) != peaks


@pytest.mark.parametrize(
    "path,shard,tagged",
    [
        ("out/X_1.csv", ShardSpec(1, 4), "out/X_1.shard1of4.csv"),
        ("out/X_1.shard0of4.csv", ShardSpec(2, 4), "out/X_1.shard2of4.csv"),
        ("out/results", ShardSpec(0, 2), "out/results.shard0of2.csv"),
    ],
)
def test_shard_tag_in_file_names(path, shard, tagged):
    assert with_shard_tag(path, shard) == tagged
    assert shard_of_path(tagged) == shard
    assert shard_of_path(path) in (None, ShardSpec(0, 4))


TORCHRUN = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "ab-12"}
ARRAY = {
    "SLURM_ARRAY_JOB_ID": "777",
    "SLURM_ARRAY_TASK_ID": "12",
    "SLURM_ARRAY_TASK_COUNT": "4",
    "SLURM_ARRAY_TASK_MIN": "10",
    "SLURM_ARRAY_TASK_MAX": "13",
}


def test_no_launcher_no_shard():
    launch = detect_launch({"PATH": "/bin"})
    assert launch.shard is None and launch.leader and launch.local_rank is None


def test_torchrun_gives_rank_of_world_size_and_the_local_gpu():
    launch = detect_launch(TORCHRUN)
    assert launch.shard == ShardSpec(1, 2) and launch.local_rank == 1 and not launch.leader
    assert detect_launch({**TORCHRUN, "RANK": "0", "LOCAL_RANK": "0"}).leader


def test_slurm_array_index_counts_from_its_minimum():
    launch = detect_launch(ARRAY)
    assert launch.shard == ShardSpec(2, 4) and launch.local_rank is None and not launch.leader


def test_slurm_array_with_a_step():
    env = {**ARRAY, "SLURM_ARRAY_TASK_ID": "8", "SLURM_ARRAY_TASK_MIN": "0"}
    env |= {
        "SLURM_ARRAY_TASK_MAX": "12",
        "SLURM_ARRAY_TASK_STEP": "4",
        "SLURM_ARRAY_TASK_COUNT": "4",
    }
    assert detect_launch(env).shard == ShardSpec(2, 4)


@pytest.mark.parametrize(
    "changes",
    [
        {"SLURM_ARRAY_TASK_MAX": "20"},  # --array=10,11,12,20: ids not evenly spaced
        {"SLURM_ARRAY_TASK_ID": "15", "SLURM_ARRAY_TASK_MAX": "15"},
        {"SLURM_ARRAY_TASK_COUNT": "x"},
    ],
)
def test_slurm_array_that_does_not_map_to_shards_is_refused(changes):
    with pytest.raises(UsageError):
        detect_launch({**ARRAY, **changes})


def test_torchrun_in_each_task_of_an_array_nests_the_shards():
    launch = detect_launch({**TORCHRUN, **ARRAY})
    assert launch.shard == ShardSpec(2 * 2 + 1, 4 * 2) and launch.local_rank == 1


def test_bad_torchrun_variables_are_refused():
    with pytest.raises(UsageError, match="RANK"):
        detect_launch({**TORCHRUN, "RANK": "2"})


def test_run_tag_is_shared_by_the_processes_of_a_run():
    one_node = {**TORCHRUN, "LOCAL_WORLD_SIZE": "2"}
    stamp = time.strftime("%Y%m%d_%H%M%S", time.localtime(1e9))
    assert run_tag(one_node, launch_mod.TORCHRUN, agent_started=1e9) == stamp  # the agent's
    assert run_tag(one_node, launch_mod.TORCHRUN, agent_started=None) == "torchrunab12"
    two_nodes = {**one_node, "WORLD_SIZE": "4"}  # agents on two nodes: torchrun's run id
    assert run_tag(two_nodes, launch_mod.TORCHRUN, agent_started=1e9) == "torchrunab12"
    assert run_tag(ARRAY, launch_mod.SLURM_ARRAY) == "slurm777"
    with pytest.raises(UsageError, match="--rdzv-id"):
        run_tag({**two_nodes, "TORCHELASTIC_RUN_ID": "none"}, launch_mod.TORCHRUN)
    assert run_tag({}, "", now=1e9) == stamp  # a lone process: the local time


def test_process_start_time_of_this_process():
    started = launch_mod.process_started(os.getpid())
    assert started is None or time.time() - 3600 < started <= time.time() + 1


def args(**given):
    """A script's parsed command line (every option at its default) with ``given`` set."""
    parsed = build_parser(fake_bench_script.SPEC).parse_args([])
    return SimpleNamespace(**{**vars(parsed), **given})


def test_explicit_shard_wins_over_torchrun(capsys):
    one_process = {**TORCHRUN, "RANK": "0", "WORLD_SIZE": "1"}
    request = shard_request(args(shard="2/3"), one_process)
    assert request.shard == ShardSpec(2, 3) and request.origin == "--shard"
    assert "overrides torchrun's shard 0/1" in capsys.readouterr().err
    assert request.device_text(None, has_gpu=True) == "cuda:1"  # the GPU is still the rank's
    assert shard_request(args(shard="1/2"), TORCHRUN).shard == ShardSpec(1, 2)  # the same


def test_explicit_shard_wins_in_a_slurm_array_even_one_that_maps_to_no_shard():
    # sbatch --array=3,7 --wrap 'python bench_all.py --shard $SLURM_ARRAY_TASK_ID/8'
    uneven = {**ARRAY, "SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "3"}
    uneven |= {"SLURM_ARRAY_TASK_MAX": "7", "SLURM_ARRAY_TASK_COUNT": "2"}
    with pytest.raises(UsageError, match="evenly spaced"):
        shard_request(args(), uneven)
    assert shard_request(args(shard="7/8"), uneven).shard == ShardSpec(7, 8)
    assert shard_request(args(shard="5/8"), ARRAY).shard == ShardSpec(5, 8)  # 2/4 otherwise


def test_explicit_shard_that_would_collide_across_processes_is_refused():
    # torchrun with two processes: both would run shard 0/3 into one CSV
    with pytest.raises(UsageError, match="each would run shard 0/3 into the same CSV"):
        shard_request(args(shard="0/3"), TORCHRUN)


def test_explicit_device_wins_over_local_rank():
    request = shard_request(args(), TORCHRUN)
    assert request.shard == ShardSpec(1, 2) and request.origin == "torchrun"
    assert request.device_text("cpu", has_gpu=True) == "cpu"
    assert request.device_text(None, has_gpu=True) == "cuda:1"
    assert request.device_text(None, has_gpu=False) is None


def test_resume_file_name_gives_the_shard():
    request = shard_request(args(resume="out/X_1.shard2of3.csv"), {})
    assert request.shard == ShardSpec(2, 3) and request.origin == "--resume"


def test_cost_options_without_a_shard_are_refused(tmp_path):
    with pytest.raises(UsageError, match="add --shard"):
        shard_request(args(shard_by="count"), {})
    with pytest.raises(UsageError, match="no such file"):
        shard_request(args(shard="0/2", cost_from=str(tmp_path / "none.csv")), {})
