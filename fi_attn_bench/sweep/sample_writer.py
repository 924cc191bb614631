"""Raw samples of each ok case, for deeper statistics: ``<samples-dir>/<csv-stem>.samples.jsonl.gz``.

gzip JSON Lines, one object per finished ok case (the format agreed with the summarizer)::

    {"api": str, "case": {param: cell text as in the CSV}, "impl": str, "samples_ms": [float, ...]}

plus, for a head-to-head case, ``"round_medians_ms": [float, ...]``: each kept round's median,
in round order (A B, B A, ...), the same count for every implementation of the case.

Each case is appended as its own gzip member, flushed and fsynced, so a killed sweep loses no
finished case; a resumed sweep appends, so a case measured again appears again (the last wins).
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections.abc import Mapping, Sequence

from fi_attn_bench.results.schema import IDENTITY_DEFAULTS, format_cell


def samples_line(
    record: Mapping[str, object],
    fields: Sequence[str],
    samples: Sequence[float],
    round_medians: Sequence[float] = (),
) -> str:
    """One case's JSON line: case cells exactly as the CSV writes them."""
    payload = {
        "api": str(record["api"]),
        "case": {name: format_cell(record[name]) for name in fields},
        "impl": str(record.get("impl") or IDENTITY_DEFAULTS["impl"]),
        "samples_ms": [float(value) for value in samples],
    }
    if round_medians:
        payload["round_medians_ms"] = [float(value) for value in round_medians]
    return json.dumps(payload) + "\n"


def append_samples(path: str, line: str) -> None:
    """Append one line as a new gzip member, on disk before returning."""
    with open(path, "ab") as raw:
        with gzip.GzipFile(fileobj=raw, mode="wb") as member:
            member.write(line.encode("utf-8"))
        raw.flush()
        os.fsync(raw.fileno())


def read_samples(path: str) -> list[dict]:
    """Every complete member's lines; a last member cut off by a kill is dropped."""
    with open(path, "rb") as handle:
        data = handle.read()
    text = []
    while data:
        inflater = zlib.decompressobj(wbits=31)
        try:
            chunk = inflater.decompress(data)
        except zlib.error:
            break
        if not inflater.eof:
            break
        text.append(chunk.decode("utf-8"))
        data = inflater.unused_data
    return [json.loads(line) for line in "".join(text).splitlines() if line.strip()]
