"""Benchmark FlashInfer's BatchDecodeWithPagedKVCacheWrapper (paged KV cache, one query token).

A declaration: the case grid, how one case's inputs are built, and the I/O and FLOP
formulas.  Timing, checking and the CLI live in the harness;
registered in ``apis.registry``, run by the face ``bench_batch_decode.py``.

    python bench_batch_decode.py --preset smoke
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

API = "BatchDecodeWithPagedKVCacheWrapper"
CASE_FIELDS = ("batch_size", "seq_len_q", "seq_len_kv", "num_qo_heads", "num_kv_heads", "head_dim")
MAX_TOKENS_DEFAULT = 1 << 21
"""batch_size * seq_len_kv cap of the default sweep: 2M cached tokens (4 GiB fp16), ~2.5 ms."""
MAX_TOKENS_FULL = 1 << 23
SERVING = serving.DECODE_SERVING  # the decode-shaped serving batches, shared with MLA


def decode_case(batch_size: int, seq_len_kv: int, head_dim: int) -> dict[str, int]:
    """One case with the seed's head rules (32 query heads, GQA 4 or 8 KV heads)."""
    return {
        "batch_size": batch_size,
        "seq_len_q": 1,
        "seq_len_kv": seq_len_kv,
        "num_qo_heads": bi.NUM_QO_HEADS,
        "num_kv_heads": bi.gqa_kv_heads(head_dim),
        "head_dim": head_dim,
    }


def build_presets() -> dict[str, tuple[dict[str, int], ...]]:
    """smoke / default / full / cpu grids; lengths like 1000 and 3000 leave partial pages."""
    g = partial(bi.grid, decode_case)
    return {
        "smoke": bi.unique_cases(
            g(batch_size=(1, 16, 64), seq_len_kv=(512, 4096), head_dim=(128,)),
            g(batch_size=(16,), seq_len_kv=(1000,), head_dim=(128,)),
            g(batch_size=(32,), seq_len_kv=(2048,), head_dim=(64,)),
        ),
        "default": bi.unique_cases(
            g(
                bi.within("seq_len_kv", MAX_TOKENS_DEFAULT),
                batch_size=(1, 16, 64, 256),
                seq_len_kv=(512, 2048, 8192, 32768),
                head_dim=(128,),
            ),
            g(batch_size=(8, 128), seq_len_kv=(1000, 3000), head_dim=(128,)),
            g(batch_size=(1, 16, 64, 256), seq_len_kv=(2048, 8192), head_dim=(64,)),
        ),
        "full": bi.unique_cases(
            g(
                bi.within("seq_len_kv", MAX_TOKENS_FULL),
                batch_size=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                seq_len_kv=(128, 512, 1024, 2048, 4096, 8192, 16384, 32768),
                head_dim=(128, 64),
            ),
            g(batch_size=(8, 32, 128), seq_len_kv=(1000, 3000, 5000), head_dim=(128, 64)),
        ),
        "cpu": bi.unique_cases(
            g(batch_size=(1, 4), seq_len_kv=(37, 200), head_dim=(128,)),
            g(batch_size=(2,), seq_len_kv=(50,), head_dim=(64,)),
        ),
    }


def batch_of(case: Mapping[str, object]) -> Batch:
    """The case's requests: its workload's, or batch_size x (seq_len_q, seq_len_kv)."""
    return serving.case_batch(case, case["seq_len_q"], case["seq_len_kv"])


def io_bytes(case: Mapping[str, int], element_size: int) -> float:
    """q + K + V for the real cached tokens (not padded pages) + output, in bytes, summed
    over the requests' own lengths."""
    batch, d = batch_of(case), case["head_dim"]
    q_and_o = 2 * sum(batch.q_lens) * case["num_qo_heads"] * d
    kv = 2 * sum(batch.kv_lens) * case["num_kv_heads"] * d
    return float((q_and_o + kv) * element_size)


def flops(case: Mapping[str, int]) -> float:
    """4 * H_qo * q_len * kv_len * d per request: QK^T and PV, 2 FLOPs per multiply-add each."""
    per_head = sum(r.q_len * r.kv_len for r in batch_of(case).requests)
    return float(4 * per_head * case["num_qo_heads"] * case["head_dim"])


def sm_scale(case: Mapping[str, int]) -> float:
    """FlashInfer's default softmax scale, passed explicitly to plan() and the reference."""
    return 1.0 / math.sqrt(case["head_dim"])


def scale_of(case: Mapping[str, int], inputs) -> float:
    """The softmax scale of plan() and the reference: the inputs' own where they carry one."""
    return sm_scale(case) if inputs.sm_scale is None else inputs.sm_scale


@dataclass(frozen=True)
class DecodeInputs:
    """Query, paged K/V caches and their page table for one case."""

    q: torch.Tensor
    k_cache: torch.Tensor
    v_cache: torch.Tensor
    table: bi.PagedTable
    sm_scale: float | None = None  # a FlashInfer-Bench workload's own; None: sm_scale(case)

    def kv_rows(self) -> bi.KvRows:
        """Every request's cache pages, for the integrity checks' per-call rewrite."""
        return self.table.kv_rows(self.k_cache, self.v_cache)


def make_inputs(case: Mapping[str, int], settings: Settings) -> DecodeInputs:
    """Random q/K/V (deterministic per seed and case) on a shuffled page table."""
    dev, dt = settings.device, settings.dtype
    gen = bi.generator(settings.seed, dev)
    batch, hk, d = batch_of(case), case["num_kv_heads"], case["head_dim"]
    b = len(batch.requests)
    table = bi.paged_table(batch.kv_lens, settings.page_size, dev, settings.seed)
    cache_shape = (table.num_pages, settings.page_size, hk, d)
    return DecodeInputs(
        q=bi.randn((b, case["num_qo_heads"], d), dt, dev, gen),
        k_cache=bi.randn(cache_shape, dt, dev, gen),
        v_cache=bi.randn(cache_shape, dt, dev, gen),
        table=table,
    )


def reference_fn(inputs: DecodeInputs, scale: float) -> Callable[[], torch.Tensor]:
    """The float32 reference over exactly the tensors run() reads."""
    t = inputs.table
    return partial(
        attention_reference.decode_reference,
        inputs.q,
        inputs.k_cache,
        inputs.v_cache,
        t.kv_indptr,
        t.kv_indices,
        t.kv_last_page_len,
        sm_scale=scale,
    )


def plan_arguments(
    case: Mapping[str, int], settings: Settings, inputs: DecodeInputs
) -> dict[str, object]:
    """plan() arguments under FlashInfer 0.6 names; flashinfer_api maps older ones."""
    t = inputs.table
    return {
        "indptr": t.kv_indptr,
        "indices": t.kv_indices,
        "last_page_len": t.kv_last_page_len,
        "num_qo_heads": case["num_qo_heads"],
        "num_kv_heads": case["num_kv_heads"],
        "head_dim": case["head_dim"],
        "page_size": settings.page_size,
        "pos_encoding_mode": "NONE",
        "q_data_type": settings.dtype,
        "kv_data_type": settings.dtype,
        "sm_scale": scale_of(case, inputs),
    }


def reference(case: Mapping[str, int], inputs: DecodeInputs) -> Callable[[], torch.Tensor]:
    """The float32 reference of one case on its inputs (what --backend torch measures)."""
    return reference_fn(inputs, scale_of(case, inputs))


def prepare(case: Mapping[str, int], settings: Settings, inputs: DecodeInputs) -> Prepared:
    """The planned wrapper and its reference for one case on the inputs the harness built."""
    return planned_wrapper(
        API,
        settings,
        reference(case, inputs),
        wrapper_options=dict(kv_layout="NHD", use_tensor_cores=False, backend="auto"),
        plan_arguments=plan_arguments(case, settings, inputs),
        run_args=(inputs.q, (inputs.k_cache, inputs.v_cache)),
        out=torch.empty_like(inputs.q),
        inputs=inputs,
    )


SPEC = BenchmarkSpec(
    api=API,
    script="bench_batch_decode.py",
    case_fields=CASE_FIELDS,
    presets=build_presets(),
    prepare=prepare,
    make_inputs=make_inputs,
    reference=reference,
    io_bytes=io_bytes,
    flops=flops,
    varied=VariedBatches(
        heads=decode_case(1, 1, 128),
        shape_fields=lambda batch: {
            "batch_size": len(batch.requests),
            "seq_len_q": 1,
            "seq_len_kv": serving.mean_kv_length(batch),
        },
        decode_only=True,
        presets={"serving": SERVING},
    ),
)
