"""Apptainer: the image a system profile names, the command that pulls it, the prefix that runs in it, and the
prepared environment (caraml and its small dependencies over the image's own python and torch) jobs run with.

A profile's `site.container_image` is a local `.sif` file or a registry URI (`docker://...`);
a URI is pulled once to `site.container_dir` (default ~/.cache/caraml/containers) as a `.sif`.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from caraml.errors import BadInput, printable


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


def bind_paths(named: list[tuple[str, str]]) -> list[str]:
    """The folders caraml binds into the container, each (what sets it, path); one line for a path holding ',' or
    ':': `apptainer exec --bind a,b` splits at ',' and reads `src:dst` at ':'. (A site's own container_binds are
    bind specifications and may hold ':'.)"""
    for what, path in named:
        for char in ",:":
            if char in path:
                raise BadInput(f"{what} {path} holds '{char}', which apptainer --bind reads as a separator; use a "
                               "folder without ',' or ':'")
    return [path for _, path in named]


def pull_command(profile: dict) -> list[str]:
    ref = image(profile)
    if ref is None or "://" not in ref:
        raise BadInput(f"system {profile['tag']} names no image to pull (site.container_image is "
                       f"'{ref or ''}'; a registry URI such as docker://nvcr.io/nvidia/pytorch:24.09-py3 is pulled)")
    return ["apptainer", "pull", sif_path(profile), ref]


# The prepared environment: caraml inside the image ---------------------------------------------------------------
# Job scripts run caraml with the image's own python and torch. A virtual environment made with
# --system-site-packages over that python adds what the image lacks (caraml, pyyaml, rich, ...), installed from a
# wheel folder without a package index, so compute nodes need no network. One environment per image file and caraml
# wheel, keyed by the image's path, size and mtime and the wheel's contents: a re-pulled image or a rebuilt caraml gets
# a fresh one; `.caraml-ready` is written last, and trusted while the environment's python is there.

READY = ".caraml-ready"
BASE_PACKAGES = ("pyyaml>=6", "rich>=13", "tomli>=1.1; python_version < '3.11'")  # what in-job code imports
VENDOR_PACKAGES = {"nvidia": ("nvidia-ml-py>=12",)}  # the NVML power backend


def _site(profile: dict) -> dict:
    return profile.get("site") or {}


def _folder(profile: dict) -> Path:
    folder = _site(profile).get("container_dir") or os.path.join("~", ".cache", "caraml", "containers")
    return Path(os.path.expanduser(folder))


def wheel_dir(profile: dict) -> Path:
    """The wheel folder environments are installed from (site.container_wheels, default CONTAINER_DIR/wheels)."""
    own = _site(profile).get("container_wheels")
    return Path(os.path.expanduser(own)) if own else _folder(profile) / "wheels"


def _envs_root(profile: dict) -> Path:
    own = _site(profile).get("container_envs")
    return Path(os.path.expanduser(own)) if own else _folder(profile) / "envs"


def _setting(profile: dict, field: str) -> str:
    """Who sets a folder, for a message: the profile's field, or container_dir (the default is under it)."""
    return f"site.{field}" if _site(profile).get(field) else "site.container_dir"


def _make_folder(path: Path, setting: str) -> Path:
    """`path` made a folder (with parents); one line naming the setting when it cannot be (a file in its place or
    above it, no permission, a full disk)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"{setting} {path} cannot be made a folder ({exc.strerror or exc}); set {setting} in the "
                       "system profile to a folder caraml may write") from None
    return path


def packages(profile: dict) -> list[str]:
    """What the environment installs besides caraml (site.container_packages replaces the default list)."""
    own = _site(profile).get("container_packages")
    if own is not None:
        return list(own)
    return [*BASE_PACKAGES, *VENDOR_PACKAGES.get(profile.get("vendor", ""), ())]


def image_key(sif: str) -> str | None:
    """The image's identity: a hash of its real path, size and mtime; None while the file is missing."""
    try:
        st = os.stat(sif)
    except OSError:
        return None
    ident = f"{os.path.realpath(sif)}\0{st.st_size}\0{st.st_mtime_ns}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def wheels_key(folder: Path) -> str | None:
    """The caraml wheels' identity: a hash of their names and contents; None while the folder holds none."""
    try:
        wheels = sorted(folder.glob("caraml-*.whl"))
        stats = [(str(w), w.stat().st_size, w.stat().st_mtime_ns) for w in wheels]
    except OSError:
        return None
    return _hash_files(tuple(stats)) if stats else None


@lru_cache(maxsize=16)
def _hash_files(stats: tuple[tuple[str, int, int], ...]) -> str | None:
    """A hash of the files' names and contents; cached by path, size and mtime (a job script per point asks)."""
    digest = hashlib.sha256()
    try:
        for path, _, _ in stats:
            digest.update(Path(path).name.encode() + b"\0" + Path(path).read_bytes())
    except OSError:
        return None
    return digest.hexdigest()


def env_dir(profile: dict) -> Path:
    """The prepared environment of the profile's image and caraml wheel (site.container_envs, default
    CONTAINER_DIR/envs); named `-not-pulled` or `-no-wheel` while either is missing (`missing` says which)."""
    sif = sif_path(profile)
    image_id, wheels_id = image_key(sif), wheels_key(wheel_dir(profile))
    if image_id is None or wheels_id is None:
        key = "not-pulled" if image_id is None else "no-wheel"
    else:
        key = hashlib.sha256(f"{image_id}\0{wheels_id}\0{packages(profile)}".encode()).hexdigest()[:16]
    return _envs_root(profile) / f"{Path(sif).stem}-{key}"


def is_prepared(env: Path) -> bool:
    """The environment is complete: its ready stamp and its python (a link into the image) are there."""
    return (env / READY).is_file() and os.path.lexists(env / "bin" / "python")


def env_python(profile: dict) -> str:
    """The interpreter job scripts run inside the image: the prepared environment's."""
    return str(env_dir(profile) / "bin" / "python")


def missing(profile: dict) -> list[str]:
    """What a job of this system still lacks, one line each: the image file, the prepared environment."""
    if image(profile) is None:
        return []
    sif, tag = sif_path(profile), profile.get("tag")
    if not os.path.isfile(sif):
        return [f"image {sif} is not pulled: caraml container pull --system {tag}"]
    if wheels_key(wheel_dir(profile)) is None:
        return [f"no caraml wheel in {wheel_dir(profile)}: caraml container wheels --system {tag}, then caraml "
                f"container prepare --system {tag}"]
    if not is_prepared(env_dir(profile)):
        return [f"the environment for image {sif} is not prepared ({env_dir(profile)}): "
                f"caraml container prepare --system {tag}"]
    return []


def _in_image(profile: dict, binds: list[str], argv: list[str]) -> list[str]:
    return ["apptainer", "exec", "--bind", ",".join(sorted(set(binds))), sif_path(profile), *argv]


def envs_setting(profile: dict) -> str:
    return _setting(profile, "container_envs")


def _wheel_binds(profile: dict) -> list[tuple[str, str]]:
    return [(_setting(profile, "container_wheels"), str(wheel_dir(profile)))]


def project_root() -> Path | None:
    """The source tree caraml is built from (the folder with pyproject.toml); None for an installed caraml."""
    root = Path(__file__).resolve().parents[3]
    return root if (root / "pyproject.toml").is_file() else None


def wheel_commands(profile: dict) -> list[list[str]]:
    """The commands that fill the wheel folder: caraml's own wheel (pure Python), built here; its dependencies
    downloaded by the image's own pip, so that their Python version and platform are the image's."""
    out, root = wheel_dir(profile), project_root()
    if root is None:
        raise BadInput("caraml's source tree (pyproject.toml) is not found beside this caraml; run `caraml container "
                       "wheels` from a source checkout, or put a caraml wheel into " + str(out))
    # a local setuptools builds it offline; without one, pip fetches setuptools for an isolated build
    offline = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    cmds = [[sys.executable, "-m", "pip", "wheel", "--no-deps", *offline, "--wheel-dir", str(out), str(root)]]
    if packages(profile):
        python = _site(profile).get("container_python", "python3")
        cmds.append(_in_image(profile, bind_paths(_wheel_binds(profile)),
                              [python, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(out),
                               *packages(profile)]))
    return cmds


def prepare_commands(profile: dict, env: Path) -> list[list[str]]:
    """venv over the image's python, then caraml (without its torch-level requirements: the image has torch) and the
    small packages, from the wheel folder only. The venv gets no pip of its own (many images lack ensurepip): the
    image's pip, seen through the system site-packages, installs into the venv it runs in."""
    wheels, python = str(wheel_dir(profile)), _site(profile).get("container_python", "python3")
    binds = bind_paths([(envs_setting(profile), str(env.parent)), *_wheel_binds(profile)])
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--no-index", "--find-links", wheels,
           "--disable-pip-version-check", "--quiet"]
    cmds = [_in_image(profile, binds, [python, "-m", "venv", "--system-site-packages", "--without-pip", str(env)]),
            _in_image(profile, binds, [*pip, "--no-deps", "caraml"])]
    if packages(profile):
        cmds.append(_in_image(profile, binds, [*pip, *packages(profile)]))
    return cmds


def _clean_env() -> dict:
    """The host's Python settings stay out of the image: its packages would count as installed there."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    return {**env, "PYTHONNOUSERSITE": "1"}


def require_apptainer() -> None:
    if shutil.which("apptainer") is None:
        raise BadInput("apptainer is not on PATH; install Apptainer (or load its module), or use --print to see "
                       "the commands")


def make_wheels(profile: dict) -> Path:
    out = wheel_dir(profile)
    cmds = wheel_commands(profile)
    if len(cmds) > 1:
        require_apptainer()
    _make_folder(out, _setting(profile, "container_wheels"))
    for cmd in cmds:
        _run(cmd, f"filling the wheel folder {out}")
    return out


def check_preparable(profile: dict) -> str:
    """The image file, when it is pulled and the wheel folder holds caraml (the environment is named after both);
    one line saying which is missing otherwise."""
    sif, tag, wheels = sif_path(profile), profile.get("tag"), wheel_dir(profile)
    if not os.path.isfile(sif):
        raise BadInput(f"image {sif} is not pulled; pull it with `caraml container pull --system {tag}`")
    if wheels_key(wheels) is None:
        raise BadInput(f"no caraml wheel in {wheels}; fill it with `caraml container wheels --system {tag}` "
                       "(on a machine with network access)")
    return sif


def prepare(profile: dict) -> tuple[Path, bool]:
    """Make the image's environment unless it is ready; (its folder, whether it was made now). Concurrent prepares of
    one image wait for each other on a lock file; a half-made environment (no READY file) is made again."""
    sif, wheels = check_preparable(profile), wheel_dir(profile)
    require_apptainer()
    env = env_dir(profile)
    _make_folder(env.parent, envs_setting(profile))
    with open(str(env) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_prepared(env):
            return env, False
        shutil.rmtree(env, ignore_errors=True)
        for cmd in prepare_commands(profile, env):
            _run(cmd, f"preparing {env}")
        stamp = {"image": os.path.realpath(sif), "key": image_key(sif), "packages": packages(profile),
                 "wheels": str(wheels), "caraml_wheels": wheels_key(wheels)}
        (env / READY).write_text(json.dumps(stamp, indent=1) + "\n")
    return env, True


def command_text(cmd: list[str]) -> str:
    """A command as a shell line for people: quoted, and any control character shown as its escape."""
    return printable(" ".join(shlex.quote(w) for w in cmd))


def _run(cmd: list[str], doing: str) -> None:
    print("+ " + command_text(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, env=_clean_env())
    if proc.returncode != 0:
        raise BadInput(f"{doing} failed (exit {proc.returncode}) at: {' '.join(shlex.quote(w) for w in cmd[:8])} ...")
