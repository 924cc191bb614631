"""benchmarks/summarizer_parity.py keeps the other checkout's outputs by its commit."""

from __future__ import annotations

import subprocess

from benchmarks.summarizer_parity import kept_folder


def _git(folder, *arguments: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(folder), "-c", "user.name=t", "-c", "user.email=t@t", *arguments],
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip()


def test_outputs_are_kept_by_commit_and_hidden_modules_and_never_for_a_dirty_checkout(tmp_path):
    checkout, work = tmp_path / "older", tmp_path / "work"
    checkout.mkdir()
    _git(checkout, "init", "-q")
    (checkout / "summarize_results.py").write_text("one\n")
    _git(checkout, "add", "summarize_results.py")
    _git(checkout, "commit", "-q", "-m", "one")
    first = _git(checkout, "rev-parse", "HEAD")
    assert kept_folder(checkout, work, []) == work / "against" / f"{first}-all"
    hidden = [str(work / "hidden" / "pyarrow")]
    assert kept_folder(checkout, work, hidden) == work / "against" / f"{first}-pyarrow"

    (checkout / "summarize_results.py").write_text("two\n")  # uncommitted: run afresh
    assert kept_folder(checkout, work, []) is None
    _git(checkout, "commit", "-q", "-am", "two")
    second = _git(checkout, "rev-parse", "HEAD")
    assert second != first
    assert kept_folder(checkout, work, []) == work / "against" / f"{second}-all"


def test_a_folder_outside_git_is_run_afresh(tmp_path):
    assert kept_folder(tmp_path, tmp_path / "work", []) is None
