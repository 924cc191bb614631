"""The summarizer never overwrites what a user made, compares only runs that
measured the same thing, says its warnings on stdout, and behaves in pipes and CI logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.results.schema import OPTIONAL_COLUMN_BY_NAME, Compare
from fi_attn_bench.summarizer import command_line as sr
from fi_attn_bench.summarizer import output
from fi_attn_bench.summarizer.terminal import UNLIMITED, terminal_width

ROOT = Path(__file__).resolve().parents[1]
V1_HEADER = (
    "schema_version,api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim,"
    "status,time_ms,bandwidth_GB_s,tflops,error_type,error"
)
RUN_HEADER = V1_HEADER + ",timer,l2,dtype,page_size,device,torch_version,harness_version"
RUN = {
    "timer": "profiler",
    "l2": "cold",
    "dtype": "float16",
    "page_size": "16",
    "device": "NVIDIA H100",
    "torch_version": "2.11.0",
    "harness_version": "0.6.0",
}


def row(batch: int, time_ms: str = "1.0", status: str = "ok", **run) -> str:
    error = ("RuntimeError", "boom") if status == "failed" else ("", "")
    metrics = ("", "", "") if status == "failed" else (time_ms, "100", "1")
    cells = ["1", "Decode", str(batch), "1", "128", "32", "8", "64", status, *metrics, *error]
    return ",".join(cells + [run.get(name, RUN[name]) for name in RUN])


def write(path: Path, *lines: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def run_csv(path: Path, batches=(1, 2), **run) -> Path:
    return write(path, RUN_HEADER, *(row(batch, **run) for batch in batches))


def regress(tmp_path, base, cand, *extra):
    argv = ["--baseline", base, "--candidate", cand, "--output", tmp_path / "report.md", *extra]
    return sr.main([str(a) for a in argv])


def report(tmp_path) -> str:
    return (tmp_path / "report.md").read_text(encoding="utf-8")


# ------------------------------------------------ 1. nothing a user made is overwritten


@pytest.fixture
def reading_forbidden(monkeypatch):
    """Any input read fails the test: the refusals come before the inputs are opened."""

    def forbidden(*args, **kwargs):
        raise AssertionError("an input was read before the outputs were checked")

    monkeypatch.setattr(sr, "load_run", forbidden)  # the command's one way to read inputs


def refused(argv, capsys) -> str:
    code = sr.main([str(a) for a in argv])
    captured = capsys.readouterr()
    assert code == sr.EXIT_INPUT_ERROR and captured.out == ""
    assert len(captured.err.splitlines()) == 1 and captured.err.startswith("error: refusing")
    return captured.err


def test_an_output_that_is_an_input_is_refused(tmp_path, capsys, reading_forbidden):
    base = run_csv(tmp_path / "base" / "X.csv")
    measured = base.read_bytes()
    err = refused([tmp_path / "base", "--output", base], capsys)
    assert f"report (--output) to {base}: it is an input" in err
    err = refused([tmp_path / "base", "--json", base, "--output", tmp_path / "r.md"], capsys)
    assert "JSON report (--json)" in err and "it is an input" in err
    err = refused(["--baseline", base, "--candidate", base, "--output", base], capsys)
    assert base.read_bytes() == measured and not (tmp_path / "r.md").exists()


def test_an_input_reached_by_a_link_or_another_spelling_is_refused(
    tmp_path, capsys, reading_forbidden
):
    base = run_csv(tmp_path / "base" / "a.csv")
    link = tmp_path / "report.md"
    link.symlink_to(base)
    assert "it is an input" in refused([base, "--output", link], capsys)
    spelled = tmp_path / "base" / ".." / "base" / "a.csv"
    assert "it is an input" in refused([tmp_path / "base", "--output", spelled], capsys)
    hard = tmp_path / "hard.md"
    os.link(base, hard)
    assert "it is an input" in refused([base, "--output", hard], capsys)
    assert base.read_text().startswith("schema_version")


@pytest.mark.parametrize("name", ["old.csv", "old.jsonl", "old.csv.gz", "OLD.CSV"])
def test_an_existing_data_file_is_never_replaced(tmp_path, capsys, reading_forbidden, name):
    data = tmp_path / "other" / name
    data.parent.mkdir()
    data.write_bytes(b"measured\n")
    base = run_csv(tmp_path / "base.csv")
    err = refused([base, "--json", data], capsys)
    assert "it is an existing data file" in err
    refused([base, "--output", data], capsys)
    assert data.read_bytes() == b"measured\n"


def test_a_new_report_and_an_old_report_are_written(tmp_path, capsys):
    base = run_csv(tmp_path / "base.csv")
    (tmp_path / "r.md").write_text("old report\n")
    assert sr.main([str(base), "--output", str(tmp_path / "r.md")]) == sr.EXIT_OK
    assert (tmp_path / "r.md").read_text().startswith("# FlashInfer Benchmark Summary")


def test_the_json_report_and_the_report_may_not_be_one_file(tmp_path, capsys):
    base = run_csv(tmp_path / "base.csv")
    with pytest.raises(SystemExit) as stop:
        sr.main([str(base), "--output", str(tmp_path / "r.md"), "--json", f"{tmp_path}/x/../r.md"])
    assert stop.value.code == 2 and "--json needs a file of its own" in capsys.readouterr().err


def test_an_input_with_a_plot_file_name_in_the_plot_folder_is_refused(
    tmp_path, capsys, monkeypatch, reading_forbidden
):
    class Plots:
        PLOT_FILE_SUFFIXES = ("_speedup.png",)

    monkeypatch.setitem(sys.modules, "fi_attn_bench.summarizer.plots", Plots())
    clash = write(tmp_path / "plots" / "Decode_speedup.png", RUN_HEADER, row(1))
    err = refused([clash, "--output", tmp_path / "r.md", "--plot-dir", tmp_path / "plots"], capsys)
    assert "plots (--plot-dir)" in err and "has a plot file's name" in err


def test_a_report_write_failing_midway_keeps_the_previous_report(tmp_path, capsys, monkeypatch):
    base = run_csv(tmp_path / "base.csv")
    previous = "# the previous report\n" * 50
    (tmp_path / "r.md").write_text(previous)
    real_fdopen = os.fdopen

    class HalfWriter:
        def __init__(self, stream):
            self.stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.stream.close()

        def write(self, text):
            self.stream.write(text[: len(text) // 2])
            self.stream.flush()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(output.os, "fdopen", lambda *a, **k: HalfWriter(real_fdopen(*a, **k)))
    code = sr.main([str(base), "--output", str(tmp_path / "r.md")])
    monkeypatch.undo()
    assert code == sr.EXIT_INPUT_ERROR
    assert "No space left on device" in capsys.readouterr().err
    assert (tmp_path / "r.md").read_text() == previous
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.csv", "r.md"]  # no temporary


# ------------------------------------------------ 2. comparisons that mean something


@pytest.mark.parametrize("extra", [[], ["--json", "report.json"]], ids=["scan", "pandas"])
def test_runs_of_another_dtype_and_page_size_are_not_compared(tmp_path, capsys, extra):
    base = run_csv(tmp_path / "base.csv")
    cand = run_csv(tmp_path / "cand.csv", dtype="bfloat16", page_size="64")
    extra = [str(tmp_path / name) if name.endswith(".json") else name for name in extra]
    assert regress(tmp_path, base, cand, *extra) == sr.EXIT_INPUT_ERROR
    captured = capsys.readouterr()
    said = (
        "baseline and candidate measured different things: dtype float16 → bfloat16; "
        "page_size 16 → 64 (--allow-difference dtype,page_size compares them anyway)"
    )
    assert captured.err.splitlines() == [f"error: {said}"]
    assert captured.out.splitlines()[0] == f"Verdict: NOT COMPARABLE — {said}"
    assert report(tmp_path).splitlines()[2].startswith("**Verdict: NOT COMPARABLE** — ")
    if extra:
        result = json.loads((tmp_path / "report.json").read_text())
        assert result["verdict"] == "not comparable" and result["exit_code"] == 2
        assert [d["column"] for d in result["differences"]] == ["dtype", "page_size"]


def test_allowed_differences_compare_and_are_stated_at_the_top(tmp_path, capsys):
    base = run_csv(tmp_path / "base.csv")
    cand = run_csv(tmp_path / "cand.csv", dtype="bfloat16", page_size="64")
    allowed = ["--allow-difference", "dtype", "--allow-difference", "page_size,l2"]
    assert regress(tmp_path, base, cand, *allowed) == sr.EXIT_OK
    out = capsys.readouterr().out.splitlines()
    stated = "dtype float16 → bfloat16; page_size 16 → 64; l2 (no difference found)"
    assert out[1] == f"Allowed differences (--allow-difference): {stated}"
    text = report(tmp_path)
    assert "> **Allowed differences (--allow-difference):** dtype float16 → bfloat16" in text
    assert text.index("Allowed differences") < text.index("- Baseline files:")


def test_an_allowed_difference_leaves_the_others_blocking(tmp_path, capsys):
    base = run_csv(tmp_path / "base.csv")
    cand = run_csv(tmp_path / "cand.csv", dtype="bfloat16", timer="events")
    assert regress(tmp_path, base, cand, "--allow-difference", "dtype") == sr.EXIT_INPUT_ERROR
    err = capsys.readouterr().err
    assert "timer profiler → events" in err and "dtype" not in err


def test_a_difference_in_some_cases_is_counted(tmp_path, capsys):
    base = run_csv(tmp_path / "base.csv", batches=(1, 2, 3))
    cand = write(
        tmp_path / "cand.csv", RUN_HEADER, row(1), row(2, timer="events"), row(3, timer="wall")
    )
    assert regress(tmp_path, base, cand) == sr.EXIT_INPUT_ERROR
    assert "timer profiler → events (1 case), profiler → wall (1 case)" in capsys.readouterr().err


def test_seed_csvs_without_these_columns_compare_as_before(tmp_path, capsys):
    seed = write(tmp_path / "seed.csv", V1_HEADER, "1,Decode,1,1,128,32,8,64,ok,1.0,100,1,,")
    new = run_csv(tmp_path / "new.csv", batches=(1,), dtype="bfloat16", page_size="64")
    assert regress(tmp_path, seed, new) == sr.EXIT_OK
    assert capsys.readouterr().out.startswith("Verdict: PASS — 1 matched case, none failing")


def test_another_machine_or_version_is_a_warning_in_the_report_and_on_stdout(tmp_path, capsys):
    base = run_csv(tmp_path / "base.csv")
    cand = run_csv(tmp_path / "cand.csv", device="NVIDIA H200", torch_version="2.12.0")
    assert regress(tmp_path, base, cand) == sr.EXIT_OK
    warning = (
        "baseline and candidate ran on different hardware or software — device: NVIDIA H100 → "
        "NVIDIA H200; torch_version: 2.11.0 → 2.12.0"
    )
    assert capsys.readouterr().out.splitlines()[1] == f"Warning: {warning}"
    text = report(tmp_path)
    assert "> **Warning: baseline and candidate ran on different hardware or software**" in text
    assert text.index("Warning:") < text.index("- Baseline files:")


def test_the_registry_is_the_one_list_of_comparability_rules():
    must = {name for name, c in OPTIONAL_COLUMN_BY_NAME.items() if c.compare is Compare.MUST_MATCH}
    assert set(sr.ALLOWABLE_DIFFERENCES) == must and {"dtype", "page_size", "timer"} <= must
    assert OPTIONAL_COLUMN_BY_NAME["host"].compare is Compare.WARN
    assert OPTIONAL_COLUMN_BY_NAME["preset"].compare is Compare.FREE
    for rule in (Compare.MUST_MATCH, Compare.WARN):  # the docstring lists the same columns
        named = Compare.__doc__.split(f"{rule.name} (")[1].split(")")[0].replace(",", " ").split()
        assert named == [n for n, c in OPTIONAL_COLUMN_BY_NAME.items() if c.compare is rule]


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--allow-difference", "kernels"], "kernels: name columns among timer"),
        (["--allow-difference", ","], "no column: name columns among"),
    ],
)
def test_allow_difference_takes_only_must_match_columns(tmp_path, capsys, argv, said):
    base = run_csv(tmp_path / "base.csv")
    with pytest.raises(SystemExit) as stop:
        sr.main(["--baseline", str(base), "--candidate", str(base), *argv])
    assert stop.value.code == 2 and said in capsys.readouterr().err


def test_allow_difference_needs_regression_mode(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        sr.main([str(run_csv(tmp_path / "a.csv")), "--allow-difference", "dtype"])
    assert stop.value.code == 2
    assert "--allow-difference requires regression mode" in capsys.readouterr().err


# ------------------------------------------------ 3. warnings on stdout


def test_missing_candidate_cases_are_counted_on_stdout(tmp_path, capsys):
    base = run_csv(tmp_path / "base.csv", batches=(1, 2, 3, 4, 5))
    cand = run_csv(tmp_path / "cand.csv", batches=(1,))
    assert regress(tmp_path, base, cand) == sr.EXIT_BENCHMARK_FAILURE
    warnings = [line for line in capsys.readouterr().out.splitlines() if "Warning" in line]
    assert len(warnings) == 1
    assert warnings[0].startswith("Warning: 4 baseline cases missing from the candidate — ")
    assert warnings[0].endswith("; and 1 more (the report lists them)")
    assert "Decode (batch_size=2, " in warnings[0]


def test_mixed_harness_versions_are_said_on_stdout(tmp_path, capsys):
    mixed = write(tmp_path / "mixed.csv", RUN_HEADER, row(1), row(2, harness_version="0.5.0"))
    assert sr.main([str(mixed), "--output", str(tmp_path / "report.md")]) == sr.EXIT_OK
    said = "Warning: the run mixes 2 harness versions — 0.5.0, 0.6.0"
    assert capsys.readouterr().out.splitlines()[1].startswith(said)
    assert "**Warning: the run mixes 2 harness versions**" in report(tmp_path)
    base = run_csv(tmp_path / "base.csv")
    assert regress(tmp_path, base, mixed) == sr.EXIT_OK
    out = capsys.readouterr().out
    assert "harness_version: 0.6.0 → 0.5.0, 0.6.0" in out
    assert "Warning: the candidate mixes 2 harness versions" in out


# ------------------------------------------------ 4. CI logs get whole labels


def test_labels_are_never_cut_when_stdout_is_not_a_terminal(tmp_path, capsys):
    header = V1_HEADER.replace("head_dim", "head_dim,a_very_long_case_parameter_name")
    value = "a-value-that-makes-the-label-far-longer-than-any-terminal-" * 3
    line = f"1,Decode,1,1,128,32,8,64,{value},ok,1.0,100,1,,"
    path = write(tmp_path / "long.csv", header, line)
    assert sr.main([str(path), "--output", str(tmp_path / "r.md")]) == sr.EXIT_OK
    out = capsys.readouterr().out
    assert f"a_very_long_case_parameter_name={value}" in out and "…" not in out


def test_a_terminal_still_gets_lines_of_its_width(monkeypatch):
    class Terminal:
        def isatty(self):
            return True

    monkeypatch.setenv("COLUMNS", "77")
    assert terminal_width(Terminal()) == 77
    assert terminal_width(open(os.devnull, "w")) == UNLIMITED


# ------------------------------------------------ 5. a reader that stops reading


def _closed_pipe_run(argv) -> tuple[int, str]:
    """Run the summarizer with stdout a pipe whose reader is gone before it writes."""
    command = [sys.executable, str(ROOT / "summarize_results.py"), *map(str, argv)]
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as process:
        process.stdout.close()
        err = process.stderr.read().decode()
        process.wait(timeout=120)
    return process.returncode, err


@pytest.mark.parametrize(
    "batches, cand_status, expected",
    [((1, 2), "ok", 0), ((1, 2), "failed", 1), ((1, 1), "ok", 2)],
    ids=["pass", "fail", "invalid"],
)
def test_a_closed_stdout_keeps_the_verdicts_exit_code(tmp_path, batches, cand_status, expected):
    base = run_csv(tmp_path / "base.csv", batches=batches)
    cand = run_csv(tmp_path / "cand.csv", batches=batches, status=cand_status)
    argv = ["--baseline", base, "--candidate", cand, "--output", tmp_path / "r.md"]
    code, err = _closed_pipe_run(argv)
    assert code == expected, err
    assert "BrokenPipe" not in err and "internal error" not in err and "Exception" not in err
    assert (tmp_path / "r.md").read_text().startswith("# FlashInfer Benchmark Regression")


def test_a_report_to_a_closed_stdout_keeps_the_exit_code(tmp_path):
    base = run_csv(tmp_path / "base.csv", status="failed")
    code, err = _closed_pipe_run([base, "--output", "-", "--json", tmp_path / "r.json"])
    assert (code, "BrokenPipe" in err) == (1, False), err
    assert json.loads((tmp_path / "r.json").read_text())["verdict"] == "fail"


# ------------------------------------------------ 6-8. arguments


def test_a_directory_without_csv_files_is_one_line(tmp_path, capsys):
    (tmp_path / "emptydir").mkdir()
    code = sr.main([f"{tmp_path}/emptydir/", "--output", str(tmp_path / "r.md")])
    captured = capsys.readouterr()
    assert code == 2 and captured.out == ""
    assert captured.err == f"error: no *.csv file under directory {tmp_path}/emptydir/\n"
    assert not (tmp_path / "r.md").exists()


def test_version_and_usage_name_the_program_the_user_ran(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/fi-attn-summarize"])
    with pytest.raises(SystemExit):
        sr.main(["--version"])
    assert capsys.readouterr().out == f"{VERSION_TEXT}\n"
    with pytest.raises(SystemExit):
        sr.main(["--no-such-option"])
    assert capsys.readouterr().err.startswith("usage: fi-attn-summarize ")
    script = [sys.executable, str(ROOT / "summarize_results.py")]
    shown = subprocess.run([*script, "--version"], capture_output=True, text=True, check=False)
    assert (shown.returncode, shown.stdout) == (0, f"{VERSION_TEXT}\n")
    bad = subprocess.run([*script, "--bogus"], capture_output=True, text=True, check=False)
    assert bad.stderr.startswith("usage: summarize_results.py ")


def test_the_doctor_answers_version_as_every_command_does(capsys):
    from fi_attn_bench import doctor

    assert doctor.main(["--version"]) == 0
    assert capsys.readouterr().out == f"{VERSION_TEXT}\n"


@pytest.mark.parametrize("given", ["--baseline-samples", "--candidate-samples"])
def test_samples_of_one_side_only_is_an_argument_error(tmp_path, capsys, given):
    base = run_csv(tmp_path / "base.csv")
    argv = ["--baseline", str(base), "--candidate", str(base), given, str(tmp_path)]
    with pytest.raises(SystemExit) as stop:
        sr.main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("error:") == 1
    assert "--baseline-samples and --candidate-samples go together: give both" in err


# ------------------------------------------------ 9. one case, two cases


def test_counts_are_pluralized(tmp_path, capsys):
    one = run_csv(tmp_path / "one.csv", batches=(1,))
    assert sr.main([str(one), "--output", str(tmp_path / "r.md")]) == sr.EXIT_OK
    assert capsys.readouterr().out.startswith("Verdict: PASS — 1 case ok\n")
    failed = run_csv(tmp_path / "failed.csv", batches=(1,), status="failed")
    assert sr.main([str(failed), "--output", str(tmp_path / "r.md")]) == 1
    assert capsys.readouterr().out.startswith("Verdict: FAIL — 1 of 1 case failed\n")
    twice = write(tmp_path / "twice.csv", RUN_HEADER, row(1), row(1))
    assert sr.main([str(twice), "--output", str(tmp_path / "r.md")]) == 2
    assert "INVALID INPUT — 1 input error; the results" in capsys.readouterr().out
    many = write(tmp_path / "many.csv", RUN_HEADER, *[row(1)] * (sr.STDERR_ISSUE_LIMIT + 2))
    assert sr.main([str(many), "--output", str(tmp_path / "r.md")]) == 2
    assert capsys.readouterr().err.endswith("error: ... and 1 more issue (see the report)\n")
    assert regress(tmp_path, one, one) == sr.EXIT_OK
    out = capsys.readouterr().out
    assert "1 matched case, none failing" in out and "among 1 matched case." in out


# ------------------------------------------------ CPU wall-clock rows never fail the gate


@pytest.mark.parametrize(
    ("timer", "code", "state"), [("profiler", 1, "regression"), ("wall", 0, "within noise")]
)
def test_a_cpu_timed_change_is_reported_but_never_a_regression(
    tmp_path, capsys, timer, code, state
):
    """Rows without statistics are judged by the gate alone: a 30 % rise fails a GPU-timed
    case; two CPU wall-clock runs differ that much by themselves, so it is within noise."""
    base = run_csv(tmp_path / "base.csv", batches=(1,), time_ms="1.0", timer=timer)
    cand = run_csv(tmp_path / "cand.csv", batches=(1,), time_ms="1.3", timer=timer)
    assert regress(tmp_path, base, cand, "--fail-on-regression", "5") == code
    assert f"| {state} |" in (tmp_path / "report.md").read_text(encoding="utf-8")
