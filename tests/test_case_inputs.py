"""A case's inputs are built once by the harness (the spec's make_inputs) and handed to every
implementation; Settings carries options only."""

from __future__ import annotations

import dataclasses

import h2h_plugins
from test_bench_common import NO_GPU, read_rows

from fi_attn_bench import command_line
from fi_attn_bench.apis import decode
from fi_attn_bench.cases.spec import Settings

FAST = ["--device", "cpu", "--max-time-per-case", "0.05", "--min-samples", "3"]
PLUGIN = "h2h_plugins:recording"


def test_a_cases_inputs_are_built_once_and_every_impl_gets_them(tmp_path):
    built = []

    def make_inputs(case, settings):
        built.append(decode.make_inputs(case, settings))
        return built[-1]

    spec = dataclasses.replace(decode.SPEC, make_inputs=make_inputs)
    h2h_plugins.SEEN_INPUTS.clear()
    out = tmp_path / "d.csv"
    argv = [*FAST, "--preset", "cpu", "--impl", "torch", "--impl", PLUGIN, "--output", str(out)]
    argv.append("--no-isolation")  # the spec and the plugin record in this process
    assert command_line.main_for(spec, argv, probe=NO_GPU) == 0
    rows = read_rows(out)
    assert [row["status"] for row in rows] == ["ok"] * len(rows)
    assert len(built) == len(rows) // 2 > 0  # one build per case, for both impls
    assert len(h2h_plugins.SEEN_INPUTS) == len(built)
    assert all(seen is made for seen, made in zip(h2h_plugins.SEEN_INPUTS, built, strict=True))


def test_settings_carry_no_inputs():
    assert "inputs" not in {field.name for field in dataclasses.fields(Settings)}
