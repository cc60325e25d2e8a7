"""The environment manifest: what a reader needs to reproduce a number."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import caraml
from caraml.distributed import node_name

_SLURM_KEYS = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NAME",
               "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_JOB_NUM_NODES", "SLURM_JOB_NODELIST",
               "SLURM_NTASKS", "SLURM_CLUSTER_NAME", "SLURM_CPUS_PER_TASK", "SLURM_NTASKS_PER_NODE",
               "SLURM_JOB_START_TIME", "SLURM_JOB_END_TIME")  # their difference: the job's time limit


def git_commit() -> str | None:
    here = Path(caraml.__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=5)
        if out.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.TimeoutExpired):
        return None


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvml_devices() -> tuple[str | None, list[dict]]:
    try:
        import pynvml
    except ImportError:
        return None, []
    try:
        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no GPU: NVML simply has nothing to say
        return None, []
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        devices = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            entry = {"index": i, "name": pynvml.nvmlDeviceGetName(h), "uuid": pynvml.nvmlDeviceGetUUID(h),
                     "memory_bytes": pynvml.nvmlDeviceGetMemoryInfo(h).total}
            try:
                entry["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000
            except Exception:  # noqa: BLE001 - not every device or driver reports a limit
                pass
            devices.append(entry)
        return (driver.decode() if isinstance(driver, bytes) else driver), devices
    finally:
        pynvml.nvmlShutdown()


def torchvision_version() -> str | None:
    """torchvision's version as it says it (0.29.1+cu130), without importing it where the run did not (an FNO or GPT
    run: 0.2 s, and the whole of dynamo where nothing else imported it). Its version.py is read as text (running it
    imports the package); the installed metadata (no local tag: 0.29.1) where that file says no version."""
    if "torchvision" in sys.modules:  # None there: blocked, as not installed
        return getattr(sys.modules["torchvision"], "__version__", None)
    try:
        spec = importlib.util.find_spec("torchvision")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        text = (Path(next(iter(spec.submodule_search_locations))) / "version.py").read_text()
        found = re.search(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", text, re.MULTILINE)
        if found:
            return found.group(1)
    except OSError:  # not a plain folder (a zipped install)
        pass
    try:
        return importlib.metadata.version("torchvision")
    except importlib.metadata.PackageNotFoundError:
        return None


def collect() -> dict:
    """Versions, devices, driver, host, git commit, SLURM job and container."""
    import torch

    manifest: dict = {
        "caraml": caraml.__version__,
        "git_commit": git_commit(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hostname": node_name(),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
    }
    manifest["torchvision"] = torchvision_version()
    if torch.backends.cudnn.is_available():
        manifest["cudnn"] = torch.backends.cudnn.version()
    if torch.cuda.is_available():
        try:
            manifest["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - a build without NCCL
            manifest["nccl"] = None
        manifest["devices"] = [
            {"index": i, "name": torch.cuda.get_device_name(i),
             "capability": ".".join(map(str, torch.cuda.get_device_capability(i))),
             "memory_bytes": torch.cuda.get_device_properties(i).total_memory}
            for i in range(torch.cuda.device_count())
        ]
        driver, nvml = _nvml_devices()
        manifest["driver"] = driver
        by_uuid = {str(info.get("uuid", "")).removeprefix("GPU-"): info for info in nvml}
        for dev in manifest["devices"]:
            uuid = str(getattr(torch.cuda.get_device_properties(dev["index"]), "uuid", ""))
            info = by_uuid.get(uuid)  # CUDA_VISIBLE_DEVICES and CUDA's ordering differ from NVML's
            if info:
                dev["uuid"] = info["uuid"]
                if "power_limit_w" in info:
                    dev["power_limit_w"] = info["power_limit_w"]
    else:
        manifest["devices"] = []
        manifest["driver"] = None
    manifest["slurm"] = {k: os.environ[k] for k in _SLURM_KEYS if k in os.environ} or None
    image = os.environ.get("APPTAINER_CONTAINER") or os.environ.get("SINGULARITY_CONTAINER")
    manifest["container"] = image
    manifest["env_vars"] = {k: v for k, v in os.environ.items()
                            if k.startswith(("NCCL_", "TORCH_", "CUDA_VISIBLE", "OMP_NUM_THREADS",
                                             "HIP_VISIBLE", "ROCR_VISIBLE", "NVSHMEM_"))}
    return manifest
