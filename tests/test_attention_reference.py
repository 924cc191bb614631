"""Tests of attention_reference: each reference against an independent formulation.

The independent side never shares code with the module: pages are walked token by token in
Python, masks are built with ``tril`` and attention is ``scaled_dot_product_attention`` (GQA by
``repeat_interleave``) or an explicit per-element loop. All shapes are tiny; CPU only.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from fi_attn_bench.cases import checking
from fi_attn_bench.cases import reference as ar
from fi_attn_bench.cases.checking import CheckResult, Tolerance, check_output, poison_
from fi_attn_bench.cases.reference import (
    decode_reference,
    mla_reference,
    paged_prefill_reference,
    ragged_prefill_reference,
)

# --------------------------------------------------------------------------------------------
# Independent helpers
# --------------------------------------------------------------------------------------------


def make_page_table(kv_lens, page_size, gen, spare_pages=3):
    """A shuffled page table (ids are a random permutation, with unused spare pages)."""
    pages = [math.ceil(n / page_size) for n in kv_lens]
    num_pages = sum(pages) + spare_pages
    indices = torch.randperm(num_pages, generator=gen)[: sum(pages)].to(torch.int32)
    indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
    last = torch.tensor([(n - 1) % page_size + 1 for n in kv_lens], dtype=torch.int32)
    return num_pages, indptr, indices, last


def walk_pages(cache, indptr, indices, page_size, request, kv_len):
    """Tokens of one request, gathered one at a time by following its page list."""
    first = int(indptr[request])
    tokens = []
    for t in range(kv_len):
        page = int(indices[first + t // page_size])
        tokens.append(cache[page, t % page_size].float())
    return torch.stack(tokens)


def bottom_right_mask(q_len, kv_len, causal):
    """FlashInfer's causal mask: query j sees keys 0 .. kv_len - q_len + j."""
    full = torch.ones(q_len, kv_len, dtype=torch.bool)
    return full.tril(diagonal=kv_len - q_len) if causal else full


def sdpa(q, k, v, mask, scale):
    """q [L, Hq, D], k [S, Hkv, D], v [S, Hkv, Dv] -> [L, Hq, Dv] via torch's SDPA."""
    group = q.shape[1] // k.shape[1]
    k = k.float().repeat_interleave(group, dim=1)
    v = v.float().repeat_interleave(group, dim=1)
    out = F.scaled_dot_product_attention(
        q.float().transpose(0, 1)[None],
        k.transpose(0, 1)[None],
        v.transpose(0, 1)[None],
        attn_mask=mask,
        scale=scale,
    )
    return out[0].transpose(0, 1)


def close(actual, expected, tol=2e-5):
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol)


# --------------------------------------------------------------------------------------------
# Decode and paged prefill
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("num_qo_heads", "num_kv_heads", "page_size", "kv_lens"),
    [
        (8, 2, 4, [5, 9, 1, 16]),
        (4, 4, 1, [3, 7]),
        (6, 1, 16, [17, 40, 2]),
        (8, 8, 8, [8, 64]),
    ],
)
def test_decode_matches_sdpa_with_gqa_and_shuffled_pages(
    num_qo_heads, num_kv_heads, page_size, kv_lens
):
    gen = torch.Generator().manual_seed(1)
    head_dim = 16
    num_pages, indptr, indices, last = make_page_table(kv_lens, page_size, gen)
    k_cache = torch.randn(num_pages, page_size, num_kv_heads, head_dim, generator=gen)
    v_cache = torch.randn(num_pages, page_size, num_kv_heads, head_dim, generator=gen)
    q = torch.randn(len(kv_lens), num_qo_heads, head_dim, generator=gen)

    out = decode_reference(q, k_cache, v_cache, indptr, indices, last)

    assert out.dtype == torch.float32 and out.shape == q.shape
    for b, kv_len in enumerate(kv_lens):
        k = walk_pages(k_cache, indptr, indices, page_size, b, kv_len)
        v = walk_pages(v_cache, indptr, indices, page_size, b, kv_len)
        expected = sdpa(q[b : b + 1], k, v, None, 1 / math.sqrt(head_dim))[0]
        close(out[b], expected)


def test_decode_honours_explicit_sm_scale():
    gen = torch.Generator().manual_seed(2)
    num_pages, indptr, indices, last = make_page_table([6], 4, gen)
    k_cache = torch.randn(num_pages, 4, 2, 8, generator=gen)
    v_cache = torch.randn(num_pages, 4, 2, 8, generator=gen)
    q = torch.randn(1, 2, 8, generator=gen)
    out = decode_reference(q, k_cache, v_cache, indptr, indices, last, sm_scale=0.7)
    k = walk_pages(k_cache, indptr, indices, 4, 0, 6)
    v = walk_pages(v_cache, indptr, indices, 4, 0, 6)
    close(out[0], sdpa(q, k, v, None, 0.7)[0])


@pytest.mark.parametrize("causal", [True, False])
def test_paged_prefill_matches_sdpa_with_bottom_right_mask(causal):
    gen = torch.Generator().manual_seed(3)
    q_lens, kv_lens = [3, 1, 7, 5], [10, 4, 7, 13]  # q_len < kv_len and q_len == kv_len
    page_size, hq, hkv, d = 4, 6, 2, 16
    num_pages, indptr, indices, last = make_page_table(kv_lens, page_size, gen)
    k_cache = torch.randn(num_pages, page_size, hkv, d, generator=gen)
    v_cache = torch.randn(num_pages, page_size, hkv, d, generator=gen)
    qo_indptr = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    q = torch.randn(sum(q_lens), hq, d, generator=gen)

    out = paged_prefill_reference(
        q, qo_indptr, k_cache, v_cache, indptr, indices, last, causal=causal
    )

    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        rows = slice(int(qo_indptr[b]), int(qo_indptr[b + 1]))
        k = walk_pages(k_cache, indptr, indices, page_size, b, kv_len)
        v = walk_pages(v_cache, indptr, indices, page_size, b, kv_len)
        mask = bottom_right_mask(q_len, kv_len, causal)
        close(out[rows], sdpa(q[rows], k, v, mask, 1 / math.sqrt(d)))


def test_causal_queries_that_see_no_key_are_zero():
    """q_len > kv_len: the first q_len - kv_len queries see nothing under bottom-right causal."""
    gen = torch.Generator().manual_seed(4)
    q_len, kv_len, page_size = 6, 4, 2
    num_pages, indptr, indices, last = make_page_table([kv_len], page_size, gen)
    k_cache = torch.randn(num_pages, page_size, 1, 8, generator=gen)
    v_cache = torch.randn(num_pages, page_size, 1, 8, generator=gen)
    q = torch.randn(q_len, 2, 8, generator=gen)
    out = paged_prefill_reference(q, [0, q_len], k_cache, v_cache, indptr, indices, last)
    assert torch.equal(out[:2], torch.zeros_like(out[:2]))
    k = walk_pages(k_cache, indptr, indices, page_size, 0, kv_len)
    v = walk_pages(v_cache, indptr, indices, page_size, 0, kv_len)
    close(out[2:], sdpa(q[2:], k, v, bottom_right_mask(4, 4, True), 1 / math.sqrt(8)))


def test_padded_batches_never_read_past_the_page_table():
    """Short requests batched with long ones are padded; the padding must not follow
    kv_indices past the request's own pages (a buffer may hold garbage after kv_indptr[-1])."""
    gen = torch.Generator().manual_seed(13)
    kv_lens, page_size = [9, 2], 4
    num_pages, indptr, indices, last = make_page_table(kv_lens, page_size, gen)
    garbage = torch.tensor([10**6, -(10**6)], dtype=torch.int32)
    k_cache = torch.randn(num_pages, page_size, 2, 8, generator=gen)
    v_cache = torch.randn(num_pages, page_size, 2, 8, generator=gen)
    q = torch.randn(2, 4, 8, generator=gen)
    out = decode_reference(q, k_cache, v_cache, indptr, torch.cat((indices, garbage)), last)
    close(out, decode_reference(q, k_cache, v_cache, indptr, indices, last))
    k = walk_pages(k_cache, indptr, indices, page_size, 1, 2)
    v = walk_pages(v_cache, indptr, indices, page_size, 1, 2)
    close(out[1], sdpa(q[1:], k, v, None, 1 / math.sqrt(8))[0])


@settings(max_examples=20, deadline=None)
@given(
    lens=st.lists(st.tuples(st.integers(0, 9), st.integers(1, 20)), min_size=1, max_size=4),
    page_size=st.sampled_from([1, 3, 16]),
    heads=st.sampled_from([(4, 1), (4, 2), (3, 3)]),
    causal=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_paged_prefill_property(lens, page_size, heads, causal, seed):
    """Random batches, including empty query ranges; causal only where q_len <= kv_len."""
    gen = torch.Generator().manual_seed(seed)
    q_lens = [min(q, kv) if causal else q for q, kv in lens]
    kv_lens = [kv for _, kv in lens]
    hq, hkv = heads
    num_pages, indptr, indices, last = make_page_table(kv_lens, page_size, gen)
    k_cache = torch.randn(num_pages, page_size, hkv, 8, generator=gen)
    v_cache = torch.randn(num_pages, page_size, hkv, 8, generator=gen)
    qo = [0, *torch.tensor(q_lens).cumsum(0).tolist()]
    q = torch.randn(qo[-1], hq, 8, generator=gen)
    out = paged_prefill_reference(q, qo, k_cache, v_cache, indptr, indices, last, causal=causal)
    tiny = paged_prefill_reference(
        q, qo, k_cache, v_cache, indptr, indices, last, causal=causal, chunk_bytes=512
    )
    close(tiny, out)
    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        if q_len == 0:
            continue
        k = walk_pages(k_cache, indptr, indices, page_size, b, kv_len)
        v = walk_pages(v_cache, indptr, indices, page_size, b, kv_len)
        mask = bottom_right_mask(q_len, kv_len, causal)
        close(out[qo[b] : qo[b + 1]], sdpa(q[qo[b] : qo[b + 1]], k, v, mask, 1 / math.sqrt(8)))


# --------------------------------------------------------------------------------------------
# Ragged prefill
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [True, False])
def test_ragged_prefill_matches_sdpa_with_unequal_head_dims(causal):
    gen = torch.Generator().manual_seed(5)
    q_lens, kv_lens = [4, 1, 9], [9, 5, 9]
    hq, hkv, d_qk, d_vo = 4, 2, 24, 16
    qo = [0, *torch.tensor(q_lens).cumsum(0).tolist()]
    kvp = [0, *torch.tensor(kv_lens).cumsum(0).tolist()]
    q = torch.randn(qo[-1], hq, d_qk, generator=gen)
    k = torch.randn(kvp[-1], hkv, d_qk, generator=gen)
    v = torch.randn(kvp[-1], hkv, d_vo, generator=gen)

    out = ragged_prefill_reference(q, k, v, torch.tensor(qo), torch.tensor(kvp), causal=causal)

    assert out.shape == (qo[-1], hq, d_vo) and out.dtype == torch.float32
    for b in range(len(q_lens)):
        rows, keys = slice(qo[b], qo[b + 1]), slice(kvp[b], kvp[b + 1])
        mask = bottom_right_mask(q_lens[b], kv_lens[b], causal)
        close(out[rows], sdpa(q[rows], k[keys], v[keys], mask, 1 / math.sqrt(d_qk)))


# --------------------------------------------------------------------------------------------
# MLA
# --------------------------------------------------------------------------------------------


def mla_loop(q_nope, q_pe, ckv, kpe, q_lens, kv_lens, indptr, indices, page_size, causal, scale):
    """Explicit per (query, head, key) loop over the page table."""
    out = torch.zeros(q_nope.shape, dtype=torch.float64)
    row = 0
    for b, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens, strict=True)):
        slots = [
            (int(indices[int(indptr[b]) + t // page_size]), t % page_size) for t in range(kv_len)
        ]
        for j in range(q_len):
            last_key = kv_len - q_len + j if causal else kv_len - 1
            for h in range(q_nope.shape[1]):
                scores = [
                    scale
                    * (
                        torch.dot(q_nope[row, h].double(), ckv[p, s].double())
                        + torch.dot(q_pe[row, h].double(), kpe[p, s].double())
                    )
                    for p, s in slots[: last_key + 1]
                ]
                probs = torch.softmax(torch.stack(scores), dim=0)
                for w, (p, s) in zip(probs, slots, strict=False):
                    out[row, h] += w * ckv[p, s].double()
            row += 1
    return out.float()


@pytest.mark.parametrize("causal", [False, True])
def test_mla_matches_explicit_loop(causal):
    gen = torch.Generator().manual_seed(6)
    q_lens, kv_lens, page_size, heads = [2, 1, 3], [5, 1, 8], 2, 3
    d_ckv, d_kpe = 512, 64
    num_pages, indptr, indices, _ = make_page_table(kv_lens, page_size, gen)
    ckv = torch.randn(num_pages, page_size, d_ckv, generator=gen)
    kpe = torch.randn(num_pages, page_size, d_kpe, generator=gen)
    qo = [0, *torch.tensor(q_lens).cumsum(0).tolist()]
    q_nope = torch.randn(qo[-1], heads, d_ckv, generator=gen) * 0.1
    q_pe = torch.randn(qo[-1], heads, d_kpe, generator=gen) * 0.1
    scale = 1 / math.sqrt(128 + 64)
    kv_lens_t = torch.tensor(kv_lens, dtype=torch.int32)

    out = mla_reference(
        q_nope,
        q_pe,
        ckv,
        kpe,
        qo,
        indptr,
        indices,
        kv_lens_t,
        page_size,
        causal=causal,
        sm_scale=scale,
    )

    assert out.shape == (qo[-1], heads, d_ckv) and out.dtype == torch.float32
    expected = mla_loop(
        q_nope, q_pe, ckv, kpe, q_lens, kv_lens, indptr, indices, page_size, causal, scale
    )
    close(out, expected, tol=1e-4)


def test_mla_requires_sm_scale():
    with pytest.raises(TypeError):
        mla_reference(  # type: ignore[call-arg]
            torch.zeros(1, 1, 4), torch.zeros(1, 1, 2), torch.zeros(1, 1, 4), torch.zeros(1, 1, 2),
            [0, 1], [0, 1], [0], [1], 1,
        )  # fmt: skip


# --------------------------------------------------------------------------------------------
# Chunking, dtypes, validation
# --------------------------------------------------------------------------------------------


def _paged_case(gen, kv_lens, q_lens, page_size=4, hq=8, hkv=2, d=16, dtype=torch.float32):
    num_pages, indptr, indices, last = make_page_table(kv_lens, page_size, gen)
    k_cache = torch.randn(num_pages, page_size, hkv, d, generator=gen).to(dtype)
    v_cache = torch.randn(num_pages, page_size, hkv, d, generator=gen).to(dtype)
    qo = [0, *torch.tensor(q_lens).cumsum(0).tolist()]
    q = torch.randn(qo[-1], hq, d, generator=gen).to(dtype)
    return q, qo, k_cache, v_cache, indptr, indices, last


@pytest.mark.parametrize("chunk_bytes", [1, 4096, 60_000])
def test_chunked_paths_equal_unchunked(chunk_bytes):
    """Tiny budgets force one-element chunks (keys streamed through the online softmax);
    middle budgets mix grouped small requests with a chunked large one."""
    gen = torch.Generator().manual_seed(7)
    case = _paged_case(gen, kv_lens=[3, 40, 5, 2, 17], q_lens=[2, 12, 5, 1, 9])
    for causal in (True, False):
        whole = paged_prefill_reference(*case, causal=causal)
        chunked = paged_prefill_reference(*case, causal=causal, chunk_bytes=chunk_bytes)
        close(chunked, whole)
    q, qo, k_cache, v_cache, indptr, indices, last = case
    q_dec = q[: len(qo) - 1]
    close(
        decode_reference(q_dec, k_cache, v_cache, indptr, indices, last, chunk_bytes=chunk_bytes),
        decode_reference(q_dec, k_cache, v_cache, indptr, indices, last),
    )


def test_chunked_ragged_and_mla_equal_unchunked():
    gen = torch.Generator().manual_seed(8)
    qo, kvp = [0, 3, 4, 12], [0, 7, 8, 20]
    q = torch.randn(12, 4, 12, generator=gen)
    k = torch.randn(20, 2, 12, generator=gen)
    v = torch.randn(20, 2, 8, generator=gen)
    close(
        ragged_prefill_reference(q, k, v, qo, kvp, chunk_bytes=1),
        ragged_prefill_reference(q, k, v, qo, kvp),
    )
    num_pages, indptr, indices, _ = make_page_table([7, 1, 12], 4, gen)
    ckv = torch.randn(num_pages, 4, 32, generator=gen)
    kpe = torch.randn(num_pages, 4, 8, generator=gen)
    q_nope, q_pe = torch.randn(12, 4, 32, generator=gen), torch.randn(12, 4, 8, generator=gen)
    args = (q_nope, q_pe, ckv, kpe, qo, indptr, indices, [7, 1, 12], 4)
    for causal in (False, True):
        close(
            mla_reference(*args, causal=causal, sm_scale=0.2, chunk_bytes=1),
            mla_reference(*args, causal=causal, sm_scale=0.2),
        )


def _plan(batch, q_len, kv_len, hq, hkv, d_qk, d_vo, causal):
    """A _Problem of the given shape whose gathers must never run (only the plan is tested)."""

    def unused(*_):
        raise AssertionError("planning must not touch tensors")

    return ar._Problem(
        q_starts=tuple(range(0, batch * q_len, q_len)),
        q_lens=(q_len,) * batch,
        kv_lens=(kv_len,) * batch,
        num_qo_heads=hq,
        num_kv_heads=hkv,
        head_dim_qk=d_qk,
        head_dim_vo=d_vo,
        causal=causal,
        sm_scale=1.0,
        gather_q=unused,
        gather_kv=unused,
    )


@pytest.mark.parametrize(
    "shape",
    [
        (256, 1, 32768, 32, 32, 128, 128, False),  # decode, MHA, 32k keys
        (256, 1, 32768, 32, 8, 128, 128, False),  # decode, GQA
        (256, 1, 512, 32, 8, 128, 128, False),  # many short decodes: batched
        (16, 8192, 8192, 32, 8, 128, 128, True),  # paged prefill 16 x 8k causal
        (16, 8192, 8192, 128, 128, 192, 128, True),  # ragged 192/128
        (128, 1, 32768, 128, 1, 576, 512, False),  # MLA 128 heads, 32k keys
        (1, 1, 4_000_000, 128, 1, 576, 512, False),  # one row too long for one chunk
    ],
)
def test_default_budget_bounds_every_chunk_of_the_largest_cases(shape):
    """The memory guarantee, checked on the plan: every chunk's float32 scores and K/V fit
    the budget, and small requests are batched together."""
    problem = _plan(*shape)
    budget = ar.DEFAULT_CHUNK_BYTES // 4
    groups = ar._group_requests(problem, budget)
    assert sorted(i for g in groups for i in g) == list(range(shape[0]))
    for group in groups:
        b = len(group)
        q_chunk, kv_chunk = ar._chunk_sizes(problem, b, shape[1], shape[2], budget)
        assert b * problem.num_qo_heads * q_chunk * kv_chunk <= budget
        assert b * kv_chunk * problem.num_kv_heads * (shape[5] + shape[6]) <= budget
        assert b * q_chunk * problem.num_qo_heads * (shape[5] + shape[6]) <= budget
    if shape[2] == 512:
        assert len(groups) < shape[0] / 8


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_inputs_are_computed_in_float32(dtype):
    gen = torch.Generator().manual_seed(9)
    case = _paged_case(gen, kv_lens=[9, 20], q_lens=[4, 20], dtype=dtype)
    upcast = tuple(x.float() if torch.is_tensor(x) and x.is_floating_point() else x for x in case)
    out = paged_prefill_reference(*case)
    assert out.dtype == torch.float32
    close(out, paged_prefill_reference(*upcast), tol=1e-6)

    q, qo, k_cache, v_cache, indptr, indices, last = case
    dec = decode_reference(q[:2], k_cache, v_cache, indptr, indices, last)
    assert dec.dtype == torch.float32
    close(
        dec,
        decode_reference(q[:2].float(), k_cache.float(), v_cache.float(), indptr, indices, last),
        tol=1e-6,
    )
    rag = ragged_prefill_reference(q, q, q, qo, qo)
    assert rag.dtype == torch.float32
    close(rag, ragged_prefill_reference(q.float(), q.float(), q.float(), qo, qo), tol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_fp8_kv_cache_is_upcast(dtype):
    gen = torch.Generator().manual_seed(14)
    q, _, k_cache, v_cache, indptr, indices, last = _paged_case(gen, kv_lens=[9, 3], q_lens=[1, 1])
    k8, v8 = k_cache.to(dtype), v_cache.to(dtype)
    out = decode_reference(q[:2].half(), k8, v8, indptr, indices, last)
    close(
        out, decode_reference(q[:2].half().float(), k8.float(), v8.float(), indptr, indices, last)
    )


def test_invalid_inputs_raise_value_error():
    gen = torch.Generator().manual_seed(10)
    q, qo, k_cache, v_cache, indptr, indices, last = _paged_case(gen, kv_lens=[5], q_lens=[2])
    with pytest.raises(ValueError, match="kv_last_page_len"):
        paged_prefill_reference(q, qo, k_cache, v_cache, indptr, indices, torch.tensor([9]))
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        paged_prefill_reference(q[:, :3], qo, k_cache, v_cache, indptr, indices, last)
    with pytest.raises(ValueError, match="qo_indptr"):
        paged_prefill_reference(q, [0, 1], k_cache, v_cache, indptr, indices, last)
    with pytest.raises(ValueError, match="outside the cache"):
        paged_prefill_reference(q, qo, k_cache, v_cache, indptr, indices + 100, last)
    with pytest.raises(ValueError, match="outside the cache"):
        mla_reference(
            q[:, :, :8], q[:, :, 8:], k_cache[:, :, 0, :8], k_cache[:, :, 0, 8:],
            qo, indptr, indices - 100, [5], 4, sm_scale=0.1,
        )  # fmt: skip


# --------------------------------------------------------------------------------------------
# check_output and poison_
# --------------------------------------------------------------------------------------------


def _expected(n=20_000, seed=11):
    return torch.randn(n, generator=torch.Generator().manual_seed(seed)).reshape(-1, 8, 25)


def _perturb(expected, frac, factor, seed=12):
    """Move ``frac`` of the elements ``factor`` x their tolerance away from the reference."""
    tol = Tolerance()
    flat = expected.reshape(-1).clone()
    count = round(frac * flat.numel())
    idx = torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(seed))[:count]
    flat[idx] += factor * (tol.atol + tol.rtol * flat[idx].abs())
    return flat.reshape(expected.shape), count


def test_identical_and_close_outputs_pass():
    e = _expected()
    same = check_output(e.clone(), e)
    assert same.passed and same.mismatch_frac == 0 and same.max_abs_err == 0
    noisy = e + 1e-3 * torch.randn(e.shape, generator=torch.Generator().manual_seed(1))
    result = check_output(noisy, e)
    assert isinstance(result, CheckResult) and result.passed
    assert 0 < result.max_abs_err < 0.01 and result.worst_ratio < 1
    assert "within limits" in result.message


def test_too_many_small_errors_fail():
    e = _expected()
    actual, count = _perturb(e, 0.015, 2.0)
    result = check_output(actual, e)
    assert not result.passed
    assert result.mismatch_frac == pytest.approx(count / e.numel())
    assert "1.5% of 20000 elements out of tolerance (rtol=0.016, atol=0.016)" in result.message
    assert "more than the allowed 1%" in result.message


def test_few_small_errors_pass():
    e = _expected()
    actual, count = _perturb(e, 0.005, 2.0)
    result = check_output(actual, e)
    assert result.passed
    assert result.mismatch_frac == pytest.approx(count / e.numel())
    assert result.worst_ratio == pytest.approx(2.0, rel=1e-3)


def test_one_element_far_beyond_tolerance_fails():
    e = _expected()
    actual = e.clone()
    actual[3, 7, 12] += 10 * (0.016 + 0.016 * e[3, 7, 12].abs())
    result = check_output(actual, e)
    assert not result.passed
    assert result.mismatch_frac == pytest.approx(1 / e.numel())
    assert result.worst_ratio == pytest.approx(10, rel=1e-3)
    assert "(3, 7, 12)" in result.message and "limit 8x" in result.message


def test_unwritten_poisoned_output_fails():
    e = _expected()
    out = torch.empty_like(e)
    poison_(out)
    result = check_output(out, e)
    assert not result.passed
    assert f"{e.numel()} of {e.numel()} output elements are NaN/inf" in result.message
    assert result.mismatch_frac == 1.0 and result.max_abs_err == math.inf
    half = e.clone()
    poison_(half[10:])
    assert not check_output(half, e).passed


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_single_non_finite_element_fails(bad):
    e = _expected()
    actual = e.clone()
    actual[1, 2, 3] = bad
    result = check_output(actual, e)
    assert not result.passed
    assert result.message.startswith(
        "1 of 20000 output elements are NaN/inf (first at index (1, 2, 3))"
    )
    assert result.mismatch_frac == pytest.approx(1 / 20000) and result.worst_ratio == math.inf


def test_non_finite_reference_fails():
    e = _expected()
    actual = e.clone()
    e = e.clone()
    e[0, 0, 0] = math.nan
    result = check_output(actual, e)
    assert not result.passed and "1 of 20000 reference elements" in result.message


def test_shape_mismatch_fails():
    e = _expected()
    result = check_output(e[:-1], e)
    assert not result.passed and "shape mismatch" in result.message
    assert math.isnan(result.mismatch_frac)


def test_low_precision_output_is_compared_in_float32():
    e = _expected()
    for dtype in (torch.bfloat16, torch.float16):
        result = check_output(e.to(dtype), e)
        assert result.passed and result.max_abs_err > 0


def test_custom_tolerance_is_applied():
    e = _expected()
    actual = e + 1e-3
    assert check_output(actual, e).passed
    assert not check_output(actual, e, Tolerance(rtol=0.0, atol=1e-4)).passed
    assert check_output(
        actual, e, tol=Tolerance(rtol=0.0, atol=1e-4, min_pass_frac=0.0, max_violation_factor=20)
    ).passed


def test_sliced_comparison_matches_single_pass(monkeypatch):
    """The flat slicing must report the same numbers and global indices as one pass."""
    e = _expected()
    actual, _ = _perturb(e, 0.004, 3.0)
    actual[5, 1, 2] += 1.0
    whole = check_output(actual, e)
    monkeypatch.setattr(checking, "_CHECK_CHUNK_ELEMS", 333)
    sliced = check_output(actual, e)
    assert sliced == whole
    assert "(5, 1, 2)" in sliced.message


def test_poison_fills_every_dtype():
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        x = torch.zeros(4, dtype=dtype)
        poison_(x)
        assert torch.isnan(x).all()
    ints = torch.zeros(4, dtype=torch.int32)
    poison_(ints)
    assert (ints == torch.iinfo(torch.int32).max).all()
    flags = torch.zeros(4, dtype=torch.bool)
    poison_(flags)
    assert flags.all()
