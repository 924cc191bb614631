"""What bench_all.py records in its output directory (``bench_all.json``) so that
``bench_all.py --resume DIR`` finishes an interrupted run: its scripts, their requests, their CSVs.
Each shard of a sharded run records its own part (``bench_all.shardIofN.json``): the shards'
processes never write one file together."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

from fi_attn_bench.errors import UsageError
from fi_attn_bench.results.schema import HARNESS_VERSION
from fi_attn_bench.sweep.outputs import move_aside
from fi_attn_bench.sweep.request import SweepRequest
from fi_attn_bench.sweep.sharding import ShardSpec

RECORD_NAME = "bench_all.json"
_SHARD_RECORD = re.compile(r"^bench_all\.shard(\d+)of(\d+)\.json$")


@dataclass(frozen=True)
class SuiteRecord:
    """The scripts of a bench_all run in order, each one's request and CSV (a file name inside
    the run's output directory); ``argv``: the scripts' shared command line, which records
    written before requests were recorded hold instead of ``requests``."""

    scripts: tuple[str, ...]
    csv_names: tuple[str, ...]
    requests: tuple[SweepRequest, ...] = ()
    argv: tuple[str, ...] = ()
    finished: bool = False  # every script ran to its end (an interrupted run stays False)

    def csv_of(self, script: str) -> str:
        return self.csv_names[self.scripts.index(script)]

    def request_of(self, script: str) -> SweepRequest:
        return self.requests[self.scripts.index(script)]


def record_name(shard: ShardSpec | None = None) -> str:
    """``bench_all.json``, or a shard's ``bench_all.shardIofN.json``."""
    return RECORD_NAME if shard is None else f"bench_all.{shard.tag}.json"


def record_path(directory: str, shard: ShardSpec | None = None) -> str:
    return os.path.join(directory, record_name(shard))


def shard_records(directory: str) -> list[ShardSpec]:
    """The shards whose records ``directory`` holds, in order."""
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    found = [_SHARD_RECORD.match(name) for name in names]
    shards = []
    for match in filter(None, found):
        index, count = int(match.group(1)), int(match.group(2))
        if 0 <= index < count:
            shards.append(ShardSpec(index, count))
    return sorted(shards, key=lambda shard: (shard.count, shard.index))


def write_record(
    directory: str, record: SuiteRecord, *, force: bool, shard: ShardSpec | None = None
) -> str | None:
    """Write ``bench_all.json`` (a shard's own name when ``shard``).  An earlier run's record
    is moved aside (its new path is returned) when that run finished or with ``force``; an
    unfinished one is refused, so that a new run never hides what ``--resume`` would finish."""
    path, moved = record_path(directory, shard), None
    if os.path.lexists(path):
        if not force and not _finished(directory, shard):
            shard_words = f" --shard {shard}" if shard is not None else ""
            raise UsageError(
                f"{directory} holds an unfinished bench_all.py run ({record_name(shard)}): "
                f"--resume {directory}{shard_words} finishes it, --force moves its record "
                "aside, or choose another --output-dir"
            )
        moved = move_aside(path)
    _write(path, record)
    return moved


def mark_finished(directory: str, record: SuiteRecord, shard: ShardSpec | None = None) -> None:
    """Record that every script of the run ran to its end."""
    _write(record_path(directory, shard), replace(record, finished=True))


def _finished(directory: str, shard: ShardSpec | None) -> bool:
    try:
        return read_record(directory, shard).finished
    except UsageError:  # unreadable: treated as unfinished, never moved without --force
        return False


def _write(path: str, record: SuiteRecord) -> None:
    payload = {
        "program": "bench_all.py",
        "harness_version": HARNESS_VERSION,
        "scripts": list(record.scripts),
        "requests": [asdict(request) for request in record.requests],
        "csv": list(record.csv_names),
        "finished": record.finished,
    }
    temporary = f"{path}.tmp"
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, indent=1)
        handle.write("\n")
    os.replace(temporary, path)  # a kill mid-write leaves the old record, never half of one


def read_record(directory: str, shard: ShardSpec | None = None) -> SuiteRecord:
    """The record of ``directory``'s run (of its shard ``shard``); UsageError if none."""
    path, name = record_path(directory, shard), record_name(shard)
    if not os.path.isfile(path):
        raise UsageError(
            f"--resume {directory}: no {name} there; give the --output-dir of an "
            "interrupted bench_all.py run" + (f" that ran shard {shard}" if shard else "")
        )
    try:
        with open(path, encoding="utf-8") as handle:
            payload = json.load(handle)
        record = SuiteRecord(
            scripts=tuple(map(str, payload["scripts"])),
            csv_names=tuple(map(str, payload["csv"])),
            requests=_requests(payload),
            argv=tuple(map(str, payload.get("argv", ()))),
            finished=payload.get("finished") is True,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UsageError(f"--resume {directory}: unreadable {name} ({exc})") from None
    if len(record.scripts) != len(record.csv_names):
        raise UsageError(f"--resume {directory}: {name} lists scripts and CSVs unevenly")
    if record.requests and len(record.requests) != len(record.scripts):
        raise UsageError(f"--resume {directory}: {name} lists scripts and requests unevenly")
    if not record.requests and "argv" not in payload:
        raise UsageError(f"--resume {directory}: unreadable {name} (no requests)")
    return record


def _requests(payload: dict) -> tuple[SweepRequest, ...]:
    """The recorded requests (none in a record that holds the older ``argv`` instead)."""
    return tuple(SweepRequest.from_fields(fields) for fields in payload.get("requests", ()))


def scripts_in_order(specs: Sequence, record: SuiteRecord) -> list:
    """The specs the record names, in its order (UsageError for a script no spec has)."""
    by_script = {spec.script: spec for spec in specs}
    unknown = [script for script in record.scripts if script not in by_script]
    if unknown:
        raise UsageError(f"{RECORD_NAME} names unknown scripts: {', '.join(unknown)}")
    return [by_script[script] for script in record.scripts]


def resumed_shard(directory: str, launched: ShardSpec | None) -> ShardSpec | None:
    """Which record ``--resume DIR`` without --shard finishes: the launcher's shard's, else
    the plain record, else the one shard record there (UsageError naming them when several)."""
    if launched is not None:
        return launched
    shards = shard_records(directory)
    if os.path.isfile(record_path(directory)) or not shards:
        return None
    if len(shards) > 1:
        raise UsageError(
            f"--resume {directory}: it holds the records of shards "
            f"{', '.join(map(str, shards))}; resume each with --resume {directory} --shard I/N "
            "(or under the launcher that started them)"
        )
    return shards[0]
