"""Benchmark FlashInfer's BatchMLAPagedAttentionWrapper (DeepSeek MLA decode, absorbed form).

The face users run; the API itself (grid, inputs, formulas, reference, FlashInfer call, serving
batches) is ``fi_attn_bench.apis.mla``.

    python bench_batch_mla.py --preset smoke
"""

from fi_attn_bench.apis.mla import *  # noqa: F403 - the API's names, importable from here
from fi_attn_bench.apis.mla import SPEC
from fi_attn_bench.command_line import main_for


def main(argv=None) -> int:
    return main_for(SPEC, argv)


if __name__ == "__main__":
    raise SystemExit(main())
