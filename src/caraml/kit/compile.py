"""torch.compile's options from a workload's `compile` and `compile_mode` parameters."""

from __future__ import annotations

TORCH_COMPILERS = ("inductor", "aot_eager")  # compile= values that go through torch.compile


def compile_options(compiler: str, mode: str = "default") -> dict:
    """Keyword arguments of torch.compile: the backend, and inductor's mode unless it is the default."""
    options = {"backend": compiler}
    if compiler == "inductor" and mode != "default":
        options["mode"] = mode
    return options


def graph_break_counts() -> dict[str, int]:
    """How often torch.compile's tracer (dynamo) has broken a graph in this process, by reason; empty where it was
    never loaded (nothing compiled)."""
    import sys

    dynamo = sys.modules.get("torch._dynamo.utils")
    return dict(dynamo.counters.get("graph_break") or {}) if dynamo else {}


def graph_breaks(before: dict[str, int]) -> dict:
    """The graph breaks since `before` (graph_break_counts): a compiled model in one graph has none; each break
    runs the code between graphs eagerly. Reasons by their first line, most frequent first."""
    since = {reason: n - before.get(reason, 0) for reason, n in graph_break_counts().items()}
    since = {reason: n for reason, n in since.items() if n > 0}
    top = sorted(since.items(), key=lambda item: -item[1])[:5]
    return {"count": sum(since.values()),
            "reasons": [{"reason": reason.strip().splitlines()[0][:200], "times": n} for reason, n in top]}
