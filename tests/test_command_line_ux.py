"""What a user meets on the command line: program names, --version, bench_all's --list."""

from __future__ import annotations

import dataclasses
import fcntl
import gc
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import fake_bench_script
import pytest
from test_bench_all import run

from fi_attn_bench import VERSION_TEXT
from fi_attn_bench.device import peaks, peaks_command_line
from fi_attn_bench.results.schema import HARNESS_VERSION

ROOT = Path(__file__).resolve().parent.parent
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)  # Linux
FAST = ["--max-time-per-case", "0.05", "--min-samples", "3"]


def test_bench_all_usage_errors_name_bench_all(capsys):
    assert run(["--preset", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: bench_all.py") and "bench_all.py: error:" in err
    assert "fake_bench_script" not in err and err.count("error:") == 1


@pytest.mark.parametrize(
    "main",
    [lambda argv: run(argv), fake_bench_script.main],
    ids=["bench_all", "script"],
)
def test_version_on_the_benchmark_commands(main, capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"fi-attn-bench {HARNESS_VERSION}" == VERSION_TEXT


def test_version_and_program_name_of_the_peaks_command():
    command = [sys.executable, "-m", "fi_attn_bench.device.peaks"]
    shown = subprocess.run([*command, "--version"], capture_output=True, text=True, check=False)
    assert (shown.returncode, shown.stdout.strip()) == (0, VERSION_TEXT)
    bad = subprocess.run([*command, "--reps", "x"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("usage: python -m fi_attn_bench.device.peaks")
    assert peaks_command_line.program_name("/usr/bin/fi-attn-peaks") == "fi-attn-peaks"


def test_bench_all_list_leaves_out_what_the_run_leaves_out(tmp_path, capsys):
    argv = ["--preset", "smoke", "--filter", "batch_size=3", "--output-dir", str(tmp_path)]
    assert run([*argv, "--list"]) == 0
    listed = capsys.readouterr()
    assert "OtherFakeWrapper: preset smoke, 1 case\n" in listed.out
    assert "FakeAttentionWrapper" not in listed.out
    assert "fake_bench_script.py: no case matches --filter; left out" in listed.err
    assert list(tmp_path.iterdir()) == []
    assert run([*argv, *FAST]) == 0  # the run does what --list said
    assert [p.name.split("_")[0] for p in tmp_path.glob("*.csv")] == ["OtherFakeWrapper"]


def test_bench_all_prints_the_backend_note_once(tmp_path, capsys):
    assert run(["--preset", "smoke", "--output-dir", str(tmp_path), *FAST]) == 0
    err = capsys.readouterr().err
    note = [line for line in err.splitlines() if "reference backend" in line]
    assert len(note) == 1, err


def test_cpu_budget_per_case_is_short_unless_given():
    import torch

    from fi_attn_bench import command_line
    from fi_attn_bench.sweep import run_options

    parser = command_line.build_parser(fake_bench_script.SPEC)
    default, given = parser.parse_args([]), parser.parse_args(["--max-time-per-case", "3"])
    budget = run_options._timing_options
    assert budget(default, torch.device("cpu")).max_time_s == run_options.CPU_MAX_TIME_S == 0.2
    assert budget(default, torch.device("cuda")).max_time_s == 2.0
    assert budget(given, torch.device("cpu")).max_time_s == 3.0


def test_a_listing_cut_short_by_its_reader_exits_quietly():
    """``--list | head -1``: the reader closes the pipe after one line. The pipe is shrunk to one
    page before the listing starts, so the ~55 kB listing is still being written then."""
    command = [sys.executable, "bench_all.py", "--list", "--preset", "full", "--device", "cpu"]
    with subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0
    ) as process:
        fcntl.fcntl(process.stdout.fileno(), F_SETPIPE_SZ, 4096)
        first = process.stdout.readline()
        process.stdout.close()
        err = process.stderr.read().decode()
        process.wait(timeout=60)
    assert first.startswith(b"BatchDecodeWithPagedKVCacheWrapper: preset full")
    assert (process.returncode, err) == (0, "")


def _console(name: str) -> str:
    """The console script pip installed beside this interpreter."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (pip install -e .)")
    return str(path)


def test_doctor_prints_its_version():
    shown = subprocess.run(
        [sys.executable, "-m", "fi_attn_bench.doctor", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (shown.returncode, shown.stdout.strip()) == (0, VERSION_TEXT), shown.stderr


def test_console_scripts_name_themselves_in_usage_and_errors(tmp_path):
    decode = _console("fi-attn-bench-decode")
    bad = subprocess.run([decode, "--preset", "nope"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2
    assert bad.stderr.startswith("usage: fi-attn-bench-decode ")
    assert (
        "fi-attn-bench-decode: error:" in bad.stderr and "bench_batch_decode.py" not in bad.stderr
    )
    suite = subprocess.run(
        [_console("fi-attn-bench-all"), "--preset", "nope"], capture_output=True, text=True
    )
    assert suite.returncode == 2 and suite.stderr.startswith("usage: fi-attn-bench-all ")
    assert "fi-attn-bench-all: error:" in suite.stderr and "bench_all.py" not in suite.stderr
    peaks_run = subprocess.run(
        [_console("fi-attn-peaks"), "--device", "cuda:0"],
        capture_output=True,
        text=True,
        check=False,
        env={"CUDA_VISIBLE_DEVICES": "", "PATH": "/usr/bin:/bin"},
    )
    assert peaks_run.returncode == 2
    assert peaks_run.stderr.startswith("fi-attn-peaks: error: no GPU visible"), peaks_run.stderr


def test_program_names_follow_what_was_run():
    from fi_attn_bench.program import program_name

    assert program_name("bench_batch_decode.py", "/venv/bin/fi-attn-bench-decode") == (
        "fi-attn-bench-decode"
    )
    assert program_name("bench_batch_decode.py", "../main/bench_batch_decode.py") == (
        "bench_batch_decode.py"
    )
    assert program_name("bench_all.py", "/usr/lib/pytest/__main__.py") == "bench_all.py"
    assert peaks_command_line.program_name("/x/peaks.py") == "python -m fi_attn_bench.device.peaks"
    assert "device_peaks.py" not in peaks.published_table_markdown()
    assert "fi-attn-peaks --save" in peaks.published_table_markdown()


def test_resume_command_works_from_another_directory(tmp_path, monkeypatch):
    """``python ../main/bench_batch_decode.py`` run elsewhere: the printed command names the
    script so that it runs from where the user is."""
    import bench_batch_decode
    from fi_attn_bench.sweep.run_options import resume_command

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    typed = os.path.relpath(ROOT / "bench_batch_decode.py")
    options = _decode_options(bench_batch_decode.SPEC, "results/x.csv")
    for argv0 in (typed, "/venv/lib/pytest/__main__.py"):
        monkeypatch.setattr(sys, "argv", [argv0])
        words = shlex.split(resume_command(bench_batch_decode.SPEC, options))
        assert words[0] == "python" and words[2:4] == ["--resume", "results/x.csv"]
        assert os.path.samefile(words[1], ROOT / "bench_batch_decode.py"), words
    monkeypatch.setattr(sys, "argv", ["/venv/bin/fi-attn-bench-decode"])
    words = shlex.split(resume_command(bench_batch_decode.SPEC, options))
    assert words[:3] == ["fi-attn-bench-decode", "--resume", "results/x.csv"]


def _decode_options(spec, output: str):
    import torch

    from fi_attn_bench import command_line
    from fi_attn_bench.backends.choice import ImplKindChoice
    from fi_attn_bench.sweep.run_options import resolve_options

    args = command_line.build_parser(spec).parse_args(["--device", "cpu"])
    options = resolve_options(
        spec, args, ImplKindChoice("torch", torch.device("cpu")), listing=True
    )
    return dataclasses.replace(options, output=output)


def test_counts_of_one_are_singular(tmp_path, capsys):
    """No '1 cases': the sweep's header and its resume line."""
    one = ["--preset", "smoke", "--filter", "batch_size=2", *FAST]
    out = tmp_path / "one.csv"
    assert fake_bench_script.main([*one, "--output", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "FakeAttentionWrapper: 1 case (preset smoke)" in printed
    assert fake_bench_script.main([*one, "--resume", str(out)]) == 0
    assert "1 of 1 case already ok" in capsys.readouterr().out
    assert "1 cases" not in printed and "case(s)" not in printed


def test_counted_words():
    from fi_attn_bench.wording import counted

    assert [counted(n, "case") for n in (0, 1, 2)] == ["0 cases", "1 case", "2 cases"]
    assert counted(1, "GPU") == "1 GPU" and counted(3, "GPU") == "3 GPUs"


def console_scripts() -> dict[str, str]:
    """pyproject.toml's [project.scripts]: name -> "module:function"."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8")
    table = text.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.]+:\w+)"', table, flags=re.M))


def exit_code_of(entry) -> int:
    """What ``sys.exit(entry())`` (a console script's wrapper) exits with."""
    try:
        code = entry()
    except SystemExit as stop:
        code = stop.code
    return 0 if code is None else code


def test_every_console_script_answers_version_under_its_own_name(monkeypatch, capsys):
    """Each entry point as its console script calls it, in this process: ten interpreters
    importing torch cost ~20 s of a loaded 2-core runner for the same calls."""
    scripts = console_scripts()
    assert len(scripts) >= 9 and "fi-attn-history" in scripts
    # The summarizer's process settings (gc off, one BLAS thread) stay in this test.
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", os.environ.get("OPENBLAS_NUM_THREADS", "1"))
    collecting = gc.isenabled()
    try:
        for name, target in scripts.items():
            module, function = target.split(":")
            entry = getattr(importlib.import_module(module), function)
            monkeypatch.setattr(sys, "argv", [name, "--version"])
            code = exit_code_of(entry)
            shown = capsys.readouterr()
            assert (code, shown.out.strip()) == (0, VERSION_TEXT), (name, shown.err)
    finally:
        if collecting:
            gc.enable()
