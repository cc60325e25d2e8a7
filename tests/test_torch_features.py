"""The Pythons and PyTorch versions of the site containers: the PyTorch features each workload needs are checked
at start (one line, exit 2), the package refuses a too-old Python in one line, and the job command runs under
an older interpreter and torch (CARAML_OLD_PYTHON, set by scripts/test.sh: Python 3.9 with torch 2.3, the oldest
supported Python with NGC 24.02's torch)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import cli, cli_env

from caraml import workloads
from caraml.errors import BadInput
from caraml.kit import torch_features as tf

ABSENT = "torch.distributed.no_such_module.Thing"  # what no torch has


def _absent(feature: tf.Feature) -> tf.Feature:
    """The same feature as a torch without it would see it."""
    return tf.Feature(feature.what, ABSENT, feature.since, feature.instead)


def test_presence_is_probed_by_import_and_attribute():
    assert tf.COMPILE.present() and tf.GRAD_SCALER.present()
    assert not _absent(tf.PIPELINING).present()
    assert not tf.Feature("x", "torch.no_such_attribute", "9.9", "-").present()
    assert not tf.Feature("x", "no_such_package.anything", "9.9", "-").present()
    assert tf.missing([tf.COMPILE, _absent(tf.FSDP2), _absent(tf.FSDP2)]) == [_absent(tf.FSDP2)]


def test_a_missing_feature_is_one_line_naming_it_its_release_and_the_way_around():
    import torch

    with pytest.raises(BadInput) as exc:
        tf.require([tf.COMPILE, _absent(tf.PIPELINING), _absent(tf.FSDP2)])
    line = str(exc.value)
    assert "\n" not in line
    assert line == (f"pipeline parallelism (pp > 1) needs {ABSENT}, in torch 2.4 or newer; this torch is "
                    f"{torch.__version__}: use a container image with torch >= 2.4, or pp=1")
    tf.require([tf.COMPILE])  # present: no refusal


def _needs(workload: str, params: dict, world: int = 1) -> set[str]:
    from caraml import params as params_mod
    from caraml.settings import RUN_PARAMS

    wl = workloads.get(workload)
    preset = {"fno": "smoke-PIC1D"}.get(workload, "smoke")
    values = params_mod.resolve(wl.params + RUN_PARAMS, params, wl.name, wl.presets[preset])
    config = wl.config_of(values)
    return {f.api for f in wl.torch_features(config, wl.parallel_dims(config, world))}


def test_each_workload_declares_what_its_configuration_needs():
    assert _needs("image_classification", {}) == set()  # eager fp32: what every supported torch has
    assert _needs("image_classification", {"compile": "inductor", "precision": "fp16"}) == {
        tf.COMPILE.api, tf.GRAD_SCALER.api}
    assert _needs("image_classification", {"compile": "trace"}) == set()  # TorchScript, not torch.compile
    assert _needs("fno", {}) == set()
    assert _needs("fno", {"compile": "inductor"}) == {tf.COMPILE.api}
    assert _needs("fno", {"compile_report": "on"}) == {tf.COMPILE.api}
    assert _needs("llm_training", {}) == set()
    gpt = _needs("llm_training", {"pp": 2, "tp": 2, "num_layers": 2, "grad_accumulation": 2,
                                  "distributed_optimizer": "on", "compile": "inductor", "attention": "math"},
                 world=8)
    assert gpt == {tf.PIPELINING.api, tf.TENSOR_PARALLEL.api, tf.FSDP2.api, tf.COMPILE.api, tf.SDPA_KERNELS.api}
    # the distributed optimizer shards over data-parallel replicas: with one replica it needs nothing
    assert _needs("llm_training", {"distributed_optimizer": "on"}, world=1) == set()


def test_a_run_whose_torch_lacks_a_feature_is_refused_before_it_starts(monkeypatch, tmp_path):
    monkeypatch.setattr(tf, "COMPILE", _absent(tf.COMPILE))
    proc = cli("run", "fno", "--preset", "smoke-PIC1D", "compile=inductor", "--results", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"caraml: error: torch.compile needs {ABSENT}, in torch 2.0 or newer; this torch "
                                   f"is {__import__('torch').__version__}: use a container image with torch >= 2.0, "
                                   "or compile=none")
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("*.json"))  # nothing ran


def test_python_3_10_reads_profiles_with_tomli_and_says_so_when_it_is_missing(monkeypatch):
    from caraml import systems

    monkeypatch.setattr(sys, "version_info", (3, 10, 13, "final", 0))
    monkeypatch.setitem(sys.modules, "tomli", None)  # not installed
    with pytest.raises(BadInput, match=r"^Python 3\.10 reads the system profiles with the package tomli, which is "
                                       r"not installed here: pip install tomli$"):
        systems._toml()


@pytest.mark.subprocess
def test_too_old_python_is_refused_in_one_line():
    code = "import sys; sys.version_info = (3, 8, 18, 'final', 0); import caraml"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env())
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("caraml needs Python 3.9 or newer; ")
    assert f"{sys.executable} is Python {sys.version.split()[0]}" in proc.stderr  # the real one, and which it is


def test_graphcore_s_python_3_8_is_told_what_to_do_instead():
    from caraml import _too_old

    line = _too_old("/usr/bin/python3", "3.8.10", graphcore=True)
    assert "\n" not in line and line.startswith("caraml needs Python 3.9 or newer; /usr/bin/python3 is Python 3.8.10")
    assert "Poplar SDK" in line and line.endswith("(jube run image_classification/image_classification_torch_"
                                                  "benchmark.xml --tag container GC200)")
    assert "python3.10 -m caraml" in _too_old("/usr/bin/python3", "3.8.10", graphcore=False)


OLD_PYTHON = os.environ.get("CARAML_OLD_PYTHON")


@pytest.mark.subprocess
@pytest.mark.skipif(not OLD_PYTHON, reason="CARAML_OLD_PYTHON (an interpreter with an older torch) is not set; "
                                          "scripts/test.sh sets it")
def test_the_job_command_runs_under_an_older_python_and_torch(tmp_path):
    """What a job script runs inside a site's older image (NGC 24.02: torch 2.3; CARAML's ROCm image: Python 3.9):
    image classification and FNO run, PP is refused."""
    old_version = subprocess.run([OLD_PYTHON, "-c", "import platform; print(platform.python_version())"],
                                 capture_output=True, text=True, check=True).stdout.strip()

    def run(*args):
        return subprocess.run([OLD_PYTHON, "-m", "caraml", "run", *args, "--results", str(tmp_path), "--json",
                               "--quiet"], capture_output=True, text=True, env=cli_env(), timeout=600)

    for args in (("image_classification", "--preset", "smoke"), ("fno", "--preset", "smoke-RBC2D")):
        proc = run(*args)
        assert proc.returncode == 0, proc.stderr
        record = json.loads(proc.stdout)
        assert record["status"] == "ok" and record["metrics"]["throughput"]["value"] > 0
        versions = record["env"]
        assert versions["python"] == old_version, (versions["python"], old_version)  # the job ran under it
    torch_version = versions["torch"]
    assert tuple(int(p) for p in torch_version.split(".")[:2]) < (2, 4), torch_version  # an older torch indeed
    env = cli_env(WORLD_SIZE="2", RANK="0", LOCAL_RANK="0")  # as a launcher's rank 0 sees it; refused before init
    proc = subprocess.run([OLD_PYTHON, "-m", "caraml", "run", "llm_training", "--preset", "smoke", "pp=2",
                           "grad_accumulation=2", "--results", str(tmp_path)], capture_output=True, text=True,
                          env=env, timeout=600)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "caraml: error: pipeline parallelism (pp > 1) needs torch.distributed.pipelining, in torch 2.4 or newer; "
        f"this torch is {torch_version}: use a container image with torch >= 2.4, or pp=1"]


@pytest.mark.parametrize("workload,param,optimizer", [("image_classification", "sgd_impl", "sgd"),
                                                      ("fno", "adam_impl", "adam")])
def test_fused_optimizer_kernels_this_torch_lacks_are_refused_in_one_line(workload, param, optimizer):
    """torch 2.3 (NGC 24.02) has fused SGD/Adam for CUDA only: a CPU run asking for them is refused before the
    run, not failed at its first step; where the kernel exists the same run trains with it."""
    import torch

    from caraml.runner import RunSpec, build_bench, resolve

    preset = {"image_classification": "smoke", "fno": "smoke-PIC1D"}[workload]
    spec = RunSpec(workload, {param: "fused", "device": "cpu"}, preset=preset)
    cfg, cpu = resolve(spec).config, torch.device("cpu")
    if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::_fused_{optimizer}_", "CPU"):
        workloads.get(workload).check_device(cfg, cpu)
        bench = build_bench(spec)
        bench.step()  # one real step through the fused kernel
        assert bench.optimizer.defaults["fused"]
    else:
        with pytest.raises(BadInput, match=rf"^{param}=fused: this torch \(.*\) has no fused {optimizer.upper()} "
                                           rf"kernel for cpu .*: use {param}=foreach$"):
            workloads.get(workload).check_device(cfg, cpu)
    workloads.get(workload).check_device(resolve(RunSpec(workload, {param: "foreach", "device": "cpu"},
                                                         preset=preset)).config, cpu)


def test_a_submodule_its_package_does_not_import_is_present(tmp_path, monkeypatch):
    """The probe imports the whole dotted name first: a module is there even where its package's __init__ does not
    import it (torch.distributed.pipelining in some releases)."""
    (tmp_path / "lazy_pkg").mkdir()
    (tmp_path / "lazy_pkg" / "__init__.py").write_text("")
    (tmp_path / "lazy_pkg" / "inner.py").write_text("THING = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("lazy_pkg", "lazy_pkg.inner"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert tf.Feature("x", "lazy_pkg.inner", "1", "-").present()
    assert tf.Feature("x", "lazy_pkg.inner.THING", "1", "-").present()
    assert not tf.Feature("x", "lazy_pkg.inner.OTHER", "1", "-").present()


@pytest.mark.parametrize("device_type, hint", [("cpu", " (CPU kernels came in torch 2.4)"), ("cuda", "")])
def test_fused_kernels_are_looked_up_under_the_devices_dispatch_key(monkeypatch, device_type, hint):
    """A torch whose dispatcher has no fused SGD kernel for the device (a fake of its lookup, which, as torch's,
    knows the keys in capitals only): refused in one line; the torch 2.4 hint only where it applies (the CPU)."""
    from types import SimpleNamespace

    import torch

    from caraml.kit.optim import check_kernels

    asked = []

    def lookup(op, key):
        if key not in ("CPU", "CUDA"):
            raise RuntimeError(f"could not parse dispatch key: {key}")
        asked.append((op, key))
        return False

    monkeypatch.setattr(torch._C, "_dispatch_has_kernel_for_dispatch_key", lookup)
    with pytest.raises(BadInput) as exc:
        check_kernels("sgd_impl", "fused", "sgd", SimpleNamespace(type=device_type))
    assert asked == [("aten::_fused_sgd_", device_type.upper())]
    assert str(exc.value) == (f"sgd_impl=fused: this torch ({torch.__version__}) has no fused SGD kernel for "
                              f"{device_type}{hint}: use sgd_impl=foreach")
    check_kernels("sgd_impl", "foreach", "sgd", SimpleNamespace(type=device_type))  # not looked up, not refused
    assert len(asked) == 1


@pytest.mark.parametrize("impl, flags", [("foreach", {"foreach": True, "fused": None}),
                                         ("for-loop", {"foreach": False, "fused": None}),
                                         ("fused", {"foreach": None, "fused": True})])
def test_the_optimizer_is_built_with_the_kernels_asked_for(impl, flags):
    import torch

    from caraml.runner import RunSpec, build_bench

    if impl == "fused" and not torch._C._dispatch_has_kernel_for_dispatch_key("aten::_fused_adam_", "CPU"):
        pytest.skip("this torch has no fused Adam for the CPU (torch < 2.4)")

    bench = build_bench(RunSpec("fno", {"adam_impl": impl, "device": "cpu"}, preset="smoke-PIC1D"))
    assert {k: bench.optimizer.defaults[k] for k in flags} == flags
    bench.close()
