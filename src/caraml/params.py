"""Parameters as data: each workload declares its parameters; `key=value` strings are parsed here.

A parameter has a name, a type (int, float, bool, str), a default, optional choices and a help
line. Parsing is strict: unknown keys, wrong types and values outside the choices raise
`BadInput` with one line naming the key, the bad value and what would be right.

A parameter is declared once, as a field of its owner's frozen config dataclass (`x: int = setting(4, "help",
minimum=1)`): the field gives its name, type and default, `setting` the rest of its `Param`. `params_of(Config)`
is the list `resolve`, `caraml show`, `caraml workloads`, sweeps and presets read, and `read_config(Config,
values)` the config of resolved values. A field whose type is itself such a dataclass is a section: its settings
are the owner's, under their own names (the user never sees sections).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any, Callable, Iterable, get_type_hints

from caraml.errors import BadInput, did_you_mean, shown

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: in no path, name or option a person types
INT_LIMIT = 2**63  # ints are int64 wherever they go (torch, SQLite, seeds): a larger one fails later, obscurely


@dataclass(frozen=True)
class Param:
    name: str
    type: type
    default: Any
    help: str = ""
    choices: tuple | None = None
    minimum: float | None = None
    # A check that needs more than choices (e.g. a model name looked up in torchvision); it
    # returns an error message or None. Run lazily so that parsing alone never imports torch.
    check: Callable[[Any], str | None] | None = field(default=None, compare=False)
    # Shown in the one line a run prints when it starts (the settings a reader looks for first).
    headline: bool = False
    # Part of what is measured, so part of the configuration's id; False for how it is measured (steps, seed,
    # power sampling): runs differing only in those measure the same configuration.
    identifies: bool = True
    # False for a parameter added after records were stored: at its default it stays out of the configuration's
    # id, so the points measured before it existed (which behaved as its default) keep their ids.
    identifies_at_default: bool = True
    aliases: tuple[str, ...] = ()  # former names, still accepted (and read from older records)
    value_aliases: tuple[tuple[Any, Any], ...] = ()  # (former value, value), e.g. (("off", "fp32"),)
    # A parameter retyped after records were stored keeps their ids: (value, former value) puts the former value
    # into the id (a bool that became a choice: ("fsdp", True)).
    id_values: tuple[tuple[Any, Any], ...] = ()
    # A parameter renamed after records were stored keeps their ids: its value enters the id under this, its
    # former name (e.g. engine's "backend"); None: under its own name.
    id_name: str | None = None
    # Whether the parameter has any effect, given the run's parameter values (a compile mode where nothing is
    # compiled has none): one that does not apply is left out of a run's first line and shows as '-' in tables.
    applies: Callable[[dict], bool] | None = field(default=None, compare=False)

    def applies_to(self, values: dict) -> bool:
        return self.applies is None or bool(self.applies(values))

    def parse(self, raw: Any, workload: str) -> Any:
        for old, new in self.value_aliases:  # YAML reads `on` as True: compare as text
            if not isinstance(raw, (int, float)) or isinstance(raw, bool):
                if str(raw).strip().lower() == str(old).lower():
                    raw = new
        value = self._convert(raw, workload)
        if self.choices is not None and value not in self.choices:
            raise BadInput(
                f"{workload}: {self.name}={shown(raw)} is not valid; {did_you_mean(raw, self.choices)}choose one of: "
                + ", ".join(str(c) for c in self.choices)
            )
        if self.minimum is not None and value is not None and value < self.minimum:
            raise BadInput(f"{workload}: {self.name}={shown(raw)} is too small; it must be >= {self.minimum:g}")
        return value

    def _convert(self, raw: Any, workload: str) -> Any:
        value = self._typed(raw, workload)
        if self.type is int and not -INT_LIMIT <= value < INT_LIMIT:
            raise BadInput(f"{workload}: {self.name}={shown(raw)} is out of range; an integer must lie "
                           "between -2**63 and 2**63-1")
        return value

    def _typed(self, raw: Any, workload: str) -> Any:
        if not isinstance(raw, str):  # from a preset or a suite; a float goes through text (inf, 10**400)
            if isinstance(raw, self.type) and self.type is not float and (self.type is bool) == isinstance(raw, bool):
                return raw
            raw = str(raw)
        text = raw.strip()
        try:
            if self.type in (int, float) and ("_" in text or not text.isascii()):
                raise ValueError  # Python reads 1_6 and full-width digits as numbers; a person rarely means them
            if self.type is bool:
                low = text.lower()
                if low in _TRUE:
                    return True
                if low in _FALSE:
                    return False
                raise ValueError
            if self.type is int:
                return int(text)
            if self.type is float:
                value = float(text)
                if not math.isfinite(value):
                    raise ValueError
                return value
            control = _CONTROL.search(text)
            if control:  # exec refuses a NUL, bash a job script with one; a terminal acts on the others
                raise BadInput(f"{workload}: {self.name}={shown(raw)} contains a control character "
                               f"({shown(control.group())}); give printable text")
            return text
        except ValueError:
            kind = {bool: "on/off (true/false, 1/0)", int: "an integer (plain digits, e.g. 16)",
                    float: "a finite number (plain digits, e.g. 0.5)"}[self.type]
            raise BadInput(f"{workload}: {self.name}={shown(raw)} is not {kind}") from None


def parse_assignments(items: Iterable[str]) -> dict[str, str]:
    """`["a=1", "b=x"]` -> `{"a": "1", "b": "x"}`; a missing `=`, or a key given twice, is bad input."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"parameter '{shown(item)}' is not of the form key=value (e.g. batch_size=64)")
        key = key.strip()
        if key in out:
            raise BadInput(f"parameter '{shown(key)}' is given twice ({shown(out[key], 50)} and {shown(value, 50)}); "
                           "give it once")
        out[key] = value
    return out


def resolve(
    declared: list[Param], given: dict[str, Any], workload: str, preset: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Defaults, then the preset, then the user's values: every effective parameter, typed."""
    by_name = {p.name: p for p in declared}
    given = canonical(declared, given, workload)
    for key in given:
        if key not in by_name:
            raise BadInput(
                f"{workload}: unknown parameter '{shown(key)}'; {did_you_mean(key, by_name)}`caraml workloads "
                f"{workload}` lists its {len(by_name)} parameters"  # the list itself is longer than a line
            )
    values = {p.name: p.default for p in declared}
    for source in (preset or {}, given):
        for key, raw in source.items():
            values[key] = by_name[key].parse(raw, workload)
    for p in declared:
        if p.check is not None and values[p.name] is not None:
            message = p.check(values[p.name])
            if message:
                raise BadInput(f"{workload}: {p.name}={shown(values[p.name])} {message}")
    return values


def canonical(declared: list[Param], given: dict[str, Any], workload: str = "") -> dict[str, Any]:
    """`given` with former parameter names replaced by today's (a name given both ways is bad input)."""
    renamed = {old: p.name for p in declared for old in p.aliases}
    if not renamed or not any(k in renamed for k in given):
        return dict(given)
    out: dict[str, Any] = {}
    given_as: dict[str, str] = {}
    for key, value in given.items():
        name = renamed.get(key, key)
        if name in out:
            former = key if key != name else given_as[name]
            raise BadInput(f"{workload}: '{former}' is the former name of '{name}', and both were given; "
                           f"give {name} once")
        out[name], given_as[name] = value, key
    return out


def id_view(declared: list[Param], values: dict[str, Any]) -> dict[str, Any]:
    """The parameter values a configuration id is computed from: quiet defaults left out, retyped values and renamed
    parameters as they were (Param.identifies_at_default, Param.id_values, Param.id_name); undeclared keys kept as
    they are."""
    # a parameter that hashes under its former name is that parameter under either name
    by_name = {**{old: p for p in declared if p.id_name for old in p.aliases}, **{p.name: p for p in declared}}
    out = {}
    for key, value in values.items():
        p = by_name.get(key)
        if p is not None and not p.identifies_at_default and value == p.default:
            continue
        for today, former in p.id_values if p is not None else ():
            if value == today:
                value = former
        out[(p.id_name if p is not None else None) or key] = value
    return out


_SETTING = "caraml.setting"  # the key of a setting's Param attributes in its field's metadata
_TYPES = (int, float, bool, str)


def setting(default: Any, help: str = "", **declared) -> Any:
    """A config field that is a parameter: its name, type and default are the field's; `help` and `declared`
    (choices, minimum, check, headline, identifies, identifies_at_default, aliases, value_aliases, id_values,
    id_name, applies) are the rest of its `Param`."""
    unknown = set(declared) - ({f.name for f in fields(Param)} - {"name", "type", "default"})
    if unknown:
        raise TypeError(f"setting() takes no {', '.join(sorted(unknown))}: the field gives name, type and default")
    return field(default=default, metadata={_SETTING: {"help": help, **declared}})


def params_of(config) -> list[Param]:
    """The parameters a config dataclass declares, in field order, its sections' in their place. TypeError for a
    field that is neither a setting nor a section, and for a setting whose default is not of its type."""
    out = []
    for f, type_ in _settings_and_sections(config):
        if _SETTING not in f.metadata:
            out += params_of(type_)
            continue
        if type_ not in _TYPES or type(f.default) is not type_:
            raise TypeError(f"{config.__name__}.{f.name}: a setting is an int, float, bool or str with a default "
                            f"of that type, not {getattr(type_, '__name__', type_)} = {f.default!r}")
        out.append(Param(f.name, type_, f.default, **f.metadata[_SETTING]))
    return out


def read_config(config, values: dict[str, Any]):
    """An instance of the config dataclass `config` from resolved parameter values (a section read likewise);
    a setting not among `values` holds its declared default, keys of other owners are left alone."""
    return config(**{f.name: values.get(f.name, f.default) if _SETTING in f.metadata else read_config(type_, values)
                     for f, type_ in _settings_and_sections(config)})


def _settings_and_sections(config):
    """(field, its type) for each field a config's caller sets: a setting, or a section (a dataclass of them)."""
    hints = get_type_hints(config)
    for f in fields(config):
        if not f.init:
            continue
        if _SETTING not in f.metadata and not is_dataclass(hints[f.name]):
            raise TypeError(f"{config.__name__}.{f.name} is neither a setting(...) nor a section (a dataclass of "
                            "settings)")
        yield f, hints[f.name]


def quiet_defaults(declared: list[Param], values: dict[str, Any]) -> set[str]:
    """The parameters declared `identifies_at_default=False` that hold their default: left out of configuration
    ids (and of the command lines a sweep writes), as the points from before they existed."""
    return {p.name for p in declared if not p.identifies_at_default and values.get(p.name, p.default) == p.default}


def as_today(declared: list[Param], params: dict[str, Any]) -> dict[str, Any]:
    """A stored record's parameters under today's names and values (former names and values mapped, as
    `resolve` maps them), for reading records written before a rename; unknown keys are kept as they are."""
    by_name = {p.name: p for p in declared}
    out = {}
    for key, value in params.items():
        name = next((p.name for p in declared if key in p.aliases), key)
        if name != key and name in params:
            continue  # both names stored: today's wins
        for old, new in by_name[name].value_aliases if name in by_name else ():
            if value is not None and str(value).lower() == str(old).lower():
                value = new
        out[name] = value
    return out
