"""The L2 flush that makes each timed call start from a cold cache."""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch

from fi_attn_bench.timing.queue import event_times

FALLBACK_L2_BYTES = 128 * 1024 * 1024  # when the device does not report its L2 size


def l2_flush_bytes(properties) -> tuple[int, str]:
    """Size of the L2 flush buffer (2x L2) and where the L2 size came from."""
    l2 = int(getattr(properties, "L2_cache_size", 0) or 0)
    if l2 > 0:
        return (
            2 * l2,
            f"L2 flush buffer {2 * l2 / 2**20:.0f} MiB (2 x reported L2 {l2 / 2**20:.1f} MiB)",
        )
    return 2 * FALLBACK_L2_BYTES, (
        f"device reports no L2 size; L2 flush buffer {2 * FALLBACK_L2_BYTES / 2**20:.0f} MiB "
        f"(2 x assumed {FALLBACK_L2_BYTES / 2**20:.0f} MiB)"
    )


class L2Flusher:
    """Evicts the L2 by writing a buffer twice its size (allocated on first use).

    Write only, a new byte value each time, as nvbench's and flashinfer.testing's flush: it
    leaves the L2 as full of dirty lines as read+write does, in about half the GPU time.
    """

    def __init__(self, device: torch.device, log: Callable[[str], None] = lambda _: None):
        self.device = device
        self._log = log
        self._buffer: torch.Tensor | None = None
        self._duration_ms: float | None = None
        self._value = 0

    def duration_ms(self) -> float:
        """GPU time of one flush (measured once with CUDA events)."""
        if self._duration_ms is None:
            self.flush()
            self._duration_ms = statistics.median(event_times(self.flush, 5))
        return self._duration_ms

    def flush(self) -> None:
        if self._buffer is None:
            size, note = l2_flush_bytes(torch.cuda.get_device_properties(self.device))
            self._log(note)
            self._buffer = torch.empty(size, dtype=torch.uint8, device=self.device)
        self._value = (self._value + 1) % 256  # every line rewritten, never with what it held
        self._buffer.fill_(self._value)
