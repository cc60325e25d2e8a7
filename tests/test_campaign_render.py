"""SLURM job scripts (golden files), quoting of every value, Apptainer commands."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from conftest import caraml

from caraml import systems
from caraml.campaign import container, jobscript
from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import SweepPoint, expand
from caraml.errors import BadInput

GOLDEN = Path(__file__).parent / "golden"
OPTS = jobscript.JobOptions(results="/scratch/caraml results", python="/usr/bin/python3", source="/opt/caraml/src")


def _check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("CARAML_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs; rerun with CARAML_UPDATE_GOLDEN=1 after checking the change"


def _profile(tag: str, **site) -> dict:
    p = dict(systems.get(tag))
    p["site"] = {**p["site"], **site}
    return p


@pytest.mark.subprocess  # bash -n
def test_golden_llm_13b_on_jupiter_with_container():
    """CARAML's 13B job on JUPITER: its queue (jureap), environment, srun binding, the site flags given on the command
    line, srun --cpus-per-task, a rendezvous port from the job id, the image's prepared environment."""
    point = expand(suite_mod.load("llm_training"), {"13B"}, "JUPITER")[0]
    site_env = {**systems.get("JUPITER")["site"]["env"], "NCCL_DEBUG": "WARN"}
    profile = _profile("JUPITER", sbatch_lines=["--mail-type=END"], env=site_env, container_dir="/p/containers")
    opts = jobscript.JobOptions(results=OPTS.results, python=OPTS.python, source=OPTS.source,
                                site={"account": "jscbench", "reservation": "bench", "qos": "normal",
                                      "constraint": "hopper", "exclusive": True})
    script = jobscript.render(point, profile, opts, "/scratch/logs/%j.out")
    _check_golden("llm_13B_JUPITER.sh", script)
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    for line in ("#SBATCH --partition=jureap", "#SBATCH --account=jscbench", "#SBATCH --qos=normal",
                 "#SBATCH --reservation=bench", "#SBATCH --constraint=hopper", "#SBATCH --exclusive",
                 "#SBATCH --time=01:15:00", "#SBATCH --cpus-per-task=72", "export CUDA_DEVICE_MAX_CONNECTIONS=1",
                 "export NCCL_SOCKET_IFNAME=ib0", "export GLOO_SOCKET_IFNAME=ib0", "export NCCL_IB_TIMEOUT=50",
                 "export UCX_RC_TIMEOUT=4s", "export NCCL_IB_RETRY_CNT=10", "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1",
                 "export NCCL_DEBUG=WARN", "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))"):
        assert line in script.splitlines(), line
    srun = next(ln for ln in script.splitlines() if ln.startswith("srun "))
    assert srun.startswith("srun --nodes=44 --ntasks-per-node=1 --cpus-per-task=72 --cpu-bind=v --mpi=pmi2 apptainer")
    assert " /p/containers/envs/nvcr.io_nvidia_pytorch_24.09-py3-not-pulled/bin/python -m torch.distributed.run" in srun


def test_golden_image_classification_srun_per_gpu_without_container():
    point = expand(suite_mod.load("image_classification"), {"bf16"}, "A100")[2]
    point.launcher = "srun"
    profile = _profile("A100", container_image="", gpu_option="gpus-per-node", signal_before_s=300)
    _check_golden("ic_A100_srun.sh", jobscript.render(point, profile, OPTS, "/scratch/logs/%j.out"))


@pytest.mark.subprocess
def test_every_value_stays_data(tmp_path):
    """A value with spaces, quotes and $(...) reaches the worker as one unchanged argument."""
    nasty = "x $(touch PWNED) `touch PWNED2` 'q' \"d\" ; rm -rf ~"
    point = SweepPoint(id="0123456789abcdef", workload="image_classification", system="CPU", preset=None,
                  params={"model": nasty, "batch_size": 8}, shown={"model": nasty})
    profile = _profile("CPU", hostname_suffix="i'; touch PWNED4; '", env={"CARAML_NOTE": "a b $(touch PWNED5)"})
    script = jobscript.render(point, profile, OPTS, str(tmp_path / "log %j.out"))
    assert subprocess.run(["bash", "-n"], input=script, text=True).returncode == 0
    # Run the script's shell lines with real bash, `srun` printing its arguments instead of launching.
    lines = [ln for ln in script.splitlines() if not ln.startswith("#SBATCH")]
    body = "\n".join(lines).replace("\nsrun ", "\nprintf '%s\\0' ").replace("scontrol show hostnames", "echo")
    body = body.replace("getent hosts", "true")  # node1 resolves
    env = {"PATH": os.environ["PATH"], "SLURM_JOB_NODELIST": "node1", "SLURM_JOB_ID": "7"}
    proc = subprocess.run(["bash", "-c", body + "\n"], capture_output=True, cwd=tmp_path, env=env)
    args = proc.stdout.decode().split("\0")
    assert f"model={nasty}" in args
    assert "--rdzv-endpoint=node1i'; touch PWNED4; ':20007" in args  # the port from the job id (7)
    assert not list(tmp_path.glob("PWNED*"))
    with pytest.raises(BadInput, match=r"^system CPU: site.partition = 'debug \$\(touch PWNED3\)' is not valid"):
        jobscript.render(point, _profile("CPU", partition="debug $(touch PWNED3)"), OPTS, "/tmp/x.out")
    assert "export CARAML_NOTE='a b $(touch PWNED5)'" in script


@pytest.mark.subprocess
@pytest.mark.parametrize("resolves, head", [(True, "n1i"), (False, "localhosti")])
def test_rendezvous_at_the_node_address_when_the_node_name_does_not_resolve(resolves, head):
    """Emulated nodes (several slurmd on one host) have names no resolver knows: SLURM's NodeAddr is used."""
    point = SweepPoint(id="0123456789abcdef", workload="image_classification", system="CPU", preset=None,
                       params={"batch_size": 8}, nodes=2)
    script = jobscript.render(point, _profile("CPU", hostname_suffix="i"), OPTS, "/tmp/x.out")
    fakes = ('scontrol() { if [ "$2" = hostnames ]; then printf "n1\\nn2\\n"; '
             'else echo "NodeName=n1 Arch=x86_64 NodeAddr=localhost NodeHostName=localhost"; fi; }\n'
             f"getent() {{ {'true' if resolves else 'false'}; }}\n")
    lines = [ln for ln in script.splitlines() if ln.startswith(("caraml_head", "getent"))]
    out = subprocess.run(["bash", "-c", fakes + "\n".join(lines) + '\necho "$caraml_head"'], capture_output=True,
                         text=True, env={"PATH": os.environ["PATH"], "SLURM_JOB_NODELIST": "n[1-2]"})
    assert out.stdout.strip() == head, out.stderr


def test_line_breaks_in_values_are_refused():
    point = SweepPoint(id="0123456789abcdef", workload="image_classification", system="CPU", preset=None,
                  params={"model": "a\nb"})
    with pytest.raises(Exception, match="line break"):
        jobscript.render(point, _profile("CPU"), OPTS, "/tmp/x.out")


@pytest.mark.subprocess
def test_apptainer_commands():
    h100, mi250 = _profile("H100", container_dir="/p/c"), _profile("MI250", container_image="/p/rocm.sif")
    sif = "/p/c/nvcr.io_nvidia_pytorch_24.09-py3.sif"
    assert container.pull_command(h100) == ["apptainer", "pull", sif, "docker://nvcr.io/nvidia/pytorch:24.09-py3"]
    assert container.exec_prefix(h100, ["/r", "/src"]) == ["apptainer", "exec", "--nv", "--bind", "/r,/src", sif]
    assert container.exec_prefix(mi250, ["/r"]) == ["apptainer", "exec", "--rocm", "--bind", "/r", "/p/rocm.sif"]
    assert caraml("container", "pull", "--system", "H100", "--print", check=0).stdout.startswith("apptainer pull ")
    assert "names no image to pull" in caraml("container", "pull", "--system", "CPU", check=2).stderr


@pytest.mark.subprocess
def test_slurm_dry_run_writes_scripts_and_submits_nothing(tmp_path):
    caraml("sweep", "image_classification", "--system", "H100", "--tag", "bf16", "--executor", "slurm",
           "--dry-run", "--results", tmp_path, check=0)
    scripts = sorted((tmp_path / "sweep" / "jobs").glob("*.sh"))
    assert len(scripts) == 7
    assert all("#SBATCH --gres=gpu:4" in s.read_text() and "apptainer exec --nv" in s.read_text() for s in scripts)
    assert not (tmp_path / "sweep-state.json").exists()


@pytest.mark.subprocess
def test_slurm_without_slurm_commands_is_bad_input(tmp_path):
    from conftest import cli_env

    env = cli_env(PATH=str(Path(os.sys.executable).parent))
    proc = caraml("sweep", "image_classification", "--system", "CPU", "--executor", "slurm", "--results", tmp_path,
                  env=env, check=2)
    assert "needs the SLURM commands sbatch" in proc.stderr
    assert not (tmp_path / "sweep-state.json").exists()
