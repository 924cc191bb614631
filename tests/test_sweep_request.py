"""The command line is parsed once into a frozen SweepRequest; sharding makes a new one."""

from __future__ import annotations

import dataclasses

import pytest

import bench_batch_decode
from fi_attn_bench.command_line import build_parser, parse_command_line
from fi_attn_bench.sweep.request import SweepRequest
from fi_attn_bench.sweep.shard_plan import ShardRequest, shard_arguments
from fi_attn_bench.sweep.sharding import ShardSpec

SPEC = bench_batch_decode.SPEC


def test_every_option_of_the_parser_is_a_field_of_the_request():
    dests = {a.dest for a in build_parser(SPEC)._actions} - {"help", "version"}
    assert dests == {field.name for field in dataclasses.fields(SweepRequest)}


def test_parsing_gives_a_frozen_request_with_tuples_for_repeated_options():
    asked = parse_command_line(SPEC, ["--filter", "batch_size=1", "--filter", "head_dim=128"])
    assert isinstance(asked, SweepRequest) and asked.filter == ("batch_size=1", "head_dim=128")
    with pytest.raises(dataclasses.FrozenInstanceError):
        asked.preset = "smoke"  # type: ignore[misc]


def test_an_option_the_request_lacks_is_refused():
    with pytest.raises(TypeError, match="bogus"):
        SweepRequest.from_fields({"bogus": 1})


def test_a_shard_gets_a_new_request_and_the_given_one_is_unchanged(tmp_path):
    asked = parse_command_line(SPEC, ["--output", str(tmp_path / "x.csv")])
    sharded = shard_arguments(SPEC, asked, ShardRequest(shard=ShardSpec(1, 2)))
    assert sharded.output == str(tmp_path / "x.shard1of2.csv")
    assert asked.output == str(tmp_path / "x.csv")
