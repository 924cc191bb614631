"""Fake ``flashinfer`` modules whose wrapper signatures mirror two real releases.

Parameter lists are copied from the wrappers' ``__init__``/``plan``/``run`` in
``flashinfer/{decode,prefill,mla}.py`` of

* ``jia0713/McFlashInfer`` (MetaX's FlashInfer 0.2.6 port, commit 4d23f89), and
* the FlashInfer 0.6.1 wheel (``flashinfer_python-0.6.1-py3-none-any.whl``).

The bodies are ours: ``__init__``/``plan``/``run`` record their bound arguments (defaults
applied) in the module's ``calls`` list, and ``run`` computes the attention with
``attention_reference`` from what ``plan`` received, writing into ``out`` like the real
wrappers.  A script that passes the wrong page table, scale or mask therefore produces a
wrong output, which the tests catch.  Data types are checked against ``plan()`` as the real
``_check_cached_qkv_data_type`` does.
"""

from __future__ import annotations

import inspect
import math
import types
from typing import Any

import torch

from fi_attn_bench.cases import reference as ar


def _dtype(value: Any) -> torch.dtype:
    return getattr(torch, value) if isinstance(value, str) else value


class _Fake:
    """Shared recording and computing; subclasses only declare signatures."""

    def _record(self, method: str, frame_locals: dict[str, Any]) -> dict[str, Any]:
        fn = getattr(type(self), method)
        names = [n for n in inspect.signature(fn).parameters if n != "self"]
        bound = {n: frame_locals[n] for n in names}
        self._module.calls.append((type(self).__name__, method, bound))
        return bound

    def _init(self, frame_locals: dict[str, Any]) -> None:
        self.init_args = self._record("__init__", frame_locals)

    def _plan(self, frame_locals: dict[str, Any]) -> None:
        self.plan_args = self._record("plan", frame_locals)

    def _check_dtype(self, q: torch.Tensor) -> None:
        p = self.plan_args
        want = p.get("q_data_type") or p.get("data_type")
        if want is not None and _dtype(want) != q.dtype:
            raise ValueError(f"q dtype {q.dtype} does not match plan's {want}")

    def _finish(self, result: torch.Tensor, q: torch.Tensor, out: torch.Tensor | None):
        result = result.to(q.dtype)
        if out is None:
            return result
        if out.shape != result.shape or out.dtype != q.dtype:
            raise ValueError(f"out {tuple(out.shape)} {out.dtype} != {tuple(result.shape)}")
        out.copy_(result)
        return out


class _DecodeBody(_Fake):
    def _run(self, frame_locals: dict[str, Any]):
        r = self._record("run", frame_locals)
        p, q = self.plan_args, r["q"]
        self._check_dtype(q)
        k_cache, v_cache = r["paged_kv_cache"]
        scale = p["sm_scale"] if p["sm_scale"] is not None else 1 / math.sqrt(p["head_dim"])
        result = ar.decode_reference(
            q, k_cache, v_cache, p["indptr"], p["indices"], p["last_page_len"], sm_scale=scale
        )
        return self._finish(result, q, r["out"])


class _PagedBody(_Fake):
    def _run(self, frame_locals: dict[str, Any]):
        r = self._record("run", frame_locals)
        p, q = self.plan_args, r["q"]
        self._check_dtype(q)
        k_cache, v_cache = r["paged_kv_cache"]
        scale = p["sm_scale"] if p["sm_scale"] is not None else 1 / math.sqrt(q.shape[-1])
        result = ar.paged_prefill_reference(
            q,
            p["qo_indptr"],
            k_cache,
            v_cache,
            p["paged_kv_indptr"],
            p["paged_kv_indices"],
            p["paged_kv_last_page_len"],
            causal=p["causal"],
            sm_scale=scale,
        )
        return self._finish(result, q, r["out"])


class _RaggedBody(_Fake):
    def _run(self, frame_locals: dict[str, Any]):
        r = self._record("run", frame_locals)
        p, q = self.plan_args, r["q"]
        self._check_dtype(q)
        scale = p["sm_scale"] if p["sm_scale"] is not None else 1 / math.sqrt(q.shape[-1])
        result = ar.ragged_prefill_reference(
            q, r["k"], r["v"], p["qo_indptr"], p["kv_indptr"], causal=p["causal"], sm_scale=scale
        )
        return self._finish(result, q, r["out"])


class _MlaBody(_Fake):
    def _run(self, frame_locals: dict[str, Any]):
        r = self._record("run", frame_locals)
        p, q = self.plan_args, r["q_nope"]
        if _dtype(p["q_data_type"]) != q.dtype:
            raise ValueError("q dtype does not match plan")
        result = ar.mla_reference(
            q,
            r["q_pe"],
            r["ckv_cache"],
            r["kpe_cache"],
            p["qo_indptr"],
            p["kv_indptr"],
            p["kv_indices"],
            p["kv_len_arr"],
            p["page_size"],
            causal=p["causal"],
            sm_scale=p["sm_scale"],
        )
        return self._finish(result, q, r["out"])


# ----------------------------------------------------------------------------------------
# McFlashInfer (FlashInfer 0.2.6 port)
# ----------------------------------------------------------------------------------------


class Decode026(_DecodeBody):
    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        use_tensor_cores=False,
        paged_kv_indptr_buffer=None,
        paged_kv_indices_buffer=None,
        paged_kv_last_page_len_buffer=None,
        jit_args=None,
    ):
        self._init(locals())

    def plan(
        self,
        indptr,
        indices,
        last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        pos_encoding_mode="NONE",
        window_left=-1,
        logits_soft_cap=None,
        q_data_type="float16",
        kv_data_type=None,
        data_type=None,
        sm_scale=None,
        rope_scale=None,
        rope_theta=None,
        non_blocking=True,
    ):
        self._plan(locals())

    def run(
        self,
        q,
        paged_kv_cache,
        *args,
        q_scale=None,
        k_scale=None,
        v_scale=None,
        out=None,
        lse=None,
        return_lse=False,
    ):
        return self._run(locals())


class PagedPrefill026(_PagedBody):
    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        qo_indptr_buf=None,
        paged_kv_indptr_buf=None,
        paged_kv_indices_buf=None,
        paged_kv_last_page_len_buf=None,
        custom_mask_buf=None,
        mask_indptr_buf=None,
        backend="auto",
        jit_args=None,
    ):
        self._init(locals())

    def plan(
        self,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim_qk,
        page_size,
        head_dim_vo=None,
        custom_mask=None,
        packed_custom_mask=None,
        causal=False,
        pos_encoding_mode="NONE",
        use_fp16_qk_reduction=False,
        sm_scale=None,
        window_left=-1,
        logits_soft_cap=None,
        rope_scale=None,
        rope_theta=None,
        q_data_type="float16",
        kv_data_type=None,
        non_blocking=True,
    ):
        self._plan(locals())

    def run(
        self,
        q,
        paged_kv_cache,
        *args,
        k_scale=None,
        v_scale=None,
        out=None,
        lse=None,
        return_lse=False,
    ):
        return self._run(locals())


class RaggedPrefill026(_RaggedBody):
    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        qo_indptr_buf=None,
        kv_indptr_buf=None,
        custom_mask_buf=None,
        mask_indptr_buf=None,
        backend="auto",
        jit_args=None,
    ):
        self._init(locals())

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        num_qo_heads,
        num_kv_heads,
        head_dim_qk,
        head_dim_vo=None,
        custom_mask=None,
        packed_custom_mask=None,
        causal=False,
        pos_encoding_mode="NONE",
        use_fp16_qk_reduction=False,
        window_left=-1,
        logits_soft_cap=None,
        sm_scale=None,
        rope_scale=None,
        rope_theta=None,
        q_data_type="float16",
        kv_data_type=None,
        non_blocking=True,
    ):
        self._plan(locals())

    def run(self, q, k, v, *args, out=None, lse=None, return_lse=False):
        return self._run(locals())


class Mla026(_MlaBody):
    def __init__(
        self,
        float_workspace_buffer,
        use_cuda_graph=False,
        qo_indptr=None,
        kv_indptr=None,
        kv_indices=None,
        kv_len_arr=None,
        backend="auto",
    ):
        self._init(locals())

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        head_dim_ckv,
        head_dim_kpe,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
    ):
        self._plan(locals())

    def run(
        self,
        q_nope,
        q_pe,
        ckv_cache,
        kpe_cache,
        out=None,
        lse=None,
        return_lse=False,
        kv_len=None,
        page_table=None,
    ):
        return self._run(locals())


# ----------------------------------------------------------------------------------------
# FlashInfer 0.6.1
# ----------------------------------------------------------------------------------------


class Decode061(_DecodeBody):
    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        use_tensor_cores=False,
        paged_kv_indptr_buffer=None,
        paged_kv_indices_buffer=None,
        paged_kv_last_page_len_buffer=None,
        backend="auto",
        jit_args=None,
    ):
        self._init(locals())

    def plan(
        self,
        indptr,
        indices,
        last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim,
        page_size,
        pos_encoding_mode="NONE",
        window_left=-1,
        logits_soft_cap=None,
        q_data_type="float16",
        kv_data_type=None,
        o_data_type=None,
        data_type=None,
        sm_scale=None,
        rope_scale=None,
        rope_theta=None,
        non_blocking=True,
        block_tables=None,
        seq_lens=None,
        fixed_split_size=None,
        disable_split_kv=False,
    ):
        self._plan(locals())

    def run(
        self,
        q,
        paged_kv_cache,
        *args,
        q_scale=None,
        k_scale=None,
        v_scale=None,
        out=None,
        lse=None,
        return_lse=False,
        enable_pdl=None,
        window_left=None,
        sinks=None,
        q_len_per_req=1,
    ):
        return self._run(locals())


class PagedPrefill061(_PagedBody):
    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        qo_indptr_buf=None,
        paged_kv_indptr_buf=None,
        paged_kv_indices_buf=None,
        paged_kv_last_page_len_buf=None,
        custom_mask_buf=None,
        mask_indptr_buf=None,
        backend="auto",
        jit_args=None,
        jit_kwargs=None,
    ):
        self._init(locals())

    def plan(
        self,
        qo_indptr,
        paged_kv_indptr,
        paged_kv_indices,
        paged_kv_last_page_len,
        num_qo_heads,
        num_kv_heads,
        head_dim_qk,
        page_size,
        head_dim_vo=None,
        custom_mask=None,
        packed_custom_mask=None,
        causal=False,
        pos_encoding_mode="NONE",
        use_fp16_qk_reduction=False,
        sm_scale=None,
        window_left=-1,
        logits_soft_cap=None,
        rope_scale=None,
        rope_theta=None,
        q_data_type="float16",
        kv_data_type=None,
        o_data_type=None,
        non_blocking=True,
        prefix_len_ptr=None,
        token_pos_in_items_ptr=None,
        token_pos_in_items_len=0,
        max_item_len_ptr=None,
        seq_lens=None,
        seq_lens_q=None,
        block_tables=None,
        max_token_per_sequence=None,
        max_sequence_kv=None,
        fixed_split_size=None,
        disable_split_kv=False,
    ):
        self._plan(locals())

    def run(
        self,
        q,
        paged_kv_cache,
        *args,
        q_scale=None,
        k_scale=None,
        v_scale=None,
        out=None,
        lse=None,
        return_lse=False,
        enable_pdl=None,
        window_left=None,
        sinks=None,
    ):
        return self._run(locals())


class RaggedPrefill061(_RaggedBody):
    def __init__(
        self,
        float_workspace_buffer,
        kv_layout="NHD",
        use_cuda_graph=False,
        qo_indptr_buf=None,
        kv_indptr_buf=None,
        custom_mask_buf=None,
        mask_indptr_buf=None,
        backend="auto",
        jit_args=None,
        jit_kwargs=None,
    ):
        self._init(locals())

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        num_qo_heads,
        num_kv_heads,
        head_dim_qk,
        head_dim_vo=None,
        custom_mask=None,
        packed_custom_mask=None,
        causal=False,
        pos_encoding_mode="NONE",
        use_fp16_qk_reduction=False,
        window_left=-1,
        logits_soft_cap=None,
        sm_scale=None,
        rope_scale=None,
        rope_theta=None,
        q_data_type="float16",
        kv_data_type=None,
        o_data_type=None,
        non_blocking=True,
        prefix_len_ptr=None,
        token_pos_in_items_ptr=None,
        token_pos_in_items_len=0,
        max_item_len_ptr=None,
        fixed_split_size=None,
        disable_split_kv=False,
    ):
        self._plan(locals())

    def run(
        self,
        q,
        k,
        v,
        *args,
        q_scale=None,
        k_scale=None,
        v_scale=None,
        o_scale=None,
        out=None,
        lse=None,
        return_lse=False,
        enable_pdl=None,
    ):
        return self._run(locals())


class Mla061(_MlaBody):
    def __init__(
        self,
        float_workspace_buffer,
        use_cuda_graph=False,
        qo_indptr=None,
        kv_indptr=None,
        kv_indices=None,
        kv_len_arr=None,
        backend="auto",
    ):
        self._init(locals())

    def plan(
        self,
        qo_indptr,
        kv_indptr,
        kv_indices,
        kv_len_arr,
        num_heads,
        head_dim_ckv,
        head_dim_kpe,
        page_size,
        causal,
        sm_scale,
        q_data_type,
        kv_data_type,
        use_profiler=False,
    ):
        self._plan(locals())

    def run(
        self,
        q_nope,
        q_pe,
        ckv_cache,
        kpe_cache,
        out=None,
        lse=None,
        return_lse=False,
        profiler_buffer=None,
        kv_len=None,
        page_table=None,
        return_lse_base_on_e=False,
    ):
        return self._run(locals())


RELEASES = {
    "0.2.6": ("0.0.0+unknown", (Decode026, PagedPrefill026, RaggedPrefill026, Mla026)),
    "0.6.1": ("0.6.1", (Decode061, PagedPrefill061, RaggedPrefill061, Mla061)),
}
"""Release -> (its ``__version__`` as reported, its four wrapper classes).

McFlashInfer reports ``0.0.0+unknown`` when built without ``_build_meta``."""

WRAPPER_NAMES = (
    "BatchDecodeWithPagedKVCacheWrapper",
    "BatchPrefillWithPagedKVCacheWrapper",
    "BatchPrefillWithRaggedKVCacheWrapper",
    "BatchMLAPagedAttentionWrapper",
)


def make_module(release: str) -> types.ModuleType:
    """A fresh fake ``flashinfer`` module (own ``calls`` log) mirroring ``release``.

    As in both real packages, MLA's wrapper lives in ``flashinfer.mla`` and is re-exported.
    """
    version, classes = RELEASES[release]
    module = types.ModuleType("flashinfer")
    module.__version__ = version
    module.calls = []
    mla = types.ModuleType("flashinfer.mla")
    module.mla = mla
    for name, base in zip(WRAPPER_NAMES, classes, strict=True):
        cls = type(name, (base,), {"_module": module})
        setattr(module, name, cls)
    mla.BatchMLAPagedAttentionWrapper = module.BatchMLAPagedAttentionWrapper
    return module
