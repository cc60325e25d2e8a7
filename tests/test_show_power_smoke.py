"""`caraml show` (resolved parameters, a stored run's), `caraml power`'s empty table and energy.json,
and the FNO smoke presets' data files (`caraml data fno-synthetic --smoke`)."""

from __future__ import annotations

import json

import handmade
import pytest
from conftest import cli


# caraml show WORKLOAD ------------------------------------------------------------------------------------------
def test_show_a_preset_groups_by_owner_and_marks_origins():
    proc = cli("show", "fno", "--preset", "smoke-PIC1D", "batch_size=2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("fno --preset smoke-PIC1D") and "nothing was run" in lines[0]
    assert [line for line in lines if not line.startswith(" ")][1:] == ["workload:", "measurement:", "power:"]
    row = {line.split()[0]: line for line in lines if line.startswith("  ")}
    assert row["batch_size"].split()[1:] == ["2", "(user)"]
    assert row["particles"].split()[1:] == ["512", "(preset)"]
    assert row["warmup_steps"].split()[1:] == ["2", "(preset)"]
    assert row["power"].split()[1:] == ["auto", "(default)"]
    assert "0.0 -> 0.001" in row["lr"]  # lr=0 is the problem's: what it becomes is shown


def test_show_json_is_one_object_with_every_parameter():
    proc = cli("show", "llm_training", "--preset", "smoke", "--json")
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    assert set(view["params"]) == {"workload", "measurement", "power"}
    assert view["params"]["measurement"]["device"] == {"value": "auto", "from": "default"}
    assert view["params"]["workload"]["vocab_size"]["from"] == "preset"
    assert proc.stderr == ""


@pytest.mark.parametrize("args, says", [
    (("fnoo",), "did you mean fno?"),
    (("fno", "batchsize=3"), "did you mean batch_size?"),
    (("fno", "--preset", "smoke"), "unknown preset"),
])
def test_show_bad_input_is_one_line_exit_2(args, says, tmp_path):
    proc = cli("show", *args, "--results", str(tmp_path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1 and says in proc.stderr


# caraml show RUN_ID --------------------------------------------------------------------------------------------
def _two_runs(results):
    a = handmade.record("image_classification", "H100", {"model": "resnet50", "batch_size": 48}, 500.0,
                        energy_wh=2.0, units_per_wh=100.0)
    b = handmade.record("image_classification", "A100", {"model": "resnet50", "batch_size": 64}, 300.0)
    handmade.write(results, a)
    handmade.write(results, b)
    return a, b


def test_show_a_run_by_id_prefix_and_config_id(results):
    a, b = _two_runs(results)
    for key in (a["run_id"], a["run_id"][:-3], a["id"]):
        proc = cli("show", key, "--results", str(results))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith(f"run {a['run_id']} (image_classification, ok) on H100")
        row = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ")}
        assert row["batch_size"].split()[1:] == ["48", "(set)"]
        assert "500 images/s" in row["throughput"] and "2 Wh" in row["energy"]
    view = json.loads(cli("show", b["run_id"], "--results", str(results), "--json").stdout)
    assert view["run_id"] == b["run_id"] and view["system"] == "A100"
    assert view["metrics"]["throughput"]["value"] == 300.0
    assert view["params"]["power"]["power"]["from"] == "not in the record"


def test_show_a_mistyped_or_ambiguous_run_id(results):
    a, b = _two_runs(results)
    typo = a["run_id"][:-1] + ("0" if a["run_id"][-1] != "0" else "1")
    proc = cli("show", typo, "--results", str(results))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert f"did you mean {a['run_id']}?" in proc.stderr
    common = a["run_id"][:8]
    proc = cli("show", common, "--results", str(results))
    assert proc.returncode == 2 and "begins 2 run ids" in proc.stderr and len(proc.stderr.splitlines()) == 1


# caraml sweep SUITE --show ID ---------------------------------------------------------------------------------
def test_sweep_show_prints_one_points_parameters_and_runs_nothing(tmp_path):
    listed = cli("sweep", "fno", "--tag", "smoke", "--dry-run", "--json", "global_batch_size=3",
                 "--results", str(tmp_path))
    point = json.loads(listed.stdout)[0]
    for key in ("1", point["id"], point["id"][:6]):
        proc = cli("sweep", "fno", "--tag", "smoke", "--show", key, "global_batch_size=3",
                   "--results", str(tmp_path))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.startswith("point 1 of 1 of suite fno: ")
        row = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ")}
        # the suite gives CARAML's global batch (split over the devices) and its data path, data=auto
        assert row["global_batch_size"].split()[1:] == ["3", "(suite)"] and row["batch_size"].split()[1:] == [
            "0", "(default)"] and row["data"].split()[1:] == ["auto", "(suite)"]
    view = json.loads(cli("sweep", "fno", "--tag", "smoke", "--show", "1", "--json").stdout)
    assert view["kind"] == "point" and set(view["params"]) == {"workload", "measurement", "power"}
    assert not (tmp_path / "runs").exists()


def test_sweep_show_a_bad_id_is_one_line_exit_2():
    listed = json.loads(cli("sweep", "fno", "--tag", "smoke", "--dry-run", "--json").stdout)
    typo = listed[0]["id"][:-1] + ("0" if listed[0]["id"][-1] != "0" else "1")
    proc = cli("sweep", "fno", "--tag", "smoke", "--show", typo)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert f"did you mean {listed[0]['id']}?" in proc.stderr
    assert "is no point of this sweep (1..1" in cli("sweep", "fno", "--tag", "smoke", "--show", "9").stderr


# caraml power --------------------------------------------------------------------------------------------------
@pytest.mark.subprocess
def test_power_without_a_device_says_why_in_one_line_and_records_the_duration(tmp_path):
    from conftest import caraml, cli_env

    (tmp_path / "sys").mkdir()  # no RAPL zones: the CPU profile's one method finds nothing
    out = tmp_path / "out"
    env = cli_env(CARAML_SYSFS_ROOT=tmp_path / "sys")
    proc = caraml("power", "--system", "CPU", "--out", out, "--", "sh", "-c", "sleep 0.3; exit 5", env=env, check=5)
    assert "host  device" not in proc.stderr  # no empty table header
    said = [line for line in proc.stderr.splitlines() if "no device measured" in line]
    assert len(said) == 1 and "rapl" in said[0]
    energy = json.loads((out / "energy.json").read_text())
    assert energy["exit_code"] == 5 and energy["duration_s"] >= 0.3
    assert energy["started_at"] < energy["finished_at"]
    assert "the command ran" in proc.stderr and "exit code 5" in proc.stderr


def test_power_never_overwrites_an_earlier_energy_json(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "energy.json").write_text('{"earlier": true}')
    marker = tmp_path / "ran"
    proc = cli("power", "--out", str(out), "--", "touch", str(marker))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "already holds energy.json" in proc.stderr and "--overwrite" in proc.stderr
    assert not marker.exists() and json.loads((out / "energy.json").read_text()) == {"earlier": True}


# caraml data fno-synthetic --smoke / --grid / --particles ------------------------------------------------------
@pytest.mark.parametrize("problem, spatial", [("PIC1D", (512,)), ("PIC2D", (512,)), ("RBC2D", (32, 16)),
                                              ("RBC3D", (16, 16, 8))])
def test_fno_synthetic_smoke_writes_the_smoke_presets_shapes(tmp_path, problem, spatial):
    h5py = pytest.importorskip("h5py")
    from caraml.workloads.fno import PRESETS

    proc = cli("data", "fno-synthetic", problem, "--smoke", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    with h5py.File(proc.stdout.strip()) as f:
        assert f["inputs"].shape[2:] == spatial
        assert f["inputs"].shape[0] == 10 == -(-2 * PRESETS[f"smoke-{problem}"]["batch_size"] // 0.8)


def test_fno_synthetic_grid_and_particles_by_hand(tmp_path):
    h5py = pytest.importorskip("h5py")
    grid = cli("data", "fno-synthetic", "RBC2D", "--grid", "24x8", "--samples", "3", "--out", str(tmp_path / "g"))
    pic = cli("data", "fno-synthetic", "PIC2D", "--particles", "64", "--smoke", "--out", str(tmp_path / "p"))
    with h5py.File(grid.stdout.strip()) as g, h5py.File(pic.stdout.strip()) as p:
        assert g["inputs"].shape == (3, 4, 24, 8) and p["inputs"].shape[2:] == (64,)


@pytest.mark.parametrize("args, says", [
    (("PIC1D", "--grid", "32x16"), "has particles, not a grid"),
    (("RBC2D", "--particles", "512"), "has no particles"),
    (("RBC2D", "--grid", "32"), "has 1 sizes; RBC2D is 2D"),
    (("RBC3D", "--grid", "8x0x4"), "every size must be >= 1"),
    (("PIC1D", "--particles", "0"), "at least 1 particle"),
])
def test_fno_synthetic_bad_shapes_are_one_line_exit_2(tmp_path, args, says):
    proc = cli("data", "fno-synthetic", *args, "--out", str(tmp_path / "out"))
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_fno_smoke_preset_on_a_smoke_file_reads_the_smoke_shape(tmp_path):
    pytest.importorskip("h5py")
    cli("data", "fno-synthetic", "PIC1D", "--smoke", "--out", str(tmp_path / "data"), check=0)
    proc = cli("run", "fno", "--preset", "smoke-PIC1D", "data=file", f"data_path={tmp_path / 'data'}", "power=off",
               "workers=0", "--results", str(tmp_path / "r"), "--json")  # read in this process: no worker to start
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["metrics"]["input_shape"] == "[4,2,512]"  # the preset's particles, not the 100,000 of CARAML's
    shown_run = cli("show", record["run_id"], "--results", str(tmp_path / "r"))  # what 0 became, read back
    row = {line.split()[0]: line for line in shown_run.stdout.splitlines() if line.startswith("  ")}
    assert "0.0 -> 0.001" in row["lr"] and row["particles"].split()[1:] == ["512", "(preset)"]
    assert row["data"].split()[1:] == ["file", "(set)"]
