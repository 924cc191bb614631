"""How a plugin worker starts (``fi_attn_bench.sweep.worker_start``): forked from a clean
server on the CPU, spawned elsewhere, and never carrying the sweep's own state."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from fi_attn_bench.sweep import worker_start

ROOT = Path(__file__).resolve().parent.parent

# A plugin that reports, at its import in the worker, who started its process and what it holds.
PLUGIN = """
import json, os, sys
import torch
from examples.sdpa_decode_plugin import make
parent = os.getppid()
with open(f"/proc/{parent}/cmdline", "rb") as handle:
    command = handle.read().replace(b"\\0", b" ").decode()
facts = {"parent": parent, "parent_command": command,
         "sweep_state": hasattr(torch, "sweep_state"),
         "cuda": torch.cuda.is_initialized(),
         "per_test": os.environ.get("PYTEST_CURRENT_TEST")}
with open(os.path.join(os.path.dirname(__file__), "facts.jsonl"), "a") as out:
    out.write(json.dumps(facts) + "\\n")
print("plugin-stderr-marker", file=sys.stderr)
"""

# Three sweeps in one process: forked; forked with standard error and pytest's test name
# changed since the server started; and with this process's torch somewhere else than the server's (spawned again).
DRIVER = """
import json, os, sys
import torch
import bench_batch_decode
from fi_attn_bench.sweep import worker_start

def sweep(name):
    code = bench_batch_decode.main(["--preset", "cpu", "--device", "cpu", "--filter",
        "batch_size=4,seq_len_kv=37", "--output", os.path.join(HERE, name + ".csv"),
        "--impl", os.path.join(HERE, "plugin.py") + ":make"])
    assert code == 0, code

if __name__ == "__main__":
    HERE = sys.argv[1]
    torch.sweep_state = "the sweep's own object"
    sweep("first")
    saved = os.dup(2)
    with open(os.path.join(HERE, "moved.err"), "wb") as moved:
        os.dup2(moved.fileno(), 2)
        os.environ["PYTEST_CURRENT_TEST"] = "the second sweep"  # pytest renames it per test
        sweep("second")
        os.dup2(saved, 2)
    torch.__file__ = "/elsewhere/torch/__init__.py"
    sweep("third")
    print(json.dumps({"pid": os.getpid(), "server": worker_start._SERVER.get("environment")}))
"""


def test_a_cpu_worker_is_forked_from_a_clean_server_and_spawned_when_the_torch_differs(
    tmp_path,
):
    (tmp_path / "plugin.py").write_text(PLUGIN)
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER))
    done = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    driver = json.loads(done.stdout.strip().splitlines()[-1])
    facts = [json.loads(line) for line in (tmp_path / "facts.jsonl").read_text().splitlines()]
    assert len(facts) == 3, facts
    first, second, third = facts
    for forked in (first, second):
        assert forked["parent"] != driver["pid"], forked
        assert "multiprocessing.forkserver" in forked["parent_command"], forked
    assert second["per_test"] == "the second sweep", second
    assert third["parent"] == driver["pid"], third  # spawned by the sweep itself
    assert driver["server"] is None  # and every later worker is spawned too
    for found in facts:
        assert not found["sweep_state"] and not found["cuda"], found
    assert "plugin-stderr-marker" in (tmp_path / "moved.err").read_text()
    for name in ("first", "second", "third"):
        with open(tmp_path / f"{name}.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        assert [(r["status"], r["check"], r["integrity"]) for r in rows] == [("ok", "pass", "pass")]


def test_a_gpu_worker_and_a_changed_environment_are_spawned(monkeypatch):
    assert worker_start.context_for("cuda").get_start_method() == "spawn"
    forkserver = multiprocessing.get_context("forkserver")
    monkeypatch.setitem(worker_start._SERVER, "context", forkserver)
    monkeypatch.setitem(worker_start._SERVER, "environment", {"ONLY": "this"})
    assert worker_start.context_for("cpu").get_start_method() == "spawn"
    monkeypatch.setitem(worker_start._SERVER, "environment", worker_start._comparable(os.environ))
    assert worker_start.context_for("cpu") is forkserver
