"""precision=fp8: torchao's float8 training for the transformer blocks' linear layers (as Megatron-LM with
Transformer Engine runs them); the embedding, the output layer (tied to it), norms and attention stay in bf16
autocast, the master weights in fp32.

The matrix products of q/k/v, the attention output, and the MLP run as float8 products with dynamic scaling by
the recipe `fp8_recipe` (torchao's names): tensorwise (one scale per tensor), rowwise (one per row, e4m3 for
all), rowwise_with_gw_hp (rowwise, the weight gradient's product kept in bf16). Refused with one line where
torchao does not import, on CPUs, and on GPUs before sm_89 (no float8 tensor cores).

`fp8_fast_accum=true` (off unless asked for) lets the two backward products accumulate in the tensor cores'
faster, less precise mode too (torchao's recipes use it for the forward product only; Hopper's fast mode skips
the periodic promotion of the partial sums to fp32): faster products, gradients rounded more coarsely.
"""

from __future__ import annotations

from caraml.errors import BadInput

RECIPES = ("tensorwise", "rowwise", "rowwise_with_gw_hp")
MIN_CAPABILITY = (8, 9)  # Ada and Hopper: the first with float8 tensor cores


SETTINGS = ("fp8_recipe", "fp8_fast_accum")  # what only precision=fp8 uses (ComputeConfig's fields)


def settings_problem(compute) -> str | None:
    """An fp8-only setting moved off its default (ComputeConfig's) in a run without precision=fp8, in one line: it
    would change nothing but the configuration's id. None when there is none."""
    from dataclasses import fields

    defaults = {f.name: f.default for f in fields(compute)}
    for name in SETTINGS:
        value = getattr(compute, name)
        if value != defaults[name]:
            shown = str(value).lower() if isinstance(value, bool) else value
            return (f"{name}={shown} applies to precision=fp8's float8 products; this run has "
                    f"precision={compute.precision}")
    return None


def mfu_also(precision: str) -> tuple:
    """The peaks MFU is stated against besides the precision's own: fp8 training's against bf16's too (only the
    blocks' products run in fp8)."""
    return ("bf16",) if precision == "fp8" else ()


def torchao_problem() -> str | None:
    """Why torchao's float8 training cannot be used here, in a few words; None when it imports."""
    try:
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - absent, or built for another torch
        return f"torchao's float8 training does not import ({type(exc).__name__}: {str(exc)[:160]})"
    return None


def device_problem(device) -> str | None:
    """Why `device` has no float8 tensor cores for torchao, in one line; None when it has."""
    import torch

    if device.type != "cuda":
        return (f"precision=fp8 needs an NVIDIA GPU with float8 tensor cores (sm_89 or newer); this run is on "
                f"{device.type}: use precision=bf16")
    name = torch.cuda.get_device_name(device)
    if getattr(torch.version, "hip", None):
        return f"precision=fp8 is wired for NVIDIA GPUs (torchao's e4m3fn/e5m2); {name} is an AMD GPU"
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) < MIN_CAPABILITY:
        return (f"precision=fp8 needs float8 tensor cores (compute capability >= 8.9, Ada/Hopper or newer); "
                f"{name} is {major}.{minor}: use precision=bf16")
    return None


def check(device) -> None:
    """Refuse precision=fp8 where it cannot run, in one line (BadInput: exit 2)."""
    problem = device_problem(device) or torchao_problem()
    if problem:
        raise BadInput(f"llm_training: {problem}")


def tensor_parallel_problem(tp: int) -> str | None:
    """Why precision=fp8 cannot run with this tensor-parallel size, in one line; None when it can."""
    if tp > 1:
        return (f"precision=fp8 runs with tp=1 (torchao's float8 tensor-parallel styles are not wired here); "
                f"this layout has tp={tp}: use precision=bf16, or tp=1")
    return None


def is_block_linear(module, fqn: str) -> bool:
    """Whether the float8 conversion takes this module: a linear layer inside a transformer block (fqn
    `layers.N....` in the model, or a block's own `attn.wqkv`, `mlp.w1`, ... when converted block by block) whose
    sizes are multiples of 16 (float8 products need them); never the embedding or the output layer."""
    import torch.nn as nn

    if not isinstance(module, nn.Linear):
        return False
    inside = fqn.startswith("layers.") or fqn.split(".")[0] in ("attn", "mlp")
    return inside and module.in_features % 16 == 0 and module.out_features % 16 == 0


def linear_config(recipe: str, fast_accum: bool = False):
    """torchao's Float8LinearConfig of `recipe`; with `fast_accum`, fast accumulation in the backward products
    (grad_input, grad_weight) as in the forward one."""
    import dataclasses

    from torchao.float8 import Float8LinearConfig
    from torchao.float8.config import Float8GemmConfig

    config = Float8LinearConfig.from_recipe_name(recipe)
    if not fast_accum:
        return config
    fast = Float8GemmConfig(use_fast_accum=True)
    return dataclasses.replace(config, gemm_config_output=fast, gemm_config_grad_input=fast,
                               gemm_config_grad_weight=fast)


def convert(module, recipe: str, fast_accum: bool = False) -> list[str]:
    """Swap the block linears of `module` (a GPT or a block) for torchao's Float8Linear with `recipe`; returns
    the names converted. Before tensor parallelism, compilation and data parallelism."""
    import torch.nn as nn
    from torchao.float8 import convert_to_float8_training

    chosen = [name for name, m in module.named_modules() if is_block_linear(m, name)]
    config = linear_config(recipe, fast_accum)
    convert_to_float8_training(module, config=config, module_filter_fn=lambda m, fqn: is_block_linear(m, fqn))
    left = [n for n, m in module.named_modules() if n in chosen and type(m) is nn.Linear]
    if left:
        raise RuntimeError(f"torchao left {', '.join(left)} unconverted")
    return chosen
