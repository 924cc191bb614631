"""Benchmark FlashInfer's BatchDecodeWithPagedKVCacheWrapper (paged KV cache, one query token).

The face users run; the API itself (grid, inputs, formulas, reference, FlashInfer call, serving
batches) is ``fi_attn_bench.apis.decode``.

    python bench_batch_decode.py --preset smoke
"""

from fi_attn_bench.apis.decode import *  # noqa: F403 - the API's names, importable from here
from fi_attn_bench.apis.decode import SPEC
from fi_attn_bench.command_line import main_for


def main(argv=None) -> int:
    return main_for(SPEC, argv)


if __name__ == "__main__":
    raise SystemExit(main())
