"""Benchmark FlashInfer's BatchPrefillWithRaggedKVCacheWrapper (causal prefill, ragged K/V).

The face users run; the API itself (grid, inputs, formulas, reference, FlashInfer call, serving
batches) is ``fi_attn_bench.apis.prefill_ragged``.

    python bench_batch_prefill_ragged.py --preset smoke
"""

from fi_attn_bench.apis.prefill_ragged import *  # noqa: F403 - the API's names, importable from here
from fi_attn_bench.apis.prefill_ragged import SPEC
from fi_attn_bench.command_line import main_for


def main(argv=None) -> int:
    return main_for(SPEC, argv)


if __name__ == "__main__":
    raise SystemExit(main())
