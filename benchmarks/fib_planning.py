"""What planning a ``--fib`` sweep costs: a decode dataset of N workloads (8 requests each, page
tables in one safetensors file per workload, q/K/V random) read and selected, on the CPU.

    python benchmarks/fib_planning.py [N]        # default 1000

Prints the time of ``read_dataset`` (JSON only), of the first ``select`` (every page table read
and checked) and of a second one (kept while no file changes).  docs/VALIDATION.md has numbers.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
from safetensors.torch import save_file  # noqa: E402

from fi_attn_bench.apis import decode  # noqa: E402
from fi_attn_bench.fib.dataset import read_dataset  # noqa: E402
from fi_attn_bench.fib.selection import select  # noqa: E402

NAME = "gqa_paged_decode_h4_kv2_d16_ps4"


def _definition() -> dict:
    const = {"num_qo_heads": 4, "num_kv_heads": 2, "head_dim": 16, "page_size": 4}
    axes = {k: {"type": "const", "value": v} for k, v in const.items()}
    axes.update(
        {k: {"type": "var"} for k in ("batch_size", "num_pages", "len_indptr", "num_kv_indices")}
    )
    cache = {"shape": ["num_pages", "page_size", "num_kv_heads", "head_dim"], "dtype": "bfloat16"}
    return {
        "name": NAME, "op_type": "gqa_paged", "axes": axes, "reference": "def run():\n    pass\n",
        "inputs": {"q": {"shape": ["batch_size", "num_qo_heads", "head_dim"], "dtype": "bfloat16"},
                   "k_cache": cache, "v_cache": cache,
                   "kv_indptr": {"shape": ["len_indptr"], "dtype": "int32"},
                   "kv_indices": {"shape": ["num_kv_indices"], "dtype": "int32"}},
        "outputs": {"output": {"shape": ["batch_size", "num_qo_heads", "head_dim"], "dtype": "bfloat16"}},
    }  # fmt: skip


def write(root: Path, count: int, batch: int = 8) -> None:
    (root / "definitions").mkdir(parents=True)
    (root / "definitions" / f"{NAME}.json").write_text(json.dumps(_definition()))
    (root / "workloads").mkdir()
    (root / "blob").mkdir()
    gen = torch.Generator().manual_seed(0)
    with open(root / "workloads" / f"{NAME}.jsonl", "w") as lines:
        for i in range(count):
            pages = torch.randint(1, 9, (batch,), generator=gen)
            indptr = torch.cat([torch.zeros(1, dtype=torch.int64), pages.cumsum(0)]).int()
            used = int(indptr[-1])
            ids = torch.randperm(used + 1, generator=gen)[:used].int()
            save_file(
                {"kv_indptr": indptr, "kv_indices": ids}, str(root / "blob" / f"{i}.safetensors")
            )
            stored = {k: {"type": "safetensors", "path": f"blob/{i}.safetensors", "tensor_key": k}
                      for k in ("kv_indptr", "kv_indices")}  # fmt: skip
            axes = {
                "batch_size": batch,
                "num_pages": used + 1,
                "len_indptr": batch + 1,
                "num_kv_indices": used,
            }
            inputs = {n: {"type": "random"} for n in ("q", "k_cache", "v_cache")}
            workload = {"uuid": f"w{i}", "axes": axes, "inputs": {**inputs, **stored}}
            lines.write(json.dumps({"definition": NAME, "workload": workload}) + "\n")


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    count = int(args[0]) if args else 1000
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "ds"
        write(root, count)
        read = _timed(lambda: read_dataset(str(root)))
        first = _timed(lambda: select(decode.SPEC, str(root), "float16", 16))
        again = _timed(lambda: select(decode.SPEC, str(root), "float16", 16))
    print(
        f"{count} workloads: read_dataset {read:.3f} s, select {first:.3f} s, again {again:.3f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
