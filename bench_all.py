"""All four benchmark scripts in one process, one CSV each (``python bench_all.py --help``)."""

from fi_attn_bench.suite import main

__all__ = ["main"]

if __name__ == "__main__":
    raise SystemExit(main())
