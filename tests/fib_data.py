"""Hand-made FlashInfer-Bench datasets for the tests: definitions in FIB's schema, workloads whose
page tables and some q/K/V are safetensors files written here, a Python solution and a wrong one."""

from __future__ import annotations

import json
import os

import torch
from safetensors.torch import save_file

REFERENCE = "def run(*args):\n    raise NotImplementedError\n"
H, KV, D, PS = 4, 2, 16, 4  # small heads so the CPU reference is quick
CKV, KPE = 32, 8

DECODE = "gqa_paged_decode_h4_kv2_d16_ps4"
PREFILL = "gqa_paged_prefill_causal_h4_kv2_d16_ps4"
RAGGED = "gqa_ragged_prefill_causal_h4_kv2_d16"
MLA = "mla_paged_decode_h4_ckv32_kpe8_ps4"


def _t(shape, dtype="bfloat16"):
    return {"shape": shape, "dtype": dtype}


def _const(value):
    return {"type": "const", "value": value}


VAR = {"type": "var"}


def definitions() -> dict[str, dict]:
    gqa = {"num_qo_heads": _const(H), "num_kv_heads": _const(KV), "head_dim": _const(D)}
    cache = _t(["num_pages", "page_size", "num_kv_heads", "head_dim"])
    out = {"output": _t(["batch_size", "num_qo_heads", "head_dim"])}
    defs = {
        DECODE: {
            "op_type": "gqa_paged",
            "axes": {"batch_size": VAR, **gqa, "num_pages": VAR, "page_size": _const(PS),
                     "len_indptr": VAR, "num_kv_indices": VAR},
            "inputs": {"q": _t(["batch_size", "num_qo_heads", "head_dim"]), "k_cache": cache,
                       "v_cache": cache, "kv_indptr": _t(["len_indptr"], "int32"),
                       "kv_indices": _t(["num_kv_indices"], "int32"),
                       "sm_scale": _t(None, "float32")},
            "outputs": out,
        },
        PREFILL: {
            "op_type": "gqa_paged",
            "axes": {**gqa, "page_size": _const(PS), "len_indptr": VAR, "total_q": VAR,
                     "num_kv_indices": VAR, "num_pages": VAR},
            "inputs": {"q": _t(["total_q", "num_qo_heads", "head_dim"]), "k_cache": cache,
                       "v_cache": cache, "qo_indptr": _t(["len_indptr"], "int32"),
                       "kv_indptr": _t(["len_indptr"], "int32"),
                       "kv_indices": _t(["num_kv_indices"], "int32"),
                       "sm_scale": _t(None, "float32")},
            "outputs": {"output": _t(["total_q", "num_qo_heads", "head_dim"])},
        },
        RAGGED: {
            "op_type": "gqa_ragged",
            "axes": {**gqa, "len_indptr": VAR, "total_q": VAR, "total_kv": VAR},
            "inputs": {"q": _t(["total_q", "num_qo_heads", "head_dim"]),
                       "k": _t(["total_kv", "num_kv_heads", "head_dim"]),
                       "v": _t(["total_kv", "num_kv_heads", "head_dim"]),
                       "qo_indptr": _t(["len_indptr"], "int32"),
                       "kv_indptr": _t(["len_indptr"], "int32"),
                       "sm_scale": _t(None, "float32")},
            "outputs": {"output": _t(["total_q", "num_qo_heads", "head_dim"])},
        },
        MLA: {
            "op_type": "mla_paged",
            "axes": {"batch_size": VAR, "num_qo_heads": _const(H), "head_dim_ckv": _const(CKV),
                     "head_dim_kpe": _const(KPE), "page_size": _const(PS), "num_pages": VAR,
                     "len_indptr": VAR, "num_kv_indices": VAR},
            "inputs": {"q_nope": _t(["batch_size", "num_qo_heads", "head_dim_ckv"]),
                       "q_pe": _t(["batch_size", "num_qo_heads", "head_dim_kpe"]),
                       "ckv_cache": _t(["num_pages", "page_size", "head_dim_ckv"]),
                       "kpe_cache": _t(["num_pages", "page_size", "head_dim_kpe"]),
                       "kv_indptr": _t(["len_indptr"], "int32"),
                       "kv_indices": _t(["num_kv_indices"], "int32"),
                       "sm_scale": _t(None, "float32")},
            "outputs": {"output": _t(["batch_size", "num_qo_heads", "head_dim_ckv"])},
        },
        "rmsnorm_h64": {
            "op_type": "rmsnorm",
            "axes": {"batch_size": VAR, "hidden_size": _const(64)},
            "inputs": {"x": _t(["batch_size", "hidden_size"])},
            "outputs": {"y": _t(["batch_size", "hidden_size"])},
        },
    }  # fmt: skip
    return {
        name: {"name": name, "reference": REFERENCE, "tags": [], **body}
        for name, body in defs.items()
    }


def _file(root: str, definition: str, uuid: str, tensors: dict) -> dict:
    """Save ``tensors`` and return each one's safetensors input spec."""
    relative = f"blob/workloads/{definition}/{uuid}.safetensors"
    os.makedirs(os.path.join(root, os.path.dirname(relative)), exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(root, relative))
    return {k: {"type": "safetensors", "path": relative, "tensor_key": k} for k in tensors}


def _pages(kv_lens, page_size, gen):
    """Shuffled page ids, one spare page: (kv_indptr, kv_indices, num_pages)."""
    pages = [-(-n // page_size) for n in kv_lens]
    num_pages = sum(pages) + 1
    ids = torch.randperm(num_pages, generator=gen)[: sum(pages)].to(torch.int32)
    indptr = torch.tensor([0, *torch.tensor(pages).cumsum(0).tolist()], dtype=torch.int32)
    return indptr, ids, num_pages


def _indptr(lengths):
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def workloads(root: str) -> list[dict]:
    """Two decode workloads, one of each other kind; full pages (FIB has no last-page length)."""
    gen = torch.Generator().manual_seed(7)
    bf = torch.bfloat16
    lines = []
    for uuid, kv_lens in (("dec-a", [8, 12, 4]), ("dec-b", [16])):
        indptr, ids, num_pages = _pages(kv_lens, PS, gen)
        k = torch.randn(num_pages, PS, KV, D, generator=gen).to(bf)
        stored = _file(root, DECODE, uuid, {"kv_indptr": indptr, "kv_indices": ids, "k_cache": k})
        lines.append(_line(DECODE, uuid, {"batch_size": len(kv_lens), "num_pages": num_pages,
                     "len_indptr": len(kv_lens) + 1, "num_kv_indices": len(ids)},
                     {"q": {"type": "random"}, "v_cache": {"type": "random"},
                      "sm_scale": {"type": "scalar", "value": 0.3}, **stored}))  # fmt: skip
    q_lens, kv_lens = [3, 5], [8, 12]
    indptr, ids, num_pages = _pages(kv_lens, PS, gen)
    stored = _file(root, PREFILL, "pre-a", {"qo_indptr": _indptr(q_lens), "kv_indptr": indptr,
                   "kv_indices": ids, "q": torch.randn(8, H, D, generator=gen).to(bf)})  # fmt: skip
    lines.append(_line(PREFILL, "pre-a", {"len_indptr": 3, "total_q": 8, "num_kv_indices": len(ids),
                 "num_pages": num_pages}, {"k_cache": {"type": "random"},
                 "v_cache": {"type": "random"}, "sm_scale": {"type": "scalar", "value": 0.25},
                 **stored}))  # fmt: skip
    stored = _file(
        root, RAGGED, "rag-a", {"qo_indptr": _indptr([2, 6]), "kv_indptr": _indptr([5, 6])}
    )
    lines.append(_line(RAGGED, "rag-a", {"len_indptr": 3, "total_q": 8, "total_kv": 11},
                 {"q": {"type": "random"}, "k": {"type": "random"}, "v": {"type": "random"},
                  "sm_scale": {"type": "scalar", "value": 0.25}, **stored}))  # fmt: skip
    indptr, ids, num_pages = _pages([8, 4], PS, gen)
    stored = _file(root, MLA, "mla-a", {"kv_indptr": indptr, "kv_indices": ids})
    lines.append(_line(MLA, "mla-a", {"batch_size": 2, "num_pages": num_pages, "len_indptr": 3,
                 "num_kv_indices": len(ids)}, {**{n: {"type": "random"} for n in
                 ("q_nope", "q_pe", "ckv_cache", "kpe_cache")},
                 "sm_scale": {"type": "scalar", "value": 0.1}, **stored}))  # fmt: skip
    return lines


def _line(definition, uuid, axes, inputs):
    return {"definition": definition, "workload": {"uuid": uuid, "axes": axes, "inputs": inputs},
            "solution": None, "evaluation": None}  # fmt: skip


DECODE_SOLUTION = """
import torch

def run(q, k_cache, v_cache, kv_indptr, kv_indices, sm_scale, output):
    page_size = k_cache.shape[1]
    group = q.shape[1] // k_cache.shape[2]
    for b in range(q.shape[0]):
        pages = kv_indices[int(kv_indptr[b]):int(kv_indptr[b + 1])].long()
        k = k_cache[pages].reshape(-1, k_cache.shape[2], k_cache.shape[3]).float()
        v = v_cache[pages].reshape(-1, v_cache.shape[2], v_cache.shape[3]).float()
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        scores = torch.einsum("hd,thd->ht", q[b].float(), k) * sm_scale
        output[b] = torch.einsum("ht,thd->hd", scores.softmax(-1), v).to(output.dtype)
    SCALE_OUTPUT
"""


def solution(name: str, wrong: bool = False) -> dict:
    code = DECODE_SOLUTION.replace("SCALE_OUTPUT", "output.mul_(1.5)" if wrong else "return None")
    return {
        "name": name,
        "definition": DECODE,
        "author": "tests",
        "spec": {"language": "python", "target_hardware": ["cpu"], "entry_point": "main.py::run",
                 "destination_passing_style": True},
        "sources": [{"path": "main.py", "content": code}],
    }  # fmt: skip


def write_dataset(root: str) -> str:
    """The whole dataset under ``root``; returns it."""
    for name, body in definitions().items():
        path = os.path.join(root, "definitions", body["op_type"], f"{name}.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            json.dump(body, handle, indent=1)
    by_definition: dict[str, list[dict]] = {}
    for line in workloads(root):
        by_definition.setdefault(line["definition"], []).append(line)
    for name, lines in by_definition.items():
        op_type = definitions()[name]["op_type"]
        path = os.path.join(root, "workloads", op_type, f"{name}.jsonl")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as handle:
            handle.writelines(json.dumps(line) + "\n" for line in lines)
    os.makedirs(os.path.join(root, "solutions"), exist_ok=True)
    for name, wrong in (("py_decode", False), ("py_decode_wrong", True)):
        with open(os.path.join(root, "solutions", f"{name}.json"), "w") as handle:
            json.dump(solution(name, wrong), handle)
    return root
