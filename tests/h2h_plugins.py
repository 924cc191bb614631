"""Plugins for the head-to-head tests, on ``tests/fake_bench_script.py``'s cases (``out = 2 q``)."""

from __future__ import annotations

import time

import torch

from fi_attn_bench.backends.impls import ImplContext, PluginRun


def _doubling(context: ImplContext, factor: float = 2.0, burn_s: float = 0.0) -> PluginRun:
    q = context.inputs
    out = torch.empty_like(q)

    def run():
        # CPU work, not sleep: a plugin worker that sleeps through its samples fails own_clock
        deadline = time.thread_time() + burn_s
        while time.thread_time() < deadline:
            pass
        torch.mul(q, factor, out=out)
        return out

    return PluginRun(run=run, output=out)


def same(context: ImplContext) -> PluginRun:
    """The fake script's computation, quickly."""
    return _doubling(context)


def slow(context: ImplContext) -> PluginRun:
    """Right values, 4 ms of CPU work per call (the fake script's run() burns 1 ms in these
    tests)."""
    return _doubling(context, burn_s=0.004)


def slow_burn(context: ImplContext) -> PluginRun:
    """Right values, 4 ms of CPU work per call (``FAKE_BENCH_BURN=1``: the fake script's run()
    burns 1 ms): time and CPU energy follow the work whatever else runs on the machine."""
    q = context.inputs
    out = torch.empty_like(q)

    def run():
        deadline = time.thread_time() + 0.004
        while time.thread_time() < deadline:
            pass
        torch.mul(q, 2.0, out=out)
        return out

    return PluginRun(run=run, output=out)


def wrong(context: ImplContext) -> PluginRun:
    """Off by 25 %: the check must fail its rows."""
    return _doubling(context, factor=2.5)


def raises_on_two(context: ImplContext) -> PluginRun:
    if context.case["batch_size"] == 2:
        raise RuntimeError("plugin cannot do batch_size 2")
    return _doubling(context)


def not_a_run(context: ImplContext):
    return lambda: None


def no_argument():
    return None


NOT_CALLABLE = 3

raise_on_import = False


SEEN_INPUTS: list[object] = []  # ``recording``'s log of the inputs each call was handed


def recording(context: ImplContext) -> PluginRun:
    """The SDPA decode example, noting which inputs object it was handed."""
    from fi_attn_bench.backends.impls import load_factory

    SEEN_INPUTS.append(context.inputs)
    return load_factory("examples/sdpa_decode_plugin.py:make")(context)
