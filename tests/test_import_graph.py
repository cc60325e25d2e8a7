"""The import graph of src/caraml, read with `ast` (imports at module level and inside functions alike): it has no
cycles, and no module imports from a layer above its own. The layers are declared here, lowest first."""

from __future__ import annotations

import ast
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1] / "src" / "caraml"

# Lowest first. A module may import from its own layer and the ones below it, never from one above. A module's
# layer is that of the longest name here it is or lies under; the `caraml` package itself (its version) is ground.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ground", ("caraml.errors", "caraml.console", "caraml.paths", "caraml.params", "caraml.parallel_dims",
                "caraml.kit", "caraml.systems", "caraml.distributed")),
    ("power", ("caraml.power",)),
    ("settings", ("caraml.settings",)),  # a run's measurement and power settings
    ("measure", ("caraml.measure", "caraml.data", "caraml.contract", "caraml.rollcall", "caraml.peers")),
    ("workloads", ("caraml.workloads",)),
    ("results", ("caraml.results",)),
    ("runner", ("caraml.runner", "caraml.crosscheck", "caraml.estimate", "caraml.show")),
    ("compare", ("caraml.compare",)),  # the comparison scripts' points and plain loops (bench/), over the runner
    ("campaign", ("caraml.campaign",)),
    ("cli", ("caraml.cli", "caraml.__main__")),
)

# Cycles known and being taken apart elsewhere, each as the pair of modules that import each other.
KNOWN_CYCLES: set[frozenset] = set()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SOURCE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in SOURCE.rglob("*.py")}


def _known(name: str) -> str | None:
    """The module `name` is, or the module it is a name in (`caraml.errors.BadInput` -> `caraml.errors`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of the imports under `if TYPE_CHECKING:`: they never run, they name types for annotations."""
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            ids.update(id(inner) for stmt in node.body for inner in ast.walk(stmt))
    return ids


def _imported(module: str, path: Path) -> set[str]:
    """The caraml modules `module` imports, wherever in it the import stands."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    skip, out = _type_checking_only(tree), set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            # `from PACKAGE import SUBMODULE` imports the submodule; `from MODULE import NAME`, the module
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        out.update(found for name in names if name.startswith("caraml") and (found := _known(name)))
    out.discard(module)
    return out


def _graph() -> dict[str, set[str]]:
    return {module: _imported(module, path) for module, path in MODULES.items()}


def _layer(module: str) -> int:
    if module == "caraml":
        return 0
    best = max(((len(name), rank) for rank, (_, names) in enumerate(LAYERS) for name in names
                if module == name or module.startswith(name + ".")), default=None)
    assert best is not None, f"{module} is in no layer: add it to LAYERS in {Path(__file__).name}"
    return best[1]


def _cycle(graph: dict[str, set[str]], known: set[frozenset]) -> list[str] | None:
    """One import cycle, as the modules along it (the first again at the end); None when there is none."""
    state: dict[str, str] = {}  # "open" while on the path being walked, "done" after

    def walk(module: str, path: list[str]) -> list[str] | None:
        state[module] = "open"
        for target in sorted(graph.get(module, ())):
            if frozenset({module, target}) in known:
                continue
            if state.get(target) == "open":
                return path[path.index(target):] + [module, target]
            if target not in state and (found := walk(target, path + [module])):
                return found
        state[module] = "done"
        return None

    for module in sorted(graph):
        if module not in state and (found := walk(module, [])):
            return found
    return None


def test_the_graph_sees_imports_inside_functions_and_from_packages():
    graph = _graph()
    assert "caraml.runner" in graph["caraml.crosscheck"]
    assert "caraml.workloads.fno.bench" in graph["caraml.workloads.fno"]  # inside build()
    assert "caraml.workloads.llm_training.sizes" in graph["caraml.workloads.llm_training.bench"]  # from PKG import
    assert "caraml.campaign.expand" not in graph["caraml.campaign.launchers"]  # under TYPE_CHECKING only


def test_the_import_graph_has_no_cycles():
    cycle = _cycle(_graph(), KNOWN_CYCLES)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_known_cycles_are_still_cycles():
    """A known cycle that is gone is taken off the list, so that it cannot come back unseen."""
    graph = _graph()
    for pair in KNOWN_CYCLES:
        a, b = sorted(pair)
        assert b in graph[a] and a in graph[b], f"{a} and {b} no longer import each other: drop them from KNOWN_CYCLES"


def test_no_module_imports_from_a_layer_above_its_own():
    graph = _graph()
    upward = [f"{module} ({LAYERS[_layer(module)][0]}) imports {target} ({LAYERS[_layer(target)][0]})"
              for module in sorted(graph) for target in sorted(graph[module]) if _layer(target) > _layer(module)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)
