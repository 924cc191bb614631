"""What decides how a case is timed: the timing options, their choices, and timing errors."""

from __future__ import annotations

from dataclasses import dataclass

from fi_attn_bench.results.schema import CPU_TIMER  # noqa: F401 - re-exported: the timers' name for it

TIMER_NAMES = ("cupti", "profiler", "cuda_graph", "events")  # GPU timers a user may pick


ATTRIBUTIONS = ("auto", "sum", "span", "stream")


STOP_RULES = ("spread", "median_ci")


THROTTLE_POLICIES = ("off", "discard", "pause")  # see fi_attn_bench.timing.conditions


class TimingError(RuntimeError):
    """The timer could not produce a trustworthy sample."""


class NoKernelCaptured(TimingError):
    """The profiler saw no GPU kernel for run(): never report such a case as a time."""


@dataclass(frozen=True)
class TimingOptions:
    """Everything that decides how a case is timed (one value per sweep)."""

    timer: str = "profiler"
    l2: str = "cold"
    kernel_pattern: str | None = None
    # Per-call sample from the profiler: "sum" of kernel durations; "span", first start ->
    # last end; "stream", end of the GPU work before the call (its L2 flush) -> last end: the
    # time the call held the stream, launch gaps between dependent kernels included.
    # "auto" is stream when L2 is cold and sum when warm (back-to-back warm calls of small
    # cases outrun the CPU's launches, so anything but the sum would count host gaps).
    attribution: str = "auto"
    # Noise judged as the median's 95% interval (shrinks with samples, so jittery short
    # kernels stop early) or as the samples' IQR/median (does not shrink with samples).
    stop_rule: str = "median_ci"
    noise_target_pct: float = 1.0
    # Head to head: an impl is called faster or slower only when its paired ratio's whole
    # interval lies beyond +-same_within_pct % (Criterion's noise threshold): A/A runs, even of
    # one instance against itself, had intervals that excluded 1 by up to 0.16 %.
    same_within_pct: float = 0.25
    min_samples: int = 10
    max_time_s: float = 2.0  # per-case budget of the measurement loop (wall clock)
    warmup_min_calls: int = 3
    # The sustain phase that follows holds the clocks steady; warm-up only absorbs JIT and
    # first-call costs and estimates the time per call.
    warmup_min_ms: float = 10.0
    warmup_max_ms: float = 250.0
    batch_target_ms: float = 50.0  # GPU time per batch: how often the stop hook looks
    # Back-to-back calls before timing, so that clocks and power reach the steady state a
    # busy server sees: a GPU fresh from idle runs a compute-bound kernel ~10% faster for
    # the first tens of ms.
    sustain_ms: float = 200.0
    # ... ending earlier, after at least sustain_min_ms, once the last SUSTAIN_STEADY_CHUNKS
    # chunks of calls took GPU times within sustain_steady_pct of each other: a GPU that
    # the previous case kept busy is already there.
    sustain_min_ms: float = 50.0
    sustain_steady_pct: float = 1.0
    # The stop hook waits until the timed calls add up to this much GPU time (nvbench's
    # --min-time default, 0.5 s): a long case's samples cost little besides their own GPU
    # time, so it takes more of them (sweep-to-sweep CV of large prefill and MLA) ...
    min_time_ms: float = 500.0
    # ... or until this many samples are in: each costs a flush and its trace reading
    # (~0.1 ms of host time), which a 15 us case would otherwise pay 30,000 times ...
    enough_samples: int = 1000
    # ... for a case whose calls are shorter than this (ms): a longer call's sample costs
    # less host time than GPU time, so it always waits for min_time_ms (a shorter window
    # catches a random mix of a power-limited GPU's clock states).
    enough_samples_below_ms: float = 0.1
    min_batch_calls: int = 10
    max_batch_calls: int = 1000
    graph_target_ms: float = 2.0  # GPU time of one CUDA-graph replay
    max_graph_calls: int = 100
    launch_cover_cycles: int = 200_000  # events + warm L2: GPU spin before each call hides launch
    # Cold L2: a spin kernel ahead of each batch, long enough for the CPU to queue the whole
    # batch before the GPU reaches it, so no timed call waits for its own launch.
    queue_ahead_min_ms: float = 0.05
    queue_ahead_max_ms: float = 20.0
    verbose: bool = False
    # Throttle policy (nvbench's): a batch during which the SM clock read below
    # throttle_threshold_pct of the maximum has its samples discarded ("discard"), and the
    # GPU rests cooldown_ms before the next batch as well ("pause").
    throttle_policy: str = "off"
    throttle_threshold_pct: float = 75.0
    cooldown_ms: float = 50.0

    @property
    def effective_attribution(self) -> str:
        """The attribution "auto" resolves to for this L2 mode."""
        if self.attribution != "auto":
            return self.attribution
        return "stream" if self.l2 == "cold" else "sum"

    def __post_init__(self):
        if self.attribution not in ATTRIBUTIONS:
            raise ValueError(f"attribution must be one of {', '.join(ATTRIBUTIONS)}")
        if self.stop_rule not in STOP_RULES:
            raise ValueError(f"stop_rule must be one of {', '.join(STOP_RULES)}")
        if self.throttle_policy not in THROTTLE_POLICIES:
            raise ValueError(f"throttle_policy must be one of {', '.join(THROTTLE_POLICIES)}")
        if not 0 < self.throttle_threshold_pct <= 100 or self.cooldown_ms < 0:
            raise ValueError("throttle threshold in (0, 100] % and cooldown >= 0 ms required")
        if self.min_samples < 1 or self.noise_target_pct <= 0 or self.max_time_s <= 0:
            raise ValueError("min_samples >= 1, noise target > 0 and time budget > 0 required")
        if self.same_within_pct < 0:
            raise ValueError("same_within_pct >= 0 required")
