"""System profiles: one TOML file per accelerator system, and detection of the one we run on.

Shipped profiles live beside this file. A site overrides or adds profiles with TOML files in the
folders of `CARAML_SYSTEMS_PATH` (colon-separated): a file `H100.toml` there is merged key by key
over the shipped H100 profile, so a site sets its partition, account or container image without
copying the peak rates.
"""

from __future__ import annotations

import math
import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

from caraml.errors import BadInput, did_you_mean, shown

SHIPPED = Path(__file__).parent / "profiles"
PRECISION_PEAK = {"fp32": "fp32", "tf32": "tf32", "fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _whole(v, low: int, high: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and low <= v <= high


# What a field must be, as the error says it, and its check; every number finite, and of the sign and size it
# can have (a peak rate of -0.001 would give an ok record with a negative MFU, 0 devices per node none at all).
_DEVICES, _COUNT = "a whole number from 1 to 1024, e.g. 4", "a whole number, 0 or more, e.g. 72"
_PORT, _MEMORY = "a port number from 1 to 65535, e.g. 29500", "a number, 0 or more (0: not known), e.g. 80"
_TEXT = 'a string in quotes, e.g. "gpu"'
_TEXTS, _RATES = 'a list of strings, e.g. ["nvml"]', "a table of numbers above 0, e.g. bf16 = 989.4"
_NAMED_TEXTS, _TABLE = 'a table of strings, e.g. all = "a datasheet"', 'a table, e.g. env = {OMP_NUM_THREADS = "8"}'
_BOOL, _ENV = "true or false", 'a table of strings, e.g. env = {NCCL_IB_TIMEOUT = "50"}'
_KINDS = {
    _DEVICES: lambda v: _whole(v, 1, 1024),
    _COUNT: lambda v: _whole(v, 0, 2**31 - 1),
    _PORT: lambda v: _whole(v, 1, 65535),
    _MEMORY: lambda v: _number(v) and v >= 0,
    _TEXT: lambda v: isinstance(v, str),
    _TEXTS: lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
    _TABLE: lambda v: isinstance(v, dict),
    _BOOL: lambda v: isinstance(v, bool),
}
# Tables whose every entry is checked: each entry's check (a bad entry is named, `peak_tflops.fp32 = -1`).
_ENTRIES = {
    _RATES: lambda v: _number(v) and v > 0,
    _NAMED_TEXTS: lambda v: isinstance(v, str),
    _ENV: lambda v: isinstance(v, str) or _number(v),
}
# Every field a profile may set and what it must be: a site file with `cpus_per_task = "8; ..."` is one line
# naming the file and the field when it is read, not a ValueError while job scripts are written.
SITE_FIELDS = {
    **{k: _TEXT for k in ("partition", "account", "constraint", "reservation", "qos", "container_image",
                          "container_dir", "container_python", "container_wheels", "container_envs",
                          "hostname_suffix", "time_limit", "gpu_option", "cpu_bind", "mpi")},
    **{k: _COUNT for k in ("gpus_per_node", "cpus_per_task", "signal_before_s")},
    "rdzv_port": _PORT,
    **{k: _TEXTS for k in ("sbatch_lines", "srun_args", "container_binds", "container_packages")},
    "exclusive": _BOOL, "env": _ENV,
}
FIELDS = {
    "tag": _TEXT, "description": _TEXT, "vendor": _TEXT, "accelerator": _TEXT, "match": _TEXTS,
    "devices_per_node": _DEVICES, "memory_per_device_gb": _MEMORY, "power_methods": _TEXTS,
    "peak_tflops": _RATES, "peak_source": _NAMED_TEXTS, "site": _TABLE, "site.workloads": _TABLE,
    **{f"site.{k}": kind for k, kind in SITE_FIELDS.items()},
}
# caraml plan's link bandwidths, GB/s per device and direction (intra_node, inter_node), and their sources
FIELDS.update({"links_gbps": _RATES, "links_source": _NAMED_TEXTS})


def _problem(key: str, value, kind: str) -> str | None:
    """What is wrong with a field's value (`key = value is not valid; ...`); None when it is what `kind` says."""
    if kind in _ENTRIES:
        if not isinstance(value, dict):
            return f"{key} = {shown(value, 60)} is not valid; it must be {kind}"
        bad = next((name for name, entry in value.items() if not _ENTRIES[kind](entry)), None)
        if bad is None:
            return None
        return f"{key}.{bad} = {shown(value[bad], 60)} is not valid; {key} must be {kind}"
    return None if _KINDS[kind](value) else f"{key} = {shown(value, 60)} is not valid; it must be {kind}"


def _toml():
    """The TOML parser: the standard library's from Python 3.11; before (the containers' 3.9 and 3.10) the same
    parser as the package tomli."""
    if sys.version_info >= (3, 11):
        import tomllib

        return tomllib
    try:
        import tomli
    except ImportError:
        raise BadInput(f"Python {sys.version_info[0]}.{sys.version_info[1]} reads the system profiles with the "
                       "package tomli, which is not installed here: pip install tomli") from None
    return tomli


def _read(path: Path) -> dict:
    toml = _toml()
    try:
        data = toml.loads(path.read_text())
    except (OSError, ValueError) as exc:  # ValueError: TOMLDecodeError, or not UTF-8
        raise BadInput(f"system profile {path} cannot be read: {shown(exc)}") from None
    checks = dict(FIELDS)
    workloads = data["site"].get("workloads") if isinstance(data.get("site"), dict) else None
    for name in workloads if isinstance(workloads, dict) else ():
        checks[f"site.workloads.{name}"] = _TABLE  # a workload's own site settings: the same fields as [site]
        checks.update({f"site.workloads.{name}.{k}": kind for k, kind in SITE_FIELDS.items()})
    for key, kind in checks.items():
        value = data
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        problem = None if value is None else _problem(key, value, kind)
        if problem:
            raise BadInput(f"system profile {path}: {problem}")
    for pattern in data.get("match", []):
        try:
            re.compile(pattern)
        except re.error as exc:
            raise BadInput(f"system profile {path}: match pattern '{shown(pattern, 60)}' is not a regular "
                           f"expression ({exc}); e.g. match = [\"H100\"]") from None
    return data


@lru_cache(maxsize=None)
def _load_all(search_path: str) -> dict[str, dict]:
    profiles: dict[str, dict] = {}
    folders = [SHIPPED] + [Path(p) for p in search_path.split(os.pathsep) if p]
    for folder in folders:
        for path in sorted(folder.glob("*.toml")):
            data = _read(path)
            tag = data.get("tag", path.stem)
            data["tag"] = tag
            profiles[tag] = _merge(profiles.get(tag, {}), data)
    return profiles


def profiles() -> dict[str, dict[str, Any]]:
    """All profiles by tag, site overrides applied."""
    return _load_all(os.environ.get("CARAML_SYSTEMS_PATH", ""))


def known_tags() -> list[str]:
    return sorted(profiles())


def get(tag: str) -> dict[str, Any]:
    table = profiles()
    if tag in table:
        return table[tag]
    for known in table:  # tags are case-insensitive on input: `--system h100`
        if known.lower() == tag.lower():
            return table[known]
    raise BadInput(f"unknown system '{shown(tag)}'; {did_you_mean(tag, known_tags())}known systems: "
                   + ", ".join(known_tags()))


def match_device_name(name: str) -> str | None:
    """The tag whose `match` patterns fit a device name such as 'NVIDIA H200'; most specific first."""
    best: tuple[int, str] | None = None
    for tag, profile in profiles().items():
        for pattern in profile.get("match", []):
            if re.search(pattern, name, re.IGNORECASE):
                score = len(pattern)
                if best is None or score > best[0]:
                    best = (score, tag)
    return best[1] if best else None


def contradiction(profile: dict, device) -> str | None:
    """What makes a profile given with --system wrong for the device the run is on, in one line; None when the
    device fits it (or is unknown to every profile, as a site's own GPU may be)."""
    tag, vendor = profile.get("tag"), profile.get("vendor")
    what = profile.get("accelerator") or tag
    if device.type == "cpu":
        if vendor in ("nvidia", "amd"):  # an IPU run drives its IPUs from a CPU process: graphcore fits
            return f"--system {tag} names {what} GPUs, but this run is on the CPU"
        return None
    import torch

    name = torch.cuda.get_device_name(device)
    if vendor == "cpu":
        return f"--system {tag} names a CPU-only machine, but this run is on a {name}"
    detected = match_device_name(name)
    fits = any(re.search(pattern, name, re.IGNORECASE) for pattern in profile.get("match", []))
    if detected is not None and detected != tag and not fits:
        return f"--system {tag} names {what}, but this run is on a {name} (profile {detected})"
    return None


def require_fits(profile: dict, device, remedy: str) -> None:
    """Refuse, in one line, a profile that `device` contradicts (see contradiction); `remedy` says what to pass
    instead, `{detected}` standing for the profile the device matches."""
    problem = contradiction(profile, device)
    if problem:
        raise BadInput(f"{problem}; " + remedy.format(detected=detect(device)))


def detect(device=None) -> str:
    """The tag of the system a run uses: from its accelerator's name (the first one when no device is
    given), CPU for a run on the CPU or a machine without accelerator."""
    import torch

    if device is not None and device.type == "cpu":
        return "CPU"
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(device if device is not None else 0)
        tag = match_device_name(name)
        if tag is None:
            raise BadInput(
                f"no system profile matches the device '{name}'; pass --system with one of: "
                + ", ".join(known_tags())
                + " (or add a profile in CARAML_SYSTEMS_PATH)"
            )
        return tag
    return "CPU"


def site(profile: dict, workload: str | None = None, overrides: dict | None = None) -> dict:
    """The site settings a job of `workload` gets on this system: the profile's [site], its
    [site.workloads.WORKLOAD] over it (CARAML's LLM jobs use another queue, more CPUs, more environment), then
    `overrides` (the command line's --partition, --account, ...) over both; tables such as env merge key by key."""
    base = profile.get("site")
    base = dict(base) if isinstance(base, dict) else {}  # a stored record's profile may be anything
    workloads = base.pop("workloads", None)
    own = workloads.get(workload) if isinstance(workloads, dict) and workload else None
    own = own if isinstance(own, dict) else {}
    return _merge(_merge(base, own), {k: v for k, v in (overrides or {}).items() if v is not None})


def peak_tflops(profile: dict, precision: str) -> float | None:
    return profile.get("peak_tflops", {}).get(PRECISION_PEAK.get(precision, precision))
