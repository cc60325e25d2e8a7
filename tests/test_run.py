"""`caraml run` end to end on the CPU with real torch: records, precisions, compilers, failures, DDP."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from conftest import HANG_S, ROOT, caraml, cli_env, read_stderr_until, records_in, run, run_cli, torchrun, wait_until

from caraml.results.record import validate

pytestmark = pytest.mark.subprocess  # every test here runs `caraml run`

SMOKE = ("run", "image_classification", "--preset", "smoke")
KILL_WAIT_S = 30  # SLURM's default KillWait: SIGKILL this long after SIGTERM; the record must be saved before


def run_json(results, *params, check=0, timeout=HANG_S):
    proc = caraml(*SMOKE, *params, "--results", results, "--json", check=check, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"stdout must hold exactly one JSON record, got:\n{proc.stdout}"
    return json.loads(lines[0]), proc


def test_smoke_run_produces_complete_record(results):
    record, proc = run_json(results)
    assert validate(record) == []
    assert record["status"] == "ok" and record["error"] is None
    p, m = record["params"], record["metrics"]
    # every effective parameter, defaults included, typed
    assert p["model"] == "resnet18" and p["batch_size"] == 16 and p["channels_last"] is False
    assert p["momentum"] == 0.9 and p["measure_steps"] == 8 and p["warmup_steps"] == 2
    on_cpu = record["launch"]["device"] == "cpu"  # the tests also run on GPU machines
    assert record["system"]["detected"] is True and (record["system"]["tag"] == "CPU") == on_cpu
    assert record["launch"]["world_size"] == 1
    assert m["measured_steps"] == 8 and m["step_time_s"]["n"] == 8
    assert m["step_time_s"]["p10"] <= m["step_time_s"]["median"] <= m["step_time_s"]["p90"]
    # throughput is units over the measured wall time
    assert m["throughput"]["unit"] == "images/s"
    assert m["throughput"]["value"] == pytest.approx(16 * 8 / m["measured_time_s"], rel=1e-6)
    # FLOPs of resnet18 at 64x64: about 3 x forward (1.82 GMAC x 2 at 224^2, scaled by (64/224)^2)
    fwd = 2 * 1.82e9 * (64 / 224) ** 2
    assert 2.5 * fwd < m["flops_per_unit"] < 3.3 * fwd
    assert m["tflops_per_device"] == pytest.approx(m["flops_per_unit"] * m["throughput"]["value"] / 1e12)
    if on_cpu:
        assert m["mfu"] is None and m["peak_tflops"] is None  # the CPU profile has no peak rate
    else:
        assert m["mfu"] == pytest.approx(m["tflops_per_device"] / m["peak_tflops"])
    assert record["env"]["torch"] and record["env"]["hostname"]
    # the record on disk is the one printed, and the index knows it
    saved = records_in(results)
    assert [r["run_id"] for r in saved] == [record["run_id"]]
    assert "caraml: measuring" in proc.stderr


def test_same_configuration_same_id_different_run_id(results):
    a, _ = run_json(results, "measure_steps=2", "image_size=32")
    b, _ = run_json(results, "measure_steps=2", "image_size=32")
    c, _ = run_json(results, "measure_steps=3", "image_size=32")  # a measurement setting: the same configuration
    d, _ = run_json(results, "measure_steps=2", "image_size=40")
    assert a["id"] == b["id"] == c["id"] != d["id"]
    assert a["run_id"] != b["run_id"]


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_mixed_precisions_on_cpu(results, precision):
    record, _ = run_json(results, f"precision={precision}", "image_size=32", "batch_size=4", "measure_steps=2")
    assert record["status"] == "ok" and record["params"]["precision"] == precision


@pytest.mark.parametrize("extra", [
    ("compile=trace", "precision=bf16", "channels_last=on"),
    ("compile=aot_eager",),
    ("data=synthetic-host", "workers=2"),
])
def test_compile_and_data_paths(results, extra):
    record, _ = run_json(results, *extra, "image_size=32", "measure_steps=3")
    assert record["status"] == "ok", record["error"]
    if "compile=trace" in extra or "compile=aot_eager" in extra:
        assert record["metrics"]["warmup"]["compile_s"] is not None


def test_inductor_whole_step(results):
    record, _ = run_json(results, "model=alexnet", "image_size=64", "compile=inductor", "compile_scope=step",
                         "measure_steps=3", timeout=HANG_S)
    assert record["status"] == "ok", record["error"]
    assert record["metrics"]["warmup"]["compile_s"] > 0


# Refusals found before torch is imported, each in a fresh process: its exit status and its whole stderr. Those found
# after (the model, the system, the device) run in the tests' process, which has torch already imported:
# tests/test_bad_input_one_line.py, test_run_refusals_that_need_torch_are_one_line_exit_2.
@pytest.mark.parametrize("args, needle", [
    (("run", "nosuch"), "unknown workload 'nosuch'; choose one of: fno, image_classification, llm_training"),
    (("run", "image_classification", "precision=fp64"),
     "precision=fp64 is not valid; did you mean fp32? choose one of: fp32, tf32"),
    (("run", "image_classification", "compile_mode=fast"), "compile_mode=fast is not valid; choose one of: default"),
    (("run", "image_classification", "batch_size=big"), "batch_size=big is not an integer"),
    (("run", "image_classification", "batch_size=0"), "batch_size=0 is too small"),
    (("run", "image_classification", "channels_last=maybe"), "channels_last=maybe is not on/off"),
    (("run", "image_classification", "colour=red"),
     "unknown parameter 'colour'; `caraml workloads image_classification` lists its "),
    (("run", "image_classification", "batch_size"), "'batch_size' is not of the form key=value"),
    (("run", "image_classification", "--preset", "huge"), "unknown preset 'huge'; choose one of: smoke, default"),
    (("run", "image_classification", "--frobnicate"), "unrecognized arguments: --frobnicate"),
])
def test_bad_input_is_one_line_exit_2(results, args, needle):
    proc = caraml(*args, "--results", results, check=2)
    lines = proc.stderr.strip().splitlines()
    assert needle in lines[-1], proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([line for line in lines if line.startswith("caraml")]) == 1
    assert not (results / "runs").exists() or not list((results / "runs").glob("*.json"))


def test_out_of_memory_is_recorded(results):
    # 10^6 images of 224^2 need 600 GB: the allocator refuses, the run records `oom` with its parameters.
    record, _ = run_json(results, "batch_size=1000000", "image_size=224", check=1)
    assert record["status"] == "oom"
    assert "allocate" in record["error"]
    assert record["params"]["batch_size"] == 1000000
    assert records_in(results)[0]["status"] == "oom"


@pytest.mark.parametrize("sig, inherited", [(signal.SIGTERM, signal.SIG_DFL), (signal.SIGINT, signal.SIG_DFL),
                                            (signal.SIGINT, signal.SIG_IGN)],
                         ids=["sigterm", "sigint", "sigint-inherited-ignored"])
def test_signal_during_measurement_keeps_what_was_measured(results, sig, inherited):
    # inherited: how `caraml run` was started (`cmd &` in a shell: SIGINT ignored, kept so across exec)
    proc = subprocess.Popen([sys.executable, "-m", "caraml", *SMOKE, "measure_steps=100000", "--results",
                             str(results), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env(), preexec_fn=lambda: signal.signal(signal.SIGINT, inherited))
    # The stop is checked after each step: a signal once measuring has begun keeps at least one step.
    seen = read_stderr_until(proc, "caraml: measuring")
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, seen + err
    record = json.loads(out)
    assert record["status"] == "interrupted"
    assert signal.Signals(sig).name in record["error"]
    assert record["metrics"]["measured_steps"] > 0
    assert record["metrics"]["throughput"]["value"] > 0
    assert records_in(results)[0]["status"] == "interrupted"


# `caraml run` with a thread the run leaves working, as inductor's compile threads are after a stop mid-compile
# (a queue of kernels: 15-21 s after a stop during max-autotune on the CPU): the interpreter's exit would join it.
LEFT_WORKING = """
import threading, time
from caraml.cli import main
threading.Thread(target=time.sleep, args=(300,), name="still-compiling").start()
raise SystemExit(main())
"""


def test_a_stopped_run_ends_once_its_record_is_saved_not_when_its_threads_do(results):
    proc = subprocess.Popen([sys.executable, "-c", LEFT_WORKING, *SMOKE, "measure_steps=100000", "--results",
                             str(results), "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=cli_env())
    seen = read_stderr_until(proc, "caraml: measuring")
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=KILL_WAIT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"still running {KILL_WAIT_S} s after its stop: its exit waited for the thread\n{seen}")
    assert proc.returncode == 1, seen + err
    assert json.loads(out)["status"] == "interrupted" and records_in(results)[0]["status"] == "interrupted"


@pytest.mark.multiprocess
def test_ddp_two_processes_under_torchrun(results):
    cmd = [*torchrun(), "-m", "caraml", *SMOKE, "measure_steps=4", "--results", str(results), "--json"]
    proc = run(cmd, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, "only rank 0 prints, and only the record"
    record = json.loads(lines[0])
    m = record["metrics"]
    assert record["launch"]["world_size"] == 2 and record["launch"]["backend"] == "gloo"
    assert m["global_batch_size"] == 32
    assert m["units"] == 2 * 16 * 4  # both ranks' images
    assert m["throughput"]["value"] == pytest.approx(m["units"] / m["measured_time_s"], rel=1e-6)
    assert len(records_in(results)) == 1, "rank 0 writes the one record"


LAYOUT = ("run", "llm_training", "--preset", "smoke", "pp=2")


def test_a_layout_refused_for_nproc_per_node_is_one_line_and_exit_2_before_any_rank_starts(results):
    # (a plain `torchrun ... caraml run` cannot exit 2: its agent turns a rank's exit 2 into its own traceback)
    proc = caraml(*LAYOUT, "num_layers=3", "--nproc-per-node", "2", "--results", results, check=2)
    assert proc.stderr == "caraml: error: llm_training: num_layers=3 is not a multiple of pp=2 (equal pipeline " \
                          "stages)\n" and proc.stdout == ""
    assert not results.exists()


def test_nproc_per_node_under_a_launcher_is_refused(results):
    proc = caraml(*LAYOUT, "grad_accumulation=2", "--nproc-per-node", "2", "--results", results, check=2,
                  env=cli_env(WORLD_SIZE=2, RANK=0))
    assert proc.stderr.count("\n") == 1 and "this is already a rank of a launch (WORLD_SIZE=2); leave " \
                                              "--nproc-per-node out" in proc.stderr, proc.stderr


@pytest.mark.multiprocess
def test_nproc_per_node_runs_its_ranks_under_torchrun(results):
    proc = caraml(*LAYOUT, "grad_accumulation=2", "--nproc-per-node", "2", "--results", results, "--json", check=0)
    record = json.loads(proc.stdout)
    assert (record["status"], record["launch"]["world_size"], record["metrics"]["parallel"]["pp"]) == ("ok", 2, 2)
    assert [r["run_id"] for r in records_in(results)] == [record["run_id"]]


RANK_SCRIPT = """
import atexit
from caraml import distributed
atexit.register(lambda: print("teardown ran", flush=True))
ctx = distributed.launch_env()
distributed.end_rank(5)  # no process group started: it returns
distributed.init(ctx, "cpu")
print(f"rank {ctx.rank} done", end="")  # not flushed: end_rank flushes it
distributed.shutdown(ctx)
distributed.end_rank(0)
print("after end_rank")
"""


@pytest.mark.multiprocess
def test_a_rank_ends_flushed_and_without_the_interpreters_teardown(tmp_path):
    # the teardown is where gloo's worker thread aborted a rank of a complete run (see distributed.end_rank)
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    proc = run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", script],
               env=cli_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(proc.stdout.replace("done", "done\n").split()) == ["0", "1", "done", "done", "rank", "rank"]
    # one process with a group of its own (as megatron-core's): its exit code is the one given
    script.write_text(ONE_GROUP_SCRIPT)
    proc = run([sys.executable, script], env=cli_env())
    assert (proc.returncode, proc.stdout) == (7, "started"), proc.stderr[-3000:]


ONE_GROUP_SCRIPT = """
import atexit
import socket
from caraml import distributed
atexit.register(lambda: print("teardown ran", flush=True))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
distributed.start_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
print("started", end="")
distributed.end_rank(7)
"""


def test_a_crash_in_a_process_with_a_group_is_said_and_ends_through_end_rank(monkeypatch, capsys):
    import caraml.cli as cli
    from caraml import distributed

    def crash(args):
        raise RuntimeError("a peer is gone")

    ended = []
    monkeypatch.setattr(cli, "_systems", crash)
    monkeypatch.setattr(distributed, "end_rank", ended.append)
    monkeypatch.setattr(distributed, "group_started", lambda: True)
    code, out, err = run_cli(capsys, "systems")
    assert (code, ended, out) == (1, [1], "")
    assert err.startswith("Traceback") and err.rstrip().endswith("RuntimeError: a peer is gone")
    monkeypatch.setattr(distributed, "group_started", lambda: False)  # no group: Python's own way out
    with pytest.raises(RuntimeError, match="a peer is gone"):
        cli.main(["systems"])


def test_measure_seconds_fixes_step_count(results):
    record, _ = run_json(results, "image_size=32", "batch_size=4", "warmup_steps=4", "measure_seconds=4",
                         "measure_steps=1")
    m = record["metrics"]
    import statistics

    typical = statistics.median(m["warmup"]["step_times_s"][-3:])  # the first (slowest) step left out
    assert m["measured_steps"] == max(1, int(4 / typical))  # from the time, not from measure_steps=1


def _worker_pids(parent: int) -> dict[int, int]:
    """rank -> pid of torchrun's worker processes, read from /proc."""
    from pathlib import Path

    ranks = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != parent:
                continue
            env = (stat.parent / "environ").read_bytes().split(b"\0")
        except (OSError, IndexError):
            continue
        for item in env:
            if item.startswith(b"RANK="):
                ranks[int(item[5:])] = int(stat.parent.name)
    return ranks


@pytest.mark.multiprocess
def test_ddp_ranks_stop_together_when_one_rank_is_signalled(results):
    # SLURM delivers its warning signal to each rank at slightly different times; here only rank 1 gets
    # it. The ranks must still leave the loop at the same step and agree on the measured window.
    cmd = [*torchrun(), "-m", "caraml", *SMOKE, "image_size=32", "measure_steps=100000", "power=off", "--results",
           str(results), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(), cwd=ROOT)
    # Rank 0 says "measuring" after the barrier that both ranks pass into the measured loop; the ranks agree on a
    # stop every 10 steps, so they stop together at step 10 at the earliest.
    read_stderr_until(proc, "caraml: measuring")
    workers = _worker_pids(proc.pid)
    assert set(workers) == {0, 1}, workers
    import os

    os.kill(workers[1], signal.SIGUSR2)
    out, err = proc.communicate(timeout=HANG_S)
    record = json.loads(out.strip().splitlines()[-1])
    m = record["metrics"]
    assert record["status"] == "interrupted" and "another rank" in record["error"], err[-2000:]
    assert m["throughput_source"] == "all ranks"
    assert m["units"] == 2 * 16 * m["measured_steps"] and m["measured_steps"] % 10 == 0 and m["measured_steps"] > 0
    assert [r["status"] for r in records_in(results)] == ["interrupted"]


def test_sigterm_to_the_process_group_with_dataloader_workers_is_an_interruption(results):
    """`kill -TERM -- -PGID` (a local sweep's time limit, SLURM) reaches the DataLoader workers too."""
    import os

    proc = subprocess.Popen([sys.executable, "-m", "caraml", *SMOKE, "data=synthetic-host", "workers=2",
                             "image_size=32", "measure_steps=100000", "power=off", "log_interval=0.000001",
                             "--results", str(results), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(),
                            start_new_session=True)
    # Killed once a measured step has completed (a line after every step), not at the window's start: on a loaded
    # machine the signal could otherwise land before the first measured step, and the record rightly holds none.
    seen = read_stderr_until(proc, "caraml: measuring step ")
    os.killpg(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, seen + err
    record = json.loads(out)
    assert record["status"] == "interrupted", record["error"]
    assert "SIGTERM" in record["error"] and record["metrics"]["measured_steps"] > 0
    assert records_in(results)[0]["status"] == "interrupted"


def test_sighup_mid_run_leaves_an_interrupted_record(results):
    proc = subprocess.Popen([sys.executable, "-m", "caraml", *SMOKE, "image_size=32", "measure_steps=100000",
                             "power=off", "--results", str(results), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    read_stderr_until(proc, "caraml: measuring")
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, err
    assert json.loads(out)["status"] == "interrupted" and "SIGHUP" in json.loads(out)["error"]


@pytest.mark.parametrize("delay", [0.3, 1.0])
def test_sigterm_during_start_up_leaves_a_record(results, delay):
    proc = subprocess.Popen([sys.executable, "-m", "caraml", *SMOKE, "power=off", "--results", str(results), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    time.sleep(delay)  # the premise is a stop at an early moment, not an event: Python is still importing torch
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, err
    record = json.loads(out)
    assert record["status"] == "interrupted" and record["error"].startswith("stopped by SIGTERM during setup")
    assert records_in(results)[0]["run_id"] == record["run_id"]


def test_a_stop_during_a_cold_compile_leaves_an_interrupted_record_within_slurms_kill_wait(results, tmp_path):
    """A first step that compiles (inductor, an empty cache: minutes on a CPU) checks no stop flag: the first
    SIGTERM ends it at once, so that the record is saved before SLURM's SIGKILL."""
    env = cli_env(TORCHINDUCTOR_CACHE_DIR=tmp_path / "empty-inductor-cache")
    proc = subprocess.Popen([sys.executable, "-m", "caraml", "run", "llm_training", "--preset", "smoke",
                             "compile=inductor", "power=off", "log_interval=1", "--results", str(results),
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    seen = read_stderr_until(proc, "caraml: warm-up step 1/2 (compilation, autotuning): still running after")
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_until(lambda: list((results / "runs").glob("*.json")), "a record", proc=proc)
    assert time.monotonic() - signalled < KILL_WAIT_S
    out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 1, seen + err
    record = json.loads(out)
    assert (record["status"], record["error"]) == ("interrupted", "stopped by SIGTERM during warmup")
    assert "warmup" not in record["metrics"]  # the compiling step was ended, not waited for
    assert records_in(results)[0]["run_id"] == record["run_id"]

