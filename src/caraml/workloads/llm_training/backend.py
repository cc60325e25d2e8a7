"""Which engine trains the GPT, and what each accepts: torch-free checks, run before anything is built.

`native` is this package's model and loop (model.py, parallel.py, bench.py). `megatron-core` is CARAML's own
engine, NVIDIA's megatron-core (`pip install 'caraml[megatron]'`): its GPTModel with Transformer Engine's
layers (`megatron_spec=te`) or its own (`local`), its distributed optimizer, loss scaler and pipeline
schedules, fed by the same data reader and timed by the same harness (megatron_core.py); there
`distributed_optimizer=zero1` or `fsdp` is Megatron's distributed optimizer (it has no FSDP2; the record's
`parallel_setup.dp_mode` says which ran) and `off` its DDP. `poptorch` is
Graphcore's IPUs as CARAML's GC200 runs (ipu.py).
"""

from __future__ import annotations

import importlib.util

from caraml.errors import BadInput

BACKENDS = ("native", "megatron-core", "poptorch")
SPECS = ("auto", "te", "local")
INSTALL = "pip install 'caraml[megatron]' (megatron-core 0.19.2, Python >= 3.12)"


def option_problem(cfg) -> str | None:
    """An option the chosen backend does not take, in one line; None when every option applies."""
    engine, compute = cfg.engine, cfg.compute
    if engine.backend != "megatron-core":
        if engine.megatron_spec != "auto":
            return f"megatron_spec={engine.megatron_spec} applies to backend=megatron-core only"
        return None
    if compute.compile != "none":
        return ("backend=megatron-core runs Megatron's modules uncompiled, as CARAML does; give compile=none, "
                "or backend=native to compile")
    if compute.attention != "auto":
        return (f"backend=megatron-core picks its attention by megatron_spec (te: Transformer Engine's fused "
                f"kernels, local: megatron-core's unfused one), not attention={compute.attention}; give attention=auto")
    o = cfg.optim
    if o.min_lr > o.lr:  # Megatron's scheduler asserts both
        return f"backend=megatron-core needs min_lr <= lr (now {o.min_lr:g} > {o.lr:g})"
    if o.lr_warmup_samples >= o.lr_decay_samples:
        return (f"backend=megatron-core needs lr_warmup_samples < lr_decay_samples (now {o.lr_warmup_samples} >= "
                f"{o.lr_decay_samples})")
    if cfg.parallel.tp > 1 and not cfg.parallel.loss_parallel:
        return "backend=megatron-core always takes the loss on vocabulary-sharded logits; give loss_parallel=on"
    return None


def check_installed(cfg, device) -> None:
    """backend=megatron-core: megatron-core is installed, the device is a CUDA GPU (megatron-core calls
    torch.cuda throughout: its rotary cache, causal mask, RNG tracker and gradient buffers), and
    megatron_spec=te finds Transformer Engine. BadInput in one line otherwise."""
    engine = cfg.engine
    if engine.backend != "megatron-core":
        return
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        raise BadInput(f"llm_training: backend=megatron-core needs megatron-core, which is not installed: {INSTALL}")
    if device.type != "cuda":
        raise BadInput(f"llm_training: backend=megatron-core runs on CUDA GPUs only, not device={device.type}; "
                       "give device=cuda, or backend=native")
    if engine.megatron_spec == "te" and not te_available():
        raise BadInput("llm_training: megatron_spec=te needs Transformer Engine, which does not import here: "
                       "pip install 'transformer-engine[pytorch]', or give megatron_spec=local (or auto)")


def te_available() -> bool:
    """Whether transformer_engine imports (a present but broken install counts as absent, as megatron-core's)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to import means Transformer Engine cannot be used
        return False
    return True
