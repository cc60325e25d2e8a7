"""torch.compile's options from a workload's `compile` and `compile_mode` parameters."""

from __future__ import annotations

TORCH_COMPILERS = ("inductor", "aot_eager")  # compile= values that go through torch.compile


def compile_options(compiler: str, mode: str = "default") -> dict:
    """Keyword arguments of torch.compile: the backend, and inductor's mode unless it is the default."""
    options = {"backend": compiler}
    if compiler == "inductor" and mode != "default":
        options["mode"] = mode
    return options
