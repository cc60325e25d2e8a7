"""torch.compile's options from a workload's `compile`, `compile_mode` and `compile_tuning` parameters."""

from __future__ import annotations

from caraml.params import setting

TORCH_COMPILERS = ("inductor", "aot_eager")  # compile= values that go through torch.compile
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
# coordinate-descent: inductor times each generated Triton kernel's launch (block sizes, warps) and keeps the
# fastest; a reduction's block size sets its summation order, so results differ by rounding: a choice, not a default
COMPILE_TUNINGS = ("none", "coordinate-descent")


def compile_options(compiler: str, mode: str = "default", tuning: str = "none") -> dict:
    """Keyword arguments of torch.compile: the backend, inductor's mode unless it is the default, and the tuning.
    torch.compile takes a mode or inductor's options, not both: with a tuning, the mode is spelled out as the
    options it stands for (torch._inductor.list_mode_options) and the tuning's option added."""
    options: dict = {"backend": compiler}
    if compiler != "inductor":
        return options
    if tuning == "none":
        if mode != "default":
            options["mode"] = mode
        return options
    from torch._inductor import list_mode_options

    options["options"] = {**list_mode_options(mode), "coordinate_descent_tuning": True}
    return options


def inductor_only(values: dict) -> bool:
    """Whether compile_mode and compile_tuning apply: they are inductor's."""
    return values.get("compile") == "inductor"


def compile_tuning_setting():
    """The `compile_tuning` parameter of a workload's config, one declaration for every workload that compiles."""
    return setting("none", "compile=inductor: coordinate-descent times each generated kernel's launch configuration "
                   "and keeps the fastest (minutes more compiling; sums may round differently)",
                   choices=COMPILE_TUNINGS, identifies_at_default=False, applies=inductor_only)


GRAPHS = "<graphs>"  # graph_break_counts' entry for the graphs dynamo made (no reason of dynamo's looks like it)


def graph_break_counts() -> dict[str, int]:
    """How often torch.compile's tracer (dynamo) has broken a graph in this process, by reason, and how many graphs
    it made (under GRAPHS); empty where it was never loaded (nothing compiled)."""
    import sys

    dynamo = sys.modules.get("torch._dynamo.utils")
    if dynamo is None:
        return {}
    return {**dynamo.counters.get("graph_break", {}), GRAPHS: dynamo.counters.get("stats", {}).get("unique_graphs", 0)}


def graph_breaks(before: dict[str, int]) -> dict | None:
    """The graphs torch.compile made since `before` (graph_break_counts) and the breaks between them: a compiled
    model in one graph has none; each break runs the code between graphs eagerly. Reasons by their first line,
    most frequent first. None where torch.compile made no graph (nothing compiled, or another compiler: a
    TorchScript trace, PopTorch)."""
    now = graph_break_counts()
    graphs = now.pop(GRAPHS, 0) - before.get(GRAPHS, 0)
    if graphs <= 0:
        return None
    by_kind: dict[str, int] = {}  # dynamo's keys add the operator after the first line: one kind, several keys
    for reason, n in now.items():
        kind = (reason.strip().splitlines() or [""])[0][:200]
        by_kind[kind] = by_kind.get(kind, 0) + n - before.get(reason, 0)
    top = sorted(((kind, n) for kind, n in by_kind.items() if n > 0), key=lambda item: -item[1])
    return {"count": sum(n for _, n in top), "graphs": graphs,
            "reasons": [{"reason": kind, "times": n} for kind, n in top[:5]]}
