"""FlashInfer's own definition dumps (FLASHINFER_TRACE_DUMP=1) mapped to the scripts.

The dumps are built here in the shape FlashInfer 0.7.4 writes them (``flashinfer/trace/
template.py``, ``TraceTemplate.build_fi_trace_fn``; the attention templates of
``flashinfer/trace/templates/attention.py``): const axes with the values read from the call,
plan()-time index tensors with dtype "unknown" and ``optional``, scalars with shape null, the
template's reference function under its own name, ``init`` and ``check`` sources."""

from __future__ import annotations

import json

import pytest

from fi_attn_bench.apis import decode, mla, prefill_paged, prefill_ragged
from fi_attn_bench.command_line import main_for
from fi_attn_bench.fib.dataset import parse_definition, read_dataset
from fi_attn_bench.fib.dump import fib_definition
from fi_attn_bench.fib.mapping import Mapped, Unmapped, classify

API = "flashinfer.{}"


def _var(description=None):
    return {"type": "var", **({"description": description} if description else {})}


def _const(value):
    return {"type": "const", "value": value}


def _tensor(shape, dtype="bfloat16", optional=False):
    return {"shape": shape, "dtype": dtype, **({"optional": True} if optional else {})}


def _index(shape):
    return _tensor(shape, "unknown", optional=True)


SCALARS = {
    "sm_scale": {"shape": None, "dtype": "float32", "optional": True},
    "return_lse": {"shape": None, "dtype": "int32", "optional": True},
}


def dump(name, op_type, fi_api, stage, axes, inputs, outputs) -> dict:
    """One definition as FlashInfer's TraceTemplate writes it."""
    rows = outputs["output"]["shape"][0]
    return {
        "name": name,
        "description": f"{op_type} as traced",
        "op_type": op_type,
        "tags": [f"fi_api:{API.format(fi_api)}", f"stage:{stage}", "status:verified"],
        "axes": axes,
        "constraints": ["num_kv_indices == kv_indptr[-1].item()"],
        "inputs": {**inputs, **SCALARS},
        "outputs": {**outputs, "lse": _tensor([rows, "num_qo_heads"], "float32", True)},
        "reference": f"import torch\n\ndef _{name}_reference(*args):\n    return args\n",
        "init": "def _init(**kw):\n    return {}\n",
    }


def gqa_decode(dtype="bfloat16"):
    cache = _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"], dtype)
    return dump(
        "gqa_paged_decode_h32_kv8_d128_ps16", "gqa_paged",
        "decode.BatchDecodeWithPagedKVCacheWrapper.run", "decode",
        {"batch_size": _var("Total number of query tokens."), "num_qo_heads": _const(32),
         "num_kv_heads": _const(8), "head_dim": _const(128), "num_pages": _var(),
         "page_size": _const(16), "len_indptr": _var(), "num_kv_indices": _var()},
        {"q": _tensor(["batch_size", "num_qo_heads", "head_dim"], dtype), "k_cache": cache,
         "v_cache": cache, "kv_indptr": _index(["len_indptr"]),
         "kv_indices": _index(["num_kv_indices"])},
        {"output": _tensor(["batch_size", "num_qo_heads", "head_dim"], dtype)},
    )  # fmt: skip


def gqa_prefill():
    cache = _tensor(["num_pages", "page_size", "num_kv_heads", "head_dim"])
    return dump(
        "gqa_paged_prefill_h32_kv8_d128_ps16", "gqa_paged",
        "prefill.BatchPrefillWithPagedKVCacheWrapper.run", "prefill",
        {"num_qo_heads": _const(32), "num_kv_heads": _const(8), "head_dim": _const(128),
         "page_size": _const(16), "len_indptr": _var(), "total_q": _var(),
         "num_kv_indices": _var(), "num_pages": _var()},
        {"q": _tensor(["total_q", "num_qo_heads", "head_dim"]), "k_cache": cache,
         "v_cache": cache, "qo_indptr": _index(["len_indptr"]),
         "kv_indptr": _index(["len_indptr"]), "kv_indices": _index(["num_kv_indices"])},
        {"output": _tensor(["total_q", "num_qo_heads", "head_dim"])},
    )  # fmt: skip


def gqa_ragged():
    return dump(
        "gqa_ragged_h32_kv8_d128", "gqa_ragged",
        "prefill.BatchPrefillWithRaggedKVCacheWrapper.run", "prefill",
        {"num_qo_heads": _const(32), "num_kv_heads": _const(8), "head_dim": _const(128),
         "len_indptr": _var(), "total_q": _var(), "total_kv": _var()},
        {"q": _tensor(["total_q", "num_qo_heads", "head_dim"]),
         "k": _tensor(["total_kv", "num_kv_heads", "head_dim"]),
         "v": _tensor(["total_kv", "num_kv_heads", "head_dim"]),
         "qo_indptr": _index(["len_indptr"]), "kv_indptr": _index(["len_indptr"])},
        {"output": _tensor(["total_q", "num_qo_heads", "head_dim"])},
    )  # fmt: skip


def mla_paged(stage="decode"):
    rows = "batch_size" if stage == "decode" else "total_q"
    inputs = {
        "q_nope": _tensor([rows, "num_qo_heads", "head_dim_ckv"]),
        "q_pe": _tensor([rows, "num_qo_heads", "head_dim_kpe"]),
        "ckv_cache": _tensor(["num_pages", "page_size", "head_dim_ckv"]),
        "kpe_cache": _tensor(["num_pages", "page_size", "head_dim_kpe"]),
        "kv_indptr": _index(["len_indptr"]), "kv_indices": _index(["num_kv_indices"]),
        "ckv_scale": {"shape": None, "dtype": "float32", "optional": True},
        "ckv_scale_arr": _tensor(["num_pages", "page_size", "ckv_scale_groups"], "float32", True),
        "kpe_scale": {"shape": None, "dtype": "float32", "optional": True},
    }  # fmt: skip
    if stage == "prefill":
        inputs["qo_indptr"] = _index(["len_indptr"])
    return dump(
        f"mla_paged_{stage}_h16_ckv512_kpe64_ps64", "mla_paged",
        "mla.BatchMLAPagedAttentionWrapper.run", stage,
        {rows: _var(), "num_qo_heads": _const(16), "head_dim_ckv": _const(512),
         "head_dim_kpe": _const(64), "page_size": _const(64), "ckv_scale_groups": _var(),
         "num_pages": _var(), "len_indptr": _var(), "num_kv_indices": _var()},
        inputs, {"output": _tensor([rows, "num_qo_heads", "head_dim_ckv"])},
    )  # fmt: skip


def mapped(record) -> Mapped | Unmapped:
    return classify(parse_definition(json.loads(json.dumps(record)), "dump.json"))


@pytest.mark.parametrize(
    "record,spec,heads",
    [
        (gqa_decode(), decode.SPEC, {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128}),
        (gqa_prefill(), prefill_paged.SPEC, {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128}),
        (gqa_ragged(), prefill_ragged.SPEC,
         {"num_qo_heads": 32, "num_kv_heads": 8, "head_dim_qk": 128, "head_dim_vo": 128}),
        (mla_paged(), mla.SPEC, {"num_heads": 16, "head_dim_ckv": 512, "head_dim_kpe": 64}),
    ],
)  # fmt: skip
def test_each_dumped_kind_maps_to_its_script_and_case_heads(record, spec, heads):
    found = mapped(record)
    assert isinstance(found, Mapped), found
    assert found.kind.script == spec.script
    assert dict(found.heads) == heads
    assert found.dtype == "bfloat16"
    assert set(heads) <= set(spec.case_fields)


@pytest.mark.parametrize(
    "record,reason",
    [
        (mla_paged("prefill"), "mla_paged prefill: no script measures it"),
        (gqa_decode("float8_e4m3fn"), "q/K/V dtype float8_e4m3fn"),
        ({**gqa_decode(), "op_type": "trtllm_paged"}, "op_type 'trtllm_paged'"),
        ({**gqa_decode(), "axes": {**gqa_decode()["axes"], "page_size": {"type": "const"}}},
         "no constant value for page_size"),
        ({**gqa_decode(), "inputs": {**gqa_decode()["inputs"],
          "block_tables": _tensor(["batch_size", "num_pages"], "int32")}},
         "input 'block_tables' has no counterpart"),
        ({**gqa_decode(), "inputs": {**gqa_decode()["inputs"],
          "k_cache": _tensor(["num_pages", "num_kv_heads", "head_dim"])}},
         "input 'k_cache' has axes ['num_pages', 'num_kv_heads', 'head_dim']"),
    ],
)  # fmt: skip
def test_a_definition_no_script_measures_is_listed_with_its_reason(record, reason):
    found = mapped(record)
    assert isinstance(found, Unmapped)
    assert reason in found.reason


def test_a_dump_folder_is_read_and_its_definitions_listed(tmp_path, capsys):
    for record in (gqa_decode(), gqa_ragged(), mla_paged("prefill")):
        (tmp_path / f"{record['name']}.json").write_text(json.dumps(record, indent=2))
    dataset = read_dataset(str(tmp_path))
    assert dataset.layout == "dump" and len(dataset.definitions) == 3
    assert main_for(decode.SPEC, ["--fib", str(tmp_path), "--device", "cpu"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.endswith(
        f"error: --fib {tmp_path}: no workload that bench_batch_decode.py measures"
    )


def test_dumps_become_definitions_flashinfer_bench_accepts():
    fib = pytest.importorskip("flashinfer_bench", reason="pip install --no-deps flashinfer-bench")
    with pytest.raises(ValueError):
        fib.Definition.model_validate(gqa_decode())  # as dumped: "unknown" dtypes, no run()
    for record in (gqa_decode(), gqa_prefill(), gqa_ragged(), mla_paged()):
        fixed = fib.Definition.model_validate(fib_definition(record))
        assert fixed.inputs["kv_indptr"].dtype.value == "int32"
        assert fixed.name == record["name"]
    already = fib_definition(gqa_decode())
    assert fib_definition(already) == already
