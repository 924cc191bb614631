"""Benchmark FlashInfer's BatchMLAPagedAttentionWrapper (DeepSeek MLA decode, absorbed form).

One query token per request attends to ``seq_len`` cached tokens of a compressed latent cache
(``ckv``, 512) and its rope part (``kpe``, 64), shared by all ``num_heads`` heads; not causal.
A declaration: grids, inputs and formulas; timing, checking and the CLI live in
the harness; registered in ``apis.registry``, run by the face ``bench_batch_mla.py``.

    python bench_batch_mla.py --preset smoke
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

API = "BatchMLAPagedAttentionWrapper"
CASE_FIELDS = ("batch_size", "seq_len", "num_heads", "head_dim_ckv", "head_dim_kpe")
HEAD_DIM_CKV = 512
HEAD_DIM_KPE = 64
QK_NOPE_HEAD_DIM = 128
"""DeepSeek's per-head q/k dim before weight absorption: the scale is 1/sqrt(128 + 64)."""
CAUSAL = False
MAX_TOKENS_DEFAULT = 1 << 21
"""batch_size * seq_len cap of the default sweep: 2M latent tokens (2.4 GB fp16)."""
MAX_TOKENS_FULL = 1 << 22
SERVING = serving.DECODE_SERVING  # the decode-shaped serving batches, shared with MLA


def mla_case(batch_size: int, seq_len: int, num_heads: int) -> dict[str, int]:
    """One decode case: ``seq_len`` cached tokens per request, DeepSeek's 512/64 dims."""
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "num_heads": num_heads,
        "head_dim_ckv": HEAD_DIM_CKV,
        "head_dim_kpe": HEAD_DIM_KPE,
    }


def build_presets() -> dict[str, tuple[dict[str, int], ...]]:
    """smoke / default / full / cpu grids: 16 heads (TP8 of DeepSeek-V3) up to 128 (TP1)."""
    g = partial(bi.grid, mla_case)
    return {
        "smoke": bi.unique_cases(
            g(batch_size=(1, 16), seq_len=(1024,), num_heads=(16,)),
            g(batch_size=(64,), seq_len=(4096,), num_heads=(128,)),
            g(batch_size=(16,), seq_len=(1000,), num_heads=(128,)),
            g(batch_size=(128,), seq_len=(2048,), num_heads=(64,)),
            g(batch_size=(4,), seq_len=(8192,), num_heads=(32,)),
        ),
        "default": bi.unique_cases(
            g(
                bi.within("seq_len", MAX_TOKENS_DEFAULT),
                batch_size=(1, 16, 64, 256),
                seq_len=(1024, 8192, 32768),
                num_heads=(16, 128),
            ),
            g(batch_size=(64,), seq_len=(4096,), num_heads=(32, 64)),
            g(batch_size=(16,), seq_len=(1000,), num_heads=(32, 64)),
        ),
        "full": bi.unique_cases(
            g(
                bi.within("seq_len", MAX_TOKENS_FULL),
                batch_size=(1, 2, 4, 8, 16, 32, 64, 128, 256),
                seq_len=(512, 1024, 2048, 4096, 8192, 16384, 32768),
                num_heads=(16, 32, 64, 128),
            ),
            g(batch_size=(8, 32, 128), seq_len=(1000, 3000), num_heads=(16, 128)),
        ),
        "cpu": bi.unique_cases(
            g(batch_size=(1, 3), seq_len=(37, 100), num_heads=(16,)),
            g(batch_size=(2,), seq_len=(50,), num_heads=(32,)),
        ),
    }


def batch_of(case: Mapping[str, object]) -> Batch:
    """The case's requests: its workload's, or batch_size x one query over seq_len tokens."""
    return serving.case_batch(case, 1, case["seq_len"])


def io_bytes(case: Mapping[str, int], element_size: int) -> float:
    """q_nope + q_pe + ckv and kpe caches for the real tokens + output (H * ckv), in bytes,
    summed over the requests' own KV lengths."""
    batch, h = batch_of(case), case["num_heads"]
    b = len(batch.requests)
    ckv, kpe = case["head_dim_ckv"], case["head_dim_kpe"]
    queries = b * h * (ckv + kpe)
    caches = sum(batch.kv_lens) * (ckv + kpe)
    output = b * h * ckv
    return float((queries + caches + output) * element_size)


def flops(case: Mapping[str, int]) -> float:
    """2 * H * (2 * ckv + kpe) per query-key pair: scores over ckv + kpe, output over ckv."""
    pairs = sum(batch_of(case).kv_lens)  # one query per request, not causal
    per_pair = 2 * case["num_heads"] * (2 * case["head_dim_ckv"] + case["head_dim_kpe"])
    return float(pairs * per_pair)


def sm_scale(case: Mapping[str, int]) -> float:
    """1/sqrt(128 + 64) as in FlashInfer's DeepSeek tests and benchmarks (pre-absorption dim)."""
    return 1.0 / math.sqrt(QK_NOPE_HEAD_DIM + case["head_dim_kpe"])


def scale_of(case: Mapping[str, int], inputs) -> float:
    """The softmax scale of plan() and the reference: the inputs' own where they carry one."""
    return sm_scale(case) if inputs.sm_scale is None else inputs.sm_scale


@dataclass(frozen=True)
class MlaInputs:
    """Split query, paged latent caches and their page table for one case."""

    q_nope: torch.Tensor
    q_pe: torch.Tensor
    ckv_cache: torch.Tensor
    kpe_cache: torch.Tensor
    qo_indptr: torch.Tensor
    table: bi.PagedTable
    sm_scale: float | None = None  # a FlashInfer-Bench workload's own; None: sm_scale(case)

    def kv_rows(self) -> bi.KvRows:
        """Every request's cache pages, for the integrity checks' per-call rewrite."""
        return self.table.kv_rows(self.ckv_cache, self.kpe_cache)


def make_inputs(case: Mapping[str, int], settings: Settings) -> MlaInputs:
    """Random queries and caches (deterministic per seed and case) on a shuffled page table."""
    dev, dt, ps = settings.device, settings.dtype, settings.page_size
    gen = bi.generator(settings.seed, dev)
    batch, h = batch_of(case), case["num_heads"]
    b = len(batch.requests)
    ckv, kpe = case["head_dim_ckv"], case["head_dim_kpe"]
    table = bi.paged_table(batch.kv_lens, ps, dev, settings.seed)
    return MlaInputs(
        q_nope=bi.randn((b, h, ckv), dt, dev, gen),
        q_pe=bi.randn((b, h, kpe), dt, dev, gen),
        ckv_cache=bi.randn((table.num_pages, ps, ckv), dt, dev, gen),
        kpe_cache=bi.randn((table.num_pages, ps, kpe), dt, dev, gen),
        qo_indptr=bi.indptr([1] * b, dev),
        table=table,
    )


def reference_fn(inputs: MlaInputs, scale: float) -> Callable[[], torch.Tensor]:
    """The float32 reference over exactly the tensors run() reads."""
    t = inputs.table
    return partial(
        attention_reference.mla_reference,
        inputs.q_nope,
        inputs.q_pe,
        inputs.ckv_cache,
        inputs.kpe_cache,
        inputs.qo_indptr,
        t.kv_indptr,
        t.kv_indices,
        t.kv_lens,
        t.page_size,
        causal=CAUSAL,
        sm_scale=scale,
    )


def plan_arguments(
    case: Mapping[str, int], settings: Settings, inputs: MlaInputs
) -> dict[str, object]:
    """The twelve plan() arguments, by name (same positional layout in 0.2.6 and 0.6)."""
    t = inputs.table
    return {
        "qo_indptr": inputs.qo_indptr,
        "kv_indptr": t.kv_indptr,
        "kv_indices": t.kv_indices,
        "kv_len_arr": t.kv_lens,
        "num_heads": case["num_heads"],
        "head_dim_ckv": case["head_dim_ckv"],
        "head_dim_kpe": case["head_dim_kpe"],
        "page_size": settings.page_size,
        "causal": CAUSAL,
        "sm_scale": scale_of(case, inputs),
        "q_data_type": settings.dtype,
        "kv_data_type": settings.dtype,
    }


def reference(case: Mapping[str, int], inputs: MlaInputs) -> Callable[[], torch.Tensor]:
    """The float32 reference of one case on its inputs (what --backend torch measures)."""
    return reference_fn(inputs, scale_of(case, inputs))


def prepare(case: Mapping[str, int], settings: Settings, inputs: MlaInputs) -> Prepared:
    """The planned wrapper and its reference for one case on the inputs the harness built."""
    return planned_wrapper(
        API,
        settings,
        reference(case, inputs),
        wrapper_options=dict(backend="auto"),
        plan_arguments=plan_arguments(case, settings, inputs),
        run_args=(inputs.q_nope, inputs.q_pe, inputs.ckv_cache, inputs.kpe_cache),
        out=torch.empty_like(inputs.q_nope),
        inputs=inputs,
    )


SPEC = BenchmarkSpec(
    api=API,
    script="bench_batch_mla.py",
    case_fields=CASE_FIELDS,
    presets=build_presets(),
    prepare=prepare,
    make_inputs=make_inputs,
    reference=reference,
    io_bytes=io_bytes,
    flops=flops,
    varied=VariedBatches(
        heads=mla_case(1, 1, 128),
        shape_fields=serving.batch_size_and_seq_len,
        decode_only=True,
        presets={"serving": SERVING},
    ),
)
