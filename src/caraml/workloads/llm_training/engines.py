"""Which engine trains the GPT: one object per engine, each saying what it refuses and building its Bench.

`native` is this package's model and loop (model.py, parallel.py, bench.py). `megatron-core` is CARAML's own
engine, NVIDIA's megatron-core (`pip install 'caraml[megatron]'`): its GPTModel with Transformer Engine's
layers (`megatron_spec=te`) or its own (`local`), its distributed optimizer, loss scaler and pipeline
schedules, fed by the same data reader and timed by the same harness (megatron_core.py); there
`distributed_optimizer=zero1` or `fsdp` is Megatron's distributed optimizer (it has no FSDP2; the record's
`parallel_setup.dp_mode` says which ran) and `off` its DDP. `poptorch` is Graphcore's IPUs as CARAML's GC200
runs (ipu.py).

An engine is `problem(cfg, devices)` (why it cannot run this config on that many processes, one line; torch-free,
run first of the launch checks), `check_device(cfg, device)` (BadInput where this machine lacks what it needs)
and `build(cfg, ctx)` (its Bench: model, optimizer and step). The workload picks the object by the `engine`
setting (`ENGINES`); nothing else branches on its name.
"""

from __future__ import annotations

import importlib.util

from caraml.errors import BadInput
from caraml.workloads.llm_training import ipu
from caraml.workloads.llm_training.engine_names import INSTALL, NAMES, te_available  # noqa: F401 - NAMES: ENGINES' keys


class Engine:
    """What every engine has: its name, what it is and needs, and its refusals (megatron_spec is megatron-core's
    alone); each engine adds `check_device(cfg, device)` and `build(cfg, ctx)`."""

    name = ""
    about = ""
    needs = ""
    # PopTorch compiles its own step; a torch engine's step takes the workload's dropout, mixed-precision and
    # CARAML-shape checks
    torch_step = True

    def problem(self, cfg, devices: int) -> str | None:
        """An option this engine does not take, in one line; None when every option applies."""
        spec = cfg.runtime.megatron_spec
        if spec != "auto":
            return f"megatron_spec={spec} applies to engine=megatron-core only"
        return None


class NativeEngine(Engine):
    name = "native"
    about = "this package's GPT and training loop (plain PyTorch: tensor, pipeline, data parallel)"
    needs = "PyTorch on a GPU or CPU"

    def check_device(self, cfg, device) -> None:
        """Before anything starts: the precision runs on this device, the engine is installed, and data=oscar
        finds its reader and files."""
        import os

        from caraml.kit.precision import check_precision

        if cfg.compute.precision == "fp8":
            from caraml.workloads.llm_training import fp8

            fp8.check(device)
        check_precision(cfg.compute.precision, device)
        self.check_installed(cfg, device)
        if cfg.dataset.data == "oscar":
            from caraml.workloads.llm_training.data import check_indexed

            check_indexed(cfg.dataset, os.environ.get("CARAML_DATA"), cfg.model.vocab_size)

    def check_installed(self, cfg, device) -> None:
        """Nothing beyond PyTorch."""

    def build(self, cfg, ctx):
        from caraml.workloads.llm_training.bench import GPTBench

        return GPTBench(cfg, ctx)


class MegatronCoreEngine(NativeEngine):
    name = "megatron-core"
    about = "CARAML's engine: NVIDIA megatron-core's GPTModel, distributed optimizer, loss scaler and schedules"
    needs = f"a CUDA GPU and megatron-core ({INSTALL}); Transformer Engine for megatron_spec=te"

    def problem(self, cfg, devices: int) -> str | None:
        compute, o = cfg.compute, cfg.optim
        if compute.compile != "none":
            return ("engine=megatron-core runs Megatron's modules uncompiled, as CARAML does; give compile=none, "
                    "or engine=native to compile")
        if compute.attention != "auto":
            return (f"engine=megatron-core picks its attention by megatron_spec (te: Transformer Engine's fused "
                    f"kernels, local: megatron-core's unfused one), not attention={compute.attention}; give "
                    "attention=auto")
        if o.min_lr > o.lr:  # Megatron's scheduler asserts both
            return f"engine=megatron-core needs min_lr <= lr (now {o.min_lr:g} > {o.lr:g})"
        if o.lr_warmup_samples >= o.lr_decay_samples:
            return (f"engine=megatron-core needs lr_warmup_samples < lr_decay_samples (now {o.lr_warmup_samples} >= "
                    f"{o.lr_decay_samples})")
        if cfg.parallel.tp > 1 and not cfg.parallel.loss_parallel:
            return "engine=megatron-core always takes the loss on vocabulary-sharded logits; give loss_parallel=on"
        return None

    def check_installed(self, cfg, device) -> None:
        """megatron-core is installed, the device is a CUDA GPU (megatron-core calls torch.cuda throughout: its
        rotary cache, causal mask, RNG tracker and gradient buffers), and megatron_spec=te finds Transformer
        Engine. BadInput in one line otherwise."""
        if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
            raise BadInput(f"llm_training: engine=megatron-core needs megatron-core, which is not installed: {INSTALL}")
        if device.type != "cuda":
            raise BadInput(f"llm_training: engine=megatron-core runs on CUDA GPUs only, not device={device.type}; "
                           "give device=cuda, or engine=native")
        if cfg.runtime.megatron_spec == "te" and not te_available():
            raise BadInput("llm_training: megatron_spec=te needs Transformer Engine, which does not import here: "
                           "pip install 'transformer-engine[pytorch]', or give megatron_spec=local (or auto)")

    def build(self, cfg, ctx):
        from caraml.workloads.llm_training.megatron_core import MegatronBench

        return MegatronBench(cfg, ctx)


class PoptorchEngine(Engine):
    name = "poptorch"
    about = "Graphcore IPUs through PopTorch, as CARAML's GC200 runs (the blocks pipelined over a replica's IPUs)"
    needs = "Graphcore's poptorch (the Poplar SDK) on a GC200 host; one process"
    torch_step = False

    def problem(self, cfg, devices: int) -> str | None:
        """What engine=poptorch cannot run, in one line: one process, no tp/pp of ours, the layers laid out over
        the IPUs, our steady state only."""
        par = cfg.parallel
        unsupported = super().problem(cfg, devices)
        if unsupported:
            return unsupported
        if devices != 1 or par.tp != 1 or par.pp != 1:
            return ("engine=poptorch drives all IPUs from one process (replicas, ipus_per_replica); launch one "
                    "process with tp=1 pp=1")
        if cfg.caraml.logs:
            return "engine=poptorch measures our steady state only; give convention=steady"
        return ipu.placement_problem(cfg.model.num_layers, cfg.ipu.ipus_per_replica, cfg.ipu.layers_per_ipu)

    def check_device(self, cfg, device) -> None:
        from caraml.kit.ipu import require_poptorch

        require_poptorch()

    def build(self, cfg, ctx):
        return ipu.IpuGPTBench(cfg, ctx)


ENGINES = {engine.name: engine for engine in (NativeEngine(), MegatronCoreEngine(), PoptorchEngine())}


def chosen(cfg) -> Engine:
    """The engine object of a config's `engine` setting."""
    return ENGINES[cfg.runtime.engine]

