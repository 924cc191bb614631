"""benchmarks/fib_round_trip.py's steps after FlashInfer (dataset from dumps, scripts with --fib
and --fib-traces, traces loaded) on the CPU reference, on dumps built as FlashInfer writes them."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("safetensors", reason="--fib reads safetensors: pip install -e '.[test]'")
pytest.importorskip("flashinfer_bench", reason="pip install --no-deps flashinfer-bench (.ci/run)")
import test_fib_mapping as dumps  # noqa: E402
import torch  # noqa: E402

from benchmarks import fib_round_trip as trip  # noqa: E402
from fi_attn_bench.apis import decode, mla, prefill_paged, prefill_ragged  # noqa: E402

SMALL = (
    (decode.SPEC, {"batch_size": 2, "seq_len_q": 1, "seq_len_kv": 64,
                   "num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128}),
    (prefill_paged.SPEC, {"batch_size": 2, "seq_len": 32, "num_qo_heads": 32,
                          "num_kv_heads": 8, "head_dim": 128}),
    (prefill_ragged.SPEC, {"batch_size": 2, "seq_len": 32, "num_qo_heads": 32,
                           "num_kv_heads": 8, "head_dim_qk": 128, "head_dim_vo": 128}),
    (mla.SPEC, {"batch_size": 2, "seq_len": 64, "num_heads": 16, "head_dim_ckv": 512,
                "head_dim_kpe": 64}),
)  # fmt: skip


def write_dumps(folder):
    """The four definitions FlashInfer dumps for these calls (MLA at the run's page size 16),
    and the plan() one it also writes, which no script measures."""
    mla_dump = dumps.mla_paged()
    mla_dump["axes"]["page_size"]["value"] = trip.PAGE_SIZE
    mla_dump["name"] = "mla_paged_decode_h16_ckv512_kpe64_ps16"
    plan = {**dumps.gqa_decode(), "name": "gqa_paged_decode_plan_h32", "op_type": "gqa_paged_plan"}
    for record in (dumps.gqa_decode(), dumps.gqa_prefill(), dumps.gqa_ragged(), mla_dump, plan):
        (folder / f"{record['name']}.json").write_text(json.dumps(record, indent=2))


def test_a_dataset_from_dumps_runs_through_the_scripts_and_loads_in_fib(tmp_path):
    dump_dir = tmp_path / "dumps"
    dump_dir.mkdir()
    write_dumps(dump_dir)
    calls = trip.make_calls(torch.device("cpu"), SMALL)
    impls = {decode.SPEC.script: ["torch", "fib:py_decode", "fib:py_decode_wrong"]}
    result = trip.round_trip(tmp_path / "out", dump_dir, calls, "cpu", impls, in_process=True)
    assert result["definitions"] == {
        decode.SPEC.script: "gqa_paged_decode_h32_kv8_d128_ps16",
        prefill_paged.SPEC.script: "gqa_paged_prefill_h32_kv8_d128_ps16",
        prefill_ragged.SPEC.script: "gqa_ragged_h32_kv8_d128",
        mla.SPEC.script: "mla_paged_decode_h16_ckv512_kpe64_ps16",
    }
    assert result["exit_codes"] == {
        decode.SPEC.script: 1, prefill_paged.SPEC.script: 0,
        prefill_ragged.SPEC.script: 0, mla.SPEC.script: 0,
    }  # fmt: skip
    statuses = result["traces"]["statuses"]
    assert statuses["gqa_paged_decode_h32_kv8_d128_ps16"] == [
        "py_decode:PASSED", "py_decode_wrong:INCORRECT_NUMERICAL", "torch:PASSED",
    ]  # fmt: skip
    assert statuses["gqa_ragged_h32_kv8_d128"] == ["torch:PASSED"]
    assert result["traces"]["summary"]["total"] == 6
    assert trip.passed(result)
    (plan,) = result["not_measured"]
    assert plan.startswith("gqa_paged_decode_plan_h32: op_type 'gqa_paged_plan'")


def test_the_gate_fails_when_a_good_solution_fails():
    result = {
        "definitions": {"x": "gqa_paged_decode"},
        "exit_codes": {"x": 1},
        "traces": {"statuses": {"d": ["py_decode:RUNTIME_ERROR", "py_decode_wrong:PASSED"]}},
    }
    assert not trip.passed(result)


def test_the_planning_benchmark_runs(capsys):
    from benchmarks import fib_planning

    assert fib_planning.main(["20"]) == 0
    assert capsys.readouterr().out.startswith("20 workloads: read_dataset ")


def test_without_a_gpu_the_script_says_how_to_run_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert trip.main([str(tmp_path / "out")]) == 2
    assert "on a GPU with FlashInfer" in capsys.readouterr().err
