"""The engine setting: engine=native|megatron-core|poptorch for the GPT and engine=torch|poptorch for image
classification, each GPT engine an object of engines.py; the former name `backend` is still read, and records that
say `backend` load, group, show and keep their configuration ids as before (the ids below were computed by the code
from before the rename). In process, hand-written records; no engine is built."""

from __future__ import annotations

import json

import pytest
from conftest import cli
from handmade import config_id_of, record, write

from caraml.errors import BadInput
from caraml.params import params_of
from caraml.results.aggregate import current_id
from caraml.runner import RunSpec, resolve
from caraml.workloads.image_classification.config import ClassificationConfig
from caraml.workloads.llm_training import check_launch, engines
from caraml.workloads.llm_training.config import TrainingConfig

# config_id_of(workload, the workload's parameters at their defaults but the engine, "cpu-test", 1, 1), before the
# rename
GPT_IDS = {"native": "6a2cdf55531c207d", "megatron-core": "d585146507059e85", "poptorch": "300fdd1897ac7cfa"}
IC_IDS = {"torch": "3c6b1cc28ed15310", "poptorch": "e1886f78646357f2"}
# stored records' parameters, and the ids of the records handmade.record made of them before the rename
OLD_GPT = ({"model_size": "800M", "tp": 1, "pp": 1, "backend": "megatron-core"}, "a95c811fe095913e")
OLD_GPT_NATIVE = ({"model_size": "800M", "tp": 1, "pp": 1, "backend": "native"}, "dc165a60e2813681")
OLD_IC = ({"model": "resnet50", "batch_size": 64, "backend": "poptorch"}, "b0a6289cd8faf684")


def _values(workload: str, given: dict, preset: str | None = None) -> dict:
    return resolve(RunSpec(workload, given, preset=preset)).values


def _config(given: dict, preset: str = "smoke") -> TrainingConfig:
    return resolve(RunSpec("llm_training", given, preset=preset)).config


# the setting and its former name ------------------------------------------------------------------------------------
@pytest.mark.parametrize("workload, engine", [("llm_training", e) for e in GPT_IDS] +
                         [("image_classification", e) for e in IC_IDS])
def test_backend_is_read_as_engine_and_both_give_the_id_of_before(workload, engine):
    from caraml import workloads
    from caraml.params import resolve as resolve_params

    ids = GPT_IDS if workload == "llm_training" else IC_IDS
    for name in ("engine", "backend"):
        values = resolve_params(workloads.get(workload).params, {name: engine}, workload)
        assert values["engine"] == engine and "backend" not in values
        assert config_id_of(workload, values, "cpu-test", 1, 1) == ids[engine]
        assert _values(workload, {name: engine})["engine"] == engine


@pytest.mark.parametrize("workload", ["llm_training", "image_classification"])
def test_engine_given_under_both_names_is_one_line(workload):
    with pytest.raises(BadInput, match="'backend' is the former name of 'engine', and both were given"):
        _values(workload, {"engine": "poptorch", "backend": "poptorch"})


def test_an_unknown_engine_names_the_engines():
    with pytest.raises(BadInput, match="engine=tensorflow is not valid; .*native, megatron-core, poptorch"):
        _values("llm_training", {"engine": "tensorflow"})
    with pytest.raises(BadInput, match="engine=native is not valid; .*torch, poptorch"):
        _values("image_classification", {"backend": "native"})


def test_image_classification_reads_its_engine_from_either_name():
    cfg = resolve(RunSpec("image_classification", {"backend": "poptorch", "precision": "16.16"})).config
    assert isinstance(cfg, ClassificationConfig) and cfg.engine == "poptorch" and cfg.ipu


# the registry -------------------------------------------------------------------------------------------------------
def test_the_registry_lists_the_engines_the_setting_takes():
    assert engines.NAMES == tuple(engines.ENGINES) == ("native", "megatron-core", "poptorch")
    [param] = [p for p in params_of(TrainingConfig) if p.name == "engine"]
    assert param.choices == engines.NAMES and param.aliases == ("backend",) and param.id_name == "backend"
    for name, engine in engines.ENGINES.items():
        assert engine.name == name and engine.about and engine.needs
        assert callable(engine.problem) and callable(engine.check_device) and callable(engine.build)
    assert engines.chosen(_config({"backend": "megatron-core"})) is engines.ENGINES["megatron-core"]


# each engine's refusals, one line each ------------------------------------------------------------------------------
@pytest.mark.parametrize("engine, given, devices, says", [
    ("native", {"megatron_spec": "te"}, 1, "megatron_spec=te applies to engine=megatron-core only"),
    ("megatron-core", {"compile": "inductor"}, 1, "engine=megatron-core runs Megatron's modules uncompiled"),
    ("megatron-core", {"attention": "flash"}, 1, "not attention=flash; give attention=auto"),
    ("megatron-core", {"lr": "1e-4", "min_lr": "1e-3"}, 1, "engine=megatron-core needs min_lr <= lr"),
    ("megatron-core", {"lr_warmup_samples": "20000"}, 1, "needs lr_warmup_samples < lr_decay_samples"),
    ("megatron-core", {"tp": "2", "loss_parallel": "off"}, 2, "give loss_parallel=on"),
    ("poptorch", {"megatron_spec": "local"}, 1, "megatron_spec=local applies to engine=megatron-core only"),
    ("poptorch", {}, 4, "engine=poptorch drives all IPUs from one process"),
    ("poptorch", {"convention": "caraml-log"}, 1, "engine=poptorch measures our steady state only"),
    ("poptorch", {"layers_per_ipu": "0 4 4"}, 1, "names 3 IPUs, but ipus_per_replica=4"),
])
def test_each_engine_says_what_it_cannot_run_in_one_line(engine, given, devices, says):
    preset = "117M" if engine == "poptorch" else "smoke"
    cfg = _config({"engine": engine, **given}, preset)
    problem = engines.ENGINES[engine].problem(cfg, devices)
    assert problem is not None and says in problem and "\n" not in problem
    assert check_launch(cfg, devices) == problem  # the engine's refusal is the launch check's


def test_each_engine_runs_what_it_takes():
    assert engines.ENGINES["native"].problem(_config({}), 2) is None
    assert engines.ENGINES["megatron-core"].problem(_config({"engine": "megatron-core"}), 1) is None
    assert engines.ENGINES["poptorch"].problem(_config({"engine": "poptorch"}, "117M"), 1) is None


def test_poptorch_missing_is_one_message_for_both_workloads():
    pytest.importorskip("torch")
    import torch

    from caraml import workloads
    from caraml.kit.ipu import MISSING

    try:
        import poptorch  # noqa: F401
        pytest.skip("poptorch is installed here")
    except ImportError:
        pass
    for workload, given in (("llm_training", {"engine": "poptorch"}),
                            ("image_classification", {"backend": "poptorch", "precision": "16.16"})):
        cfg = resolve(RunSpec(workload, given)).config
        with pytest.raises(BadInput) as caught:
            workloads.get(workload).check_device(cfg, torch.device("cpu"))
        assert str(caught.value) == MISSING


# records that say backend -------------------------------------------------------------------------------------------
def _old(params: dict, cid: str, system: str, devices: int, throughput: float, started: str) -> dict:
    workload = "llm_training" if "model_size" in params else "image_classification"
    rec = record(workload, system, params, throughput, devices=devices, started=started)
    rec["id"] = cid  # as it was stored
    return rec


@pytest.mark.parametrize("old, system, devices", [(OLD_GPT, "H100", 4), (OLD_GPT_NATIVE, "H100", 4),
                                                  (OLD_IC, "GC200", 1)])
def test_an_old_record_keeps_its_id(old, system, devices):
    params, cid = old
    rec = _old(params, cid, system, devices, 1000.0, "2026-12-01T10:00:00.000+00:00")
    assert current_id(rec) == cid
    assert config_id_of(rec["workload"], rec["params"], system, devices, 1) == cid
    today = {**{k: v for k, v in rec["params"].items() if k != "backend"}, "engine": params["backend"]}
    assert config_id_of(rec["workload"], today, system, devices, 1) == cid  # a run of today's keeps it too


def _rows(results, *args):
    return json.loads(cli("result", "--results", results, "--format", "rows-json", *args, check=0).stdout)


def test_an_old_and_a_new_record_of_one_configuration_are_one_row_under_engine(tmp_path):
    params, cid = OLD_GPT
    write(tmp_path, _old(params, cid, "H100", 4, 380_000.0, "2026-12-01T10:00:00.000+00:00"))
    today = {**{k: v for k, v in params.items() if k != "backend"}, "engine": "megatron-core"}
    new = record("llm_training", "H100", today, 390_000.0, devices=4, started="2026-12-02T10:00:00.000+00:00")
    assert new["id"] == cid
    write(tmp_path, new)
    write(tmp_path, record("llm_training", "H100", {"model_size": "800M", "tp": 1, "pp": 1}, 400_000.0, devices=4))
    rows = _rows(tmp_path)
    assert sorted(r["engine"] for r in rows) == ["megatron-core", "native"]
    header = cli("result", "--results", tmp_path, "--format", "csv", check=0).stdout.splitlines()[0].split(",")
    assert "Engine" in header and "Backend" not in header


def test_the_former_name_still_selects_and_compares(tmp_path):
    params, cid = OLD_GPT
    write(tmp_path, _old(params, cid, "H100", 4, 380_000.0, "2026-12-01T10:00:00.000+00:00"))
    native = {"model_size": "800M", "tp": 1, "pp": 1, "engine": "native"}
    write(tmp_path, record("llm_training", "H100", native, 400_000.0, devices=4))
    picked = _rows(tmp_path, "--where", "backend=megatron-core", "--columns", "system,backend")
    assert [r["engine"] for r in picked] == ["megatron-core"]  # the column of its former name is Engine
    for by in ("backend", "engine"):
        text = cli("compare", "--results", tmp_path, "--by", by, "--format", "csv", check=0).stdout
        assert "megatron-core" in text and "native" in text, text
