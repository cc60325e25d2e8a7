"""System profiles: one TOML file per accelerator system, and detection of the one we run on.

Shipped profiles live beside this file. A site overrides or adds profiles with TOML files in the
folders of `CARAML_SYSTEMS_PATH` (colon-separated): a file `H100.toml` there is merged key by key
over the shipped H100 profile, so a site sets its partition, account or container image without
copying the peak rates.
"""

from __future__ import annotations

import os
import re
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any

from caraml.errors import BadInput

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


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise BadInput(f"system profile {path} cannot be read: {exc}") from None


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
    raise BadInput(f"unknown system '{tag}'; known systems: " + ", ".join(known_tags()))


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


def peak_tflops(profile: dict, precision: str) -> float | None:
    return profile.get("peak_tflops", {}).get(PRECISION_PEAK.get(precision, precision))
