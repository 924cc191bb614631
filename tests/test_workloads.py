"""Length distributions, the batch-spec grammar and workload files (pure, no torch)."""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fi_attn_bench.cases import workloads as wl
from fi_attn_bench.cases.workload_files import read_safetensors_ints, read_workload_file
from fi_attn_bench.cases.workloads import Batch, RequestShape, WorkloadError

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------- distributions


def test_fixed_and_units():
    assert wl.parse_distribution("4k") == wl.Fixed(4096)
    assert wl.parse_distribution("1m") == wl.Fixed(1 << 20)
    assert wl.parse_distribution("fixed:300") == wl.Fixed(300)
    assert wl.parse_distribution("list:1,2k,3") == wl.Explicit((1, 2048, 3))


def test_lognormal_defaults_and_params():
    d = wl.parse_distribution("lognormal:median=1k,sigma=1.5")
    assert d == wl.LogNormal(median=1024, sigma=1.5, min=1, max=wl.MAX_KV_LEN)
    d = wl.parse_distribution("lognormal:median=1024,sigma=1.0,min=16,max=32768")
    assert (d.min, d.max) == (16, 32768)


def test_draws_respect_bounds_and_statistics():
    rng = wl.random.Random(1)
    values = wl.LogNormal(1000, 0.5, 200, 5000).draw(rng, 4000)
    assert min(values) >= 200 and max(values) <= 5000
    median = sorted(values)[len(values) // 2]
    assert 900 < median < 1100  # the parameter is the median
    uni = wl.Uniform(10, 20).draw(rng, 2000)
    assert set(uni) == set(range(10, 21))
    bi = wl.Bimodal(100, 9000, 0.25).draw(rng, 4000)
    assert set(bi) == {100, 9000} and 0.2 < bi.count(9000) / 4000 < 0.3
    tail = wl.Pareto(100, 1.5, 10_000).draw(rng, 4000)
    assert min(tail) >= 100 and max(tail) <= 10_000 and max(tail) > 20 * 100
    assert wl.Explicit((5, 6)).draw(rng, 5) == [5, 6, 5, 6, 5]


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("lognormal:median=1k", 1, "needs sigma="),
        ("lognormal:median=1k,sigma=x", 27, "expected a number"),
        ("lognormal:median=1k,sgma=1", 21, "takes median="),
        ("gamma:k=1", 1, "unknown distribution"),
        ("uniform:lo=9,hi=3", 1, "lower bound 9 above upper bound 3"),
        ("uniform:lo=0,hi=3", 12, "not in 1.."),
        ("2000000", 1, "not in 1..1048576"),
        ("bimodal:short=1,long=9,p_long=1.5", 31, "probability"),
        ("list:1,,2", 8, "expected a length"),
    ],
)
def test_distribution_errors_name_the_position(text, position, words):
    with pytest.raises(WorkloadError) as info:
        wl.parse_distribution(text)
    assert f"position {position} " in str(info.value) and words in str(info.value)


# ---------------------------------------------------------------------------- batch specs


def test_mixed_spec_example():
    spec = wl.parse_batch_spec("8d@4k+2p512@2k")
    batch = spec.draw(seed=0)
    assert batch.requests == (RequestShape(1, 4096),) * 8 + (RequestShape(512, 2048),) * 2
    assert not spec.random
    shape = batch.shape()
    assert (shape.num_requests, shape.total_q_tokens, shape.total_kv_tokens) == (10, 1032, 36864)
    assert (shape.kv_len_min, shape.kv_len_max) == (2048, 4096)
    assert shape.kv_len_mean == pytest.approx(3686.4)


def test_prefill_without_context_is_a_whole_prompt():
    assert wl.parse_batch_spec("3p100").draw(0).requests == (RequestShape(100, 100),) * 3


def test_drawn_context_is_raised_to_its_chunk():
    batch = wl.parse_batch_spec("50p512@uniform:lo=100,hi=1000").draw(3)
    assert all(r.kv_len >= r.q_len == 512 for r in batch.requests)
    assert any(r.kv_len == 512 for r in batch.requests)


def test_same_spec_and_seed_same_batch_other_seed_other_batch():
    text = "64d@lognormal:median=1k,sigma=1.0,min=16,max=32k"
    assert wl.parse_batch_spec(text).draw(7) == wl.parse_batch_spec(text).draw(7)
    assert wl.parse_batch_spec(text).draw(7) != wl.parse_batch_spec(text).draw(8)


def test_draws_are_the_same_in_a_fresh_interpreter():
    """Reproducible on any machine: nothing depends on process state or hash seeds."""
    code = textwrap.dedent(
        """
        from fi_attn_bench.cases import workloads as wl
        print(wl.parse_batch_spec("16d@pareto:min=64,alpha=1.2,max=64k").draw(5).kv_lens)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", "PYTHONPATH": str(ROOT)},
    ).stdout
    here = wl.parse_batch_spec("16d@pareto:min=64,alpha=1.2,max=64k").draw(5).kv_lens
    assert out.strip() == str(here)


def test_workload_label_names_the_seed_only_for_random_specs():
    assert wl.workload_from_spec("8d@4k", 5).label == "8d@4k"
    assert wl.workload_from_spec("8d@uniform:lo=1,hi=9", 0).label == "8d@uniform:lo=1,hi=9"
    assert wl.workload_from_spec("8d@uniform:lo=1,hi=9", 5).label == "8d@uniform:lo=1,hi=9 seed=5"
    assert wl.workload_from_spec("8d@4k", 0).source == ("--batch", "8d@4k")


@pytest.mark.parametrize(
    ("text", "position", "words"),
    [
        ("8x@4k", 1, "expected COUNTd@LENGTH"),
        ("8d4k", 3, "needs '@LENGTH'"),
        ("8d@4k+", 7, "empty term"),
        ("8d@4k++2p5", 7, "empty term"),
        ("8d@4q", 4, "expected a length"),
        ("2p4k@2k", 3, "chunk of 4096 tokens over a 2048-token context"),
        ("0d@4k", 1, "request count 0"),
        ("8d@4k+70000d@1", 7, "request count 70000"),
        ("40000d@1+40000d@1", 10, "more than 65536 requests"),
        ("8d@ 4k", 4, "space"),
        ("2p@4k", 3, "chunk length"),
    ],
)
def test_spec_errors_name_the_position(text, position, words):
    with pytest.raises(WorkloadError) as info:
        wl.parse_batch_spec(text)
    message = str(info.value)
    assert f"position {position} " in message and words in message, message


def test_empty_spec_is_an_error():
    with pytest.raises(WorkloadError, match="empty batch spec"):
        wl.parse_batch_spec("")


def test_total_token_limit():
    with pytest.raises(WorkloadError, match="cached tokens, more than the limit"):
        wl.parse_batch_spec("65536d@1m").draw(0)


# ---------------------------------------------------------------------------- batches


def test_uniform_twin_keeps_counts_and_totals():
    batch = Batch.of([1, 1, 300], [10, 5000, 301])
    twin = wl.uniform_twin(batch)
    assert len(twin.requests) == 3
    assert sum(twin.q_lens) == 302 and sum(twin.kv_lens) == 5311
    assert max(twin.kv_lens) - min(twin.kv_lens) <= 1
    assert max(twin.q_lens) - min(twin.q_lens) <= 1
    assert all(r.q_len <= r.kv_len for r in twin.requests)


def test_check_batch_rejects_zero_requests_and_bad_lengths():
    with pytest.raises(WorkloadError, match="at least one request"):
        wl.check_batch(Batch(()), "x")
    with pytest.raises(WorkloadError, match="q_len 5 not in 1..kv_len 4"):
        wl.check_batch(Batch.of([5], [4]), "x")
    with pytest.raises(WorkloadError, match="kv_len 0"):
        wl.check_batch(Batch.of([1], [0]), "x")


def test_workload_identity_is_its_label():
    a = wl.Workload("w", Batch.of([1], [5]))
    b = wl.Workload("w", Batch.of([1], [6]))
    assert str(a) == "w" and a == b and hash(a) == hash(b)


# ---------------------------------------------------------------------------- files


def _write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_own_jsonl_formats(tmp_path):
    path = _write(
        tmp_path,
        "w.jsonl",
        [
            json.dumps({"name": "a", "requests": [{"q_len": 1, "kv_len": 9}, {"kv_len": 4}]}),
            "",
            json.dumps({"q_lens": [2, 3], "kv_lens": [5, 6]}),
            json.dumps({"kv_lens": [7]}),
        ],
    )
    a, b, c = read_workload_file(path)
    assert (a.label, a.batch) == ("a", Batch.of([1, 1], [9, 4]))
    assert (b.label, b.batch) == ("w.jsonl:3", Batch.of([2, 3], [5, 6]))
    assert (c.label, c.batch) == ("w.jsonl:4", Batch.of([1], [7]))
    assert b.source == ("--workload", f"{path}:3")
    (only,) = read_workload_file(f"{path}:3")
    assert only == b


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"kv_lens": [1, 2', "w.jsonl:2:18: not JSON"),
        ('{"requests": []}', "w.jsonl:2: batch: a batch needs at least one request"),
        ('{"kv_lens": [2000000]}', "w.jsonl:2: batch: request 0: kv_len 2000000"),
        ('{"q_lens": [1], "kv_lens": [3, 4]}', 'w.jsonl:2: "q_lens" has 1 entries'),
        ('{"kv_lens": ["7"]}', 'w.jsonl:2: "kv_lens" must be a list of integers'),
        ("[1]", "w.jsonl:2:1: expected a JSON object"),
        ('{"lens": [1]}', 'w.jsonl:2: expected "requests"'),
    ],
)
def test_bad_lines_name_file_and_line(tmp_path, line, words):
    path = _write(tmp_path, "w.jsonl", ['{"kv_lens": [5]}', line])
    with pytest.raises(WorkloadError) as info:
        read_workload_file(path)
    assert words in str(info.value)


def test_duplicate_names_and_missing_files(tmp_path):
    path = _write(tmp_path, "w.jsonl", ['{"name": "x", "kv_lens": [5]}'] * 2)
    with pytest.raises(WorkloadError, match="name 'x' already used on line 1"):
        read_workload_file(path)
    with pytest.raises(WorkloadError, match="cannot read"):
        read_workload_file(str(tmp_path / "none.jsonl"))
    with pytest.raises(WorkloadError, match=r"no line 9 \(the file has 2 lines\)"):
        read_workload_file(f"{path}:9")


def test_a_blank_chosen_line_is_called_blank(tmp_path):
    path = _write(tmp_path, "w.jsonl", ['{"kv_lens": [5]}', "", '{"kv_lens": [6]}'])
    with pytest.raises(WorkloadError, match=r"w.jsonl:2: line 2 is blank$"):
        read_workload_file(f"{path}:2")


def test_lines_are_numbered_as_an_editor_numbers_them(tmp_path):
    """A line separator inside a JSON string (str.splitlines splits there) does not shift
    the numbers."""
    path = tmp_path / "w.jsonl"
    path.write_text('{"name": "a\u2028b", "kv_lens": [5]}\n{"kv_lens": [6]}\n', encoding="utf-8")
    (second,) = read_workload_file(f"{path}:2")
    assert second.batch == Batch.of([1], [6])
    assert [w.label for w in read_workload_file(str(path))] == ["a\u2028b", "w.jsonl:2"]


# ---------------------------------------------------------------------------- flashinfer-bench


def _safetensors(path, tensors):
    """A .safetensors file as its public format describes it (int32 tensors)."""
    header, blobs, offset = {}, [], 0
    for key, values in tensors.items():
        blob = struct.pack(f"<{len(values)}i", *values)
        header[key] = {
            "dtype": "I32",
            "shape": [len(values)],
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _fib_line(definition, tensors, blob):
    """A flashinfer-bench workload line, after docs/flashinfer-trace/workload.mdx."""
    inputs = {"q": {"type": "random"}, "sm_scale": {"type": "scalar", "value": 0.0883}}
    for name in tensors:
        inputs[name] = {"type": "safetensors", "path": blob, "tensor_key": name}
    return json.dumps(
        {
            "definition": definition,
            "workload": {"uuid": f"uuid-{definition}", "axes": {"len_indptr": 4}, "inputs": inputs},
            "solution": None,
            "evaluation": None,
        }
    )


def test_flashinfer_bench_paged_decode_ps1(tmp_path):
    _safetensors(tmp_path / "d.safetensors", {"kv_indptr": [0, 5, 105, 106]})
    path = _write(
        tmp_path,
        "fib.jsonl",
        [_fib_line("gqa_paged_decode_h32_kv8_d128_ps1", ["kv_indptr"], "d.safetensors")],
    )
    (w,) = read_workload_file(path)
    assert w.label == "uuid-gqa_paged_decode_h32_kv8_d128_ps1"
    assert w.batch == Batch.of([1, 1, 1], [5, 100, 1])


def test_flashinfer_bench_paged_prefill_with_last_page_len(tmp_path):
    tensors = {"qo_indptr": [0, 10, 11], "kv_indptr": [0, 2, 3], "kv_last_page_len": [4, 16]}
    _safetensors(tmp_path / "p.safetensors", tensors)
    line = _fib_line("gqa_paged_prefill_causal_h32_kv8_d128_ps16", list(tensors), "p.safetensors")
    (w,) = read_workload_file(_write(tmp_path, "fib.jsonl", [line]))
    assert w.batch == Batch.of([10, 1], [16 + 4, 16])


def test_flashinfer_bench_ragged(tmp_path):
    tensors = {"qo_indptr": [0, 3, 10], "kv_indptr": [0, 8, 15]}
    _safetensors(tmp_path / "r.safetensors", tensors)
    line = _fib_line("gqa_ragged_prefill_causal_h32_kv4_d128", list(tensors), "r.safetensors")
    (w,) = read_workload_file(_write(tmp_path, "fib.jsonl", [line]))
    assert w.batch == Batch.of([3, 7], [8, 7])


def test_flashinfer_bench_random_indptr_is_an_error(tmp_path):
    line = json.loads(_fib_line("gqa_paged_decode_h32_kv8_d128_ps1", [], "x"))
    line["workload"]["inputs"]["kv_indptr"] = {"type": "random"}
    path = _write(tmp_path, "fib.jsonl", [json.dumps(line)])
    with pytest.raises(WorkloadError, match="fib.jsonl:1: input 'kv_indptr' is 'random'"):
        read_workload_file(path)


def test_safetensors_reader_reads_int64(tmp_path):
    blob = struct.pack("<3q", 0, 7, 1 << 40)
    header = json.dumps({"t": {"dtype": "I64", "shape": [3], "data_offsets": [0, 24]}}).encode()
    (tmp_path / "x.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + blob)
    assert read_safetensors_ints(str(tmp_path / "x.safetensors"), "t") == [0, 7, 1 << 40]
    assert math.isclose(1 << 40, read_safetensors_ints(str(tmp_path / "x.safetensors"), "t")[2])


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@given(
    st.lists(
        st.tuples(st.integers(1, 5000), st.integers(0, 5000)).map(lambda t: (t[0], t[0] + t[1])),
        min_size=1,
        max_size=40,
    )
)
def test_uniform_twin_invariants(pairs):
    batch = Batch.of([q for q, _ in pairs], [kv for _, kv in pairs])
    twin = wl.uniform_twin(batch)
    assert len(twin.requests) == len(batch.requests)
    assert sum(twin.q_lens) == sum(batch.q_lens) and sum(twin.kv_lens) == sum(batch.kv_lens)
    assert max(twin.kv_lens) - min(twin.kv_lens) <= 1 and max(twin.q_lens) - min(twin.q_lens) <= 1
    wl.check_batch(twin, "twin")


@given(st.integers(1, 64), st.integers(1, 4000), st.integers(0, 4000), st.integers(0, 2**31))
def test_drawn_batches_are_valid(count, lo, span, seed):
    text = f"{count}d@uniform:lo={lo},hi={lo + span}+{count}puniform:lo={lo},hi={lo + span}@{lo}"
    batch = wl.parse_batch_spec(text).draw(seed)
    assert len(batch.requests) == 2 * count
    assert all(lo <= r.kv_len <= lo + span for r in batch.requests[:count])
    assert all(r.q_len == 1 for r in batch.requests[:count])
    assert all(r.q_len <= r.kv_len for r in batch.requests)
