"""Schema-v1 benchmark result records: the one registry of CSV columns.

The benchmark scripts (writer) and ``summarize_results.py`` (reader) both take column
names, roles and validation rules from here, so a column is defined exactly once.

A schema-v1 row is ``schema_version, api, <case parameters...>, status, time_ms,
bandwidth_GB_s, tflops, error_type, error`` optionally followed by registered
*optional columns* (statistics, how it was measured, environment, correctness,
roofline).  Every column that is neither a result column nor a registered optional
column is a *case parameter*: together with ``api`` the case parameters identify a
case.  This module imports only the standard library: the summarizer must run
without torch.
"""

from __future__ import annotations

import contextlib
import csv
import enum
import io
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

SCHEMA_VERSION = "1"
# The harness's version, stamped on every row (``harness_version``) and the package's version
# (pyproject.toml reads it from here).  Bumped whenever what ``time_ms`` means changes, so
# the summarizer can warn when a baseline was measured another way (history: docs/DESIGN.md).
HARNESS_VERSION = "0.6.0"
# What a row of this harness that carries no ``harness_version`` was measured with.
UNRECORDED_HARNESS_VERSION = "before 0.2.0 (not recorded)"

STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_LEGACY_OK = "legacy_inferred_ok"
# How a ``notes`` entry marking a noisy row begins ("noisy: noise 12.3% > target 1% ...").
NOISY_NOTE = "noisy:"

NUMERIC_COLUMNS = ("time_ms", "bandwidth_GB_s", "tflops")
RESULT_COLUMNS = (
    "schema_version",
    "api",
    "status",
    *NUMERIC_COLUMNS,
    "error_type",
    "error",
)
RESERVED_COLUMNS = frozenset((*RESULT_COLUMNS, "_source"))


class Role(enum.Enum):
    """What an optional column tells; none of them identifies a case."""

    STATISTIC = "statistic"
    MEASUREMENT = "measurement"
    ENVIRONMENT = "environment"
    CORRECTNESS = "correctness"
    ROOFLINE = "roofline"
    PAIRED = "paired"  # head-to-head statistics against the baseline implementation
    WORKLOAD = "workload"  # the shape of a varied-length batch
    CONDITIONS = "conditions"  # clocks, temperature and throttling while the case ran


class Compare(enum.Enum):
    """What a difference in a column between a baseline and a candidate means.

    MUST_MATCH (timer, l2, dtype, page_size, backend, check_rtol, check_atol): what is
    computed or how it is timed; a matched case whose two rows differ makes the summarizer
    exit 2 unless --allow-difference names the column.  WARN (device, compute_capability,
    runtime, torch_version, flashinfer_version, harness_version, host): the machine or the
    software stack; a warning.  FREE: everything else, among them preset and filter (which
    cases ran: a case is matched by its parameters, the rest show as missing or new),
    kernels and resolved_backend (what the code under test launched), git_commit and
    git_dirty (the code under test), statistics and run conditions (measured).  Case
    parameters are not here: they identify the case.
    """

    FREE = "free"  # expected to differ (the code under test, when, where in the sweep)
    MUST_MATCH = "must match"  # changes what is computed or how it is timed: no comparison
    WARN = "warn"  # another machine or software stack: compared, with a warning


class Kind(enum.Enum):
    """How a non-empty cell of a column is validated."""

    TEXT = "text"
    COUNT = "count"  # integer >= 1
    POSITIVE = "positive"  # finite float > 0
    NON_NEGATIVE = "non_negative"  # finite float >= 0
    CHOICE = "choice"  # one of Column.choices
    FINITE = "finite"  # any finite float
    NON_NEGATIVE_INT = "non_negative_int"  # integer >= 0


@dataclass(frozen=True)
class Column:
    """One registered optional column: name, role, validation kind and meaning."""

    name: str
    role: Role
    kind: Kind
    description: str
    choices: tuple[str, ...] = ()
    compare: Compare = Compare.FREE  # see Compare; the one list of comparability rules

    def check(self, text: str) -> str | None:
        """Return why a non-empty cell is invalid, or None when it is valid."""
        return _check_cell(self, text)


CPU_TIMER = "wall"  # the wall clock of the torch reference on the CPU
TIMERS = ("cupti", "profiler", "cuda_graph", "events", CPU_TIMER)
L2_MODES = ("warm", "cold")
BACKENDS = ("flashinfer", "torch")  # the backend column's values: the implementation kind
CHECK_OUTCOMES = ("pass", "fail", "skipped")
# The integrity checks (fi_attn_bench.timing.integrity), named in the ``integrity`` column
# of a row one of them failed.
FRESH_INPUTS = "fresh_inputs"  # the output on new input values, written in place, is wrong
FRESH_INPUTS_TIME = "fresh_inputs_time"  # a call on new values is far slower than the timed
TIMED_OUTPUT = "timed_output"  # a poisoned timed call's output is wrong
TIMELINE = "timeline"  # run()'s output was unfinished when it returned (other stream, thread)
GRAPH_CAPTURE = "graph_capture"  # a CUDA-graph replay runs other kernels than an eager call
INTEGRITY_CHECKS = (FRESH_INPUTS, FRESH_INPUTS_TIME, TIMED_OUTPUT, TIMELINE, GRAPH_CAPTURE)
SOURCE_SCREEN = "source_screen"  # --judge: the plugin's source reaches into the harness
INPUTS_WRITTEN = "inputs_written"  # a timed call wrote into its inputs (fresh values changed)
INTEGRITY_CHECKS = (*INTEGRITY_CHECKS, SOURCE_SCREEN, INPUTS_WRITTEN)
# What the sweep holds a plugin worker's report against (fi_attn_bench.sweep.isolation).
TIMER_IDENTITY = "timer_identity"  # a timer or profiler function was replaced during the case
OWN_CLOCK = "own_clock"  # the samples disagree with the harness's own clock for the batches
WORK_FLOOR = "work_floor"  # faster than the case's bytes and FLOPs at the device's peaks allow
PAIRED_RATIO = "paired_ratio"  # the medians' ratio and the paired ratio disagree
WORKER_CHECKS = (TIMER_IDENTITY, OWN_CLOCK, WORK_FLOOR, PAIRED_RATIO)
INTEGRITY_PASS, INTEGRITY_OFF = "pass", "off"
# passed the weaker set: the timer cannot refresh inputs before each timed call (events,
# cuda_graph, profiler), so only today's after-loop checks ran
INTEGRITY_PASS_WEAK = "pass_weak"
INTEGRITY_OUTCOMES = (
    INTEGRITY_PASS,
    INTEGRITY_PASS_WEAK,
    INTEGRITY_OFF,
    *INTEGRITY_CHECKS,
    *WORKER_CHECKS,
)
VERDICTS = ("faster", "slower", "same")

# Identity columns added after schema v1 first shipped: a row without one reads as its default,
# so baselines written before the column existed still match the same cases.
IMPL_COLUMN = "impl"  # which implementation a row measured (--impl); written by the sweep only
IDENTITY_DEFAULTS: Mapping[str, str] = {IMPL_COLUMN: "flashinfer", "workload": ""}

_MUST, _WARN = Compare.MUST_MATCH, Compare.WARN
_S, _M, _E, _C, _R, _P, _W, _K = (
    Role.STATISTIC,
    Role.MEASUREMENT,
    Role.ENVIRONMENT,
    Role.CORRECTNESS,
    Role.ROOFLINE,
    Role.PAIRED,
    Role.WORKLOAD,
    Role.CONDITIONS,
)

# Where a case's wall time went (``sweep.cost``): the same whole-case values on each of its
# rows (a head to head's implementations share one measurement), so a later sweep's --cost-from
# and history read what the case cost, not a model of it.
COST_PHASES: tuple[tuple[str, str], ...] = (
    ("prepare", "input and wrapper set-up, plan() and JIT compiles"),
    ("warm_up", "warm-up and sustain calls"),
    ("calibration", "timer set-up and calibration (profiler sessions of single calls)"),
    ("timed", "time inside timed calls (the samples)"),
    ("l2_flush", "L2 flushes between timed calls (GPU time)"),
    ("readout", "trace readout: profiler stop, event extraction, attribution"),
    ("checks", "output check against the reference and integrity checks"),
    ("other", "the rest: launches, host work between timed calls, bookkeeping"),
)

OPTIONAL_COLUMNS: tuple[Column, ...] = (
    Column("samples", _S, Kind.COUNT, "timed samples behind time_ms (its median)"),
    Column("time_min_ms", _S, Kind.POSITIVE, "fastest sample"),
    Column("time_q1_ms", _S, Kind.POSITIVE, "first quartile of the samples"),
    Column("time_q3_ms", _S, Kind.POSITIVE, "third quartile of the samples"),
    Column("time_max_ms", _S, Kind.POSITIVE, "slowest sample"),
    Column("noise_pct", _S, Kind.NON_NEGATIVE, "interquartile range / median, in %"),
    Column(
        "drift_pct",
        _S,
        Kind.NON_NEGATIVE,
        "95% half-width of the median judged from consecutive blocks of the samples "
        "(fi_attn_bench.timing.statistics.DRIFT_BLOCKS), in %: "
        "how far stretches at another GPU clock may move time_ms between runs",
    ),
    Column(
        "power_capped_pct",
        _S,
        Kind.NON_NEGATIVE,
        "share of the case's measurement that the GPU spent clocked down by its power limit "
        "(NVML), in %: where high, time_ms follows the limiter and the temperature",
    ),
    Column("power_W", _S, Kind.NON_NEGATIVE, "mean board power during the case (NVML), in W"),
    Column("timer", _M, Kind.CHOICE, "how time_ms was measured", TIMERS, compare=_MUST),
    Column("l2", _M, Kind.CHOICE, "L2 cache state before each timed call", L2_MODES, compare=_MUST),
    Column("kernels", _M, Kind.TEXT, "GPU kernels counted in time_ms, ';'-separated"),
    Column("plan_ms", _M, Kind.NON_NEGATIVE, "host time of the wrapper's plan()"),
    Column("io_bytes", _M, Kind.NON_NEGATIVE, "bytes read + written by one run()"),
    Column("flops", _M, Kind.NON_NEGATIVE, "floating-point operations of one run()"),
    Column("dtype", _M, Kind.TEXT, "data type of q/k/v/o", compare=_MUST),
    Column("page_size", _M, Kind.COUNT, "tokens per KV-cache page", compare=_MUST),
    Column("repro", _M, Kind.TEXT, "command line that reruns this case alone"),
    Column(
        "backend", _E, Kind.CHOICE, "attention implementation measured", BACKENDS, compare=_MUST
    ),
    Column("device", _E, Kind.TEXT, "device name", compare=_WARN),
    Column("compute_capability", _E, Kind.TEXT, "device compute capability", compare=_WARN),
    Column("runtime", _E, Kind.TEXT, "CUDA or MACA runtime version", compare=_WARN),
    Column("torch_version", _E, Kind.TEXT, "torch.__version__", compare=_WARN),
    Column("flashinfer_version", _E, Kind.TEXT, "flashinfer.__version__", compare=_WARN),
    Column(
        "harness_version",
        _E,
        Kind.TEXT,
        "fi-attn-bench version that measured the row",
        compare=_WARN,
    ),
    Column("check", _C, Kind.CHOICE, "output checked against the reference", CHECK_OUTCOMES),
    Column("max_abs_err", _C, Kind.NON_NEGATIVE, "largest |output - reference|"),
    Column("mismatch_frac", _C, Kind.NON_NEGATIVE, "share of elements out of tolerance"),
    Column("check_rtol", _C, Kind.NON_NEGATIVE, "relative tolerance of the check", compare=_MUST),
    Column("check_atol", _C, Kind.NON_NEGATIVE, "absolute tolerance of the check", compare=_MUST),
    Column(
        "integrity",
        _C,
        Kind.CHOICE,
        "the timed calls' integrity checks: pass, pass_weak (the timer's weaker set: no fresh "
        "values per timed call), off, or the name of the one that failed",
        INTEGRITY_OUTCOMES,
    ),
    Column("pct_peak_bw", _R, Kind.NON_NEGATIVE, "bandwidth_GB_s as % of the device peak"),
    Column("pct_peak_tflops", _R, Kind.NON_NEGATIVE, "tflops as % of the device peak"),
    # Run metadata (where and from what code the row came).
    Column("host", _E, Kind.TEXT, "host name of the machine that measured the row", compare=_WARN),
    Column("git_commit", _E, Kind.TEXT, "git commit of the code under test, when known"),
    Column("git_dirty", _E, Kind.CHOICE, "uncommitted changes in that checkout", ("yes", "no")),
    Column("timestamp_utc", _E, Kind.TEXT, "when the case finished, UTC, ISO 8601"),
    # The sweep's case selection, so that --resume CSV alone reruns the same cases.
    Column("preset", _M, Kind.TEXT, "case grid the sweep selected its cases from"),
    Column("filter", _M, Kind.TEXT, "the sweep's --filter terms, ','-joined (empty: none)"),
    # Head to head: implementations measured in interleaved rounds against a baseline one.
    Column("baseline_impl", _P, Kind.TEXT, "implementation the paired ratio is taken against"),
    Column("paired_rounds", _P, Kind.COUNT, "interleaved rounds behind the paired ratio"),
    Column(
        "paired_ratio", _P, Kind.POSITIVE, "median over pairs of rounds of time / baseline time"
    ),
    Column("paired_ratio_lo", _P, Kind.POSITIVE, "lower end of the paired ratio's 95% interval"),
    Column("paired_ratio_hi", _P, Kind.POSITIVE, "upper end of the paired ratio's 95% interval"),
    Column(
        "paired_verdict", _P, Kind.CHOICE, "against the baseline, beyond --same-within", VERDICTS
    ),
    Column(
        "resolved_backend",
        _M,
        Kind.TEXT,
        "FlashInfer backend the wrapper ran (what auto resolved to, where the wrapper tells)",
    ),
    # Serving-shaped batches: the shape of a varied-length batch.
    Column("num_requests", _W, Kind.COUNT, "requests in the batch"),
    Column("total_q_tokens", _W, Kind.COUNT, "query tokens over all requests"),
    Column("total_kv_tokens", _W, Kind.COUNT, "KV tokens over all requests"),
    Column("kv_len_min", _W, Kind.COUNT, "shortest KV length of a request"),
    Column("kv_len_mean", _W, Kind.POSITIVE, "mean KV length of a request"),
    Column("kv_len_max", _W, Kind.COUNT, "longest KV length of a request"),
    Column(
        "uniform_twin_ms",
        _W,
        Kind.POSITIVE,
        "time_ms of the uniform batch with as many requests and tokens",
    ),
    Column("imbalance_pct", _W, Kind.FINITE, "how much slower than its uniform twin, in %"),
    # Run conditions, read around the case (never inside timed calls); empty where unreadable.
    Column("sm_clock_mean_MHz", _K, Kind.NON_NEGATIVE, "mean SM clock during the case"),
    Column("sm_clock_min_MHz", _K, Kind.NON_NEGATIVE, "lowest SM clock seen during the case"),
    Column("sm_clock_max_MHz", _K, Kind.NON_NEGATIVE, "the GPU's maximum SM clock"),
    Column("temp_start_C", _K, Kind.FINITE, "GPU temperature when the case started"),
    Column("temp_end_C", _K, Kind.FINITE, "GPU temperature when the case ended"),
    Column("throttle_reasons", _K, Kind.TEXT, "clock throttle reasons seen, ';'-separated"),
    # Sweeps split over processes or GPUs.
    Column(
        "shard", _E, Kind.NON_NEGATIVE_INT, "index of the shard that measured the row (0-based)"
    ),
    Column("num_shards", _E, Kind.COUNT, "shards the sweep was split into"),
    Column(
        "run_id",
        _E,
        Kind.TEXT,
        "the invocation that measured the row: one per sweep, shared by the scripts of one "
        "bench_all.py run and the shards of a launcher's sweep, kept by --resume",
    ),
    Column(
        "cpu_threads",
        _E,
        Kind.COUNT,
        "torch threads a CPU run used (torch.set_num_threads: --threads, default 1)",
    ),
    Column(
        "energy_mJ",
        _S,
        Kind.POSITIVE,
        "GPU energy per run(), in mJ: median over windows of timed batches of the energy "
        "counter's increase (read off its traced steps) / calls (cold L2: the flush's energy "
        "included)",
    ),
    Column(
        "avg_power_W", _S, Kind.POSITIVE, "mean board power over the timed batches (energy / wall)"
    ),
    Column(
        "energy_windows",
        _S,
        Kind.COUNT,
        "windows of timed batches behind energy_mJ, each spanning at least "
        "fi_attn_bench.timing.energy.ENERGY_WINDOW_UPDATES updates of the energy counter",
    ),
    Column("GFLOP_per_J", _S, Kind.NON_NEGATIVE, "flops / energy_mJ, in GFLOP per joule"),
    Column("GB_per_J", _S, Kind.NON_NEGATIVE, "io_bytes / energy_mJ, in GB per joule"),
    Column(
        "paired_energy_ratio",
        _P,
        Kind.POSITIVE,
        "median over pairs of rounds of energy per call / baseline energy per call",
    ),
    Column(
        "paired_energy_ratio_lo",
        _P,
        Kind.POSITIVE,
        "lower end of the paired energy ratio's 95% interval",
    ),
    Column(
        "paired_energy_ratio_hi",
        _P,
        Kind.POSITIVE,
        "upper end of the paired energy ratio's 95% interval",
    ),
    *(
        Column(f"cost_{phase}_s", _E, Kind.NON_NEGATIVE, f"wall seconds of the case's {what}")
        for phase, what in COST_PHASES
    ),
    Column(
        "notes",
        _M,
        Kind.TEXT,
        "what the harness noticed about the row, '; '-separated, e.g. "
        "'noisy: noise 12.3% > target 1% (median_ci)' when the budget ran out first",
    ),
)
OPTIONAL_COLUMN_BY_NAME: Mapping[str, Column] = {c.name: c for c in OPTIONAL_COLUMNS}
OPTIONAL_COLUMN_NAMES: tuple[str, ...] = tuple(OPTIONAL_COLUMN_BY_NAME)
NON_CASE_COLUMNS = frozenset((*RESERVED_COLUMNS, *OPTIONAL_COLUMN_NAMES))
# Columns whose values must be equal for two rows to be compared (what is computed, how timed).
MUST_MATCH_COLUMNS = tuple(
    column for column in OPTIONAL_COLUMNS if column.compare is Compare.MUST_MATCH
)

# Order in which case parameters are shown and written; unknown ones follow by name.
CASE_COLUMN_ORDER = (
    "batch_size",
    "seq_len",
    "seq_len_q",
    "seq_len_kv",
    "num_heads",
    "num_qo_heads",
    "num_kv_heads",
    "head_dim",
    "head_dim_qk",
    "head_dim_vo",
    "head_dim_ckv",
    "head_dim_kpe",
)


def is_case_column(name: str) -> bool:
    """Case parameters are every column that is not a result, optional or internal one."""
    return name not in NON_CASE_COLUMNS and not name.startswith("_")


def case_columns(names: Iterable[str]) -> list[str]:
    """The case parameters among ``names``, in display order."""
    order = {name: index for index, name in enumerate(CASE_COLUMN_ORDER)}
    found = [name for name in names if is_case_column(name)]
    return sorted(found, key=lambda name: (order.get(name, len(order)), name))


# No attention call takes 10,000 s: a larger time_ms (1e308 is finite and positive, so the
# seed's rule passes it) is not a measurement; the summarizer and fi-attn-history refuse it.
MAX_PLAUSIBLE_TIME_MS = 1e7


def _parse_finite(text: str) -> float | None:
    try:
        number = float(text)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _check_cell(column: Column, text: str) -> str | None:
    if column.kind is Kind.TEXT:
        return None
    if column.kind is Kind.CHOICE:
        if text in column.choices:
            return None
        return f"{column.name} must be one of {', '.join(column.choices)}, got {text!r}"
    number = _parse_finite(text)
    if number is None:
        return f"{column.name} must be a finite number, got {text!r}"
    if column.kind is Kind.COUNT and (number < 1 or number != int(number)):
        return f"{column.name} must be a whole number >= 1, got {text!r}"
    if column.kind is Kind.NON_NEGATIVE_INT and (number < 0 or number != int(number)):
        return f"{column.name} must be a whole number >= 0, got {text!r}"
    if column.kind is Kind.POSITIVE and number <= 0:
        return f"{column.name} must be greater than zero, got {text!r}"
    if column.kind is Kind.NON_NEGATIVE and number < 0:
        return f"{column.name} must not be negative, got {text!r}"
    return None


def _validate_metric(name: str, value, *, positive: bool = False) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and number <= 0:
        raise ValueError(f"{name} must be greater than zero, got {value!r}")
    if not positive and number < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return number


def _clean_optional(values: Mapping[str, object] | None) -> dict[str, object]:
    """Keep registered optional columns; drop non-finite numbers (they become empty)."""
    if not values:
        return {}
    unknown = sorted(set(values) - set(OPTIONAL_COLUMN_NAMES))
    if unknown:
        raise ValueError(f"unregistered optional columns: {', '.join(unknown)}")
    cleaned = {}
    for name, value in values.items():
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            value = ""
        cleaned[name] = value
    return cleaned


def check_case_fields(case: Mapping[str, object]) -> None:
    """Case fields may not reuse result or optional column names."""
    conflicting = NON_CASE_COLUMNS.intersection(case)
    if conflicting:
        names = ", ".join(sorted(conflicting))
        raise ValueError(f"case fields use reserved result columns: {names}")


def execute_benchmark_case(
    api: str,
    case: Mapping[str, object],
    benchmark_fn: Callable[[], Sequence],
    metadata: Mapping[str, object] | None = None,
) -> dict:
    """Execute one benchmark case and return a schema-v1 result record (the seed's API).

    ``benchmark_fn()`` returns ``(time_ms, io_bytes, flops)`` or
    ``(time_ms, io_bytes, flops, extra)`` where ``extra`` maps optional column names
    to values.  Any exception (KeyboardInterrupt and SystemExit are not Exceptions)
    or an invalid metric turns the case into a ``failed`` row.  ``metadata`` holds
    optional columns known before the run (environment, timer).
    """
    check_case_fields(case)  # before the run: a misnamed case must not cost a benchmark
    try:
        metrics, extra = _split_outcome(benchmark_fn())
    except Exception as exc:  # noqa: BLE001 - a failed case is data, not a crash
        return result_record(api, case, error=exc, metadata=metadata)
    return result_record(api, case, metrics=metrics, columns=extra, metadata=metadata)


def _split_outcome(outcome) -> tuple[tuple, Mapping[str, object] | None]:
    """(metrics, optional columns) of what ``benchmark_fn`` returned; any other shape
    than three values (or three and a mapping) fails with the seed's unpacking error."""
    if isinstance(outcome, (tuple, list)) and len(outcome) == 4:
        return tuple(outcome[:3]), outcome[3]
    time_ms, io_bytes, flops = outcome
    return (time_ms, io_bytes, flops), None


def result_record(
    api: str,
    case: Mapping[str, object],
    *,
    metrics: Sequence | None = None,
    columns: Mapping[str, object] | None = None,
    metadata: Mapping[str, object] | None = None,
    error: BaseException | None = None,
) -> dict:
    """The one writer of a row's result columns: ``ok`` with the validated ``metrics``
    ``(time_ms, io_bytes, flops)``, or ``failed`` with ``error`` (also when a metric is
    invalid).  ``metadata`` (known before the run) and ``columns`` (measured) are optional
    columns; a failed row keeps those measured before the failure."""
    check_case_fields(case)
    record = {"schema_version": SCHEMA_VERSION, "api": api, **case}
    known = _clean_optional(metadata)
    try:
        measured = _clean_optional(columns)
    except ValueError as exc:
        measured, error = {}, error or exc
    if error is None:
        try:
            values = _result_values(*metrics)
        except Exception as exc:  # noqa: BLE001 - an invalid metric fails the row
            error = exc
        else:
            efficiency = energy_efficiency(metrics[1], metrics[2], measured.get("energy_mJ"))
            return {**record, "status": STATUS_OK, **values, **known, **measured, **efficiency}
    return {
        **record,
        "status": STATUS_FAILED,
        "time_ms": "",
        "bandwidth_GB_s": "",
        "tflops": "",
        "error_type": type(error).__name__,
        "error": str(error),
        **known,
        **measured,
    }


def _result_values(time_ms, io_bytes, flops) -> dict[str, object]:
    time_ms = _validate_metric("time_ms", time_ms, positive=True)
    io_bytes = _validate_metric("io_bytes", io_bytes)
    flops = _validate_metric("flops", flops)
    return {
        "time_ms": time_ms,
        "bandwidth_GB_s": _validate_metric("bandwidth_GB_s", io_bytes / time_ms / 1e6),
        "tflops": _validate_metric("tflops", flops / time_ms / 1e9),
        "error_type": "",
        "error": "",
    }


def energy_efficiency(io_bytes, flops, energy_mj) -> dict[str, float]:
    """GFLOP_per_J and GB_per_J of one run() from its work and energy (none without energy)."""
    joules = _parse_finite(str(energy_mj)) if energy_mj not in (None, "") else None
    if joules is None or joules <= 0:
        return {}
    joules /= 1e3
    return {"GFLOP_per_J": float(flops) / joules / 1e9, "GB_per_J": float(io_bytes) / joules / 1e9}


def append_note(columns: dict[str, object], note: str) -> None:
    """Add one item to a row's ``notes`` (``; ``-separated)."""
    if not note:
        return
    current = str(columns.get("notes") or "")
    columns["notes"] = f"{current}; {note}" if current else note


def has_failures(records: Iterable[Mapping[str, object]]) -> bool:
    """Return whether a collection contains at least one failed case."""
    return any(record.get("status") == STATUS_FAILED for record in records)


def csv_fieldnames(case_fields: Iterable[str]) -> list[str]:
    """The fixed header a writer uses: result columns around the case, then optionals."""
    return [
        "schema_version",
        "api",
        *case_fields,
        "status",
        *NUMERIC_COLUMNS,
        "error_type",
        "error",
        *OPTIONAL_COLUMN_NAMES,
    ]


def format_cell(value: object) -> str:
    """Text of one CSV cell: floats keep full precision, None is empty."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    return str(value)


def _csv_line(cells: Iterable[object]) -> str:
    buffer = io.StringIO()
    texts = [format_cell(cell) for cell in cells]
    # The writer quotes a cell holding its line terminator (\n) but not a bare CR, which
    # every reader takes for a line break: such a line is written with every cell quoted.
    quoting = csv.QUOTE_ALL if any("\r" in str(text) for text in texts) else csv.QUOTE_MINIMAL
    csv.writer(buffer, lineterminator="\n", quoting=quoting).writerow(texts)
    return buffer.getvalue()


class ResultCsvWriter:
    """Append records to a CSV one at a time, each flushed and fsynced.

    A process killed at any moment leaves a valid CSV holding every finished row,
    except possibly a last line cut off mid-write (it has no trailing newline;
    ``results.reader.read_stored_rows`` leaves it out).
    """

    def __init__(self, path: str | os.PathLike, fieldnames: Sequence[str]):
        self.path = os.fspath(path)
        self.fieldnames = list(fieldnames)
        missing = [name for name in RESULT_COLUMNS if name not in self.fieldnames]
        if missing:
            raise ValueError(f"CSV header lacks result columns: {', '.join(missing)}")

    def _row(self, record: Mapping[str, object]) -> str:
        return _csv_line(record.get(name, "") for name in self.fieldnames)

    def write_all(self, records: Iterable[Mapping[str, object]]) -> None:
        """Replace the file with exactly these records (atomic rename)."""
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        temporary = f"{self.path}.tmp{os.getpid()}"
        try:
            with open(temporary, "w", encoding="utf-8", newline="") as handle:
                handle.write(_csv_line(self.fieldnames))
                for record in records:
                    handle.write(self._row(record))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, self.path)
        except BaseException:  # a full disk or Ctrl-C leaves the old file and no temporary
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def append(self, record: Mapping[str, object]) -> None:
        """Append one record; writes the header first when the file is new or empty."""
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        new_file = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        with open(self.path, "a", encoding="utf-8", newline="") as handle:
            if new_file:
                handle.write(_csv_line(self.fieldnames))
            handle.write(self._row(record))
            handle.flush()
            os.fsync(handle.fileno())


class ResultStreamWriter:
    """Append records to an open text stream (``--output -``: stdout), the header first,
    each row flushed so that a reader downstream sees it when the case ends."""

    def __init__(self, stream: io.TextIOBase, fieldnames: Sequence[str]):
        self.stream = stream
        self.fieldnames = list(fieldnames)
        self.started = False

    def append(self, record: Mapping[str, object]) -> None:
        if not self.started:
            self.stream.write(_csv_line(self.fieldnames))
            self.started = True
        self.stream.write(_csv_line(record.get(name, "") for name in self.fieldnames))
        self.stream.flush()
