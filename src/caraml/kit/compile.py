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
    by_kind: dict[str, int] = {}  # dynamo's keys add the operator after the first line: one kind, several keys
    for reason, n in graph_break_counts().items():
        kind = (reason.strip().splitlines() or [""])[0][:200]
        by_kind[kind] = by_kind.get(kind, 0) + n - before.get(reason, 0)
    top = sorted(((kind, n) for kind, n in by_kind.items() if n > 0), key=lambda item: -item[1])
    return {"count": sum(n for _, n in top), "reasons": [{"reason": kind, "times": n} for kind, n in top[:5]]}
