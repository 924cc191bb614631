"""What a sweep prints: one line per case, an ETA, clipped errors."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from fi_attn_bench.results.schema import (
    STATUS_OK,
)


def _clock_text(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


@dataclass
class Progress:
    """Per-case lines (stdout) and an ETA; a tqdm bar on stderr when it is a terminal."""

    total: int
    bar: object = None
    started: float = field(default_factory=time.monotonic)
    done: int = 0

    @classmethod
    def start(cls, total: int) -> Progress:
        bar = None
        if sys.stderr.isatty():
            try:
                from tqdm import tqdm

                bar = tqdm(total=total, unit="case", file=sys.stderr, leave=False)
            except ImportError:
                bar = None
        return cls(total, bar)

    def eta(self) -> str:
        if not self.done:
            return "?"
        per_case = (time.monotonic() - self.started) / self.done
        return _clock_text(per_case * (self.total - self.done))

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=sys.stdout)
        else:
            print(text, flush=True)

    def finished(self, text: str) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.update(1)
            self.line(text)
        else:
            self.line(f"{text}  [ETA {self.eta()}]")

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
