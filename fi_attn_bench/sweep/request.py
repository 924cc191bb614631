"""What a sweep is asked to do, parsed once from the command line into a frozen, typed value:
the cases, the implementations, the timing options, the outputs and the shard.  Sharding and
resume make new requests from it (``dataclasses.replace``); nothing edits one in place."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class SweepRequest:
    """One script's command line, option by option (the names and defaults are the parser's,
    ``command_line.build_parser``)."""

    # cases
    preset: str | None
    filter: tuple[str, ...]
    list: bool
    dtype: str
    page_size: int
    seed: int
    workspace_mb: int
    batch: tuple[str, ...]
    workload: tuple[str, ...]
    imbalance: bool
    fib: str | None
    # backend, device, implementations
    backend: str
    device: str | None
    threads: int | None
    impl: tuple[str, ...]
    baseline_impl: str | None
    fail_if_slower: float | None
    same_within: float
    # timing
    timer: str | None
    l2: str | None
    kernel_pattern: str | None
    attribution: str
    min_samples: int
    noise_target: float
    min_time_ms: float
    enough_samples: int
    max_time_per_case: float | None
    stop_rule: str
    sustain_ms: float
    batch_ms: float
    warmup_ms: float
    throttle_policy: str
    throttle_threshold: float
    cooldown_ms: float
    energy: bool
    # checking
    check: bool
    integrity: bool
    judge: bool
    isolation: bool
    rtol: float
    atol: float
    # outputs
    output: str | None
    output_dir: str
    resume: str | None
    force: bool
    samples_dir: str | None
    fib_traces: str | None
    peak_bandwidth: float | None
    peak_tflops: float | None
    verbose: bool
    # shard
    shard: str | None
    shard_by: str
    cost_from: str | None

    @classmethod
    def from_fields(cls, values: Mapping[str, object]) -> SweepRequest:
        """A request from parsed option values (repeatable options become tuples)."""
        names = {field.name for field in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise TypeError(f"options the request does not know: {', '.join(unknown)}")
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})
