"""Numbers from a system profile, the command line or a record are checked before they become figures: a negative
peak rate, zero devices per node, a billion billion nodes or a throughput of -5 are refused in one line naming
where they came from, never shown as results."""

from __future__ import annotations

import json

import pytest
from conftest import cli
from handmade import populate

from caraml import systems
from caraml.errors import BadInput


def _strict(text: str):
    """JSON as every reader parses it: NaN and Infinity are not JSON."""
    def refuse(name):
        raise ValueError(f"{name} is not JSON")

    return json.loads(text, parse_constant=refuse)


# system profiles -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, says", [
    ("[peak_tflops]\nfp32 = -0.001\n", "peak_tflops.fp32 = -0.001 is not valid; peak_tflops must be a table of "
                                       "numbers above 0"),
    ("[peak_tflops]\nfp16 = nan\n", "peak_tflops.fp16 = nan is not valid"),
    ("[peak_tflops]\nbf16 = inf\n", "peak_tflops.bf16 = inf is not valid"),
    ("[peak_tflops]\nbf16 = 0\n", "peak_tflops.bf16 = 0 is not valid"),
    ("devices_per_node = -4\n", "devices_per_node = -4 is not valid; it must be a whole number from 1 to 1024"),
    ("devices_per_node = 0\n", "devices_per_node = 0 is not valid"),
    ("devices_per_node = 100000\n", "devices_per_node = 100000 is not valid"),
    ("memory_per_device_gb = -1\n", "memory_per_device_gb = -1 is not valid; it must be a number, 0 or more"),
    ("memory_per_device_gb = nan\n", "memory_per_device_gb = nan is not valid"),
    ("[links_gbps]\ninter_node = -25\n", "links_gbps.inter_node = -25 is not valid"),
    ("[site]\ncpus_per_task = -1\n", "site.cpus_per_task = -1 is not valid; it must be a whole number, 0 or more"),
    ("[site]\nrdzv_port = 70000\n", "site.rdzv_port = 70000 is not valid; it must be a port number"),
    ("[site.workloads.llm_training]\ngpus_per_node = -1\n", "site.workloads.llm_training.gpus_per_node = -1 is not"),
    ("[site]\nenv = {X = nan}\n", "site.env.X = nan is not valid"),
])
def test_a_profile_number_of_the_wrong_sign_or_not_finite_is_one_line_naming_file_and_field(tmp_path, monkeypatch,
                                                                                           text, says):
    (tmp_path / "H200.toml").write_text(text)
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    with pytest.raises(BadInput) as refused:
        systems.profiles()
    assert str(refused.value).startswith(f"system profile {tmp_path / 'H200.toml'}: {says}"), refused.value
    proc = cli("plan", "llm_training", "--system", "H200", check=2)
    assert proc.stderr.count("\n") == 1 and f"{tmp_path / 'H200.toml'}: " in proc.stderr and not proc.stdout


def test_the_shipped_profiles_numbers_pass():
    for tag, profile in systems.profiles().items():
        assert profile["devices_per_node"] >= 1, tag


# caraml plan -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("args, says", [
    (["--nodes", "99999999999999999999"], "--nodes 99999999999999999999 is not valid; give a whole number from 1 to "),
    (["--nodes", "0"], "--nodes 0 is not valid"),
    (["--efficiency", "5e-324"], "--efficiency 5e-324 is not valid; give a share of the peak rate from 0.01 to 1"),
    (["--efficiency", "nan"], "--efficiency nan is not valid"),
    (["--efficiency", "1.5"], "--efficiency 1.5 is not valid"),
])
def test_plan_refuses_numbers_no_machine_has(args, says):
    proc = cli("plan", "llm_training", *args, "--json", check=2)
    assert proc.stderr.startswith(f"caraml: error: {says}") and proc.stderr.count("\n") == 1, proc.stderr
    assert not proc.stdout


def test_plan_json_is_strict_when_a_figure_overflows(tmp_path, monkeypatch):
    (tmp_path / "X.toml").write_text('tag = "X"\ndevices_per_node = 1\n[peak_tflops]\nbf16 = 5e-324\n'
                                     '[links_gbps]\nintra_node = 100.0\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    proc = cli("plan", "llm_training", "--system", "X", "--efficiency", "0.01", "--json", check=0)
    est = _strict(proc.stdout)
    assert est["compute_s"] is None and est["tokens_per_s"] in (None, 0.0)


def test_plan_of_a_layout_the_default_system_cannot_hold_names_nodes_and_system():
    proc = cli("plan", "llm_training", "--preset", "13B", check=2)
    line = proc.stderr.strip()
    assert "tp*pp = 2*2 = 4 does not divide the 1 devices" in line and "--nodes" in line and "--system" in line, line
    assert proc.stderr.count("\n") == 1
    cli("plan", "llm_training", "--preset", "13B", "--system", "H100", check=0)  # 4 devices per node


# records -----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["-5", "0", "0.0", "1e308", "1e999", "-1e999", "NaN", "Infinity"])
def test_a_record_of_an_impossible_throughput_is_skipped_with_one_line_and_compared_never(tmp_path, value):
    results = tmp_path / "results"
    recs = populate(results, with_power=False)
    run_id = recs["a100_64"]["run_id"]
    edited = results / "runs" / f"{run_id}.json"
    edited.write_text(edited.read_text().replace('"value": 1500.0', f'"value": {value}'))
    assert f'"value": {value}' in edited.read_text()
    for command in (["result"], ["compare", "--by", "system", "--baseline", "A100"]):
        proc = cli(*command, "--results", results, "--format", "json", check=0)
        warned = [line for line in proc.stderr.splitlines() if str(edited) in line]
        assert len(warned) == 1 and warned[0].startswith(f"caraml: skipping record {edited}: "), proc.stderr
        assert "throughput" in warned[0]
        assert run_id not in json.dumps(_strict(proc.stdout))
    compared = {c["workload"]: c for c in _strict(cli("compare", "--by", "system", "--results", results,
                                                      "--format", "json", check=0).stdout)}
    image = compared["image_classification"]
    speedups = [g["speedup"] for row in image["rows"] for g in row["groups"].values() if g.get("speedup") is not None]
    assert speedups and all(s > 0 for s in speedups)
    assert 64 not in [row["config"]["batch_size"] for row in image["rows"]]  # A100 at 64 is gone: nothing to compare


def test_show_of_a_skipped_record_names_the_file_and_why(tmp_path):
    results = tmp_path / "results"
    recs = populate(results, with_power=False)
    run_id = recs["a100_64"]["run_id"]
    edited = results / "runs" / f"{run_id}.json"
    edited.write_text(edited.read_text().replace('"value": 1500.0', '"value": -5'))
    proc = cli("show", run_id, "--results", results, check=2)
    assert proc.stderr.startswith(f"caraml: error: show: record {edited} is skipped: ") and "throughput" in proc.stderr
    assert proc.stderr.count("\n") == 1
    broken = results / "runs" / f"{recs['a100_128']['run_id']}.json"
    broken.write_text("{ half a rec")
    proc = cli("show", recs["a100_128"]["run_id"][:22], "--results", results, check=2)
    assert proc.stderr.startswith(f"caraml: error: show: record {broken} is skipped: "), proc.stderr
