"""Configuration ids of stored records and of today's runs and sweep points: computed before the id moved out of
the registry, they must never change (records on disk group, compare and resume by them)."""

from __future__ import annotations

import pytest
from handmade import config_id_of, record, record_for

from caraml.campaign import suite as suite_mod
from caraml.campaign.expand import expand
from caraml.results.aggregate import current_id, group
from caraml.runner import RunSpec, resolve


@pytest.mark.parametrize("workload, system, params, devices, nodes, expected", [
    ("llm_training", "H100", {"model": "800M", "tp": 2}, 4, 1, "40562f161d917b94"),
    ("image_classification", "A100", {"model": "resnet50", "batch_size": 64}, 8, 2, "a9afb9c3cbb2b96f"),
    ("fno", "H200", {"problem": "RBC2D", "precision": "bf16"}, 1, 1, "0a3ef1f0d66cb7f1"),
])
def test_a_hand_written_record_keeps_its_id(workload, system, params, devices, nodes, expected):
    assert record(workload, system, params, 100.0, devices=devices, nodes=nodes)["id"] == expected


@pytest.mark.parametrize("workload, preset, on_cpu, on_two_h100_nodes", [
    ("image_classification", "smoke", "d1db987419671075", "04ba3b637f8f170a"),
    ("llm_training", "smoke", "4cc437d2c3670039", "40888af647ef367a"),
    ("llm_training", "800M", "4c2b131150e89c9e", "64c7094bc87e7ab8"),
    ("fno", "smoke-RBC2D", "6c811f9b2698468d", None),
])
def test_a_presets_run_keeps_its_id(workload, preset, on_cpu, on_two_h100_nodes):
    values = resolve(RunSpec(workload, {}, preset)).values
    assert config_id_of(workload, values, "CPU", 1, 1) == on_cpu
    if on_two_h100_nodes:
        assert config_id_of(workload, values, "H100", 8, 2) == on_two_h100_nodes
    measured_otherwise = {**values, "seed": 7, "measure_steps": 3, "power": "off"}
    assert config_id_of(workload, measured_otherwise, "CPU", 1, 1) == on_cpu


@pytest.mark.parametrize("suite, tags, system, first_ids", [
    ("image_classification", [], "CPU", ["8d646c4d1acfddaf", "40f69fdb723b4599", "7693fdaa0c769c1e"]),
    ("llm_training", ["800M"], "A100", ["6d92c648b7494cf9", "6570a3299dca285d", "4dcdc8915afefd02"]),
    ("fno", ["all"], "H100", ["84f91b0606e76b27", "bfb0c9c50e435d06", "8aa975ec4c5b6584"]),
])
def test_a_shipped_sweep_point_keeps_its_id(suite, tags, system, first_ids):
    points = expand(suite_mod.load(suite), set(tags), system)
    assert [p.id for p in points[:3]] == first_ids


@pytest.mark.parametrize("workload, former_params, stored_id, todays_id", [
    ("fno", {"problem": "RBC2D", "device": "auto", "amp": "off"}, "9b000abfb2720d63", "412d48064f4becc1"),
    ("llm_training", {"compile": False}, "0d35d0f66c4a32b2", "01ad2f0660a30df3"),
    ("image_classification", {"model": "resnet50", "gradient_accumulation": 2}, "da167bcc0ede0af6",
     "90c26d384ca3b748"),
])
def test_a_record_from_before_a_rename_groups_under_todays_id(workload, former_params, stored_id, todays_id):
    old = record_for(workload, former_params, {"tag": "CPU"}, {"world_size": 1, "nodes": 1}).to_dict()
    assert old["id"] == stored_id
    assert current_id(old) == todays_id
    assert [p.id for p in group([old])] == [todays_id]


def test_a_record_of_a_workload_this_installation_lacks_keeps_its_id():
    gone = record_for("gone", {"a": 1, "seed": 3}, {"tag": "CPU"}, {"world_size": 1, "nodes": 1}).to_dict()
    assert gone["id"] == current_id(gone) == "4d6bb0db6e542de7"
