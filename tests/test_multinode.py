"""Runs across two nodes, emulated on this one host (CPU, gloo).

Two ways to have two nodes here: two torchrun agents (`--nnodes 2`, c10d rendezvous on localhost), each started
with the environment a node of its own would give it (CARAML_HOSTNAME, its own sysfs with a moving RAPL counter);
and the two-node SLURM test cluster (tests/slurm_cluster.py: two slurmd on this host), where a sweep submits jobs
across both. Each run leaves one record with nodes: 2, its world and data-parallel sizes, throughput counted once
per data-parallel replica, and energy per node (two node entries, each device once) with CARAML's jpwr files.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import HANG_S, caraml, cli_env, records_in, wait_until
from ports import free_port
from power_trees import moving_counter, rapl_tree
from slurm_cluster import MULTI, needs_slurm
from slurm_cluster import queue as _queue
from slurm_cluster import wait_for as _wait

from caraml.parallel_dims import ParallelDims

NODES = ("n1", "n2")
COMMON = ["device=cpu", "power=rapl", "power_interval_ms=50", "energy_files=caraml"]  # gloo on a GPU host too


@contextmanager
def _moving_rapl(*roots: Path):
    """A RAPL tree under each root whose package-0 counter moves (40 W) while the block runs."""
    stop = threading.Event()
    tickers = [threading.Thread(target=moving_counter, args=(rapl_tree(root), stop), daemon=True) for root in roots]
    for t in tickers:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in tickers:
            t.join()


def _agents(tmp: Path, ranks_per_node: int, run_args: list[str]) -> list[subprocess.Popen]:
    """Two torchrun agents, one per emulated node, meeting at a c10d rendezvous on localhost."""
    port, procs = free_port(), []
    for node in NODES:
        env = cli_env(CARAML_HOSTNAME=node, CARAML_SYSFS_ROOT=tmp / node / "sys", OMP_NUM_THREADS=1)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--nproc-per-node={ranks_per_node}",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=localhost:{port}", f"--rdzv-id=two-{port}",
               "-m", "caraml", "run", *run_args, "--results", str(tmp / "results"), "--json"]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      start_new_session=True))
    return procs


def _end(procs: list[subprocess.Popen]) -> None:
    for p in procs:  # on any exit of the test: no agent (nor its workers, in its session) runs on
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


def run_on_two_nodes(tmp: Path, ranks_per_node: int, *run_args: str) -> dict:
    """The rank-0 record of a run across the two emulated nodes."""
    procs = _agents(tmp, ranks_per_node, [*run_args, *COMMON])
    try:
        with _moving_rapl(*(tmp / n / "sys" for n in NODES)):
            outs = [p.communicate(timeout=HANG_S) for p in procs]
    finally:
        _end(procs)
    assert [p.returncode for p in procs] == [0, 0], "\n".join(err[-3000:] for _, err in outs)
    [record] = [json.loads(line) for out, _ in outs for line in out.splitlines() if line.startswith("{")]
    return record


def assert_two_nodes(record: dict, world: int, dp: int, units_per_step_per_replica: float) -> None:
    """One record of a two-node run: its layout, throughput once per replica, energy per node, jpwr files."""
    launch, m = record["launch"], record["metrics"]
    assert record["status"] == "ok", record.get("error")
    assert (launch["nodes"], launch["world_size"], launch["local_world_size"]) == (2, world, world // 2)
    assert launch["parallel"]["dp"] == dp and launch["backend"] == "gloo" and record["env"]["hostname"] in NODES
    assert m["units"] == pytest.approx(m["measured_steps"] * dp * units_per_step_per_replica)
    assert m["throughput"]["value"] == pytest.approx(m["units"] / m["measured_time_s"], rel=1e-6)
    energy = m["energy"]
    assert energy["available"] and energy["duplicates_dropped"] == 0
    assert sorted((n["host"], n["node_rank"]) for n in energy["nodes"]) == [("n1", 0), ("n2", 1)] or \
        sorted((n["host"], n["node_rank"]) for n in energy["nodes"]) == [("n1", 1), ("n2", 0)]
    counted = [d for d in energy["devices"] if d["in_total"]]
    assert sorted({d["host"] for d in counted}) == list(NODES)
    assert len({(d["host"], d["uuid"]) for d in counted}) == len(counted)  # no device twice
    assert all(sum(d["run_wh"] for d in counted if d["host"] == h) > 0 for h in NODES)  # each node's counter
    assert energy["total_wh"] == pytest.approx(sum(d["energy_wh"] for d in counted))  # the measured window's
    files = energy["caraml_files"]
    folder = Path(files["folder"])
    assert "missing" not in files and {(n["host"], n["rank"]) for n in files["nodes"]} == \
        {(n["host"], n["node_rank"]) for n in energy["nodes"]}
    for node_rank in (0, 1):
        assert (folder / f"CPU_power.{node_rank}.csv").is_file()
        assert (folder / f"CPU_power.{node_rank}.energy.csv").is_file()
    with open(folder / "combined_energy.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert sorted((r[1], r[2]) for r in rows[1:]) == sorted((n["host"], str(n["node_rank"])) for n in energy["nodes"])


# two torchrun agents -------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_gpt_tensor_parallel_in_a_node_pipeline_across_nodes(tmp_path):
    """13B's layout in miniature: tp 2 inside each node, pp 2 across the nodes, 2 micro-batches."""
    record = run_on_two_nodes(tmp_path, 2, "llm_training", "--preset", "smoke", "tp=2", "pp=2",
                              "grad_accumulation=2", "warmup_steps=1", "measure_steps=2", "--system", "CPU")
    p = record["params"]
    assert (record["launch"]["parallel"]["tp"], record["launch"]["parallel"]["pp"]) == (2, 2)
    dims = ParallelDims(dp=1, tp=2, pp=2)  # torchrun numbers ranks node by node: a node's ranks are one stage
    assert [(dims.coords(rank)[1:], rank // 2) for rank in range(4)] == [((t, s), s) for s in (0, 1) for t in (0, 1)]
    assert_two_nodes(record, world=4, dp=1, units_per_step_per_replica=p["micro_batch_size"] * 2 * p["seq_length"])


@pytest.mark.multiprocess
def test_gpt_data_parallel_across_nodes_with_the_distributed_optimizer(tmp_path):
    record = run_on_two_nodes(tmp_path, 1, "llm_training", "--preset", "smoke", "distributed_optimizer=true",
                              "warmup_steps=1", "measure_steps=2", "--system", "CPU")
    p = record["params"]
    # the former boolean: true is an alias of fsdp (FSDP2), what it ran before distributed_optimizer became a choice
    assert p["distributed_optimizer"] == "fsdp" and p["global_batch_size"] in (0, 2 * p["micro_batch_size"])
    assert_two_nodes(record, world=2, dp=2, units_per_step_per_replica=p["micro_batch_size"] * p["seq_length"])


@pytest.mark.multiprocess
def test_fno_ddp_across_nodes(tmp_path):
    record = run_on_two_nodes(tmp_path, 1, "fno", "--preset", "smoke-RBC2D", "warmup_steps=1", "measure_steps=2",
                              "--system", "CPU")
    batch = record["params"]["batch_size"]  # per device here; the record's global batch is CARAML's batchSize
    assert record["metrics"]["global_batch_size"] == 2 * batch and record["metrics"]["dp"] == 2
    assert_two_nodes(record, world=2, dp=2, units_per_step_per_replica=batch)


def test_the_roll_call_names_the_ranks_that_never_checked_out(tmp_path, monkeypatch):
    from caraml import rollcall
    from caraml.distributed import DistContext

    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job7")
    calls = {}
    for rank, node in enumerate(("n1", "n1", "n2", "n2")):
        monkeypatch.setenv("CARAML_HOSTNAME", node)
        calls[rank] = rollcall.RollCall(tmp_path, "cfg", DistContext(rank=rank, world_size=4, local_world_size=2))
        calls[rank].check_in()
    assert calls[0].folder == tmp_path / "cfg.torchrun-job7.ranks"
    calls[1].check_out("failed")
    calls[2].check_out("interrupted")  # stopped by its agent after its node-mate died: it still had its say
    lost = calls[0].lost(wait_s=0.3)
    assert [(e["rank"], e["node"], e["node_rank"]) for e in lost] == [(3, "n2", 1)]
    assert rollcall.describe(lost).startswith("rank 3 on node n2 (node rank 1) ended without a word")
    calls[3].check_out("ok")
    assert calls[0].lost(wait_s=0) == []
    calls[0].clear()
    assert not calls[0].folder.exists()
    monkeypatch.delenv("TORCHELASTIC_RUN_ID")  # an unknown launcher, or one process: no roll call at all
    assert rollcall.RollCall(tmp_path, "cfg", DistContext(rank=0, world_size=4)).lost() == []
    assert rollcall.RollCall(tmp_path, "cfg", DistContext()).folder is None


def _descendants(pid: int) -> list[int]:
    try:
        kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return kids + [d for k in kids for d in _descendants(k)]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.multiprocess
def test_a_rank_killed_on_one_node_leaves_a_failed_record_naming_node_and_rank(tmp_path):
    results = tmp_path / "results"
    procs = _agents(tmp_path, 1, ["image_classification", "--preset", "smoke", "image_size=32", "batch_size=4",
                                  "warmup_steps=1", "measure_steps=100000", "device=cpu", "power=rapl",
                                  "--system", "CPU"])
    try:
        with _moving_rapl(*(tmp_path / n / "sys" for n in NODES)):
            measuring = '"key": "phase_start", "value": "measuring"'
            wait_until(lambda: any(measuring in p.read_text() for p in results.glob("runs/*.events.jsonl")),
                       "the run to measure", proc=procs[0])
            everything = [d for p in procs for d in _descendants(p.pid)]
            [victim] = [w for w in _descendants(procs[1].pid) if "caraml" in Path(f"/proc/{w}/cmdline").read_text()
                        and "sampler" not in Path(f"/proc/{w}/cmdline").read_text()]
            victim_rank = int(dict(v.split("=", 1) for v in Path(f"/proc/{victim}/environ").read_text().split("\0")
                                   if "=" in v)["RANK"])
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
            for p in procs:
                p.communicate(timeout=HANG_S)
            took = time.monotonic() - killed
    finally:
        _end(procs)
    assert [p.returncode for p in procs] == [1, 1]
    records = records_in(results)
    assert records and all(r["status"] == "failed" for r in records)
    [survivor] = records  # the rank on n1 (rank 0 or 1): its record names the lost rank by node and rank
    assert survivor["env"]["hostname"] == "n1" and survivor["launch"]["rank"] == 1 - victim_rank
    assert f"rank {victim_rank} on node n2 (node rank {victim_rank})" in survivor["error"]
    assert survivor["launch"]["lost_ranks"][0]["node"] == "n2"
    assert took < 90  # the survivor's own failure at once, then at most the roll call's 10 s wait
    time.sleep(0.5)
    assert not [pid for pid in everything if _running(pid)]  # no worker, monitor or agent left behind


# the two-node SLURM cluster ------------------------------------------------------------------------------------
TWO_NODE_SUITE = """
workload: image_classification
preset: smoke
params:
  device: cpu
  image_size: 32
  batch_size: 2,4
  warmup_steps: 1
  measure_steps: 2
  power: rapl
  power_interval_ms: 50
  energy_files: caraml
launch:
  nodes: 2
  devices_per_node: 2
  time_limit: "00:10:00"
"""


def _sweep_on_two_nodes(cluster: dict, tmp: Path, suite_text: str, *executor: str) -> tuple[Path, dict, str]:
    """The sweep submitted to the partition of both nodes (a site override, as a site sets its partition) and run
    to its end; its results folder, the environment of its commands, and the `--continue` report."""
    site = tmp / "site"
    site.mkdir()
    (site / "CPU.toml").write_text(f'[site]\npartition = "{MULTI}"\n')
    env = cli_env(SLURM_CONF=cluster["SLURM_CONF"], CARAML_SYSTEMS_PATH=site, CARAML_SYSFS_ROOT=tmp / "sys",
                  OMP_NUM_THREADS=1)
    suite = tmp / "two-nodes.yaml"
    suite.write_text(suite_text)
    results = tmp / "results"
    with _moving_rapl(tmp / "sys"):  # one sysfs for both nodes: the host names keep their devices apart
        caraml("sweep", suite, "--system", "CPU", "--executor", "slurm", *executor, "--results", results, env=env,
               check=0)
        _wait(lambda: not _queue(env), HANG_S, "the two-node jobs to end")
    out = caraml("sweep", "--continue", "--results", results, env=env, check=0).stdout
    logs = "".join(p.read_text()[-3000:] for p in (results / "sweep" / "logs").iterdir())
    assert out.count(": ok") == 2, out + logs
    return results, env, out


@needs_slurm
@pytest.mark.multiprocess
def test_a_two_node_sweep_on_the_two_node_cluster(slurm_cluster, tmp_path):
    """Image classification, 2 nodes x 2 ranks per point (torchrun agents, then srun tasks); each node's tasks get
    CARAML_HOSTNAME from the task prolog, and the ranks meet at the first node's SLURM address (its name resolves
    nowhere)."""
    derived = """derived:   # one point as torchrun agents (a task per node), one as srun's tasks (a task per device)
  launcher: "'srun' if batch_size == 4 else 'torchrun'"
"""
    results, _, _ = _sweep_on_two_nodes(slurm_cluster, tmp_path, TWO_NODE_SUITE + derived)
    script = next((results / "sweep" / "jobs").glob("*.sh")).read_text()
    assert "#SBATCH --nodes=2" in script and f"#SBATCH --partition={MULTI}" in script
    records = records_in(results)
    assert len(records) == 2
    for record in records:
        launcher = "srun" if record["params"]["batch_size"] == 4 else "torchrun"
        assert record["launch"]["launcher"] == launcher and record["env"]["slurm"]["SLURM_JOB_ID"]
        assert_two_nodes(record, world=4, dp=4, units_per_step_per_replica=record["params"]["batch_size"])


@needs_slurm
@pytest.mark.multiprocess
def test_a_two_node_sweep_as_one_job_array(slurm_cluster, tmp_path):
    """The same two points as the tasks of one job array (`--array`): each task a two-node allocation of its own,
    torchrun agents meeting at a port and rendezvous id of that task's own job id."""
    results, env, out = _sweep_on_two_nodes(slurm_cluster, tmp_path, TWO_NODE_SUITE.replace(
        "  nodes: 2", "  launcher: torchrun\n  nodes: 2"), "--array")
    [array] = (results / "sweep" / "jobs").glob("*-array-*.sh")
    text = array.read_text()
    assert "#SBATCH --nodes=2" in text and f"#SBATCH --partition={MULTI}" in text and "#SBATCH --array=0-1\n" in text
    jobs = json.loads((results / "sweep-state.json").read_text())["jobs"]
    [array_id] = {job.split("_")[0] for job in jobs}
    assert sorted(jobs) == [f"{array_id}_0", f"{array_id}_1"] and all(f"job {job}: ok" in out for job in jobs), out
    records = records_in(results)
    tasks = {f"{r['env']['slurm']['SLURM_ARRAY_JOB_ID']}_{r['env']['slurm']['SLURM_ARRAY_TASK_ID']}" for r in records}
    assert len(records) == 2 and tasks == set(jobs)
    assert len({r["env"]["slurm"]["SLURM_JOB_ID"] for r in records}) == 2  # each task a job of its own
    for record in records:
        assert record["launch"]["launcher"] == "torchrun"
        assert_two_nodes(record, world=4, dp=4, units_per_step_per_replica=record["params"]["batch_size"])
