"""Report files: written atomically, so a killed run never leaves half a report.

``-`` (and ``/dev/stdout``) is standard output; other targets that are not regular
files (a pipe, /dev/null, /proc/self/fd/N) are written directly.  Every output path
is checked before any is written (``unwritable``), so a bad path writes nothing, and
before any input is read (``overwrite_error``), so a report never replaces an input,
an existing data file or an SQLite file (a history store, whatever its name).
fi-attn-history's outputs go through the same checks.
"""

from __future__ import annotations

import math
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, is_dataclass
from dataclasses import fields as dataclass_fields
from enum import Enum
from pathlib import Path

STDOUT_NAMES = ("-", "/dev/stdout")
# What a report never replaces: measured results (CSV, raw samples), compressed or not, and
# history stores (SQLite files are also recognized by their first bytes, whatever their name).
DATA_SUFFIXES = (".csv", ".jsonl", ".gz", ".sqlite", ".sqlite3", ".db")
SQLITE_MAGIC = b"SQLite format 3\x00"


@dataclass(frozen=True)
class OutputTarget:
    """One path the command will write: a report file, or the folder of the plots."""

    path: Path
    what: str  # "summary report", "json report", "plots"
    file_suffixes: tuple[str, ...] = ()  # a folder: the endings of the files written in it


def is_stdout(path) -> bool:
    """Whether an output path means standard output."""
    return path is not None and str(path) in STDOUT_NAMES


def write_report(path, text: str) -> None:
    """Write a report: to standard output for ``-``, else ``write_atomically``."""
    if is_stdout(path):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomically(Path(path), text)


def missing_folder(path) -> Path | None:
    """The outermost folder that writing ``path`` would create (None: its folder exists),
    so the command can say it made one."""
    if is_stdout(path):
        return None
    folder, missing = Path(path).parent, None
    while not folder.exists():
        folder, missing = folder.parent, folder
    return missing


def unwritable(path, directory: bool = False) -> str | None:
    """Why ``path`` cannot be written (None when it can), found without writing
    anything that stays: a probe file is created and removed in the nearest existing
    folder.  ``directory``: the path is a folder to create or fill (``--plot-dir``)."""
    if is_stdout(path):
        return None
    path = Path(path)
    if path.exists():
        if directory and not path.is_dir():
            return "exists and is not a directory"
        if not directory and path.is_dir():
            return "is a directory"
        if not directory and not path.is_file():
            return None if os.access(path, os.W_OK) else "permission denied"
    folder = path if directory and path.is_dir() else path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is not a directory"
    try:
        handle, probe = _new_file_beside(folder / ".probe")
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(handle)
    os.unlink(probe)
    return None


def overwrite_error(targets, inputs) -> str | None:
    """Why writing ``targets`` would replace something a user made (None when it would
    not): an input of this run, or an existing data file (DATA_SUFFIXES).  Paths are
    compared resolved (symlinks followed) and as the same file (hard links)."""
    inputs = [Path(path) for path in inputs]
    resolved = {os.path.realpath(path): path for path in inputs}
    for target in targets:
        if target.path is None or is_stdout(target.path):
            continue
        if target.file_suffixes:
            why = _folder_overwrite(target, resolved)
        else:
            why = _file_overwrite(Path(target.path), inputs, resolved)
        if why:
            return f"refusing to write the {target.what} to {target.path}: {why}"
    return None


def is_sqlite_file(path) -> bool:
    """Whether ``path`` is a regular file that starts as every SQLite database does."""
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # a FIFO's open would wait for a writer
            return False
        with open(path, "rb") as stream:
            return stream.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:  # missing, unreadable: not a store we could lose
        return False


def input_named(path, inputs) -> Path | None:
    """The input ``path`` is (resolved, or the same file through a hard link), or None."""
    real = os.path.realpath(path)
    for source in inputs:
        if os.path.realpath(source) == real:
            return Path(source)
    if not os.path.exists(path):
        return None
    for source in inputs:
        try:
            if os.path.samefile(path, source):
                return Path(source)
        except OSError:  # an input that does not exist: the reader reports it
            continue
    return None


def _file_overwrite(path: Path, inputs: list[Path], resolved: dict) -> str | None:
    source = input_named(path, inputs)
    if source is not None:
        return f"it is an input ({source})"
    if not path.exists():
        return None
    if is_sqlite_file(path):
        return "it is an SQLite file (a history store?); choose another path"
    for name in (path.name, Path(os.path.realpath(path)).name):
        if name.lower().endswith(DATA_SUFFIXES):
            return "it is an existing data file; choose another path"
    return None


def _folder_overwrite(target: OutputTarget, resolved: dict) -> str | None:
    """An input inside the plot folder with a plot file's name would be replaced."""
    folder = os.path.join(os.path.realpath(target.path), "")
    for real, source in resolved.items():
        if real.startswith(folder) and real.endswith(target.file_suffixes):
            kind = "a plot file's name" if "plot" in target.what else "the name of a file written"
            return f"the input {source} has {kind} there"
    return None


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, fsync, then rename over it.

    A symlink is followed (its target is replaced).  A target that is not a regular
    file (/dev/stdout, a pipe, /dev/null) is written directly: renaming over it
    would replace the device node itself.
    """
    path = Path(os.path.realpath(path))
    if path.exists() and not path.is_file():
        if path.is_dir():
            raise IsADirectoryError(21, "Is a directory", str(path))
        with open(path, "w", encoding="utf-8") as stream:
            stream.write(text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _file_mode(path)
    handle, temporary = _new_file_beside(path)
    try:
        os.fchmod(handle, mode)  # made 0600; a report is as readable as any file
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise


def _new_file_beside(path: Path) -> tuple[int, str]:
    """(descriptor, name) of a new 0600 file next to ``path`` that no one else opened:
    tempfile.mkstemp's guarantee (O_EXCL, no symlink followed) without importing
    tempfile, whose imports cost more than writing a report."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        temporary = str(path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(temporary, flags, 0o600), temporary
        except FileExistsError:
            continue
    raise FileExistsError(17, "No usable temporary file name found", str(path.parent))


def _file_mode(path: Path) -> int:
    """The existing file's mode, or what open() would give a new file (umask applied)."""
    if path.exists():
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def model_json(model) -> str:
    """The whole model as JSON; tables become lists of row objects, NaN becomes null."""
    import json

    labelled = getattr(model, "LABELLED", ())
    fields = [
        (name, model.labelled(name) if name in labelled else getattr(model, name))
        for name in _field_names(model)
    ]
    fields += [("exit_code", model.exit_code)]
    parts = [f"{json.dumps(name)}: {_value_json(value)}" for name, value in fields]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _field_names(model) -> list[str]:
    excluded = getattr(model, "JSON_EXCLUDE", ())
    return [field.name for field in dataclass_fields(model) if field.name not in excluded]


def _value_json(value) -> str:
    import json

    if hasattr(value, "to_json"):
        return value.to_json(orient="records", force_ascii=False, double_precision=15)
    return json.dumps(_plain(value), ensure_ascii=False, allow_nan=False)


def _plain(value):
    if isinstance(value, Enum):
        return value.value[0] if isinstance(value.value, tuple) else value.value
    if is_dataclass(value) and not isinstance(value, type):
        plain = {name: _plain(item) for name, item in asdict(value).items()}
        for name in ("total_time_ratio",):
            if hasattr(value, name):
                plain[name] = _plain(getattr(value, name))
        return plain
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str | bytes):  # CaseTable too
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
