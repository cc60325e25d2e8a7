"""A setting is declared once, as a field of its owner's frozen config: the parameter a person types is that field
(its name, type and default), and the config a run reads holds each value under the same name and type."""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import get_type_hints

import pytest

from caraml import workloads
from caraml.params import Param, params_of, read_config, resolve, setting
from caraml.settings import MEASURE_PARAMS, POWER_PARAMS, MeasureSettings, PowerSettings
from caraml.workloads import Workload

OWNERS = [(name, lambda name=name: (workloads.get(name).params, workloads.get(name).config))
          for name in workloads.names()] + [("measurement", lambda: (MEASURE_PARAMS, MeasureSettings)),
                                            ("power", lambda: (POWER_PARAMS, PowerSettings))]


def _fields(cls):
    """(name, type, default, value of) for each field of a config, its sections' fields in their place."""
    hints = get_type_hints(cls)
    for f in fields(cls):
        if not f.init:
            continue
        if is_dataclass(hints[f.name]):
            for name, type_, default, read in _fields(hints[f.name]):
                yield name, type_, default, lambda cfg, f=f, read=read: read(getattr(cfg, f.name))
        else:
            yield f.name, hints[f.name], f.default, lambda cfg, f=f: getattr(cfg, f.name)


@pytest.mark.parametrize("owner", [name for name, _ in OWNERS])
def test_each_parameter_is_the_field_of_its_name_type_and_default(owner):
    declared, config = dict(OWNERS)[owner]()
    assert [(p.name, p.type, p.default) for p in declared] == [
        (name, type_, None if default is MISSING else default) for name, type_, default, _ in _fields(config)]


@pytest.mark.parametrize("owner", [name for name, _ in OWNERS])
def test_the_config_a_run_reads_holds_each_parameter_with_its_declared_type(owner):
    declared, config = dict(OWNERS)[owner]()
    values = resolve(declared, {}, owner)
    cfg = workloads.get(owner).config_of(values) if owner in workloads.names() else config.from_params(values)
    readers = {name: read for name, _, _, read in _fields(config)}
    for p in declared:
        value = readers[p.name](cfg)
        assert type(value) is p.type, f"{owner}: {p.name} holds {value!r}, declared {p.type.__name__}"


@dataclass(frozen=True)
class _Optim:
    lr: float = setting(0.1, "learning rate", minimum=0.0)


@dataclass(frozen=True)
class _Config:
    batch_size: int = setting(64, "samples per step", minimum=1, headline=True)
    optim: _Optim = field(default_factory=_Optim)  # a section: its settings are the owner's, by their own names
    precision: str = setting("fp32", "fp32 or bf16", choices=("fp32", "bf16"), aliases=("amp",))


def test_a_config_declares_its_parameters_and_reads_them_back_by_section():
    assert params_of(_Config) == [Param("batch_size", int, 64, "samples per step", minimum=1, headline=True),
                                  Param("lr", float, 0.1, "learning rate", minimum=0.0),
                                  Param("precision", str, "fp32", "fp32 or bf16", choices=("fp32", "bf16"),
                                        aliases=("amp",))]
    values = resolve(params_of(_Config), {"amp": "bf16", "lr": "0.5"}, "w")
    assert read_config(_Config, {**values, "seed": 3}) == _Config(64, _Optim(0.5), "bf16")
    assert read_config(_Config, {}) == _Config()  # a setting not given holds its declared default


def test_a_workload_with_a_config_needs_no_parameter_list():
    wl = Workload(name="declared_once", unit="things", config=_Config)
    assert wl.params == params_of(_Config) and wl.headline == ("batch_size",)
    assert wl.config_of(resolve(wl.params, {"batch_size": "8"}, wl.name)) == _Config(batch_size=8)
    with pytest.raises(TypeError, match="workload twice_declared: its config declares its parameters"):
        Workload(name="twice_declared", unit="things", config=_Config, params=params_of(_Config))


def test_a_default_of_another_type_than_its_field_is_refused():
    @dataclass(frozen=True)
    class Wrong:
        lr: float = setting(0, "learning rate")  # prints as lr=0 where a float is meant

    with pytest.raises(TypeError, match=r"Wrong.lr: a setting is an int, float, bool or str with a default of that "
                                        r"type, not float = 0"):
        params_of(Wrong)


def test_a_field_that_is_no_setting_is_refused_not_skipped():
    @dataclass(frozen=True)
    class Undeclared:
        batch_size: int = 64  # a plain default: no help, and a user could not set it

    with pytest.raises(TypeError, match=r"Undeclared.batch_size is neither a setting\(...\) nor a section"):
        params_of(Undeclared)
    with pytest.raises(TypeError, match=r"setting\(\) takes no type: the field gives name, type and default"):
        setting(1, "x", type=int)
