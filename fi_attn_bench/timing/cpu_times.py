"""CPU time of the process's other threads while timed calls ran (the wall timer's view of
work handed to a thread: with one torch thread, a call's own work runs on the calling thread)."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

OTHER_THREADS_SHARE, OTHER_THREADS_SLACK_S = 0.5, 0.005
"""CPU time other threads may spend during the timed calls: this share of the wall time
inside the calls, plus this many seconds (a 1 ms power sampler took 5 ms in 0.2 s)."""


@dataclass(frozen=True)
class CpuTimes:
    """Since the first timed call: CPU seconds of the whole process and of the calling
    thread, and the wall seconds inside the calls.  Other threads' CPU time is work the wall
    clock around each call did not see (with one torch thread, a call's own work runs on the
    calling thread)."""

    process_start: float
    thread_start: float
    process_s: float = 0.0
    thread_s: float = 0.0
    calls_wall_s: float = 0.0

    @classmethod
    def now(cls) -> CpuTimes:
        return cls(time.process_time(), time.thread_time())

    def after_call(self, wall_s: float) -> CpuTimes:
        return dataclasses.replace(
            self,
            process_s=time.process_time() - self.process_start,
            thread_s=time.thread_time() - self.thread_start,
            calls_wall_s=self.calls_wall_s + wall_s,
        )

    @property
    def other_threads_s(self) -> float:
        return max(self.process_s - self.thread_s, 0.0)

    def other_threads_limit_s(self) -> float:
        """What the harness's own threads (a power sampler) and the OS may take meanwhile."""
        return OTHER_THREADS_SHARE * self.calls_wall_s + OTHER_THREADS_SLACK_S


def other_threads_cpu_s() -> float:
    """CPU seconds the process spent outside the calling thread so far."""
    return time.process_time() - time.thread_time()
