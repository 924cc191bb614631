"""Benchmark FlashInfer's BatchPrefillWithPagedKVCacheWrapper (causal prefill, paged KV cache).

Each request prefills ``seq_len`` tokens against its own ``seq_len`` cached tokens
(``q_len == kv_len``, causal, bottom-right aligned).  A declaration: grids, inputs and
formulas; timing, checking and the CLI live in the harness;
registered in ``apis.registry``, run by the face ``bench_batch_prefill_paged.py``.

    python bench_batch_prefill_paged.py --preset smoke
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial

import torch

from fi_attn_bench.backends.wrapper import planned_wrapper
from fi_attn_bench.cases import inputs as bi
from fi_attn_bench.cases import reference as attention_reference
from fi_attn_bench.cases import serving
from fi_attn_bench.cases.spec import BenchmarkSpec, Prepared, Settings, VariedBatches
from fi_attn_bench.cases.workloads import Batch

API = "BatchPrefillWithPagedKVCacheWrapper"
CASE_FIELDS = ("batch_size", "seq_len", "num_qo_heads", "num_kv_heads", "head_dim")
CAUSAL = True
MAX_TOKENS_DEFAULT = 1 << 16
MAX_QUADRATIC_DEFAULT = 1 << 28
"""Default sweep caps: 64k tokens and batch * seq_len^2 <= 2^28 (one 16k prompt), ~6 ms."""
MAX_TOKENS_FULL = 1 << 18
MAX_QUADRATIC_FULL = 1 << 31
SERVING = (
    "8d@4k+2p512@2k",
    "32d@lognormal:median=1k,sigma=1.0,min=16,max=32k+1p2k@8k",
    "128d@lognormal:median=1k,sigma=1.0,min=16,max=32k+2p1k@lognormal:median=4k,sigma=1.0,min=1k,max=32k",
    "256d@lognormal:median=2k,sigma=1.0,min=16,max=32k+4p512@8k",
    "63d@uniform:lo=128,hi=8k+1p8k@32k",
    "30d@2k+2p4k",
    "4plognormal:median=512,sigma=1.0,min=16,max=8k",
    "16plognormal:median=512,sigma=1.0,min=16,max=8k",
    "64plognormal:median=256,sigma=1.0,min=16,max=4k",
    "4puniform:lo=256,hi=8k",
    "1p16k+15p512",
    "16p1k@uniform:lo=1k,hi=16k",
)
"""The synthetic ``serving`` preset (README, "Serving-shaped batches"): chunked-prefill steps
(decode requests with one or a few prefill chunks), whole varied prompts, and one long prompt
among short ones; at most ~2.2 TFLOP (~6 ms at 400 TFLOP/s) per batch."""


def prefill_case(batch_size: int, seq_len: int, head_dim: int) -> dict[str, int]:
    """One case with the seed's head rules (32 query heads, GQA 4 or 8 KV heads)."""
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "num_qo_heads": bi.NUM_QO_HEADS,
        "num_kv_heads": bi.gqa_kv_heads(head_dim),
        "head_dim": head_dim,
    }


def build_presets() -> dict[str, tuple[dict[str, int], ...]]:
    """smoke / default / full / cpu grids; lengths like 1000 and 3000 leave partial pages."""
    g = partial(bi.grid, prefill_case)
    return {
        "smoke": bi.unique_cases(
            g(batch_size=(1, 4), seq_len=(1024,), head_dim=(128,)),
            g(batch_size=(16,), seq_len=(512,), head_dim=(128,)),
            g(batch_size=(2,), seq_len=(1000,), head_dim=(128,)),
            g(batch_size=(4,), seq_len=(2048,), head_dim=(64,)),
            g(batch_size=(1,), seq_len=(4096,), head_dim=(128,)),
        ),
        "default": bi.unique_cases(
            g(
                bi.within("seq_len", MAX_TOKENS_DEFAULT, MAX_QUADRATIC_DEFAULT),
                batch_size=(1, 4, 16, 64),
                seq_len=(256, 1024, 4096, 16384),
                head_dim=(128,),
            ),
            g(batch_size=(1, 2), seq_len=(8192,), head_dim=(128,)),
            g(batch_size=(8,), seq_len=(1000,), head_dim=(128,)),
            g(batch_size=(2,), seq_len=(3000,), head_dim=(128,)),
            g(batch_size=(1, 16), seq_len=(1024, 4096), head_dim=(64,)),
        ),
        "full": bi.unique_cases(
            g(
                bi.within("seq_len", MAX_TOKENS_FULL, MAX_QUADRATIC_FULL),
                batch_size=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                seq_len=(128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
                head_dim=(128, 64),
            ),
            g(batch_size=(2, 8, 32), seq_len=(1000, 3000), head_dim=(128, 64)),
        ),
        "cpu": bi.unique_cases(
            g(batch_size=(1, 2), seq_len=(16, 37), head_dim=(128,)),
            g(batch_size=(2,), seq_len=(50,), head_dim=(64,)),
        ),
    }


def batch_of(case: Mapping[str, object]) -> Batch:
    """The case's requests: its workload's (chunks over longer contexts, decode tokens), or
    batch_size whole prompts of seq_len tokens."""
    return serving.case_batch(case, case["seq_len"], case["seq_len"])


def io_bytes(case: Mapping[str, int], element_size: int) -> float:
    """q + K + V for the real tokens (not padded pages) + output, in bytes, summed over the
    requests' own query and KV lengths."""
    batch = batch_of(case)
    q_and_o = 2 * sum(batch.q_lens) * case["num_qo_heads"] * case["head_dim"]
    kv = 2 * sum(batch.kv_lens) * case["num_kv_heads"] * case["head_dim"]
    return float((q_and_o + kv) * element_size)


def flops(case: Mapping[str, int]) -> float:
    """2 * H_qo * unmasked pairs * (d_qk + d_vo): each request's causal (bottom-right) part."""
    pairs = sum(bi.causal_pairs(r.q_len, r.kv_len) for r in batch_of(case).requests)
    return float(2 * case["num_qo_heads"] * pairs * 2 * case["head_dim"])


def sm_scale(case: Mapping[str, int]) -> float:
    """FlashInfer's default softmax scale, passed explicitly to plan() and the reference."""
    return 1.0 / math.sqrt(case["head_dim"])


def scale_of(case: Mapping[str, int], inputs) -> float:
    """The softmax scale of plan() and the reference: the inputs' own where they carry one."""
    return sm_scale(case) if inputs.sm_scale is None else inputs.sm_scale


@dataclass(frozen=True)
class PagedPrefillInputs:
    """Queries with their indptr, paged K/V caches and their page table for one case."""

    q: torch.Tensor
    qo_indptr: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    table: bi.PagedTable
    sm_scale: float | None = None  # a FlashInfer-Bench workload's own; None: sm_scale(case)

    def kv_rows(self) -> bi.KvRows:
        """Every request's cache pages, for the integrity checks' per-call rewrite."""
        return self.table.kv_rows(self.k_cache, self.v_cache)


def make_inputs(case: Mapping[str, int], settings: Settings) -> PagedPrefillInputs:
    """Random q/K/V (deterministic per seed and case) on a shuffled page table."""
    dev, dt = settings.device, settings.dtype
    gen = bi.generator(settings.seed, dev)
    batch, d = batch_of(case), case["head_dim"]
    table = bi.paged_table(batch.kv_lens, settings.page_size, dev, settings.seed)
    cache_shape = (table.num_pages, settings.page_size, case["num_kv_heads"], d)
    return PagedPrefillInputs(
        q=bi.randn((sum(batch.q_lens), case["num_qo_heads"], d), dt, dev, gen),
        qo_indptr=bi.indptr(batch.q_lens, dev),
        k_cache=bi.randn(cache_shape, dt, dev, gen),
        v_cache=bi.randn(cache_shape, dt, dev, gen),
        table=table,
    )


def reference_fn(inputs: PagedPrefillInputs, scale: float) -> Callable[[], torch.Tensor]:
    """The float32 reference over exactly the tensors run() reads."""
    t = inputs.table
    return partial(
        attention_reference.paged_prefill_reference,
        inputs.q,
        inputs.qo_indptr,
        inputs.k_cache,
        inputs.v_cache,
        t.kv_indptr,
        t.kv_indices,
        t.kv_last_page_len,
        causal=CAUSAL,
        sm_scale=scale,
    )


def plan_arguments(
    case: Mapping[str, int], settings: Settings, inputs: PagedPrefillInputs
) -> dict[str, object]:
    """plan() arguments under FlashInfer 0.6 names; flashinfer_api maps older ones."""
    t = inputs.table
    return {
        "qo_indptr": inputs.qo_indptr,
        "paged_kv_indptr": t.kv_indptr,
        "paged_kv_indices": t.kv_indices,
        "paged_kv_last_page_len": t.kv_last_page_len,
        "num_qo_heads": case["num_qo_heads"],
        "num_kv_heads": case["num_kv_heads"],
        "head_dim_qk": case["head_dim"],
        "head_dim_vo": case["head_dim"],
        "page_size": settings.page_size,
        "causal": CAUSAL,
        "pos_encoding_mode": "NONE",
        "sm_scale": scale_of(case, inputs),
        "q_data_type": settings.dtype,
        "kv_data_type": settings.dtype,
    }


def reference(case: Mapping[str, int], inputs: PagedPrefillInputs) -> Callable[[], torch.Tensor]:
    """The float32 reference of one case on its inputs (what --backend torch measures)."""
    return reference_fn(inputs, scale_of(case, inputs))


def prepare(case: Mapping[str, int], settings: Settings, inputs: PagedPrefillInputs) -> Prepared:
    """The planned wrapper and its reference for one case on the inputs the harness built."""
    return planned_wrapper(
        API,
        settings,
        reference(case, inputs),
        wrapper_options=dict(kv_layout="NHD", backend="auto"),
        plan_arguments=plan_arguments(case, settings, inputs),
        run_args=(inputs.q, (inputs.k_cache, inputs.v_cache)),
        out=torch.empty_like(inputs.q),
        inputs=inputs,
    )


SPEC = BenchmarkSpec(
    api=API,
    script="bench_batch_prefill_paged.py",
    case_fields=CASE_FIELDS,
    presets=build_presets(),
    prepare=prepare,
    make_inputs=make_inputs,
    reference=reference,
    io_bytes=io_bytes,
    flops=flops,
    varied=VariedBatches(
        heads=prefill_case(1, 1, 128),
        shape_fields=serving.batch_size_and_seq_len,
        decode_only=False,
        presets={"serving": SERVING},
    ),
)
