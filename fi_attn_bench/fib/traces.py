"""``--fib-traces DIR``: one FlashInfer-Bench Trace per case and implementation, read back from
the sweep's CSV and written into FIB's dataset layout.

``DIR/traces/<op_type>/<definition>.<run_id>.jsonl`` holds the traces (FIB's ``TraceSet.from_path``
reads every ``*.jsonl`` under ``traces/``); the name carries the run id, so a file the user made
is never touched, and a file of that name already there is refused.  The harness's own numbers
that FIB has no field for (the interval of the median, noise, samples, paired ratio and its
interval, the row's repro command) go beside them in ``DIR/fi-attn-bench/<run_id>.jsonl``, a
folder FIB does not read.  Definitions the folder lacks are written there as FIB reads them (``fib.dump``).
"""

from __future__ import annotations

import csv
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from fi_attn_bench.errors import UsageError
from fi_attn_bench.fib.dataset import Dataset, read_dataset
from fi_attn_bench.fib.dump import fib_definition
from fi_attn_bench.fib.mapping import workload_label
from fi_attn_bench.fib.solutions import PREFIX
from fi_attn_bench.results.schema import HARNESS_VERSION

PASSED, INCORRECT_NUMERICAL, INCORRECT_SHAPE = "PASSED", "INCORRECT_NUMERICAL", "INCORRECT_SHAPE"
RUNTIME_ERROR, TIMEOUT = "RUNTIME_ERROR", "TIMEOUT"
SIDE_FOLDER = "fi-attn-bench"
_NUMERIC_ERRORS = ("CorrectnessError", "NonFiniteOutput")


@dataclass(frozen=True)
class Written:
    """What one --fib-traces write produced."""

    traces: int
    files: tuple[str, ...]
    side_file: str

    def describe(self) -> str:
        return f"{self.traces} traces in {len(self.files)} files; intervals in {self.side_file}"


def _number(row: Mapping[str, str], column: str) -> float | None:
    try:
        value = float(row.get(column) or "nan")
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def status_of(row: Mapping[str, str]) -> str:
    """FIB's EvaluationStatus for one of our rows."""
    if row.get("status") == "ok":
        return PASSED
    error_type, error = row.get("error_type", ""), row.get("error", "")
    if error_type in _NUMERIC_ERRORS or row.get("check") == "fail":
        return INCORRECT_SHAPE if "shape mismatch" in error else INCORRECT_NUMERICAL
    if "Timeout" in error_type:
        return TIMEOUT
    return RUNTIME_ERROR


def _correctness(row: Mapping[str, str]) -> dict:
    """FIB's Correctness: we measure the largest absolute error; its relative error is not
    measured (NaN), and our check's terms go in ``extra``."""
    max_abs = _number(row, "max_abs_err")
    extra = {
        k: row.get(k, "")
        for k in ("check", "mismatch_frac", "check_rtol", "check_atol")
        if row.get(k, "")
    }
    return {
        "max_relative_error": "NaN",
        "max_absolute_error": max_abs if max_abs is not None else "NaN",
        "extra": extra,
    }


def _performance(row: Mapping[str, str], baseline: Mapping[str, str] | None) -> dict:
    latency = _number(row, "time_ms") or 0.0
    reference = _number(baseline, "time_ms") if baseline is not None else None
    ratio = _number(row, "paired_ratio")
    if ratio is None and baseline is row:
        ratio = 1.0
    speedup = 1.0 / ratio if ratio else (reference / latency if reference and latency else 0.0)
    return {
        "latency_ms": latency,
        "reference_latency_ms": reference or 0.0,
        "speedup_factor": speedup,
    }


def _environment(row: Mapping[str, str]) -> dict:
    libs = {"fi-attn-bench": HARNESS_VERSION}
    for column, lib in (("torch_version", "torch"), ("flashinfer_version", "flashinfer")):
        if row.get(column):
            libs[lib] = row[column]
    if row.get("runtime"):
        libs["runtime"] = row["runtime"]
    return {"hardware": (row.get("device") or "unknown").replace(" ", "_"), "libs": libs}


def _log(row: Mapping[str, str]) -> str:
    if row.get("status") != "ok":
        return f"{row.get('error_type', '')}: {row.get('error', '')}"[:2000]
    return (
        f"fi-attn-bench: median {row.get('time_ms')} ms over {row.get('samples')} samples, "
        f"noise {row.get('noise_pct')} %, timer {row.get('timer')}, L2 {row.get('l2')}"
    )


def solution_of(row: Mapping[str, str]) -> str:
    """A FIB solution's own name for ``--impl fib:NAME``; the impl's name otherwise."""
    impl = row.get("impl") or "flashinfer"
    return impl[len(PREFIX) :] if impl.startswith(PREFIX) else impl


def trace_of(row: Mapping[str, str], baseline: Mapping[str, str] | None, workload: dict) -> dict:
    """One FIB Trace (a JSON-ready dict) for one row."""
    status = status_of(row)
    evaluation = {
        "status": status,
        "environment": _environment(row),
        "timestamp": row.get("timestamp_utc") or "unknown",
        "log": _log(row),
    }
    if status in (PASSED, INCORRECT_NUMERICAL):
        evaluation["correctness"] = _correctness(row)
    if status == PASSED:
        evaluation["performance"] = _performance(row, baseline)
    return {
        "definition": workload["definition"],
        "workload": workload["workload"],
        "solution": solution_of(row),
        "evaluation": evaluation,
    }


SIDE_COLUMNS = (
    "time_ms", "samples", "noise_pct", "drift_pct", "time_min_ms", "time_q1_ms", "time_q3_ms",
    "time_max_ms", "paired_ratio", "paired_ratio_lo", "paired_ratio_hi", "paired_verdict",
    "paired_rounds", "baseline_impl", "integrity", "repro", "run_id",
)  # fmt: skip


def _workloads_json(dataset: Dataset) -> dict[str, dict]:
    """Each workload's label -> its definition name and the workload as FIB wrote it."""
    out = {}
    for path in sorted({w.where.rsplit(":", 1)[0] for w in dataset.workloads}):
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    record = json.loads(line)
                    body = record["workload"]
                    out[workload_label(record["definition"], body["uuid"])] = {
                        "definition": record["definition"],
                        "workload": body,
                    }
    return out


def _rows(csv_path: str) -> list[dict[str, str]]:
    with open(csv_path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _baselines(rows: Iterable[dict[str, str]]) -> dict[str, dict[str, str]]:
    """Each workload's baseline row: the impl named by baseline_impl, else the first row."""
    found: dict[str, dict[str, str]] = {}
    for row in rows:
        label = row.get("workload", "")
        if row.get("impl") == (row.get("baseline_impl") or row.get("impl")):
            found.setdefault(label, row)
    return found


def _new_file(path: str, lines: list[str]) -> None:
    """Write ``path`` only if it does not exist (refusing, never overwriting); a write that
    fails leaves no partial file."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "x", encoding="utf-8") as handle:
            try:
                handle.writelines(line + "\n" for line in lines)
            except BaseException:
                handle.close()
                os.remove(path)
                raise
    except FileExistsError:
        raise UsageError(f"--fib-traces: {path} exists; it is never overwritten") from None
    except OSError as exc:
        raise UsageError(
            f"--fib-traces: cannot write {path} ({exc.strerror or exc}); the CSV is kept: "
            "write the traces with --resume CSV --fib DIR --fib-traces DIR"
        ) from None


def _copy_definitions(dataset: Dataset, folder: str, names: Iterable[str]) -> None:
    """The traces' definitions into ``folder`` where it lacks them (TraceSet links by name), in
    the form FIB's schema accepts (``fib.dump``)."""
    for name in sorted(set(names)):
        definition = dataset.definitions[name]
        target = os.path.join(folder, "definitions", definition.op_type, f"{name}.json")
        if os.path.realpath(target) == os.path.realpath(definition.path):
            continue
        if not os.path.exists(target):
            with open(definition.path, encoding="utf-8") as handle:
                record = fib_definition(json.load(handle))
            _new_file(target, [json.dumps(record, indent=2)])


def write_traces(csv_path: str, folder: str, dataset_dir: str) -> Written:
    """The traces of every row of ``csv_path`` whose case is a workload of ``dataset_dir``."""
    dataset = read_dataset(dataset_dir)
    workloads = _workloads_json(dataset)
    rows = [r for r in _rows(csv_path) if r.get("workload") in workloads]
    baselines = _baselines(rows)
    run_id = next((r["run_id"] for r in rows if r.get("run_id")), "run")
    by_file: dict[str, list[str]] = {}
    side = []
    for row in rows:
        workload = workloads[row["workload"]]
        trace = trace_of(row, baselines.get(row["workload"]), workload)
        op_type = dataset.definitions[trace["definition"]].op_type
        path = os.path.join(folder, "traces", op_type, f"{trace['definition']}.{run_id}.jsonl")
        by_file.setdefault(path, []).append(json.dumps(trace))
        extras = {k: row.get(k, "") for k in SIDE_COLUMNS if row.get(k, "")}
        side.append(json.dumps({"definition": trace["definition"], "workload": workload["workload"]["uuid"],
                                "solution": trace["solution"], **extras}))  # fmt: skip
    side_path = os.path.join(folder, SIDE_FOLDER, f"{run_id}.jsonl")
    for path, lines in by_file.items():
        _new_file(path, lines)
    _new_file(side_path, side)
    _copy_definitions(dataset, folder, (workloads[r["workload"]]["definition"] for r in rows))
    return Written(len(rows), tuple(sorted(by_file)), side_path)
