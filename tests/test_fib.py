"""FlashInfer-Bench round trip on the CPU reference: a hand-made dataset with safetensors inputs
in (``--fib``), its Python solutions as ``--impl fib:NAME``, traces out (``--fib-traces``) that
the real ``flashinfer_bench`` package loads and its CLI reports."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("safetensors", reason="--fib reads safetensors: pip install -e '.[test]'")
import fib_data  # noqa: E402

from fi_attn_bench.apis import decode, mla, prefill_paged, prefill_ragged  # noqa: E402
from fi_attn_bench.cases.spec import Settings  # noqa: E402
from fi_attn_bench.command_line import main_for  # noqa: E402
from fi_attn_bench.fib.selection import select  # noqa: E402
from fi_attn_bench.suite import main as bench_all  # noqa: E402

FAST = ["--max-time-per-case", "0.05", "--min-samples", "3", "--device", "cpu"]
SPECS = (decode.SPEC, prefill_paged.SPEC, prefill_ragged.SPEC, mla.SPEC)


def fib_bench():
    """The real flashinfer_bench (CI installs it with --no-deps: .ci/run)."""
    return pytest.importorskip(
        "flashinfer_bench", reason="pip install --no-deps flashinfer-bench (see .ci/run)"
    )


@pytest.fixture
def dataset(tmp_path):
    return fib_data.write_dataset(str(tmp_path / "ds"))


def rows(path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def run(spec, argv) -> int:
    return main_for(spec, [*argv, *FAST])


def test_every_mapped_kind_runs_on_its_own_inputs_and_its_traces_load_in_fib(
    dataset, tmp_path, capsys
):
    traces = tmp_path / "traces"
    for spec in SPECS:
        out = tmp_path / f"{spec.script}.csv"
        argv = ["--fib", dataset, "--backend", "torch", "--output", str(out)]
        assert run(spec, [*argv, "--fib-traces", str(traces)]) == 0
        measured = rows(out)
        assert {r["status"] for r in measured} == {"ok"}
        pages = "16" if spec is prefill_ragged.SPEC else "4"  # ragged: no pages, the default
        assert {(r["dtype"], r["page_size"]) for r in measured} == {("bfloat16", pages)}
    err = capsys.readouterr().err
    assert err.count("fib: definition rmsnorm_h64 not measured: op_type 'rmsnorm'") == 4
    loaded = fib_bench().TraceSet.from_path(str(traces))
    assert {name: len(t) for name, t in loaded.traces.items()} == {
        fib_data.DECODE: 2, fib_data.PREFILL: 1, fib_data.RAGGED: 1, fib_data.MLA: 1,
    }  # fmt: skip
    assert set(loaded.definitions) == {
        fib_data.DECODE,
        fib_data.PREFILL,
        fib_data.RAGGED,
        fib_data.MLA,
    }
    for trace in (t for ts in loaded.traces.values() for t in ts):
        assert trace.evaluation.status.value == "PASSED"
        assert trace.solution == "torch"
        performance = trace.evaluation.performance
        assert performance.latency_ms > 0 and performance.speedup_factor == 1.0
    assert loaded.summary()["passed"] == 5
    side = [json.loads(line) for p in (traces / "fi-attn-bench").iterdir() for line in p.open()]
    assert len(side) == 5 and all(float(s["noise_pct"]) >= 0 and s["repro"] for s in side)


def test_flashinfer_bench_report_summary_accepts_the_traces(dataset, tmp_path):
    fib = fib_bench()
    out = tmp_path / "d.csv"
    argv = ["--fib", dataset, "--backend", "torch", "--output", str(out)]
    assert run(decode.SPEC, [*argv, "--fib-traces", dataset]) == 0
    cli = os.path.join(os.path.dirname(sys.executable), "flashinfer-bench")
    done = subprocess.run(
        [cli, "report", "summary", "--local", dataset], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    # 0.1.2's summary logs at INFO while its CLI sets WARNING: the same CLI, logging at INFO.
    at_info = (
        "import sys, flashinfer_bench.cli.main as m; "
        "m.cli_config_logging = lambda args: m.configure_logging('INFO'); "
        "sys.argv = ['flashinfer-bench', 'report', 'summary', '--local', sys.argv[1]]; m.cli()"
    )
    shown = subprocess.run([sys.executable, "-c", at_info, dataset], capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr
    assert "'total': 2, 'passed': 2, 'failed': 0" in shown.stderr + shown.stdout
    assert len(fib.TraceSet.from_path(dataset).workloads[fib_data.DECODE]) == 2


def case_of(spec, dataset, uuid):
    cases = select(spec, dataset, "float16", 16).cases
    return next(c for c in cases if c["workload"].label.endswith(uuid))


def settings(seed=1) -> Settings:
    return Settings(torch.device("cpu"), torch.bfloat16, 4, "torch", seed)


def stored(dataset, definition, uuid):
    from safetensors.torch import load_file

    return load_file(os.path.join(dataset, "blob/workloads", definition, f"{uuid}.safetensors"))


def test_the_inputs_are_the_files_not_regenerated(dataset):
    case = case_of(decode.SPEC, dataset, "dec-a")
    inputs = case["workload"].inputs(settings())
    file = stored(dataset, fib_data.DECODE, "dec-a")
    assert torch.equal(inputs.k_cache, file["k_cache"])
    assert torch.equal(inputs.table.kv_indices, file["kv_indices"])
    assert torch.equal(inputs.table.kv_indptr, file["kv_indptr"])
    assert inputs.table.kv_last_page_len.tolist() == [4, 4, 4]  # FIB's full pages
    assert inputs.sm_scale == 0.3 and inputs.q.dtype == torch.bfloat16
    assert case["workload"].batch.kv_lens == [8, 12, 4]
    prefill = case_of(prefill_paged.SPEC, dataset, "pre-a")
    prefill_inputs = prefill["workload"].inputs(settings())
    assert torch.equal(prefill_inputs.q, stored(dataset, fib_data.PREFILL, "pre-a")["q"])
    assert prefill["workload"].batch.q_lens == [3, 5]


def test_the_scalar_sm_scale_reaches_the_reference(dataset):
    case = case_of(decode.SPEC, dataset, "dec-a")
    inputs = case["workload"].inputs(settings())
    given = decode.reference(case, inputs)()
    assert torch.equal(given, decode.reference_fn(inputs, 0.3)())
    assert decode.plan_arguments(case, settings(), inputs)["sm_scale"] == 0.3
    unscaled = decode.DecodeInputs(inputs.q, inputs.k_cache, inputs.v_cache, inputs.table)
    assert not torch.allclose(given, decode.reference(case, unscaled)(), atol=1e-3)


def test_random_inputs_follow_the_seed(dataset):
    case = case_of(decode.SPEC, dataset, "dec-a")
    first, again = case["workload"].inputs(settings(1)), case["workload"].inputs(settings(1))
    assert torch.equal(first.q, again.q)
    assert not torch.equal(first.q, case["workload"].inputs(settings(2)).q)


def test_solutions_run_as_implementations_and_a_wrong_one_fails_its_rows(dataset, tmp_path):
    out, traces = tmp_path / "h2h.csv", tmp_path / "t"
    argv = ["--fib", dataset, "--impl", "torch", "--impl", "fib:py_decode"]
    argv += ["--impl", "fib:py_decode_wrong", "--output", str(out), "--fib-traces", str(traces)]
    assert run(decode.SPEC, argv) == 1
    by_impl = {}
    for row in rows(out):
        by_impl.setdefault(row["impl"], []).append(row)
    assert [r["status"] for r in by_impl["fib:py_decode"]] == ["ok", "ok"]
    assert all(float(r["paired_ratio"]) > 0 for r in by_impl["fib:py_decode"])
    assert [r["check"] for r in by_impl["fib:py_decode_wrong"]] == ["fail", "fail"]
    loaded = fib_bench().TraceSet.from_path(str(traces)).traces[fib_data.DECODE]
    status = {(t.solution, t.workload.uuid): t.evaluation.status.value for t in loaded}
    assert status[("py_decode", "dec-a")] == "PASSED"
    assert status[("py_decode_wrong", "dec-b")] == "INCORRECT_NUMERICAL"
    good = next(t for t in loaded if t.solution == "py_decode")
    base = next(
        t for t in loaded if t.solution == "torch" and t.workload.uuid == good.workload.uuid
    )
    performance = good.evaluation.performance
    assert performance.reference_latency_ms == base.evaluation.performance.latency_ms
    row = next(r for r in by_impl["fib:py_decode"] if r["workload"].endswith(good.workload.uuid))
    assert performance.speedup_factor == pytest.approx(1 / float(row["paired_ratio"]))


def test_bench_all_runs_every_script_of_the_dataset(dataset, tmp_path, capsys):
    argv = ["--fib", dataset, "--backend", "torch", "--output-dir", str(tmp_path / "all")]
    assert bench_all([*argv, *FAST]) == 0
    err = capsys.readouterr().err
    assert err.count("rmsnorm_h64 not measured") == 1
    made = sorted(p for p in os.listdir(tmp_path / "all") if p.endswith(".csv"))
    assert len(made) == 4


def test_traces_of_an_earlier_run_are_never_overwritten(dataset, tmp_path):
    from fi_attn_bench.errors import UsageError
    from fi_attn_bench.fib.traces import write_traces

    out = tmp_path / "d.csv"
    assert run(decode.SPEC, ["--fib", dataset, "--backend", "torch", "--output", str(out)]) == 0
    written = write_traces(str(out), str(tmp_path / "t"), dataset)
    before = {p: open(p).read() for p in (*written.files, written.side_file)}
    with pytest.raises(UsageError, match="never overwritten"):
        write_traces(str(out), str(tmp_path / "t"), dataset)
    assert {p: open(p).read() for p in before} == before


def test_bench_all_leaves_out_the_scripts_the_dataset_has_no_workload_for(
    dataset, tmp_path, capsys
):
    for kind in ("gqa_ragged", "mla_paged"):
        for name in os.listdir(os.path.join(dataset, "workloads", kind)):
            os.remove(os.path.join(dataset, "workloads", kind, name))
    argv = ["--fib", dataset, "--backend", "torch", "--output-dir", str(tmp_path / "all")]
    assert bench_all([*argv, *FAST]) == 0
    err = capsys.readouterr().err
    assert "bench_batch_mla.py: --fib " in err and "no workload that bench_batch_mla.py" in err
    assert "no case matches --filter" not in err
    assert len([p for p in os.listdir(tmp_path / "all") if p.endswith(".csv")]) == 2


def test_a_solution_plugin_pickles_for_a_worker_process(dataset):
    import pickle

    from fi_attn_bench.fib.solutions import impl_resolver

    impl = impl_resolver(dataset)("fib:py_decode")
    factory = pickle.loads(pickle.dumps(impl.factory))
    assert factory.solution.name == "py_decode" and factory == impl.factory


def test_workload_lines_read_fib_page_tables_as_full_pages_too(dataset):
    """--workload's flashinfer-bench lines and --fib agree on a page table without last-page
    lengths (FIB's references read every page as full)."""
    from fi_attn_bench.cases.workload_files import fib_batch

    line = json.loads(
        open(os.path.join(dataset, "workloads/gqa_paged", f"{fib_data.DECODE}.jsonl")).readline()
    )
    assert fib_batch(line, dataset).kv_lens == [8, 12, 4]
    assert fib_batch(line, dataset) == case_of(decode.SPEC, dataset, "dec-a")["workload"].batch


def test_a_solution_reaching_into_the_timer_is_screened_and_judged(dataset):
    """A FIB solution's sources live in JSON, not a file: the static screen reads them there,
    and under --judge a solution with findings never runs."""
    from fi_attn_bench.fib.solutions import impl_resolver

    body = fib_data.solution("py_patch")
    body["sources"][0]["content"] = (
        "import torch\ntorch.cuda.Event.elapsed_time = lambda self, end: 0.001\n"
        + body["sources"][0]["content"].replace("SCALE_OUTPUT", "return None")
    )
    with open(os.path.join(dataset, "solutions", "py_patch.json"), "w") as handle:
        json.dump(body, handle)
    warned = impl_resolver(dataset)("fib:py_patch")
    assert warned.screened and warned.factory is not None and not warned.judged
    assert any("main.py" in finding.path for finding in warned.screened)
    judged = impl_resolver(dataset, judge=True)("fib:py_patch")
    assert judged.judged and judged.factory is None and judged.screened == warned.screened
    honest = impl_resolver(dataset, judge=True)("fib:py_decode")
    assert honest.screened == () and honest.factory is not None
