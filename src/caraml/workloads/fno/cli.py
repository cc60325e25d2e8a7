"""`caraml data fno-synthetic PROBLEM`: write an HDF5 file of the problem's real shapes (random values) in
CARAML's FNOBenchmark layout, for machines without the data set. `caraml run fno data=file` reads it.

`--smoke` writes the shapes of the problem's smoke preset instead (its grid or particles, and enough samples for
its batch size), so that `caraml run fno --preset smoke-PIC1D data=file data_path=DIR` stays as small as the
synthetic smoke run; `--grid` (RBC) and `--particles` (PIC) set the shape by hand (and win over `--smoke`)."""

from __future__ import annotations

import math

from caraml.errors import BadInput, shown


def add_parser(data_subparsers) -> None:
    from caraml.workloads.fno.problems import NAMES

    p = data_subparsers.add_parser(
        "fno-synthetic", help="write a synthetic FNO data file (HDF5, CARAML's layout and shapes)",
        description="Write <out>/<CARAML's file name> with inputs [N, C_in, *grid or particles], outputs "
                    "[N, C_out, ...] and infos, filled with random values (PIC positions uniform in [0, 2 pi)). "
                    "Then: caraml run fno problem=PROBLEM data=file data_path=OUT")
    p.add_argument("problem", choices=NAMES, help="which problem's file")
    p.add_argument("--samples", type=int, default=None,
                   help="samples (timesteps) in the file (default: 2.5 batches, enough for 2 training batches and "
                        "a validation batch after the 80/20 split)")
    p.add_argument("--smoke", action="store_true",
                   help="the shapes of the problem's smoke preset (smoke-PROBLEM): its grid or particles, and 2.5 of "
                        "its batches, for a data=file smoke run as small as the synthetic one")
    p.add_argument("--grid", help="RBC problems: the grid, e.g. 32x16 (default: the problem's, e.g. 256x64)")
    p.add_argument("--particles", type=int, help="PIC problems: particles per sample (default: the problem's "
                                                 "100000)")
    p.add_argument("--out", default="fno-data", help="folder to write into (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace a file of that name already in --out")
    p.add_argument("--seed", type=int, default=0, help="random seed, a whole number >= 0 (default: %(default)s)")
    p.set_defaults(func=_fno_synthetic)


def spatial_of(problem, grid: str | None, particles: int | None, smoke: bool) -> tuple[int, ...] | None:
    """The trailing shape the file is written with: --grid/--particles, else the smoke preset's (--smoke), else
    None (the problem's). Bad input (one line) for an option the problem has no use for."""
    from caraml.workloads.fno import PRESETS
    from caraml.workloads.fno.problems import parse_shape

    gridded = problem.kind == "grid"
    if grid is not None and not gridded:
        raise BadInput(f"--grid: {problem.name} has particles, not a grid; use --particles N")
    if particles is not None and gridded:
        raise BadInput(f"--particles: {problem.name} is on a grid, it has no particles; use --grid, e.g. --grid 32x16")
    if grid is not None:
        try:
            shape = parse_shape(grid, "--grid")
        except ValueError as exc:
            raise BadInput(str(exc).replace("--grid=", "--grid ")) from None
        if len(shape) != problem.dims:
            raise BadInput(f"--grid {shown(grid)} has {len(shape)} sizes; {problem.name} is {problem.dims}D, e.g. "
                           f"--grid {'x'.join(str(max(2, n // 8)) for n in problem.grid)}")
        return shape
    if particles is not None:
        if particles < 1:
            raise BadInput(f"--particles {particles}: a sample needs at least 1 particle (e.g. --particles 512)")
        return (particles,)
    if smoke:
        preset = PRESETS[f"smoke-{problem.name}"]
        return parse_shape(preset["grid"], "grid") if gridded else (int(preset["particles"]),)
    return None


def smoke_samples(problem) -> int:
    """2.5 of the smoke preset's batches: two training batches and a validation batch after the 80/20 split."""
    from caraml.workloads.fno import PRESETS
    from caraml.workloads.fno.problems import TRAIN_FRACTION

    return math.ceil(2 * PRESETS[f"smoke-{problem.name}"]["batch_size"] / TRAIN_FRACTION)


def _fno_synthetic(args) -> int:
    from caraml.workloads.fno.files import write_synthetic
    from caraml.workloads.fno.problems import PROBLEMS

    problem = PROBLEMS[args.problem]
    spatial = spatial_of(problem, args.grid, args.particles, args.smoke)
    samples = args.samples if args.samples is not None else smoke_samples(problem) if args.smoke else None
    path = write_synthetic(problem, args.out, samples, args.seed, spatial=spatial, overwrite=args.overwrite)
    print(path)
    return 0
