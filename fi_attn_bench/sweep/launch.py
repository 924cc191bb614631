"""Which shard and GPU a process takes when torchrun or a Slurm job array started it.

torchrun sets ``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK``; a Slurm array sets
``SLURM_ARRAY_TASK_ID``, ``SLURM_ARRAY_TASK_COUNT``, ``SLURM_ARRAY_TASK_MIN`` (and ``_STEP``).
Both together (torchrun in each task of an array) give shard ``task * WORLD_SIZE + RANK`` of
``COUNT * WORLD_SIZE``.  Nothing here talks to other processes: no collective, no store.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from fi_attn_bench.errors import UsageError
from fi_attn_bench.sweep.sharding import ShardSpec

TORCHRUN = "torchrun"
STAMP = "%Y%m%d_%H%M%S"  # outputs.get_csv_path's
SLURM_ARRAY = "Slurm array"


@dataclass(frozen=True)
class Launch:
    """What the launcher told this process: its shard, GPU and the run's shared name."""

    shard: ShardSpec | None = None
    origin: str = ""  # "torchrun", "Slurm array", "torchrun in a Slurm array"; "" when none
    local_rank: int | None = None  # torchrun: this process's GPU on its node
    leader: bool = True  # prints the sweep's progress; the others log to <csv>.log
    # processes given this very command line (torchrun's WORLD_SIZE); a Slurm array task's
    # command may differ per task ($SLURM_ARRAY_TASK_ID), so it counts 1
    same_command: int = 1


def _int(environ: Mapping[str, str], name: str) -> int:
    text = environ[name]
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"environment: {name}={text!r} is not a whole number") from None


def _torchrun(environ: Mapping[str, str]) -> tuple[int, int, int] | None:
    """(RANK, WORLD_SIZE, LOCAL_RANK) when torchrun started this process."""
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    rank, world = _int(environ, "RANK"), _int(environ, "WORLD_SIZE")
    local = _int(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else rank
    if world < 1 or not 0 <= rank < world or local < 0:
        raise UsageError(
            f"environment: RANK={rank} WORLD_SIZE={world}: need 0 <= RANK < WORLD_SIZE"
        )
    return rank, world, local


def _slurm_array(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """(task index from 0, task count) of a Slurm job array; UsageError for uneven ids."""
    if "SLURM_ARRAY_TASK_ID" not in environ or "SLURM_ARRAY_TASK_COUNT" not in environ:
        return None
    task, count = _int(environ, "SLURM_ARRAY_TASK_ID"), _int(environ, "SLURM_ARRAY_TASK_COUNT")
    low = _int(environ, "SLURM_ARRAY_TASK_MIN") if "SLURM_ARRAY_TASK_MIN" in environ else 0
    step = _int(environ, "SLURM_ARRAY_TASK_STEP") if "SLURM_ARRAY_TASK_STEP" in environ else 1
    high = _int(environ, "SLURM_ARRAY_TASK_MAX") if "SLURM_ARRAY_TASK_MAX" in environ else None
    evenly = (
        step >= 1
        and (task - low) % step == 0
        and (high is None or (high - low) // step + 1 == count)
    )
    index = (task - low) // step if step >= 1 else -1
    if not evenly or not 0 <= index < count:
        raise UsageError(
            f"Slurm array task {task} (ids {low}..{high if high is not None else '?'} step {step}, "
            f"{count} tasks) does not map to shard I of {count}: use evenly spaced ids "
            "(e.g. --array=0-7) or pass --shard I/N"
        )
    return index, count


def _tag_text(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "", text)[:8]


def process_started(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from Linux's /proc; None elsewhere."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            ticks = int(handle.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/stat", encoding="ascii") as handle:
            boot = next(int(line.split()[1]) for line in handle if line.startswith("btime "))
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def run_tag(
    environ: Mapping[str, str],
    origin: str,
    now: float | None = None,
    agent_started: float | None = None,
) -> str:
    """The shared part of a sharded run's CSV names, the same in every process: the array's
    job id; under torchrun on one node the start time of the agent that spawned the ranks
    (``agent_started``), across nodes torchrun's run id; a single process's local time."""
    if "SLURM_ARRAY_JOB_ID" in environ and SLURM_ARRAY in origin:
        return f"slurm{_tag_text(environ['SLURM_ARRAY_JOB_ID'])}"
    if TORCHRUN not in origin:
        return time.strftime(STAMP, time.localtime(now))
    one_node = environ.get("LOCAL_WORLD_SIZE", "") == environ.get("WORLD_SIZE")
    if one_node and agent_started is not None:
        return time.strftime(STAMP, time.localtime(agent_started))
    run_id = environ.get("TORCHELASTIC_RUN_ID", "")
    if _tag_text(run_id) and run_id != "none":
        return f"torchrun{_tag_text(run_id)}"
    raise UsageError(
        "torchrun without a run id (TORCHELASTIC_RUN_ID): the processes cannot agree on "
        "their CSV names; pass --rdzv-id ID to torchrun, or --output PATH (each process "
        "writes PATH with .shardIofN inserted)"
    )


def detect_launch(environ: Mapping[str, str], explicit_shard: bool = False) -> Launch:
    """The shard, GPU and run tag a launcher's environment gives this process.  With
    ``explicit_shard`` (--shard given), a Slurm array that maps to no shard is ignored."""
    torchrun = _torchrun(environ)
    try:
        array = _slurm_array(environ)
    except UsageError:
        if not explicit_shard:
            raise
        array = None
    if torchrun is None and array is None:
        return Launch()
    world, local = (torchrun[1], torchrun[2]) if torchrun else (1, None)
    if torchrun and array:
        (task, tasks), rank = array, torchrun[0]
        shard = ShardSpec(task * world + rank, tasks * world)
        origin = f"{TORCHRUN} in a {SLURM_ARRAY}"
    elif torchrun:
        shard, origin = ShardSpec(torchrun[0], world), TORCHRUN
    else:
        shard, origin = ShardSpec(*array), SLURM_ARRAY
    return Launch(shard, origin, local, leader=shard.index == 0, same_command=world)
