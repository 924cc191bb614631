"""Runs, not files: a folder holding several runs of the same cases is summarized as its
newest run (noted); the sweep writes one run_id per invocation."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

from fi_attn_bench import suite as bench_all
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.results.runs import read_run
from fi_attn_bench.summarizer import command_line as summarize_results
from fi_attn_bench.summarizer.markdown_text import escape_markdown

V1 = "schema_version,api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim"
V1 += ",status,time_ms,bandwidth_GB_s,tflops,error_type,error"
CPU = ["--backend", "torch", "--device", "cpu", "--max-time-per-case", "0.05"]
CPU += ["--min-samples", "3", "--filter", "batch_size=1"]


def write(path: Path, *rows: str, extra_header: str = "") -> Path:
    path.write_text("\n".join([V1 + extra_header, *rows]) + "\n", encoding="utf-8")
    return path


def row(batch: int, time_ms: str = "1.0", tail: str = "") -> str:
    return f"1,Decode,{batch},1,128,32,8,64,ok,{time_ms},100,1,," + tail


def stamped(batch, time_ms, run_id, stamp) -> str:
    return row(batch, time_ms, f",{run_id},{stamp}")


RUN = ",run_id,timestamp_utc"


def test_newest_run_of_the_same_cases_is_read_and_the_others_named(tmp_path):
    old = write(
        tmp_path / "a.csv", stamped(1, "2.0", "r1", "2026-12-01T10:00:00Z"), extra_header=RUN
    )
    new = write(
        tmp_path / "b.csv", stamped(1, "1.0", "r2", "2026-12-02T10:00:00Z"), extra_header=RUN
    )
    run = read_run([old, new])
    assert [file.source for file in run.files] == [str(new)]
    assert "run_id r2" in run.note and "run_id r1" in run.note and str(old) in run.note
    assert read_run([old, new], all_runs=True).note == ""
    assert len(read_run([old, new], all_runs=True).files) == 2


def test_runs_of_other_cases_are_all_kept(tmp_path):
    """bench_all's four CSVs or a sweep's shards: disjoint cases, every run kept."""
    first = write(
        tmp_path / "a.csv", stamped(1, "1", "r1", "2026-12-01T10:00:00Z"), extra_header=RUN
    )
    second = write(
        tmp_path / "b.csv", stamped(2, "1", "r2", "2026-12-02T10:00:00Z"), extra_header=RUN
    )
    run = read_run([first, second])
    assert len(run.files) == 2 and run.note == ""


def test_files_of_one_run_id_are_one_run(tmp_path):
    """Two files of one run_id holding the same case: a duplicate inside a run (exit 2)."""
    a = write(tmp_path / "a.csv", stamped(1, "1", "r1", "2026-12-01T10:00:00Z"), extra_header=RUN)
    b = write(tmp_path / "b.csv", stamped(1, "2", "r1", "2026-12-01T10:00:01Z"), extra_header=RUN)
    assert len(read_run([a, b]).files) == 2
    code = summarize_results.main([str(a), str(b), "--output", str(tmp_path / "r.md")])
    assert code == summarize_results.EXIT_INPUT_ERROR


def test_older_harness_files_with_timestamps_are_runs_of_their_own(tmp_path):
    stamp = ",timestamp_utc"
    old = write(tmp_path / "a.csv", row(1, "2", ",2026-12-01T10:00:00Z"), extra_header=stamp)
    new = write(tmp_path / "b.csv", row(1, "1", ",2026-12-02T10:00:00Z"), extra_header=stamp)
    assert [file.source for file in read_run([old, new]).files] == [str(new)]


def test_seed_files_stay_one_run_and_their_duplicates_errors(tmp_path, capsys):
    a = write(tmp_path / "a.csv", row(1))
    b = write(tmp_path / "b.csv", row(1, "2"))
    assert len(read_run([a, b]).files) == 2
    code = summarize_results.main([str(a), str(b), "--output", str(tmp_path / "r.md")])
    assert code == summarize_results.EXIT_INPUT_ERROR
    assert "duplicate case" in capsys.readouterr().err


def test_regression_reads_each_sides_newest_run(tmp_path, capsys):
    base = tmp_path / "base"
    base.mkdir()
    write(base / "a.csv", stamped(1, "9.0", "r1", "2026-12-01T10:00:00Z"), extra_header=RUN)
    write(base / "b.csv", stamped(1, "1.0", "r2", "2026-12-02T10:00:00Z"), extra_header=RUN)
    cand = write(
        tmp_path / "c.csv", stamped(1, "1.0", "r3", "2026-12-03T10:00:00Z"), extra_header=RUN
    )
    argv = ["--baseline", str(base), "--candidate", str(cand), "--output", str(tmp_path / "r.md")]
    assert summarize_results.main([*argv, "--fail-on-regression", "5"]) == 0
    out = capsys.readouterr().out
    assert "note: baseline: read the newest run (run_id r2" in out
    text = (tmp_path / "r.md").read_text(encoding="utf-8")
    assert "- Runs: baseline: read the newest run" in text
    assert summarize_results.main([*argv, "--all-runs"]) == summarize_results.EXIT_INPUT_ERROR
    capsys.readouterr()
    to_stdout = [*argv[:-1], "-"]  # the report on stdout: the note goes to stderr
    assert summarize_results.main(to_stdout) == 0
    out, err = capsys.readouterr()
    assert out.startswith("# FlashInfer Benchmark Regression") and "note: baseline:" in err


def _quick_start(out: Path, report: Path) -> int:
    """README's quick start on the CPU: the decode script, then the summary of its folder."""
    decode = importlib.import_module("bench_batch_decode")
    assert decode.main([*CPU, "--preset", "cpu", "--output-dir", str(out)]) == 0
    return summarize_results.main([*map(str, sorted(out.glob("*.csv"))), "--output", str(report)])


def test_quick_start_twice_summarizes_the_second_run(tmp_path, capsys):
    out, report = tmp_path / "results", tmp_path / "results" / "summary.md"
    assert _quick_start(out, report) == 0
    first = sorted(out.glob("*.csv"))
    time.sleep(1.1)  # the second CSV gets a name (and timestamps) of its own second
    assert _quick_start(out, report) == 0
    second = sorted(set(out.glob("*.csv")) - set(first))
    assert len(first) == len(second) == 1
    stdout = capsys.readouterr().out
    assert "older runs of the same cases left out (--all-runs reads them too): run_id" in stdout
    assert str(first[0]) in stdout
    text = report.read_text(encoding="utf-8")
    assert "- Runs: read the newest run" in text
    assert f"| {escape_markdown(str(first[0]))} | 0 | older run, left out |" in text
    ids = {row["run_id"] for path in (*first, *second) for row in read_stored_rows(path).rows}
    assert len(ids) == 2 and "" not in ids


def test_bench_all_force_into_the_same_folder_summarizes_the_second_run(tmp_path):
    out = tmp_path / "results"
    argv = [
        "--scripts",
        "bench_batch_decode",
        "bench_batch_prefill_paged",
        "--preset",
        "cpu",
        *CPU,
        "--output-dir",
        str(out),
    ]
    assert bench_all.main(argv) == 0
    first = sorted(out.glob("*.csv"))
    time.sleep(1.1)
    assert bench_all.main([*argv, "--force"]) == 0
    csvs = sorted(out.glob("*.csv"))
    run_ids = [{row["run_id"] for row in read_stored_rows(path).rows} for path in csvs]
    assert len(csvs) == 4 and all(len(ids) == 1 for ids in run_ids)
    new = [path for path in csvs if path not in first]
    assert (
        len({next(iter(ids)) for path, ids in zip(csvs, run_ids, strict=True) if path in new}) == 1
    )
    report = tmp_path / "summary.md"
    assert summarize_results.main([str(out), "--output", str(report)]) == 0
    text = report.read_text(encoding="utf-8")
    assert text.count("older run, left out") == 2


def test_a_resumed_sweep_keeps_its_csvs_run_id(tmp_path):
    decode = importlib.import_module("bench_batch_decode")
    path = tmp_path / "r.csv"
    assert decode.main([*CPU, "--preset", "cpu", "--output", str(path)]) == 0
    header, *lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text(header + lines[0], encoding="utf-8")  # interrupted after one case
    (run_id,) = {row["run_id"] for row in read_stored_rows(path).rows}
    assert run_id
    assert decode.main([*CPU, "--resume", str(path)]) == 0
    rows = read_stored_rows(path).rows
    assert len(rows) == len(lines) and {row["run_id"] for row in rows} == {run_id}


REAL = Path(__file__).parent / "fixtures" / "real_csv"


def _sides():
    return [
        ([str(REAL / "h100_decode_default.csv")], "baseline"),
        ([str(REAL / "h100_paged_serving.csv"), "missing.csv"], "candidate"),
    ]


def _same_runs(found, expected) -> None:
    assert len(found) == len(expected)
    for got, want in zip(found, expected, strict=True):
        assert (got.group, got.paths, got.issues) == (want.group, want.paths, want.issues)
        assert [f.source for f in got.files] == [f.source for f in want.files]
        for got_file, want_file in zip(got.files, want.files, strict=True):
            assert got_file.columns == want_file.columns
            assert got_file.frame.equals(want_file.frame)


def test_large_sides_read_in_a_forked_process_equal_reading_them_in_turn(monkeypatch):
    from fi_attn_bench.results import runs

    expected = [read_run(paths, group) for paths, group in _sides()]
    monkeypatch.setattr(runs, "PARALLEL_READ_BYTES", 0)
    assert runs._worth_forking(_sides())
    _same_runs(runs.read_runs(_sides()), expected)


def test_a_broken_pool_falls_back_to_reading_here(monkeypatch):
    import concurrent.futures
    from concurrent.futures.process import BrokenProcessPool

    from fi_attn_bench.results import runs

    class Broken:
        def __init__(self, *args, **kwargs):
            raise BrokenProcessPool("a child was killed")

    expected = [read_run(paths, group) for paths, group in _sides()]
    monkeypatch.setattr(runs, "PARALLEL_READ_BYTES", 0)
    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", Broken)  # imported per read
    _same_runs(runs.read_runs(_sides()), expected)


def test_small_or_single_runs_are_not_worth_a_fork():
    from fi_attn_bench.results import runs

    assert not runs._worth_forking(_sides())  # the fixtures are far under 16 MB
    assert not runs._worth_forking(_sides()[:1])
