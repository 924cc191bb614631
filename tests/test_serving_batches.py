"""Varied-length cases in the four scripts: formulas, inputs, reference, identity, imbalance.

The 3-request formula values are worked out by hand in the comments; the reference is checked
against a per-request dense computation written here (pages walked in Python, explicit
bottom-right causal mask), independent of ``fi_attn_bench.cases.reference``.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import bench_batch_decode as decode
import bench_batch_mla as mla
import bench_batch_prefill_paged as paged
import bench_batch_prefill_ragged as ragged
from fi_attn_bench import command_line
from fi_attn_bench.backends import choice as backend_choice
from fi_attn_bench.cases import inputs as bi
from fi_attn_bench.cases import serving
from fi_attn_bench.cases.inputs import prepare_case
from fi_attn_bench.cases.spec import Settings
from fi_attn_bench.cases.workloads import Batch, Workload
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.schema import csv_fieldnames
from fi_attn_bench.timing import timers
from fi_attn_bench.timing.statistics import Batch as SampleBatch
from fi_attn_bench.wording import counted

SCRIPTS = (decode, paged, ragged, mla)
by_script = pytest.mark.parametrize("script", SCRIPTS, ids=lambda m: m.__name__)
NO_GPU = backend_choice.Probe(
    cuda_available=lambda: False, import_flashinfer=lambda: SimpleNamespace(__version__="x")
)
FAST = ["--max-time-per-case", "0.05", "--min-samples", "3"]


def varied(script, q_lens, kv_lens, label="test-batch"):
    workload = Workload(label, Batch.of(q_lens, kv_lens))
    return serving.resolve(script.SPEC, {"workload": workload}, 0)


def settings(seed=3, page_size=16):
    return Settings(torch.device("cpu"), torch.float16, page_size, "torch", seed, 1024)


# ---------------------------------------------------------------------------- formulas


def test_decode_formulas_three_requests():
    case = varied(decode, [1, 1, 1], [100, 7, 1000])  # 32 query heads, 4 KV heads, d 128
    # q + o: 2 * 3 * 32 * 128 = 24576; K + V: 2 * (100 + 7 + 1000) * 4 * 128 = 1133568; fp16
    assert decode.io_bytes(case, 2) == (24576 + 1133568) * 2 == 2316288
    # 4 * 32 * 128 per cached token: 16384 * 1107
    assert decode.flops(case) == 16384 * 1107 == 18137088
    assert (case["batch_size"], case["seq_len_kv"]) == (3, 369)  # 1107 / 3


def test_paged_prefill_formulas_mixed_three_requests():
    case = varied(paged, [1, 30, 5], [100, 30, 40])  # a decode, a prompt, a chunk
    # q + o: 2 * 36 tokens * 32 * 128 = 294912; K + V: 2 * 170 * 4 * 128 = 174080
    assert paged.io_bytes(case, 2) == (294912 + 174080) * 2 == 937984
    # pairs: decode 100; prompt 30 * 31 / 2 = 465; chunk of 5 over 40: 5 * 35 + 15 = 190
    assert paged.flops(case) == 2 * 32 * (100 + 465 + 190) * 256 == 12369920


def test_ragged_formulas_three_requests():
    case = varied(ragged, [3, 2, 7], [3, 10, 7])  # 32/4 heads, DeepSeek 192/128
    # q + o: 12 tokens * 32 * (192 + 128) = 122880; K + V: 20 * 4 * 320 = 25600
    assert ragged.io_bytes(case, 2) == (122880 + 25600) * 2 == 296960
    # pairs: 3 * 4 / 2 = 6; 2 queries over 10 keys: 9 + 10 = 19; 7 * 8 / 2 = 28
    assert ragged.flops(case) == 2 * 32 * (6 + 19 + 28) * 320 == 1085440


def test_mla_formulas_three_requests():
    case = varied(mla, [1, 1, 1], [10, 1, 33])  # 128 heads, 512 + 64
    # queries 3 * 128 * 576 = 221184; caches 44 * 576 = 25344; output 3 * 128 * 512 = 196608
    assert mla.io_bytes(case, 2) == (221184 + 25344 + 196608) * 2 == 886272
    # 44 pairs at 2 * 128 * (1024 + 64) = 278528 FLOPs each
    assert mla.flops(case) == 44 * 278528 == 12255232


@by_script
def test_uniform_cases_keep_their_formulas(script):
    """A uniform case gives the per-request sum the old closed forms gave."""
    for case in script.SPEC.presets["default"]:
        b = case["batch_size"]
        twin = dict(case, workload=Workload("w", script.batch_of(case)))
        assert script.io_bytes(twin, 2) == script.io_bytes(case, 2)
        assert script.flops(twin) == script.flops(case)
        assert len(script.batch_of(case).requests) == b


# ---------------------------------------------------------------------------- inputs


def test_fragmented_page_table_for_varied_lengths():
    table = bi.paged_table([300, 17, 1000, 1], 16, torch.device("cpu"), seed=4)
    ptr, ids = table.kv_indptr.tolist(), table.kv_indices.tolist()
    assert ptr == [0, 19, 21, 84, 85]
    assert table.kv_last_page_len.tolist() == [12, 1, 8, 1]
    assert len(set(ids)) == len(ids) == 85
    runs = [ids[a:b] for a, b in itertools.pairwise(ptr)]
    assert any(any(y != x + 1 for x, y in itertools.pairwise(r)) for r in runs)
    free = sorted(set(range(table.num_pages)) - set(ids))
    assert any(min(ids) < f < max(ids) for f in free)  # free pages sit between used ones


def _gather(cache, table, request, kv_len):
    ptr = table.kv_indptr.tolist()
    pages = table.kv_indices[ptr[request] : ptr[request + 1]].tolist()
    return torch.cat([cache[p] for p in pages])[:kv_len].float()


def _attend(q, k, v, scale, causal):
    """One request's softmax attention with an explicit bottom-right causal mask."""
    group = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = torch.einsum("qhd,khd->hqk", q.float(), k) * scale
    if causal:
        q_len, kv_len = q.shape[0], k.shape[0]
        for j in range(q_len):
            scores[:, j, kv_len - q_len + j + 1 :] = -math.inf
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


def _dense(script, case, inputs):
    batch, outs, q0, k0 = script.batch_of(case), [], 0, 0
    scale = script.sm_scale(case)
    for i, r in enumerate(batch.requests):
        if script is ragged:
            rows = slice(k0, k0 + r.kv_len)
            k, v = inputs.k[rows].float(), inputs.v[rows].float()
            outs.append(_attend(inputs.q[q0 : q0 + r.q_len], k, v, scale, True))
        elif script is mla:
            ckv = _gather(inputs.ckv_cache, inputs.table, i, r.kv_len)
            kpe = _gather(inputs.kpe_cache, inputs.table, i, r.kv_len)
            q = torch.cat((inputs.q_nope[i], inputs.q_pe[i]), -1).float()
            outs.append(((q @ torch.cat((ckv, kpe), -1).T) * scale).softmax(-1)[None] @ ckv)
        else:
            k = _gather(inputs.k_cache, inputs.table, i, r.kv_len)
            v = _gather(inputs.v_cache, inputs.table, i, r.kv_len)
            q = inputs.q[i : i + 1] if script is decode else inputs.q[q0 : q0 + r.q_len]
            outs.append(_attend(q, k, v, scale, script is paged))
        q0, k0 = q0 + r.q_len, k0 + r.kv_len
    return torch.cat(outs)


SHAPES = {
    decode: ([1, 1, 1], [37, 1, 70]),
    paged: ([1, 9, 5, 1], [40, 9, 23, 1]),  # decode, prompt, chunk, one-token context
    ragged: ([4, 2, 9], [4, 19, 9]),
    mla: ([1, 1, 1], [50, 3, 17]),
}


@by_script
@pytest.mark.parametrize("page_size", (16, 1))
def test_reference_matches_per_request_computation(script, page_size):
    case = varied(script, *SHAPES[script])
    s = settings(page_size=page_size)
    actual = prepare_case(script.SPEC, case, s).run()
    expected = _dense(script, case, script.make_inputs(case, s))
    assert actual.shape[0] == sum(SHAPES[script][0])
    torch.testing.assert_close(actual, expected, rtol=2e-4, atol=2e-4)


# ---------------------------------------------------------------------------- presets


@by_script
def test_serving_preset_uses_the_scripts_varied_heads(script):
    cases = serving.resolve_all(script.SPEC, serving.preset_cases(script.SPEC, "serving"), 0)
    assert 8 <= len(cases) <= 14  # each case and its twin cost ~1 s of harness time each
    heads = {k: v for k, v in script.SPEC.varied.heads.items() if k != "batch_size"}
    for case in cases:
        assert all(case[k] == v for k, v in heads.items() if not k.startswith("seq_len"))
    assert len({str(c["workload"]) for c in cases}) == len(cases)
    sizes = [c["batch_size"] for c in cases]
    assert min(sizes) <= 4 and max(sizes) >= 128  # small and large batches


@by_script
@pytest.mark.parametrize("seed", (0, 1, 2))
def test_serving_preset_calls_stay_short_on_an_h200(script, seed):
    """Roofline estimate per call (1.8 TB/s, 400 TFLOP/s): under 20 ms, so the harness's
    fixed per-case cost (~0.5 s of samples), not the kernels, sets the sweep's duration."""
    cases = serving.resolve_all(script.SPEC, serving.preset_cases(script.SPEC, "serving"), seed)
    for case in cases:
        estimate_ms = max(script.io_bytes(case, 2) / 1.8e9, script.flops(case) / 400e9)
        assert estimate_ms < 20, (str(case["workload"]), estimate_ms)


# ---------------------------------------------------------------------------- sweeps


class PerCaseTimer(timers.TimerDefaults):
    """Each timed case (or twin) gets the next of ``times`` as every sample."""

    name = "profiler"
    l2 = "cold"

    def __init__(self, times):
        self.times = iter(times)

    def sync(self):
        return None

    def open(self, fn, estimate_ms):
        value = next(self.times)

        class Session(timers.SessionDefaults):
            def batch(self, calls):
                fn()
                return SampleBatch((value,) * 4, frozenset({"k"}), starved=0)

        return Session()


def _run(script, argv, timer=None, spec=None):
    timer = timer or PerCaseTimer(itertools.repeat(1.0))
    return command_line.main_for(
        spec or script.SPEC,
        ["--device", "cpu", *FAST, *argv],
        probe=NO_GPU,
        timer_factory=lambda options, device, log: timer,
    )


def _rows(path):
    stored = read_stored_rows(path)
    header, rows = list(stored.header), list(stored.rows)
    return header, rows


def test_imbalance_times_the_uniform_twin_through_the_runner(tmp_path, capsys):
    out = tmp_path / "r.csv"
    timer = PerCaseTimer([3.0, 2.0, 5.0, 5.0])  # case 1, its twin, case 2, its twin
    argv = ["--batch", "2d@10+1d@90", "--batch", "3d@40", "--imbalance", "--output", str(out)]
    assert _run(decode, argv, timer) == 0
    header, rows = _rows(out)
    assert header == csv_fieldnames((*decode.CASE_FIELDS, "workload", "impl"))
    first, second = rows
    assert first["workload"] == "2d@10+1d@90" and float(first["uniform_twin_ms"]) == 2.0
    assert float(first["imbalance_pct"]) == pytest.approx(50.0)
    assert float(second["imbalance_pct"]) == pytest.approx(0.0)
    assert (first["num_requests"], first["total_q_tokens"], first["total_kv_tokens"]) == (
        "3",
        "3",
        "110",
    )
    assert (first["kv_len_min"], first["kv_len_max"]) == ("10", "90")
    assert float(first["kv_len_mean"]) == pytest.approx(110 / 3)
    assert "--batch 2d@10+1d@90" in first["repro"] and "--preset" not in first["repro"]
    assert "uniform twin 2.000ms, imbalance +50.0%" in capsys.readouterr().out


def test_without_imbalance_no_twin_is_timed(tmp_path):
    out = tmp_path / "r.csv"
    timer = PerCaseTimer([3.0])  # a second open() would raise StopIteration -> failed row
    assert _run(decode, ["--batch", "2d@10+1d@90", "--output", str(out)], timer) == 0
    (row,) = _rows(out)[1]
    assert row["uniform_twin_ms"] == "" and row["imbalance_pct"] == ""


def test_uniform_sweep_keeps_its_columns(tmp_path):
    out = tmp_path / "r.csv"
    assert _run(decode, ["--preset", "cpu", "--imbalance", "--output", str(out)]) == 0
    header, rows = _rows(out)
    assert header == csv_fieldnames((*decode.CASE_FIELDS, "impl"))
    assert all(r["uniform_twin_ms"] == "" and r["num_requests"] == "" for r in rows)


def test_same_spec_and_seed_same_case_and_resume(tmp_path):
    out = tmp_path / "r.csv"
    spec_text = "5d@uniform:lo=10,hi=200"
    assert _run(decode, ["--batch", spec_text, "--seed", "4", "--output", str(out)]) == 0
    (row,) = _rows(out)[1]
    assert row["workload"] == f"{spec_text} seed=4"
    again = decode.SPEC
    cases = command_line.selected_cases(
        again, SimpleNamespace(batch=[spec_text], workload=[], seed=4, preset=None, filter=[]), ""
    )
    assert str(cases[0]["workload"]) == row["workload"]
    assert cases[0]["seq_len_kv"] == int(row["seq_len_kv"])
    # resuming finds the case already measured (the key includes the workload label)
    assert _run(decode, ["--batch", spec_text, "--seed", "4", "--resume", str(out)]) == 0
    assert len(_rows(out)[1]) == 1


def test_a_failing_twin_leaves_its_columns_empty_and_is_noted(tmp_path, capsys):
    out = tmp_path / "r.csv"
    timer = PerCaseTimer([3.0])  # the twin's open() raises StopIteration: the twin fails
    assert _run(decode, ["--batch", "2d@10+1d@90", "--imbalance", "--output", str(out)], timer) == 0
    (row,) = _rows(out)[1]
    assert row["status"] == "ok" and float(row["time_ms"]) == 3.0
    assert row["uniform_twin_ms"] == "" and row["imbalance_pct"] == ""
    assert "  uniform twin failed: StopIteration" in capsys.readouterr().out


def test_a_serving_preset_sweep_resumes_from_its_csv_alone(tmp_path, capsys):
    out = tmp_path / "r.csv"
    argv = ["--preset", "serving", "--filter", "batch_size<=4", "--no-check"]
    assert _run(decode, [*argv, "--output", str(out)]) == 0
    header, rows = _rows(out)
    assert {r["preset"] for r in rows} == {"serving"} and "workload" in header
    assert _run(decode, ["--resume", str(out), "--no-check"]) == 0
    assert f"{len(rows)} of {counted(len(rows), 'case')} already ok" in capsys.readouterr().out
    assert len(_rows(out)[1]) == len(rows)


class InterruptAt(PerCaseTimer):
    """Times cases at 1 ms until the ``stop``-th open(), which is Ctrl-C."""

    def __init__(self, stop):
        super().__init__(itertools.repeat(1.0))
        self.left = stop

    def open(self, fn, estimate_ms):
        self.left -= 1
        if not self.left:
            raise KeyboardInterrupt
        return super().open(fn, estimate_ms)


def test_an_interrupted_batch_sweep_resumes_with_its_batches(tmp_path, capsys):
    out = tmp_path / "r.csv"
    argv = ["--batch", "2d@10+1d@90", "--batch", "3d@40", "--no-check"]
    assert _run(decode, [*argv, "--imbalance", "--output", str(out)], InterruptAt(3)) == 130
    hint = capsys.readouterr().out.strip().splitlines()[-1].split()
    assert hint[:2] == ["python", "bench_batch_decode.py"] and "--imbalance" in hint
    assert " ".join(hint).endswith("--batch 2d@10+1d@90 --batch 3d@40")
    (row,) = _rows(out)[1]
    assert row["preset"] == serving.COMMAND_LINE_CASES
    assert _run(decode, ["--resume", str(out), "--no-check"]) == 2
    assert "give the same --batch/--workload options" in capsys.readouterr().err
    assert _run(decode, ["--preset", "serving", "--resume", str(out), "--no-check"]) == 2
    assert _run(decode, hint[2:]) == 0
    rows = _rows(out)[1]
    assert [r["workload"] for r in rows] == ["2d@10+1d@90", "3d@40"]
    assert all(r["uniform_twin_ms"] != "" for r in rows)


def test_samples_of_a_varied_case_name_its_workload(tmp_path):
    samples = importlib.import_module("fi_attn_bench.sweep.sample_writer")
    out = tmp_path / "r.csv"
    argv = ["--batch", "3d@40", "--samples-dir", str(tmp_path), "--output", str(out)]
    assert _run(decode, argv) == 0
    (line,) = samples.read_samples(str(tmp_path / "r.samples.jsonl.gz"))
    assert line["case"]["workload"] == "3d@40" and line["case"]["batch_size"] == "3"


@pytest.mark.parametrize(
    "error",
    [torch.OutOfMemoryError("CUDA out of memory (injected)"), RuntimeError("CUDA out of memory.")],
)
def test_a_batch_that_does_not_fit_is_a_failed_row(tmp_path, error):
    def make_inputs(case, settings):
        if case["batch_size"] == 3:
            raise error
        return decode.make_inputs(case, settings)

    spec = dataclasses.replace(decode.SPEC, make_inputs=make_inputs)
    out = tmp_path / "r.csv"
    argv = ["--batch", "3d@40", "--batch", "2d@10", "--output", str(out)]
    assert _run(decode, argv, spec=spec) == 1
    rows = _rows(out)[1]
    assert [r["status"] for r in rows] == ["failed", "ok"]
    assert rows[0]["error_type"] == type(error).__name__ and rows[0]["num_requests"] == "3"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--batch", "8d@4x"], "position 4"),
        (["--batch", "8d@2m"], "not in 1..1048576"),
        (["--batch", "2p5"], "measures decode"),
        (["--batch", "8d@4k", "--preset", "smoke"], "replace --preset"),
        (["--workload", "nonexistent.jsonl"], "cannot read"),
    ],
)
def test_bad_specs_exit_2_before_any_gpu_work(argv, words, capsys):
    def boom():
        raise AssertionError("probed the machine")

    code = command_line.main_for(decode.SPEC, argv, probe=backend_choice.Probe(boom, boom))
    assert code == 2 and words in capsys.readouterr().err


def test_workload_file_line_errors_exit_2(tmp_path, capsys):
    path = tmp_path / "w.jsonl"
    path.write_text('{"kv_lens": [5]}\n{"requests": []}\n')
    assert _run(decode, ["--workload", str(path)]) == 2
    assert "w.jsonl:2: batch: a batch needs at least one request" in capsys.readouterr().err


def test_workload_file_cases_and_repro(tmp_path):
    path = tmp_path / "w.jsonl"
    path.write_text('{"name": "mix", "q_lens": [1, 8], "kv_lens": [30, 8]}\n{"kv_lens": [5, 6]}\n')
    out = tmp_path / "r.csv"
    assert _run(paged, ["--workload", str(path), "--imbalance", "--output", str(out)]) == 0
    rows = _rows(out)[1]
    assert [r["workload"] for r in rows] == ["mix", "w.jsonl:2"]
    assert f"--workload {path}:2" in rows[1]["repro"]
    assert rows[0]["total_q_tokens"] == "9" and rows[0]["uniform_twin_ms"] != ""


# ---------------------------------------------------------------------------- report


def test_serving_report_lists_varied_rows_with_their_twins(tmp_path, capsys):
    report = importlib.import_module("validation.imbalance")

    out = tmp_path / "r.csv"
    timer = PerCaseTimer([3.0, 2.0])
    assert _run(decode, ["--batch", "2d@10+1d@90", "--imbalance", "--output", str(out)], timer) == 0
    uniform = tmp_path / "u.csv"
    assert (
        _run(decode, ["--preset", "cpu", "--filter", "batch_size=1", "--output", str(uniform)]) == 0
    )
    (row,) = report.imbalance_rows([str(uniform), str(out)])
    assert (row.api, row.workload, row.num_requests, row.kv_len_max) == (
        "decode",
        "2d@10+1d@90",
        3,
        90,
    )
    assert (row.time_ms, row.uniform_twin_ms, row.imbalance_pct) == (3.0, 2.0, pytest.approx(50.0))
    assert report.table_lines([row])[2].endswith("| 3.0000 | 2.0000 | +50.0% |")
    assert report.main([str(tmp_path / "rep"), str(uniform)]) == 1  # nothing to report
    assert report.main([str(tmp_path / "rep"), str(out)]) == 0
    assert "2d@10+1d@90" in (tmp_path / "rep" / "imbalance.md").read_text()


def test_a_batch_given_twice_is_one_case(capsys):
    argv = ["--list", "--device", "cpu", "--batch", "3d@40", "--batch", "2d@9", "--batch", "3d@40"]
    assert command_line.main_for(decode.SPEC, argv, probe=NO_GPU) == 0
    out = capsys.readouterr().out
    assert "2 cases" in out and out.count("workload=3d@40") == 1


# ---------------------------------------------------------------------------- FlashInfer path

sys.path.insert(0, str(Path(__file__).resolve().parent))
fake_flashinfer = importlib.import_module("stand_ins.fake_flashinfer")


@by_script
@pytest.mark.parametrize("release", tuple(fake_flashinfer.RELEASES))
def test_varied_batch_through_both_releases_plan(script, release, monkeypatch):
    """plan() gets each request's own lengths (0.2.6 and 0.6.1 signatures): the stand-in
    computes from what plan() received, and that matches the per-request dense result."""
    module = fake_flashinfer.make_module(release)
    monkeypatch.setitem(sys.modules, "flashinfer", module)
    case = varied(script, *SHAPES[script])
    s = dataclasses.replace(settings(), impl_kind="flashinfer")
    prepared = prepare_case(script.SPEC, case, s)
    expected = _dense(script, case, script.make_inputs(case, s))
    torch.testing.assert_close(prepared.run().float(), expected, rtol=2e-2, atol=2e-2)


def test_uniform_inputs_are_drawn_as_before():
    """Uniform cases draw the same tensors as before varied batches existed (same shapes, same
    order, same page table), so baselines keep measuring the same data."""
    s = settings(seed=11)
    case = decode.SPEC.presets["cpu"][0]
    b, n = case["batch_size"], case["seq_len_kv"]
    gen = bi.generator(s.seed, s.device)
    table = bi.paged_table([n] * b, 16, s.device, s.seed)
    shape = (table.num_pages, 16, case["num_kv_heads"], case["head_dim"])
    q = bi.randn((b, case["num_qo_heads"], case["head_dim"]), s.dtype, s.device, gen)
    k = bi.randn(shape, s.dtype, s.device, gen)
    got = decode.make_inputs(case, s)
    assert torch.equal(got.q, q) and torch.equal(got.k_cache, k)
    assert torch.equal(got.table.kv_indices, table.kv_indices)

    case = ragged.SPEC.presets["cpu"][-1]
    tokens = case["batch_size"] * case["seq_len"]
    gen = bi.generator(s.seed, s.device)
    q = bi.randn((tokens, case["num_qo_heads"], case["head_dim_qk"]), s.dtype, s.device, gen)
    k = bi.randn((tokens, case["num_kv_heads"], case["head_dim_qk"]), s.dtype, s.device, gen)
    got = ragged.make_inputs(case, s)
    assert torch.equal(got.q, q) and torch.equal(got.k, k)
