"""The command's cheap parts: help without torch, systems, env, result listing."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys

import pytest
from conftest import caraml, cli, cli_env


@pytest.mark.subprocess
def test_help_does_not_import_torch():
    code = "import sys; from caraml.cli import build_parser; build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert out.stdout.strip() == "False"
    proc = caraml("--help", check=0)
    for command in ("run", "result", "systems", "env"):
        assert command in proc.stdout


@pytest.mark.subprocess
def test_systems_lists_every_caraml_tag():
    proc = caraml("systems", check=0)
    for tag in ("A100", "MILA", "H100", "WAIH100", "GH200", "JUPITER", "MI300X", "MI300A", "MI250", "GC200",
                "H200", "CPU"):
        assert f"\n{tag} " in "\n" + proc.stdout
    h200 = json.loads(caraml("systems", "H200", check=0).stdout)
    assert h200["peak_tflops"]["bf16"] == pytest.approx(989.4)
    assert h200["power_methods"] == ["nvml"] and h200["site"]["container_image"]


@pytest.mark.subprocess
def test_site_overrides_profile(tmp_path):
    (tmp_path / "H100.toml").write_text('[site]\npartition = "booster"\naccount = "myproj"\n')
    env = cli_env(CARAML_SYSTEMS_PATH=str(tmp_path))
    h100 = json.loads(caraml("systems", "H100", env=env, check=0).stdout)
    assert h100["site"]["partition"] == "booster" and h100["site"]["account"] == "myproj"
    assert h100["peak_tflops"]["bf16"] == 756.0  # untouched keys stay


def test_device_name_detection():
    from caraml import systems

    assert systems.match_device_name("NVIDIA H200") == "H200"
    assert systems.match_device_name("NVIDIA H100 PCIe") == "H100"
    assert systems.match_device_name("NVIDIA H100 80GB HBM3") == "H100SXM"  # the SXM5 card (cloud, DGX, HGX)
    assert systems.match_device_name("NVIDIA H100 NVL") == "WAIH100"
    assert systems.match_device_name("NVIDIA A100-SXM4-80GB") == "MILA"
    assert systems.match_device_name("NVIDIA A100-SXM4-40GB") == "A100"
    assert systems.match_device_name("NVIDIA GH200 120GB") == "JUPITER"
    assert systems.match_device_name("AMD Instinct MI300X") == "MI300X"
    assert systems.match_device_name("Tesla K80") is None


@pytest.mark.subprocess
def test_env_manifest():
    env = json.loads(caraml("env", check=0).stdout)
    for key in ("python", "torch", "torchvision", "hostname", "cpu", "devices", "git_commit", "slurm"):
        assert key in env


@pytest.mark.subprocess
def test_the_manifest_names_torchvisions_version_without_importing_it():
    """An FNO or GPT run does not import torchvision for its manifest (0.2 s, and dynamo where nothing else imported
    it): the manifest reads the version it would say, local tag and all."""
    code = ("import sys; from caraml.measure import env; v = env.collect()['torchvision']; "
            "before = 'torchvision' in sys.modules; import torchvision; print(before, v == torchvision.__version__)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert proc.stdout.split() == ["False", "True"]


def test_torchvisions_version_is_read_from_its_version_file_as_text(tmp_path, monkeypatch):
    import importlib.machinery
    import importlib.util

    from caraml.measure import env

    package = tmp_path / "torchvision"
    package.mkdir()
    (package / "version.py").write_text("__version__ = '9.9.9+cu999'\nraise SystemExit('never run')\n")
    spec = importlib.machinery.ModuleSpec("torchvision", None, is_package=True)
    spec.submodule_search_locations = [str(package)]
    monkeypatch.delitem(sys.modules, "torchvision", raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec if name == "torchvision" else None)
    assert env.torchvision_version() == "9.9.9+cu999"
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert env.torchvision_version() is None
    monkeypatch.setitem(sys.modules, "torchvision", None)  # blocked: as not installed
    assert env.torchvision_version() is None


@pytest.mark.subprocess
def test_result_over_several_records(results):
    for params in (("batch_size=4",), ("batch_size=8", "precision=bf16")):
        caraml("run", "image_classification", "--preset", "smoke", "measure_steps=2", "image_size=32", *params,
               "device=cpu", "--results", results, check=0)
    table = caraml("result", "--results", results, check=0).stdout  # end to end once; the rest in this process
    assert "Images/s" in table and "resnet18" in table
    rows = list(csv.DictReader(io.StringIO(cli("result", "--results", results, "--format", "csv", check=0).stdout)))
    assert sorted(int(r["BatchSize/Device"]) for r in rows) == [4, 8]
    assert all(float(r["Images/s"]) > 0 and r["Status"] == "ok" for r in rows)
    records = json.loads(cli("result", "--results", results, "--format", "json", check=0).stdout)
    assert isinstance(records, list) and len(records) == 2 and all("params" in r for r in records)
    md = cli("result", "--results", results, "--format", "markdown", check=0).stdout
    assert sum(1 for line in md.splitlines() if line.startswith("| CPU")) == 2
    # the SQLite index agrees with the files
    from caraml.results.store import Store

    assert len(Store(results).query("SELECT run_id FROM runs WHERE status='ok'")) == 2


def test_result_without_records_is_bad_input(tmp_path):
    proc = cli("result", "--results", tmp_path / "empty", check=2)
    assert "empty" in proc.stderr and "caraml run" in proc.stderr


@pytest.mark.subprocess
def test_index_is_rebuilt_from_record_files(results):
    caraml("run", "image_classification", "--preset", "smoke", "measure_steps=2", "image_size=32", "power=off",
           "--results", results, check=0)
    from caraml.results.store import Store

    store = Store(results)
    store.index_path.unlink()  # e.g. lost, or a write that failed on a parallel file system
    cli("result", "--results", results, check=0)
    assert len(store.query("SELECT run_id FROM runs")) == 1


@pytest.mark.subprocess
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_numbers_are_bad_input(results, value):
    proc = caraml("run", "image_classification", f"measure_seconds={value}", "--results", results, check=2)
    assert f"measure_seconds={value} is not a finite number" in proc.stderr


def test_unbuilt_workload_is_refused_before_anything_starts(results):
    from caraml import workloads
    from caraml.errors import BadInput
    from caraml.runner import RunSpec, execute

    workloads.register(workloads.Workload(name="declared_only", unit="things", params=[], presets={}, build=None))
    try:
        with pytest.raises(BadInput, match="workload declared_only is not built yet"):
            execute(RunSpec("declared_only", results=str(results)))
        assert not results.exists()
    finally:
        workloads._REGISTERED.pop("declared_only")
