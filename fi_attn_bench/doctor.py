"""fi-attn-bench-doctor: a one-minute self-test to run first on a new machine.

It checks, on the device at hand, what the timers rely on (``timing.selfcheck``: the
profiler records a real ``run()``'s kernels, the L2 flush evicts, a CUDA-graph replay runs
every kernel, the queue-ahead spin exists), which run conditions are readable
(``device.telemetry``, ``device.power``) and which FlashInfer API is installed
(``backends.flashinfer_api``).  Each check is pass / fail / unavailable with its evidence.
It writes ``doctor_<UTC time>.md`` and ``.json`` to ``--output-dir``, never over an
existing file, for a bug report.

Exit codes: 0 no check failed (on a machine without GPU or FlashInfer every device check is
unavailable), 1 some check failed, 2 bad arguments or a report that cannot be written.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import inspect
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch

from fi_attn_bench.apis import registry
from fi_attn_bench.backends import flashinfer_api
from fi_attn_bench.device.energy import EnergyAccess, open_energy_counter
from fi_attn_bench.device.power import cuda_device_uuid, open_power_monitor
from fi_attn_bench.device.telemetry import (
    Telemetry,
    open_mxsml,
    open_nvml_telemetry,
    readable_fields,
    visible_index,
)
from fi_attn_bench.doctor_command_line import PROG, DoctorRequest, parse_doctor_command_line
from fi_attn_bench.results.schema import HARNESS_VERSION
from fi_attn_bench.sweep.environment import runtime_version
from fi_attn_bench.timing.l2 import L2Flusher, l2_flush_bytes
from fi_attn_bench.timing.queue import cuda_sync
from fi_attn_bench.timing.selfcheck import (
    CheckResult,
    CheckStatus,
    ProbeCall,
    check_cuda_graph,
    check_cupti_attribution,
    check_device_l2,
    check_profiler_kernels,
    check_spin_kernel,
    matmul_probe,
    second_stream_call,
    timer_verdicts,
    unavailable,
)
from fi_attn_bench.timing.trace import profile_device_events

DEVICE_CHECKS = (
    "profiler_kernels",
    "l2_flush",
    "cuda_graph",
    "cuda_graph_mla",
    "spin_kernel",
    "cupti_attribution",
)
DECODE_CASE = {"batch_size": 16, "seq_len_kv": 1024, "head_dim": 128}  # ~25 us on the H200
# MLA launches a cooperative (persistent) kernel whose capture on MACA is unknown: probed too
MLA_CASE = {"batch_size": 16, "seq_len": 1024, "num_heads": 16}


@dataclass(frozen=True)
class DoctorReport:
    """What the doctor found: where it ran and every check's outcome."""

    created_utc: str
    environment: tuple[tuple[str, str], ...]
    checks: tuple[CheckResult, ...]

    @property
    def exit_code(self) -> int:
        return 1 if any(check.failed for check in self.checks) else 0


def main(argv: Sequence[str] | None = None) -> int:
    asked = parse_doctor_command_line(argv)
    if isinstance(asked, int):
        return asked
    return run(asked)


def run(asked: DoctorRequest) -> int:
    """Every check on the asked device, the summary printed, both reports written."""
    report = diagnose(asked.device)
    print(render_summary(report))
    try:
        markdown, json_path = write_report(report, asked.output_dir)
    except OSError as exc:
        print(f"{PROG}: error: cannot write the report: {exc}", file=sys.stderr)
        return 2
    print(f"\nReports: {markdown}, {json_path}")
    return report.exit_code


def diagnose(device: torch.device, load=flashinfer_api.load_flashinfer) -> DoctorReport:
    """Every check on ``device`` (device checks unavailable without a CUDA device)."""
    created = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    flashinfer, import_error = _import(load)
    api = check_flashinfer_api(flashinfer, import_error)
    why_not = _no_device_reason(device)
    if why_not:
        device_checks = tuple(unavailable(name, why_not) for name in DEVICE_CHECKS)
        checks = (*device_checks, unavailable("telemetry", why_not), api)
        return DoctorReport(created, environment(device, flashinfer), checks)
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    probe = real_probe(device, flashinfer)
    sync = cuda_sync(device)
    power = open_power_monitor(device) is not None
    energy = open_energy_counter(device)
    checks = (
        _guarded("profiler_kernels", lambda: check_profiler_kernels(probe, sync)),
        _guarded("l2_flush", lambda: check_device_l2(L2Flusher(device), device)),
        _guarded("cuda_graph", lambda: check_cuda_graph(probe, device, sync)),
        _guarded("cuda_graph_mla", lambda: check_mla_graph(device, flashinfer, sync)),
        _guarded("spin_kernel", check_spin_kernel),
        _guarded("cupti_attribution", lambda: check_cupti(probe, device, sync)),
        _guarded("telemetry", lambda: check_telemetry(telemetry_sources(device), power, energy)),
        api,
    )
    return DoctorReport(created, environment(device, flashinfer), checks)


def _guarded(name: str, check: Callable[[], CheckResult]) -> CheckResult:
    """A check that raised outside its own handling (out of memory, a device property the
    build lacks) is reported as failed with the exception, never as a traceback."""
    try:
        return check()
    except Exception as exc:  # noqa: BLE001 - the doctor's report is the place for it
        return CheckResult(name, CheckStatus.FAIL, f"the check raised {type(exc).__name__}: {exc}")


def _import(load: Callable[[], object]) -> tuple[object | None, str]:
    try:
        return load(), ""
    except Exception as exc:  # noqa: BLE001 - FlashInferUnavailable or anything a broken install raises
        return None, str(exc)


def _no_device_reason(device: torch.device) -> str:
    if device.type != "cuda":
        return f"no GPU: the device is {device}"
    if not torch.cuda.is_available():
        return "no GPU: torch.cuda.is_available() is False"
    return ""


def real_probe(device: torch.device, flashinfer) -> ProbeCall:
    """A decode case through the installed FlashInfer (what the sweeps time), else a matmul
    whose label says why the decode case could not be used."""
    if flashinfer is None:
        return _fallback(device, "FlashInfer not importable")
    try:
        from fi_attn_bench.apis import decode
        from fi_attn_bench.cases.inputs import prepare_case
        from fi_attn_bench.cases.spec import Settings

        case = decode.decode_case(**DECODE_CASE)
        settings = Settings(device, torch.float16, 16, "flashinfer", seed=0)
        prepared = prepare_case(decode.SPEC, case, settings)
    except Exception as exc:  # noqa: BLE001 - the probe still checks the timers; the label says why
        return _fallback(device, f"the decode case failed: {type(exc).__name__}: {exc}")
    if prepared.output is None:
        return _fallback(device, "the decode wrapper's run() takes no out= buffer")
    case_text = ",".join(f"{k}={v}" for k, v in DECODE_CASE.items())
    label = f"BatchDecodeWithPagedKVCacheWrapper.run() {case_text}, fp16, page 16"
    return ProbeCall(prepared.run, prepared.output, label)


def mla_probe(device: torch.device, flashinfer) -> ProbeCall | str:
    """An MLA case through the installed FlashInfer, or why there is none."""
    if flashinfer is None:
        return "FlashInfer not importable"
    try:
        from fi_attn_bench.apis import mla
        from fi_attn_bench.cases.inputs import prepare_case
        from fi_attn_bench.cases.spec import Settings

        case = mla.mla_case(**MLA_CASE)
        settings = Settings(device, torch.float16, 1, "flashinfer", seed=0)
        prepared = prepare_case(mla.SPEC, case, settings)
    except Exception as exc:  # noqa: BLE001 - the check says why it could not probe
        return f"the MLA case failed: {type(exc).__name__}: {exc}"
    if prepared.output is None:
        return "the MLA wrapper's run() takes no out= buffer"
    case_text = ",".join(f"{k}={v}" for k, v in MLA_CASE.items())
    return ProbeCall(prepared.run, prepared.output, f"{mla.SPEC.api}.run() {case_text}, fp16")


def check_mla_graph(device: torch.device, flashinfer, sync) -> CheckResult:
    """The CUDA-graph check on an MLA call (unavailable without one)."""
    probe = mla_probe(device, flashinfer)
    if isinstance(probe, str):
        return unavailable("cuda_graph_mla", probe)
    found = check_cuda_graph(probe, device, sync)
    return CheckResult("cuda_graph_mla", found.status, found.summary, found.evidence)


def check_cupti(probe: ProbeCall, device: torch.device, sync) -> CheckResult:
    """The CUPTI timer's attribution on the real probe (its split-KV merge kernels
    included), held against the profiler's kernels; unavailable where CUPTI is not."""
    from fi_attn_bench.device import cupti

    if not cupti.cupti_importable():
        return unavailable("cupti_attribution", "no CUDA torch with cupti-python here")
    try:
        tracer, marker = cupti.CuptiTracer(), cupti.MemsetMarker(device)
    except cupti.CuptiUnavailable as exc:
        return unavailable("cupti_attribution", str(exc))
    two_streams = second_stream_call(probe.run, device)
    return check_cupti_attribution(probe, tracer, marker, sync, two_streams, profile_device_events)


def _fallback(device: torch.device, why: str) -> ProbeCall:
    probe = matmul_probe(device)
    return ProbeCall(probe.run, probe.output, f"{probe.label} ({why})")


def environment(device: torch.device, flashinfer) -> tuple[tuple[str, str], ...]:
    facts = [
        ("harness_version", HARNESS_VERSION),
        ("torch", torch.__version__),
        ("runtime", runtime_version() or "none"),
        ("flashinfer", (flashinfer_api.flashinfer_version(flashinfer) or "?") if flashinfer else "not importable"),
        ("device", str(device)),
    ]  # fmt: skip
    if device.type == "cuda" and torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(device)
        facts += [
            ("device name", str(getattr(properties, "name", "?"))),
            ("compute capability", f"{properties.major}.{properties.minor}"),
            ("SMs", str(getattr(properties, "multi_processor_count", "?"))),
            ("L2 flush", l2_flush_bytes(properties)[1]),
        ]
    return tuple(facts)


def telemetry_sources(device: torch.device) -> tuple[tuple[str, Telemetry | None], ...]:
    """Each library the sweeps may read conditions from, opened for ``device`` (None: not)."""
    uuid = cuda_device_uuid(device)
    return (
        ("nvml", open_nvml_telemetry(uuid) if uuid else None),
        ("pymxsml", open_mxsml(visible_index(device.index or 0))),
    )


def energy_text(energy: EnergyAccess) -> str:
    """The doctor's word on the energy columns: readable with the counter's update period,
    or the reason the rows will give."""
    if energy.counter is None:
        return f"unreadable: {energy.reason}"
    return (
        f"readable (NVML), counter updates every {energy.period_s * 1e3:.2f} ms: energy "
        f"windows of >= {energy.window_s * 1e3:.0f} ms"
    )


def check_telemetry(
    sources: Sequence[tuple[str, Telemetry | None]],
    power_readable: bool,
    energy: EnergyAccess | None = None,
) -> CheckResult:
    """Which library answers, each run-condition field it can read, and the energy counter."""
    evidence: list[tuple[str, str]] = []
    readable: list[str] = []
    for name, source in sources:
        if source is None:
            evidence.append((name, "not available (not installed, not initialised, no device)"))
            continue
        fields = readable_fields(source)
        evidence += [(f"{name} {field}", value) for field, value in fields.items()]
        readable += [field for field, value in fields.items() if value != "unreadable"]
    power = "readable (NVML)" if power_readable else "unreadable"
    evidence.append(("power_capped_pct, power_W", power))
    if energy is not None:
        evidence.append(("energy_mJ", energy_text(energy)))
    if not readable:
        return CheckResult(
            "telemetry",
            CheckStatus.UNAVAILABLE,
            "no run condition is readable: those columns stay empty",
            tuple(evidence),
        )
    fields_text = ", ".join(dict.fromkeys(readable))
    return CheckResult("telemetry", CheckStatus.PASS, f"readable: {fields_text}", tuple(evidence))


def _parameters(fn) -> Mapping[str, inspect.Parameter] | None:
    try:
        return inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None


def _signature(fn) -> str:
    try:
        return str(inspect.signature(fn))
    except (TypeError, ValueError):
        return "(not readable)"


def check_flashinfer_api(flashinfer, import_error: str = "") -> CheckResult:
    """Version, the wrappers present, ``backend`` and ``out=`` support, signatures seen."""
    name = "flashinfer_api"
    if flashinfer is None:
        return unavailable(name, f"FlashInfer not importable: {import_error or 'not installed'}")
    evidence = [("version", flashinfer_api.flashinfer_version(flashinfer) or "unknown")]
    present = []
    wrappers = [spec.api for spec in registry.specs()]
    for wrapper in wrappers:
        try:
            cls = flashinfer_api.wrapper_class(flashinfer, wrapper)
        except flashinfer_api.UnsupportedCase:
            evidence.append((wrapper, "absent"))
            continue
        present.append(wrapper)
        evidence += _wrapper_evidence(wrapper, cls)
    testing = "present" if _has_submodule(flashinfer, "testing") else "absent (not needed)"
    evidence.append(("flashinfer.testing", testing))
    status = CheckStatus.PASS if present else CheckStatus.FAIL
    summary = f"{len(present)} of {len(wrappers)} wrappers: {', '.join(present) or 'none'}"
    return CheckResult(name, status, summary, tuple(evidence))


def _wrapper_evidence(wrapper: str, cls: type) -> list[tuple[str, str]]:
    backend = (_parameters(cls.__init__) or {}).get("backend")
    backend_text = (
        "no backend parameter" if backend is None else f"backend={backend.default!r} by default"
    )
    run = getattr(cls, "run", None)
    accepts = run is not None and _parameters(run) is not None
    accepts = accepts and flashinfer_api.run_accepts_out(run)
    return [
        (
            wrapper,
            f"present; {backend_text}; run(out=) {'accepted' if accepts else 'NOT accepted'}",
        ),
        (f"{wrapper}.__init__", _signature(cls.__init__)),
        (f"{wrapper}.plan", _signature(getattr(cls, "plan", None))),
        (f"{wrapper}.run", _signature(run)),
    ]


def _has_submodule(module, name: str) -> bool:
    if hasattr(module, name):
        return True
    with contextlib.suppress(Exception):  # a namespace without a spec, a broken install
        return importlib.util.find_spec(f"{module.__name__}.{name}") is not None
    return False


def render_summary(report: DoctorReport) -> str:
    """The short table printed on the terminal."""
    lines = [f"{'check':<17} {'status':<12} summary"]
    lines += [f"{c.name:<17} {c.status.value:<12} {c.summary}" for c in report.checks]
    lines += ["", *(f"{timer:<30} {verdict}" for timer, verdict in timer_verdicts(report.checks))]
    return "\n".join(lines)


def render_markdown(report: DoctorReport) -> str:
    lines = [
        "# fi-attn-bench doctor report",
        "",
        f"Created {report.created_utc} by `{PROG}` (harness {HARNESS_VERSION}).",
        "",
        "| environment | |",
        "|---|---|",
        *(f"| {key} | {_cell(value)} |" for key, value in report.environment),
        "",
        "| check | status | summary |",
        "|---|---|---|",
        *(f"| {c.name} | **{c.status.value}** | {_cell(c.summary)} |" for c in report.checks),
        "",
        "| timer | on this machine |",
        "|---|---|",
        *(f"| `{timer}` | {verdict} |" for timer, verdict in timer_verdicts(report.checks)),
    ]
    for check in report.checks:
        if check.evidence:
            lines += ["", f"## {check.name}: {check.status.value}", ""]
            lines += [f"- {key}: `{value}`" for key, value in check.evidence]
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def report_json(report: DoctorReport) -> dict[str, object]:
    return {
        "tool": PROG,
        "harness_version": HARNESS_VERSION,
        "created_utc": report.created_utc,
        "environment": dict(report.environment),
        "checks": [
            {
                "name": c.name,
                "status": c.status.value,
                "summary": c.summary,
                "evidence": dict(c.evidence),
            }
            for c in report.checks
        ],
        "timers": dict(timer_verdicts(report.checks)),
        "exit_code": report.exit_code,
    }


def fresh_paths(output_dir: str, stamp: str) -> tuple[str, str]:
    """``doctor_<stamp>.md`` / ``.json``, with ``_2``, ``_3``... until neither exists."""
    base, suffix = os.path.join(output_dir, f"doctor_{stamp}"), 1
    while True:
        name = base if suffix == 1 else f"{base}_{suffix}"
        paths = (f"{name}.md", f"{name}.json")
        if not any(os.path.exists(path) for path in paths):
            return paths
        suffix += 1


def write_report(report: DoctorReport, output_dir: str) -> tuple[str, str]:
    os.makedirs(output_dir, exist_ok=True)
    stamp = report.created_utc.replace("-", "").replace(":", "").rstrip("Z").replace("T", "_")
    markdown, json_path = fresh_paths(output_dir, stamp)
    with open(markdown, "x", encoding="utf-8") as f:  # "x": fails rather than overwrite
        f.write(render_markdown(report))
    with open(json_path, "x", encoding="utf-8") as f:
        json.dump(report_json(report), f, indent=2)
        f.write("\n")
    return markdown, json_path


if __name__ == "__main__":
    raise SystemExit(main())
