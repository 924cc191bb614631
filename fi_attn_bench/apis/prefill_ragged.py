"""Benchmark FlashInfer's BatchPrefillWithRaggedKVCacheWrapper (causal prefill, ragged K/V).

K and V are plain token-major tensors (no pages); head_dim_qk may differ from head_dim_vo, as
in DeepSeek's prefill (192/128).  A declaration: grids, inputs and formulas; timing, checking and the CLI
live in the harness; registered in ``apis.registry``, run by the face ``bench_batch_prefill_ragged.py``.

    python bench_batch_prefill_ragged.py --preset smoke
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

API = "BatchPrefillWithRaggedKVCacheWrapper"
CASE_FIELDS = (
    "batch_size",
    "seq_len",
    "num_qo_heads",
    "num_kv_heads",
    "head_dim_qk",
    "head_dim_vo",
)
NUM_KV_HEADS = 4
"""The seed's ragged rule: 32 query heads on 4 KV heads for every head-dim pair."""
DEEPSEEK = (192, 128)
SQUARE = (128, 128)
CAUSAL = True
MAX_TOKENS_DEFAULT = 1 << 16
MAX_QUADRATIC_DEFAULT = 1 << 28
"""Default sweep caps: 64k tokens and batch * seq_len^2 <= 2^28 (one 16k prompt), ~6 ms."""
MAX_TOKENS_FULL = 1 << 18
MAX_QUADRATIC_FULL = 1 << 31
SERVING = (
    "2plognormal:median=512,sigma=1.0,min=16,max=8k",
    "16plognormal:median=512,sigma=1.0,min=16,max=8k",
    "64plognormal:median=256,sigma=1.0,min=16,max=4k",
    "256plognormal:median=128,sigma=0.8,min=8,max=2k",
    "4puniform:lo=256,hi=8k",
    "8pbimodal:short=256,long=8k,p_long=0.25",
    "32ppareto:min=64,alpha=1.2,max=16k",
    "1p16k+15p512",
    "2p1k@4k+6p512@1k",
    "8p512@uniform:lo=512,hi=16k",
)
"""The synthetic ``serving`` preset (README, "Serving-shaped batches"): varied whole prompts
(log-normal, uniform, bimodal, long-tail), one long prompt among short ones, and chunks over
longer contexts; at most ~2.5 TFLOP (~6 ms at 400 TFLOP/s) per batch."""


def ragged_case(batch_size: int, seq_len: int, dims: tuple[int, int]) -> dict[str, int]:
    """One case: ``dims`` is (head_dim_qk, head_dim_vo)."""
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "num_qo_heads": bi.NUM_QO_HEADS,
        "num_kv_heads": NUM_KV_HEADS,
        "head_dim_qk": dims[0],
        "head_dim_vo": dims[1],
    }


def build_presets() -> dict[str, tuple[dict[str, int], ...]]:
    """smoke / default / full / cpu grids: DeepSeek 192/128 first, then 128/128."""
    g = partial(bi.grid, ragged_case)
    return {
        "smoke": bi.unique_cases(
            g(batch_size=(1, 4), seq_len=(1024,), dims=(DEEPSEEK,)),
            g(batch_size=(16,), seq_len=(512,), dims=(DEEPSEEK,)),
            g(batch_size=(2,), seq_len=(1000,), dims=(DEEPSEEK,)),
            g(batch_size=(4,), seq_len=(1024,), dims=(SQUARE,)),
            g(batch_size=(1,), seq_len=(4096,), dims=(SQUARE,)),
        ),
        "default": bi.unique_cases(
            g(
                bi.within("seq_len", MAX_TOKENS_DEFAULT, MAX_QUADRATIC_DEFAULT),
                batch_size=(1, 4, 16, 64),
                seq_len=(256, 1024, 4096, 16384),
                dims=(DEEPSEEK,),
            ),
            g(batch_size=(1, 2), seq_len=(8192,), dims=(DEEPSEEK,)),
            g(batch_size=(8,), seq_len=(1000,), dims=(DEEPSEEK,)),
            g(batch_size=(2,), seq_len=(3000,), dims=(DEEPSEEK,)),
            g(batch_size=(1, 16), seq_len=(1024, 4096), dims=(SQUARE,)),
        ),
        "full": bi.unique_cases(
            g(
                bi.within("seq_len", MAX_TOKENS_FULL, MAX_QUADRATIC_FULL),
                batch_size=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                seq_len=(128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768),
                dims=(DEEPSEEK, SQUARE),
            ),
            g(batch_size=(2, 8, 32), seq_len=(1000, 3000), dims=(DEEPSEEK, SQUARE)),
        ),
        "cpu": bi.unique_cases(
            g(batch_size=(1, 2), seq_len=(16, 37), dims=(DEEPSEEK,)),
            g(batch_size=(2,), seq_len=(50,), dims=(SQUARE,)),
        ),
    }


def batch_of(case: Mapping[str, object]) -> Batch:
    """The case's requests: its workload's, or batch_size whole prompts of seq_len tokens."""
    return serving.case_batch(case, case["seq_len"], case["seq_len"])


def io_bytes(case: Mapping[str, int], element_size: int) -> float:
    """q and output for the query tokens, K and V for the KV tokens (K at head_dim_qk, V and
    output at head_dim_vo), summed over the requests' own lengths, in bytes."""
    batch = batch_of(case)
    hq, hk = case["num_qo_heads"], case["num_kv_heads"]
    dqk, dvo = case["head_dim_qk"], case["head_dim_vo"]
    elements = sum(batch.q_lens) * hq * (dqk + dvo) + sum(batch.kv_lens) * hk * (dqk + dvo)
    return float(elements * element_size)


def flops(case: Mapping[str, int]) -> float:
    """2 * H_qo * unmasked pairs * (d_qk for QK^T + d_vo for PV), causal per request."""
    pairs = sum(bi.causal_pairs(r.q_len, r.kv_len) for r in batch_of(case).requests)
    return float(2 * case["num_qo_heads"] * pairs * (case["head_dim_qk"] + case["head_dim_vo"]))


def sm_scale(case: Mapping[str, int]) -> float:
    """1/sqrt(head_dim_qk), FlashInfer's default, passed explicitly to plan() and reference."""
    return 1.0 / math.sqrt(case["head_dim_qk"])


def scale_of(case: Mapping[str, int], inputs) -> float:
    """The softmax scale of plan() and the reference: the inputs' own where they carry one."""
    return sm_scale(case) if inputs.sm_scale is None else inputs.sm_scale


@dataclass(frozen=True)
class RaggedInputs:
    """Token-major q/k/v with their indptrs for one case."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    sm_scale: float | None = None  # a FlashInfer-Bench workload's own; None: sm_scale(case)

    def kv_rows(self) -> bi.KvRows:
        """Every request's K/V tokens, for the integrity checks' per-call rewrite."""
        tokens = torch.arange(self.k.shape[0], device=self.k.device)
        return bi.KvRows((self.k, self.v), self.kv_indptr, tokens)


def make_inputs(case: Mapping[str, int], settings: Settings) -> RaggedInputs:
    """Random q/k/v, deterministic per seed and case."""
    dev, dt = settings.device, settings.dtype
    gen = bi.generator(settings.seed, dev)
    batch, hk = batch_of(case), case["num_kv_heads"]
    q_tokens, kv_tokens = sum(batch.q_lens), sum(batch.kv_lens)
    return RaggedInputs(
        q=bi.randn((q_tokens, case["num_qo_heads"], case["head_dim_qk"]), dt, dev, gen),
        k=bi.randn((kv_tokens, hk, case["head_dim_qk"]), dt, dev, gen),
        v=bi.randn((kv_tokens, hk, case["head_dim_vo"]), dt, dev, gen),
        qo_indptr=bi.indptr(batch.q_lens, dev),
        kv_indptr=bi.indptr(batch.kv_lens, dev),
    )


def reference_fn(inputs: RaggedInputs, scale: float) -> Callable[[], torch.Tensor]:
    """The float32 reference over exactly the tensors run() reads."""
    return partial(
        attention_reference.ragged_prefill_reference,
        inputs.q,
        inputs.k,
        inputs.v,
        inputs.qo_indptr,
        inputs.kv_indptr,
        causal=CAUSAL,
        sm_scale=scale,
    )


def plan_arguments(
    case: Mapping[str, int], settings: Settings, inputs: RaggedInputs
) -> dict[str, object]:
    """plan() arguments under FlashInfer 0.6 names; flashinfer_api maps older ones."""
    return {
        "qo_indptr": inputs.qo_indptr,
        "kv_indptr": inputs.kv_indptr,
        "num_qo_heads": case["num_qo_heads"],
        "num_kv_heads": case["num_kv_heads"],
        "head_dim_qk": case["head_dim_qk"],
        "head_dim_vo": case["head_dim_vo"],
        "causal": CAUSAL,
        "pos_encoding_mode": "NONE",
        "sm_scale": scale_of(case, inputs),
        "q_data_type": settings.dtype,
        "kv_data_type": settings.dtype,
    }


def output_buffer(inputs: RaggedInputs) -> torch.Tensor:
    """``[tokens, H_qo, head_dim_vo]`` in the input dtype, as run() produces."""
    shape = (*inputs.q.shape[:-1], inputs.v.shape[-1])
    return torch.empty(shape, dtype=inputs.q.dtype, device=inputs.q.device)


def reference(case: Mapping[str, int], inputs: RaggedInputs) -> Callable[[], torch.Tensor]:
    """The float32 reference of one case on its inputs (what --backend torch measures)."""
    return reference_fn(inputs, scale_of(case, inputs))


def prepare(case: Mapping[str, int], settings: Settings, inputs: RaggedInputs) -> Prepared:
    """The planned wrapper and its reference for one case on the inputs the harness built."""
    return planned_wrapper(
        API,
        settings,
        reference(case, inputs),
        wrapper_options=dict(kv_layout="NHD", backend="auto"),
        plan_arguments=plan_arguments(case, settings, inputs),
        run_args=(inputs.q, inputs.k, inputs.v),
        out=output_buffer(inputs),
        inputs=inputs,
    )


SPEC = BenchmarkSpec(
    api=API,
    script="bench_batch_prefill_ragged.py",
    case_fields=CASE_FIELDS,
    presets=build_presets(),
    prepare=prepare,
    make_inputs=make_inputs,
    reference=reference,
    io_bytes=io_bytes,
    flops=flops,
    varied=VariedBatches(
        heads=ragged_case(1, 1, DEEPSEEK),
        shape_fields=serving.batch_size_and_seq_len,
        decode_only=False,
        presets={"serving": SERVING},
    ),
)
