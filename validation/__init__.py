"""The harness's published numbers measured again on a GPU (docs/VALIDATION.md names which).

One entry point: ``python -m validation PART [options]`` from the repository root;
``python -m validation --help`` lists the parts.  Each part runs the public commands
(``bench_batch_*.py``, ``bench_all.py``, ``summarize_results.py``) or the scripts' public API.
"""
