"""Energy in the summarizer: best energy per API, the JSON, the energy-vs-time
plot, the energy change beside the time change, and --fail-on-energy-regression."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fi_attn_bench.summarizer import command_line as sr

HEADER = (
    "schema_version,api,batch_size,seq_len_q,seq_len_kv,num_qo_heads,num_kv_heads,head_dim,"
    "status,time_ms,bandwidth_GB_s,tflops,error_type,error,energy_mJ,avg_power_W"
)


def row(batch, time_ms, energy, api="Decode"):
    power = "" if energy == "" else "500"
    return f"1,{api},{batch},1,128,32,8,64,ok,{time_ms},100,1,,,{energy},{power}"


def write(path: Path, *rows: str) -> Path:
    path.write_text("\n".join([HEADER, *rows]) + "\n", encoding="utf-8")
    return path


def run(tmp_path, *argv):
    return sr.main([str(a) for a in [*argv, "--output", tmp_path / "report.md"]])


def report(tmp_path) -> str:
    return (tmp_path / "report.md").read_text(encoding="utf-8")


def test_summary_gives_the_lowest_energy_per_api_in_markdown_and_json(tmp_path):
    csv = write(tmp_path / "r.csv", row(1, "1.0", "400"), row(2, "2.0", "350"), row(4, "3.0", ""))
    assert run(tmp_path, csv, "--json", tmp_path / "s.json") == 0
    assert "- Minimum energy_mJ: 350" in report(tmp_path)
    (api,) = json.loads((tmp_path / "s.json").read_text())["apis"]
    best = {entry["column"]: entry for entry in api["best"]}
    assert best["energy_mJ"]["value"] == 350 and "batch_size=2" in best["energy_mJ"]["case"]


def test_summary_without_energy_has_no_energy_line(tmp_path):
    csv = write(tmp_path / "r.csv", row(1, "1.0", ""))
    assert run(tmp_path, csv) == 0
    assert "energy_mJ" not in report(tmp_path)


def test_energy_vs_time_plot_per_api(tmp_path):
    pytest.importorskip("matplotlib")
    csv = write(tmp_path / "r.csv", row(1, "1.0", "400"), row(2, "2.0", "700"))
    assert run(tmp_path, csv, "--plot-dir", tmp_path / "plots") == 0
    assert (tmp_path / "plots" / "Decode_energy.png").stat().st_size > 0
    assert "Decode_energy.png" in report(tmp_path)


def pair(tmp_path, base_rows, cand_rows):
    base = write(tmp_path / "base.csv", *base_rows)
    cand = write(tmp_path / "cand.csv", *cand_rows)
    return ["--baseline", base, "--candidate", cand]


def test_regression_shows_the_energy_change_beside_the_time_change(tmp_path):
    sides = pair(
        tmp_path,
        [row(1, "1.0", "400"), row(2, "2.0", ""), row(4, "4.0", "")],
        [row(1, "1.0", "500"), row(2, "2.0", "700"), row(4, "4.0", "")],
    )
    assert run(tmp_path, *sides) == 0  # reported, not gated
    text = report(tmp_path)
    section = text[text.index("## Energy") : text.index("## Matched Cases")]
    assert "| Decode | batch\\_size=1" in section and "| +0.00% | +25.00% |" in section
    assert "400 → 500" in section
    assert "no energy → 700" in section  # one side without energy
    assert "1 matched case(s) without energy on either side: no energy" in section


@pytest.mark.parametrize(("pct", "code"), [("20", 1), ("30", 0)])
def test_energy_gate_fails_a_rise_past_it_and_never_a_side_without_energy(tmp_path, pct, code):
    sides = pair(
        tmp_path,
        [row(1, "1.0", "400"), row(2, "2.0", "")],
        [row(1, "1.0", "500"), row(2, "2.0", "9000")],
    )
    assert run(tmp_path, *sides, "--fail-on-energy-regression", pct) == code
    text = report(tmp_path)
    assert f"- Energy gate: energy_mJ up more than {pct}%" in text
    if code:
        assert "1 energy regression (energy\\_mJ up more than 20%)" in text
        assert "over the gate" in text


def test_energy_gate_json_carries_both_sides_and_the_change(tmp_path):
    sides = pair(tmp_path, [row(1, "1.0", "400")], [row(1, "1.0", "300")])
    argv = [*sides, "--fail-on-energy-regression", "5", "--json", tmp_path / "r.json"]
    assert run(tmp_path, *argv) == 0
    (case,) = json.loads((tmp_path / "r.json").read_text())["matched"]
    assert (case["energy_mJ_baseline"], case["energy_mJ_candidate"]) == (400, 300)
    assert case["energy_mJ_delta_pct"] == pytest.approx(-25.0)
    assert case["energy_regression"] is False


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--fail-on-energy-regression", "5"], "requires regression mode"),
        (["--fail-on-energy-regression", "-1"], "must be a finite, non-negative"),
        (["--fail-on-energy-regression", "nan"], "must be a finite, non-negative"),
    ],
)
def test_energy_gate_arguments_are_checked_before_any_work(tmp_path, capsys, argv, message):
    csv = write(tmp_path / "r.csv", row(1, "1.0", "400"))
    sides = pair(tmp_path, [row(1, "1.0", "400")], [row(1, "1.0", "300")])
    inputs = [csv] if "requires" in message else sides
    with pytest.raises(SystemExit) as raised:
        run(tmp_path, *inputs, *argv)
    assert raised.value.code == 2
    err = capsys.readouterr().err
    assert f"error: --fail-on-energy-regression {message}" in err
    assert not (tmp_path / "report.md").exists()
