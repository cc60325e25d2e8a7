"""Image classification as CARAML runs it: per-system layouts, tags, the caraml preset's epochs, CARAML's
energy files and columns, and the Graphcore path's pure parts (poptorch itself is not installed here)."""

from __future__ import annotations

import csv
import json
import re
import signal
import threading
from pathlib import Path

import handmade
import pytest
from conftest import caraml, cli_env, kill_tree, records_in, run, torchrun
from power_trees import moving_counter, rapl_tree

from caraml import cli
from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import expand
from caraml.workloads.image_classification.ipu import caraml_accumulation

GLOBAL_BATCHES = (32, 64, 128, 256, 512, 1024, 2048)
# CARAML's image_classification_torch_benchmark.xml, per system tag:
# nodes, GPUs (GC200: IPU replicas) per node, threads per task, workers, queue, constraint
CARAML = {
    "JUPITER": (1, 4, 72, 18, "booster", None),
    "GH200": (1, 1, 72, 18, "dc-gh", None),
    "WAIH100": (2, 4, 64, 16, "dc-hwai", None),
    "H100": (1, 4, 72, 18, "dc-h100", None),
    "A100": (2, 4, 72, 18, "dc-gpu-devel", None),
    "MI250": (2, 8, 48, 12, "dc-mi200", None),
    "GC200": (1, 4, 48, 12, "dc-ipu", None),
    "MI300X": (1, 8, 48, 12, None, "mi300x"),
    "MI300A": (1, 4, 48, 12, None, "mi300a"),
}
GC200_ACCUMULATION = {16: 4, 32: 4, 64: 4, 128: 16, 256: 16, 512: 32, 1024: 64, 2048: 128, 4096: 256}


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """The `caraml` command in this process (the same parser and code as the installed command)."""
    code = cli.main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


def sbatch(script: str) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([a-z-]+)=(.*)$", script, re.M))


# layouts ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("system", sorted(CARAML))
def test_dry_run_matches_caraml_layout(system, tmp_path, capsys):
    nodes, per_node, threads, workers, queue, constraint = CARAML[system]
    code, out, _ = run_cli(capsys, "sweep", "image_classification", "--tag", system, "--dry-run", "--json",
                           "--system", system, "--executor", "slurm", "--results", tmp_path)
    assert code == 0
    points = json.loads(out)
    assert len(points) == len(GLOBAL_BATCHES)
    scripts = {p.stem: p.read_text() for p in (tmp_path / "sweep" / "jobs").glob("*.sh")}
    by_batch = {}
    for p in points:
        params = p["params"]
        ipu = system == "GC200"
        devices = p["world_size"] * params["replicas"]  # GC200: one process drives the 4 IPUs
        assert (p["nodes"], devices // p["nodes"]) == (nodes, per_node)
        assert (params["workers"], p["time_limit"], p["launcher"]) == (workers, "01:20:00", "torchrun")
        assert params["engine"] == ("poptorch" if ipu else "torch")
        gbs = params["batch_size"] * devices * params["grad_accumulation"]
        accumulation = caraml_accumulation(gbs) if ipu else 1  # the suite's expression agrees with the table
        assert params["grad_accumulation"] == accumulation
        by_batch[gbs] = params["batch_size"]
        lines = sbatch(scripts[p["id"]])
        assert (lines["nodes"], lines["ntasks-per-node"], lines["cpus-per-task"]) == (str(nodes), "1", str(threads))
        assert (lines.get("partition"), lines.get("constraint"), lines["time"]) == (queue, constraint, "01:20:00")
        assert lines.get("gres", "gpu:0") == f"gpu:{0 if ipu else per_node}"
    expected = {g: g // (nodes * per_node * (GC200_ACCUMULATION[g] if system == "GC200" else 1))
                for g in GLOBAL_BATCHES}
    assert by_batch == expected  # per device = global / (nodes x GPUs per node); GC200 also / accumulation


def test_caraml_defaults_on_a_gpu_system():
    [p] = [p for p in expand(suite_mod.load("image_classification"), set(), "H100")
           if p.params["batch_size"] == 64]
    v = p.params
    assert (v["model"], v["precision"], v["compile"], v["compile_mode"], v["compile_scope"]) == \
        ("resnet50", "fp16", "trace", "default", "model")
    assert (v["channels_last"], v["channels_last_inputs"], v["lr"], v["momentum"], v["weight_decay"]) == \
        (True, False, 0.01, 0.0, 0.0)
    assert (v["grad_scaler"], v["convention"], v["epochs"], v["warmup_epochs"], v["dataset_size"], v["val_split"],
            v["lr_step_epochs"], v["lr_gamma"], v["seed"]) == ("caraml", "caraml-epochs", 100, 5, 10000, 0.1, 10, 0.1,
                                                               1234)
    assert v["energy_files"] == "caraml"


# tags ---------------------------------------------------------------------------------------------------
def _values(tags: set[str], system: str = "H100") -> dict[str, set]:
    points = expand(suite_mod.load("image_classification"), tags, system)
    keys = ("precision", "compile", "compile_mode", "compile_scope", "data", "convention")
    return {k: {p.params[k] for p in points} for k in keys} | {"points": len(points)}


@pytest.mark.parametrize("tags, key, values", [
    (set(), "precision", {"fp16"}),
    ({"precision"}, "precision", {"fp32", "tf32", "fp16", "bf16"}),
    ({"bf16"}, "precision", {"bf16"}),
    (set(), "compile", {"trace"}),
    ({"eager"}, "compile", {"aot_eager"}),
    ({"inductor"}, "compile", {"inductor"}),
    ({"inductor"}, "compile_mode", {"default"}),
    ({"inductor_mode"}, "compile_mode", {"default"}),  # JUBE's meaning: the modes need the inductor tag
    ({"inductor", "inductor_mode"}, "compile_mode", {"default", "reduce-overhead", "max-autotune"}),
    ({"trainOptim"}, "compile_scope", {"model"}),  # needs inductor or eager
    ({"eager", "trainOptim"}, "compile_scope", {"step"}),
    ({"inductor", "trainOptim"}, "compile_scope", {"step"}),
    ({"synthetic"}, "data", {"synthetic-device"}),
    (set(), "data", {"synthetic-host"}),
    (set(), "convention", {"caraml-epochs"}),
    ({"steady"}, "convention", {"steady"}),
])
def test_tags_expand_as_in_caraml(tags, key, values):
    assert _values(tags)[key] == values


def test_tag_products_and_the_ipu_precisions():
    assert _values({"precision", "inductor", "inductor_mode"})["points"] == 7 * 4 * 3
    gc = _values({"precision"}, "GC200")
    assert gc["precision"] == {"16.16", "16.32", "32.32"} and gc["compile"] == {"none"} and gc["points"] == 21
    assert _values(set(), "GC200")["precision"] == {"16.16"}


# the caraml preset on a CPU ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def caraml_run(tmp_path_factory):
    """One tiny run of the caraml preset on two ranks (gloo) of one node with a fake RAPL tree: its epochs over
    a DistributedSampler, every step's loss averaged over the ranks, and CARAML's energy files."""

    tmp = tmp_path_factory.mktemp("caraml-run")
    base = rapl_tree(tmp / "sys")
    stop = threading.Event()
    ticker = threading.Thread(target=moving_counter, args=(base, stop), daemon=True)
    ticker.start()
    cmd = [*torchrun(), "-m", "caraml", "run", "image_classification", "--preset", "caraml", "model=resnet18",
           "image_size=32", "batch_size=2", "precision=fp32", "dataset_size=10", "val_split=0.2", "epochs=2",
           "warmup_epochs=1",
           "workers=0", "warmup_steps=1", "measure_steps=2", "power=rapl", "power_interval_ms=50", "--system", "CPU",
           "--results", str(tmp / "results"), "--json"]
    try:
        proc = run(cmd, env=cli_env(CARAML_SYSFS_ROOT=tmp / "sys", OMP_NUM_THREADS=1))
    finally:
        stop.set()
        ticker.join()
    assert proc.returncode == 0, proc.stderr[-3000:]
    [record] = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]  # rank 0's
    return record, tmp / "results"


@pytest.mark.multiprocess
def test_caraml_preset_reports_the_epoch_convention_beside_the_steady_state(caraml_run):
    record, _ = caraml_run
    m = record["metrics"]
    assert record["status"] == "ok" and record["params"]["convention"] == "caraml-epochs"
    assert (record["launch"]["world_size"], record["launch"]["nodes"]) == (2, 1)
    assert m["throughput"]["value"] > 0 and m["throughput_convention"].startswith("steady-state")
    caraml_figure = m["caraml_images_per_s"]
    assert caraml_figure["convention"].startswith("caraml-epochs") and caraml_figure["unit"] == "images/s"
    epochs = m["caraml_epochs"]
    assert (epochs["epochs"], epochs["warmup_epochs"], epochs["completed"]) == (2, 1, True)
    assert (epochs["train_images"], epochs["val_images"]) == (8, 2)  # of all ranks; val_split held out
    assert len(epochs["epoch_time_s"]) == 2 and len(epochs["warmup_time_s"]) == 1
    rates = [10 / t for t in epochs["epoch_time_s"]]  # dataset_size (all ranks) / rank 0's epoch time, the mean
    assert caraml_figure["value"] == pytest.approx(sum(rates) / len(rates))
    assert (m["caraml_spread"]["n"], m["caraml_spread"]["max"]) == (2, pytest.approx(max(rates)))  # in the record
    assert epochs["last_lr"] == pytest.approx(0.01)  # StepLR(10, 0.1) has not stepped down in 2 epochs
    assert m["epochs"] == 2 and m["dataset"] == "Synthetic(Host)"
    phases = m["energy"]["phases"]
    assert {"warmup", "measure", "caraml-epochs", "done"} <= set(phases)  # the epochs are a power phase of their own


@pytest.mark.multiprocess
def test_caraml_energy_files_as_jpwr_writes_them(caraml_run):
    record, results = caraml_run
    files = record["metrics"]["energy"]["caraml_files"]
    folder = Path(files["folder"])
    assert folder == results / "runs" / f"{record['run_id']}.caraml-energy" and "missing" not in files
    with open(folder / "CPU_power.0.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["", "timestamps", "rapl:package-0", "rapl:dram-0", "rapl:package-1", "nodename", "rank"]
    times = [float(r[1]) for r in rows[1:]]
    assert len(times) > 5 and times == sorted(times) and times[0] > 1.7e9  # Unix seconds, like time.time()
    assert {r[-1] for r in rows[1:]} == {"0"} and {r[-2] for r in rows[1:]} == {record["env"]["hostname"]}
    package = [float(r[2]) for r in rows[1:]]
    assert sorted(package)[len(package) // 2] == pytest.approx(40.0, rel=0.6)  # from the counter's steps (40 W)
    with open(folder / "CPU_power.0.energy.csv", newline="") as f:
        energy = list(csv.reader(f))
    assert energy[0] == ["", "0"] and [r[0] for r in energy[1:]][-2:] == ["nodename", "rank"]
    wh = {r[0]: r[1] for r in energy[1:]}
    jpwr_rule = sum(p * (t1 - t0) for p, t0, t1 in zip(package[1:], times, times[1:])) / 3600
    assert float(wh["rapl:package-0"]) == pytest.approx(jpwr_rule)
    assert float(wh["rapl:dram-0"]) == 0.0 and wh["rank"] == "0"  # a counter that does not move: 0 W
    with open(folder / "CPU_power.0.energy-from-counter.csv", newline="") as f:
        counted = dict(csv.reader(f))
    # power from counter steps, integrated by jpwr's rule, gives back the counter's difference
    assert float(counted["rapl:package-0"]) == pytest.approx(float(wh["rapl:package-0"]))
    assert float(wh["rapl:package-0"]) > 0
    with open(folder / "combined_energy.csv", newline="") as f:
        combined = list(csv.reader(f))
    assert combined[0][:4] == ["", "nodename", "rank", ""] and combined[1][:4] == ["0", record["env"]["hostname"],
                                                                                   "0", "0"]
    assert combined[1][combined[0].index("rapl:package-0")] == wh["rapl:package-0"]
    assert files["combined"] == str(folder / "combined_energy.csv")


def _combine_energy(paths: list[Path]) -> list[list[str]]:
    """CARAML's aux/combine_energy.py, without pandas: each energy CSV read headerless and transposed, its
    first row the column names; nodename and rank first; one row per file, with the row number."""
    frames = []
    for path in paths:
        with open(path, newline="") as f:
            rows = list(csv.reader(f))
        names, values = [r[0] for r in rows], [r[1] for r in rows]
        frames.append(dict(zip(names, values)))
    columns = []
    for frame in frames:
        columns += [c for c in frame if c not in columns]
    columns = ["nodename", "rank"] + [c for c in columns if c not in ("nodename", "rank")]
    return [[""] + columns] + [[str(i)] + [frame.get(c, "") for c in columns] for i, frame in enumerate(frames)]


def test_two_nodes_of_gpus_named_as_jpwr_names_them(tmp_path):
    from caraml.power import jpwr

    nodes = []
    for rank, host in enumerate(("jwb0001", "jwb0002")):
        path = tmp_path / f"run.power.{host}.csv"
        handmade.write_power_csv(path)
        nodes.append({"host": host, "timeseries": str(path), "started_wall": 1.7e9 + rank, "node_rank": rank,
                      "devices": [{"backend": "nvml", "uuid": u, "name": "NVIDIA H100"}
                                  for u in ("GPU-6a1e-0", "GPU-93c2-1")]})
    nodes.append({"host": "jwb0003", "available": False, "reason": "monitor process died", "node_rank": 2})
    out = jpwr.write_run(nodes, tmp_path, "RUN", "JUPITER")
    folder = tmp_path / "RUN.caraml-energy"
    assert out["missing"] == ["node rank 2 (jwb0003): no CSV time series (monitor process died)"]
    with open(folder / "JUPITER_power.1.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["", "timestamps", "pynvml:0", "pynvml:1", "nodename", "rank"]
    assert rows[1][:3] == ["0", repr(1.7e9 + 1), "250.0"] and rows[1][-2:] == ["jwb0002", "1"]
    watts = [float(r[3]) for r in rows[1:]]  # the second GPU, 0.1 s apart
    with open(folder / "JUPITER_power.1.energy.csv", newline="") as f:
        energy = dict(csv.reader(f))
    assert float(energy["pynvml:1"]) == pytest.approx(sum(watts[1:]) * 0.1 / 3600)
    with open(folder / "JUPITER_power.1.energy-from-counter.csv", newline="") as f:
        counter = dict(csv.reader(f))
    assert float(counter["pynvml:0"]) == pytest.approx((120.0 * 5.9 - 0.0) / 3600)  # the counter's last - first
    with open(folder / "combined_energy.csv", newline="") as f:
        combined = list(csv.reader(f))
    # what combine_energy.py makes of the two energy files, its odd column too (the Series' name, 0, unnamed)
    assert combined == _combine_energy([folder / f"JUPITER_power.{r}.energy.csv" for r in (0, 1)])
    assert [row[3] for row in combined] == ["", "0", "0"]


# columns ------------------------------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_caraml_columns_in_result(caraml_run, tmp_path):
    record, results = caraml_run
    job = handmade.image("A100", 16, "fp16", 3000.0, devices=8, started="2026-12-01T10:00:00.000+00:00",
                         extra_metrics={"caraml_images_per_s": {"value": 2900.0, "unit": "images/s",
                                                                "convention": "caraml-epochs"},
                                        "epochs": 100, "dataset": "Synthetic(Host)"})
    job["params"]["workers"] = 18
    job["finished_at"] = "2026-12-01T10:01:30.000+00:00"
    job["env"]["slurm"] = {"SLURM_JOB_ID": "4242", "SLURM_JOB_PARTITION": "dc-gpu-devel", "SLURM_CPUS_PER_TASK": "72"}
    job["metrics"]["energy"] = {"available": False, "total_wh": None, "reason": "x",
                                "caraml_files": {"combined": "/p/run/combined_energy.csv"}}
    mixed = tmp_path / "results"
    handmade.write(mixed, job)
    handmade.write(mixed, {k: v for k, v in record.items() if k != "path"})
    names = ("job_id,system,version,queue,runtime_s,model,dataset,nodes,devices,tasks_per_node,threads_per_task,"
             "workers,global_batch_size,batch_size,epochs,precision,caraml_images_per_s,energy_file,compile,"
             "compile_mode,compile_scope,channels_last,throughput,convention")
    rows = json.loads(caraml("result", "--results", mixed, "--columns", names, "--format", "rows-json",
                             check=0).stdout)
    by_system = {r["system"]: r for r in rows}
    a100, cpu = by_system["A100"], by_system["CPU"]
    assert (a100["job_id"], a100["queue"], a100["runtime_s"], a100["threads_per_task"]) == ("4242", "dc-gpu-devel",
                                                                                            90.0, 72)
    assert (a100["tasks_per_node"], a100["workers"], a100["epochs"]) == (1, 18, 100)
    assert a100["caraml_images_per_s"] == 2900.0
    assert (a100["energy_file"], a100["dataset"], a100["global_batch_size"]) == ("/p/run/combined_energy.csv",
                                                                                 "Synthetic(Host)", 128)
    assert cpu["job_id"] is None and cpu["queue"] is None and cpu["runtime_s"] > 0 and cpu["version"]
    assert (cpu["tasks_per_node"], cpu["threads_per_task"], cpu["workers"], cpu["epochs"]) == (1, 2, 0, 2)
    assert cpu["energy_file"] == record["metrics"]["energy"]["caraml_files"]["combined"]
    assert cpu["caraml_images_per_s"] == pytest.approx(record["metrics"]["caraml_images_per_s"]["value"])
    assert (cpu["compile"], cpu["compile_scope"], cpu["convention"]) == ("trace", "model", "caraml-epochs")

    table = caraml("result", "--results", mixed, "--format", "csv", check=0).stdout
    header = table.splitlines()[0].split(",")
    assert header[:6] == ["System", "Model", "Nodes", "Devices", "GlobalBatchSize", "BatchSize/Device"]
    assert "Images/second" in header and "Images/s" in header and "JobID" not in header  # main ones by default


def _bench(preset=None, **params):
    from caraml.runner import RunSpec, build_bench

    given = {"model": "resnet18", "image_size": 16, "batch_size": 2, "data": "synthetic-device", **params}
    return build_bench(RunSpec("image_classification", {k: str(v) for k, v in given.items()}, preset=preset),
                       device="cpu")


@pytest.mark.parametrize("precision, grad_scaler, expected", [
    ("bf16", "caraml", (1.0, 100)), ("fp16", "caraml", (1.0, 100)),  # CARAML scales both, from 1
    ("fp16", "fp16", (65536.0, 2000)), ("bf16", "fp16", None), ("fp32", "caraml", None)])
def test_gradient_scaling_as_caraml(precision, grad_scaler, expected):
    scaler = _bench(precision=precision, grad_scaler=grad_scaler).scaler
    assert (None if scaler is None else (scaler.get_scale(), scaler.get_growth_interval())) == expected


def test_caraml_preset_formats_the_model_only_and_steps_the_lr_per_epoch():
    import torch

    bench = _bench("caraml", precision="fp32")
    assert (bench.memory_format, bench.input_format) == (torch.channels_last, torch.contiguous_format)
    assert bench.extra_phase == "caraml-epochs" and bench.info.compiled  # TorchScript trace
    group = bench.optimizer.param_groups[0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.01, 0.0, 0.0)
    bench.close()
    assert _bench().extra_phase is None

    bench = _bench("caraml", precision="fp32", dataset_size=4, val_split=0.25, epochs=2, warmup_epochs=1,
                   lr_step_epochs=1, workers=0)
    bench.run_extra(lambda: False)
    epochs = bench.details()["caraml_epochs"]
    bench.close()
    assert (epochs["epochs"], len(epochs["warmup_time_s"]), epochs["train_images"]) == (2, 1, 3)
    assert epochs["last_lr"] == pytest.approx(0.01 * 0.1 ** 2)  # stepped after each measured epoch only


# stopping CARAML's epochs ------------------------------------------------------------------------------
EPOCHS_TINY = {"precision": "fp32", "compile": "none", "dataset_size": 8, "val_split": 0.25, "epochs": 3,
               "warmup_epochs": 1, "workers": 0}  # batch 2: 6 training images (3 steps), 2 validation (1 step)


def test_caraml_epochs_ask_to_stop_at_every_step():
    bench = _bench("caraml", **EPOCHS_TINY)
    asked = []
    bench.run_extra(lambda: asked.append(1) or False)
    epochs = bench.details()["caraml_epochs"]
    bench.close()
    assert len(asked) == (1 + 3) * (3 + 1)  # every training and validation step of every epoch
    assert (epochs["epochs"], epochs["completed"], epochs["stopped_in"]) == (3, True, None)


def test_a_stop_inside_an_epoch_keeps_the_epochs_completed_and_says_where_it_came():
    import itertools

    bench = _bench("caraml", **EPOCHS_TINY)
    calls = itertools.count(1)
    bench.run_extra(lambda: next(calls) == 4 * 2 + 2)  # the second training step of the third epoch
    out = bench.details()
    bench.close()
    epochs = out["caraml_epochs"]
    assert (epochs["epochs"], epochs["warmup_epochs"], epochs["completed"]) == (1, 1, False)
    assert len(epochs["epoch_time_s"]) == 1 and len(epochs["warmup_time_s"]) == 1
    assert epochs["stopped_in"] == {"epoch": 2, "warmup": False, "part": "train", "steps_done": 2, "steps": 3}
    assert out["caraml_images_per_s"]["value"] == pytest.approx(8 / epochs["epoch_time_s"][0])
    assert out["epochs"] == 1
    assert epochs["last_lr"] == pytest.approx(0.01)  # StepLR(10): one measured epoch, no step down


def _until(proc, text: str, timeout: float = 240) -> str:
    """stderr read line by line until `text` (an event, not a fixed sleep)."""
    import time

    seen, deadline = "", time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if text in line or not line:
            break
    return seen


# Epochs of 100,000 FakeData images: hours on a CPU, so only a stop at a step ends them in time.
LONG_EPOCHS = ("convention=caraml-epochs", "image_size=32", "dataset_size=100000", "epochs=3", "warmup_epochs=1",
               "workers=0", "power=off")


@pytest.mark.multiprocess
@pytest.mark.parametrize("ranks", [1, 2])
def test_sigterm_during_caraml_epochs_leaves_an_interrupted_record_at_once(results, ranks):
    import subprocess
    import sys
    import time

    launch = [sys.executable, "-m", "caraml"] if ranks == 1 else [*torchrun(), "-m", "caraml"]
    proc = subprocess.Popen([*launch, "run", "image_classification", "--preset", "smoke", *LONG_EPOCHS,
                             "--results", str(results), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=cli_env(OMP_NUM_THREADS=1))
    try:
        seen = _until(proc, "caraml: caraml-epochs")
        assert "caraml-epochs" in seen, seen[-3000:]
        proc.send_signal(signal.SIGTERM)  # torchrun passes it on to each rank once
        sent = time.monotonic()
        out, err = proc.communicate(timeout=120)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    assert took < 60, f"{took:.0f} s from SIGTERM to exit\n{err[-3000:]}"
    lines = [line for line in out.splitlines() if line.startswith("{")]
    assert lines, seen + err[-3000:]
    record = json.loads(lines[-1])
    m = record["metrics"]
    assert record["status"] == "interrupted" and "SIGTERM" in record["error"], record["error"]
    assert "caraml-epochs" in record["error"]
    assert record["launch"]["world_size"] == ranks
    # the steady state measured before the epochs is kept
    assert m["measured_steps"] == 8 and m["throughput"]["value"] > 0 and m["units"] == 16 * 8 * ranks
    epochs = m["caraml_epochs"]
    assert (epochs["epochs"], epochs["completed"], epochs["warmup_epochs"]) == (0, False, 0)
    assert epochs["stopped_in"]["epoch"] == 0 and epochs["stopped_in"]["warmup"] is True
    assert epochs["stopped_in"]["part"] == "train" and 0 < epochs["stopped_in"]["steps_done"] < 100
    assert m["caraml_images_per_s"]["value"] is None
    assert [r["status"] for r in records_in(results)] == ["interrupted"]


# the harness's phase for a workload's own measurement --------------------------------------------------
class _Marks:
    def __init__(self):
        self.marks = []

    def mark(self, phase):
        self.marks.append(phase)


class _EpochsBench:
    """Steps do nothing; the workload's own phase asks should_stop() after each of its 'epochs'."""

    extra_phase = "caraml-epochs"

    def __init__(self, stop=None, stop_after=None):
        self.steps, self.epochs, self.stop, self.stop_after = 0, 0, stop, stop_after

    def step(self):
        self.steps += 1

    def run_extra(self, should_stop):
        for _ in range(5):
            self.epochs += 1
            if self.epochs == self.stop_after:
                self.stop.signal = "SIGUSR2"  # as SLURM's warning signal would set it
            if should_stop():
                return


def test_harness_runs_the_workloads_own_phase_after_the_window_and_stops_it():
    import torch

    from caraml.distributed import DistContext
    from caraml.measure.harness import Measurement, run_steps
    from caraml.measure.stops import StopRequested
    from caraml.settings import MeasureSettings

    p = MeasureSettings(warmup_steps=2, measure_steps=3)
    with StopRequested() as stop:
        bench, m, monitor = _EpochsBench(), Measurement(), _Marks()
        run_steps(bench, p, torch.device("cpu"), DistContext(), m, stop, monitor)
    assert monitor.marks == ["warmup", "measure", "caraml-epochs", "done"]
    assert (bench.steps, m.steps, bench.epochs, m.phase, m.stop_signal) == (5, 3, 5, "done", None)

    with StopRequested() as stop:
        bench, m, monitor = _EpochsBench(stop, stop_after=2), Measurement(), _Marks()
        run_steps(bench, p, torch.device("cpu"), DistContext(), m, stop, monitor)
    assert (bench.epochs, m.steps, m.phase, m.stop_signal) == (2, 3, "caraml-epochs", "SIGUSR2")
    assert monitor.marks[-1] == "done"


# the Graphcore path ------------------------------------------------------------------------------------
def test_gc200_accumulation_and_precisions():
    from caraml.errors import BadInput
    from caraml.workloads.image_classification import ipu

    assert {g: ipu.caraml_accumulation(g) for g in GC200_ACCUMULATION} == GC200_ACCUMULATION
    with pytest.raises(BadInput, match="not 48"):
        ipu.caraml_accumulation(48)
    assert [ipu.precision_types(p) for p in ("16.16", "16.32", "32.32")] == \
        [("half", "half"), ("half", "float"), ("float", "float")]
    assert ipu.PEAK_PRECISION == {"16.16": "fp16", "16.32": "fp16", "32.32": "fp32"}
    with pytest.raises(BadInput, match="not an IPU precision"):
        ipu.precision_types("bf16")


def _config(**given):
    from caraml.runner import RunSpec, resolve

    return resolve(RunSpec("image_classification", given)).config


def test_ipu_parameters_go_together():
    from dataclasses import replace

    from caraml.workloads.image_classification import check_combination, check_launch

    base = _config(precision="fp16", compile="trace")
    assert check_combination(base) is None
    assert "needs engine=poptorch" in check_combination(replace(base, precision="16.16"))
    assert "replicas=4 applies to engine=poptorch" in check_combination(replace(base, replicas=4))
    assert "grad_accumulation=2 applies to engine=poptorch" in check_combination(replace(base, grad_accumulation=2))
    ipu = replace(base, engine="poptorch", precision="16.32", compile="none", replicas=4)
    assert check_combination(ipu) is None and check_launch(ipu, 1) is None
    assert "launch 1 process, not 4" in check_launch(ipu, 4)
    assert "use compile=none" in check_combination(replace(ipu, compile="trace"))
    assert "IPU precisions" in check_combination(replace(ipu, precision="bf16"))


def test_grad_accumulation_is_the_llms_name_and_the_former_one_is_still_accepted():
    from caraml.errors import BadInput

    assert _config(backend="poptorch", precision="16.16", gradient_accumulation="4").grad_accumulation == 4
    assert _config(backend="poptorch", precision="16.16", grad_accumulation="8").grad_accumulation == 8
    with pytest.raises(BadInput, match="former name of 'grad_accumulation'"):
        _config(gradient_accumulation="2", grad_accumulation="2")


def test_ipu_epochs_ask_to_stop_at_every_step_and_keep_the_epochs_done():
    from dataclasses import replace

    from caraml.workloads.image_classification.ipu import IpuBench

    cfg = replace(_config(backend="poptorch", precision="16.16", compile="none", convention="caraml-epochs"),
                  batch_size=2, replicas=2, grad_accumulation=2, dataset_size=24, warmup_epochs=1, epochs=3)
    bench = object.__new__(IpuBench)  # poptorch is not here: the epochs' loop alone, over a step that counts
    bench.cfg, bench.times, bench.at, steps = cfg, None, None, []
    bench.step = lambda: steps.append(1)
    asked = iter(range(1, 100))
    bench.run_extra(lambda: next(asked) == 3 * 2 + 1)  # 24 // 8 = 3 steps per epoch; stop in the third epoch
    out = bench.details()
    epochs = out["caraml_epochs"]
    assert len(steps) == 7 and out["global_batch_size"] == 8 and out["ipu"]["gradient_accumulation"] == 2
    assert (epochs["epochs"], epochs["steps_per_epoch"]) == (1, 3)
    assert epochs["stopped_in"] == {"epoch": 2, "warmup": False, "part": "train", "steps_done": 1, "steps": 3}
    assert out["caraml_images_per_s"]["value"] == pytest.approx(24 / epochs["epoch_time_s"][0])


@pytest.mark.subprocess
def test_choosing_the_ipu_path_without_poptorch_is_one_line(results):
    pytest.importorskip("torch")
    try:
        import poptorch  # noqa: F401
        pytest.skip("poptorch is installed here")
    except ImportError:
        pass
    proc = caraml("run", "image_classification", "backend=poptorch", "precision=16.16", "compile=none", "replicas=4",
                  "grad_accumulation=4", "power=off", "--system", "GC200", "--results", results, check=2)
    assert proc.stderr.count("\n") == 1 and "needs Graphcore's poptorch" in proc.stderr
    assert not (results / "runs").exists() or records_in(results) == []
