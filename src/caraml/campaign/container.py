"""Apptainer: the image a system profile names, the command that pulls it, the prefix that runs in it.

A profile's `site.container_image` is a local `.sif` file or a registry URI (`docker://...`);
a URI is pulled once to `site.container_dir` (default ~/.cache/caraml/containers) as a `.sif`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from caraml.errors import BadInput


def image(profile: dict) -> str | None:
    return (profile.get("site", {}).get("container_image") or "").strip() or None


def sif_path(profile: dict) -> str:
    """Where the image lives on disk: the file itself, or the pulled copy of a URI."""
    ref = image(profile)
    if ref is None:
        raise BadInput(f"system {profile['tag']} names no container image (site.container_image)")
    if "://" not in ref:
        return ref
    folder = profile.get("site", {}).get("container_dir") or os.path.join("~", ".cache", "caraml", "containers")
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", ref.split("://", 1)[1]).strip("_") + ".sif"
    return str(Path(os.path.expanduser(folder)) / name)


def gpu_flag(profile: dict) -> list[str]:
    """--nv for NVIDIA, --rocm for AMD; nothing for CPU and IPU systems."""
    return {"nvidia": ["--nv"], "amd": ["--rocm"]}.get(profile.get("vendor", ""), [])


def exec_prefix(profile: dict, binds: list[str]) -> list[str]:
    """`apptainer exec --nv --bind A,B IMAGE`: what a command is put behind to run in the container."""
    binds = sorted(set(binds))
    return ["apptainer", "exec", *gpu_flag(profile), "--bind", ",".join(binds), sif_path(profile)]


def pull_command(profile: dict) -> list[str]:
    ref = image(profile)
    if ref is None or "://" not in ref:
        raise BadInput(f"system {profile['tag']} names no image to pull (site.container_image is "
                       f"'{ref or ''}'; a registry URI such as docker://nvcr.io/nvidia/pytorch:24.09-py3 is pulled)")
    return ["apptainer", "pull", sif_path(profile), ref]
