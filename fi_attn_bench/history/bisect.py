"""The bisect's search: which revision between a good and a bad one made a case slower (or
faster)?  Each step compares a probed revision with both ends of the interval in interleaved
rounds of fresh runs until one side is "different" and the other "the same"
(``bisect_stats``), or the repeat budget ends: then the bisect says it cannot tell, never
guesses.  What a run is (a git worktree, a wheel in a virtual environment, a stand-in in the
tests) is the ``Prober``'s business."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol

from fi_attn_bench.history.bisect_stats import (
    DEFAULT_ALPHA,
    DEFAULT_INTERVAL,
    DEFAULT_SAME_INTERVAL,
    DEFAULT_TRIM,
    SIGNED_RANK,
    Comparison,
    Verdict,
    compare,
    fewest_repeats_for,
    verdict,
)

EXIT_FOUND, EXIT_CANNOT_TELL = 0, 3
ENDPOINT_FAILURES_ALLOWED = 3  # runs of an end that may fail within one step before it stops


class ProbeFailed(Exception):
    """A revision that does not build or run (skipped, as ``git bisect skip``)."""


class CaseNotFound(ProbeFailed):
    """The run finished, but its output holds no (or more than one) case matching --case."""


@dataclass(frozen=True)
class Revision:
    """One point of the bisected line: a commit, or a wheel's version."""

    key: str  # full commit hash or wheel file name: what the prober checks out
    label: str  # what reports show: a short hash and subject, or a version
    recorded: str = ""  # what the store records as its runs' commit (default: the key)

    @property
    def commit(self) -> str:
        return self.recorded or self.key

    def __str__(self) -> str:
        return self.label


class Prober(Protocol):
    def prepare(self, revision: Revision) -> None:
        """Check out or install the revision and run it once (not counted: the first run
        compiles and fills caches); ProbeFailed when it does not build or run."""

    def measure(self, revision: Revision) -> float:
        """One fresh run; the case's time in ms, or ProbeFailed."""

    def release(self, revision: Revision) -> None:
        """The revision is no longer an end of the interval: its checkout may go."""


@dataclass(frozen=True)
class BisectSettings:
    alpha: float = DEFAULT_ALPHA
    confidence: float = DEFAULT_INTERVAL
    same_confidence: float = DEFAULT_SAME_INTERVAL
    max_repeats: int = 100  # runs of each revision within one step
    min_change_pct: float = 1.0  # good and bad closer than this are "the same"
    seed: int = 0
    test: str = SIGNED_RANK
    trim: float = DEFAULT_TRIM  # signed-rank only: pairs beyond this many median |log ratio|

    @property
    def min_repeats(self) -> int:
        return min(self.max_repeats, fewest_repeats_for(self.alpha, self.test))

    def compare(self, first: dict[int, float], second: dict[int, float]) -> Comparison:
        """Two revisions' runs by round: the signed-rank test pairs the rounds both ran in."""
        if self.test == SIGNED_RANK:
            shared = sorted(set(first) & set(second))
            first_values, second_values = [first[r] for r in shared], [second[r] for r in shared]
        else:
            first_values, second_values = list(first.values()), list(second.values())
        return compare(
            first_values,
            second_values,
            self.confidence,
            self.test,
            self.same_confidence,
            self.trim,
        )


class Outcome(Enum):
    FOUND = "found"
    CANNOT_TELL = "cannot tell"  # also when good and bad measure the same: nothing to name


@dataclass(frozen=True)
class Step:
    """One step's evidence: the probed revision against the interval's ends."""

    good: Revision
    bad: Revision
    probe: Revision | None  # None: the first step, good against bad
    outcome: str  # good, bad, skipped, different, same, undecided
    against_good: Comparison | None = None  # good -> probe (or good -> bad in the first step)
    against_bad: Comparison | None = None  # bad -> probe
    rounds: int = 0
    note: str = ""

    def describe(self) -> str:
        if self.probe is None:
            head = f"good {self.good} vs bad {self.bad}: {self.outcome}"
            return f"{head}\n    {self.against_good.describe()}" if self.against_good else head
        head = f"probe {self.probe} (between {self.good} and {self.bad}): {self.outcome}"
        if self.note:
            head += f" ({self.note})"
        lines = [head]
        if self.against_good is not None:
            lines.append(f"    vs good {self.against_good.describe()}")
        if self.against_bad is not None:
            lines.append(f"    vs bad  {self.against_bad.describe()}")
        return "\n".join(lines)


@dataclass(frozen=True)
class BisectResult:
    outcome: Outcome
    last_good: Revision
    first_bad: Revision  # FOUND: the culprit; CANNOT_TELL: the end of the undecided range
    steps: tuple[Step, ...]
    skipped: tuple[Revision, ...]
    probes: int  # distinct revisions run
    reason: str = ""

    @property
    def exit_code(self) -> int:
        return EXIT_FOUND if self.outcome is Outcome.FOUND else EXIT_CANNOT_TELL

    def summary(self) -> str:
        if self.outcome is Outcome.FOUND:
            return f"first bad revision: {self.first_bad} (last good: {self.last_good})"
        return f"cannot tell between {self.last_good} and {self.first_bad}: {self.reason}"


class EndpointFailed(Exception):
    """The good or the bad end itself does not run (bad input at the start)."""

    def __init__(self, which: str, revision: Revision, cause: ProbeFailed):
        super().__init__(f"{which} revision {revision}: {cause}")
        self.cause = cause


@dataclass
class _Search:
    revisions: Sequence[Revision]
    prober: Prober
    settings: BisectSettings
    on_step: Callable[[Step], None]
    rng: random.Random = field(init=False)
    steps: list[Step] = field(default_factory=list)
    skipped: set[int] = field(default_factory=set)
    probed: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.settings.seed)

    def record(self, step: Step) -> None:
        self.steps.append(step)
        self.on_step(step)

    def rounds(self, positions: Sequence[int], decide) -> tuple[object, dict, int]:
        """Interleaved rounds (a fresh order each round) until ``decide(samples)`` returns a
        decision or the budget ends; samples are per position, by round.  ProbeFailed from a
        non-end position propagates."""
        samples: dict[int, dict[int, float]] = {position: {} for position in positions}
        failures: dict[int, int] = dict.fromkeys(positions, 0)
        ends = {positions[0], positions[-1]}
        for round_number in range(1, self.settings.max_repeats + 1):
            order = list(positions)
            self.rng.shuffle(order)
            for position in order:
                try:
                    samples[position][round_number] = self.prober.measure(self.revisions[position])
                except ProbeFailed:
                    if position not in ends:
                        raise
                    failures[position] += 1
                    if failures[position] > ENDPOINT_FAILURES_ALLOWED:
                        return "end failed", samples, round_number
            sizes = [len(values) for values in samples.values()]
            if min(sizes) >= self.settings.min_repeats:
                decision = decide(samples)
                if decision is not None:
                    return decision, samples, round_number
        return None, samples, self.settings.max_repeats

    def prepare(self, position: int) -> None:
        self.probed.add(position)
        self.prober.prepare(self.revisions[position])

    def run(self) -> BisectResult:
        lo, hi = 0, len(self.revisions) - 1
        for which, position in (("good", lo), ("bad", hi)):
            try:
                self.prepare(position)
            except ProbeFailed as exc:
                raise EndpointFailed(which, self.revisions[position], exc) from None
        margin = self.first_step(lo, hi)
        if margin is None:
            return self.result(self.steps[-1], lo, hi)
        while hi - lo > 1:
            candidates = [p for p in range(lo + 1, hi) if p not in self.skipped]
            if not candidates:
                return self.finish(
                    Outcome.CANNOT_TELL,
                    lo,
                    hi,
                    f"every revision between them was skipped ({len(self.skipped)} skipped)",
                )
            middle = min(candidates, key=lambda p: (abs(p - (lo + hi) / 2), p))
            outcome = self.probe_step(lo, middle, hi, margin)
            if outcome == "good":
                self.release(lo, keep=(middle, hi))
                lo = middle
            elif outcome == "bad":
                self.release(hi, keep=(lo, middle))
                hi = middle
            elif outcome == "skipped":
                self.skipped.add(middle)
                self.release(middle, keep=(lo, hi))
            else:
                return self.finish(Outcome.CANNOT_TELL, lo, hi, outcome)
        return self.finish(Outcome.FOUND, lo, hi)

    def release(self, position: int, keep: tuple[int, ...]) -> None:
        if position not in keep:
            self.prober.release(self.revisions[position])

    def first_step(self, lo: int, hi: int) -> float | None:
        """Good against bad; the margin of "the same" for the probes (half the measured change
        in log time), or None when the bisect ends here."""
        min_change = math.log1p(self.settings.min_change_pct / 100)

        def decide(samples):
            comparison = self.settings.compare(samples[lo], samples[hi])
            decided = verdict(comparison, self.settings.alpha, min_change)
            return None if decided is Verdict.UNDECIDED else (decided, comparison)

        decision, samples, rounds = self.rounds([lo, hi], decide)
        good, bad = self.revisions[lo], self.revisions[hi]
        if decision is None or decision == "end failed":
            comparison = self.settings.compare(samples[lo], samples[hi])
            note = "a run of good or bad kept failing" if decision else "repeat budget ended"
            self.record(Step(good, bad, None, "undecided", comparison, rounds=rounds, note=note))
            return None
        decided, comparison = decision
        outcome = "different" if decided is Verdict.DIFFERENT else "same"
        self.record(Step(good, bad, None, outcome, comparison, rounds=rounds))
        if decided is Verdict.SAME:
            return None
        return abs(math.log(comparison.estimate.ratio)) / 2

    def probe_step(self, lo: int, middle: int, hi: int, first_margin: float) -> str:
        good, bad, probe = self.revisions[lo], self.revisions[hi], self.revisions[middle]
        try:
            self.prepare(middle)
        except ProbeFailed as exc:
            self.record(Step(good, bad, probe, "skipped", note=str(exc)))
            return "skipped"
        alpha = self.settings.alpha

        def comparisons(samples):
            return (
                self.settings.compare(samples[lo], samples[middle]),
                self.settings.compare(samples[hi], samples[middle]),
            )

        def decide(samples):
            """Different from one end at alpha, and the same as the other: its interval
            within half the step the ends show in this step's own rounds."""
            against_good, against_bad = comparisons(samples)
            step = self.settings.compare(samples[lo], samples[hi])
            half_step = max(abs(math.log(step.estimate.ratio)), first_margin * 2) / 2
            to_good = verdict(against_good, alpha, half_step)
            to_bad = verdict(against_bad, alpha, half_step)
            if to_good is Verdict.SAME and to_bad is Verdict.DIFFERENT:
                return "good"
            if to_good is Verdict.DIFFERENT and to_bad is Verdict.SAME:
                return "bad"
            return None

        try:
            decision, samples, rounds = self.rounds([lo, middle, hi], decide)
        except ProbeFailed as exc:
            self.record(Step(good, bad, probe, "skipped", note=f"a run failed: {exc}"))
            return "skipped"
        against_good, against_bad = comparisons(samples)
        if decision is None or decision == "end failed":
            note = "a run of an end kept failing" if decision else "repeat budget ended"
            self.record(
                Step(good, bad, probe, "undecided", against_good, against_bad, rounds, note)
            )
            return f"step undecided at {probe} ({note})"
        self.record(Step(good, bad, probe, decision, against_good, against_bad, rounds))
        return decision

    def result(self, last: Step, lo: int, hi: int) -> BisectResult:
        if last.outcome == "same":
            within = self.settings.min_change_pct
            return self.finish(
                Outcome.CANNOT_TELL, lo, hi, f"good and bad measure the same (within {within:g} %)"
            )
        return self.finish(Outcome.CANNOT_TELL, lo, hi, f"good against bad: {last.note}")

    def finish(self, outcome: Outcome, lo: int, hi: int, reason: str = "") -> BisectResult:
        return BisectResult(
            outcome=outcome,
            last_good=self.revisions[lo],
            first_bad=self.revisions[hi],
            steps=tuple(self.steps),
            skipped=tuple(self.revisions[p] for p in sorted(self.skipped)),
            probes=len(self.probed),
            reason=reason,
        )


def bisect(
    revisions: Sequence[Revision],
    prober: Prober,
    settings: BisectSettings = BisectSettings(),
    on_step: Callable[[Step], None] = lambda step: None,
) -> BisectResult:
    """Search ``revisions`` (good first, bad last, in order) for the first bad one."""
    if len(revisions) < 2:
        raise ValueError("a bisect needs a good and a bad revision")
    return _Search(revisions, prober, settings, on_step).run()
