"""A tiny CPU benchmark script for the harness tests (run as a subprocess or imported).

Each case "computes" ``out = 2 * q``; environment variables inject behaviour:
``FAKE_BENCH_SLEEP`` seconds per run() (default 0.005; with ``FAKE_BENCH_BURN=1`` spent as
CPU work), ``FAKE_BENCH_OOM`` a batch size (or ``all``)
whose run() raises torch.OutOfMemoryError, ``FAKE_BENCH_WRONG`` a batch size whose output is off.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from fi_attn_bench.cases.spec import BenchmarkSpec, Prepared
from fi_attn_bench.command_line import main_for

FIELDS = ("batch_size", "seq_len")


def _cases(batch_sizes, seq_lens=(8,)):
    return tuple({"batch_size": b, "seq_len": s} for b in batch_sizes for s in seq_lens)


def _burn(seconds: float) -> None:
    """Spin until this thread has used ``seconds`` of CPU time."""
    deadline = time.thread_time() + seconds
    while time.thread_time() < deadline:
        pass


def prepare(case, settings, inputs=None):
    sleep = float(os.environ.get("FAKE_BENCH_SLEEP", "0.005"))
    burn = os.environ.get("FAKE_BENCH_BURN") == "1"  # spend the time as CPU work, not asleep
    oom = os.environ.get("FAKE_BENCH_OOM") in (str(case["batch_size"]), "all")
    wrong = os.environ.get("FAKE_BENCH_WRONG") == str(case["batch_size"])
    q = torch.randn(
        case["batch_size"], case["seq_len"], dtype=settings.dtype, device=settings.device
    )
    out = torch.empty_like(q)

    def run():
        if oom:
            raise torch.OutOfMemoryError("CUDA out of memory (injected)")
        _burn(sleep) if burn else time.sleep(sleep)
        torch.mul(q, 3.0 if wrong else 2.0, out=out)
        return out

    return Prepared(run=run, output=out, reference=lambda: q.float() * 2.0, plan_ms=0.0, inputs=q)


SPEC = BenchmarkSpec(
    api="FakeAttentionWrapper",
    script="tests/fake_bench_script.py",
    case_fields=FIELDS,
    presets={
        "cpu": _cases((1, 2, 3, 4)),
        "smoke": _cases((1, 2)),
        "default": _cases((1, 2, 3, 4, 5, 6, 7, 8)),
        "full": _cases((1, 2, 3, 4, 5, 6, 7, 8), (8, 16)),
    },
    prepare=prepare,
    io_bytes=lambda case, element_size: 2.0 * case["batch_size"] * case["seq_len"] * element_size,
    flops=lambda case: float(case["batch_size"] * case["seq_len"]),
)


def main(argv=None) -> int:
    return main_for(SPEC, argv)


if __name__ == "__main__":
    raise SystemExit(main())
