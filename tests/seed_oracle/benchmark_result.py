"""Shared result schema and helpers for FlashInfer benchmarks."""

import math


SCHEMA_VERSION = "1"
STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_LEGACY_OK = "legacy_inferred_ok"

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


def _validate_metric(name, value, *, positive=False):
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if positive and number <= 0:
        raise ValueError(f"{name} must be greater than zero, got {value!r}")
    if not positive and number < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return number


def execute_benchmark_case(api, case, benchmark_fn):
    """Execute one benchmark case and return a schema-v1 result record."""
    conflicting = RESERVED_COLUMNS.intersection(case)
    if conflicting:
        names = ", ".join(sorted(conflicting))
        raise ValueError(f"case fields use reserved result columns: {names}")

    record = {
        "schema_version": SCHEMA_VERSION,
        "api": api,
        **case,
    }

    try:
        time_ms, io_bytes, flops = benchmark_fn()
        time_ms = _validate_metric("time_ms", time_ms, positive=True)
        io_bytes = _validate_metric("io_bytes", io_bytes)
        flops = _validate_metric("flops", flops)
        bandwidth = _validate_metric(
            "bandwidth_GB_s", io_bytes / time_ms / 1e6
        )
        tflops = _validate_metric("tflops", flops / time_ms / 1e9)
    except Exception as exc:
        return {
            **record,
            "status": STATUS_FAILED,
            "time_ms": "",
            "bandwidth_GB_s": "",
            "tflops": "",
            "error_type": type(exc).__name__,
            "error": str(exc),
        }

    return {
        **record,
        "status": STATUS_OK,
        "time_ms": time_ms,
        "bandwidth_GB_s": bandwidth,
        "tflops": tflops,
        "error_type": "",
        "error": "",
    }


def has_failures(records):
    """Return whether a collection contains at least one failed case."""
    return any(record.get("status") == STATUS_FAILED for record in records)

