"""The CI example, docs/ci/attention-bench.yml, works as written.

Every project program its ``run:`` steps call (``python X.py``, ``python -m module``, a console
script) exists, and every ``--option`` they pass is one of that program's argparse options, as
the project's ``build_parser`` functions define them. The baseline comes from the main branch's
artifact, not from a folder in git, and nothing the workflow needs is git-ignored.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass

import pytest
import yaml

from fi_attn_bench import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKFLOW = "docs/ci/attention-bench.yml"
INSTALLED_AS = ".github/workflows/attention-bench.yml"  # where docs/CI.md says to copy it
SHELL_OPERATORS = re.compile(r"&&|\|\||;|\|(?!\|)")


@dataclass(frozen=True)
class Command:
    """One project program call of a run step: its program and its words after the program."""

    program: str  # what the step runs: "summarize_results.py", "-m fi_attn_bench.doctor", a script
    module: str  # the module whose main() runs
    words: tuple[str, ...]


def load_workflow(path: str = WORKFLOW) -> dict:
    with open(os.path.join(ROOT, path), encoding="utf-8") as handle:
        workflow = yaml.safe_load(handle)
    if True in workflow:  # YAML 1.1 reads the key `on` as the boolean true
        workflow["on"] = workflow.pop(True)
    return workflow


def steps(workflow: dict) -> list[dict]:
    return [step for job in workflow["jobs"].values() for step in job["steps"]]


def console_scripts() -> dict[str, str]:
    """Console script name -> module, as pip installed them from pyproject.toml."""
    entry_points = importlib.metadata.distribution("fi-attn-bench").entry_points
    return {e.name: e.value.split(":")[0] for e in entry_points if e.group == "console_scripts"}


def shell_commands(script: str) -> list[list[str]]:
    """The simple commands of a run step's shell script, each split into words."""
    joined = re.sub(r"\\\n\s*", " ", script)
    commands = []
    for line in joined.splitlines():
        for part in SHELL_OPERATORS.split(line):
            words = shlex.split(part, comments=True)
            while words and words[0] in ("do", "then", "else", "if", "!"):
                words = words[1:]
            if words:
                commands.append(words)
    return commands


def project_command(words: list[str], scripts: dict[str, str]) -> Command | None:
    """The project program a command calls, or None for other tools (cat, [, ...)."""
    if words[0] in ("python", "python3"):
        if words[1] == "-m" and words[2] != "pip":
            return Command(f"-m {words[2]}", words[2], tuple(words[3:]))
        if words[1].endswith(".py"):
            return Command(words[1], words[1][:-3].replace("/", "."), tuple(words[2:]))
        return None
    if words[0] in scripts:
        return Command(words[0], scripts[words[0]], tuple(words[1:]))
    if words[0].startswith("fi-attn"):
        return Command(words[0], "", tuple(words[1:]))  # a console script that does not exist
    return None


def parsers_of(module_name: str) -> list[argparse.ArgumentParser]:
    """Every parser a program's command line is read with (bench_all.py: its own and the
    scripts')."""
    module = importlib.import_module(module_name)
    home = importlib.import_module(module.main.__module__) if hasattr(module, "main") else module
    parsers = []
    for candidate in {module, home}:
        if hasattr(candidate, "build_parser"):
            parsers.append(candidate.build_parser())
        if hasattr(candidate, "SPEC"):
            parsers.append(cli.build_parser(candidate.SPEC))
        if hasattr(candidate, "load_specs"):
            parsers += [cli.build_parser(spec) for spec in candidate.load_specs()]
    return parsers


def problems_of(command: Command) -> list[str]:
    """Why a project command would not run as written (empty: it would)."""
    if command.program.endswith(".py") and not os.path.isfile(os.path.join(ROOT, command.program)):
        return [f"{command.program}: no such file"]
    if not command.module:
        return [f"{command.program}: not a console script of fi-attn-bench"]
    try:
        parsers = parsers_of(command.module)
    except ImportError as error:
        return [f"{command.program}: cannot import {command.module}: {error}"]
    if not parsers:
        return [f"{command.program}: no build_parser found in {command.module}"]
    known = {option for parser in parsers for option in parser._option_string_actions}
    options = [word.split("=")[0] for word in command.words if word.startswith("--")]
    return [
        f"{command.program}: unknown option {option}" for option in options if option not in known
    ]


def workflow_commands(workflow: dict) -> list[Command]:
    scripts = console_scripts()
    found = []
    for step in steps(workflow):
        for words in shell_commands(step.get("run", "")):
            command = project_command(words, scripts)
            if command is not None:
                found.append(command)
    return found


def option_value(command: Command, option: str) -> str:
    words = list(command.words)
    return words[words.index(option) + 1]


def only(commands: list[Command], program: str) -> Command:
    matching = [command for command in commands if command.program == program]
    assert len(matching) == 1, f"expected one {program} command, got {matching}"
    return matching[0]


def uses(workflow: dict, action: str) -> list[dict]:
    return [step for step in steps(workflow) if step.get("uses", "").startswith(action + "@")]


def test_every_program_and_option_the_workflow_runs_exists():
    commands = workflow_commands(load_workflow())
    assert {c.program for c in commands} >= {
        "bench_all.py",
        "summarize_results.py",
        "fi-attn-bench-doctor",
    }
    problems = [problem for command in commands for problem in problems_of(command)]
    assert problems == []


def test_the_check_finds_a_missing_option_script_or_console_script():
    scripts = console_scripts()
    bad = [
        "python summarize_results.py --baseline b --candidate c --fail-on-regresion 5",
        "python bench_all.py --output-dir out --no-such-flag",
        "python no_such_script.py --help",
        "fi-attn-no-such-tool --output-dir doctor",
    ]
    found = [project_command(shell_commands(line)[0], scripts) for line in bad]
    assert [problems_of(command) for command in found] == [
        ["summarize_results.py: unknown option --fail-on-regresion"],
        ["bench_all.py: unknown option --no-such-flag"],
        ["no_such_script.py: no such file"],
        ["fi-attn-no-such-tool: not a console script of fi-attn-bench"],
    ]
    # bench_all.py takes the scripts' options too; a console script maps to its module
    good = "fi-attn-bench-all --output-dir o --samples-dir o --preset smoke || [ $? -eq 1 ]"
    assert problems_of(project_command(shell_commands(good)[0], scripts)) == []


def test_shell_commands_split_continuations_and_operators():
    script = 'python a.py --x 1 \\\n  --y 2 || [ $? -eq 1 ]\nfor r in a b; do cat "$r"; done\n'
    assert shell_commands(script) == [
        ["python", "a.py", "--x", "1", "--y", "2"],
        ["[", "$?", "-eq", "1", "]"],
        ["for", "r", "in", "a", "b"],
        ["cat", "$r"],
        ["done"],
    ]


def test_main_keeps_its_results_as_an_artifact_and_pull_requests_compare_against_it():
    workflow = load_workflow()
    assert "main" in workflow["on"]["push"]["branches"]
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"]["actions"] == "read"
    for job in workflow["jobs"].values():
        assert "self-hosted" in job["runs-on"]

    commands = workflow_commands(workflow)
    results = option_value(only(commands, "bench_all.py"), "--output-dir")
    compare = next(c for c in commands if "--baseline" in c.words)

    (upload,) = [s for s in uses(workflow, "actions/upload-artifact") if "push" in s["if"]]
    (download,) = uses(workflow, "dawidd6/action-download-artifact")
    assert "pull_request" in download["if"] and "pull_request" in compare_step(workflow)["if"]
    assert upload["with"]["path"].rstrip("/") == results
    assert download["with"]["name"] == upload["with"]["name"]
    assert download["with"]["branch"] == "main"
    assert download["with"]["workflow"] == os.path.basename(INSTALLED_AS)

    assert option_value(compare, "--baseline") == download["with"]["path"]
    assert option_value(compare, "--candidate") == results
    assert float(option_value(compare, "--fail-on-regression")) > 0
    report = option_value(compare, "--output")
    assert any(
        report in step.get("run", "") and "GITHUB_STEP_SUMMARY" in step["run"]
        for step in steps(workflow)
    )


def compare_step(workflow: dict) -> dict:
    (step,) = [s for s in steps(workflow) if "--baseline" in s.get("run", "")]
    return step


def test_nothing_the_workflow_needs_is_git_ignored():
    if shutil.which("git") is None:
        pytest.fail("this test needs git")
    needed = [WORKFLOW, INSTALLED_AS, "pyproject.toml"]
    needed += [c.program for c in workflow_commands(load_workflow()) if c.program.endswith(".py")]
    ignored = [
        path
        for path in needed
        if subprocess.run(
            ["git", "-C", ROOT, "check-ignore", "--no-index", "-q", path], check=False
        ).returncode
        == 0
    ]
    assert ignored == []


def test_the_guides_point_to_the_workflow():
    for page in ("README.md", "docs/CI.md"):
        with open(os.path.join(ROOT, page), encoding="utf-8") as handle:
            assert "ci/attention-bench.yml" in handle.read(), page
