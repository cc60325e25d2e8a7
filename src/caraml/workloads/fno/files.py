"""The FNO data files: CARAML's HDF5 data sets (FNOBenchmark layout), read with h5py; synthetic ones written.

Layout (as FNOBenchmark/cfno's `createDataset` writes it):

    inputs    dataset [N, C_in, *spatial]   float32: one sample (timestep) per row
    outputs   dataset [N, C_out, *spatial]  float32: the target of each input
    infos     group of scalars and arrays describing the set (nSamples, nSimu, dtData, xGrid, yGrid, ...)

`spatial` is the grid of the RBC problems ([256, 64], [64, 64, 32]) or the particles of the PIC
problems ([100000]). In the PIC files the first input channels are particle positions in
[0, infos/domain) (one channel for PIC1D, two for PIC2D; domain 2*pi when absent), the others
particle quantities (e.g. velocity); outputs are per-particle fields. Samples are in file order:
CARAML's split takes the first 80 % for training and the rest for validation.

No torch here: `caraml data fno-synthetic` writes files with numpy and h5py alone.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from caraml.errors import BadInput
from caraml.workloads.fno.problems import PROBLEMS, TRAIN_FRACTION, Problem, shape_text

DOMAIN = 2 * math.pi  # PIC positions lie in [0, DOMAIN) unless infos/domain says otherwise


def _h5py():
    try:
        import h5py
    except ImportError:
        raise BadInput("FNO data files need h5py: pip install h5py (caraml's [hdf5] extra)") from None
    return h5py


def default_samples(problem: Problem) -> int:
    """Enough for two training batches and a validation batch after CARAML's 80/20 split, and no more."""
    return math.ceil(2 * problem.batch_size / TRAIN_FRACTION)


def resolve_path(data_path: str, problem: Problem, data_root: str | None) -> Path:
    """data_path (a file, or a folder holding CARAML's file name), else <data_root>/<file name>."""
    if data_path:
        path = Path(data_path).expanduser()
        return path / problem.file if path.is_dir() else path
    if data_root:
        return Path(data_root).expanduser() / problem.file
    raise BadInput(f"fno: data=file needs data_path=FILE_OR_FOLDER or CARAML_DATA (a folder holding {problem.file}); "
                   f"make a synthetic one with: caraml data fno-synthetic {problem.name} --out DIR")


def write_synthetic(problem: Problem, out_dir: str | Path, samples: int | None = None, seed: int = 0,
                    spatial: tuple[int, ...] | None = None) -> Path:
    """A file of the problem's real shapes filled with random values; returns its path."""
    import numpy as np

    h5py = _h5py()

    samples = samples or default_samples(problem)
    spatial = tuple(spatial or problem.spatial)
    folder = Path(out_dir).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInput(f"cannot create the folder {folder}: {exc.strerror}") from None
    path = folder / problem.file
    rng = np.random.default_rng(seed)
    tmp = path.with_suffix(".h5.partial")
    try:
        with h5py.File(tmp, "w") as f:
            inputs = f.create_dataset("inputs", (samples, problem.in_channels, *spatial), dtype="float32")
            outputs = f.create_dataset("outputs", (samples, problem.out_channels, *spatial), dtype="float32")
            for i in range(samples):  # a sample at a time: RBC3D samples are 2.6 MB each
                x = rng.standard_normal((problem.in_channels, *spatial), dtype=np.float32)
                if problem.position_channels:
                    x[:problem.position_channels] = rng.uniform(0, DOMAIN, (problem.position_channels, *spatial))
                inputs[i] = x
                outputs[i] = rng.standard_normal((problem.out_channels, *spatial), dtype=np.float32)
            info = f.create_group("infos")
            info["problem"] = problem.name
            info["synthetic"] = 1
            info["nSamples"] = samples
            info["nSimu"] = 1
            info["inSize"], info["outStep"], info["inStep"] = 1, 1, 1
            if problem.kind == "grid":
                for axis, n in zip("xyz", spatial):
                    info[f"{axis}Grid"] = np.linspace(0.0, 1.0, n, endpoint=False)
            else:
                info["particles"] = spatial[-1]
                info["domain"] = DOMAIN
        tmp.replace(path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def check(path: Path, problem: Problem) -> None:
    """Bad input (one line) unless `path` is an HDF5 file of the problem's layout; reads no data."""
    with _open(path, problem):
        pass


def read(path: Path, problem: Problem, samples: int = 0) -> dict[str, Any]:
    """The file's inputs and outputs as numpy arrays (the first `samples`, 0: all) and what it says of itself.
    A file that is missing, not HDF5 or not of the problem's layout is bad input with one line."""
    with _open(path, problem) as f:
        inputs, outputs, info = f["inputs"], f["outputs"], f["infos"]
        n = inputs.shape[0] if not samples else min(samples, inputs.shape[0])
        domain = float(info["domain"][()]) if "domain" in info else DOMAIN
        return {"inputs": inputs[:n], "outputs": outputs[:n], "samples_in_file": int(inputs.shape[0]),
                "spatial": tuple(int(s) for s in inputs.shape[2:]), "domain": domain,
                "synthetic": bool(info["synthetic"][()]) if "synthetic" in info else False}


def _open(path: Path, problem: Problem):
    """The open file, its layout checked against the problem."""
    h5py = _h5py()
    where = f"fno: data file {path}"
    if not path.is_file():
        raise BadInput(f"{where} does not exist; make a synthetic one with: caraml data fno-synthetic "
                       f"{problem.name} --out {path.parent}")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise BadInput(f"{where} is not a readable HDF5 file ({str(exc).splitlines()[0][:120]})") from None
    try:
        _check_layout(f, where, problem, h5py)
    except BaseException:
        f.close()
        raise
    return f


def _check_layout(f, where: str, problem: Problem, h5py) -> None:
    for name, kind in (("inputs", h5py.Dataset), ("outputs", h5py.Dataset), ("infos", h5py.Group)):
        if name not in f:
            raise BadInput(f"{where} has no '{name}'; expected datasets inputs [N, C, ...], outputs [N, C, ...] "
                           f"and a group infos (FNOBenchmark layout); it has: {', '.join(sorted(f)) or 'nothing'}")
        if not isinstance(f[name], kind):
            expected = "a dataset [N, C, ...]" if kind is h5py.Dataset else "a group"
            raise BadInput(f"{where}: '{name}' is not {expected}")
    inputs, outputs = f["inputs"], f["outputs"]
    rank = 2 + problem.dims if problem.kind == "grid" else 3
    expected = f"[N, {problem.in_channels}, {', '.join(map(str, problem.spatial))}]"
    if inputs.ndim != rank or inputs.shape[1] != problem.in_channels:
        raise BadInput(f"{where}: inputs has shape {list(inputs.shape)}; {problem.name} needs {expected}")
    if outputs.ndim != rank or outputs.shape[1] != problem.out_channels or outputs.shape[0] != inputs.shape[0] \
            or outputs.shape[2:] != inputs.shape[2:]:
        raise BadInput(f"{where}: outputs has shape {list(outputs.shape)}; with inputs {list(inputs.shape)} "
                       f"{problem.name} needs [{inputs.shape[0]}, {problem.out_channels}, "
                       f"{', '.join(map(str, inputs.shape[2:]))}]")
    if inputs.shape[0] < 2:
        raise BadInput(f"{where} holds {inputs.shape[0]} sample(s); the train/validation split needs at least 2")


def describe(problem: Problem, spatial: tuple[int, ...]) -> str:
    return shape_text(spatial) if problem.kind == "grid" else f"{spatial[-1]} particles"


__all__ = ["PROBLEMS", "check", "default_samples", "describe", "read", "resolve_path", "write_synthetic"]
