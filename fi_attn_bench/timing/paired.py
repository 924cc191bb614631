"""Head to head: several implementations of one case measured in interleaved rounds.

Each round gives every implementation one batch of calls, in alternating order (A B, B A,
A B, ...), on the same inputs and with the same L2 treatment, so a drift of clocks, power
or temperature hits all of them alike.  The per-round ratio (round median of an
implementation / round median of the baseline), combined over each pair of rounds (A B then
B A) by its geometric mean, cancels that drift and what running first or second in a round
does to a batch; the median over the pairs, with a distribution-free 95 % interval, is the
paired ratio.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from fi_attn_bench.timing.conditions import BatchWatch, KeepEveryBatch
from fi_attn_bench.timing.energy import EnergyRecorder, round_energy_per_call
from fi_attn_bench.timing.loop import (
    PhaseClock,
    _enough_samples,
    _measurement,
    batch_calls,
    gc_paused,
    kept_batches,
    should_stop,
    sustain,
    warm_up,
)
from fi_attn_bench.timing.options import TimingOptions
from fi_attn_bench.timing.statistics import Batch, Measurement, clamp, quantile
from fi_attn_bench.timing.timers import Timer, TimerSession

ROUNDS_TARGET = 20  # rounds the min-time window is cut into (each impl's batch ~ 1/20 of it)
MIN_ROUNDS = 12  # the stop rule waits for these: 6 pairs, the fewest with a 95 % interval
MIN_ENERGY_PAIRS = 3  # pairs of rounds long enough for the counter behind an energy ratio
MIN_ROUND_CALLS = 3  # calls per impl per round at least: a round median needs some
CONFIDENCE = 0.95
SLOWER, FASTER, SAME = "slower", "faster", "same"


@dataclass(frozen=True)
class Contender:
    """One implementation entering ``measure_paired``: its run() and its correctness check."""

    fn: Callable[[], object]
    after_warm_up: Callable[[], object] = lambda: None
    timed_fn: Callable[[], object] | None = None  # what the timer calls (default fn)
    # checks after the rounds (the integrity checks): phase by phase over every contender
    audits: Sequence[Callable[[object, Measurement], None]] = ()


@dataclass(frozen=True)
class PairedRatio:
    """One implementation against the baseline: median of the per-pair-of-rounds ratios, the
    rounds they came from, and the median's interval (None with fewer than 6 pairs)."""

    ratio: float
    rounds: int
    interval: tuple[float, float] | None
    same_within_pct: float = 0.0

    @property
    def verdict(self) -> str:
        """faster / slower when the whole interval lies beyond 1 -+ same_within_pct %, else
        same ("" without interval)."""
        if self.interval is None:
            return ""
        low, high = self.interval
        margin = self.same_within_pct / 100.0
        return SLOWER if low > 1.0 + margin else FASTER if high < 1.0 - margin else SAME

    def slower_beyond(self, pct: float) -> bool:
        """Slower than the baseline by more than ``pct`` %, the interval excluding it."""
        return self.interval is not None and self.interval[0] > 1.0 + pct / 100.0

    def half_width_pct(self) -> float:
        if self.interval is None or self.ratio <= 0:
            return math.inf
        return (self.interval[1] - self.interval[0]) / 2.0 / self.ratio * 100.0

    def energy_columns(self) -> dict[str, object]:
        """The ratio as the paired energy ratio's columns (energy per call against the
        baseline's)."""
        low, high = self.interval or (None, None)
        return {
            "paired_energy_ratio": self.ratio,
            "paired_energy_ratio_lo": low,
            "paired_energy_ratio_hi": high,
        }

    def columns(self, baseline: str) -> dict[str, object]:
        low, high = self.interval or (None, None)
        return {
            "baseline_impl": baseline,
            "paired_rounds": self.rounds,
            "paired_ratio": self.ratio,
            "paired_ratio_lo": low,
            "paired_ratio_hi": high,
            "paired_verdict": self.verdict or None,
        }


@dataclass(frozen=True)
class PairedOutcome:
    """What ``measure_paired`` gave, per contender (same order): its measurement or the
    error that stopped it, its per-round medians, and its paired ratio against the
    baseline (None for the baseline itself, for a failed one, or when the baseline failed)."""

    measurements: tuple[Measurement | None, ...]
    errors: tuple[Exception | None, ...]
    round_medians: tuple[tuple[float, ...], ...]
    ratios: tuple[PairedRatio | None, ...]
    # The same estimator over each round's energy per call (None: no ratio, see the notes)
    energy_ratios: tuple[PairedRatio | None, ...] = ()
    energy_notes: tuple[str, ...] = ()


def _binomial_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n


def median_interval_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """1-based ranks (k, n + 1 - k) of the order statistics bounding the median with at
    least ``confidence`` coverage whatever the distribution (the sign-test interval);
    None when even (1, n) covers less (n < 6 for 95 %)."""
    alpha = (1.0 - confidence) / 2.0
    best = None
    for k in range(1, n // 2 + 1):
        if _binomial_cdf(k - 1, n) <= alpha:
            best = k
        else:
            break
    return None if best is None else (best, n + 1 - best)


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE):
    """The distribution-free interval of the median of ``values`` (None: too few)."""
    ranks = median_interval_ranks(len(values), confidence)
    if ranks is None:
        return None
    ordered = sorted(values)
    return ordered[ranks[0] - 1], ordered[ranks[1] - 1]


def pair_ratios(values: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Per pair of consecutive rounds (0 1, 2 3, ...: run A B then B A), the geometric mean of
    the two rounds' ``values / baseline``: the order effect and a linear drift over the
    pair's batches cancel inside it.  An odd last round has no partner and is left out."""
    ratios = [v / b if b > 0 else math.nan for v, b in zip(values, baseline, strict=True)]
    pairs = (ratios[i : i + 2] for i in range(0, len(ratios) - 1, 2))
    return [math.sqrt(first * second) for first, second in pairs if first > 0 and second > 0]


def paired_ratio(
    values: Sequence[float], baseline: Sequence[float], same_within_pct: float = 0.0
) -> PairedRatio | None:
    """Median over pairs of rounds of ``pair_ratios`` with its interval; None under one pair."""
    ratios = pair_ratios(values, baseline)
    if not ratios:
        return None
    median = quantile(sorted(ratios), 0.5)
    return PairedRatio(median, 2 * len(ratios), median_interval(ratios), same_within_pct)


def round_order(index: int, count: int) -> tuple[int, ...]:
    """Contenders' order in round ``index``: forward in even rounds, reversed in odd ones
    (A B | B A | A B ...), so neither always runs first after the other."""
    order = tuple(range(count))
    return order if index % 2 == 0 else order[::-1]


def round_options(options: TimingOptions) -> TimingOptions:
    """Batch sizing for one impl's share of a round: about 1/ROUNDS_TARGET of the min-time
    window (without one, the CPU: of half the per-impl budget), at least MIN_ROUND_CALLS calls."""
    window_ms = options.min_time_ms or options.max_time_s * 1e3 / 2.0
    target = min(options.batch_target_ms, window_ms / ROUNDS_TARGET)
    return replace(options, batch_target_ms=target, min_batch_calls=MIN_ROUND_CALLS)


def round_calls(per_call_ms: float, remaining_s: float, wall_ms: float, options) -> int:
    """Calls in one impl's batch of a round (``round_options`` already applied); short calls
    that stop at ``enough_samples`` spread them over ROUNDS_TARGET rounds."""
    calls = batch_calls(per_call_ms, remaining_s, wall_ms, options)
    if per_call_ms < options.enough_samples_below_ms:
        calls = min(calls, max(MIN_ROUND_CALLS, math.ceil(options.enough_samples / ROUNDS_TARGET)))
    return clamp(calls, 1, options.max_batch_calls)


@dataclass
class PairedLoop:
    """The interleaved rounds of the alive contenders (tests swap ``clock`` and the timer)."""

    options: TimingOptions
    baseline: int  # position among the sessions, or -1 when the baseline is not among them
    clock: Callable[[], float] = time.perf_counter
    phases: PhaseClock = field(default_factory=PhaseClock)
    order: list[int] = field(default_factory=list)  # session of every batch, in order
    kept: list[bool] = field(default_factory=list)  # per round: what the watch said

    def run(
        self,
        sessions: Sequence[TimerSession],
        estimates: Sequence[float],
        timer: Timer,
        watch: BatchWatch | None = None,
        energies: Sequence[EnergyRecorder | None] = (),
    ) -> list[list[Batch]]:
        """Each session's batches, one per round, in round order, over whole pairs of rounds
        (every round: ``kept`` says which the throttle policy keeps).  ``watch`` reads the
        device after each whole round, so a throttled round is dropped for every contender."""
        watch = watch or KeepEveryBatch()
        count = len(sessions)
        batches: list[list[Batch]] = [[] for _ in sessions]
        sizing = round_options(self.options)
        budget_s = self.options.max_time_s * count
        start = self.clock()

        def loop() -> list[int]:
            rounds = 0
            watch.batches_start()
            while True:
                for index in round_order(rounds, count):
                    batches[index].append(
                        self._batch(
                            sessions[index],
                            estimates[index],
                            batches[index],
                            sizing,
                            budget_s - (self.clock() - start),
                            energies[index] if energies else None,
                        )
                    )
                    self.order.append(index)
                rounds += 1
                self.kept.append(watch.batch_done())
                if rounds % 2:  # the ratio is taken over whole pairs of rounds (A B, B A)
                    continue
                kept = [kept_rounds(found, self.kept) for found in batches]
                if self._stop(kept, sessions, self.clock() - start, budget_s):
                    return self.order

        with gc_paused():
            began = self.clock()
            try:
                recorded = timer.record_rounds(sessions, loop)
            finally:
                for energy in energies:
                    if energy is not None:
                        energy.finish()
            body = self.clock() - began
        if recorded is not None:
            batches = [list(found) for found in recorded]
        self.phases.add("timing", body)
        return batches

    @staticmethod
    def _batch(session, estimate, done, sizing, remaining_s, energy=None) -> Batch:
        runs = session.runs_per_sample
        samples = sorted(s for batch in done for s in batch.samples_ms)
        per_call = max(quantile(samples, 0.5), 1e-6) if samples else estimate
        calls = round_calls(per_call * runs, remaining_s, estimate * runs, sizing)
        if energy is None:
            return session.batch(calls)
        energy.start()
        batch = session.batch(calls)
        energy.stop(calls * runs)
        return batch

    def _stop(self, batches, sessions, elapsed_s: float, budget_s: float) -> bool:
        if elapsed_s >= budget_s:
            return True
        if len(batches[0]) < MIN_ROUNDS:
            return False
        for found, session in zip(batches, sessions, strict=True):
            if not self._enough(found, session.runs_per_sample):
                return False
        if not 0 <= self.baseline < len(batches) or len(batches) == 1:
            alone = [s for batch in batches[0] for s in batch.samples_ms]
            return should_stop(alone, 0.0, self.options, sessions[0].runs_per_sample)
        medians = [_round_medians(found) for found in batches]
        for index, values in enumerate(medians):
            if index == self.baseline:
                continue
            ratio = paired_ratio(values, medians[self.baseline])
            if ratio is None or ratio.half_width_pct() > self.options.noise_target_pct:
                return False
        return True

    def _enough(self, found: Sequence[Batch], runs: int) -> bool:
        """The usual minimum per impl: min_samples, and min_time of timed GPU time or
        (short calls) enough_samples."""
        samples = [s for batch in found for s in batch.samples_ms]
        if len(samples) < self.options.min_samples:
            return False
        return sum(samples) * runs >= self.options.min_time_ms or _enough_samples(
            samples, self.options
        )


def kept_rounds(found: Sequence[Batch], kept: Sequence[bool]) -> list[Batch]:
    """One session's batches of the rounds the watch kept (``kept_in_pairs``): what the stop
    rule sees, as the single loop's stop hook sees only kept samples."""
    return [batch for batch, keep in zip(found, kept_in_pairs(kept), strict=True) if keep]


def kept_in_pairs(kept: Sequence[bool]) -> list[bool]:
    """The watch's judgement per round, a round dropped with its partner (0 1, 2 3, ...), so
    the kept rounds still pair A B with B A; a last round without partner keeps its own."""
    return [kept[i] and kept[i ^ 1] if i ^ 1 < len(kept) else kept[i] for i in range(len(kept))]


def throttle_filter(
    found: Sequence[Sequence[Batch]], kept: Sequence[bool]
) -> tuple[list[list[Batch]], bool]:
    """Every session's batches of the kept rounds, and whether the rounds could be judged;
    the same rounds go for all sessions (``kept_batches``' rules), none where a recording's
    batches cannot be matched with the rounds."""
    if any(len(batches) != len(kept) for batches in found):
        return [list(batches) for batches in found], False
    pairs = kept_in_pairs(kept)
    return [kept_batches(batches, pairs)[0] for batches in found], True


def _round_medians(batches: Sequence[Batch]) -> tuple[float, ...]:
    return tuple(quantile(sorted(batch.samples_ms), 0.5) for batch in batches)


def _prepare_each(contenders, timer, options, clock, phases):
    """Warm up and check each contender; (estimates, errors) with None where it failed."""
    estimates: list[float | None] = []
    errors: list[Exception | None] = []
    for contender in contenders:
        try:
            estimate = phases.run(
                "warm-up", lambda c=contender: warm_up(c.fn, timer.sync, options, clock)
            )
            phases.run("check", contender.after_warm_up)
        except Exception as exc:  # noqa: BLE001 - one impl's failure is its row's, not the case's
            estimates.append(None)
            errors.append(exc)
        else:
            estimates.append(estimate)
            errors.append(None)
    return estimates, errors


def _open_each(fns, estimates, timer, errors, phases) -> list[TimerSession | None]:
    sessions: list[TimerSession | None] = []
    for index, (fn, estimate) in enumerate(zip(fns, estimates, strict=True)):
        if errors[index] is not None:
            sessions.append(None)
            continue
        try:
            sessions.append(phases.run("calibrate", lambda f=fn, e=estimate: timer.open(f, e)))
        except Exception as exc:  # noqa: BLE001 - e.g. a plugin a CUDA graph cannot capture
            errors[index] = exc
            sessions.append(None)
    return sessions


def measure_paired(
    contenders: Sequence[Contender],
    timer: Timer,
    options: TimingOptions,
    baseline: int = 0,  # position among ``contenders``; -1: not among them (it failed before)
    clock: Callable[[], float] = time.perf_counter,
    phases: PhaseClock | None = None,
    watch: BatchWatch | None = None,
    energies: Sequence[EnergyRecorder | None] = (),
) -> PairedOutcome:
    """Set the timer up; warm up and check each contender; open a session for each that
    passed; hold the GPU at steady state with all of them in turn; then interleaved rounds
    until the stop rule (each impl's usual minimum, then the paired ratios' intervals within
    the noise target) or the budget (``max_time_s`` per contender).  A contender whose
    warm-up, check or session fails gets its error; the others go on.  ``watch`` judges
    each round (the throttle policy): a throttled round's batches are dropped for all.
    ``energies`` (one recorder per contender, or none) read the energy counter around each
    batch: each contender's energy per call and the paired energy ratios."""
    phases = phases or PhaseClock(clock=clock)
    phases.run("set-up", timer.set_up)
    estimates, errors = _prepare_each(contenders, timer, options, clock, phases)
    sessions = _open_each(
        [c.timed_fn or c.fn for c in contenders], estimates, timer, errors, phases
    )
    alive = [i for i, session in enumerate(sessions) if session is not None]
    measurements: list[Measurement | None] = [None] * len(contenders)
    medians: list[tuple[float, ...]] = [()] * len(contenders)
    if alive:
        try:
            phases.run("calibrate", lambda: timer.calibrate_rounds([sessions[i] for i in alive]))
        except Exception as exc:  # noqa: BLE001 - the rounds cannot be told apart: all fail
            return _all_failed(contenders, errors, alive, exc)
        together = lambda: [contenders[i].fn() for i in alive]  # noqa: E731
        total = sum(estimates[i] for i in alive)
        phases.run("sustain", lambda: sustain(together, timer, options, total, clock))
        loop = PairedLoop(
            options, alive.index(baseline) if baseline in alive else -1, clock, phases
        )
        recorders = [energies[i] for i in alive] if energies else []
        found = loop.run(
            [sessions[i] for i in alive], [estimates[i] for i in alive], timer, watch, recorders
        )
        kept, judged = throttle_filter(found, loop.kept)
        pairs = kept_in_pairs(loop.kept)  # what throttle_filter kept, with partner rounds
        for position, index in enumerate(alive):
            runs = sessions[index].runs_per_sample
            throttled = _samples_in(found[position], loop.kept) if judged else 0
            dropped = 0
            if len(kept[position]) < len(found[position]):
                dropped = _samples_in(found[position], pairs)
            energy = recorders[position].estimate(pairs) if recorders else None
            measurements[index] = _measurement(
                kept[position], timer, runs, throttled, dropped, energy
            )
            medians[index] = _round_medians(kept[position])
        _audit_each(contenders, sessions, measurements, errors, phases)
    has_baseline = 0 <= baseline < len(contenders) and measurements[baseline] is not None
    ratios = tuple(
        paired_ratio(medians[i], medians[baseline], options.same_within_pct)
        if has_baseline and i != baseline and measurements[i] is not None
        else None
        for i in range(len(contenders))
    )
    energy_ratios, energy_notes = _energy_ratios(
        energies, measurements, baseline, _timed_rounds(loop.kept, judged) if alive else [], options
    )
    return PairedOutcome(
        tuple(measurements), tuple(errors), tuple(medians), ratios, energy_ratios, energy_notes
    )


def _audit_each(contenders, sessions, measurements, errors, phases) -> None:
    """Each contender's audits, phase by phase (one phase of every contender before the
    next); a contender whose audit fails loses its measurement and gets the error."""
    phases_count = max((len(c.audits) for c in contenders), default=0)
    for phase in range(phases_count):
        for index, contender in enumerate(contenders):
            if measurements[index] is None or phase >= len(contender.audits):
                continue
            audit = contender.audits[phase]
            try:
                phases.run("integrity", lambda: audit(sessions[index], measurements[index]))  # noqa: B023
            except Exception as exc:  # noqa: BLE001 - this contender's row fails, the others go on
                measurements[index], errors[index] = None, exc


def _timed_rounds(kept: Sequence[bool], judged: bool) -> list[bool]:
    """Which rounds the time ratio came from (``throttle_filter``'s choice)."""
    pairs = kept_in_pairs(kept)
    if not judged or all(pairs) or not any(pairs):
        return [True] * len(kept)
    return pairs


def _energy_ratios(energies, measurements, baseline, rounds, options):
    """Per contender, the paired energy ratio against the baseline over the rounds the time
    ratio used, or a note where the counter cannot give one."""
    count = len(measurements)
    ratios: list[PairedRatio | None] = [None] * count
    notes = [""] * count
    if not energies or not 0 <= baseline < count:
        return tuple(ratios), tuple(notes)
    base = energies[baseline]
    if measurements[baseline] is None or base is None:
        return tuple(ratios), tuple(notes)
    for index in range(count):
        if index == baseline or measurements[index] is None or energies[index] is None:
            continue
        found = _energy_ratio(energies[index], base, rounds, options.same_within_pct)
        if isinstance(found, str):
            notes[index] = f"paired energy ratio: {found}"
        else:
            ratios[index] = found
    return tuple(ratios), tuple(notes)


def _energy_ratio(recorder, base, rounds, same_within_pct) -> PairedRatio | str:
    """``paired_ratio`` of each round's energy per call over the pairs of rounds long enough
    for the counter (a budget cut shortens the last ones), or why there is none."""
    if recorder.note or base.note:
        return recorder.note or base.note
    chosen = [_chosen(found.batches, rounds) for found in (recorder, base)]
    shortest = max(recorder.round_s, base.round_s)
    values, baseline = _long_pairs(chosen, shortest)
    if len(values) < 2 * MIN_ENERGY_PAIRS:
        pairs = min(len(found) for found in chosen) // 2
        return (
            f"{len(values) // 2} of {pairs} pairs of rounds lasted the {shortest * 1e3:.0f} ms "
            f"the energy counter needs, under {MIN_ENERGY_PAIRS} (a larger --min-time-ms makes "
            "longer rounds)"
        )
    values, baseline = round_energy_per_call(values), round_energy_per_call(baseline)
    if values is None or baseline is None:
        return "the energy counter did not advance or could not be read in a round"
    ratio = paired_ratio(values, baseline, same_within_pct)
    return ratio if ratio is not None else "too few rounds"


def _long_pairs(chosen, shortest_s: float) -> tuple[list, list]:
    """Both contenders' batches of the pairs of rounds in which every batch lasted at least
    ``shortest_s`` (pairs stay whole: the ratio is taken over A B / B A)."""
    kept: tuple[list, list] = ([], [])
    mine, theirs = chosen
    for start in range(0, min(len(mine), len(theirs)) - 1, 2):
        pair = (mine[start : start + 2], theirs[start : start + 2])
        if all(batch.wall_s >= shortest_s for batches in pair for batch in batches):
            kept[0].extend(pair[0])
            kept[1].extend(pair[1])
    return kept


def _chosen(batches, rounds):
    return [batch for batch, keep in zip(batches, rounds, strict=False) if keep]


def _samples_in(batches: Sequence[Batch], kept: Sequence[bool]) -> int:
    """The samples of one session's rounds that ``kept`` leaves out."""
    return sum(len(b.samples_ms) for b, keep in zip(batches, kept, strict=True) if not keep)


def _all_failed(contenders, errors, alive, exc) -> PairedOutcome:
    for index in alive:
        errors[index] = exc
    count = len(contenders)
    return PairedOutcome(
        (None,) * count, tuple(errors), ((),) * count, (None,) * count, (None,) * count
    )
