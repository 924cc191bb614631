"""What a row records about where it ran: device, runtime, versions, and the roofline it is judged against."""

from __future__ import annotations

import importlib
import secrets
import socket
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from fi_attn_bench.results.schema import (
    HARNESS_VERSION,
    OPTIONAL_COLUMN_NAMES,
    STATUS_OK,
)
from fi_attn_bench.sweep.run_options import RunOptions


def runtime_version() -> str:
    """CUDA / MACA / HIP runtime that torch was built with, feature-detected."""
    for attribute in ("maca", "musa", "hip", "cuda"):
        value = getattr(torch.version, attribute, None)
        if value:
            return f"{attribute.upper()} {value}"
    return ""


def _query(fn: Callable[[], object]) -> str:
    """A device property as text; empty where this build cannot say."""
    try:
        return str(fn())
    except Exception:  # noqa: BLE001 - an environment stamp must never stop a sweep
        return ""


GIT_TIMEOUT_S = 5.0  # a hung git (network file system, lock) must not hold up a sweep


@dataclass(frozen=True)
class CodeVersion:
    """The git commit of the code under test and whether its tracked files were changed;
    empty when it is not a git checkout or git is missing."""

    commit: str = ""
    dirty: str = ""  # "yes", "no" or ""


def _git(directory: str, *words: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", directory, *words],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def code_version(directory: str) -> CodeVersion:
    """``git rev-parse HEAD`` and ``git status --porcelain`` of the checkout holding
    ``directory``; untracked files do not count, since results CSVs land in the checkout."""
    commit = _git(directory, "rev-parse", "HEAD")
    if not commit:
        return CodeVersion()
    status = _git(directory, "status", "--porcelain", "--untracked-files=no")
    dirty = "" if status is None else ("yes" if status.strip() else "no")
    return CodeVersion(commit.strip(), dirty)


def timestamp_utc() -> str:
    """Now, UTC, ISO 8601 to the second (``2026-12-04T17:11:50Z``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_run_id() -> str:
    """A fresh invocation id: when it started (UTC) and random bits, unique across hosts."""
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(4)}"


def run_metadata(code_dir: str) -> dict[str, str]:
    """Host and code version: computed once per sweep."""
    version = code_version(code_dir)
    return {"host": socket.gethostname(), "git_commit": version.commit, "git_dirty": version.dirty}


def environment_columns(options: RunOptions, code_dir: str | None = None) -> dict[str, object]:
    device = options.device
    if device.type == "cuda":
        name = _query(lambda: torch.cuda.get_device_name(device))
        capability = _query(lambda: "{}.{}".format(*torch.cuda.get_device_capability(device)))
        runtime = runtime_version()
    else:
        name, capability, runtime = "cpu", "", ""
    return {
        "backend": options.impl_kind,
        "device": name,
        "compute_capability": capability,
        "runtime": runtime,
        "torch_version": torch.__version__,
        "flashinfer_version": options.flashinfer_version,
        "harness_version": HARNESS_VERSION,
        "dtype": options.dtype_name,
        "page_size": options.page_size,
        "preset": options.preset,
        "filter": ",".join(options.filters),
        "cpu_threads": options.cpu_threads,
        **(run_metadata(code_dir) if code_dir is not None else {}),
    }


@dataclass(frozen=True)
class Roofline:
    """device.peaks (optional module) bound to this sweep's device and dtype."""

    module: object = None
    peaks: object = None

    def columns(self, record: Mapping[str, object]) -> dict[str, object]:
        if self.peaks is None or record.get("status") != STATUS_OK:
            return {}
        try:
            values = self.module.roofline_columns(
                record["bandwidth_GB_s"], record["tflops"], self.peaks
            )
        except Exception:  # noqa: BLE001 - roofline is decoration, never a failure
            return {}
        return {k: v for k, v in dict(values).items() if k in OPTIONAL_COLUMN_NAMES}


def load_roofline(options: RunOptions, device_name: str) -> Roofline:
    try:
        module = importlib.import_module("fi_attn_bench.device.peaks")
        peaks = module.resolve_peaks(
            device_name,
            options.dtype_name,
            bandwidth_override=options.peak_bandwidth,
            tflops_override=options.peak_tflops,
        )
    except Exception:  # noqa: BLE001 - a missing or broken module leaves the columns empty
        return Roofline()
    return Roofline(module, peaks)
