"""MetaX (``torch.version.maca`` set, the 0.2.6 port's API): only the backends the port runs
are offered, and a kernel variant whose build or plan() failed fails once per process."""

from __future__ import annotations

import importlib
import sys

import pytest
import torch
from stand_ins import fake_flashinfer
from test_bench_common import EXPLODING, run_main

from fi_attn_bench.backends import flashinfer_api as fc
from fi_attn_bench.backends import impls, wrapper
from fi_attn_bench.backends.choice import Probe
from fi_attn_bench.cases.inputs import prepare_case
from fi_attn_bench.cases.spec import Settings
from fi_attn_bench.errors import UsageError

PAGED, MLA = "BatchPrefillWithPagedKVCacheWrapper", "BatchMLAPagedAttentionWrapper"


@pytest.fixture
def metax(monkeypatch):
    """torch as MetaX's MACA build reports itself, and the port's wrappers."""
    monkeypatch.setattr(torch.version, "maca", "3.7.0", raising=False)
    return fake_flashinfer.make_module("0.2.6")


@pytest.mark.parametrize(("api", "backend"), [(PAGED, "fa3"), (MLA, "fa3"), (MLA, "cutlass")])
def test_metax_refuses_what_the_port_cannot_run(metax, api, backend):
    with pytest.raises(UsageError, match=f"flashinfer:{backend}: not offered on MetaX"):
        impls.parse_impl(f"flashinfer:{backend}", api, metax)


@pytest.mark.parametrize("api", [PAGED, MLA])
def test_metax_offers_auto_and_fa2(metax, api):
    for backend in ("auto", "fa2"):
        assert impls.parse_impl(f"flashinfer:{backend}", api, metax).wrapper_backend == backend


def test_nvidia_still_offers_fa3_and_cutlass(monkeypatch):
    monkeypatch.setattr(torch.version, "maca", None, raising=False)
    module = fake_flashinfer.make_module("0.2.6")
    assert impls.parse_impl("flashinfer:cutlass", MLA, module).wrapper_backend == "cutlass"


def test_metax_fa3_exits_2_with_one_line_before_any_case(metax, capsys):
    spec = EXPLODING.__class__(**{**EXPLODING.__dict__, "api": PAGED})
    probe = Probe(cuda_available=lambda: True, import_flashinfer=lambda: metax)
    assert run_main(["--impl", "flashinfer:fa3"], spec=spec, probe=probe) == 2
    err = capsys.readouterr().err
    assert "error: --impl flashinfer:fa3: not offered on MetaX" in err
    assert len([line for line in err.splitlines() if "error:" in line]) == 1


def _failing_plan_module(monkeypatch, attempts: list[str]):
    """The port's wrappers, with a paged-prefill plan() whose JIT build fails."""
    module = fake_flashinfer.make_module("0.2.6")
    base = module.BatchPrefillWithPagedKVCacheWrapper

    class Broken(base):
        def plan(self, *args, **kwargs):
            attempts.append("plan")
            raise RuntimeError("Ninja build failed: no fa3 for this target")

    Broken.plan.__signature__ = importlib.import_module("inspect").signature(base.plan)
    module.BatchPrefillWithPagedKVCacheWrapper = Broken
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    monkeypatch.setattr(wrapper, "FAILED_VARIANTS", wrapper.FailedVariants())
    return module


def test_a_failed_build_is_attempted_once_per_process(metax, monkeypatch):
    attempts: list[str] = []
    _failing_plan_module(monkeypatch, attempts)
    spec = importlib.import_module("bench_batch_prefill_paged").SPEC
    settings = Settings(torch.device("cpu"), torch.float16, 16, "flashinfer", seed=5)
    cases = spec.presets["cpu"][:2]
    messages = []
    for case in (*cases, cases[0]):
        with pytest.raises(RuntimeError, match="Ninja build failed") as failed:
            prepare_case(spec, case, settings)
        messages.append(str(failed.value))
    assert attempts == ["plan"]  # the later rows did not build again
    assert len(set(messages)) == 1


def test_another_variant_is_still_attempted(monkeypatch):
    failed = wrapper.FailedVariants()
    calls = []

    def broken():
        calls.append(1)
        raise RuntimeError("build failed")

    for key in ("a", "a", "b"):
        with pytest.raises(RuntimeError):
            failed.attempt(key, broken)
    assert len(calls) == 2


def test_a_variant_that_planned_once_is_never_marked():
    failed = wrapper.FailedVariants()
    failed.attempt("a", lambda: "ok")
    outcomes = iter([RuntimeError("this case's own failure"), None])

    def sometimes():
        error = next(outcomes)
        if error:
            raise error
        return "ok again"

    with pytest.raises(RuntimeError):
        failed.attempt("a", sometimes)
    assert failed.attempt("a", sometimes) == "ok again"


def test_out_of_memory_is_the_case_not_the_variant():
    failed = wrapper.FailedVariants()
    outcomes = iter([torch.OutOfMemoryError("too big"), None])

    def sized():
        error = next(outcomes)
        if error:
            raise error
        return "fits"

    with pytest.raises(torch.OutOfMemoryError):
        failed.attempt("a", sized)
    assert failed.attempt("a", sized) == "fits"


def test_platform_offer_keeps_the_source():
    offer = fc.BackendOffer(("auto", "fa2", "fa3", "cutlass"), "docstring")
    assert fc.platform_offer(offer, maca=False) == offer
    assert fc.platform_offer(offer, maca=True).values == ("auto", "fa2")


def test_the_doctor_probes_mla_graphs_through_the_installed_wrapper(monkeypatch, metax):
    from fi_attn_bench import doctor

    monkeypatch.setitem(sys.modules, "flashinfer", metax)
    probe = doctor.mla_probe(torch.device("cpu"), metax)
    assert not isinstance(probe, str) and probe.label.startswith(MLA)
    probe.run()
    assert torch.isfinite(probe.output).all()
    missing = doctor.check_mla_graph(torch.device("cpu"), None, lambda: None)
    assert missing.name == "cuda_graph_mla" and missing.status.value == "unavailable"
