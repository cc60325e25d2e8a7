"""The monitor process on generated trees: phases, a backend dying mid-run, a killed or hung monitor,
the `caraml power` command, and `caraml run` with the monitor attached."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest
from conftest import HAS_NVML, caraml, cli_env, records_in, wait_until
from power_trees import grace_tree, rapl_tree, set_energy

from caraml.errors import BadInput
from caraml.power import Monitor, measure

pytestmark = pytest.mark.subprocess  # the monitor is a process of its own; the rest run `caraml`


def wait_for_sample(series, phase: str) -> None:
    """Wait until the monitor has sampled in `phase`: a row of its time series (flushed every 10 samples)."""
    wait_until(lambda: series.exists() and any(line.split(",")[1:2] == [phase]
                                               for line in series.read_text().splitlines()[1:]),
               f"a sample in phase {phase} in {series}")


def test_phases_get_counter_energy_exactly(tmp_path):
    base = rapl_tree(tmp_path / "sys", energy_uj=0)
    mon = Monitor("rapl", interval_ms=20, out_dir=str(tmp_path / "out"), root=str(tmp_path / "sys")).start()
    assert mon.failure is None
    series = tmp_path / "out" / f"power.{os.uname().nodename}.csv"
    wait_for_sample(series, "setup")  # the counter at 0 was read in setup
    set_energy(base, "intel-rapl:0", 3_000_000)       # 3 J during setup
    mon.mark("measure")
    wait_for_sample(series, "measure")  # the mark's own sample read 3 J; the rest counts in measure
    set_energy(base, "intel-rapl:0", 3_000_000 + 7_200_000)   # 7.2 J during measure = 0.002 Wh
    mon.mark("done")  # its sample reads the 7.2 J at the end of measure
    energy = mon.energy(units=50, unit="images")
    assert energy["available"] and energy["source"] == "counter", energy
    pkg = next(d for d in energy["devices"] if d["uuid"] == "package-0")
    assert pkg["phases"]["setup"] == pytest.approx(3 / 3600)
    assert pkg["phases"]["measure"] == pytest.approx(7.2 / 3600)
    assert energy["total_wh"] == pytest.approx(7.2 / 3600)       # other zones did not move
    assert energy["units_per_wh"] == pytest.approx(50 / (7.2 / 3600))
    lines = series.read_text().splitlines()
    assert lines[0] == "time_s,phase,host,backend,device,uuid,power_w,energy_j"
    assert {line.split(",")[1] for line in lines[1:]} == {"setup", "measure", "done"}


def test_backend_dying_mid_run_leaves_energy_unavailable_with_reason(tmp_path):
    grace_tree(tmp_path / "sys")
    series = tmp_path / "out" / f"power.{os.uname().nodename}.csv"
    with measure("grace", interval_ms=20, out_dir=str(tmp_path / "out"), root=str(tmp_path / "sys")) as m:
        wait_for_sample(series, "run")  # it has read the driver at least once
        (tmp_path / "sys/class/hwmon/hwmon1/device/power1_average").unlink()   # the driver goes away
    energy = m.energy()
    assert energy["available"] is False and m.energy_wh() is None
    assert "grace failed at t=" in energy["reason"] and "FileNotFoundError" in energy["reason"]


def test_killed_monitor_is_reported(tmp_path):
    rapl_tree(tmp_path / "sys")
    mon = Monitor("rapl", interval_ms=20, root=str(tmp_path / "sys")).start()
    mon.mark("measure")
    os.kill(mon.proc.pid, signal.SIGKILL)
    summary = mon.stop()
    assert summary["available"] is False
    assert summary["reason"] == "monitor process died (killed by SIGKILL) during measure"


def test_slurm_signals_do_not_kill_the_monitor(tmp_path):
    # slurmstepd sends SIGUSR2 (--signal) and SIGTERM (scancel, time limit) to every process of the step
    base = rapl_tree(tmp_path / "sys", energy_uj=0)
    mon = Monitor("rapl", interval_ms=20, out_dir=str(tmp_path / "out"), root=str(tmp_path / "sys")).start()
    series = tmp_path / "out" / f"power.{os.uname().nodename}.csv"
    mon.mark("measure")
    wait_for_sample(series, "measure")  # the mark's sample read 0 J
    os.kill(mon.proc.pid, signal.SIGUSR2)
    os.kill(mon.proc.pid, signal.SIGTERM)
    rows = len(series.read_text().splitlines())
    # still sampling after both signals: more rows are flushed (every 10 samples)
    wait_until(lambda: len(series.read_text().splitlines()) > rows + 10, "samples after the signals", proc=mon.proc)
    assert mon.proc.poll() is None
    set_energy(base, "intel-rapl:0", 3_600_000)          # read after the signals: 3.6 J = 0.001 Wh
    mon.mark("done")  # its sample reads the 3.6 J at the end of measure
    energy = mon.energy()
    assert energy["available"], energy.get("reason")
    assert energy["phases"]["measure"]["wh"] == pytest.approx(0.001)
    assert mon.proc.returncode == 0


def test_hung_monitor_is_killed_after_timeout(tmp_path):
    rapl_tree(tmp_path / "sys")
    mon = Monitor("rapl", interval_ms=20, root=str(tmp_path / "sys"), stop_timeout_s=1).start()
    os.kill(mon.proc.pid, signal.SIGSTOP)
    start = time.monotonic()
    summary = mon.stop()
    assert time.monotonic() - start < 120  # killed: a stopped process never ends by itself
    assert summary["reason"] == "monitor hung; killed after 1 s"
    assert mon.proc.poll() is not None


def test_bad_monitor_input():
    with pytest.raises(BadInput, match="not known"):
        Monitor("rapl,cuda")
    with pytest.raises(BadInput, match="at least 1 ms"):
        Monitor("auto", interval_ms=0.5)
    with pytest.raises(BadInput, match="not available on this machine"):
        Monitor("rapl", root="/nonexistent").start()


def test_power_command_passes_exit_code_and_writes_files(tmp_path):
    out = tmp_path / "out"
    proc = caraml("power", "--methods", "auto", "--out", out, "--", "sleep", "1", check=0)
    energy = json.loads((out / "energy.json").read_text())
    assert energy["command"] == ["sleep", "1"] and energy["exit_code"] == 0
    if HAS_NVML:  # a GPU machine measures the GPUs
        assert energy["available"] and energy["total_wh"] > 0
    else:
        assert energy["available"] is False and energy["reason"].startswith("energy unavailable")
        assert "energy unavailable" in proc.stderr
    caraml("power", "--out", out, "--overwrite", "--", "sh", "-c", "exit 7", check=7)


def test_power_command_with_rapl_tree_measures(tmp_path):
    rapl_tree(tmp_path / "sys")
    out = tmp_path / "out"
    proc = caraml("power", "--methods", "rapl", "--interval-ms", "50", "--out", out, "--format", "hdf5", "--",
                  "sleep", "1", env=cli_env(CARAML_SYSFS_ROOT=tmp_path / "sys"), check=0)
    energy = json.loads((out / "energy.json").read_text())
    assert energy["available"] and energy["window"] == "run" and energy["total_wh"] == 0.0
    # the command slept 1 s; the window opens when the monitor reads its clock after saying "ready", which a
    # loaded machine can delay past the command's start (a few hundredths of a second seen on 2 busy cores)
    assert energy["phases"]["run"]["duration_s"] >= 0.5
    assert "package-0" in proc.stderr and "total 0.0000 Wh over the run window (counter)" in proc.stderr
    import h5py

    with h5py.File(energy["nodes"][0]["timeseries"]) as f:
        assert len(f["time_s"]) >= 3 * 10 and set(f.keys()) >= {"power_w", "energy_j", "uuid"}


@pytest.mark.parametrize("args, message", [
    (["--methods", "foo", "--", "true"], "power method 'foo' is not known"),
    pytest.param(["--methods", "nvml", "--", "true"], "not available on this machine: nvml",
                 marks=pytest.mark.skipif(HAS_NVML, reason="this machine has NVML")),
    (["--interval-ms", "0", "--", "true"], "power interval 0 ms is too small"),
    (["--out", "/proc/caraml", "--", "true"], "cannot be written"),
    ([], "no command to measure"),
])
def test_power_command_bad_input(args, message, tmp_path):
    proc = caraml("power", *(["--out", tmp_path] if "--out" not in args else []), *args, check=2)
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_run_records_energy_from_counters_next_to_the_record(tmp_path, results):
    rapl_tree(tmp_path / "sys")
    proc = caraml("run", "image_classification", "power_interval_ms=50", "--preset", "smoke", "--results", results,
                  "--json", env=cli_env(CARAML_SYSFS_ROOT=tmp_path / "sys"), check=0)
    record = json.loads(proc.stdout)
    energy = record["metrics"]["energy"]
    assert energy["available"] and energy["source"] == "counter" and energy["window"] == "measure"
    assert energy["total_wh"] == 0.0 and energy["units_per_wh"] is None   # the generated counters stand still
    assert set(energy["phases"]) == {"setup", "warmup", "measure", "done"}
    assert energy["phases"]["measure"]["duration_s"] == pytest.approx(record["metrics"]["measured_time_s"], abs=0.5)
    series = energy["nodes"][0]["timeseries"]
    assert series.startswith(str(results / "runs" / record["run_id"])) and os.path.exists(series)
    assert records_in(results)[0]["run_id"] == record["run_id"]      # the CSV is not mistaken for a record


def test_run_without_power_method_stays_ok(results):
    proc = caraml("run", "image_classification", "measure_steps=2", "--preset", "smoke", "--results", results,
                  "--json", env=cli_env(CARAML_SYSFS_ROOT="/nonexistent"), check=0)
    energy = json.loads(proc.stdout)["metrics"]["energy"]
    if HAS_NVML:  # power=auto finds the GPUs on a GPU machine
        assert energy["available"] and energy["source"] == "counter"
        return
    assert energy["available"] is False and energy["total_wh"] is None
    assert energy["reason"].startswith("energy unavailable:") and "rapl" in energy["reason"]
    proc = caraml("run", "image_classification", "power=cuda", "--preset", "smoke", "--results", results, check=2)
    assert "power=cuda" in proc.stderr
