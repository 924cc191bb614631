"""bench_all.py: several scripts' sweeps in one process, one timer, one CSV each."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import fake_bench_script
import pytest

from fi_attn_bench import suite as bench_all
from fi_attn_bench.apis import registry
from fi_attn_bench.backends import choice as backend_choice
from fi_attn_bench.results.reader import read_stored_rows
from fi_attn_bench.timing import timers

NO_GPU = backend_choice.Probe(
    cuda_available=lambda: False, import_flashinfer=lambda: SimpleNamespace(__version__="x")
)
FAST = ["--max-time-per-case", "0.05", "--min-samples", "3", "--preset", "smoke"]
FIRST = fake_bench_script.SPEC
SECOND = dataclasses.replace(
    FIRST,
    api="OtherFakeWrapper",
    script="tests/other_fake.py",
    case_fields=("batch_size", "seq_len", "heads"),
    presets={"smoke": tuple({"batch_size": b, "seq_len": 8, "heads": 2} for b in (1, 2, 3))},
)


def run(argv, *, specs=(FIRST, SECOND), made=None):
    def factory(options, device, log):
        if made is not None:
            made.append(device)
        return timers.make_timer(options, device, log)

    return bench_all.main(argv, probe=NO_GPU, timer_factory=factory, specs=specs)


def test_each_script_gets_its_csv_and_one_timer_serves_all(tmp_path, capsys):
    made = []
    assert run(["--output-dir", str(tmp_path), *FAST], made=made) == 0
    assert len(made) == 1
    csvs = sorted(tmp_path.glob("*.csv"))
    assert [p.name.split("_")[0] for p in csvs] == ["FakeAttentionWrapper", "OtherFakeWrapper"]
    assert [len(read_stored_rows(p).rows) for p in csvs] == [2, 3]
    out = capsys.readouterr().out
    assert out.index("FakeAttentionWrapper:") < out.index("OtherFakeWrapper:")


def test_a_failed_case_gives_exit_1_and_the_next_script_still_runs(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_BENCH_OOM", "2")
    assert run(["--output-dir", str(tmp_path), *FAST]) == 1
    statuses = [
        sorted(row["status"] for row in read_stored_rows(p).rows)
        for p in sorted(tmp_path.glob("*.csv"))
    ]
    assert statuses == [["failed", "ok"], ["failed", "ok", "ok"]]


@pytest.mark.parametrize("flag", ["--output"])
def test_one_csv_flags_are_refused_before_any_work(flag, tmp_path, capsys):
    made = []
    assert run([flag, str(tmp_path / "x.csv"), *FAST], made=made) == 2
    assert made == [] and list(tmp_path.iterdir()) == []
    assert f"not here: {flag}" in capsys.readouterr().err


def test_filter_on_a_field_one_script_lacks_leaves_that_script_out(tmp_path, capsys):
    assert run(["--output-dir", str(tmp_path), *FAST, "--filter", "heads=2"]) == 0
    assert [p.name.split("_")[0] for p in tmp_path.glob("*.csv")] == ["OtherFakeWrapper"]
    assert "tests/fake_bench_script.py: no field heads; left out" in capsys.readouterr().err


def test_filter_matching_no_case_of_a_script_leaves_it_out(tmp_path, capsys):
    assert run(["--output-dir", str(tmp_path), *FAST, "--filter", "batch_size=3"]) == 0
    assert [p.name.split("_")[0] for p in tmp_path.glob("*.csv")] == ["OtherFakeWrapper"]
    assert "fake_bench_script.py: no case matches --filter; left out" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("filter_text", "message"),
    [
        ("nosuch=1", "unknown filter field 'nosuch'; valid fields: batch_size, heads, seq_len"),
        ("batch_size=99", "no script has a case that matches --filter"),
        ("batch_size<<1", "malformed filter term"),
    ],
)
def test_bad_filters_exit_2_before_any_work(filter_text, message, tmp_path, capsys):
    made = []
    argv = ["--output-dir", str(tmp_path), *FAST, "--filter", filter_text]
    assert run(argv, made=made) == 2 and made == []
    assert message in capsys.readouterr().err and list(tmp_path.iterdir()) == []


def test_script_options_are_checked_like_the_scripts_do(capsys):
    assert run(["--dtype", "fp8"]) == 2  # argparse's own refusal, as for one script
    assert "unsupported dtype 'fp8'" in capsys.readouterr().err


def test_list_prints_every_chosen_script_and_runs_nothing(tmp_path, capsys):
    made = []
    assert run(["--list", "--preset", "smoke", "--output-dir", str(tmp_path)], made=made) == 0
    out = capsys.readouterr().out
    assert "FakeAttentionWrapper: preset smoke, 2 cases" in out
    assert "OtherFakeWrapper: preset smoke, 3 cases" in out
    assert made == [] and list(tmp_path.iterdir()) == []


def test_the_real_scripts_are_the_default_and_listable(capsys):
    assert [spec.script for spec in bench_all.load_specs()] == [
        f"{name}.py" for name in registry.script_names()
    ]
    assert bench_all.main(["--list", "--scripts", "bench_batch_mla", "--preset", "smoke"]) == 0
    assert capsys.readouterr().out.startswith("BatchMLAPagedAttentionWrapper: preset smoke")
