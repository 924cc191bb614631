"""A fifth API, written as a new module of ``fi_attn_bench/apis/`` would be: its grid, inputs,
formulas, reference and FlashInfer call in one file (``tests/test_fifth_api.py`` registers it
with one line).  ``FifthSingleDecodeWrapper`` is a made-up wrapper: one query token per request
over a contiguous K/V cache, one head group."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import torch

from fi_attn_bench.backends.wrapper import planned_wrapper
from fi_attn_bench.cases import inputs as bi
from fi_attn_bench.cases.spec import BenchmarkSpec, Prepared, Settings

API = "FifthSingleDecodeWrapper"
CASE_FIELDS = ("batch_size", "kv_len", "head_dim")


def fifth_case(batch_size: int, kv_len: int, head_dim: int) -> dict[str, int]:
    return {"batch_size": batch_size, "kv_len": kv_len, "head_dim": head_dim}


PRESETS = {
    name: bi.grid(fifth_case, batch_size=sizes, kv_len=(16, 40), head_dim=(64,))
    for name, sizes in (
        ("cpu", (1, 2)),
        ("smoke", (1, 4)),
        ("default", (1, 4, 16)),
        ("full", (1, 4, 16, 64)),
    )
}


@dataclass(frozen=True)
class FifthInputs:
    q: torch.Tensor  # (batch, head_dim)
    k: torch.Tensor  # (batch, kv_len, head_dim)
    v: torch.Tensor


def make_inputs(case: Mapping[str, int], settings: Settings) -> FifthInputs:
    gen = bi.generator(settings.seed, settings.device)
    b, n, d = case["batch_size"], case["kv_len"], case["head_dim"]
    dt, dev = settings.dtype, settings.device
    return FifthInputs(
        bi.randn((b, d), dt, dev, gen),
        bi.randn((b, n, d), dt, dev, gen),
        bi.randn((b, n, d), dt, dev, gen),
    )


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The float32 reference: softmax(q k^T / sqrt(d)) v per request."""
    scores = torch.einsum("bd,bnd->bn", q.float(), k.float()) / math.sqrt(q.shape[-1])
    return torch.einsum("bn,bnd->bd", scores.softmax(-1), v.float())


def reference_fn(inputs: FifthInputs) -> Callable[[], torch.Tensor]:
    return partial(attention, inputs.q, inputs.k, inputs.v)


def io_bytes(case: Mapping[str, int], element_size: int) -> float:
    b, n, d = case["batch_size"], case["kv_len"], case["head_dim"]
    return float((2 * b * d + 2 * b * n * d) * element_size)


def flops(case: Mapping[str, int]) -> float:
    return float(4 * case["batch_size"] * case["kv_len"] * case["head_dim"])


def reference(case: Mapping[str, int], inputs: FifthInputs) -> Callable[[], torch.Tensor]:
    return reference_fn(inputs)


def prepare(case: Mapping[str, int], settings: Settings, inputs: FifthInputs) -> Prepared:
    return planned_wrapper(
        API,
        settings,
        reference(case, inputs),
        wrapper_options={},
        plan_arguments={"head_dim": case["head_dim"]},
        run_args=(inputs.q, inputs.k, inputs.v),
        out=torch.empty_like(inputs.q),
        inputs=inputs,
    )


SPEC = BenchmarkSpec(
    api=API,
    script="fifth_api.py",
    case_fields=CASE_FIELDS,
    presets=PRESETS,
    prepare=prepare,
    make_inputs=make_inputs,
    reference=reference,
    io_bytes=io_bytes,
    flops=flops,
)
