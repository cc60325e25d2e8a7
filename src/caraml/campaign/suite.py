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
    launch: {nodes: 1}             # nodes, devices_per_node, launcher, time_limit, repeats
    derived:                       # expressions evaluated in order, for each point
      batch_size: global_batch_size // devices
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from caraml.campaign import tags as tag_expr
from caraml.errors import BadInput, did_you_mean, shown

SECTIONS = ("params", "vars", "launch", "derived")
TOP_KEYS = {"workload", "description", "preset", "tags"} | set(SECTIONS)
MAX_BYTES = 1 << 20  # a suite is a page of YAML; a larger file is a mistake (or an attack)
LAUNCH_KEYS = {"nodes": "nodes (int)", "devices_per_node": "devices per node (int)",
               "launcher": "torchrun or srun", "time_limit": "SLURM time limit, e.g. 01:00:00",
               "repeats": "runs of each point (int), each with a record of its own"}


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
    raise BadInput(f"suite '{shown(name_or_path)}' is neither a shipped suite nor a file; "
                   f"{did_you_mean(name_or_path, table)}shipped suites: {', '.join(sorted(table))}")


def load(name_or_path: str) -> Suite:
    import yaml

    path = find(name_or_path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_BYTES + 1)
        if len(raw) > MAX_BYTES:
            raise ValueError(f"it is larger than {MAX_BYTES} bytes")
        data = yaml.load(raw.decode("utf-8"), Loader=_no_aliases())
    except (OSError, ValueError, RecursionError, yaml.YAMLError) as exc:  # ValueError: not UTF-8, a 5000-digit int
        raise BadInput(f"suite {path} cannot be read: {shown((str(exc) or repr(exc)).splitlines()[0])}") from None
    return from_dict(data, path.stem, str(path))


@lru_cache(maxsize=None)
def _no_aliases():
    import yaml  # here, not at the top: `caraml --help` imports this module

    class NoAliases(yaml.SafeLoader):
        """YAML without aliases: eight nested `*a` of a few bytes expand to gigabytes (billion laughs)."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise yaml.composer.ComposerError(
                    None, None, f"aliases (*{event.anchor}) are not allowed in a suite (line "
                    f"{event.start_mark.line + 1}); write the value out", None)
            return super().compose_node(parent, index)

    return NoAliases


def from_dict(data: Any, name: str, source: str) -> Suite:
    where = f"suite {source}"
    if not isinstance(data, dict) or "workload" not in data:
        raise BadInput(f"{where}: expected a mapping with at least 'workload'")
    unknown = set(map(str, data)) - TOP_KEYS
    if unknown:
        raise BadInput(f"{where}: unknown key '{shown(sorted(unknown)[0])}'; valid keys: {', '.join(sorted(TOP_KEYS))}")
    for key, example in (("workload", "image_classification"), ("preset", "smoke"), ("description", "a line")):
        if (key == "workload" or data.get(key) is not None) and not isinstance(data[key], str):
            raise BadInput(f"{where}: '{key}' must be one name or text, not {shown(data[key])}; e.g. {key}: {example}")
    suite = Suite(name=name, workload=data["workload"], source=source, description=data.get("description") or "",
                  preset=data.get("preset"), tags=_tags(data.get("tags") or {}, where))
    for section in SECTIONS:
        body = data.get(section) or {}
        if not isinstance(body, dict):
            raise BadInput(f"{where}: '{section}' must be a mapping of names to values")
        suite.entries[section] = {str(k): _alternatives(v, f"{where}: {section}.{shown(k)}") for k, v in body.items()}
    for key in suite.entries["launch"]:
        if key not in LAUNCH_KEYS:
            raise BadInput(f"{where}: launch.{shown(key)} is not a launch key; valid: {', '.join(LAUNCH_KEYS)}")
    return suite


def _tags(value: Any, where: str) -> dict[str, str]:
    """`tags:` a mapping of tag names to descriptions, or a list of tag names."""
    def scalar(x):
        return isinstance(x, (str, int, float))

    if isinstance(value, list) and all(scalar(t) for t in value):
        value = dict.fromkeys(value, "")
    if not isinstance(value, dict) or not all(scalar(k) and (v is None or scalar(v)) for k, v in value.items()):
        raise BadInput(f"{where}: 'tags' must map tag names to descriptions, or list tag names; got {shown(value)}; "
                       "e.g. tags: {bf16: \"autocast bf16\"}")
    return {str(k): str(v or "") for k, v in value.items()}


def _alternatives(value: Any, where: str) -> list[Alternative]:
    """A plain value, or a list of {value, tag} mappings (tag-selected alternatives)."""
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        out = []
        for item in value:
            extra = set(item) - {"value", "tag"}
            if "value" not in item or extra:
                raise BadInput(f"{where}: a tag-selected alternative needs 'value' and an optional 'tag', "
                               f"got keys {shown(', '.join(map(str, item)))}")
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
    """Text that reads as a number is one (comma lists and command-line values arrive as text); `1_6`, `１６`
    and `inf` stay text, for the parameter's own check to refuse."""
    if not isinstance(value, str) or not value.isascii() or "_" in value:
        return value
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        return number if math.isfinite(number) else value
    return value
