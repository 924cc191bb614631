"""An --impl plugin: paged decode through torch.nn.functional.scaled_dot_product_attention.

    python bench_batch_decode.py --impl flashinfer --impl examples/sdpa_decode_plugin.py:make

The harness calls ``make(context)`` once per case with the inputs bench_batch_decode.py
built (``context.inputs``: q, the paged K/V caches and their page table) and gets back a
``PluginRun``: ``plan`` (timed once as plan_ms) builds the gather index of every request's
tokens, ``run`` gathers the pages and runs SDPA into ``output``, which the harness checks
against the float32 reference.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from fi_attn_bench.backends.impls import ImplContext, PluginRun

DECODE_API = "BatchDecodeWithPagedKVCacheWrapper"


def token_index(table, page_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Flat token ids [batch, max_len] into the cache's (pages * page_size) tokens, and the
    mask of the real ones (True: attend)."""
    lengths = table.kv_lens.tolist()
    longest = max(lengths)
    index = torch.zeros(len(lengths), longest, dtype=torch.long)
    valid = torch.zeros(len(lengths), longest, dtype=torch.bool)
    indptr, pages = table.kv_indptr.tolist(), table.kv_indices.cpu().long()
    for request, length in enumerate(lengths):
        own = pages[indptr[request] : indptr[request + 1]]
        tokens = (own[:, None] * page_size + torch.arange(page_size)).reshape(-1)[:length]
        index[request, :length] = tokens
        valid[request, :length] = True
    device = table.kv_indptr.device
    return index.to(device), valid.to(device)


def make(context: ImplContext) -> PluginRun:
    """The factory named on the command line (``FILE.py:make``)."""
    if context.api != DECODE_API:
        raise TypeError(f"sdpa_decode_plugin measures {DECODE_API} only, not {context.api}")
    inputs = context.inputs
    q, k_cache, v_cache = inputs.q, inputs.k_cache, inputs.v_cache
    batch, qo_heads, dim = q.shape
    kv_heads = k_cache.shape[2]
    group = qo_heads // kv_heads
    output = torch.empty_like(q)
    planned: dict[str, torch.Tensor] = {}

    def plan() -> None:
        planned["index"], valid = token_index(inputs.table, k_cache.shape[1])
        planned["mask"] = valid[:, None, None, :]  # [batch, 1, 1, tokens]

    def run() -> torch.Tensor:
        index = planned["index"]
        keys = k_cache.reshape(-1, kv_heads, dim)[index].transpose(1, 2)  # [b, Hk, L, d]
        values = v_cache.reshape(-1, kv_heads, dim)[index].transpose(1, 2)
        query = q.reshape(batch, kv_heads, group, dim)  # a group of query heads per KV head
        attended = F.scaled_dot_product_attention(
            query, keys, values, attn_mask=planned["mask"], scale=1.0 / math.sqrt(dim)
        )
        output.copy_(attended.reshape(batch, qo_heads, dim))
        return output

    return PluginRun(run=run, plan=plan, output=output)
