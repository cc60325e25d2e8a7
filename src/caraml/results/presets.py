"""The Preset column: parameters whose values differ between rows only because the rows ran different presets (a
smoke run beside a suite's points: lr, num_classes, cudnn_tf32, ...) become one column, the preset's name, and a
footnote per preset lists what it set. A parameter that differs within a preset stays a column of its own.
"""

from __future__ import annotations

from caraml.errors import BadInput
from caraml.results.aggregate import Point
from caraml.results.columns import Column, differs

KEY = "preset"
NONE = "(none)"  # the Preset of a run that named no preset: the workload's defaults
_UNKNOWN = object()


def preset_of(record: dict) -> str:
    name = record.get("preset")
    return name if isinstance(name, str) and name else NONE


COLUMN = Column(KEY, "Preset", lambda p: preset_of(p.rep), config=True, joins=True)


def _preset_value(workload: str, preset: str, name: str):
    """The value parameter `name` has in a run of `preset` that sets nothing else (the default where the preset
    does not set it, or the run named none); _UNKNOWN for a workload, preset or parameter not known here."""
    from caraml import workloads

    try:
        wl = workloads.get(workload)
    except BadInput:
        return _UNKNOWN
    declared = next((p for p in wl.params if p.name == name), None)
    if declared is None or (preset != NONE and preset not in wl.presets):
        return _UNKNOWN
    given = wl.presets.get(preset, {}) if preset != NONE else {}
    try:
        return declared.parse(given[name], workload) if name in given else declared.default
    except BadInput:
        return _UNKNOWN


def _explained(workload: str, column: Column, points: list[Point]) -> bool:
    """Whether every run holds, in the column's parameter, the value its preset gives it."""
    for p in points:
        for r in p.records:
            want = _preset_value(workload, preset_of(r), column.param)
            one = Point(id=p.id, workload=p.workload, records=[r])
            if want is _UNKNOWN or column.get(one) != want:
                return False
    return True


def fold(workload: str, columns: list[Column], points: list[Point]) -> tuple[list[Column], list[Column]]:
    """(`columns` with the parameter columns that differ between the rows only by their runs' presets replaced by
    one Preset column where the first of them stood, those columns); `columns` and none where the rows ran one
    preset. notes(...) says what each preset set."""
    if len({preset_of(r) for p in points for r in p.records}) < 2:
        return columns, []
    folded = [c for c in columns if c.config and c.param and differs(c, points) and _explained(workload, c, points)]
    if not folded:
        return columns, []
    at = columns.index(folded[0])
    kept = [c for c in columns if c not in folded]
    kept.insert(min(at, len(kept)), COLUMN)
    return kept, folded


def notes(folded: list[Column], points: list[Point]) -> list[str]:
    """'Preset smoke: model=resnet18, lr=0.1' for each preset of the rows, in the order the rows have them."""
    if not folded:
        return []
    first: dict[str, dict] = {}
    for p in points:
        for r in p.records:
            first.setdefault(preset_of(r), r)
    out = []
    for name, r in first.items():
        one = Point(id="", workload=points[0].workload, records=[r])
        settings = ", ".join(f"{c.param}={_as_given(c.get(one))}" for c in folded)
        out.append(f"Preset {name}: {settings}")
    return out


def _as_given(value) -> str:
    """A value as a parameter is given (lr=0.01, channels_last=on), not as a figure is shown."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return "-" if value is None else str(value)
