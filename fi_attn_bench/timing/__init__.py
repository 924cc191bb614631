"""Timing's public names: ``TimingOptions``, ``measure``, ``make_timer`` and ``L2Flusher``.

They load on first use, so that importing a torch-free submodule (``statistics``, ``options``)
does not import torch through this package.
"""

import importlib

_PUBLIC = {
    "TimingOptions": "fi_attn_bench.timing.options",
    "measure": "fi_attn_bench.timing.loop",
    "make_timer": "fi_attn_bench.timing.timers",
    "L2Flusher": "fi_attn_bench.timing.l2",
}

__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_PUBLIC[name]), name)
