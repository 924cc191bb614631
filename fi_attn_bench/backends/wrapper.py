"""The FlashInfer half of every script's prepare(): a wrapper built with the options the
installed API accepts, planned once untimed (JIT) and once timed, run() bound to its output."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from fi_attn_bench.backends import flashinfer_api as fc
from fi_attn_bench.cases.inputs import timed_ms
from fi_attn_bench.cases.spec import DEFAULT_WORKSPACE_BYTES, Prepared, Settings
from fi_attn_bench.device.sync import default_device


def setup_workspace(device=None, size_bytes: int = DEFAULT_WORKSPACE_BYTES) -> torch.Tensor:
    """A uint8 workspace buffer for a FlashInfer wrapper: zero-initialised, as FlashInfer's
    docs require for its first use."""
    return torch.zeros(size_bytes, dtype=torch.uint8, device=default_device(device))


def planned_wrapper(
    api: str,
    settings: Settings,
    reference: Callable[[], torch.Tensor],
    *,
    wrapper_options: Mapping[str, object],
    plan_arguments: Mapping[str, object],
    run_args: tuple,
    out: torch.Tensor,
    inputs: object = None,
) -> Prepared:
    """Build the wrapper (``backend=`` from ``--impl flashinfer:X``), plan, bind run(out=)."""
    options = dict(wrapper_options)
    if settings.wrapper_backend != "auto":
        options["backend"] = settings.wrapper_backend
    wrapper = fc.make_wrapper(
        fc.load_flashinfer(),
        api,
        setup_workspace(settings.device, settings.workspace_bytes),
        **options,
    )
    kwargs = fc.plan_kwargs(wrapper.plan, plan_arguments)
    plan_ms = timed_ms(lambda: fc.call(wrapper.plan, kwargs), settings.device, warm_first=True)
    run, output = fc.run_call(wrapper.run, run_args, out)
    return Prepared(
        run=run,
        output=output,
        reference=reference,
        plan_ms=plan_ms,
        inputs=inputs,
        resolved_backend=fc.resolved_backend(wrapper),
    )
