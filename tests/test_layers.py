"""Who may import what: the layers that only read declarations and records stay free of torch and of the
harness, so listing, validation, sweep expansion and tables are fast and run where torch is absent."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import cli_env

LIGHT = ("caraml.settings", "caraml.results.aggregate", "caraml.results.columns", "caraml.results.compare",
         "caraml.campaign.expand", "caraml.workloads", "caraml.parallel_dims", "caraml.kit.precision",
         "caraml.kit.epochs")


@pytest.mark.subprocess
def test_declarations_results_and_campaigns_import_no_torch_nor_the_harness():
    code = ("import sys\n"
            f"for m in {LIGHT!r}: __import__(m)\n"
            "from caraml import workloads\n"
            "for name in workloads.names(): workloads.get(name)\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy')\n"
            "               or m in ('caraml.measure.harness', 'caraml.runner'))\n"
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(), check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_one_list_of_measurement_keys_from_the_declarations():
    from caraml.settings import MEASUREMENT_KEYS, RUN_PARAMS, identity

    assert MEASUREMENT_KEYS == {p.name for p in RUN_PARAMS if not p.identifies}
    assert "device" not in MEASUREMENT_KEYS and {"seed", "power", "measure_steps"} <= MEASUREMENT_KEYS
    assert identity({"batch_size": 8, "seed": 3, "device": "cpu"}) == {"batch_size": 8, "device": "cpu"}


def test_a_record_id_is_the_same_as_before_the_settings_moved():
    """Ids of stored records must not change: a smoke configuration's id, as computed before the refactor."""
    from handmade import config_id_of

    params = {"model": "resnet18", "batch_size": 16, "device": "auto", "seed": 0, "warmup_steps": 2,
              "measure_steps": 8, "power": "auto", "power_interval_ms": 100.0}
    assert config_id_of("image_classification", params, "CPU", 1, 1) == "2481c7a839ccb776"  # by commit 3b16e44


def test_a_renamed_parameter_given_both_ways_is_named_right():
    import pytest

    from caraml.errors import BadInput
    from caraml.params import Param, resolve

    declared = [Param("precision", str, "fp32", choices=("fp32", "fp16"), aliases=("amp",),
                      value_aliases=(("off", "fp32"),))]
    assert resolve(declared, {"amp": "off"}, "w") == {"precision": "fp32"}
    for given in ({"amp": "off", "precision": "fp32"}, {"precision": "fp32", "amp": "off"}):
        with pytest.raises(BadInput, match="'amp' is the former name of 'precision'"):
            resolve(declared, given, "w")


def test_an_old_record_groups_under_todays_parameter_names():
    """FNO's `amp` is `precision` now: a stored record with amp=off compares as precision=fp32."""
    from caraml.results.aggregate import Point

    old = {"id": "x", "workload": "fno", "status": "ok", "params": {"problem": "RBC2D", "amp": "off"}}
    assert Point("x", "fno", [old]).params == {"problem": "RBC2D", "precision": "fp32"}
    unknown = {"id": "y", "workload": "gone", "status": "ok", "params": {"amp": "off"}}
    assert Point("y", "gone", [unknown]).params == {"amp": "off"}


def test_a_record_from_before_a_rename_is_the_same_configuration_as_todays_run():
    """An FNO record written with amp=off (its id hashed that way) and today's precision=fp32 run are one point;
    the stored file is not changed."""
    from handmade import record_for

    from caraml.results.aggregate import current_id, group

    def record(params):
        return record_for("fno", {"problem": "RBC2D", "device": "auto", **params}, {"tag": "CPU"},
                          {"world_size": 1, "nodes": 1}, status="ok").to_dict()

    old, new = record({"amp": "off"}), record({"precision": "fp32"})
    assert old["id"] != new["id"] and old["params"]["amp"] == "off"
    assert current_id(old) == current_id(new) == new["id"]
    assert [len(p.records) for p in group([old, new])] == [2]
    llm_old = record_for("llm_training", {"compile": False}, {"tag": "CPU"}, {"world_size": 1, "nodes": 1},
                         status="ok").to_dict()
    llm_new = record_for("llm_training", {"compile": "none"}, {"tag": "CPU"}, {"world_size": 1, "nodes": 1},
                         status="ok").to_dict()
    assert current_id(llm_old) == llm_new["id"]
