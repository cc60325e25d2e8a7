"""Errors that suggest: a mistyped parameter, value, tag, system or column names the
closest right one; a tag in another case is the suite's where only one matches."""

from __future__ import annotations

import pytest

from caraml.errors import BadInput, did_you_mean


def test_did_you_mean_picks_the_closest_and_stays_quiet_when_nothing_is_close():
    assert did_you_mean("batchsize", ["batch_size", "image_size", "seed"]) == "did you mean batch_size? "
    assert did_you_mean("H100", ["h100", "A100"]) == "did you mean h100? "
    assert did_you_mean("zzzzzz", ["batch_size", "seed"]) == ""


def test_a_mistyped_parameter_and_value_are_answered_with_the_right_one():
    from caraml.runner import RunSpec, resolve

    with pytest.raises(BadInput, match="unknown parameter 'batchsize'; did you mean batch_size\\? `caraml workloads "
                                       "image_classification` lists its"):
        resolve(RunSpec("image_classification", {"batchsize": "8"}))
    with pytest.raises(BadInput, match="precision=bf61 is not valid; did you mean bf16\\? choose one of"):
        resolve(RunSpec("image_classification", {"precision": "bf61"}))


def test_a_mistyped_system_is_answered_with_the_right_one():
    from caraml import systems

    with pytest.raises(BadInput, match="unknown system 'H10'; did you mean H100\\?"):
        systems.get("H10")


def test_a_tag_in_another_case_is_the_suites_and_a_mistyped_one_is_answered(tmp_path):
    from caraml.campaign import sweep

    plan = sweep.plan("image_classification", ["h100", "Precision"], None, {}, max_points=100)
    assert plan.system == "H100" and "precision" in plan.tags
    with pytest.raises(BadInput, match="unknown tag 'precison'.*did you mean precision\\?"):
        sweep.plan("image_classification", ["precison"], "CPU", {})


def test_a_mistyped_column_is_answered_with_the_right_one(results):
    import handmade

    from caraml.results.select import result_tables, select

    handmade.write(results, handmade.image("H100", 64, "bf16", 2400.0))
    selection = select(str(results), None, [])
    with pytest.raises(BadInput, match="unknown column 'thruput'; did you mean throughput\\?"):
        result_tables(selection.points, ["thruput"])


def test_a_system_the_device_contradicts_is_refused_unless_forced(results, capsys):
    """`--system H100` on a CPU-only run would record H100 with MFU 0 % and compare as H100."""
    import json

    import torch

    from caraml import cli, systems

    cpu = torch.device("cpu")
    assert "names NVIDIA H100 PCIe GPUs, but this run is on the CPU" in systems.contradiction(systems.get("H100"), cpu)
    assert systems.contradiction(systems.get("GC200"), cpu) is None  # PopTorch drives IPUs from a CPU process
    assert systems.contradiction(systems.get("CPU"), cpu) is None
    base = ["run", "image_classification", "--preset", "smoke", "device=cpu", "power=off", "data=synthetic-device",
            "warmup_steps=1", "measure_steps=1", "image_size=32", "--results", str(results)]
    assert cli.main(base + ["--system", "H100"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--force-system" in err and "detected CPU" in err
    assert not (results / "runs").exists() or not list((results / "runs").glob("*.json"))
    assert cli.main(base + ["--system", "H100", "--force-system", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert record["system"]["tag"] == "H100" and record["system"]["forced"] is True


def test_a_local_sweep_whose_system_the_device_contradicts_is_refused_before_its_first_point(results, capsys,
                                                                                            monkeypatch):
    from caraml import cli
    from caraml.campaign import children

    started = []
    monkeypatch.setattr(children, "run_point", lambda point, *rest: started.append(point.id) or ("failed", False, {}))
    assert cli.main(["sweep", "image_classification", "--tag", "H100", "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and not started, (err, started)
    assert "--system H100 names NVIDIA H100 PCIe GPUs, but this run is on the CPU" in err
    assert "--system CPU (or --tag CPU in place of --tag H100)" in err
    assert not (results / "sweep").exists()


def test_a_width_of_the_family_is_answered_with_the_nearest_width_and_a_prefix_with_the_names_it_begins():
    precisions = ["fp32", "tf32", "fp16", "bf16", "16.16", "16.32", "32.32"]
    assert did_you_mean("fp64", precisions) == "did you mean fp32? "
    assert did_you_mean("fp8", precisions) == "did you mean fp16? "
    assert did_you_mean("fp3", precisions) == "did you mean fp32? "
    assert did_you_mean("bf61", precisions) == "did you mean bf16? "
    fno = ["smoke-PIC1D", "smoke-PIC2D", "smoke-RBC2D", "smoke-RBC3D", "PIC1D", "PIC2D", "RBC2D", "RBC3D"]
    assert did_you_mean("smoke", fno) == "did you mean one of smoke-PIC1D, smoke-PIC2D, smoke-RBC2D, smoke-RBC3D? "


@pytest.mark.parametrize("argv, answer", [
    (["run", "image_clasification"], "did you mean image_classification?"),
    (["sweep", "image_clasification", "--dry-run"], "did you mean image_classification?"),
    (["run", "image_classification", "--preset", "smok"], "did you mean smoke?"),
    (["run", "fno", "--preset", "smoke"], "did you mean one of smoke-PIC1D, smoke-PIC2D, smoke-RBC2D, smoke-RBC3D?"),
    (["launch", "fno", "--preset", "smoke", "--system", "CPU", "--show"], "did you mean one of smoke-PIC1D,"),
    (["run", "image_classification", "precision=fp64"], "did you mean fp32?"),
    (["plot", "throughtput"], "did you mean throughput?"),
])
def test_a_mistyped_name_anywhere_is_answered_with_the_right_one(argv, answer, results, capsys):
    from caraml import cli

    assert cli.main(argv + ["--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and answer in err, err


def test_a_preset_in_another_case_is_the_workloads():
    from caraml.campaign import sweep
    from caraml.runner import RunSpec, resolve

    assert resolve(RunSpec("image_classification", {}, preset="Smoke")).preset == "smoke"
    assert resolve(RunSpec("fno", {}, preset="smoke-pic1d")).preset == "smoke-PIC1D"
    assert resolve(RunSpec("llm_training", {}, preset="13b")).preset == "13B"
    plan = sweep.plan("image_classification", [], "CPU", {}, preset="SMOKE")
    assert {p.preset for p in plan.points} == {"smoke"}


@pytest.mark.parametrize("argv, answer", [
    (["result", "--workload", "image_clasification"], "did you mean image_classification?"),
    (["result", "--where", "precison=fp32"], "did you mean precision?"),
    (["compare", "--by", "precison"], "did you mean precision?"),
    (["result", "--where", "precision=fp64"], "match precision=fp64; did you mean fp32?"),
])
def test_a_mistyped_key_of_the_results_is_answered_with_the_close_one_alone(argv, answer, results, capsys):
    import handmade

    from caraml import cli

    handmade.write(results, handmade.image("H100", 64, "bf16", 2400.0))
    handmade.write(results, handmade.image("H100", 64, "fp32", 1200.0))
    assert cli.main(argv + ["--results", str(results)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and answer in err and "batch_size" not in err, err
