"""Sweeps split over processes: ``--shard I/N``, each case's predicted cost, and the split.

Pure (standard library only): every process of a sharded sweep computes the same split from
the same inputs, on any machine.  Costs are whole microseconds and ties are broken by the case
key (text), so neither float formatting nor hash randomization can move a case between shards.
The prediction never reads the local device or its peaks cache, which may differ between the
nodes of a Slurm array: it uses the published H200 peaks unless the command line gives others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fi_attn_bench.cases.spec import DTYPES, BenchmarkSpec
from fi_attn_bench.device.peaks import find_published
from fi_attn_bench.errors import UsageError
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.statistics import batch_calls

SHARD_BY = ("cost", "count")  # --shard-by: LPT on predicted cost, or case i -> shard i mod N

# The peaks the prediction divides by when the command line gives none (same on every node).
REFERENCE_DEVICE = "NVIDIA H200"
# Share of the peaks a kernel reaches (H200 v10: decode 40-70 % of bandwidth, prefill ~50 % of
# dense tensor-core TFLOPS), plus what every call pays besides its roofline time: the launch's
# ramp-up and the last, partly filled wave (fitted, with the efficiency, on the H200 v10
# default-preset sweeps; docs/DESIGN.md, "Predicted shard costs").
ROOFLINE_EFFICIENCY = 0.5
LAUNCH_MS = 0.013
# Warm-up's estimate of a call, which sizes the first timed batch, is a synchronized call's
# wall time: the call plus its launch and synchronization on the host (same fit).
SYNC_MS = 0.02
# Per timed sample, what the sweep spends besides the call (H200 v10 call 1, bench_all logs over
# 142,295 samples): the cold-L2 flush on the GPU (GPU busy in batches minus timed time) and the
# profiler's trace reading on the host ("readout" phase).
FLUSH_MS_PER_SAMPLE = 0.041
READOUT_MS_PER_SAMPLE = 0.11
# Per case, outside warm-up and sustain: inputs, plan() and the correctness check (same logs:
# prepare + check over 93 cases, 0.05-0.09 s a case).
CASE_SETUP_S = 0.07


@dataclass(frozen=True)
class ShardSpec:
    """Shard ``index`` of ``count`` (0 <= index < count)."""

    index: int
    count: int

    def __post_init__(self):
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index}/{self.count}: need 0 <= I < N and N >= 1")

    @property
    def tag(self) -> str:
        """What a shard's file names carry: ``shard1of4``."""
        return f"shard{self.index}of{self.count}"

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


_SHARD = re.compile(r"^\s*(-?\d+)\s*/\s*(-?\d+)\s*$")


def parse_shard(text: str) -> ShardSpec:
    """``"1/4"`` -> ShardSpec(1, 4); UsageError saying exactly what is wrong."""
    match = _SHARD.match(text or "")
    if not match:
        raise UsageError(f"--shard {text!r}: expected I/N, e.g. 0/4 (shard I of N, 0-based)")
    index, count = int(match.group(1)), int(match.group(2))
    if count < 1:
        raise UsageError(f"--shard {text!r}: N must be >= 1")
    if not 0 <= index < count:
        raise UsageError(f"--shard {text!r}: I must be in 0..{count - 1} (0-based)")
    return ShardSpec(index, count)


_TAG = re.compile(r"\.shard(\d+)of(\d+)(?=\.csv$|$)")


def shard_of_path(path: str) -> ShardSpec | None:
    """The shard a file name carries (``X.shard1of4.csv``), or None."""
    match = _TAG.search(path)
    if not match:
        return None
    try:
        return ShardSpec(int(match.group(1)), int(match.group(2)))
    except ValueError:
        return None


def with_shard_tag(path: str, shard: ShardSpec) -> str:
    """``out/X.csv`` -> ``out/X.shard1of4.csv``; an existing tag is replaced."""
    if _TAG.search(path):
        return _TAG.sub(f".{shard.tag}", path)
    stem, dot, ext = path.rpartition(".")
    if dot and ext.lower() == "csv" and "/" not in ext:
        return f"{stem}.{shard.tag}.{ext}"
    return f"{path}.{shard.tag}.csv"


def shard_columns(shard: ShardSpec | None) -> dict[str, object]:
    """The registry's ``shard`` / ``num_shards`` cells of a row (none when not sharded)."""
    return {} if shard is None else {"shard": shard.index, "num_shards": shard.count}


# --------------------------------------------------------------------------- cost


@dataclass(frozen=True)
class CostPeaks:
    """The roofline the prediction divides by: GB/s (read + written) and dense TFLOPS."""

    bandwidth_GB_s: float
    tflops: float


def reference_peaks(
    bandwidth_GB_s: float | None = None, tflops: float | None = None, dtype: str = "float16"
) -> CostPeaks:
    """The command line's peaks where given, else the published ones of REFERENCE_DEVICE."""
    published = find_published(REFERENCE_DEVICE)
    return CostPeaks(bandwidth_GB_s or published.bandwidth_GB_s, tflops or published.tflops(dtype))


def predicted_call_ms(io_bytes: float, flops: float, peaks: CostPeaks) -> float:
    """One call's time: LAUNCH_MS plus the roofline's time at ROOFLINE_EFFICIENCY of the peaks."""
    memory_ms = io_bytes / (peaks.bandwidth_GB_s * 1e6)
    compute_ms = flops / (peaks.tflops * 1e9)
    return LAUNCH_MS + max(memory_ms, compute_ms) / ROOFLINE_EFFICIENCY


def case_call_ms(
    spec: BenchmarkSpec, case: Mapping[str, object], dtype_name: str, peaks: CostPeaks
) -> float:
    """``predicted_call_ms`` of ``case`` from the script's I/O and FLOP formulas."""
    element_size = DTYPES[dtype_name].itemsize
    return predicted_call_ms(spec.io_bytes(case, element_size), spec.flops(case), peaks)


def predicted_samples(call_ms: float, timing: TimingOptions) -> int:
    """How many samples the measuring loop takes, noise aside: whole batches
    (``batch_calls``; the first sized by warm-up's estimate, call + SYNC_MS) until the stop
    hook's count (``timing.loop.should_stop``) is reached or the per-case budget spent."""
    flush_ms = FLUSH_MS_PER_SAMPLE if timing.l2 == "cold" else 0.0
    count, estimate_ms = 0, call_ms + SYNC_MS
    while True:
        remaining_s = timing.max_time_s - count * (call_ms + flush_ms) / 1e3
        if remaining_s <= 0:
            return max(count, 1)
        count += batch_calls(estimate_ms, remaining_s, call_ms + flush_ms, timing)
        estimate_ms = call_ms  # later batches are sized by the samples' median
        if count < timing.min_samples:
            continue
        enough = count >= timing.enough_samples and call_ms < timing.enough_samples_below_ms
        if count * call_ms >= timing.min_time_ms or enough:
            return count


def case_wall_s(call_ms: float, timing: TimingOptions, samples: int | None = None) -> float:
    """Wall seconds a sweep spends on a case whose call takes ``call_ms``: set-up, warm-up,
    sustain, the timed samples (each with its L2 flush, within the per-case budget) and
    their readout.  Small cases cost mostly the fixed part, so counts alone misjudge them.
    ``samples``: how many a measurement took (a CSV's ``samples``), else predicted."""
    per_sample_ms = call_ms + (FLUSH_MS_PER_SAMPLE if timing.l2 == "cold" else 0.0)
    count = samples if samples else predicted_samples(call_ms, timing)
    loop_ms = min(count * per_sample_ms, timing.max_time_s * 1e3)
    readout_ms = loop_ms / per_sample_ms * READOUT_MS_PER_SAMPLE
    warm_up_ms = max(timing.warmup_min_ms, timing.warmup_min_calls * call_ms)
    sustain_ms = min(timing.sustain_min_ms, timing.sustain_ms)
    return CASE_SETUP_S + (warm_up_ms + sustain_ms + loop_ms + readout_ms) / 1e3


def cost_us(seconds: float) -> int:
    """A cost as whole microseconds: the split compares integers only."""
    return int(round(seconds * 1e6))


def case_item(
    key: tuple[str, ...], call_ms: float, timing: TimingOptions, samples: int | None = None
) -> ShardItem:
    """A case to split from its call time (measured, with its samples, or predicted): the
    wall time the sweep spends on it and the call's GPU time."""
    return ShardItem(key, cost_us(case_wall_s(call_ms, timing, samples)), cost_us(call_ms / 1e3))


# --------------------------------------------------------------------------- split


@dataclass(frozen=True)
class ShardItem:
    """One case to split: its key (api and case fields as text) and two costs in microseconds:
    the wall time the sweep spends on it and the GPU time of one call (its ``time_ms``)."""

    key: tuple[str, ...]
    cost_us: int
    gpu_us: int = 0


@dataclass(frozen=True)
class Split:
    """Which items (indices into the list given) each shard runs, and each shard's costs."""

    shards: tuple[tuple[int, ...], ...]
    loads_us: tuple[int, ...]  # wall time
    gpu_loads_us: tuple[int, ...] = ()

    def of(self, shard: ShardSpec) -> tuple[int, ...]:
        return self.shards[shard.index]


# Each cost becomes an integer share of its total: 2**40 resolves 1e-12 of a sweep, and
# integers compare the same on every machine.
_SHARE = 1 << 40
# The refinement stops after this many moves per case at the latest (it stops far earlier).
_MOVES_PER_CASE = 4


def split_by_cost(items: Sequence[ShardItem], count: int) -> Split:
    """Shards even in wall time and in GPU time at once: each cost as a share of its total,
    a shard's load the larger of its two shares.  LPT first (cases by largest share, then
    key; each onto the shard it leaves least loaded, lowest index on a tie), then moves and
    swaps of single cases off the most loaded shard while they lower its load.  Within a
    shard the cases keep their order."""
    shares = _shares(items)
    order = sorted(
        range(len(items)), key=lambda i: (-max(shares[i]), -sum(shares[i]), items[i].key)
    )
    loads = [(0, 0) for _ in range(count)]
    members: list[list[int]] = [[] for _ in range(count)]
    for i in order:
        shard = min(
            range(count), key=lambda s: (_peak(_plus(loads[s], shares[i])), sum(loads[s]), s)
        )
        members[shard].append(i)
        loads[shard] = _plus(loads[shard], shares[i])
    for _ in range(_MOVES_PER_CASE * len(items)):
        if not _improve(members, loads, shares, items):
            break
    return _split(items, [sorted(m) for m in members])


def _shares(items: Sequence[ShardItem]) -> list[tuple[int, int]]:
    """Each item's wall and GPU cost as integer shares of their totals (0 where a total is 0)."""
    wall = sum(item.cost_us for item in items)
    gpu = sum(item.gpu_us for item in items)
    return [
        (item.cost_us * _SHARE // wall if wall else 0, item.gpu_us * _SHARE // gpu if gpu else 0)
        for item in items
    ]


def _plus(load: tuple[int, int], share: tuple[int, int]) -> tuple[int, int]:
    return (load[0] + share[0], load[1] + share[1])


def _minus(load: tuple[int, int], share: tuple[int, int]) -> tuple[int, int]:
    return (load[0] - share[0], load[1] - share[1])


def _peak(load: tuple[int, int]) -> int:
    return max(load)


def _improve(members, loads, shares, items) -> bool:
    """The best single move or swap between the most loaded shard and another that lowers
    the larger load of the two below the most loaded shard's; False when there is none.
    Ties: the smaller resulting load, then the cases' keys and the shard's index."""
    worst = max(range(len(loads)), key=lambda s: (_peak(loads[s]), -s))
    limit, best = _peak(loads[worst]), None
    for other in range(len(loads)):
        if other == worst:
            continue
        for i in members[worst]:
            off, on = _minus(loads[worst], shares[i]), _plus(loads[other], shares[i])
            for j in (None, *members[other]):
                left, right = (
                    (off, on) if j is None else (_plus(off, shares[j]), _minus(on, shares[j]))
                )
                peak = max(_peak(left), _peak(right))
                rank = (peak, items[i].key, () if j is None else items[j].key, other)
                if peak < limit and (best is None or rank < best[0]):
                    best = (rank, i, j, other, left, right)
    if best is None:
        return False
    _, i, j, other, loads[worst], loads[other] = best
    members[worst].remove(i)
    members[other].append(i)
    if j is not None:
        members[other].remove(j)
        members[worst].append(j)
    return True


def split_by_count(items: Sequence[ShardItem], count: int) -> Split:
    """Case i (in selection order) to shard i mod N: equal counts, costs ignored."""
    return _split(items, [list(range(shard, len(items), count)) for shard in range(count)])


SPLITTERS: Mapping[str, Callable[[Sequence[ShardItem], int], Split]] = {
    "cost": split_by_cost,
    "count": split_by_count,
}


def _split(items: Sequence[ShardItem], members: Sequence[Sequence[int]]) -> Split:
    loads = tuple(sum(items[i].cost_us for i in m) for m in members)
    gpu_loads = tuple(sum(items[i].gpu_us for i in m) for m in members)
    return Split(tuple(tuple(m) for m in members), loads, gpu_loads)


def imbalance(loads: Sequence[float]) -> float:
    """Largest shard total over the mean shard total (1.0 is perfect)."""
    mean = sum(loads) / len(loads) if loads else 0.0
    return max(loads) / mean if mean > 0 else 1.0
