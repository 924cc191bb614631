"""What a sweep prints: one line per case, an ETA, clipped errors."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from fi_attn_bench.results.schema import (
    STATUS_OK,
)
from fi_attn_bench.sweep.sharding import case_wall_s
from fi_attn_bench.timing.options import TimingOptions


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@dataclass
class Eta:
    """Time left, from each case's predicted cost, calibrated by the cases finished so far.

    A case's cost is ``sharding.case_wall_s`` of its predicted call time scaled by how much
    slower (or faster) the finished cases' calls ran than predicted; the cost still ahead is
    then scaled by the wall time the finished cases took per unit of their cost.  A count of
    cases alone said 6 s for a case that took 160 s: cases differ by orders of magnitude."""

    predicted_call_ms: Sequence[float]  # per case, in sweep order
    timing: TimingOptions
    clock: Callable[[], float] = time.monotonic
    started: float | None = None
    done: int = 0
    measured_ms: float = 0.0  # call times of the finished cases that have one
    predicted_of_measured_ms: float = 0.0  # their predicted call times

    def __post_init__(self):
        if self.started is None:
            self.started = self.clock()

    def case_finished(self, call_ms: float | None) -> None:
        """One more case done; ``call_ms``: its measured call time (None: it failed)."""
        if call_ms is not None and call_ms > 0:
            self.measured_ms += call_ms
            self.predicted_of_measured_ms += self.predicted_call_ms[self.done]
        self.done += 1

    def seconds_left(self) -> float | None:
        """None until a case finished: nothing to calibrate the prediction by."""
        if not self.done:
            return None
        scale = (
            self.measured_ms / self.predicted_of_measured_ms
            if self.predicted_of_measured_ms > 0 and self.measured_ms > 0
            else 1.0
        )
        costs = [case_wall_s(scale * ms, self.timing) for ms in self.predicted_call_ms]
        spent = sum(costs[: self.done])
        per_cost = (self.clock() - self.started) / spent if spent > 0 else 0.0
        return per_cost * sum(costs[self.done :])

    def text(self) -> str:
        left = self.seconds_left()
        return "ETA unknown" if left is None else f"ETA {_clock_text(left)}"


@dataclass
class Progress:
    """Per-case lines (stdout) and an ETA; a tqdm bar on stderr when it is a terminal."""

    total: int
    eta: Eta | None = None
    bar: object = None

    @classmethod
    def start(cls, total: int, eta: Eta | None = None) -> Progress:
        bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                # tqdm's own ETA counts cases as equal: the bar shows ours (Eta) instead.
                bar = tqdm(
                    total=total,
                    unit="case",
                    file=sys.stderr,
                    leave=False,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
                )
            except ImportError:
                bar = None
        return cls(total, eta, bar)

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def finished(self, text: str) -> None:
        """A row's line, with the ETA (of the cases ``Eta.case_finished`` counted)."""
        if self.bar is not None:
            if self.eta is not None:
                self.bar.set_postfix_str(self.eta.text(), refresh=False)
            self.bar.update(1)
            self.line(text)
        elif self.eta is not None:
            self.line(f"{text}  [{self.eta.text()}]")
        else:
            self.line(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


ERROR_KEEP_HEAD, ERROR_KEEP_TAIL = 1500, 500  # a JIT log can be megabytes; CSV readers cap fields


PRINTED_ERROR_LIMIT = 300


def clip_error(message: str) -> str:
    """The stored error: head and tail of a long message (compiler errors end with the cause)."""
    if len(message) <= ERROR_KEEP_HEAD + ERROR_KEEP_TAIL:
        return message
    cut = len(message) - ERROR_KEEP_HEAD - ERROR_KEEP_TAIL
    return (
        f"{message[:ERROR_KEEP_HEAD]} [... {cut} characters cut ...] {message[-ERROR_KEEP_TAIL:]}"
    )


def _one_line(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    more = len(first) > PRINTED_ERROR_LIMIT or first != message.strip()
    return first[:PRINTED_ERROR_LIMIT] + (" ... (full message in the CSV)" if more else "")


def summary_line(index: int, total: int, text: str, record: Mapping[str, object]) -> str:
    head = f"[{index}/{total}] {text}: "
    if record["status"] == STATUS_OK:
        twin = record.get("uniform_twin_ms")
        imbalance = (
            f"; uniform twin {twin:.3f}ms, imbalance {record['imbalance_pct']:+.1f}%"
            if isinstance(twin, float)
            else ""
        )
        return f"{head}{record['time_ms']:.3f}ms, {record['bandwidth_GB_s']:.2f} GB/s, {record['tflops']:.2f} TFLOPs{imbalance}"
    return f"{head}FAILED: {record['error_type']}: {_one_line(str(record['error']))}"
