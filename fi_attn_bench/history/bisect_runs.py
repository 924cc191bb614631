"""One bisect run: COMMAND in a fresh process for one revision, its CSV read back through the
history reader, the case's time picked out, and the run added to the history store under the
revision it measured.

COMMAND learns where it runs from placeholders in its arguments and from the environment:
``{rev_dir}`` / ``$FI_ATTN_BISECT_REV_DIR`` (the worktree, or the virtual environment of a
wheel), ``{python}`` / ``$FI_ATTN_BISECT_PYTHON`` (the python to run: the venv's for a wheel),
``{output}`` / ``$FI_ATTN_BISECT_OUTPUT`` (the CSV it must write) and ``{rev}`` /
``$FI_ATTN_BISECT_REV`` (the commit hash or the wheel's path)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from fi_attn_bench.history.analysis import case_matches
from fi_attn_bench.history.bisect import CaseNotFound, ProbeFailed, Revision
from fi_attn_bench.history.bisect_sources import Checkout, one_line
from fi_attn_bench.history.reading import NotARunError, runs_in_file
from fi_attn_bench.results.run_store import CaseInfo, ParsedRun, RunStore, StoreError
from fi_attn_bench.results.schema import STATUS_OK

PLACEHOLDERS = ("rev_dir", "python", "output", "rev")
ENVIRONMENT_PREFIX = "FI_ATTN_BISECT_"


class Source(Protocol):
    def provide(self, revision: Revision) -> Checkout: ...

    def release(self, revision: Revision) -> None: ...


@dataclass(frozen=True)
class RunCommand:
    argv: tuple[str, ...]  # with placeholders
    timeout_s: float
    setup: str = ""  # a shell command run once per revision in its directory (a build)


@dataclass(frozen=True)
class RunRecord:
    """A finished run, for the progress line and the tests."""

    revision: Revision
    time_ms: float | None
    counted: bool  # False: the revision's first run (warm-up), stored but not compared
    failure: str = ""


def substitute(argument: str, values: dict[str, str]) -> str:
    """Only the exact ``{name}`` tokens: other braces (a python -c program) stay as written."""
    for name, value in values.items():
        argument = argument.replace("{" + name + "}", value)
    return argument


def matching_results(run: ParsedRun, terms: dict[str, str]) -> list:
    return [
        result
        for result in run.results
        if case_matches(
            CaseInfo(0, result.case_key, result.api, result.impl, json.loads(result.fields_json)),
            terms,
        )
    ]


def case_time(runs: Sequence[ParsedRun], terms: dict[str, str], case_text: str) -> float:
    """The one matching case's time; CaseNotFound for none or several, ProbeFailed when it
    failed."""
    found = [result for run in runs for result in matching_results(run, terms)]
    if not found:
        raise CaseNotFound(f"no case of the output matches --case {case_text!r}")
    if len(found) > 1:
        raise CaseNotFound(f"{len(found)} cases of the output match --case {case_text!r}; name one")
    result = found[0]
    if result.status != STATUS_OK or not result.time_ms or result.time_ms <= 0:
        raise ProbeFailed(f"the case did not run ok (status {result.status!r})")
    return float(result.time_ms)


class CommandProber:
    """Runs COMMAND for a revision of a ``Source``; adds each run to the store (when given)."""

    def __init__(
        self,
        source: Source,
        command: RunCommand,
        terms: dict[str, str],
        case_text: str,
        store: RunStore | None,
        branch: str,
        on_run: Callable[[RunRecord], None] = lambda record: None,
    ):
        self.source, self.command, self.terms, self.case_text = source, command, terms, case_text
        self.store, self.branch, self.on_run = store, branch, on_run
        self.scratch = Path(tempfile.mkdtemp(prefix="fi-attn-bisect-runs-"))
        self.count = 0

    def prepare(self, revision: Revision) -> None:
        checkout = self.source.provide(revision)
        if self.command.setup:
            done = self._run(["sh", "-c", self.command.setup], checkout, revision, "")
            if done.returncode != 0:
                raise ProbeFailed(f"setup exited {done.returncode}: {one_line(done.stderr)}")
        self._measure(revision, counted=False)

    def measure(self, revision: Revision) -> float:
        return self._measure(revision, counted=True)

    def release(self, revision: Revision) -> None:
        self.source.release(revision)

    def close(self) -> None:
        for path in self.scratch.glob("*"):
            path.unlink(missing_ok=True)
        self.scratch.rmdir()

    def _measure(self, revision: Revision, counted: bool) -> float:
        checkout = self.source.provide(revision)
        self.count += 1
        output = self.scratch / f"run{self.count}.csv"
        argv = [
            substitute(part, self._values(checkout, revision, output)) for part in self.command.argv
        ]
        try:
            done = self._run(argv, checkout, revision, str(output))
            if done.returncode != 0:
                raise ProbeFailed(f"COMMAND exited {done.returncode}: {one_line(done.stderr)}")
            if not output.is_file():
                raise ProbeFailed(f"COMMAND wrote no CSV at {{output}} ({output})")
            try:
                runs = runs_in_file(output)
            except NotARunError as exc:
                raise ProbeFailed(str(exc)) from None
            self._store(runs, revision)
            time_ms = case_time(runs, self.terms, self.case_text)
        except ProbeFailed as exc:
            self.on_run(RunRecord(revision, None, counted, str(exc)))
            raise
        finally:
            output.unlink(missing_ok=True)
        self.on_run(RunRecord(revision, time_ms, counted))
        return time_ms

    def _values(self, checkout: Checkout, revision: Revision, output: Path) -> dict[str, str]:
        return {
            "rev_dir": str(checkout.directory),
            "python": checkout.python,
            "output": str(output),
            "rev": revision.key,
        }

    def _run(self, argv, checkout: Checkout, revision: Revision, output: str):
        environment = dict(os.environ)
        for name, value in self._values(checkout, revision, Path(output)).items():
            environment[ENVIRONMENT_PREFIX + name.upper()] = (
                value if output or name != "output" else ""
            )
        try:
            return subprocess.run(
                argv,
                cwd=checkout.cwd,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",
                timeout=self.command.timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise ProbeFailed(f"COMMAND ran past {self.command.timeout_s:g} s") from None
        except OSError as exc:
            raise ProbeFailed(f"COMMAND did not start: {exc}") from None

    def _store(self, runs: Sequence[ParsedRun], revision: Revision) -> None:
        """Each run under the revision it measured, so the dashboard shows the bisect's points."""
        if self.store is None:
            return
        for run in runs:
            metadata = dict(run.metadata)
            metadata["git_commit"] = revision.commit
            metadata.pop("git_dirty", None)
            stored = dataclasses.replace(run, metadata=tuple(metadata.items()))
            try:
                self.store.add_run(stored, self.branch)
            except StoreError as exc:
                raise StoreError(f"writing the bisect's run: {exc}") from None
