"""The FlashInfer-Bench round trip on a GPU, in one command (docs/FIB.md):

    python benchmarks/fib_round_trip.py OUT_DIR

1. calls FlashInfer's four wrappers once each (decode, paged and ragged prefill, MLA decode, on
   the scripts' own inputs, bfloat16, page size 16) with ``FLASHINFER_TRACE_DUMP=1``, so that
   FlashInfer writes its Definitions into ``OUT_DIR/dumps``;
2. builds a FIB dataset from them in ``OUT_DIR/dataset``: the dumped definitions made FIB-valid
   (``fi_attn_bench.fib.dump``), one workload per call with the call's tensors in safetensors,
   and three decode solutions: Python (torch), Triton, and a wrong Python one;
3. runs each script with ``--fib`` and ``--fib-traces`` (decode head to head: flashinfer against
   the three solutions), CSVs and logs in ``OUT_DIR``;
4. loads the traces with ``flashinfer_bench.TraceSet.from_path`` and writes
   ``OUT_DIR/round_trip.json``: what each step gave.  Exit 0 when every step did what it should
   (the wrong solution's rows failing is what it should do).

Steps 2-4 run on the CPU in ``tests/test_fib_round_trip.py``, on dumps built as FlashInfer
writes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from fi_attn_bench.apis import decode, mla, prefill_paged, prefill_ragged  # noqa: E402
from fi_attn_bench.cases.spec import BenchmarkSpec, Settings  # noqa: E402
from fi_attn_bench.command_line import main_for  # noqa: E402
from fi_attn_bench.fib.dataset import parse_definition  # noqa: E402
from fi_attn_bench.fib.dump import fib_definition  # noqa: E402
from fi_attn_bench.fib.mapping import Mapped, classify  # noqa: E402
from fi_attn_bench.fib.solutions import fib_argument  # noqa: E402

PAGE_SIZE = 16
DTYPE = torch.bfloat16
SCALES = {
    decode.SPEC.script: decode.scale_of,
    prefill_paged.SPEC.script: prefill_paged.scale_of,
    prefill_ragged.SPEC.script: prefill_ragged.scale_of,
    mla.SPEC.script: mla.scale_of,
}
# Lengths are whole pages: FIB's definitions have no last-page length (every page is full).
CALLS: tuple[tuple[BenchmarkSpec, dict[str, int]], ...] = (
    (decode.SPEC, {"batch_size": 4, "seq_len_q": 1, "seq_len_kv": 512,
                   "num_qo_heads": 32, "num_kv_heads": 8, "head_dim": 128}),
    (prefill_paged.SPEC, {"batch_size": 2, "seq_len": 256, "num_qo_heads": 32,
                          "num_kv_heads": 8, "head_dim": 128}),
    (prefill_ragged.SPEC, {"batch_size": 2, "seq_len": 256, "num_qo_heads": 32,
                           "num_kv_heads": 8, "head_dim_qk": 128, "head_dim_vo": 128}),
    (mla.SPEC, {"batch_size": 4, "seq_len": 512, "num_heads": 16, "head_dim_ckv": 512,
                "head_dim_kpe": 64}),
)  # fmt: skip


@dataclass(frozen=True)
class Call:
    """One wrapper call: its script, case and the very inputs FlashInfer read."""

    spec: BenchmarkSpec
    case: dict
    inputs: object


def make_calls(device: torch.device, calls=CALLS) -> list[Call]:
    made = []
    for seed, (spec, case) in enumerate(calls):
        settings = Settings(device, DTYPE, PAGE_SIZE, "flashinfer", seed)
        made.append(Call(spec, dict(case), spec.make_inputs(case, settings)))
    return made


def dump_definitions(calls: Sequence[Call], dump_dir: Path, device: torch.device) -> list[str]:
    """Each call through FlashInfer with FLASHINFER_TRACE_DUMP on; the files it wrote."""
    os.environ["FLASHINFER_TRACE_DUMP"] = "1"
    os.environ["FLASHINFER_TRACE_DUMP_DIR"] = str(dump_dir)
    for call in calls:
        settings = Settings(device, DTYPE, PAGE_SIZE, "flashinfer", 0)
        prepared = call.spec.prepare(call.case, settings, call.inputs)
        prepared.run()
        torch.cuda.synchronize(device)
    return sorted(p.name for p in dump_dir.glob("*.json"))


def _definitions(dump_dir: Path) -> list[tuple[dict, Mapped]]:
    found = []
    for path in sorted(dump_dir.glob("*.json")):
        record = fib_definition(json.loads(path.read_text()))
        mapped = classify(parse_definition(record, str(path)))
        if isinstance(mapped, Mapped):
            found.append((record, mapped))
    return found


def not_measured(dump_dir: Path) -> list[str]:
    """The dumped definitions no script measures, each with the reason."""
    found = []
    for path in sorted(dump_dir.glob("*.json")):
        mapped = classify(parse_definition(fib_definition(json.loads(path.read_text())), str(path)))
        if not isinstance(mapped, Mapped):
            found.append(f"{mapped.definition.name}: {mapped.reason}")
    return found


def _match(call: Call, definitions: list[tuple[dict, Mapped]]) -> tuple[dict, Mapped] | None:
    for record, mapped in definitions:
        same_heads = all(call.case.get(k) == v for k, v in mapped.heads.items())
        if mapped.kind.script == call.spec.script and same_heads:
            return record, mapped
    return None


def _workload(call: Call, record: dict, uuid: str, root: Path) -> dict:
    """The call's tensors saved under ``root/blob`` and its workload line."""
    from safetensors.torch import save_file

    tensors, inputs, axes = {}, {}, {}
    for name, spec in record["inputs"].items():
        value = fib_argument(call.inputs, name)
        if name == "sm_scale":
            inputs[name] = {
                "type": "scalar",
                "value": SCALES[call.spec.script](call.case, call.inputs),
            }
        elif isinstance(value, torch.Tensor):
            tensors[name] = value.detach().to("cpu").contiguous()
            for axis, size in zip(spec["shape"] or (), value.shape, strict=True):
                if record["axes"][axis]["type"] == "var":
                    axes[axis] = int(size)
    relative = f"blob/workloads/{record['name']}/{uuid}.safetensors"
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(root / relative))
    for name in tensors:
        inputs[name] = {"type": "safetensors", "path": relative, "tensor_key": name}
    workload = {"uuid": uuid, "axes": axes, "inputs": inputs}
    return {
        "definition": record["name"],
        "workload": workload,
        "solution": None,
        "evaluation": None,
    }


def build_dataset(dump_dir: Path, calls: Sequence[Call], root: Path) -> dict[str, str]:
    """``root`` as a FIB dataset of the dumped definitions and one workload per call;
    returns each call's definition name (or why it has none)."""
    definitions = _definitions(dump_dir)
    matched = {}
    for number, call in enumerate(calls):
        found = _match(call, definitions)
        if found is None:
            matched[call.spec.script] = "no dumped definition matches the call"
            continue
        record, mapped = found
        op_dir = mapped.definition.op_type
        target = root / "definitions" / op_dir / f"{record['name']}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(record, indent=2))
        line = _workload(call, record, f"call-{number}", root)
        lines = root / "workloads" / op_dir / f"{record['name']}.jsonl"
        lines.parent.mkdir(parents=True, exist_ok=True)
        with lines.open("a") as handle:
            handle.write(json.dumps(line) + "\n")
        matched[call.spec.script] = record["name"]
    return matched


PYTHON_DECODE = """
import torch

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, *rest):
    output = next(t for t in rest if isinstance(t, torch.Tensor) and t.shape == q.shape)
    group = q.shape[1] // k_cache.shape[2]
    for b in range(q.shape[0]):
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = k_cache[pages].flatten(0, 1).float().repeat_interleave(group, dim=1)
        v = v_cache[pages].flatten(0, 1).float().repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", q[b].float(), k) * sm_scale
        output[b] = torch.einsum("ht,thd->hd", scores.softmax(-1), v).to(output.dtype)
    WRONG
"""

TRITON_DECODE = """
import torch
import triton
import triton.language as tl


@triton.jit
def _decode(q, k, v, indptr, indices, out, scale, s_qb, s_qh, s_kp, s_kt, s_kh, s_ob, s_oh,
            GROUP: tl.constexpr, PAGE: tl.constexpr, D: tl.constexpr):
    b = tl.program_id(0)
    h = tl.program_id(1)
    d = tl.arange(0, D)
    t = tl.arange(0, PAGE)
    qv = tl.load(q + b * s_qb + h * s_qh + d).to(tl.float32)
    start = tl.load(indptr + b)
    end = tl.load(indptr + b + 1)
    m = tl.full([], float("-inf"), tl.float32)
    l = tl.full([], 0.0, tl.float32)
    acc = tl.zeros([D], dtype=tl.float32)
    for i in range(start, end):
        page = tl.load(indices + i).to(tl.int64)
        offs = page * s_kp + t[:, None] * s_kt + (h // GROUP) * s_kh + d[None, :]
        s = tl.sum(tl.load(k + offs).to(tl.float32) * qv[None, :], axis=1) * scale
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        acc = acc * alpha + tl.sum(p[:, None] * tl.load(v + offs).to(tl.float32), axis=0)
        l = l * alpha + tl.sum(p, axis=0)
        m = m_new
    tl.store(out + b * s_ob + h * s_oh + d, (acc / l).to(out.dtype.element_ty))


def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, *rest):
    output = next(t for t in rest if isinstance(t, torch.Tensor) and t.shape == q.shape)
    batch, heads, dim = q.shape
    _decode[(batch, heads)](
        q, k_cache, v_cache, kv_indptr, kv_indices, output, float(sm_scale),
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        output.stride(0), output.stride(1),
        GROUP=heads // k_cache.shape[2], PAGE=k_cache.shape[1], D=dim,
    )
"""


def write_solutions(root: Path, definition: str) -> list[str]:
    """Three decode solutions of ``definition``: Python, Triton, and a wrong Python one."""
    sources = {
        "py_decode": ("python", PYTHON_DECODE.replace("WRONG", "return None")),
        "triton_decode": ("triton", TRITON_DECODE),
        "py_decode_wrong": ("python", PYTHON_DECODE.replace("WRONG", "output.mul_(1.5)")),
    }
    (root / "solutions").mkdir(parents=True, exist_ok=True)
    for name, (language, code) in sources.items():
        solution = {
            "name": name, "definition": definition, "author": "fi-attn-bench",
            "spec": {"language": language, "target_hardware": ["cuda"],
                     "entry_point": "main.py::run", "destination_passing_style": True},
            "sources": [{"path": "main.py", "content": code}],
        }  # fmt: skip
        (root / "solutions" / f"{name}.json").write_text(json.dumps(solution, indent=2))
    return list(sources)


def run_scripts(
    root: Path, out: Path, device: str, impls: dict[str, list[str]], in_process: bool = False
) -> dict[str, int]:
    """Each script with --fib and --fib-traces (its own --impl words), as a user runs it
    (``in_process``: through ``main_for`` in this process, sparing the tests four starts);
    exit codes by script."""
    codes = {}
    for spec in (decode.SPEC, prefill_paged.SPEC, prefill_ragged.SPEC, mla.SPEC):
        words = ["--fib", str(root), "--device", device, "--fib-traces", str(out / "traces")]
        words += ["--output", str(out / f"{spec.script[:-3]}.csv")]
        words += [w for impl in impls.get(spec.script, []) for w in ("--impl", impl)]
        if device == "cpu":
            words += ["--max-time-per-case", "0.05", "--min-samples", "3"]
        with open(out / f"{spec.script[:-3]}.log", "w") as log:
            if in_process:
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    codes[spec.script] = main_for(spec, words)
            else:
                argv = [sys.executable, str(ROOT / spec.script), *words]
                run = subprocess.run(argv, stdout=log, stderr=subprocess.STDOUT)
                codes[spec.script] = run.returncode
    return codes


def load_traces(folder: Path) -> dict:
    """What flashinfer_bench reads back: per definition, each solution's statuses."""
    try:
        from flashinfer_bench import TraceSet
    except ImportError as exc:
        return {
            "error": f"flashinfer_bench not importable ({exc}): pip install --no-deps flashinfer-bench"
        }
    loaded = TraceSet.from_path(str(folder))
    statuses = {
        name: sorted(f"{t.solution}:{t.evaluation.status.value}" for t in traces)
        for name, traces in loaded.traces.items()
    }
    return {"summary": loaded.summary(), "statuses": statuses}


def round_trip(
    out: Path,
    dump_dir: Path,
    calls: Sequence[Call],
    device: str,
    impls: dict[str, list[str]],
    in_process: bool = False,
) -> dict:
    """Steps 2-4 on dumps already in ``dump_dir``."""
    root = out / "dataset"
    matched = build_dataset(dump_dir, calls, root)
    decode_name = matched.get(decode.SPEC.script, "")
    solutions = write_solutions(root, decode_name) if decode_name.startswith("gqa") else []
    codes = run_scripts(root, out, device, impls, in_process)
    return {"definitions": matched, "not_measured": not_measured(dump_dir),
            "solutions": solutions, "exit_codes": codes,
            "traces": load_traces(out / "traces")}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 1 or not torch.cuda.is_available():
        print(
            "usage: python benchmarks/fib_round_trip.py OUT_DIR  (on a GPU with FlashInfer)",
            file=sys.stderr,
        )
        return 2
    out = Path(args[0])
    if out.exists() and any(out.iterdir()):
        print(f"error: {out} is not empty; give a new folder", file=sys.stderr)
        return 2
    dump_dir = out / "dumps"
    dump_dir.mkdir(parents=True)
    device = torch.device("cuda")
    calls = make_calls(device)
    try:
        dumped = dump_definitions(calls, dump_dir, device)
    except Exception as exc:  # noqa: BLE001 - recorded: FlashInfer missing or failing
        return _stopped(out, f"FlashInfer calls failed: {type(exc).__name__}: {exc}")
    if not dumped:
        return _stopped(out, "FlashInfer wrote no definition (FLASHINFER_TRACE_DUMP needs 0.7+)")
    impls = {
        decode.SPEC.script: [
            "flashinfer",
            "fib:py_decode",
            "fib:triton_decode",
            "fib:py_decode_wrong",
        ]
    }
    result = {"dumped": dumped, **round_trip(out, dump_dir, calls, "cuda", impls)}
    (out / "round_trip.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    return 0 if passed(result) else 1


def _stopped(out: Path, why: str) -> int:
    (out / "round_trip.json").write_text(json.dumps({"error": why}, indent=2))
    print(f"error: {why}", file=sys.stderr)
    return 1


def passed(result: dict) -> bool:
    """Every script mapped and ran; decode's only failures are the wrong solution's."""
    statuses = result["traces"].get("statuses", {})
    if not statuses or any("no dumped" in v for v in result["definitions"].values()):
        return False
    failing = [s for v in statuses.values() for s in v if not s.endswith(":PASSED")]
    expected = all(s.startswith("py_decode_wrong:") for s in failing)
    codes_ok = all(c in (0, 1) for c in result["exit_codes"].values())
    return expected and codes_ok


if __name__ == "__main__":
    sys.exit(main())
