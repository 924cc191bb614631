"""Malformed and hostile FlashInfer-Bench datasets: one ``error:`` line, exit 2, before any case
is measured and before any output is made."""

from __future__ import annotations

import json
import os

import pytest

pytest.importorskip("safetensors", reason="--fib reads safetensors: pip install -e '.[test]'")
import fib_data  # noqa: E402

from fi_attn_bench.apis import decode  # noqa: E402
from fi_attn_bench.command_line import main_for  # noqa: E402
from fi_attn_bench.suite import main as bench_all  # noqa: E402

DECODE_LINES = os.path.join("workloads", "gqa_paged", f"{fib_data.DECODE}.jsonl")
DECODE_DEFINITION = os.path.join("definitions", "gqa_paged", f"{fib_data.DECODE}.json")


@pytest.fixture
def dataset(tmp_path):
    return fib_data.write_dataset(str(tmp_path / "ds"))


def refused(capsys) -> str:
    """The one stderr line of an exit-2 refusal; asserts no case was measured."""
    captured = capsys.readouterr()
    assert "[1/" not in captured.out, "a case was measured before the refusal"
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert "Traceback" not in captured.err
    return lines[0]


def bench(argv, tmp_path) -> int:
    out = tmp_path / "out.csv"
    code = main_for(decode.SPEC, [*argv, "--device", "cpu", "--output", str(out)])
    if code == 2:
        assert not out.exists(), "a refused run made its CSV"
    return code


def edit_line(dataset, number, change):
    """Rewrite decode workload line ``number`` (0-based) with ``change(record)``."""
    path = os.path.join(dataset, DECODE_LINES)
    lines = open(path).read().splitlines()
    record = json.loads(lines[number])
    change(record)
    lines[number] = json.dumps(record)
    open(path, "w").write("\n".join(lines) + "\n")


def inputs_of(record):
    return record["workload"]["inputs"]


def set_input(name, **spec):
    return lambda record: inputs_of(record).__setitem__(name, spec)


def stored(name, path):
    return set_input(name, type="safetensors", path=path, tensor_key=name)


def set_axis(name, value):
    return lambda record: record["workload"]["axes"].__setitem__(name, value)


def shuffle_indptr(dataset):
    """kv_indptr that decreases, written into the workload's own file."""
    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(dataset, "blob/workloads", fib_data.DECODE, "dec-a.safetensors")
    tensors = load_file(path)
    tensors["kv_indptr"] = torch.tensor([0, 3, 2, 6], dtype=torch.int32)
    save_file(tensors, path)


def bad_page_id(dataset):
    import torch
    from safetensors.torch import load_file, save_file

    path = os.path.join(dataset, "blob/workloads", fib_data.DECODE, "dec-a.safetensors")
    tensors = load_file(path)
    tensors["kv_indices"] = torch.full_like(tensors["kv_indices"], 999)
    save_file(tensors, path)


HOSTILE = {
    "definition not JSON": (
        lambda ds: open(os.path.join(ds, DECODE_DEFINITION), "w").write("{not json"),
        "not JSON",
    ),
    "definition nested past the recursion limit": (
        lambda ds: open(os.path.join(ds, DECODE_DEFINITION), "w").write("[" * 100_000),
        "nested too deeply",
    ),
    "workload line not JSON": (
        lambda ds: open(os.path.join(ds, DECODE_LINES), "a").write("{]\n"),
        "not JSON",
    ),
    "safetensors file missing": (
        lambda ds: edit_line(ds, 0, stored("k_cache", "blob/none.safetensors")),
        "no such safetensors file",
    ),
    "path escaping with ..": (
        lambda ds: edit_line(ds, 0, stored("k_cache", "../../../etc/passwd")),
        "leads outside the dataset folder",
    ),
    "absolute path": (
        lambda ds: edit_line(ds, 0, stored("k_cache", "/etc/passwd")),
        "must be relative to DIR",
    ),
    "not a safetensors file": (
        lambda ds: edit_line(ds, 0, stored("k_cache", DECODE_DEFINITION)),
        "not a safetensors file",
    ),
    "huge shape": (
        lambda ds: edit_line(ds, 1, set_axis("num_pages", 1 << 31)),
        "larger than 64 GiB",
    ),
    "axis out of range": (
        lambda ds: edit_line(ds, 1, set_axis("num_pages", 1 << 40)),
        "not a whole number",
    ),
    "page table drawn at random": (
        lambda ds: edit_line(ds, 0, set_input("kv_indptr", type="random")),
        "page tables and indptrs must come from the workload's safetensors file",
    ),
    "shape unlike the file's": (
        lambda ds: edit_line(ds, 0, set_axis("num_pages", 3)),
        "has shape",
    ),
    "decreasing indptr": (shuffle_indptr, "kv_indptr must start at 0 and never decrease"),
    "page id past the cache": (bad_page_id, "page id outside"),
    "unknown input type": (
        lambda ds: edit_line(ds, 0, set_input("q", type="url", path="http://x")),
        "has type 'url'",
    ),
    "sm_scale not a number": (
        lambda ds: edit_line(ds, 0, set_input("sm_scale", type="scalar", value="NaN")),
        "needs a finite number",
    ),
    "workload twice": (
        lambda ds: open(os.path.join(ds, DECODE_LINES), "a").write(
            open(os.path.join(ds, DECODE_LINES)).readline()
        ),
        "already on",
    ),
    "definition name that is a path": (
        lambda ds: open(os.path.join(ds, DECODE_DEFINITION), "w").write(
            json.dumps({**fib_data.definitions()[fib_data.DECODE], "name": "../../x"})
        ),
        "cannot be a file name",
    ),
}


@pytest.mark.parametrize("attack", sorted(HOSTILE))
def test_a_hostile_dataset_is_one_error_line_and_exit_2(attack, dataset, tmp_path, capsys):
    spoil, message = HOSTILE[attack]
    spoil(dataset)
    assert bench(["--fib", dataset, "--backend", "torch"], tmp_path) == 2
    line = refused(capsys)
    assert "error:" in line and message in line, line


def test_a_symlink_leaving_the_folder_is_refused(dataset, tmp_path, capsys):
    outside = tmp_path / "outside.json"
    outside.write_text(json.dumps(fib_data.definitions()[fib_data.DECODE]))
    os.symlink(outside, os.path.join(dataset, "definitions", "linked.json"))
    assert bench(["--fib", dataset, "--backend", "torch"], tmp_path) == 2
    assert "leads outside the dataset folder" in refused(capsys)


def test_a_safetensors_symlink_leaving_the_folder_is_refused(dataset, tmp_path, capsys):
    target = os.path.join(dataset, "blob/workloads", fib_data.DECODE, "dec-a.safetensors")
    moved = tmp_path / "moved.safetensors"
    os.rename(target, moved)
    os.symlink(moved, target)
    assert bench(["--fib", dataset, "--backend", "torch"], tmp_path) == 2
    assert "leads outside the dataset folder" in refused(capsys)


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--preset", "cpu"], "--fib replaces --preset"),
        (["--impl", "torch", "--impl", "fib:nobody"], "no solution 'nobody'"),
        (["--fib-traces", "TRACES", "--output", "-"], "give --output FILE, not -"),
        (["--dtype", "float16", "--page-size", "8"], "disagree"),
        (
            ["--fib-traces", "DATASET/workloads/t", "--output", "OUT"],
            "inside the dataset's workloads/",
        ),
    ],
)
def test_bad_options_with_fib_exit_2(argv, message, dataset, tmp_path, capsys):
    argv = [
        w.replace("TRACES", str(tmp_path / "t")).replace("DATASET", dataset)
        .replace("OUT", str(tmp_path / "o.csv")) for w in argv
    ]  # fmt: skip
    code = main_for(decode.SPEC, ["--fib", dataset, "--backend", "torch", "--device", "cpu", *argv])
    assert code == 2
    assert message in refused(capsys)


def test_traces_need_fib_and_a_missing_folder_is_refused(tmp_path, capsys):
    code = main_for(
        decode.SPEC, ["--fib-traces", str(tmp_path), "--device", "cpu", "--preset", "cpu"]
    )
    assert code == 2 and "give --fib DIR" in refused(capsys)
    assert main_for(decode.SPEC, ["--fib", str(tmp_path / "no"), "--device", "cpu"]) == 2
    assert "not a folder" in refused(capsys)


def test_bench_all_refuses_a_hostile_dataset_before_any_script_runs(dataset, tmp_path, capsys):
    edit_line(dataset, 0, stored("k_cache", "../escape.safetensors"))
    argv = ["--fib", dataset, "--backend", "torch", "--device", "cpu"]
    assert bench_all([*argv, "--output-dir", str(tmp_path / "all")]) == 2
    assert "leads outside the dataset folder" in refused(capsys)
    made = os.listdir(tmp_path / "all") if (tmp_path / "all").exists() else []
    assert not [p for p in made if p.endswith(".csv")]


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda s: s["sources"][0].update(content="def run(:\n"), "cannot import main.py"),
        (lambda s: s["spec"].update(language="cuda"), "only python and triton solutions"),
        (lambda s: s["spec"].update(entry_point="main.py::missing"), "no function 'missing'"),
        (lambda s: s["sources"][0].update(path="../main.py"), "leaves the solution's folder"),
        (lambda s: s.update(definition="nowhere"), "its definition 'nowhere' is not in --fib"),
    ],
)
def test_a_broken_solution_is_exit_2_before_any_case(change, message, dataset, tmp_path, capsys):
    solution = fib_data.solution("broken")
    change(solution)
    with open(os.path.join(dataset, "solutions", "broken.json"), "w") as handle:
        json.dump(solution, handle)
    argv = ["--fib", dataset, "--impl", "torch", "--impl", "fib:broken"]
    assert bench(argv, tmp_path) == 2
    assert message in refused(capsys)


def test_a_solution_of_another_script_is_refused_by_name(dataset, tmp_path, capsys):
    from fi_attn_bench.apis import prefill_paged

    argv = ["--fib", dataset, "--impl", "torch", "--impl", "fib:py_decode", "--device", "cpu"]
    assert main_for(prefill_paged.SPEC, argv) == 2
    assert "its definition 'gqa_paged_decode_h4_kv2_d16_ps4' is not one that" in refused(capsys)


def test_traces_that_cannot_be_written_are_one_line_and_the_csv_is_kept(dataset, tmp_path, capsys):
    folder = tmp_path / "t"
    folder.mkdir()
    (folder / "traces").write_text("a file where the traces folder would be\n")
    out = tmp_path / "out.csv"
    fast = ["--max-time-per-case", "0.05", "--min-samples", "3"]
    argv = ["--fib", dataset, "--backend", "torch", "--device", "cpu", "--output", str(out), *fast]
    assert main_for(decode.SPEC, [*argv, "--fib-traces", str(folder)]) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if "error:" in x]
    assert "cannot write" in line and "--resume CSV" in line
    assert out.exists() and len(out.read_text().splitlines()) == 3  # header and both cases
    (folder / "traces").unlink()
    resume = [
        "--fib",
        dataset,
        "--backend",
        "torch",
        "--device",
        "cpu",
        "--resume",
        str(out),
        *fast,
    ]
    assert main_for(decode.SPEC, [*resume, "--fib-traces", str(folder)]) == 0
    assert len(list((folder / "traces").rglob("*.jsonl"))) == 1


def test_a_triton_solution_without_triton_is_exit_2(dataset, tmp_path, capsys, monkeypatch):
    from fi_attn_bench.fib import solutions

    monkeypatch.setattr(solutions, "triton_installed", lambda: False)
    solution = fib_data.solution("tri")
    solution["spec"]["language"] = "triton"
    with open(os.path.join(dataset, "solutions", "tri.json"), "w") as handle:
        json.dump(solution, handle)
    assert bench(["--fib", dataset, "--impl", "torch", "--impl", "fib:tri"], tmp_path) == 2
    assert "a Triton solution; triton is not installed" in refused(capsys)
