"""Run history: a store of every benchmark run, change points per case, a dashboard,
and the baseline a CI job compares against (``fi-attn-history``, docs/HISTORY.md)."""
