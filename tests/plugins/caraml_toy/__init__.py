"""A fourth workload in one package, outside caraml: its declaration, typed config, result columns.

Found through the entry-point group `caraml.workloads` (tests/plugins/caraml_toy-0.1.dist-info); nothing in
caraml names it. The Bench is in bench.py, imported only when a run builds it.
"""

from __future__ import annotations

from dataclasses import dataclass

from caraml.params import setting
from caraml.workloads import Col, Workload, register


@dataclass(frozen=True)
class ToyConfig:
    """Its parameters, each declared once: the field's name, type and default, and what `setting` adds."""

    batch_size: int = setting(64, "samples per step per device", minimum=1, headline=True)
    features: int = setting(32, "input features of the linear model", minimum=1)
    precision: str = setting("fp32", "fp32 or bf16 (autocast)", choices=("fp32", "bf16"), headline=True)
    lr: float = setting(0.05, "SGD learning rate", minimum=0.0)


def build(cfg: ToyConfig, ctx):
    from caraml_toy.bench import ToyBench

    return ToyBench(cfg, ctx)


def check_device(cfg: ToyConfig, device) -> None:
    from caraml.kit.precision import check_precision

    check_precision(cfg.precision, device)


WORKLOAD = register(Workload(
    name="toy_regression", unit="samples", config=ToyConfig, build=build, check_device=check_device,
    presets={"smoke": {"batch_size": 16, "features": 8, "warmup_steps": 2, "measure_steps": 5}},
    description="linear regression on random data (a test of the workload recipe)",
    columns=("system", "devices", Col("batch_size", "BatchSize", "param:batch_size", "int"),
             Col("final_loss", "Loss", "metric:final_loss", "num"), "throughput", "energy_wh", "ours"),
    metrics=("final_loss",),
))
