"""Site settings of the SLURM jobs: CARAML's per system and workload, a site's own TOML over them, the command line's
flags over both; the rendezvous port; job arrays (rendered here; submitted in test_campaign_slurm.py)."""

from __future__ import annotations

import subprocess

import pytest
from conftest import run_cli

from caraml import systems
from caraml.campaign import jobscript
from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import expand

OPTS = jobscript.JobOptions(results="/scratch/r", python="/usr/bin/python3", source="/opt/caraml/src")
CARAML_ENV = ("CUDA_DEVICE_MAX_CONNECTIONS=1", "TORCH_NCCL_ASYNC_ERROR_HANDLING=1", "NCCL_IB_TIMEOUT=50",
              "UCX_RC_TIMEOUT=4s", "NCCL_IB_RETRY_CNT=10")
IB0 = ("NCCL_SOCKET_IFNAME=ib0", "GLOO_SOCKET_IFNAME=ib0")

# CARAML's LLM jobs (llm_benchmark_nvidia_amd.yaml, version 2025.01; JUPITER's queue from the newest version):
# queue, threads per task, the master address suffix, srun --cpu_bind / --mpi, ib0 for NCCL/Gloo, constraint.
LLM = {
    "JUPITER": ("jureap", 72, "", "v", "pmi2", True, ""),
    "GH200": ("dc-gh", 72, "i", "v", "pspmix", False, ""),
    "WAIH100": ("dc-wai", 64, "i", "v", "pspmix", True, ""),
    "H100": ("dc-h100", 72, "i", "v", "pspmix", True, ""),
    "A100": ("dc-gpu", 128, "i", "v", "pspmix", True, ""),
    "MI250": ("dc-mi200", 48, "i", "none,v", "pspmix", False, ""),
    "MI300X": ("", 48, "", "none,v", "", False, "mi300x"),
    "MI300A": ("", 48, "", "none,v", "", False, "mi300a"),
}
# CARAML's image-classification jobs (image_classification_torch_benchmark.xml): queue, threads, suffix, cpu_bind
IC = {"JUPITER": ("booster", 72, "", "socket,v"), "GH200": ("dc-gh", 72, "", "socket,v"),
      "WAIH100": ("dc-hwai", 64, "i", "none,v"), "H100": ("dc-h100", 72, "i", "none,v"),
      "A100": ("dc-gpu-devel", 72, "i", "none,v"), "MI250": ("dc-mi200", 48, "i", "none,v")}


def _script(suite: str, tags: set[str], tag: str, opts=OPTS) -> str:
    point = expand(suite_mod.load(suite), tags, tag)[0]
    return jobscript.render(point, systems.get(tag), opts, "/scratch/%j.out")


def _srun(script: str) -> str:
    return next(line for line in script.splitlines() if line.startswith("srun "))


@pytest.mark.parametrize("tag", list(LLM))
def test_llm_jobs_get_caramls_site_settings(tag):
    partition, cpus, suffix, cpu_bind, mpi, ib0, constraint = LLM[tag]
    script = _script("llm_training", {"800M"}, tag)
    lines = script.splitlines()
    assert ("#SBATCH --partition=" + partition in lines) == bool(partition)
    assert ("#SBATCH --constraint=" + constraint in lines) == bool(constraint)
    assert f"#SBATCH --cpus-per-task={cpus}" in lines and "#SBATCH --time=01:15:00" in lines
    assert all(f"export {kv}" in lines for kv in CARAML_ENV)
    assert all((f"export {kv}" in lines) == ib0 for kv in IB0)
    assert _suffix(lines) == suffix
    srun = _srun(script)
    assert f" --cpus-per-task={cpus} " in srun and f" --cpu-bind={cpu_bind} " in srun
    assert (f" --mpi={mpi} " in srun) == bool(mpi)
    assert " energy_files=caraml " in srun  # CARAML's LLM jobs always write jpwr's energy files


@pytest.mark.parametrize("tag", list(IC))
def test_image_classification_jobs_keep_the_systems_own_settings(tag):
    partition, cpus, suffix, cpu_bind = IC[tag]
    script = _script("image_classification", set(), tag)
    lines = script.splitlines()
    assert f"#SBATCH --partition={partition}" in lines and f"#SBATCH --cpus-per-task={cpus}" in lines
    assert not any("CUDA_DEVICE_MAX_CONNECTIONS" in line for line in lines)  # Megatron's, the LLM's alone
    assert f" --cpu-bind={cpu_bind} " in _srun(script)
    assert _suffix(lines) == suffix


def _suffix(lines: list[str]) -> str:
    """The suffix the job script appends to the first node's name for the master address ('' for none)."""
    added = [line for line in lines if line.startswith('caraml_head="$caraml_head"')]
    return added[0][len('caraml_head="$caraml_head"'):] if added else ""


SITE_TOML = """[site]
account = "myproject"
qos = "normal"
exclusive = true

[site.workloads.llm_training]
partition = "llm-queue"
env = {NCCL_DEBUG = "WARN"}
"""


def test_a_site_file_overrides_profile_and_workload_settings_key_by_key(tmp_path, monkeypatch):
    (tmp_path / "A100.toml").write_text(SITE_TOML)
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    llm = _script("llm_training", {"800M"}, "A100").splitlines()
    for line in ("#SBATCH --partition=llm-queue", "#SBATCH --account=myproject", "#SBATCH --qos=normal",
                 "#SBATCH --exclusive", "#SBATCH --cpus-per-task=128", "export NCCL_DEBUG=WARN",
                 "export CUDA_DEVICE_MAX_CONNECTIONS=1", "export NCCL_SOCKET_IFNAME=ib0"):
        assert line in llm, line
    ic = _script("image_classification", set(), "A100").splitlines()
    assert "#SBATCH --partition=dc-gpu-devel" in ic and "#SBATCH --account=myproject" in ic
    assert "export NCCL_DEBUG=WARN" not in ic
    # the command line's flags over both
    opts = jobscript.JobOptions(results="/r", python="/py", site={"partition": "other", "account": "p2"})
    flagged = _script("llm_training", {"800M"}, "A100", opts).splitlines()
    assert "#SBATCH --partition=other" in flagged and "#SBATCH --account=p2" in flagged


@pytest.mark.subprocess  # bash
def test_rendezvous_port_from_the_job_id_or_the_sites_fixed_one():
    point = expand(suite_mod.load("image_classification"), set(), "CPU")[0]
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))" in jobscript.render(
        point, systems.get("CPU"), OPTS, "/l")
    fixed = {**systems.get("CPU"), "site": {**systems.get("CPU")["site"], "rdzv_port": 29400}}
    assert "export MASTER_PORT=29400" in jobscript.render(point, fixed, OPTS, "/l")
    port = subprocess.run(["bash", "-c", "echo $((20000 + SLURM_JOB_ID % 10000))"], capture_output=True, text=True,
                          env={"SLURM_JOB_ID": "1234567"}).stdout.strip()
    assert port == "24567"


@pytest.mark.parametrize("flags, expect", [
    (["--partition", "dc gpu"], "--partition 'dc gpu' is not valid; it must be a partition name"),
    (["--account", "$(id)"], "--account '$(id)' is not valid; it must be an account"),
    (["--qos", ""], "--qos '' is not valid; it must not be empty"),
    (["--constraint", "a100;rm"], "--constraint 'a100;rm' is not valid; it must be node features"),
])
def test_bad_site_flags_are_one_line(capsys, tmp_path, flags, expect):
    code, out, err = run_cli(capsys, "sweep", "image_classification", "--system", "A100", "--executor", "slurm",
                          "--dry-run", "--results", tmp_path, *flags)
    assert code == 2 and not out and err.strip().splitlines() == [f"caraml: error: {expect}" + err.split(expect)[1]
                                                                  .rstrip("\n")]
    assert not (tmp_path / "sweep").exists()


def test_site_flags_need_slurm_jobs(capsys, tmp_path):
    code, _, err = run_cli(capsys, "sweep", "image_classification", "--system", "CPU", "--account", "p",
                        "--results", tmp_path)
    assert code == 2 and err.strip() == "caraml: error: --account shapes SLURM jobs: it goes with --executor slurm"
    code, _, err = run_cli(capsys, "launch", "image_classification", "global_batch_size=32", "--system", "CPU",
                        "--partition", "x")
    assert code == 2 and "--partition goes with --script" in err


def test_bad_site_values_in_a_profile_are_one_line(capsys, tmp_path, monkeypatch):
    (tmp_path / "A100.toml").write_text('[site.workloads.llm_training]\ncpu_bind = "v; touch X"\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(tmp_path))
    code, out, err = run_cli(capsys, "launch", "llm_training", "--tag", "800M", "global_batch=16", "--system", "A100",
                          "--script")
    assert code == 2 and not out
    assert err.strip() == ("caraml: error: system A100: site.cpu_bind = 'v; touch X' is not valid; it must be an "
                           "srun --cpu-bind value, e.g. v or none,v")
    other = tmp_path / "other"  # profiles are read once per CARAML_SYSTEMS_PATH
    other.mkdir()
    (other / "A100.toml").write_text('[site.workloads.llm_training]\ncpus_per_task = "many"\n')
    monkeypatch.setenv("CARAML_SYSTEMS_PATH", str(other))
    code, _, err = run_cli(capsys, "systems")
    assert code == 2 and "site.workloads.llm_training.cpus_per_task = many is not valid; it must be a whole" in err


@pytest.mark.subprocess  # bash -n
def test_launch_script_takes_the_site_flags(capsys):
    code, out, err = run_cli(capsys, "launch", "llm_training", "--tag", "13B", "--system", "JUPITER", "--script",
                          "--account", "jscbench", "--reservation", "bench", "--exclusive")
    assert code == 0, err
    lines = out.splitlines()
    assert {"#SBATCH --account=jscbench", "#SBATCH --reservation=bench", "#SBATCH --exclusive",
            "#SBATCH --partition=jureap"} <= set(lines)
    assert subprocess.run(["bash", "-n"], input=out, text=True).returncode == 0


ARRAY_SUITE = """
workload: image_classification
preset: smoke
params:
  image_size: 32,40,48
launch:
  devices_per_node:
    - value: 1
    - {tag: two, value: 2}
"""


@pytest.mark.subprocess  # bash -n
def test_array_dry_run_writes_one_array_per_job_shape(capsys, tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(ARRAY_SUITE.replace("image_size: 32,40,48", "image_size: 32,40,48\n  batch_size: 2"))
    code, out, err = run_cli(capsys, "sweep", suite, "--system", "CPU", "--executor", "slurm", "--dry-run",
                          "--array", "2", "--results", tmp_path / "r")
    assert code == 0, err
    [array] = (tmp_path / "r" / "sweep" / "jobs").glob("caraml-image_classification-array-*.sh")
    text = array.read_text()
    assert "#SBATCH --array=0-2%2" in text and "1 job array script(s)" in err
    assert 'exec bash "${caraml_points[$SLURM_ARRAY_TASK_ID]}"' in text
    assert text.count(".sh") == 3 and subprocess.run(["bash", "-n", array]).returncode == 0
    # points of two job shapes (1 and 2 nodes): two arrays
    suite.write_text(ARRAY_SUITE + "  nodes: 1,2\n")
    code, _, err = run_cli(capsys, "sweep", suite, "--system", "CPU", "--executor", "slurm", "--dry-run", "--array",
                        "--results", tmp_path / "r2")
    assert code == 0, err and "2 job array script(s)" in err
    arrays = sorted((tmp_path / "r2" / "sweep" / "jobs").glob("*-array-*.sh"))
    assert len(arrays) == 2 and all("%" not in a.read_text().split("--array=")[1].split()[0] for a in arrays)
