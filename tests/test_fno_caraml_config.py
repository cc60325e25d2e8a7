"""The FNO suite against CARAML's own values (operator_benchmark/fno_benchmark.yaml 2025.02 and 2026.02, the
operator_learning configs): global batch split per rank, widths, modes, layers, configuration; and the columns of
CARAML's table computed as CARAML computes them. Fast: no subprocess, no model."""

from __future__ import annotations

import pytest
from conftest import caraml

from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import expand

# CARAML's values per problem: config file (its Config column), batchSize ("# Global Batch size"), dv, kX x kY x kZ
# as used, n_layers. 2025.02 runs use_amp 0;1 with compile_train 1 (mode default); 2026.02: batchSize 4,
# val_batchSize 1, use_amp 0, compile_train 0.
CARAML = {
    "PIC1D": ("electrostatic_plasma1d_pic.yaml", 20, 32, "16", 4),
    "PIC2D": ("electrostatic_plasma2d_pic.yaml", 8, 32, "16x16", 4),
    "RBC2D": ("rbc2d_dedalus.yaml", 20, 16, "12x12", 2),
    "RBC3D": ("rbc3d_pysdc.yaml", 20, 25, "12x12x6", 2),
}


def _points(*tags):
    return expand(suite_mod.load("fno"), set(tags), "H100")


def _local_batch(point) -> int:
    from caraml import workloads

    cfg = workloads.get("fno").config_of(point.params)
    return cfg.local_batch(point.nodes * point.devices_per_node)


@pytest.mark.parametrize("ddp", [False, True])
def test_sweep_2025_02_is_caramls_table(ddp):
    from caraml.workloads.fno.problems import CARAML_CONFIG_FILES

    points = _points("all", "H100", *(["ddp"] if ddp else []))
    devices = 4 if ddp else 1
    assert len(points) == 8
    assert sorted((p.params["problem"], p.params["precision"]) for p in points) == sorted(
        (problem, precision) for problem in CARAML for precision in ("fp32", "fp16"))  # use_amp 0;1
    for p in points:
        q = p.params
        config, batch, width, modes, layers = CARAML[q["problem"]]
        assert CARAML_CONFIG_FILES[q["problem"]] == config
        assert (p.nodes, p.devices_per_node) == (1, devices)
        assert q["global_batch_size"] == batch and q["batch_size"] == 0
        assert _local_batch(p) == batch // devices  # ddp: 5 per GPU, PIC2D 2
        assert (q["width"], q["modes"], q["layers"]) == (width, modes, layers)
        assert (q["compile"], q["compile_mode"], q["compile_scope"]) == ("inductor", "default", "epoch")
        assert (q["mode"], q["epochs"], q["caraml_version"]) == ("train", 5, "2025.02")
        assert q["data"] == "auto" and q["energy_files"] == "caraml"


def test_sweep_2026_02_is_caramls_newest_configuration():
    points = _points("all", "H100", "v2026.02", "ddp")
    assert len(points) == 4  # PIC3D, new in 2026.02, is not built (its 3D NUFFT operator)
    for p in points:
        q = p.params
        _, _, width, modes, layers = CARAML[q["problem"]]
        assert (q["global_batch_size"], _local_batch(p), q["val_batch_size"]) == (4, 1, 1)
        assert (q["precision"], q["compile"], q["caraml_version"]) == ("fp32", "none", "2026.02")
        assert (q["width"], q["modes"], q["layers"]) == (width, modes, layers)


def test_eval_is_one_job_per_problem_with_caramls_compile_table():
    points = _points("all", "H100", "eval")
    assert sorted(p.params["problem"] for p in points) == sorted(CARAML)
    for p in points:
        q = p.params
        assert (q["mode"], q["compile_report"], q["compile"], q["precision"]) == ("eval", True, "none", "fp32")
        assert q["data"] == "synthetic"  # fno_compile.py times torch.rand input on the device
        assert q["global_batch_size"] == CARAML[q["problem"]][1]  # its input_shape's batch


@pytest.mark.subprocess
def test_a_global_batch_that_does_not_split_is_one_line_exit_2():
    proc = caraml("sweep", "fno", "--tag", "RBC2D", "--tag", "ddp", "global_batch_size=6", "--system", "H100",
                  "--dry-run", check=2)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "global_batch_size=6 does not split evenly over 4" in lines[0], proc.stderr
    assert "e.g. 4 or 8" in lines[0]


def test_batch_size_and_global_batch_size_together_are_refused():
    from caraml.errors import BadInput
    from caraml.params import resolve
    from caraml.workloads.fno import WORKLOAD
    from caraml.workloads.fno.config import FNOConfig

    with pytest.raises(BadInput, match="give one of them"):
        FNOConfig.from_params(resolve(WORKLOAD.params, {"batch_size": 5, "global_batch_size": 20}, "fno"))
    cfg = FNOConfig.from_params(resolve(WORKLOAD.params, {"problem": "PIC2D", "global_batch_size": 8}, "fno"))
    assert (cfg.local_batch(4), cfg.batch_misfit(4), cfg.local_batch(1)) == (2, None, 8)
    assert "over 3" in cfg.batch_misfit(3)


def test_epoch_figures_are_caramls():
    """Timesteps/s, TrainTimesteps/s, the totals and TFLOPs from given epoch times, as operator_learning's learn()
    and train() compute them (first epoch left out of the totals; TFLOPs per epoch, their mean over all)."""
    from types import SimpleNamespace

    from caraml.kit.epochs import EpochTimes
    from caraml.workloads.fno.bench import FNOBench

    class OneRank:
        def all_reduce(self, value, op):
            return value

    bench = FNOBench.__new__(FNOBench)
    bench.dist = OneRank()
    bench.data = SimpleNamespace(n_train=16, n_val=4, batch=4)
    bench.flops = {"per_sample": 1e12}
    times = EpochTimes(train_s=[10.0, 2.0, 4.0], val_s=[1.0, 0.5, 0.5], epoch_s=[11.5, 2.6, 4.6])
    state = {"batches": [4, 4, 4], "train_loss": 1.0, "val_loss": 2.0,
             "memory": ([300 * 2**20, 500 * 2**20], [100 * 2**20, 100 * 2**20])}
    out = bench._epoch_figures(times, state)
    assert out["counted_epochs"] == 2 and out["timesteps"] == 2 * 20 and out["train_timesteps"] == 2 * 16
    assert out["total_train_time_s"] == 6.0 and out["total_compute_time_s"] == 7.0
    assert out["total_epoch_time_s"] == pytest.approx(7.2)
    assert out["caraml_timesteps_per_s"] == pytest.approx(40 / 7) and out["train_timesteps_per_s"] == 32 / 6
    assert out["mean_compile_time_s"] == 3.0  # the 2025.02 summary: mean train time after the first epoch
    assert out["tflops_per_epoch"] == pytest.approx([1.6, 8.0, 4.0])  # 4 batches x 4 samples x 1 TFLOP / t
    assert out["tflops"] == pytest.approx(13.6 / 3)
    assert out["caraml_memory_mb"] == {"peak_fwd": 400.0, "persistent": 100.0, "activation": 300.0, "probes": 2}


def test_columns_of_caramls_table():
    from caraml.results.columns import columns_for

    headers = {c.header for c in columns_for("fno")}
    for header in ("Config", "Runtime (min)", "Epochs", "MeanCompileTime (s)", "TotalEpochTime (s)",
                   "TotalTrainTime (s)", "TotalComputeTime (s)", "Timesteps", "TrainTimesteps", "PeakFwdMem (MB)",
                   "PersistentMem (MB)", "ActivationMem (MB)", "TFLOPs", "Energy/GPU (Wh)", "TotalEnergy (Wh)",
                   "Version", "GlobalBatchSize"):
        assert header in headers, header


def test_data_auto_takes_the_file_where_it_exists(tmp_path):
    from caraml.workloads.fno.files import write_synthetic
    from caraml.workloads.fno.loader import resolve_source
    from caraml.workloads.fno.problems import PROBLEMS

    pb = PROBLEMS["RBC2D"]
    assert resolve_source("auto", "", pb, None) == "synthetic-host"  # no data_path, no CARAML_DATA
    assert resolve_source("auto", "", pb, str(tmp_path)) == "synthetic-host"  # a folder without the file
    write_synthetic(pb, tmp_path, 3, spatial=(8, 4))
    assert resolve_source("auto", "", pb, str(tmp_path)) == "file"
    assert resolve_source("auto", str(tmp_path), pb, None) == "file"
    assert resolve_source("synthetic", str(tmp_path), pb, None) == "synthetic"


def test_compile_scope_epoch_compiles_the_whole_train_epoch(monkeypatch):
    """CARAML's torch.compile(self.train): one compiled call per training epoch (a stop is seen between epochs),
    the step compiled for the steady state, validation eager. torch.compile is recorded, not run (a CPU compile
    takes minutes here); the loader path (synthetic-host) feeds the epochs."""
    import torch

    from caraml.runner import RunSpec, build_bench

    compiled = []
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compiled.append(fn.__name__) or fn)
    bench = build_bench(RunSpec("fno", {"compile": "inductor", "compile_scope": "epoch", "data": "synthetic-host",
                                        "workers": 0, "epochs": 2}, preset="smoke-RBC2D"), device="cpu")
    assert compiled == ["_train_step", "_infer_step", "_train_whole_epoch"]
    bench.step()
    asked = []
    bench.run_extra(lambda: asked.append(1) and False)
    assert len(asked) == 2 * (1 + 1)  # per epoch: the compiled training epoch once, the validation batch once
    e = bench.epochs
    assert e["epochs"] == 2 and e["timesteps"] == 20 and e["train_timesteps"] == 16 and e["tflops"] > 0
    assert bench.details()["data_source"] == "synthetic-host"
    bench.close()
