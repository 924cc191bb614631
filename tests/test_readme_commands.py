"""README's quick starts (English and Chinese) run as written, on the CPU, in a fresh copy of
the repository.

Rules, so that a README edit knows what is run:

- The fenced ``bash`` blocks of the sections "## Quick start" and "## 中文快速上手" are read; a
  line ending in ``\\`` continues on the next; each line is split at ``&&`` into commands.
- Not run: ``python3 -m venv``, ``. .venv/bin/activate`` and ``pip install`` (this test runs
  with the interpreter it was started with, which has the package's dependencies), ``python -m
  pytest`` (the suite this test is part of), and any line carrying a ``# GPU`` comment.
- ``python`` and ``python3`` are this interpreter.  The commands of one section run in order
  in one copy of the tracked files, made a git checkout as a fresh clone is.
- Each section runs twice in a row in the same copy, as a user reruns it, and every command
  must exit 0 both times: the regression gate too (two CPU runs of unchanged code must not be
  called a regression), and a summary of a folder that now holds two runs reads the newer one.
- Afterwards ``git status`` is clean: ``.gitignore`` covers everything the commands created.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SECTIONS = ("## Quick start", "## 中文快速上手")
NOT_RUN = re.compile(r"^(python3? -m venv|\. \.venv/bin/activate|pip install|python3? -m pytest)")
GIT = [
    "git",
    "-c",
    "user.name=readme",
    "-c",
    "user.email=readme@test",
    "-c",
    "commit.gpgsign=false",
]


def section_text(readme: str, title: str) -> str:
    start = readme.index(title + "\n")
    end = readme.find("\n## ", start + len(title))
    return readme[start : end if end >= 0 else len(readme)]


def bash_commands(text: str) -> list[str]:
    """The commands of a section's bash blocks, in order, as the rules above read them."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip()
            if not line or line.startswith("#") or re.search(r"#\s*GPU\b", line):
                continue
            line = re.sub(r"\s+#.*$", "", line)  # a trailing comment
            for command in line.split("&&"):
                command = command.strip()
                if not NOT_RUN.match(command):
                    commands.append(command)
    return commands


def readme_sections() -> dict[str, list[str]]:
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as handle:
        readme = handle.read()
    return {title: bash_commands(section_text(readme, title)) for title in SECTIONS}


def fresh_copy(target: str) -> None:
    listed = subprocess.run(
        ["git", "-C", ROOT, "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = os.path.join(ROOT, name)
        if os.path.isfile(source):
            os.makedirs(os.path.dirname(os.path.join(target, name)), exist_ok=True)
            shutil.copy2(source, os.path.join(target, name))
    for words in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "fresh clone"]):
        subprocess.run([*GIT, "-C", target, *words], check=True, capture_output=True)


def run_section(commands: list[str], workdir: str, bindir: str) -> list[tuple[str, int, str]]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    results = []
    for command in commands:
        done = subprocess.run(
            ["bash", "-c", command], cwd=workdir, env=env, capture_output=True, text=True
        )
        results.append((command, done.returncode, done.stdout[-2000:] + done.stderr[-2000:]))
        if done.returncode != 0:
            break
    return results


def run_twice(commands: list[str], workdir: str, bindir: str) -> list[tuple[str, int, str]]:
    """The section as written, then again in the same folder; the second pass stops at the
    first failure of the first."""
    first = run_section(commands, workdir, bindir)
    if len(first) < len(commands) or first[-1][1] != 0:
        return first
    return first + run_section(commands, workdir, bindir)


def test_the_rules_find_the_commands_that_matter():
    sections = readme_sections()
    english, chinese = sections[SECTIONS[0]], sections[SECTIONS[1]]
    assert "python bench_batch_decode.py --output-dir results" in english
    assert any(c.startswith("python summarize_results.py results/*.csv") for c in english)
    assert not any(c.startswith(("pip", ". .venv")) for c in english + chinese)
    made = [c for c in chinese if c.startswith("python bench_all.py --output-dir")]
    assert {c.split()[-1] for c in made} == {"baseline", "candidate"}  # step 2 needs both
    assert any("--baseline baseline/*.csv --candidate candidate/*.csv" in c for c in chinese)


def test_readme_quick_starts_run_as_written(tmp_path):
    if shutil.which("git") is None or shutil.which("bash") is None:
        pytest.fail("this test needs git and bash")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name in ("python", "python3"):  # a wrapper, not a link: a venv is found by its path
        (bindir / name).write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        (bindir / name).chmod(0o755)
    sections = readme_sections()
    copies = {}
    for index, title in enumerate(SECTIONS):
        copies[title] = str(tmp_path / f"clone{index}")
        fresh_copy(copies[title])
    with ThreadPoolExecutor(len(SECTIONS)) as pool:  # the two sections are independent
        futures = {t: pool.submit(run_twice, sections[t], copies[t], str(bindir)) for t in SECTIONS}
        outcomes = {title: future.result() for title, future in futures.items()}
    for title, results in outcomes.items():
        for command, code, output in results:
            assert code == 0, f"{title}: {command!r} exited {code}\n{output}"
        assert len(results) == 2 * len(sections[title]), (title, results[-1])
    second_summary = outcomes[SECTIONS[0]][-1][2]
    assert "note: read the newest run" in second_summary, second_summary
    for title in SECTIONS:
        status = subprocess.run(
            ["git", "-C", copies[title], "status", "--porcelain"], capture_output=True, text=True
        ).stdout
        assert status == "", f"{title}: .gitignore misses what its commands created:\n{status}"
