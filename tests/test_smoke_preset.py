"""``--preset smoke`` is a first look: on the CPU it runs the API's CPU-sized grid."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from fi_attn_bench.apis import registry
from fi_attn_bench.sweep.run_options import preset_for, run_preset


def _asked(preset: str | None) -> SimpleNamespace:
    return SimpleNamespace(preset=preset, batch=None, workload=None)


@pytest.mark.parametrize("spec", registry.specs(), ids=lambda spec: spec.api)
def test_smoke_on_the_cpu_runs_the_cpu_grid_and_on_a_gpu_its_own(spec):
    """It ran GPU-sized cases through the CPU reference: 140 s against 17 s for the default
    sweep, which already runs the CPU grid there."""
    cpu, gpu = torch.device("cpu"), torch.device("cuda")
    assert run_preset(spec, _asked("smoke"), cpu) == "cpu" == run_preset(spec, _asked(None), cpu)
    assert len(spec.presets["cpu"]) <= 8  # README: "≤ 8 cases, a first look"
    assert run_preset(spec, _asked("smoke"), gpu) == "smoke"
    assert run_preset(spec, _asked("default"), cpu) == "default"  # other presets as asked
    assert preset_for(spec, _asked("smoke"), cpu) == "smoke"  # --list plans a GPU's sweep


def test_a_smoke_grid_smaller_than_the_cpu_grid_stays_on_the_cpu():
    import fake_bench_script  # its smoke grid (2 cases) is smaller than its cpu grid (4)

    spec = fake_bench_script.SPEC
    assert run_preset(spec, _asked("smoke"), torch.device("cpu")) == "smoke"
