"""What the user ran: the name usage lines and errors show, and the words that run it again."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys
from collections.abc import Callable

CONSOLE_PREFIX = "fi-attn-"  # every console script of pyproject.toml starts so


def _argv0(argv0: str | None) -> str:
    if argv0 is not None:
        return argv0
    return sys.argv[0] if sys.argv else ""


def program_name(face: str, argv0: str | None = None) -> str:
    """The program's name as the user ran it: a console script (``fi-attn-bench-decode``)
    or the face file ``face`` itself; ``face`` when neither ran (a test, ``python -c``)."""
    name = os.path.basename(_argv0(argv0))
    return name if name.startswith(CONSOLE_PREFIX) or name == face else face


def rerun_words(face: str, face_file: str | None = None, argv0: str | None = None) -> list[str]:
    """Words that run this program again from the current directory: the console script
    the user ran, the face file's path as the user typed it, else ``face_file`` (where the
    face lives) relative to here; ``python face`` when nothing better is known."""
    typed = _argv0(argv0)
    name = os.path.basename(typed)
    if name.startswith(CONSOLE_PREFIX):
        return [name]
    if name == face and os.path.isfile(typed):
        return ["python", typed]
    if face_file and os.path.basename(face_file) == face and os.path.isfile(face_file):
        return ["python", os.path.relpath(face_file)]
    return ["python", face]


def face_path(face: str, prepare: Callable) -> str:
    """Where the face file ``face`` is: beside ``prepare``'s code (a user's own script), else
    where Python imports it from (the harness's faces, whose APIs live in the package)."""
    beside = os.path.join(code_directory(prepare), face)
    if os.path.isfile(beside):
        return beside
    try:
        found = importlib.util.find_spec(os.path.splitext(face)[0])
    except (ImportError, ValueError):
        found = None
    return found.origin if found is not None and found.origin else beside


def code_directory(prepare: Callable) -> str:
    """The directory of the script being run: where its ``prepare`` is defined."""
    try:
        return os.path.dirname(os.path.abspath(inspect.getfile(prepare)))
    except (TypeError, OSError):
        return os.getcwd()
