"""The JUBE configurations in jube/, run by the real JUBE (Debian's `jube`), with caraml doing each measurement.

Each test copies jube/ into a temporary folder (JUBE writes its runs next to the configuration) and
calls caraml from this tree through CARAML_CMD.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import handmade
import pytest
from conftest import HANG_S, ROOT, caraml, cli, cli_env
from slurm_cluster import needs_slurm, wait_for

# The tests that run JUBE carry `jube` (skipped without it, slow); caraml's helpers for JUBE (launch, row) run here.

IC = "image_classification/image_classification_torch_benchmark.xml"
IC_RUN = "image_classification/image_classification_torch_benchmark_run"
LLM = "llm_training/llm_benchmark_nvidia_amd.yaml"
LLM_RUN = "llm_training/llm_benchmark_nvidia_amd_run"
IPU = "llm_training/llm_benchmark_ipu.yaml"
IPU_RUN = "llm_training/llm_benchmark_ipu_run"
FNO = "operator_benchmark/fno_benchmark.yaml"
FNO_RUN = "operator_benchmark/fno_benchmark_run"

LLM_COLUMNS = ["System", "ModelSize", "Nodes", "Devices", "GlobalBatchSize", "PipelineParallel", "TensorParallel",
               "DataParallel", "Iterations", "Time/iteration(s)", "Tokens/second", "Avg_TFLOPs/GPU", "Energy Wh",
               "Tokens/Wh", "MFU", "Status"]
IC_COLUMNS = ["JobID", "System", "Version", "Queue", "Runtime(s)", "Model", "Dataset", "Nodes", "Devices", "Tasks/Node",
              "Threads/Task", "Workers", "GlobalBatchSize", "BatchSize/Device", "Epoch", "Precision", "Images/second",
              "EnergyFile", "Compiler", "CompilerMode", "TrainOptim", "ChannelsLast", "Images/s", "Energy Wh",
              "Images/Wh", "MFU", "Status"]


@pytest.fixture
def tree(tmp_path) -> Path:
    dest = tmp_path / "jube"
    shutil.copytree(ROOT / "jube", dest, ignore=shutil.ignore_patterns("*_run"))
    return dest


def jube_env(**extra) -> dict:
    return cli_env(CARAML_CMD=f"{sys.executable} -m caraml", **extra)


def jube(tree: Path, *args, env=None, check=0, timeout=HANG_S) -> subprocess.CompletedProcess:
    proc = subprocess.run(["jube", *map(str, args)], cwd=tree, env=env or jube_env(), capture_output=True,
                          text=True, timeout=timeout)
    if check is not None:
        assert proc.returncode == check, f"jube {' '.join(map(str, args))}: exit {proc.returncode}\n" \
                                         f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def table(text: str) -> tuple[list[str], list[dict]]:
    """The rows of a JUBE 'pretty' table: header and one dict per row."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|") and not set(ln) <= set("|-")]
    cells = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in lines]
    return cells[0], [dict(zip(cells[0], row)) for row in cells[1:]]


def workpackages(tree: Path, run: str, step: str = "run") -> list[Path]:
    """The work folders of a step in the last JUBE run."""
    last = sorted(p for p in (tree / run).iterdir() if p.is_dir())[-1]
    return sorted(last.glob(f"*_{step}/work"))


def points(tree: Path, run: str) -> list[dict]:
    return [json.loads((wp / "point.json").read_text()) for wp in workpackages(tree, run)]


def sweep_ids(suite: str, *args, overrides=()) -> set[str]:
    out = caraml("sweep", suite, *overrides, *args, "--dry-run", "--json", check=0).stdout
    return {p["id"] for p in json.loads(out)}


@pytest.mark.jube
def test_image_classification_on_cpu_run_continue_result(tree):
    jube(tree, "run", IC, "--tag", "CPU", "smoke")
    jube(tree, "continue", IC_RUN, "-i", "last")
    header, rows = table(jube(tree, "result", IC_RUN, "-i", "last").stdout)
    assert header == IC_COLUMNS
    assert [(r["GlobalBatchSize"], r["BatchSize/Device"]) for r in rows] == [("4", "4"), ("8", "8")]
    for r in rows:
        assert (r["System"], r["Model"], r["Nodes"], r["Devices"], r["Status"]) == ("CPU", "resnet18", "1", "1", "ok")
        assert (r["Precision"], r["Compiler"], r["ChannelsLast"]) == ("fp32", "none", "false")
        assert (r["Tasks/Node"], r["Threads/Task"], r["Workers"], r["Dataset"]) == ("1", "2", "0", "Synthetic(Device)")
        assert r["JobID"] == r["Images/second"] == "" and float(r["Runtime(s)"]) > 0  # local; steady state only
        assert float(r["Images/s"]) > 0

    # The same runs are in caraml's store of this JUBE run, with the numbers JUBE shows.
    store = sorted((tree / IC_RUN).iterdir())[-1] / "caraml-results"
    recorded = json.loads(caraml("result", "--results", store, "--format", "rows-json", check=0).stdout)
    by_batch = {r["global_batch_size"]: r["throughput"] for r in recorded}
    assert {gbs: f"{v:.1f}" for gbs, v in by_batch.items()} == {int(r["GlobalBatchSize"]): r["Images/s"]
                                                                 for r in rows}
    wp = workpackages(tree, IC_RUN)[0]
    assert "--system CPU" in (wp / "launch.sh").read_text() and "--json" in (wp / "launch.sh").read_text()


@pytest.mark.jube
@needs_slurm
def test_image_classification_through_slurm(tree, slurm_cluster):
    env = jube_env(SLURM_CONF=slurm_cluster["SLURM_CONF"])
    out = jube(tree, "run", IC, "--tag", "CPU", "smoke", "slurm", env=env).stdout
    assert "wait" in out  # submitted: the work packages wait for their done files

    def finished():
        jube(tree, "continue", IC_RUN, "-i", "last", env=env)
        return jube(tree, "status", IC_RUN, "-i", "last", env=env).stdout.strip() == "FINISHED"

    wait_for(finished, HANG_S, "the SLURM jobs and `jube continue` to finish the benchmark")
    header, rows = table(jube(tree, "result", IC_RUN, "-i", "last", env=env).stdout)
    assert header == IC_COLUMNS
    assert sorted(r["GlobalBatchSize"] for r in rows) == ["4", "8"]
    assert all(r["Status"] == "ok" and float(r["Images/s"]) > 0 for r in rows)

    for wp in workpackages(tree, IC_RUN):
        script = (wp / "job.sh").read_text()
        assert "#SBATCH --cpus-per-task=2" in script  # from the CPU system profile
        assert f"trap 'touch {wp / 'ready'}' EXIT" in script
        record = json.loads((wp / "record.json").read_text())
        assert f"Submitted batch job {record['env']['slurm']['SLURM_JOB_ID']}" in (wp / "stdout").read_text()
        assert "measuring" in (wp / "job.out").read_text()  # the job's log, where the job script put it


@pytest.mark.jube
def test_llm_and_fno_expand_like_the_shipped_suites(tree):
    # dryrun: each work package asks caraml for its point, launch line and job script, runs nothing
    jube(tree, "run", LLM, "--tag", "13B", "JUPITER", "dryrun")
    [point] = points(tree, LLM_RUN)
    assert point["id"] in sweep_ids("llm_training", "--tag", "13B", "--system", "JUPITER")
    assert (point["nodes"], point["params"]["tp"], point["params"]["pp"], point["params"]["global_batch_size"]) \
        == (44, 2, 2, 44 * 2 * 64)  # CARAML's 13B: dp 44 x micro-batch 2 x 64
    script = (workpackages(tree, LLM_RUN)[0] / "job.sh").read_text()
    assert "#SBATCH --nodes=44" in script and "--gres=gpu:4" in script  # JUPITER's profile
    jube(tree, "run", LLM, "--tag", "800M", "H100", "dryrun")  # the global batch sweep: one work package each
    got = points(tree, LLM_RUN)
    assert {p["id"] for p in got} == sweep_ids("llm_training", "--tag", "800M", "--system", "H100")
    assert sorted(p["params"]["global_batch_size"] for p in got) == [16 * 2 ** i for i in range(9)]

    jube(tree, "run", FNO, "--tag", "H100", "RBC3D", "ddp", "eval", "dryrun")
    got = points(tree, FNO_RUN)
    assert {p["id"] for p in got} == sweep_ids("fno", "--tag", "RBC3D", "--tag", "ddp", "--tag", "eval",
                                               "--system", "H100")
    # CARAML's fno_compile.py table: one job, eager then each compile mode inside it
    assert len(got) == 1 and {(p["devices_per_node"], p["params"]["mode"], p["params"]["width"]) for p in got} \
        == {(4, "eval", 25)}
    assert {(p["params"]["compile"], p["params"]["compile_report"]) for p in got} == {("none", True)}

    jube(tree, "run", FNO, "--tag", "MILA", "all", "dryrun")
    got = points(tree, FNO_RUN)
    assert {p["id"] for p in got} == sweep_ids("fno", "--tag", "all", "--system", "MILA")
    assert {p["params"]["problem"]: p["params"]["global_batch_size"] for p in got} == {
        "PIC1D": 20, "PIC2D": 8, "RBC2D": 20, "RBC3D": 20}
    assert len(got) == 8 and {p["params"]["precision"] for p in got} == {"fp32", "fp16"}

    jube(tree, "run", FNO, "--tag", "MILA", "all", "smoke", "dryrun")
    got = points(tree, FNO_RUN)
    assert {p["id"] for p in got} == sweep_ids("fno", "--tag", "all", "--tag", "smoke", "--system", "MILA")
    assert len(got) == 4 and {p["params"]["width"] for p in got} == {8}

    jube(tree, "run", IPU, "--tag", "117M", "synthetic", "dryrun")
    [point] = points(tree, IPU_RUN)
    assert (point["system"], point["params"]["model_size"], point["params"]["num_layers"],
            point["params"]["data"]) == ("GC200", "117M", 12, "synthetic")


@pytest.mark.jube
def test_llm_smoke_on_cpu_run_continue_result(tree):
    jube(tree, "run", LLM, "--tag", "CPU", "smoke")
    jube(tree, "continue", LLM_RUN, "-i", "last")
    header, rows = table(jube(tree, "result", LLM_RUN, "-i", "last").stdout)
    assert header == LLM_COLUMNS
    [r] = rows
    assert (r["System"], r["ModelSize"], r["Devices"], r["GlobalBatchSize"], r["PipelineParallel"],
            r["TensorParallel"], r["DataParallel"], r["Iterations"], r["Status"]) == (
        "CPU", "smoke", "1", "2", "1", "1", "1", "2", "ok")
    assert float(r["Tokens/second"]) > 0 and float(r["Avg_TFLOPs/GPU"]) >= 0  # .1f: a tiny model on a CPU shows 0.0


@pytest.mark.jube
def test_fno_smoke_runs_on_cpu(tree):
    jube(tree, "run", FNO, "--tag", "CPU", "PIC1D", "smoke")
    jube(tree, "continue", FNO_RUN, "-i", "last")
    header, rows = table(jube(tree, "result", FNO_RUN, "-i", "last").stdout)
    assert header[:5] == ["System", "Version", "Problem", "Config", "Devices"] and "TrainTimesteps/second" in header
    [row] = rows
    assert (row["Version"], row["Config"]) == ("2025.02", "electrostatic_plasma1d_pic.yaml")
    assert int(row["Timesteps"]) > 0 and float(row["TotalComputeTime (s)"]) > 0
    assert (row["System"], row["Problem"], row["Mode"], row["Compiler"], row["Status"]) == (
        "CPU", "PIC1D", "train", "none", "ok")
    assert row["InputShape"] == "[4,2,512]" and float(row["Timesteps/s"]) > 0
    assert float(row["TrainTimesteps/second"]) > 0


@pytest.mark.jube
def test_container_tag_pulls_the_systems_image(tree, tmp_path):
    if shutil.which("apptainer"):
        pytest.skip("apptainer is installed: the pull would reach the network")
    site = tmp_path / "site"
    site.mkdir()
    (site / "CPU.toml").write_text('[site]\ncontainer_image = "docker://example.org/caraml/cpu:1"\n')
    jube(tree, "run", IC, "--tag", "CPU", "container", env=jube_env(CARAML_SYSTEMS_PATH=site))
    assert workpackages(tree, IC_RUN, "run") == []  # with container, only the image is pulled
    [wp] = workpackages(tree, IC_RUN, "container")
    assert "apptainer is not on PATH" in (wp / "stderr").read_text()
    assert "example.org/caraml/cpu:1" in (wp / "stderr").read_text()


# `caraml launch` and `caraml row`, which the configurations call ------------------------------------------
def test_launch_renders_one_point_from_the_profile(tmp_path):
    out = cli("launch", "image_classification", "global_batch_size=256", "precision=bf16", "--system", "H100",
              "--script", "--record", tmp_path / "r.json", "--done-file", tmp_path / "ready",
              "--results", tmp_path / "res", check=0).stdout
    assert "#SBATCH --gres=gpu:4" in out and "#SBATCH --partition=dc-h100" in out
    assert " batch_size=64 " in out and "apptainer exec --nv" in out  # 256 over H100's 4 GPUs, in its container
    assert f"--json > {tmp_path / 'r.json'} &" in out and f"trap 'touch {tmp_path / 'ready'}' EXIT" in out


def test_launch_and_row_bad_input(tmp_path):
    many = cli("launch", "image_classification", "--system", "CPU", check=2).stderr
    assert many.count("\n") == 1 and "7 points" in many and "global_batch_size (32, 64" in many
    alone = cli("launch", "fno", "--system", "CPU", "--record", "r.json", check=2).stderr
    assert "--record goes with --script" in alone
    empty = tmp_path / "record.json"
    empty.write_text("")
    assert "is empty: the run wrote no record" in cli("row", empty, check=2).stderr
    assert "cannot be read" in cli("row", tmp_path / "missing.json", check=2).stderr


def test_row_prints_the_records_table_columns(tmp_path):
    # A hand-written 13B record on JUPITER with energy (neither runs here), after other output.
    rec = handmade.record("llm_training", "JUPITER", {"model_size": "13B", "tp": 2, "pp": 4, "global_batch_size": 128,
                                                      "sequence_parallel": True},
                          5000.0, devices=16, nodes=4, energy_wh=12.5, units_per_wh=40000.0, mfu=0.41)
    path = tmp_path / "record.json"
    path.write_text("some other output\n" + json.dumps(rec) + "\n")
    lines = dict(ln.split("=", 1) for ln in cli("row", path, check=0).stdout.splitlines())
    assert (lines["system"], lines["model_size"], lines["nodes"], lines["devices"]) == ("JUPITER", "13B", "4", "16")
    assert (lines["tp"], lines["pp"], lines["dp"], lines["global_batch_size"]) == ("2", "4", "2", "128")
    assert (float(lines["throughput"]), float(lines["energy_wh"]), float(lines["mfu"])) == (5000.0, 12.5, 0.41)
    assert lines["status"] == "ok" and lines["run_id"] == rec["run_id"] and lines["error"] == ""
