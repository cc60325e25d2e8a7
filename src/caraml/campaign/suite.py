"""Suite files: a workload, parameter values and sweeps, tag-selected alternatives, derived values.

    workload: image_classification
    preset: default                # optional: a preset of the workload, before the suite's values
    tags: {bf16: "autocast bf16"}  # the tags this suite knows (system tags are always known)
    params:                        # workload parameters
      precision:                   # tag-selected: the last alternative whose tag matches wins
        - {value: fp32}
        - {tag: bf16, value: bf16}
    vars:                          # helpers for expressions, swept like params, never passed on
      global_batch_size: 32,64,128 # a list (or JUBE's comma list) is a sweep: cartesian product
    launch: {nodes: 1}             # nodes, devices_per_node, launcher, time_limit
    derived:                       # expressions evaluated in order, for each point
      batch_size: global_batch_size // devices
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from caraml.campaign import tags as tag_expr
from caraml.errors import BadInput

SECTIONS = ("params", "vars", "launch", "derived")
TOP_KEYS = {"workload", "description", "preset", "tags"} | set(SECTIONS)
LAUNCH_KEYS = {"nodes": "nodes (int)", "devices_per_node": "devices per node (int)",
               "launcher": "torchrun or srun", "time_limit": "SLURM time limit, e.g. 01:00:00"}


@dataclass
class Alternative:
    value: Any
    tag: str | None = None


@dataclass
class Suite:
    name: str
    workload: str
    source: str
    description: str = ""
    preset: str | None = None
    tags: dict[str, str] = field(default_factory=dict)
    # section -> name -> alternatives (one without a tag when the value is not tag-selected)
    entries: dict[str, dict[str, list[Alternative]]] = field(default_factory=dict)

    def mentioned_tags(self) -> set[str]:
        out = set(self.tags)
        for section in self.entries.values():
            for alts in section.values():
                for alt in alts:
                    if alt.tag is not None:
                        out |= tag_expr.names(alt.tag)
        return out


def shipped() -> dict[str, Path]:
    folder = resources.files("caraml.campaign") / "suites"
    return {Path(str(p)).stem: Path(str(p)) for p in folder.iterdir() if str(p).endswith(".yaml")}


def find(name_or_path: str) -> Path:
    table = shipped()
    if name_or_path in table:
        return table[name_or_path]
    path = Path(name_or_path)
    if path.is_file():
        return path
    raise BadInput(f"suite '{name_or_path}' is neither a shipped suite ({', '.join(sorted(table))}) nor a file")


def load(name_or_path: str) -> Suite:
    import yaml

    path = find(name_or_path)
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput(f"suite {path} cannot be read: {str(exc).splitlines()[0]}") from None
    return from_dict(data, path.stem, str(path))


def from_dict(data: Any, name: str, source: str) -> Suite:
    where = f"suite {source}"
    if not isinstance(data, dict) or "workload" not in data:
        raise BadInput(f"{where}: expected a mapping with at least 'workload'")
    unknown = set(data) - TOP_KEYS
    if unknown:
        raise BadInput(f"{where}: unknown key '{sorted(unknown)[0]}'; valid keys: {', '.join(sorted(TOP_KEYS))}")
    known_tags = data.get("tags") or {}
    if isinstance(known_tags, list):
        known_tags = {t: "" for t in known_tags}
    suite = Suite(name=name, workload=str(data["workload"]), source=source, description=data.get("description", ""),
                  preset=data.get("preset"), tags={str(k): str(v or "") for k, v in known_tags.items()})
    for section in SECTIONS:
        body = data.get(section) or {}
        if not isinstance(body, dict):
            raise BadInput(f"{where}: '{section}' must be a mapping of names to values")
        suite.entries[section] = {str(k): _alternatives(v, f"{where}: {section}.{k}") for k, v in body.items()}
    for key in suite.entries["launch"]:
        if key not in LAUNCH_KEYS:
            raise BadInput(f"{where}: launch.{key} is not a launch key; valid: {', '.join(LAUNCH_KEYS)}")
    return suite


def _alternatives(value: Any, where: str) -> list[Alternative]:
    """A plain value, or a list of {value, tag} mappings (tag-selected alternatives)."""
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = []
        for item in value:
            extra = set(item) - {"value", "tag"}
            if "value" not in item or extra:
                raise BadInput(f"{where}: a tag-selected alternative needs 'value' and an optional 'tag', "
                               f"got keys {', '.join(map(str, item))}")
            tag = item.get("tag")
            if tag is not None:
                tag_expr.parse(str(tag))  # bad expressions fail when the suite loads
            out.append(Alternative(item["value"], None if tag is None else str(tag)))
        return out
    if isinstance(value, dict):
        raise BadInput(f"{where}: a value is a scalar, a list (a sweep), or a list of {{value, tag}} alternatives")
    return [Alternative(value)]


def select(alts: list[Alternative], active: set[str]) -> tuple[bool, Any]:
    """JUBE's rule: alternatives whose tag does not hold are dropped; the last one left wins."""
    chosen = [a for a in alts if tag_expr.matches(a.tag, active)]
    return (True, chosen[-1].value) if chosen else (False, None)


def sweep_values(value: Any) -> list[Any]:
    """A list is a sweep; a string with commas is JUBE's comma list; anything else one value."""
    if isinstance(value, list):
        return [_number(v) for v in value]
    if isinstance(value, str) and "," in value:
        return [_number(part.strip()) for part in value.split(",")]
    return [_number(value)]


def _number(value: Any) -> Any:
    """Text that reads as a number is one (comma lists and command-line values arrive as text)."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value
