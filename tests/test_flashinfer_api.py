"""backends.flashinfer_api against stand-ins mirroring McFlashInfer 0.2.6 and FlashInfer 0.6.1.

The stand-ins (``stand_ins/fake_flashinfer.py``) copy the wrappers' parameter lists; their
``run`` computes through ``attention_reference`` from what ``plan`` received, so driving a
script's ``prepare()`` through them checks argument plumbing end to end on the CPU.
"""

from __future__ import annotations

import functools
import inspect
import sys

import pytest
import torch
from stand_ins import fake_flashinfer

import bench_batch_decode
import bench_batch_mla
import bench_batch_prefill_paged
import bench_batch_prefill_ragged
from fi_attn_bench.backends import flashinfer_api as fc
from fi_attn_bench.cases import checking
from fi_attn_bench.cases.inputs import prepare_case
from fi_attn_bench.cases.spec import Settings

RELEASES = tuple(fake_flashinfer.RELEASES)
SCRIPTS = (
    bench_batch_decode,
    bench_batch_prefill_paged,
    bench_batch_prefill_ragged,
    bench_batch_mla,
)


def _wrapper(module, name: str):
    return getattr(module, name)(torch.empty(8, dtype=torch.uint8))


def _cpu_settings(impl_kind: str = "flashinfer") -> Settings:
    return Settings(
        device=torch.device("cpu"),
        dtype=torch.float16,
        page_size=16,
        impl_kind=impl_kind,
        seed=1,
        workspace_bytes=1024,
    )


@pytest.fixture(params=RELEASES)
def fake(request, monkeypatch):
    """A fresh fake flashinfer installed as ``sys.modules['flashinfer']``."""
    module = fake_flashinfer.make_module(request.param)
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    return module


# ---------------------------------------------------------------------------- plan_kwargs

DECODE_WANTED = {
    "indptr": "I",
    "indices": "J",
    "last_page_len": "L",
    "num_qo_heads": 32,
    "num_kv_heads": 4,
    "head_dim": 128,
    "page_size": 16,
    "pos_encoding_mode": "NONE",
    "q_data_type": torch.float16,
    "kv_data_type": torch.float16,
    "o_data_type": torch.float16,
    "sm_scale": 0.125,
}


@pytest.mark.parametrize("release", RELEASES)
def test_decode_plan_kwargs_keep_names_both_releases_share(release):
    wrapper = _wrapper(fake_flashinfer.make_module(release), "BatchDecodeWithPagedKVCacheWrapper")
    kwargs = fc.plan_kwargs(wrapper.plan, DECODE_WANTED)
    expected = dict(DECODE_WANTED)
    if release == "0.2.6":
        del expected["o_data_type"]  # added after 0.2.6; None (= q dtype) by default
    assert kwargs == expected


def test_plan_kwargs_maps_old_data_type_and_head_dim():
    """Pre-0.2.3 spellings: one ``data_type``, one ``head_dim`` for q/k and v/o."""

    def plan(qo_indptr, num_qo_heads, head_dim, causal=False, sm_scale=None, data_type=None):
        pass

    wanted = {
        "qo_indptr": "Q",
        "num_qo_heads": 32,
        "head_dim_qk": 128,
        "head_dim_vo": 128,
        "causal": True,
        "sm_scale": 0.1,
        "q_data_type": torch.bfloat16,
        "kv_data_type": torch.bfloat16,
    }
    assert fc.plan_kwargs(plan, wanted) == {
        "qo_indptr": "Q",
        "num_qo_heads": 32,
        "head_dim": 128,
        "causal": True,
        "sm_scale": 0.1,
        "data_type": torch.bfloat16,
    }


def test_plan_kwargs_rejects_split_head_dims_on_a_single_head_dim_api():
    def plan(qo_indptr, head_dim, causal=False):
        pass

    with pytest.raises(fc.UnsupportedCase, match="single 'head_dim'"):
        fc.plan_kwargs(plan, {"qo_indptr": 0, "head_dim_qk": 192, "head_dim_vo": 128})


def test_plan_kwargs_maps_new_head_dim_qk_to_decode_style_head_dim():
    def plan(indptr, head_dim_qk, head_dim_vo=None):
        pass

    assert fc.plan_kwargs(plan, {"indptr": 0, "head_dim": 64}) == {"indptr": 0, "head_dim_qk": 64}


def test_plan_kwargs_refuses_to_drop_a_parameter_that_changes_the_math():
    def plan(qo_indptr, num_qo_heads):
        pass

    with pytest.raises(fc.UnsupportedCase, match="no parameter 'causal'"):
        fc.plan_kwargs(plan, {"qo_indptr": 0, "num_qo_heads": 32, "causal": True})
    # a default-valued one is simply dropped
    assert fc.plan_kwargs(plan, {"qo_indptr": 0, "num_qo_heads": 32, "non_blocking": True}) == {
        "qo_indptr": 0,
        "num_qo_heads": 32,
    }


def test_error_messages_describe_tensors_by_shape():
    def plan(qo_indptr):
        pass

    with pytest.raises(fc.UnsupportedCase) as info:
        fc.plan_kwargs(plan, {"qo_indptr": 0, "custom_mask": torch.zeros(1000, 1000)})
    assert "<tensor (1000, 1000) torch.float32>" in str(info.value)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("release", RELEASES)
def test_mla_plan_requires_all_twelve_arguments(release):
    wrapper = _wrapper(fake_flashinfer.make_module(release), "BatchMLAPagedAttentionWrapper")
    wanted = {name: 0 for name in list(inspect.signature(wrapper.plan).parameters)[:12]}
    assert list(fc.plan_kwargs(wrapper.plan, wanted)) == list(wanted)
    del wanted["sm_scale"]
    with pytest.raises(fc.UnsupportedCase, match="requires sm_scale"):
        fc.plan_kwargs(wrapper.plan, wanted)


def test_plan_kwargs_passes_everything_to_an_open_signature():
    def plan(qo_indptr, **kwargs):
        pass

    assert fc.plan_kwargs(plan, {"qo_indptr": 1, "causal": True}) == {
        "qo_indptr": 1,
        "causal": True,
    }


def test_signature_seen_through_a_logging_decorator():
    """FlashInfer 0.6 wraps plan/run in ``@flashinfer_api`` (functools.wraps when logging)."""
    wrapper = _wrapper(fake_flashinfer.make_module("0.6.1"), "BatchDecodeWithPagedKVCacheWrapper")

    @functools.wraps(wrapper.plan)
    def logged(*args, **kwargs):
        return wrapper.plan(*args, **kwargs)

    assert fc.plan_kwargs(logged, DECODE_WANTED) == DECODE_WANTED


def test_call_passes_positional_only_parameters_by_position():
    seen = {}

    def plan(qo_indptr, kv_indptr, /, num_heads, *, causal):
        seen.update(qo_indptr=qo_indptr, kv_indptr=kv_indptr, num_heads=num_heads, causal=causal)

    fc.call(plan, {"qo_indptr": 1, "kv_indptr": 2, "num_heads": 16, "causal": False})
    assert seen == {"qo_indptr": 1, "kv_indptr": 2, "num_heads": 16, "causal": False}


# ---------------------------------------------------------------------------- run / init


@pytest.mark.parametrize("release", RELEASES)
@pytest.mark.parametrize("name", fake_flashinfer.WRAPPER_NAMES)
def test_every_release_run_accepts_out(release, name):
    wrapper = _wrapper(fake_flashinfer.make_module(release), name)
    assert fc.run_accepts_out(wrapper.run)


def test_run_accepts_out_is_false_without_an_out_parameter():
    def run(q, k, v, *args, return_lse=False):
        pass

    def run_open(q, *args, **kwargs):
        pass

    assert not fc.run_accepts_out(run)
    assert not fc.run_accepts_out(run_open)


def test_run_call_without_out_returns_the_fresh_result():
    def run(q):
        return q + 1

    closure, output = fc.run_call(run, (1,), out=torch.zeros(1))
    assert output is None and closure() == 2


def test_decode_constructor_backend_only_where_accepted():
    old = fake_flashinfer.make_module("0.2.6").BatchDecodeWithPagedKVCacheWrapper
    new = fake_flashinfer.make_module("0.6.1").BatchDecodeWithPagedKVCacheWrapper
    wanted = {"kv_layout": "NHD", "use_tensor_cores": False, "backend": "auto"}
    assert fc.init_kwargs(old, wanted) == {"kv_layout": "NHD", "use_tensor_cores": False}
    assert fc.init_kwargs(new, wanted) == wanted
    with pytest.raises(fc.UnsupportedCase, match="no parameter 'backend'"):
        fc.init_kwargs(old, {"backend": "trtllm-gen"})


def test_mla_constructor_has_no_kv_layout_but_nhd_is_its_layout():
    mla = fake_flashinfer.make_module("0.6.1").BatchMLAPagedAttentionWrapper
    assert fc.init_kwargs(mla, {"kv_layout": "NHD", "backend": "fa2"}) == {"backend": "fa2"}
    with pytest.raises(fc.UnsupportedCase):
        fc.init_kwargs(mla, {"kv_layout": "HND"})


def test_wrapper_class_falls_back_to_the_mla_submodule():
    module = fake_flashinfer.make_module("0.2.6")
    cls = module.BatchMLAPagedAttentionWrapper
    del module.BatchMLAPagedAttentionWrapper
    assert fc.wrapper_class(module, "BatchMLAPagedAttentionWrapper") is cls
    with pytest.raises(fc.UnsupportedCase, match="has no BatchFooWrapper"):
        fc.wrapper_class(module, "BatchFooWrapper")


# ---------------------------------------------------------------------------- loading


def test_load_flashinfer_reports_the_import_failure(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)  # makes the import raise
    with pytest.raises(fc.FlashInferUnavailable, match="flashinfer cannot be imported"):
        fc.load_flashinfer()


def test_load_flashinfer_returns_the_module(fake):
    assert fc.load_flashinfer() is fake


def test_flashinfer_version_prefers_a_real_version(monkeypatch):
    assert fc.flashinfer_version(fake_flashinfer.make_module("0.6.1")) == "0.6.1"
    monkeypatch.setattr(fc.importlib.metadata, "version", lambda dist: "0.2.6+maca")
    assert fc.flashinfer_version(fake_flashinfer.make_module("0.2.6")) == "0.2.6+maca"


def test_flashinfer_version_falls_back_to_what_the_module_says(monkeypatch):
    def missing(dist):
        raise fc.importlib.metadata.PackageNotFoundError(dist)

    monkeypatch.setattr(fc.importlib.metadata, "version", missing)
    assert fc.flashinfer_version(fake_flashinfer.make_module("0.2.6")) == "0.0.0+unknown"
    assert fc.flashinfer_version(None) is None


# ---------------------------------------------------------------------------- scripts


def _calls(module, method: str) -> list[dict]:
    return [args for _, name, args in module.calls if name == method]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_prepare_drives_the_wrappers_correctly(fake, script):
    """Output written into the poisoned ``out`` buffer and equal to the reference."""
    case = script.SPEC.presets["cpu"][-1]
    prepared = prepare_case(script.SPEC, case, _cpu_settings())
    assert prepared.output is not None and prepared.plan_ms >= 0.0
    # plan() twice in prepare (a JIT-absorbing warm-up, then the timed one), never in run()
    assert len(_calls(fake, "plan")) == 2
    checking.poison_(prepared.output)
    assert prepared.run() is prepared.output
    result = checking.check_output(prepared.output, prepared.reference())
    assert result.passed, result.message
    assert len(_calls(fake, "plan")) == 2
    run_args = _calls(fake, "run")[-1]
    assert run_args["out"] is prepared.output


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_plan_receives_scale_dtypes_and_mask(fake, script):
    case = script.SPEC.presets["cpu"][0]
    prepare_case(script.SPEC, case, _cpu_settings())
    plan = _calls(fake, "plan")[-1]
    assert plan["sm_scale"] == pytest.approx(script.sm_scale(case))
    assert plan["q_data_type"] == torch.float16 and plan["kv_data_type"] == torch.float16
    if script is bench_batch_mla:
        assert plan["causal"] is False and plan["page_size"] == 16
    elif script is not bench_batch_decode:
        assert plan["causal"] is True
    if script is bench_batch_prefill_ragged:
        assert (plan["head_dim_qk"], plan["head_dim_vo"]) == (
            case["head_dim_qk"],
            case["head_dim_vo"],
        )


def test_decode_constructed_without_tensor_cores_and_backend_only_on_061(fake):
    prepare_case(
        bench_batch_decode.SPEC, bench_batch_decode.SPEC.presets["cpu"][0], _cpu_settings()
    )
    init = _calls(fake, "__init__")[-1]
    assert init["use_tensor_cores"] is False and init["kv_layout"] == "NHD"
    assert ("backend" in init) == (fake.__version__ == "0.6.1")


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
def test_an_unwritten_output_fails_the_check(fake, script):
    """The harness's poison-then-check catches a run() that ignores ``out``."""
    prepared = prepare_case(script.SPEC, script.SPEC.presets["cpu"][0], _cpu_settings())
    checking.poison_(prepared.output)
    assert not checking.check_output(prepared.output, prepared.reference()).passed


def test_torch_backend_never_imports_flashinfer(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    for script in SCRIPTS:
        prepared = prepare_case(script.SPEC, script.SPEC.presets["cpu"][0], _cpu_settings("torch"))
        assert prepared.output is None and prepared.reference is prepared.run
        assert prepared.plan_ms == 0.0


def test_flashinfer_backend_without_flashinfer_raises_backend_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", None)
    case = bench_batch_decode.SPEC.presets["cpu"][0]
    with pytest.raises(fc.FlashInferUnavailable):
        prepare_case(bench_batch_decode.SPEC, case, _cpu_settings())
