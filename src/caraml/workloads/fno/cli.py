"""`caraml data fno-synthetic PROBLEM`: write an HDF5 file of the problem's real shapes (random values) in
CARAML's FNOBenchmark layout, for machines without the data set. `caraml run fno data=file` reads it."""

from __future__ import annotations


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
    p.add_argument("--out", default="fno-data", help="folder to write into (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="random seed, a whole number >= 0 (default: %(default)s)")
    p.set_defaults(func=_fno_synthetic)


def _fno_synthetic(args) -> int:
    from caraml.workloads.fno.files import write_synthetic
    from caraml.workloads.fno.problems import PROBLEMS

    path = write_synthetic(PROBLEMS[args.problem], args.out, args.samples, args.seed)
    print(path)
    return 0
