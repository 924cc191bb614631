"""Running the public commands from a validation part: logged, timed, from the repository root."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench.apis import registry

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = tuple(f"{name}.py" for name in registry.script_names())


@dataclass(frozen=True)
class Finished:
    """What one command did: its exit status and wall seconds (124 when its time ran out)."""

    exit_code: int
    wall_s: float


def python(*args: str) -> list[str]:
    """A command line of this interpreter (the one the validation runs under)."""
    return [sys.executable, *args]


def run_logged(argv: Sequence[str], log: Path, timeout_s: float | None = None) -> Finished:
    """Run ``argv`` from the repository root with stdout and stderr in ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with log.open("w", encoding="utf-8") as handle:
        try:
            code = subprocess.run(
                list(argv), cwd=ROOT, stdout=handle, stderr=subprocess.STDOUT, timeout=timeout_s
            ).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return Finished(code, time.monotonic() - started)


def tail(log: Path, lines: int) -> str:
    """The last lines of a log, for the part's own output."""
    if not log.exists():
        return ""
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
