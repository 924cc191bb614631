"""The four scripts as data (presets, case fields, head rules) and their inputs, on the CPU.

The torch-backend test compares each script's ``run()`` with an independent dense
computation (pages walked in Python, SDPA-free softmax) on a tiny case, so a wrong page
table, scale or mask in ``prepare()`` cannot hide behind the shared reference.
"""

from __future__ import annotations

import math

import pytest
import torch

import bench_batch_decode
import bench_batch_mla
import bench_batch_prefill_paged
import bench_batch_prefill_ragged
from fi_attn_bench.cases import inputs as bi
from fi_attn_bench.cases import selection
from fi_attn_bench.cases.inputs import prepare_case
from fi_attn_bench.cases.spec import Settings

SCRIPTS = (
    bench_batch_decode,
    bench_batch_prefill_paged,
    bench_batch_prefill_ragged,
    bench_batch_mla,
)
SEED_FIELDS = {
    "bench_batch_decode": (
        "batch_size",
        "seq_len_q",
        "seq_len_kv",
        "num_qo_heads",
        "num_kv_heads",
        "head_dim",
    ),
    "bench_batch_prefill_paged": (
        "batch_size",
        "seq_len",
        "num_qo_heads",
        "num_kv_heads",
        "head_dim",
    ),
    "bench_batch_prefill_ragged": (
        "batch_size",
        "seq_len",
        "num_qo_heads",
        "num_kv_heads",
        "head_dim_qk",
        "head_dim_vo",
    ),
    "bench_batch_mla": ("batch_size", "seq_len", "num_heads", "head_dim_ckv", "head_dim_kpe"),
}
by_name = pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)


def _settings(impl_kind: str = "torch", seed: int = 3, page_size: int = 16) -> Settings:
    return Settings(
        device=torch.device("cpu"),
        dtype=torch.float16,
        page_size=page_size,
        impl_kind=impl_kind,
        seed=seed,
        workspace_bytes=1024,
    )


def _all_cases(script):
    return [case for cases in script.SPEC.presets.values() for case in cases]


# ---------------------------------------------------------------------------- presets as data


@by_name
def test_case_fields_are_the_seeds(script):
    assert script.SPEC.case_fields == SEED_FIELDS[script.__name__]
    for case in _all_cases(script):
        assert tuple(case) == script.SPEC.case_fields
        assert all(isinstance(v, int) and v > 0 for v in case.values())


@by_name
def test_preset_sizes(script):
    presets = script.SPEC.presets
    assert set(presets) == {"smoke", "default", "full", "cpu"}
    assert 1 <= len(presets["smoke"]) <= 8
    assert 1 <= len(presets["cpu"]) <= 6
    assert 20 <= len(presets["default"]) <= 40
    assert len(presets["full"]) > len(presets["default"])


@by_name
def test_no_case_listed_twice(script):
    for name, cases in script.SPEC.presets.items():
        keys = [tuple(case.items()) for case in cases]
        assert len(keys) == len(set(keys)), name


@by_name
def test_spec_names_the_script_and_wrapper(script):
    assert script.SPEC.script == f"{script.__name__}.py"
    assert script.SPEC.api == script.API and script.API.endswith("Wrapper")


@pytest.mark.parametrize("script", (bench_batch_decode, bench_batch_prefill_paged))
def test_gqa_head_rule(script):
    for case in _all_cases(script):
        assert case["num_qo_heads"] == 32
        assert case["num_kv_heads"] == (8 if case["head_dim"] == 64 else 4)
        assert case["head_dim"] in (64, 128)


def test_decode_has_one_query_token():
    assert all(case["seq_len_q"] == 1 for case in _all_cases(bench_batch_decode))


def test_ragged_head_rule():
    for case in _all_cases(bench_batch_prefill_ragged):
        assert (case["num_qo_heads"], case["num_kv_heads"]) == (32, 4)
        assert (case["head_dim_qk"], case["head_dim_vo"]) in ((192, 128), (128, 128))
    default = bench_batch_prefill_ragged.SPEC.presets["default"]
    assert {(c["head_dim_qk"], c["head_dim_vo"]) for c in default} == {(192, 128), (128, 128)}


def test_mla_head_rule():
    for case in _all_cases(bench_batch_mla):
        assert (case["head_dim_ckv"], case["head_dim_kpe"]) == (512, 64)
        assert 16 <= case["num_heads"] <= 128
    assert {c["num_heads"] for c in bench_batch_mla.SPEC.presets["default"]} == {16, 32, 64, 128}


@pytest.mark.parametrize(
    ("script", "length"),
    [
        (bench_batch_decode, "seq_len_kv"),
        (bench_batch_prefill_paged, "seq_len"),
        (bench_batch_mla, "seq_len"),
    ],
)
def test_default_sweep_is_representative(script, length):
    """Batch 1..256 (paged prefill up to 64), KV up to 32k, and partial last pages."""
    default = script.SPEC.presets["default"]
    batches = {c["batch_size"] for c in default}
    lengths = {c[length] for c in default}
    assert min(batches) == 1 and max(batches) >= 64
    assert max(lengths) >= 16384
    assert any(n % 16 for n in lengths), "no case with a partial last page"


@by_name
def test_default_cases_stay_small_enough_for_one_gpu(script):
    """Rough size guard: no default case needs more than 10 GB of fp16 inputs."""
    for case in script.SPEC.presets["default"]:
        assert script.io_bytes(case, 2) < 10e9, case


# ---------------------------------------------------------------------------- inputs


def test_page_table_is_a_shuffled_subset_with_partial_last_pages():
    table = bi.paged_table([37, 16, 5], 16, torch.device("cpu"), seed=0)
    assert table.kv_indptr.tolist() == [0, 3, 4, 5]
    assert table.kv_last_page_len.tolist() == [5, 16, 5]
    indices = table.kv_indices.tolist()
    assert len(set(indices)) == 5 and all(0 <= i < table.num_pages for i in indices)
    assert table.num_pages > 5  # spare pages exist
    assert table.kv_indices.dtype == torch.int32


def test_page_ids_are_not_simply_in_order():
    table = bi.paged_table([1000] * 4, 16, torch.device("cpu"), seed=2)
    assert table.kv_indices.tolist() != list(range(table.kv_indices.numel()))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_inputs_are_random_and_deterministic(script):
    case = script.SPEC.presets["cpu"][0]
    a = script.make_inputs(case, _settings(seed=5))
    b = script.make_inputs(case, _settings(seed=5))
    c = script.make_inputs(case, _settings(seed=6))
    first = next(
        t for t in vars(a).values() if isinstance(t, torch.Tensor) and t.is_floating_point()
    )
    same = next(
        t for t in vars(b).values() if isinstance(t, torch.Tensor) and t.is_floating_point()
    )
    other = next(
        t for t in vars(c).values() if isinstance(t, torch.Tensor) and t.is_floating_point()
    )
    assert torch.equal(first, same) and not torch.equal(first, other)
    assert first.dtype == torch.float16 and bool((first != 0).any())


def test_case_seed_depends_on_seed_and_case():
    """The one per-case seed (the harness's, handed to prepare() as Settings.seed)."""
    assert selection.case_seed(0, {"a": 1}, ("a",)) == selection.case_seed(0, {"a": 1}, ("a",))
    assert selection.case_seed(0, {"a": 1}, ("a",)) != selection.case_seed(1, {"a": 1}, ("a",))
    assert selection.case_seed(0, {"a": 1}, ("a",)) != selection.case_seed(0, {"a": 2}, ("a",))


def test_grid_and_unique_cases():
    def make(a, b):
        return {"a": a, "b": b}

    cases = bi.grid(make, lambda c: c["a"] * c["b"] <= 4, a=(1, 2), b=(1, 2, 4))
    assert cases == (
        {"a": 1, "b": 1},
        {"a": 1, "b": 2},
        {"a": 1, "b": 4},
        {"a": 2, "b": 1},
        {"a": 2, "b": 2},
    )
    assert bi.unique_cases(cases[:2], cases[1:3]) == cases[:3]


def test_within_bounds_tokens_and_causal_work():
    keep = bi.within("seq_len", 4096, 1 << 24)
    assert keep({"batch_size": 4, "seq_len": 1024})
    assert not keep({"batch_size": 8, "seq_len": 1024})  # 8192 tokens
    assert not keep({"batch_size": 1, "seq_len": 4097})
    assert keep({"batch_size": 1, "seq_len": 4096})  # 4096^2 = 2^24
    assert bi.within("seq_len_kv", 10)({"batch_size": 2, "seq_len_kv": 5})


def test_timed_ms_measures_the_call():
    assert bi.timed_ms(lambda: sum(range(1000)), torch.device("cpu")) >= 0.0


# ---------------------------------------------------------------------------- torch backend


def _gather_paged(cache, indptr, indices, kv_len, request):
    """Tokens of one request, walking its pages in order (independent of the reference)."""
    pages = indices[indptr[request] : indptr[request + 1]].tolist()
    tokens = torch.cat([cache[p] for p in pages], dim=0)
    return tokens[:kv_len].float()


def _attend(q, k, v, scale, causal):
    """Dense softmax attention for one request, GQA by repeating KV heads; float32."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if causal:
        q_len, kv_len = q.shape[0], k.shape[0]
        keep = torch.ones(q_len, kv_len, dtype=torch.bool).tril(kv_len - q_len)
        scores = scores.masked_fill(~keep, -math.inf)
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def _dense_decode(case, inputs):
    t, scale = inputs.table, bench_batch_decode.sm_scale(case)
    outs = []
    for r in range(case["batch_size"]):
        k = _gather_paged(inputs.k_cache, t.kv_indptr, t.kv_indices, case["seq_len_kv"], r)
        v = _gather_paged(inputs.v_cache, t.kv_indptr, t.kv_indices, case["seq_len_kv"], r)
        outs.append(_attend(inputs.q[r : r + 1], k, v, scale, causal=False))
    return torch.cat(outs)


def _dense_paged(case, inputs):
    t, n = inputs.table, case["seq_len"]
    scale = bench_batch_prefill_paged.sm_scale(case)
    outs = []
    for r in range(case["batch_size"]):
        k = _gather_paged(inputs.k_cache, t.kv_indptr, t.kv_indices, n, r)
        v = _gather_paged(inputs.v_cache, t.kv_indptr, t.kv_indices, n, r)
        outs.append(_attend(inputs.q[r * n : (r + 1) * n], k, v, scale, causal=True))
    return torch.cat(outs)


def _dense_ragged(case, inputs):
    n, scale = case["seq_len"], bench_batch_prefill_ragged.sm_scale(case)
    rows = [slice(r * n, (r + 1) * n) for r in range(case["batch_size"])]
    return torch.cat(
        [_attend(inputs.q[s], inputs.k[s].float(), inputs.v[s].float(), scale, True) for s in rows]
    )


def _dense_mla(case, inputs):
    t, n = inputs.table, case["seq_len"]
    scale = bench_batch_mla.sm_scale(case)
    outs = []
    for r in range(case["batch_size"]):
        ckv = _gather_paged(inputs.ckv_cache, t.kv_indptr, t.kv_indices, n, r)
        kpe = _gather_paged(inputs.kpe_cache, t.kv_indptr, t.kv_indices, n, r)
        q = torch.cat((inputs.q_nope[r], inputs.q_pe[r]), dim=-1).float()  # [H, 576]
        scores = (q @ torch.cat((ckv, kpe), dim=-1).T) * scale  # [H, n]
        outs.append((scores.softmax(-1) @ ckv)[None])
    return torch.cat(outs)


DENSE = {
    bench_batch_decode: _dense_decode,
    bench_batch_prefill_paged: _dense_paged,
    bench_batch_prefill_ragged: _dense_ragged,
    bench_batch_mla: _dense_mla,
}


@by_name
@pytest.mark.parametrize("page_size", (16, 1))
def test_torch_backend_run_matches_a_dense_computation(script, page_size):
    case = script.SPEC.presets["cpu"][-1]
    settings = _settings(page_size=page_size)
    prepared = prepare_case(script.SPEC, case, settings)
    # the reference is what runs (kept as Prepared.reference for plugins measured beside it)
    assert (prepared.output, prepared.reference, prepared.plan_ms) == (None, prepared.run, 0.0)
    assert prepared.inputs is not None
    actual = prepared.run()
    expected = DENSE[script](case, script.make_inputs(case, settings))
    assert actual.dtype == torch.float32
    torch.testing.assert_close(actual, expected, rtol=2e-4, atol=2e-4)


@by_name
def test_main_lists_cases_without_flashinfer(script, capsys):
    assert script.main(["--list", "--preset", "smoke"]) == 0
    out = capsys.readouterr().out
    assert out.count("batch_size=") == len(script.SPEC.presets["smoke"])
