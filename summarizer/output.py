"""Report files: written atomically, so a killed run never leaves half a report."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, is_dataclass
from enum import Enum
from pathlib import Path


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
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(handle, mode)  # mkstemp makes 0600; a report is as readable as any file
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


def _file_mode(path: Path) -> int:
    """The existing file's mode, or what open() would give a new file (umask applied)."""
    if path.exists():
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def model_json(model) -> str:
    """The whole model as JSON; tables become lists of row objects, NaN becomes null."""
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
    return [name for name in model.__dataclass_fields__ if name not in excluded]


def _value_json(value) -> str:
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
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value
