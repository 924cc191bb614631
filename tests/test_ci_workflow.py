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

from fi_attn_bench import command_line

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
    """Console script name -> module, as pip installed them, and as this checkout's
    pyproject.toml declares them (a shared environment may hold another checkout's install)."""
    entry_points = importlib.metadata.distribution("fi-attn-bench").entry_points
    found = {e.name: e.value.split(":")[0] for e in entry_points if e.group == "console_scripts"}
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as handle:
        section = handle.read().partition("[project.scripts]")[2].partition("\n[")[0]
    found.update(re.findall(r'^([\w-]+) = "([\w.]+):\w+"$', section, flags=re.MULTILINE))
    return found


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
    scripts'); a program module ``x`` whose parser lives apart reads it from ``x_command_line``."""
    module = importlib.import_module(module_name)
    home = importlib.import_module(module.main.__module__) if hasattr(module, "main") else module
    own_parsers = [own for own in map(command_line_module_of, (module, home)) if own is not None]
    parsers = []
    for candidate in {module, home, *own_parsers}:
        if hasattr(candidate, "build_parser"):
            parsers.append(candidate.build_parser())
        if hasattr(candidate, "SPEC"):
            parsers.append(command_line.build_parser(candidate.SPEC))
        if hasattr(candidate, "load_specs"):
            parsers += [command_line.build_parser(spec) for spec in candidate.load_specs()]
    return parsers


def command_line_module_of(module):
    try:
        return importlib.import_module(f"{module.__name__}_command_line")
    except ModuleNotFoundError:
        return None


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
    words = list(command.words)
    chosen = [subcommand_parser(parser, words) for parser in parsers]
    if words and all(parser is None for parser in chosen):
        return [f"{command.program}: unknown subcommand {words[0]}"]
    parsers = [parser for parser in chosen if parser is not None]
    known = {option for parser in parsers for option in parser._option_string_actions}
    options = [word.split("=")[0] for word in command.words if word.startswith("--")]
    return [
        f"{command.program}: unknown option {option}" for option in options if option not in known
    ]


def subcommand_parser(
    parser: argparse.ArgumentParser, words: list[str]
) -> argparse.ArgumentParser | None:
    """The parser that reads ``words``: a subcommand's (fi-attn-history add), the parser itself
    where it has no subcommands, None where words[0] is no subcommand of it."""
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subparsers:
        return parser
    return subparsers[0].choices.get(words[0]) if words else None


def step_commands(step: dict) -> list[Command]:
    scripts = console_scripts()
    found = []
    for words in shell_commands(step.get("run", "")):
        command = project_command(words, scripts)
        if command is not None:
            found.append(command)
    return found


def workflow_commands(workflow: dict) -> list[Command]:
    return [command for step in steps(workflow) for command in step_commands(step)]


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
        "fi-attn-history",
        "fi-attn-pr-verdict",
    }
    assert {c.words[0] for c in commands if c.program == "fi-attn-history"} == {
        "add",
        "report",
        "baseline",
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
        "fi-attn-history baseline --branch main --outdir b",
        "fi-attn-history compare --branch main",
    ]
    found = [project_command(shell_commands(line)[0], scripts) for line in bad]
    assert [problems_of(command) for command in found] == [
        ["summarize_results.py: unknown option --fail-on-regresion"],
        ["bench_all.py: unknown option --no-such-flag"],
        ["no_such_script.py: no such file"],
        ["fi-attn-no-such-tool: not a console script of fi-attn-bench"],
        ["fi-attn-history: unknown option --outdir"],
        ["fi-attn-history: unknown subcommand compare"],
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


def test_main_keeps_its_history_as_an_artifact_and_pull_requests_compare_against_it():
    workflow = load_workflow()
    assert "main" in workflow["on"]["push"]["branches"]
    assert "pull_request" in workflow["on"]
    assert workflow["permissions"]["actions"] == "read"
    for job in workflow["jobs"].values():
        assert "self-hosted" in job["runs-on"]

    commands = workflow_commands(workflow)
    results = option_value(only(commands, "bench_all.py"), "--output-dir")
    history = {c.words[0]: c for c in commands if c.program == "fi-attn-history"}
    (download,) = uses(workflow, "dawidd6/action-download-artifact")
    (upload,) = [s for s in uses(workflow, "actions/upload-artifact") if "push" in s["if"]]
    kept = download["with"]["path"]
    assert "if" not in download  # both events need the store; the first main run starts it
    assert download["with"]["if_no_artifact_found"] == "warn"
    assert download["with"]["name"] == upload["with"]["name"]
    assert download["with"]["branch"] == "main"
    assert download["with"]["workflow"] == os.path.basename(INSTALLED_AS)
    assert upload["with"]["path"].rstrip("/") == kept

    # main: its run goes into the store, and the dashboard is kept beside it
    add = history["add"]
    assert "push" in step_of(workflow, add)["if"]
    assert add.words[1] == results and option_value(add, "--branch") == "main"
    store = option_value(add, "--store")
    assert os.path.dirname(store) == kept
    report = history["report"]
    assert option_value(report, "--store") == store
    assert os.path.dirname(option_value(report, "--html")) == kept

    # pull request: main's baseline from the store, compared against this run
    baseline = history["baseline"]
    compare = next(c for c in commands if "--baseline" in c.words)
    assert step_of(workflow, baseline) is step_of(workflow, compare)
    assert "pull_request" in step_of(workflow, compare)["if"]
    assert option_value(baseline, "--store") == store
    assert option_value(baseline, "--branch") == "main"
    assert option_value(compare, "--baseline") == option_value(baseline, "--out")
    assert option_value(compare, "--candidate") == results
    samples = option_value(compare, "--baseline-samples")
    assert os.path.dirname(samples) == kept and samples in step_of(workflow, add)["run"]
    assert float(option_value(compare, "--fail-on-regression")) > 0
    assert option_value(compare, "--noise-from") == store  # main's run-to-run noise per case

    # both Markdown reports reach the job's step summary
    for written in (option_value(compare, "--output"), option_value(report, "--md")):
        assert any(
            written in step.get("run", "") and "GITHUB_STEP_SUMMARY" in step["run"]
            for step in steps(workflow)
        ), written


def test_the_pull_request_gets_the_verdict_of_the_compare_step():
    """After the compare (also when it failed), fi-attn-pr-verdict reads its JSON with the job's
    token, which may write the comment and the commit status."""
    workflow = load_workflow()
    commands = workflow_commands(workflow)
    compare = next(c for c in commands if "--baseline" in c.words)
    verdict = only(commands, "fi-attn-pr-verdict")
    step = step_of(workflow, verdict)
    assert verdict.words[0] == option_value(compare, "--json")
    assert "always()" in step["if"] and "pull_request" in step["if"]
    assert step["env"]["GITHUB_TOKEN"] == "${{ github.token }}"
    assert workflow["permissions"]["pull-requests"] == "write"
    assert workflow["permissions"]["statuses"] == "write"
    order = steps(workflow)
    assert order.index(step) > order.index(step_of(workflow, compare))


def step_of(workflow: dict, command: Command) -> dict:
    (step,) = [s for s in steps(workflow) if command in step_commands(s)]
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


def test_the_ci_guide_names_what_the_workflow_makes_and_runs():
    """docs/CI.md once described an artifact the workflow had stopped making."""
    with open(os.path.join(ROOT, "docs/CI.md"), encoding="utf-8") as handle:
        guide = handle.read()
    workflow = load_workflow()
    made = {step["with"]["name"] for step in uses(workflow, "actions/upload-artifact")}
    named = set(re.findall(r"attention-bench-[a-z]+\b(?!\.)", guide))
    assert named and named <= made, named - made
    runs = {c.words[0] for c in workflow_commands(workflow) if c.program == "fi-attn-history"}
    described = set(re.findall(r"fi-attn-history (\w+)", guide))
    assert described and described <= runs, described - runs


def test_mains_history_gives_a_pull_request_a_baseline_of_every_api_the_sweep_ran(
    tmp_path, monkeypatch, capsys
):
    """The workflow's path on the CPU: main's bench_all runs (one CSV per API) into the store,
    then a pull request's run against ``baseline --branch main --median-of 3``.  Each program's
    ``main`` runs in this process, in the folder the workflow would run it in (seven
    interpreters importing torch cost ~20 s of a loaded 2-core runner for the same calls)."""
    from fi_attn_bench import suite
    from fi_attn_bench.history import command_line as history
    from fi_attn_bench.summarizer import command_line as summarizer

    sweep = ["--scripts", "bench_batch_decode", "bench_batch_prefill_paged"]
    sweep += ["--device", "cpu", "--backend", "torch", "--preset", "cpu", "--filter"]
    sweep += ["batch_size=1", "--min-time-ms", "10"]
    store = str(tmp_path / "history" / "fi-attn-history.sqlite")
    monkeypatch.chdir(tmp_path)

    def run(main, *argv: str) -> str:
        code = main(list(argv))
        shown = capsys.readouterr()
        assert code == 0, shown.out + shown.err
        return shown.out

    for main_run in ("main-1", "main-2"):
        run(suite.main, *sweep, "--output-dir", main_run)
        run(history.main, "add", main_run, "--store", store, "--branch", "main")
    run(suite.main, *sweep, "--output-dir", "pr-results")
    median = ("--median-of", "3", "--store", store, "--out", "baseline")
    run(history.main, "baseline", "--branch", "main", *median)
    assert len(list((tmp_path / "baseline").glob("*.csv"))) == 2  # decode and paged prefill
    compared = run(
        summarizer.main, "--baseline", "baseline", "--candidate", "pr-results", "--noise-from",
        store, "--output", "regression.md", "--json", "regression.json",
    )  # fmt: skip
    assert "missing" not in compared.lower()
    report = (tmp_path / "regression.json").read_text()
    for api in ("BatchDecodeWithPagedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper"):
        assert api in report
