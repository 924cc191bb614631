"""fi-attn-history and the summarizer against user error: outputs that are inputs or stores
are refused before anything is written; each failure is one ``error:`` line with its exit
code and leaves no temporary file; Ctrl-C and a closed pipe end quietly."""

from __future__ import annotations

import errno
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from fi_attn_bench.history.command_line import main
from fi_attn_bench.results import run_store as store_module
from fi_attn_bench.results.run_store import RunStore
from fi_attn_bench.summarizer.command_line import main as summarize
from tests.test_history import DECODE, ROOT, noisy_factors, stored_runs, write_runs

RUNS = 12
CONNECT = sqlite3.connect  # the real one, for stand-ins that patch it


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """A store of RUNS decode runs of branch main, and the CSVs it was made from."""
    folder = tmp_path_factory.mktemp("history")
    paths = write_runs(folder / "in", noisy_factors(RUNS, 27, seed=3))
    store = folder / "h.sqlite"
    assert main(["add", *map(str, paths), "--store", str(store), "--branch", "main"]) == 0
    return store, paths


@pytest.fixture
def workspace(tmp_path, history):
    """A private copy of the store, an input CSV, another SQLite file with a report's name,
    a data file, and the store's samples: the things an output must never replace."""
    store, paths = history
    (tmp_path / "h.sqlite").write_bytes(store.read_bytes())
    (tmp_path / "in.csv").write_bytes(paths[0].read_bytes())
    (tmp_path / "other.html").write_bytes(store.read_bytes())  # an SQLite file by its bytes
    (tmp_path / "other.md").write_bytes(store.read_bytes())
    (tmp_path / "data.csv").write_bytes(paths[1].read_bytes())
    return tmp_path


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def no_temporary_files(folder: Path) -> list[str]:
    return [path.name for path in folder.rglob("*") if ".tmp" in path.name]


# Each command's outputs against each thing a user made; {w} is the workspace.
REFUSED_OUTPUTS = [
    ("history report --html the store", ["report", "--html", "{w}/h.sqlite"]),
    ("history report --md the store", ["report", "--md", "{w}/h.sqlite"]),
    ("history report --html another store", ["report", "--html", "{w}/other.html"]),
    ("history report --md another store", ["report", "--md", "{w}/other.md"]),
    ("history report --html a data file", ["report", "--html", "{w}/data.csv"]),
    ("history report --md a data file", ["report", "--md", "{w}/in.csv"]),
    ("history report --html and --md one file", ["report", "--html", "{w}/r", "--md", "{w}/r"]),
    ("history baseline --out the store", ["baseline", "--branch", "main", "--out", "{w}/h.sqlite"]),
    (
        "history baseline --out over a store named as a baseline",
        ["baseline", "--branch", "main", "--out", "{w}/b"],
    ),
    ("history add --store an input", ["add", "{w}/in.csv", "--store", "{w}/in.csv"]),
    ("history add --store a data file", ["add", "{w}/in.csv", "--store", "{w}/data.csv"]),
    ("summarizer --output the noise store", ["S", "--output", "{w}/h.sqlite"]),
    ("summarizer --json the noise store", ["S", "--json", "{w}/h.sqlite"]),
    ("summarizer --output another store", ["S", "--output", "{w}/other.md"]),
    ("summarizer --json another store", ["S", "--json", "{w}/other.html"]),
    ("summarizer --output an input", ["S", "--output", "{w}/in.csv"]),
    ("summarizer --json a data file", ["S", "--json", "{w}/data.csv"]),
    ("summarizer --plot-dir the noise store", ["S", "--plot-dir", "{w}/h.sqlite"]),
]


@pytest.mark.parametrize(
    "argv", [argv for _, argv in REFUSED_OUTPUTS], ids=[n for n, _ in REFUSED_OUTPUTS]
)
def test_an_output_that_is_an_input_a_store_or_data_is_refused_before_any_write(
    workspace, capsys, argv
):
    baseline = workspace / "b" / "baseline_BatchDecodeWithPagedKVCacheWrapper.csv"
    baseline.parent.mkdir()
    baseline.write_bytes((workspace / "h.sqlite").read_bytes())  # a store a baseline would replace
    argv = [part.format(w=workspace) for part in argv]
    before = snapshot(workspace)
    if argv[0] == "S":
        code = summarize(
            [
                "--baseline", f"{workspace}/in.csv", "--candidate", f"{workspace}/data.csv",
                "--noise-from", f"{workspace}/h.sqlite", *argv[1:],
            ]
        )  # fmt: skip
    else:
        if argv[0] in ("report", "baseline"):
            argv += ["--store", f"{workspace}/h.sqlite"]
        code = main(argv)
    assert code == 2
    line = one_error_line(capsys)
    assert any(why in line for why in ("refusing", "a file each", "not an SQLite", "not a dir"))
    assert snapshot(workspace) == before  # nothing replaced, nothing added


def test_the_store_stays_a_store_after_a_refused_report(workspace, capsys):
    store = workspace / "h.sqlite"
    assert main(["report", "--store", str(store), "--html", str(store)]) == 2
    with RunStore.open(store, create=False) as opened:
        assert len(opened.runs()) == RUNS


# ------------------------------------------------------------ one line, no leftovers


def test_a_store_whose_folder_is_a_file_is_one_line(workspace, capsys):
    code = main(["add", str(workspace / "in.csv"), "--store", str(workspace / "in.csv" / "s")])
    assert code == 2
    assert "not a directory" in one_error_line(capsys)


def read_only_connect(path, *args, **kwargs):
    """SQLite's own read-only mode: the writes a read-only file refuses, even to root."""
    kwargs.pop("isolation_level", None)
    kwargs.pop("uri", None)
    return CONNECT(f"file:{path}?mode=ro", *args, uri=True, isolation_level=None, **kwargs)


def test_a_read_only_store_is_one_line_and_unchanged(workspace, capsys, history, monkeypatch):
    store = workspace / "h.sqlite"
    before = store.read_bytes()
    fresh = write_runs(workspace / "new", noisy_factors(1, 27, seed=99))
    fresh[0].rename(workspace / "new" / "later.csv")
    monkeypatch.setattr(store_module.sqlite3, "connect", read_only_connect)
    assert main(["add", str(workspace / "new"), "--store", str(store)]) == 2
    assert "readonly" in one_error_line(capsys)
    assert store.read_bytes() == before


def test_a_store_in_a_folder_that_refuses_files_is_one_line(workspace, capsys, monkeypatch):
    from fi_attn_bench.summarizer import output

    def refused(path):
        raise PermissionError(errno.EACCES, "Permission denied", str(path))

    monkeypatch.setattr(output, "_new_file_beside", refused)  # what a read-only folder does
    code = main(["add", str(workspace / "in.csv"), "--store", str(workspace / "new.sqlite")])
    assert code == 2
    assert "Permission denied" in one_error_line(capsys)
    assert not (workspace / "new.sqlite").exists()


@pytest.mark.parametrize("target", ["folder", "under_a_file"])
def test_a_report_target_that_cannot_be_written_is_one_line(workspace, capsys, target):
    (workspace / "folder").mkdir()
    path = workspace / "folder" if target == "folder" else workspace / "in.csv" / "r.html"
    before = snapshot(workspace)
    assert main(["report", "--store", str(workspace / "h.sqlite"), "--html", str(path)]) == 2
    assert "cannot write the dashboard" in one_error_line(capsys)
    assert snapshot(workspace) == before


def limited_connect(pages: int):
    """A connection whose database may not grow past ``pages`` pages: SQLite's full disk."""

    def connect(*args, **kwargs):
        connection = CONNECT(*args, **kwargs)
        connection.execute(f"PRAGMA max_page_count = {pages}")
        return connection

    return connect


def test_a_full_disk_during_add_names_the_cause_and_keeps_whole_runs(tmp_path, capsys, monkeypatch):
    paths = write_runs(tmp_path / "in", noisy_factors(30, 27, seed=5))
    store = tmp_path / "h.sqlite"
    assert main(["add", str(paths[0]), "--store", str(store)]) == 0
    pages = sqlite3.connect(store).execute("PRAGMA page_count").fetchone()[0]
    capsys.readouterr()
    monkeypatch.setattr(store_module.sqlite3, "connect", limited_connect(pages + 8))
    assert main(["add", str(tmp_path / "in"), "--store", str(store)]) == 2
    line = one_error_line(capsys)
    assert "full" in line and "rollback" not in line
    monkeypatch.undo()
    with sqlite3.connect(store) as connection:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert all(cases == results == 27 for _, cases, results in stored_runs(store))
    assert no_temporary_files(tmp_path) == []


@pytest.mark.parametrize("output", ["--html", "--md"])
def test_a_full_disk_while_writing_a_report_keeps_the_old_one_and_no_temporary(
    workspace, capsys, monkeypatch, output
):
    report = workspace / "r.out"
    report.write_text("the previous report")

    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert main(["report", "--store", str(workspace / "h.sqlite"), output, str(report)]) == 2
    assert "No space left on device" in one_error_line(capsys)
    assert report.read_text() == "the previous report"
    assert no_temporary_files(workspace) == []


def test_a_full_disk_while_writing_the_baseline_leaves_no_temporary(workspace, capsys, monkeypatch):
    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    argv = ["baseline", "--branch", "main", "--store", str(workspace / "h.sqlite")]
    assert main([*argv, "--out", str(workspace / "b")]) == 2
    assert "No space left on device" in one_error_line(capsys)
    assert no_temporary_files(workspace) == []


@pytest.mark.parametrize(
    ("table", "column", "command"),
    [
        ("cases", "fields", "detect"),
        ("runs", "metadata", "detect"),
        ("row_blocks", "data", "baseline"),
        ("row_blocks", "layout", "baseline"),
    ],
)
def test_tampered_json_in_the_store_is_one_line(workspace, capsys, table, column, command):
    store = workspace / "h.sqlite"
    with sqlite3.connect(store) as connection:
        connection.execute(f"UPDATE {table} SET {column} = '{{tampered'")
    argv = ["detect"] if command == "detect" else ["baseline", "--branch", "main", "--out"]
    argv += [str(workspace / "b")] if command == "baseline" else []
    assert main([*argv, "--store", str(store)]) == 2
    line = one_error_line(capsys)
    assert "not JSON" in line if table != "row_blocks" else "row block" in line


def test_detect_without_ruptures_is_one_line(workspace, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ruptures", None)  # import ruptures raises ImportError
    assert main(["detect", "--store", str(workspace / "h.sqlite")]) == 2
    assert "pip install 'fi-attn-bench[history]'" in one_error_line(capsys)


def program(*argv: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "fi_attn_bench.history", *argv], cwd=ROOT, **kwargs
    )


def test_detect_into_a_closed_pipe_ends_quietly(workspace):
    reader, writer = os.pipe()
    os.close(reader)  # closed before the program writes: its first line meets EPIPE
    process = program(
        "detect", "--store", str(workspace / "h.sqlite"), stdout=writer, stderr=subprocess.PIPE
    )
    os.close(writer)
    _, err = process.communicate(timeout=300)
    assert err == b"" and process.returncode == 0


def test_ctrl_c_during_add_is_one_line_exit_130_and_whole_runs(tmp_path, capsys, monkeypatch):
    paths = write_runs(tmp_path / "in", noisy_factors(3, 27))
    store = tmp_path / "h.sqlite"
    original = RunStore.add_run

    def interrupted_on_the_second_run(self, run, branch):
        if run.source.endswith("run_001.csv"):
            raise KeyboardInterrupt
        return original(self, run, branch)

    monkeypatch.setattr(RunStore, "add_run", interrupted_on_the_second_run)
    assert main(["add", str(tmp_path / "in"), "--store", str(store)]) == 130
    assert "interrupted" in one_error_line(capsys)
    assert [(cases, results) for _, cases, results in stored_runs(store)] == [(27, 27)]
    assert no_temporary_files(tmp_path) == []
    assert len(paths) == 3


INTERRUPTED_ADD = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal, even if started in the background
from fi_attn_bench.results import run_store as store
original = store.RunStore.add_run
def waiting(self, run, branch):
    added = original(self, run, branch)
    if run.source.endswith("run_001.csv"):
        print("inside", flush=True)
        time.sleep(600)  # until the test's SIGINT
    return added
store.RunStore.add_run = waiting
from fi_attn_bench.history.command_line import run_as_program
sys.argv[1:] = sys.argv[1:]
run_as_program()
"""


def test_a_real_sigint_during_add_prints_one_line(tmp_path):
    write_runs(tmp_path / "in", noisy_factors(3, 27))
    store = tmp_path / "h.sqlite"
    process = subprocess.Popen(
        [sys.executable, "-c", INTERRUPTED_ADD, "add", str(tmp_path / "in"), "--store", str(store)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    assert process.stdout.readline().strip() == "inside"  # the signal comes only then
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 130
    assert err.count("\n") == 1 and err.startswith("error: interrupted"), err
    assert [(cases, results) for _, cases, results in stored_runs(store)] == [(27, 27)] * 2
    assert no_temporary_files(tmp_path) == []


def test_a_store_from_json_lines_is_not_mistaken_for_sqlite(workspace, capsys):
    lines = workspace / "runs.jsonl"
    lines.write_text(json.dumps({"a": 1}) + "\n")
    assert main(["add", str(workspace / "in.csv"), "--store", str(lines)]) == 2
    assert "not an SQLite file" in one_error_line(capsys)
    assert lines.read_text() == json.dumps({"a": 1}) + "\n"


# ------------------------------------------------------------------ silent non-answers


@pytest.mark.parametrize(
    ("option", "why"),
    [
        (["--cases", "batch_size=999"], "matches no case"),
        (["--since", "deadbeef"], "no stored commit and not a date"),
        (["--since", "notadate"], "no stored commit and not a date"),
        (["--since", "2099-01-01"], "no run started at or after it"),
    ],
)
@pytest.mark.parametrize("command", [["detect"], ["detect", "--json"], ["report", "--md"]])
def test_a_query_that_matches_nothing_says_so(workspace, capsys, option, why, command):
    argv = [*command, str(workspace / "d.md")] if command[0] == "report" else command
    assert main([*argv, "--store", str(workspace / "h.sqlite"), *option]) == 2
    assert why in one_error_line(capsys)
    assert not (workspace / "d.md").exists()


def test_a_since_date_inside_the_history_still_answers(workspace, capsys):
    argv = ["detect", "--store", str(workspace / "h.sqlite"), "--since", "2026-01-01T00:05Z"]
    assert main(argv) == 0
    assert "change point(s)" in capsys.readouterr().out


def regression(workspace, *extra: str) -> int:
    return summarize(
        [
            "--baseline", str(workspace / "in.csv"), "--candidate", str(workspace / "data.csv"),
            "--output", str(workspace / "r.md"), *extra,
        ]
    )  # fmt: skip


def test_noise_from_a_store_too_short_for_any_case_says_so(workspace, tmp_path, capsys):
    short = tmp_path / "short.sqlite"
    paths = write_runs(tmp_path / "few", noisy_factors(3, 27, seed=4))
    assert main(["add", *map(str, paths), "--store", str(short)]) == 0
    capsys.readouterr()
    # a warning, and the gate's own verdict: a CI history starts short (docs/ci's workflow)
    assert regression(workspace, "--noise-from", str(short)) == regression(workspace)
    err = capsys.readouterr().err
    assert "warning: --noise-from" in err and "excused nothing" in err
    assert (workspace / "r.md").exists()  # the comparison is still reported
    assert regression(workspace, "--noise-from", str(workspace / "h.sqlite")) in (0, 1)


def test_an_energy_gate_with_no_energy_on_either_side_says_so(workspace, capsys):
    assert regression(workspace, "--fail-on-energy-regression", "5") == 2
    assert "energy gate checked nothing" in capsys.readouterr().err


def with_time(source: Path, target: Path, time_ms: str) -> Path:
    lines = source.read_text().splitlines()
    header = lines[0].split(",")
    cells = lines[1].split(",")
    cells[header.index("time_ms")] = time_ms
    target.write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
    return target


def test_a_time_beyond_any_measurement_is_not_ok(workspace, capsys):
    huge = with_time(workspace / "in.csv", workspace / "huge.csv", "1e308")
    assert summarize([str(huge), "--output", str(workspace / "s.md")]) == 2
    assert "beyond 1e+07 ms" in capsys.readouterr().err
    assert main(["add", str(huge), "--store", str(workspace / "new.sqlite")]) == 2
    assert "not a measured time" in one_error_line(capsys)
    assert not (workspace / "new.sqlite").exists()


def test_baseline_files_of_apis_differing_in_punctuation_do_not_collide(tmp_path):
    from fi_attn_bench.history.baseline import baseline_paths, write_baseline

    apis = ["Batch.Decode", "Batch-Decode", "Prefill"]
    paths = baseline_paths(apis, tmp_path)
    assert len(set(paths.values())) == 3
    assert paths["Prefill"].name == "baseline_Prefill.csv"  # a name of its own stays short
    header = pd.read_csv(DECODE, nrows=0).columns.tolist()
    row = pd.read_csv(DECODE, dtype=str, keep_default_na=False).iloc[0].to_dict()
    written = write_baseline([{**row, "api": api} for api in apis], tuple(header), tmp_path)
    assert sorted(pd.read_csv(path)["api"][0] for path in written) == sorted(apis)


# ------------------------------------------------------- the summarizer's smaller defects


def test_a_schema_version_2_file_is_one_stderr_line(workspace, capsys):
    lines = (workspace / "in.csv").read_text().splitlines()
    header = lines[0].split(",").index("schema_version")
    rows = [
        ",".join("2" if i == header else c for i, c in enumerate(line.split(",")))
        for line in lines[1:]
    ]
    (workspace / "v2.csv").write_text("\n".join([lines[0], *rows]) + "\n")
    assert summarize([str(workspace / "v2.csv"), "--output", str(workspace / "v2.md")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unsupported schema_version '2'" in err and "(27 rows)" in err


def test_not_comparable_runs_print_no_changed_case_line(workspace, capsys):
    text = (workspace / "data.csv").read_text().replace(",float16,", ",bfloat16,")
    (workspace / "bf16.csv").write_text(text)
    argv = ["--baseline", str(workspace / "in.csv"), "--candidate", str(workspace / "bf16.csv")]
    assert summarize([*argv, "--output", str(workspace / "r.md")]) == 2
    out = capsys.readouterr().out
    assert "NOT COMPARABLE" in out and "No changed case" not in out


def test_an_older_file_left_out_is_still_a_valid_file(workspace, capsys):
    text = (workspace / "in.csv").read_text().replace("2026-01-01T", "2026-01-02T")
    (workspace / "newer.csv").write_text(text)
    argv = [str(workspace / "in.csv"), str(workspace / "newer.csv")]
    assert summarize([*argv, "--output", str(workspace / "s.md")]) == 0
    report = (workspace / "s.md").read_text()
    assert "- Valid files: 2 (1 of them an older run, left out)" in report


@pytest.mark.parametrize("command", ["summarizer", "history"])
def test_an_output_into_a_missing_folder_says_it_created_it(workspace, capsys, command):
    target = workspace / "new" / "deeper" / "r.md"
    if command == "summarizer":
        assert summarize([str(workspace / "in.csv"), "--output", str(target)]) == 0
    else:
        assert main(["report", "--store", str(workspace / "h.sqlite"), "--md", str(target)]) == 0
    assert f"note: created folder {workspace / 'new'}" in capsys.readouterr().err
    assert target.exists()


def test_ctrl_c_in_the_summarizer_is_one_line_exit_130(workspace, capsys, monkeypatch):
    from fi_attn_bench.summarizer import command_line as summarizer_command_line

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(summarizer_command_line, "_run", interrupted)
    assert summarize([str(workspace / "in.csv"), "--output", str(workspace / "s.md")]) == 130
    assert "interrupted" in one_error_line(capsys)


def test_a_store_with_more_series_than_the_page_draws_keeps_the_changed_ones(
    tmp_path, capsys, monkeypatch
):
    import json as json_module

    from fi_attn_bench.history import report

    factors = noisy_factors(14, 27, seed=6)
    factors[8:, 5] *= 1.08
    store = tmp_path / "h.sqlite"
    assert (
        main(["add", *map(str, write_runs(tmp_path / "in", factors)), "--store", str(store)]) == 0
    )
    monkeypatch.setattr(report, "HTML_MAX_SERIES", 5)
    page = tmp_path / "d.html"
    assert main(["report", "--store", str(store), "--html", str(page)]) == 0
    text = page.read_text()
    data = json_module.loads(text.split('type="application/json">')[1].split("</script>")[0])
    assert len(data["series"]) == 5
    assert any(series["changes"] for series in data["series"])  # the stepped case is drawn
    assert "22 more series are not drawn" in text


def test_a_full_disk_while_the_summarizer_writes_keeps_the_old_report(
    workspace, capsys, monkeypatch
):
    report = workspace / "s.md"
    report.write_text("the previous report")

    def full(descriptor):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    assert summarize([str(workspace / "in.csv"), "--output", str(report)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err
    assert report.read_text() == "the previous report"
    assert no_temporary_files(workspace) == []
