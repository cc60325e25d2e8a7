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

Checked before training (bad input, one line, naming the file and the dataset): the layout and shapes (any grid or
number of particles >= 1), links that cannot be followed, the dtypes (float32; float64 and float16 are converted
to float32 and the record's `data.file_dtype` says so; any other is refused), a PIC file's infos/domain (a
positive finite number), finite values in the first sample (and, when a run reads them, in every sample it
reads), and the size: each process reads only its shard of the samples, refused when it would not fit in the
memory available (a file can claim 10^7 samples).

No torch here: `caraml data fno-synthetic` writes files with numpy and h5py alone.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from caraml.errors import BadInput, shown
from caraml.workloads.fno.problems import PROBLEMS, TRAIN_FRACTION, Problem, shape_text

DOMAIN = 2 * math.pi  # PIC positions lie in [0, DOMAIN) unless infos/domain says otherwise


def _h5py():
    try:
        import h5py
    except ImportError:
        raise BadInput("FNO data files need h5py: pip install 'caraml[hdf5]' (or pip install h5py)") from None
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


def synthetic_bytes(problem: Problem, samples: int, spatial: tuple[int, ...]) -> int:
    """The size of a synthetic file's inputs and outputs (float32)."""
    return 4 * samples * (problem.in_channels + problem.out_channels) * math.prod(spatial)


def write_synthetic(problem: Problem, out_dir: str | Path, samples: int | None = None, seed: int = 0,
                    spatial: tuple[int, ...] | None = None, overwrite: bool = False) -> Path:
    """A file of the problem's real shapes filled with random values; returns its path. Bad input (one line, and
    nothing left behind) for fewer than 2 samples, a negative seed, a file larger than the free disk space, or a
    file already there (CARAML's real data has the same name) unless `overwrite`."""
    _h5py()  # a missing h5py is said before anything else
    samples = default_samples(problem) if samples is None else samples
    spatial = tuple(spatial or problem.spatial)
    folder = Path(out_dir).expanduser()
    path = folder / problem.file
    _check_synthetic(problem, folder, path, samples, seed, spatial, overwrite)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the name
        raise BadInput(f"cannot create the folder {shown(folder)}: {getattr(exc, 'strerror', None) or exc}") from None
    tmp = path.with_suffix(".h5.partial")
    done = False
    try:
        _write_h5(problem, tmp, samples, seed, spatial)
        tmp.replace(path)
        done = True
    except (OSError, RuntimeError, ValueError, OverflowError) as exc:  # h5py reports a full disk as any of these
        raise BadInput(f"cannot write {path}: {getattr(exc, 'strerror', None) or _first_line(exc)}") from None
    except MemoryError:  # a limit the checks could not see
        raise BadInput(f"{_shape_option(problem, spatial)}: one {problem.name} sample "
                       f"({_size(sample_memory(problem, spatial))}) does not fit in the memory this process may "
                       f"use; use a smaller {_smaller(problem, spatial, 0.5)}") from None
    finally:
        if not done:
            tmp.unlink(missing_ok=True)
    return path


def _shape_option(problem: Problem, spatial: tuple[int, ...]) -> str:
    return f"--grid {shape_text(spatial)}" if problem.kind == "grid" else f"--particles {spatial[0]}"


def _check_synthetic(problem: Problem, folder: Path, path: Path, samples: int, seed: int, spatial: tuple[int, ...],
                     overwrite: bool) -> None:
    """What refuses a synthetic file before anything is written: its counts, a file in its place, a sample larger
    than the memory, a file larger than the disk's free space."""
    if samples < 2:
        raise BadInput(f"--samples {samples}: the train/validation split needs at least 2 samples")
    if seed < 0:
        raise BadInput(f"--seed {seed}: the seed must be a whole number >= 0")
    if os.path.lexists(path) and not overwrite:  # a link too, even a dangling one
        raise BadInput(f"{shown(path)} already exists; pass --overwrite to replace it, or give another --out")
    shape = _shape_option(problem, spatial)
    memory, room = sample_memory(problem, spatial), available_memory()
    if room is not None and memory > MEMORY_SHARE * room:  # made a sample at a time: one must fit
        raise BadInput(f"{shape}: one {problem.name} sample takes {_size(memory)} of memory to write, more than the "
                       f"{_size(MEMORY_SHARE * room)} it may use ({MEMORY_SHARE:.0%} of the {_size(room)} available); "
                       f"use a smaller {_smaller(problem, spatial, MEMORY_SHARE * room / memory)}")
    size, per_sample = synthetic_bytes(problem, samples, spatial), synthetic_bytes(problem, 1, spatial)
    free = _free_space(folder)
    if free is not None and size > free:
        fit = free // per_sample
        raise BadInput(f"{f'--samples {samples}' if fit >= 2 else shape}: the {problem.name} file would take "
                       f"{_size(size)} ({_size(per_sample)} a sample), more than the {_size(free)} free in {folder}; "
                       + (f"use at most --samples {fit}" if fit >= 2 else
                          f"use a smaller {_smaller(problem, spatial, free / (2 * per_sample))}"))


def _write_h5(problem: Problem, tmp: Path, samples: int, seed: int, spatial: tuple[int, ...]) -> None:
    """The file's samples (one at a time: RBC3D samples are 2.6 MB each) and CARAML's `infos` group."""
    import numpy as np

    h5py = _h5py()
    rng = np.random.default_rng(seed)
    with h5py.File(tmp, "w") as f:
        inputs = f.create_dataset("inputs", (samples, problem.in_channels, *spatial), dtype="float32")
        outputs = f.create_dataset("outputs", (samples, problem.out_channels, *spatial), dtype="float32")
        for i in range(samples):
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


def sample_memory(problem: Problem, spatial: tuple[int, ...]) -> int:
    """Bytes one synthetic sample takes while it is made: its float32 inputs and outputs, and a PIC sample's
    positions drawn as float64."""
    return synthetic_bytes(problem, 1, spatial) + 8 * problem.position_channels * math.prod(spatial)


def _smaller(problem: Problem, spatial: tuple[int, ...], share: float) -> str:
    """The option that makes a sample at most `share` (< 1) of its size: "grid, e.g. --grid 1000x1000" or
    "number of particles, e.g. --particles 5000"."""
    if problem.kind == "grid":
        scale = share ** (1 / len(spatial))
        return "grid, e.g. --grid " + shape_text(max(1, math.floor(n * scale)) for n in spatial)
    return f"number of particles, e.g. --particles {max(1, math.floor(spatial[0] * share))}"


def _free_space(folder: Path) -> int | None:
    """Free bytes on the file system that holds `folder` (or its nearest existing parent); None when unknown."""
    import shutil

    for place in (folder, *folder.absolute().parents):
        if place.exists():
            try:
                return shutil.disk_usage(place).free
            except OSError:
                return None
    return None


def check(path: Path, problem: Problem) -> None:
    """Bad input (one line) unless `path` is an HDF5 file of the problem's layout; reads its first sample only
    (its values must be finite)."""
    with DataFile(path, problem):
        pass


def read(path: Path, problem: Problem, samples: int = 0) -> dict[str, Any]:
    """The file's inputs and outputs as float32 numpy arrays (the first `samples`, 0: all) and what it says of
    itself. A file that is missing, not HDF5, not of the problem's layout or too large for the memory is bad input
    with one line."""
    with DataFile(path, problem) as data:
        n = data.samples if not samples else min(samples, data.samples)
        data.check_fits(n)
        inputs, outputs = data.rows(0, n)
        check_finite(inputs, f"{data.where}: inputs")
        check_finite(outputs, f"{data.where}: outputs")
        return {"inputs": inputs, "outputs": outputs, **data.describe()}


class DataFile:
    """An open data file, its layout, dtypes, PIC domain and first sample checked; `rows` reads a range
    of samples as float32 (float64 and float16 files are converted, and the record says so: `file_dtype`)."""

    def __init__(self, path: Path, problem: Problem):
        self.path, self.problem = path, problem
        self.where = f"fno: data file {shown(path, 1000)}"
        self._f = _open(path, problem)
        try:
            h5py = _h5py()
            self._inputs, self._outputs = self._f["inputs"], self._f["outputs"]
            self.samples = int(self._inputs.shape[0])
            self.spatial = tuple(int(s) for s in self._inputs.shape[2:])
            dtypes = str(self._inputs.dtype), str(self._outputs.dtype)
            self.dtype = dtypes[0] if dtypes[0] == dtypes[1] else f"inputs {dtypes[0]}, outputs {dtypes[1]}"
            self.domain = _domain(self._f["infos"], self.where, h5py) if problem.position_channels else DOMAIN
            self.synthetic = _flag(self._f["infos"], "synthetic", h5py)
            self.sample_bytes = 4 * math.prod(self._inputs.shape[1:]) + 4 * math.prod(self._outputs.shape[1:])
            self.check_fits(1)  # a file can claim samples of terabytes
            for name, dataset in (("inputs", self._inputs), ("outputs", self._outputs)):
                _check_stored(dataset, f"{self.where}: {name}")
            self._check_finite(0)  # the others when a run reads them (samples=N reads the first N only)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> DataFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._f.close()

    def describe(self) -> dict[str, Any]:
        out = {"samples_in_file": self.samples, "spatial": self.spatial, "domain": self.domain,
               "synthetic": self.synthetic}
        if self.dtype != "float32":
            out["file_dtype"] = f"{self.dtype} (converted to float32)"
        return out

    def check_fits(self, count: int, readers: int = 1, world: int = 1) -> None:
        """Bad input when `count` samples (float32) read by each of `readers` processes on this node at once would
        not fit in the memory available now: the run would end in a MemoryError (or be killed) while it reads.
        `world`: the processes that share the samples, for the samples=N that would fit."""
        need, free = count * readers * self.sample_bytes, available_memory()
        if free is None or need <= MEMORY_SHARE * free:
            return
        if self.sample_bytes * readers > MEMORY_SHARE * free:
            raise BadInput(f"{self.where} holds samples of {_size(self.sample_bytes)} each (inputs "
                           f"{list(self._inputs.shape)}, outputs {list(self._outputs.shape)}); "
                           f"{'one' if readers == 1 else f'{readers} of them (one a process)'} would not fit in "
                           f"{MEMORY_SHARE:.0%} of the {_size(free)} of memory available")
        fits = max(2, int(MEMORY_SHARE * free // self.sample_bytes) * world // max(1, readers))
        who = "this process" if readers == 1 else f"the {readers} processes on this node"
        raise BadInput(f"{self.where} holds {self.samples} samples of {_size(self.sample_bytes)} each; {who} would "
                       f"read {count * readers} of them ({_size(need)}), more than {MEMORY_SHARE:.0%} of the "
                       f"{_size(free)} of memory available; read the first ones only with samples=N "
                       f"(e.g. samples={fits})")

    def rows(self, start: int, stop: int):
        """Samples [start, stop) of inputs and outputs, as float32 numpy arrays."""
        try:
            return tuple(self._as_float32(d)[start:stop] for d in (self._inputs, self._outputs))
        except (OSError, RuntimeError, KeyError) as exc:
            raise BadInput(f"{self.where}: samples {start} to {stop - 1} cannot be read ({_first_line(exc)})") \
                from None

    @staticmethod
    def _as_float32(dataset):
        return dataset if dataset.dtype == "float32" else dataset.astype("float32")

    def _check_finite(self, i: int) -> None:
        for name, dataset in (("inputs", self._inputs), ("outputs", self._outputs)):
            try:
                sample = dataset[i:i + 1]
            except (OSError, RuntimeError, KeyError) as exc:
                raise BadInput(f"{self.where}: {name} sample {i} cannot be read ({_first_line(exc)})") from None
            check_finite(sample, f"{self.where}: {name}", first=i)


def _check_stored(dataset, where: str) -> None:
    """Bad input for a dataset that stores less than its shape claims: what was never written reads as zeros (the
    fill value), finite numbers a run would train on, and a check of millions of claimed samples would read them
    all. Counted in chunks where it is chunked, so that compression is never taken for missing samples."""
    if dataset.is_virtual or dataset.external:  # stored in other files: nothing here to count
        return
    claimed = dataset.size * dataset.dtype.itemsize
    try:
        stored = dataset.id.get_storage_size()
        if dataset.chunks is None:
            whole, detail = stored >= claimed, ""
        else:
            total = math.prod(-(-n // c) for n, c in zip(dataset.shape, dataset.chunks))
            written = dataset.id.get_num_chunks()
            whole, detail = written >= total, f" ({written} of its {total} chunks written)"
    except (AttributeError, RuntimeError, OSError, ValueError):  # an h5py without the count: not checked
        return
    if not whole:
        raise BadInput(f"{where} stores {_size(stored)} of the {_size(claimed)} its shape {list(dataset.shape)} "
                       f"claims{detail}; what was never written reads as zeros; expected a file whose samples are "
                       "all written")


def check_finite(values, where: str, first: int = 0, block: int = 64) -> None:
    """Bad input when the samples `values` (numpy, samples first; sample 0 is the file's sample `first`) hold NaN
    or infinite values; looks at `block` samples at a time, so that its scratch memory stays small."""
    import numpy as np

    for start in range(0, len(values), block):
        finite = np.isfinite(values[start:start + block])
        if not finite.all():
            rows = np.flatnonzero(~finite.reshape(finite.shape[0], -1).all(axis=1))
            raise BadInput(f"{where} sample {first + start + int(rows[0])} holds "
                           f"{int(finite[rows[0]].size - np.count_nonzero(finite[rows[0]]))} NaN or infinite "
                           f"value(s); expected finite numbers")


MEMORY_SHARE = 0.8  # a file's samples are read when they fit in this share of the memory available
FLOAT_DTYPES = ("float32", "float64", "float16")  # float32 is read as it is, the others converted to float32


def available_memory() -> int | None:
    """Bytes of memory this process may still take (Linux), or None when unknown: the least of the machine's
    MemAvailable, what its cgroup's limit leaves, and what its address-space limit (`ulimit -v`) leaves."""
    known = [room for room in (_meminfo("MemAvailable", "/proc/meminfo"), _cgroup_room(), _address_space_room())
             if room is not None]
    return max(0, min(known)) if known else None


def _meminfo(key: str, path: str) -> int | None:
    """A `Key: N kB` line of /proc/meminfo or /proc/self/status, in bytes."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(f"{key}:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _cgroup_room() -> int | None:
    """The memory limit of this process's cgroup (v2: memory.max; v1: memory.limit_in_bytes) less its usage."""
    try:
        with open("/proc/self/cgroup") as f:
            entries = [line.rstrip("\n").split(":", 2) for line in f]
    except OSError:
        return None
    for _, controllers, where in (e for e in entries if len(e) == 3):
        base = ("/sys/fs/cgroup" if controllers == "" else "/sys/fs/cgroup/memory" if "memory" in controllers.split(",")
                else None)
        files = ("memory.max", "memory.current") if controllers == "" else ("memory.limit_in_bytes",
                                                                             "memory.usage_in_bytes")
        if base is None:
            continue
        for folder in (Path(base + where), Path(base)):  # in a container the cgroup's own folder is the root
            try:
                limit, used = ((folder / name).read_text().strip() for name in files)
            except OSError:
                continue
            if limit.isdigit() and used.isdigit() and int(limit) < 2 ** 60:  # "max" or v1's huge number: no limit
                return int(limit) - int(used)
            break
    return None


def _address_space_room() -> int | None:
    """What `ulimit -v` (RLIMIT_AS) leaves above the address space this process holds now."""
    import resource

    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    held = _meminfo("VmSize", "/proc/self/status")
    if limit == resource.RLIM_INFINITY or held is None:
        return None
    return limit - held


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def _first_line(exc: BaseException) -> str:
    text = exc.args[0] if exc.args and isinstance(exc.args[0], str) else str(exc)
    return (text.splitlines() or [type(exc).__name__])[0][:160]


def _open(path: Path, problem: Problem):
    """The open file, its layout checked against the problem."""
    h5py = _h5py()
    where = f"fno: data file {shown(path, 1000)}"
    if path.exists() and not path.is_file():
        what = "a folder" if path.is_dir() else "not a regular file (a FIFO, socket or device)"
        raise BadInput(f"{where} is {what}; expected an HDF5 file, e.g. one made with: caraml data fno-synthetic "
                       f"{problem.name} --out DIR")
    if not path.is_file():
        raise BadInput(f"{where} does not exist; make a synthetic one with: caraml data fno-synthetic "
                       f"{problem.name} --out {path.parent}")
    try:
        f = h5py.File(path, "r")
    except OSError as exc:
        raise BadInput(f"{where} is not a readable HDF5 file ({_first_line(exc)[:120]})") from None
    try:
        _check_layout(f, where, problem, h5py)
    except BaseException:
        f.close()
        raise
    return f


def _node(group, name: str, where: str, h5py):
    """group[name], or None when there is no such name; a link that cannot be followed (a dangling soft or
    external link, a loop of links) is bad input."""
    try:
        link = group.get(name, getlink=True)
    except (KeyError, RuntimeError, OSError, ValueError):
        link = None
    if link is None:
        return None
    try:
        return group[name]
    except (KeyError, RuntimeError, OSError, ValueError) as exc:
        if isinstance(link, h5py.ExternalLink):
            target = f"an external link to {link.filename}:{link.path}"
        elif isinstance(link, h5py.SoftLink):
            target = f"a soft link to {link.path}"
        else:
            target = "an object"
        full = f"{group.name.rstrip('/')}/{name}".lstrip("/")
        raise BadInput(f"{where}: '{full}' is {target} that cannot be followed ({_first_line(exc)}); expected the "
                       f"{'group' if name == 'infos' else 'dataset'} itself in the file") from None


def _expected(problem: Problem, channels: int) -> str:
    """The shape a dataset of the problem must have, in words: any grid or number of particles fits."""
    if problem.kind == "grid":
        axes = ", ".join("XYZ"[:problem.dims])
        return (f"[N, {channels}, {axes}] ({channels} channels on any {problem.dims}D grid, CARAML's is "
                f"{shape_text(problem.grid)})")
    return (f"[N, {channels}, P] ({channels} channels of any number P >= 1 of particles, CARAML's is "
            f"{problem.particles})")


def _check_layout(f, where: str, problem: Problem, h5py) -> None:
    nodes = {}
    for name, kind in (("inputs", h5py.Dataset), ("outputs", h5py.Dataset), ("infos", h5py.Group)):
        nodes[name] = _node(f, name, where, h5py)
        if nodes[name] is None:
            raise BadInput(f"{where} has no '{name}'; expected datasets inputs [N, C, ...], outputs [N, C, ...] "
                           f"and a group infos (FNOBenchmark layout); it has: {', '.join(sorted(f)) or 'nothing'}")
        if not isinstance(nodes[name], kind):
            expected = "a dataset [N, C, ...]" if kind is h5py.Dataset else "a group"
            raise BadInput(f"{where}: '{name}' is not {expected}")
    inputs, outputs = nodes["inputs"], nodes["outputs"]
    for name, dataset in (("inputs", inputs), ("outputs", outputs)):
        if dataset.shape is None:  # an empty dataspace (h5py.Empty)
            raise BadInput(f"{where}: '{name}' is an empty dataset (no dataspace); expected a dataset [N, C, ...]")
    rank = 2 + problem.dims if problem.kind == "grid" else 3
    if inputs.ndim != rank or inputs.shape[1] != problem.in_channels:
        raise BadInput(f"{where}: inputs has shape {list(inputs.shape)}; {problem.name} needs "
                       + _expected(problem, problem.in_channels))
    if outputs.ndim != rank or outputs.shape[1] != problem.out_channels or outputs.shape[0] != inputs.shape[0] \
            or outputs.shape[2:] != inputs.shape[2:]:
        raise BadInput(f"{where}: outputs has shape {list(outputs.shape)}; with inputs {list(inputs.shape)} "
                       f"{problem.name} needs [{inputs.shape[0]}, {problem.out_channels}, "
                       f"{', '.join(map(str, inputs.shape[2:]))}]")
    if inputs.shape[0] < 2:
        raise BadInput(f"{where} holds {inputs.shape[0]} sample(s); the train/validation split needs at least 2")
    if min(inputs.shape[2:]) < 1:
        what = "particles" if problem.kind != "grid" else "grid points"
        raise BadInput(f"{where}: inputs has shape {list(inputs.shape)}, samples of 0 {what}; {problem.name} needs "
                       + _expected(problem, problem.in_channels))
    for name, dataset in (("inputs", inputs), ("outputs", outputs)):
        if dataset.dtype.kind != "f" or str(dataset.dtype) not in FLOAT_DTYPES:
            raise BadInput(f"{where}: {name} holds {dataset.dtype} values; expected float32 (float64 and float16 "
                           f"are converted to float32)")


def _domain(info, where: str, h5py) -> float:
    """PIC: infos/domain, the positions' range [0, domain): a positive finite number; 2 pi when absent."""
    import numpy as np

    node = _node(info, "domain", where, h5py)
    if node is None:
        return DOMAIN
    wrong = None
    if not isinstance(node, h5py.Dataset):
        wrong = "a group"
    elif node.shape != ():
        wrong = f"an array of shape {list(node.shape) if node.shape is not None else 'none'}"
    elif node.dtype.kind not in "iuf":
        wrong = f"of type {node.dtype}" if node.dtype.kind != "S" and node.dtype.kind != "O" else "a string"
    else:
        value = float(np.asarray(node[()]))
        if not math.isfinite(value) or value <= 0:
            wrong = shown(value)
        else:
            return value
    raise BadInput(f"{where}: infos/domain is {wrong}; expected a positive finite number (the particle positions "
                   f"lie in [0, domain)), or no infos/domain for 2 pi")


def _flag(info, name: str, h5py) -> bool:
    """A yes/no scalar of infos (e.g. synthetic); False when absent or not a number."""
    try:
        node = info.get(name)
        return isinstance(node, h5py.Dataset) and node.shape == () and node.dtype.kind in "iub" and bool(node[()])
    except (KeyError, RuntimeError, OSError, ValueError, TypeError):
        return False


def describe(problem: Problem, spatial: tuple[int, ...]) -> str:
    return shape_text(spatial) if problem.kind == "grid" else f"{spatial[-1]} particles"


__all__ = ["PROBLEMS", "DataFile", "available_memory", "check", "check_finite", "default_samples", "describe", "read",
           "resolve_path", "write_synthetic"]
