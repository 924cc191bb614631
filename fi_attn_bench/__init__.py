"""fi-attn-bench: FlashInfer attention benchmarks and their summarizer."""

from fi_attn_bench.results.schema import HARNESS_VERSION

# What every command's --version prints.
VERSION_TEXT = f"fi-attn-bench {HARNESS_VERSION}"
