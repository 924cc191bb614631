"""bench_all.py --resume DIR finishes an interrupted run as a whole."""

from __future__ import annotations

import dataclasses
import json
import shlex

from test_bench_all import FAST, FIRST, SECOND, run

from fi_attn_bench.cases.spec import BenchmarkSpec
from fi_attn_bench.results.reader import read_stored_rows


def interrupted_at(spec: BenchmarkSpec, batch_size: int) -> BenchmarkSpec:
    """``spec`` whose case of ``batch_size`` is interrupted by Ctrl-C while it is prepared."""

    def prepare(case, settings, inputs=None):
        if case["batch_size"] == batch_size:
            raise KeyboardInterrupt
        return spec.prepare(case, settings, inputs)

    return dataclasses.replace(spec, prepare=prepare)


def statuses(directory) -> dict[str, list[str]]:
    found = {}
    for path in sorted(directory.glob("*.csv")):
        rows = read_stored_rows(path).rows
        found[rows[0]["api"]] = sorted(row["status"] for row in rows)
    return found


def test_resume_dir_finishes_started_scripts_and_runs_the_others(tmp_path, capsys):
    argv = ["--output-dir", str(tmp_path), *FAST, "--filter", "batch_size<=2"]
    assert run(argv, specs=(interrupted_at(FIRST, 2), SECOND)) == 130
    out = capsys.readouterr().out
    hint = out.splitlines()[
        out.splitlines().index(f"Results saved to {_csv(tmp_path)}; continue with:") + 1
    ]
    words = shlex.split(hint)
    assert words == ["python", "bench_all.py", "--resume", str(tmp_path)]
    assert statuses(tmp_path) == {"FakeAttentionWrapper": ["ok"]}  # the second never started

    assert run(words[2:]) == 0  # the hint, as printed (FIRST and SECOND are the specs)
    assert statuses(tmp_path) == {
        "FakeAttentionWrapper": ["ok", "ok"],
        "OtherFakeWrapper": ["ok", "ok"],  # its filter came from the record, too
    }
    record = json.loads((tmp_path / "bench_all.json").read_text())
    assert record["scripts"] == [FIRST.script, SECOND.script]
    assert [request["filter"] for request in record["requests"]] == [["batch_size<=2"]] * 2
    assert "argv" not in record


def test_resume_follows_the_recorded_request_not_a_command_line(tmp_path):
    argv = ["--output-dir", str(tmp_path), *FAST, "--filter", "batch_size<=2"]
    assert run(argv, specs=(interrupted_at(FIRST, 2), SECOND)) == 130
    path = tmp_path / "bench_all.json"
    record = json.loads(path.read_text())
    record["requests"][1]["filter"] = ["batch_size<=1"]  # the unstarted script's, only here
    path.write_text(json.dumps(record))

    assert run(["--resume", str(tmp_path)]) == 0
    assert statuses(tmp_path) == {
        "FakeAttentionWrapper": ["ok", "ok"],
        "OtherFakeWrapper": ["ok"],
    }


def test_resume_reads_an_older_record_of_argv(tmp_path):
    argv = ["--output-dir", str(tmp_path), *FAST, "--filter", "batch_size<=2"]
    assert run(argv, specs=(interrupted_at(FIRST, 2), SECOND)) == 130
    path = tmp_path / "bench_all.json"
    record = json.loads(path.read_text())
    del record["requests"]
    record["argv"] = [*FAST, "--filter", "batch_size<=2"]  # as records used to hold
    path.write_text(json.dumps(record))

    assert run(["--resume", str(tmp_path)]) == 0
    assert statuses(tmp_path) == {
        "FakeAttentionWrapper": ["ok", "ok"],
        "OtherFakeWrapper": ["ok", "ok"],
    }


def test_resume_refuses_a_record_of_unknown_request_fields(tmp_path, capsys):
    argv = ["--output-dir", str(tmp_path), *FAST]
    assert run(argv, specs=(interrupted_at(FIRST, 2), SECOND)) == 130
    path = tmp_path / "bench_all.json"
    record = json.loads(path.read_text())
    record["requests"][0]["no_such_option"] = 1
    path.write_text(json.dumps(record))
    capsys.readouterr()

    assert run(["--resume", str(tmp_path)]) == 2
    assert "unreadable bench_all.json" in capsys.readouterr().err


def _csv(directory) -> str:
    (path,) = directory.glob("FakeAttentionWrapper_*.csv")
    return str(path)


def test_resume_dir_takes_no_other_option(tmp_path, capsys):
    assert run(["--output-dir", str(tmp_path), *FAST]) == 0
    capsys.readouterr()
    assert run(["--resume", str(tmp_path), "--preset", "default"]) == 2
    assert "give no other option but --verbose" in capsys.readouterr().err
    assert run(["--resume", str(tmp_path), "--verbose"]) == 0  # all done already


def test_resume_dir_without_a_record_exits_2(tmp_path, capsys):
    assert run(["--resume", str(tmp_path)]) == 2
    assert "no bench_all.json there" in capsys.readouterr().err


def test_a_second_run_after_a_finished_one_moves_its_record_aside(tmp_path, capsys):
    """README's examples run twice in a row: a finished run leaves nothing to resume."""
    argv = ["--output-dir", str(tmp_path), *FAST]
    assert run(argv) == 0
    assert json.loads((tmp_path / "bench_all.json").read_text())["finished"] is True
    capsys.readouterr()
    assert run(argv) == 0
    (moved,) = tmp_path.glob("bench_all.json.bak-*")
    assert f"Moved the earlier run's bench_all.json aside to {moved}" in capsys.readouterr().out
    assert len(list(tmp_path.glob("*.csv"))) == 4  # both runs' CSVs are kept


def test_a_second_run_into_an_interrupted_one_is_refused_unless_forced(tmp_path, capsys):
    argv = ["--output-dir", str(tmp_path), *FAST, "--filter", "batch_size<=2"]
    assert run(argv, specs=(interrupted_at(FIRST, 2), SECOND)) == 130
    assert json.loads((tmp_path / "bench_all.json").read_text())["finished"] is False
    capsys.readouterr()
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert (
        "holds an unfinished bench_all.py run" in err and f"--resume {tmp_path} finishes it" in err
    )
    assert len(list(tmp_path.glob("*.csv"))) == 1 and not list(tmp_path.glob("*.bak-*"))
    assert run([*argv, "--force"]) == 0
    assert len(list(tmp_path.glob("bench_all.json.bak-*"))) == 1
