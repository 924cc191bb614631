"""Where a bisected revision comes from: a commit checked out in a git worktree of its own, or
a wheel installed into a virtual environment of its own.  Both are removed when the bisect
ends, also on Ctrl-C (the owner closes them in a ``finally``)."""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from fi_attn_bench.history.bisect import ProbeFailed, Revision

LABEL_CHARACTERS = 60  # a commit's label: short hash and subject, cut to this
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # a hostile subject could steer a terminal


class BisectInputError(ValueError):
    """Bad input found before any run (exit 2); the message is one line."""


@dataclass(frozen=True)
class Checkout:
    """Where a revision's runs happen: the directory COMMAND sees and the python it uses."""

    directory: Path
    python: str
    cwd: Path  # the command's working directory


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, check=False
    )


def one_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return _CONTROL.sub("?", lines[-1]) if lines else ""


def resolve_commit(repo: Path, revision: str) -> str:
    """The full hash of ``revision`` in ``repo``; BisectInputError when there is none."""
    if not revision or revision.startswith("-"):
        raise BisectInputError(f"revision {revision!r} does not exist in {repo}")
    found = _git(
        repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{revision}^{{commit}}"
    )
    if found.returncode != 0:
        raise BisectInputError(f"revision {revision!r} does not exist in {repo}")
    return found.stdout.strip()


def check_repository(repo: Path) -> Path:
    top = _git(repo, "rev-parse", "--show-toplevel")
    if not repo.is_dir() or top.returncode != 0:
        raise BisectInputError(f"{repo} is not a git repository")
    return Path(top.stdout.strip())


def commit_line(repo: Path, good: str, bad: str) -> list[Revision]:
    """The first-parent line from ``good`` to ``bad``, both included, oldest first."""
    repo = check_repository(repo)
    good_hash, bad_hash = resolve_commit(repo, good), resolve_commit(repo, bad)
    if good_hash == bad_hash:
        raise BisectInputError(f"good and bad are the same revision ({good_hash[:12]})")
    if _git(repo, "merge-base", "--is-ancestor", good_hash, bad_hash).returncode != 0:
        raise BisectInputError(f"good {good!r} is not an ancestor of bad {bad!r}")
    listed = _git(
        repo, "log", "--first-parent", "--ancestry-path", "--reverse", "--format=%H %h %s",
        f"{good_hash}..{bad_hash}",
    )  # fmt: skip
    lines = [line.split(" ", 2) for line in listed.stdout.splitlines() if line]
    oldest_parent = _git(repo, "rev-parse", f"{lines[0][0]}^1").stdout.strip() if lines else ""
    if listed.returncode != 0 or oldest_parent != good_hash:
        raise BisectInputError(f"good {good!r} is not on the first-parent line of bad {bad!r}")
    good_line = _git(repo, "log", "-1", "--format=%H %h %s", good_hash).stdout.split(" ", 2)
    return [_revision(parts) for parts in [good_line, *lines]]


def _revision(parts: list[str]) -> Revision:
    full, short, subject = (parts + ["", ""])[:3]
    label = _CONTROL.sub("?", f"{short} {subject.strip()}".strip())
    if len(label) > LABEL_CHARACTERS:
        label = label[: LABEL_CHARACTERS - 3] + "..."
    return Revision(key=full.strip(), label=label)


class Worktrees:
    """One detached git worktree per probed commit, under one temporary directory."""

    def __init__(self, repo: Path):
        self.repo = check_repository(repo)
        self.root = Path(tempfile.mkdtemp(prefix="fi-attn-bisect-"))
        self.paths: dict[str, Path] = {}

    def provide(self, revision: Revision) -> Checkout:
        path = self.paths.get(revision.key)
        if path is None:
            path = self.root / revision.key[:12]
            self.paths[revision.key] = path  # first, so that Ctrl-C mid-add still removes it
            added = _git(
                self.repo, "worktree", "add", "--detach", "--quiet", str(path), revision.key
            )
            if added.returncode != 0:
                raise ProbeFailed(f"git worktree add failed: {one_line(added.stderr)}")
        return Checkout(directory=path, python=sys.executable, cwd=path)

    def release(self, revision: Revision) -> None:
        path = self.paths.pop(revision.key, None)
        if path is not None:
            _git(self.repo, "worktree", "remove", "--force", str(path))
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        for key in list(self.paths):
            self.release(Revision(key, key))
        _git(self.repo, "worktree", "prune")
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Worktrees:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


@dataclass(frozen=True)
class Wheel:
    path: Path
    distribution: str
    version: object  # packaging.version.Version


def wheels_in(directory: Path) -> list[Wheel]:
    """The wheels of one distribution in ``directory``, oldest version first."""
    from packaging.utils import InvalidWheelFilename, parse_wheel_filename

    if not directory.is_dir():
        raise BisectInputError(f"--versions {directory}: no such directory")
    wheels = []
    for path in sorted(directory.glob("*.whl")):
        try:
            name, version, _, _ = parse_wheel_filename(path.name)
        except InvalidWheelFilename as exc:
            raise BisectInputError(f"--versions: {path.name} is not a wheel name: {exc}") from None
        wheels.append(Wheel(path, str(name), version))
    names = sorted({wheel.distribution for wheel in wheels})
    if len(names) > 1:
        raise BisectInputError(
            f"--versions {directory}: wheels of several packages: {', '.join(names)}"
        )
    versions = [wheel.version for wheel in wheels]
    if len(set(versions)) != len(versions):
        raise BisectInputError(f"--versions {directory}: one version in several wheels")
    if len(wheels) < 2:
        raise BisectInputError(f"--versions {directory}: fewer than two wheels")
    return sorted(wheels, key=lambda wheel: wheel.version)


def version_line(wheels: list[Wheel], good: str | None, bad: str | None) -> list[Revision]:
    """The wheels from ``good`` to ``bad`` (default: the oldest and the newest)."""
    labels = [f"{wheel.distribution} {wheel.version}" for wheel in wheels]

    def position(text: str | None, default: int) -> int:
        if text is None:
            return default
        for index, wheel in enumerate(wheels):
            if text in (str(wheel.version), wheel.path.name):
                return index
        raise BisectInputError(f"version {text!r} is not among the wheels ({', '.join(labels)})")

    lo, hi = position(good, 0), position(bad, len(wheels) - 1)
    if lo == hi:
        raise BisectInputError(f"good and bad are the same version ({labels[lo]})")
    if lo > hi:
        raise BisectInputError(f"good {labels[lo]} is newer than bad {labels[hi]}")
    return [Revision(str(wheels[i].path), labels[i], labels[i]) for i in range(lo, hi + 1)]


class Environments:
    """One virtual environment per probed wheel: ``venv --system-site-packages`` (and this
    environment's own packages, where it is a virtual environment itself) plus the wheel,
    installed with ``--no-deps`` from the file alone."""

    def __init__(self, cwd: Path):
        self.cwd = cwd
        self.root = Path(tempfile.mkdtemp(prefix="fi-attn-bisect-venv-"))
        self.paths: dict[str, Path] = {}

    def provide(self, revision: Revision) -> Checkout:
        path = self.paths.get(revision.key)
        if path is None:
            path = self.root / f"env{len(self.paths)}"
            self.paths[revision.key] = path
            _install(path, Path(revision.key))
        return Checkout(directory=path, python=str(_venv_python(path)), cwd=self.cwd)

    def release(self, revision: Revision) -> None:
        path = self.paths.pop(revision.key, None)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        for key in list(self.paths):
            self.release(Revision(key, key))
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Environments:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _venv_python(path: Path) -> Path:
    return path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _install(path: Path, wheel: Path) -> None:
    steps = (
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
        None,  # the parent environment's packages, written between the two commands
        [
            sys.executable, "-m", "pip", "--python", str(_venv_python(path)), "install",
            "--no-deps", "--no-index", "--quiet", "--disable-pip-version-check", str(wheel),
        ],
    )  # fmt: skip
    for step in steps:
        if step is None:
            _see_parent_packages(path)
            continue
        done = subprocess.run(step, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise ProbeFailed(f"installing {wheel.name} failed: {one_line(done.stderr)}")


def _see_parent_packages(path: Path) -> None:
    """A venv made from a venv sees the base interpreter's packages only: a .pth line adds
    this environment's site-packages after the new one's, so the installed wheel wins."""
    if sys.prefix == sys.base_prefix:
        return
    purelib = subprocess.run(
        [str(_venv_python(path)), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    if not purelib:
        raise ProbeFailed(f"the virtual environment {path} does not run")
    lines = [f"import site; site.addsitedir({directory!r})" for directory in site.getsitepackages()]
    Path(purelib, "_fi_attn_bisect_parent.pth").write_text("\n".join(lines) + "\n")
