"""How a plugin worker process (``fi_attn_bench.sweep.worker``) starts.

On a CPU sweep it is forked from multiprocessing's fork server, a clean interpreter of its own
that has imported torch and nothing else (importing torch is most of a worker's start): no
torch op has run there, no CUDA is initialised, and it holds nothing of the sweep's; the
worker then receives its setup as a spawned one would (``sys.path``, working directory, main
module) and imports the harness itself from the sweep's ``sys.path``.  Everywhere else it is
spawned: on a GPU (a device runtime, MetaX's included, is never touched in a forked process),
where the platform has no fork server, and where the environment changed since the server
started (torch reads it at import, and a forked worker keeps the server's).
"""

from __future__ import annotations

import multiprocessing
import os
from multiprocessing import reduction

from fi_attn_bench.sweep.worker import worker_main

PRELOAD = ["torch"]
"""The server's imports: third-party only, since this interpreter's ``sys.path`` reaches the
server only on Python 3.13+ and the harness must come from the sweep's (an editable install
may point at another checkout)."""

_SERVER: dict[str, object] = {}  # the environment the fork server started with

PER_TEST = "PYTEST_CURRENT_TEST"
"""The one variable allowed to differ from the server's: pytest renames it at each test's
phase, and the forked worker is given this process's value before anything runs."""


def _comparable(environment) -> dict[str, str]:
    return {name: value for name, value in environment.items() if name != PER_TEST}


def context_for(device_type: str):
    """The multiprocessing context a worker for ``device_type`` starts in (module docstring)."""
    spawn = multiprocessing.get_context("spawn")
    if device_type != "cpu" or "forkserver" not in multiprocessing.get_all_start_methods():
        return spawn
    environment = _comparable(os.environ)
    if "environment" not in _SERVER:
        forkserver = multiprocessing.get_context("forkserver")
        forkserver.set_forkserver_preload(PRELOAD)
        _SERVER["environment"] = environment
        _SERVER["context"] = forkserver
    return _SERVER["context"] if _SERVER["environment"] == environment else spawn


def forked(context) -> bool:
    return context.get_start_method() == "forkserver"


def give_up_forking() -> None:
    """Start every later worker by spawning (the server's torch was not the sweep's)."""
    _SERVER["environment"] = None


class ParentStderr:
    """This process's standard error as it is now, handed to a forked worker: the server's
    own is the one this process had when the server started (a test's capture, a closed
    pipe); a spawned worker inherits the right one."""

    def __reduce__(self):
        return (_adopt_stderr, (reduction.DupFd(2),))


def _adopt_stderr(duplicate) -> None:
    descriptor = duplicate.detach()
    os.dup2(descriptor, 2)
    os.close(descriptor)


def forked_worker_main(conn, setup, _stderr=None, torch_file: str = "", environment=None) -> None:
    """``worker_main`` in a forked worker, with this process's environment (it differs from
    the server's in ``PER_TEST`` at most), after a check that the server's torch is the
    sweep's (a ``sys.path`` entry of the sweep's may hold another)."""
    import torch

    if environment is not None:
        os.environ.clear()
        os.environ.update(environment)

    if torch.__file__ != torch_file:
        conn.send_bytes(b'{"kind": "respawn"}')
        return
    worker_main(conn, setup)
