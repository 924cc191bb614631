"""The scripts' I/O-byte and FLOP formulas against values worked out by hand.

Each expected number below is spelled out as the arithmetic a reader can redo on paper:
element counts of q, K, V (and MLA caches) for the real tokens, the output, times the element
size; FLOPs as 2 per multiply-add, counting only unmasked query-key pairs.
"""

from __future__ import annotations

import math

import pytest

import bench_batch_decode as decode
import bench_batch_mla as mla
import bench_batch_prefill_paged as paged
import bench_batch_prefill_ragged as ragged
from fi_attn_bench.cases.inputs import causal_pairs, last_page_len, pages_for


@pytest.mark.parametrize(
    ("q_len", "kv_len", "pairs"),
    [
        (4, 4, 10),  # 1 + 2 + 3 + 4
        (1, 5, 5),  # a decode query sees every key
        (3, 5, 12),  # bottom-right: 3 + 4 + 5
        (5, 3, 6),  # first two queries see nothing: 0 + 0 + 1 + 2 + 3
        (0, 7, 0),
        (1024, 1024, 1024 * 1025 // 2),
    ],
)
def test_causal_pairs_bottom_right(q_len, kv_len, pairs):
    assert causal_pairs(q_len, kv_len) == pairs


def test_causal_pairs_matches_explicit_mask():
    for q_len in range(0, 7):
        for kv_len in range(0, 7):
            explicit = sum(
                1
                for j in range(q_len)
                for k in range(kv_len)
                if k <= kv_len - q_len + j  # FlashInfer's bottom-right alignment
            )
            assert causal_pairs(q_len, kv_len) == explicit, (q_len, kv_len)


def test_page_arithmetic():
    assert (pages_for(16, 16), last_page_len(16, 16)) == (1, 16)
    assert (pages_for(17, 16), last_page_len(17, 16)) == (2, 1)
    assert (pages_for(1000, 16), last_page_len(1000, 16)) == (63, 8)
    assert (pages_for(37, 1), last_page_len(37, 1)) == (37, 1)


def test_decode_formulas():
    case = decode.decode_case(batch_size=2, seq_len_kv=100, head_dim=128)
    # q: 2*32*128 = 8192, o: 8192, K+V: 2 * (2*100*4*128) = 204800 elements; fp16
    assert decode.io_bytes(case, 2) == (8192 + 8192 + 204800) * 2 == 442368
    # 4 * H_qo * kv_len * d per request: 4*32*100*128 = 1,638,400; two requests
    assert decode.flops(case) == 2 * 4 * 32 * 100 * 128 == 3_276_800
    assert decode.sm_scale(case) == pytest.approx(1 / math.sqrt(128))


def test_decode_head_dim_64_uses_eight_kv_heads():
    case = decode.decode_case(batch_size=1, seq_len_kv=10, head_dim=64)
    # q + o: 2*32*64 = 4096; K+V: 2*10*8*64 = 10240; bf16 is also 2 bytes
    assert decode.io_bytes(case, 2) == (4096 + 10240) * 2
    assert decode.io_bytes(case, 4) == (4096 + 10240) * 4


def test_paged_prefill_formulas():
    case = paged.prefill_case(batch_size=2, seq_len=4, head_dim=64)
    # 8 tokens; q + o: 2*8*32*64 = 32768; K+V: 2*8*8*64 = 8192 elements
    assert paged.io_bytes(case, 2) == (32768 + 8192) * 2 == 81920
    # 10 unmasked pairs per request, 20 total; 2 * 32 heads * 20 * (64 + 64)
    assert paged.flops(case) == 2 * 32 * 20 * 128 == 163840


def test_paged_prefill_counts_only_the_causal_half():
    case = paged.prefill_case(batch_size=1, seq_len=4096, head_dim=128)
    dense = 2 * 32 * 4096 * 4096 * 256
    assert paged.flops(case) == dense * (4097 / 8192)


def test_ragged_formulas_use_qk_and_vo_dims():
    case = ragged.ragged_case(batch_size=1, seq_len=3, dims=(192, 128))
    # 3 tokens * (q 32*192 + k 4*192 + v 4*128 + o 32*128) = 3 * 11520 elements
    assert ragged.io_bytes(case, 2) == 3 * (6144 + 768 + 512 + 4096) * 2 == 69120
    # 6 pairs; QK at 192 and PV at 128: 2 * 32 * 6 * (192 + 128)
    assert ragged.flops(case) == 2 * 32 * 6 * 320 == 122880
    assert ragged.sm_scale(case) == pytest.approx(1 / math.sqrt(192))


def test_mla_formulas():
    case = mla.mla_case(batch_size=2, seq_len=10, num_heads=16)
    # q_nope + q_pe: 2*16*(512+64) = 18432; caches: 2*10*(512+64) = 11520; out: 2*16*512 = 16384
    assert mla.io_bytes(case, 2) == (18432 + 11520 + 16384) * 2 == 92672
    # 20 query-key pairs, 2 * 16 * (2*512 + 64) = 34816 FLOPs each
    assert mla.flops(case) == 20 * 34816 == 696320
    assert mla.sm_scale(case) == pytest.approx(1 / math.sqrt(192))


def test_decode_is_a_one_token_prefill():
    """Decode's 4*H*L*d per request equals the prefill formula's pairs with q_len = 1."""
    case = decode.decode_case(batch_size=3, seq_len_kv=77, head_dim=128)
    pairs = 3 * causal_pairs(1, 77)
    assert decode.flops(case) == 2 * 32 * pairs * (128 + 128)


def test_formulas_return_floats():
    for module, case in (
        (decode, decode.decode_case(1, 8, 128)),
        (paged, paged.prefill_case(1, 8, 128)),
        (ragged, ragged.ragged_case(1, 8, (192, 128))),
        (mla, mla.mla_case(1, 8, 16)),
    ):
        assert isinstance(module.io_bytes(case, 2), float)
        assert isinstance(module.flops(case), float)
