"""Each case's run-to-run noise, read from a ``fi-attn-history`` store, for the regression gate.

A row's own interval says how well one process measured its case; two processes of the same
code can differ by far more (power-capped cases on an H100: 1-2.5 % per run).  With
``--noise-from STORE`` a slower case also has to move beyond what its own history shows
between runs to count as a regression.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fi_attn_bench.results.case_identity import case_identities, case_identity
from fi_attn_bench.results.series_noise import MIN_SERIES_RUNS, noise_level

NOISE_SIGMAS = 3.0  # a change within 3 x sqrt(2) x one run's noise is what two runs often show

CaseKey = tuple[str, str]  # (device, case_identity)


class NoiseError(Exception):
    """The store cannot be read (missing, newer, corrupt, locked): exit 2."""


@dataclass(frozen=True)
class RunNoise:
    """Noise per run (log units) of every case the store has enough runs of, per device."""

    by_case: dict[CaseKey, float]

    def pct(self, view, rows: np.ndarray, case_columns) -> np.ndarray:
        """Each row's case noise per run in % (NaN where the store has too few of its runs)."""
        if len(rows) == 0:
            return np.zeros(0)
        texts = {
            name: _texts(view.objects(name)[rows])
            for name in ("device", "api", *case_columns)
            if name in view.frame.columns
        }
        devices = texts.pop("device", [""] * len(rows))
        identities = case_identities(texts.pop("api"), texts)
        sigma = np.array(
            [self.by_case.get(key, np.nan) for key in zip(devices, identities, strict=True)],
            dtype=float,
        )
        return np.expm1(sigma) * 100


def _texts(values: np.ndarray) -> list[str]:
    return ["" if value is None or value != value else str(value).strip() for value in values]


def read_run_noise(path) -> RunNoise:
    """Every case's noise per run from the store at ``path``: the spread of successive runs'
    log times, as ``fi-attn-history detect`` estimates it (steps touch one difference each)."""
    from fi_attn_bench.results.run_store import RunStore, StoreError

    try:
        with RunStore.open(path, create=False) as store:
            history = store.history()
    except StoreError as exc:
        raise NoiseError(str(exc)) from None
    identities = [case_identity(case.api, case.fields) for case in history.cases]
    return RunNoise(
        {
            key: noise_level(log_ms)
            for key, log_ms in history.log_time_series(identities).items()
            if len(log_ms) >= MIN_SERIES_RUNS
        },
    )
