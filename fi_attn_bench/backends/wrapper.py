"""The FlashInfer half of every script's prepare(): a wrapper built with the options the
installed API accepts, planned once untimed (JIT) and once timed, run() bound to its output."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from fi_attn_bench.backends import flashinfer_api as fc
from fi_attn_bench.cases.inputs import timed_ms
from fi_attn_bench.cases.spec import DEFAULT_WORKSPACE_BYTES, Prepared, Settings
from fi_attn_bench.device.sync import default_device


def setup_workspace(device=None, size_bytes: int = DEFAULT_WORKSPACE_BYTES) -> torch.Tensor:
    """A uint8 workspace buffer for a FlashInfer wrapper: zero-initialised, as FlashInfer's
    docs require for its first use."""
    return torch.zeros(size_bytes, dtype=torch.uint8, device=default_device(device))


def _variant_value(value: object) -> object:
    """A plan argument as part of a kernel variant's key: scalars and dtypes as they are,
    tensors by dtype only (their shapes and values vary per case, not per compiled module)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", str(value.dtype))
    if isinstance(value, (bool, int, float, str, type(None), torch.dtype)):
        return value
    return repr(value) if isinstance(value, tuple) else type(value).__name__


def variant_key(
    wrapper: type, backend: str, options: Mapping[str, object], plan_arguments: Mapping[str, object]
) -> tuple:
    """What picks the module FlashInfer JIT-compiles for a wrapper: the installed wrapper
    class, its backend, its constructor options and plan()'s scalar arguments (head dims,
    dtypes, mask, ...)."""
    parts = {**options, **plan_arguments}
    return (wrapper, backend, tuple(sorted((k, _variant_value(v)) for k, v in parts.items())))


@dataclass
class FailedVariants:
    """Kernel variants whose first build or plan() failed in this process: a failed JIT
    build is not cached by FlashInfer, so each later row would compile (minutes) and fail
    again; they fail at once with the first failure instead.  A variant that planned once
    is never marked: its later failures are the case's own."""

    failed: dict[tuple, BaseException] = field(default_factory=dict)
    planned: set[tuple] = field(default_factory=set)

    def attempt(self, key: tuple, build: Callable[[], object]) -> object:
        earlier = self.failed.get(key)
        if earlier is not None:
            raise earlier.with_traceback(None)
        try:
            made = build()
        except torch.OutOfMemoryError:
            raise  # the case's size, not the variant
        except Exception as exc:
            if key in self.planned:
                raise
            # without its traceback: the failed build's frames hold the workspace
            self.failed[key] = exc.with_traceback(None)
            raise
        self.planned.add(key)
        return made


FAILED_VARIANTS = FailedVariants()  # one per process, as FlashInfer's own JIT cache


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
    flashinfer = fc.load_flashinfer()
    key = variant_key(
        fc.wrapper_class(flashinfer, api), settings.wrapper_backend, options, plan_arguments
    )

    def build() -> tuple[object, float]:
        workspace = setup_workspace(settings.device, settings.workspace_bytes)
        wrapper = fc.make_wrapper(flashinfer, api, workspace, **options)
        kwargs = fc.plan_kwargs(wrapper.plan, plan_arguments)
        plan = lambda: fc.call(wrapper.plan, kwargs)  # noqa: E731
        return wrapper, timed_ms(plan, settings.device, warm_first=True)

    wrapper, plan_ms = FAILED_VARIANTS.attempt(key, build)
    run, output = fc.run_call(wrapper.run, run_args, out)
    return Prepared(
        run=run,
        output=output,
        reference=reference,
        plan_ms=plan_ms,
        inputs=inputs,
        resolved_backend=fc.resolved_backend(wrapper),
    )
