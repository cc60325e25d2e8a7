"""The GPT's engines by name, and what they need, without the engines themselves: the config declares its `engine`
and `megatron_spec` settings from these, and the engines (engines.py), which build from the config, check by
them. Torch-free."""

from __future__ import annotations

import importlib.util

NAMES = ("native", "megatron-core", "poptorch")  # engines.ENGINES, in this order
SPECS = ("auto", "te", "local")
INSTALL = "pip install 'caraml[megatron]' (megatron-core 0.19.2, Python >= 3.12)"


def te_available() -> bool:
    """Whether transformer_engine imports (a present but broken install counts as absent, as megatron-core's)."""
    if importlib.util.find_spec("transformer_engine") is None:
        return False
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception:  # noqa: BLE001 - any failure to import means Transformer Engine cannot be used
        return False
    return True
