"""The power time series of one node: written as CSV while sampling (so a killed monitor leaves its data),
converted at the end to HDF5 (h5py) or Parquet (pyarrow) when asked."""

from __future__ import annotations

import csv
import os

from caraml.errors import BadInput

FORMATS = ("csv", "hdf5", "parquet")
COLUMNS = ("time_s", "phase", "host", "backend", "device", "uuid", "power_w", "energy_j")
SUFFIX = {"csv": ".csv", "hdf5": ".h5", "parquet": ".parquet"}


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise BadInput(f"time-series format '{fmt}' is not known; choose one of: {', '.join(FORMATS)}")
    module = {"hdf5": "h5py", "parquet": "pyarrow"}.get(fmt)
    if module:
        try:
            __import__(module)
        except ImportError:
            raise BadInput(f"format {fmt} needs the Python package {module}, which is not installed; "
                           "use csv") from None


class CsvSeries:
    def __init__(self, path: str):
        self.path = path
        self.file = open(path, "w", newline="")
        self.writer = csv.writer(self.file)
        self.writer.writerow(COLUMNS)
        self.rows_since_flush = 0

    def write(self, t: float, phase: str, host: str, rows: list[tuple[str, str, str, float | None, float | None]]):
        for backend, name, uuid, power, energy in rows:
            self.writer.writerow((f"{t:.6f}", phase, host, backend, name, uuid,
                                  "" if power is None else f"{power:.4f}", "" if energy is None else f"{energy:.6f}"))
        self.rows_since_flush += 1
        if self.rows_since_flush >= 10:
            self.file.flush()
            self.rows_since_flush = 0

    def close(self) -> None:
        self.file.close()


def read_csv(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def convert(csv_path: str, fmt: str) -> str:
    """The CSV rewritten as `fmt`; returns the new path (the CSV is removed once the copy is written)."""
    if fmt == "csv":
        return csv_path
    rows = read_csv(csv_path)
    columns = {c: [r[c] for r in rows] for c in COLUMNS}
    numeric = {"time_s", "power_w", "energy_j"}
    target = csv_path[: -len(".csv")] + SUFFIX[fmt]
    if fmt == "hdf5":
        import h5py
        import numpy as np

        with h5py.File(target, "w") as f:
            for c in COLUMNS:
                if c in numeric:
                    f[c] = np.array([float(v) if v != "" else np.nan for v in columns[c]], dtype="f8")
                else:
                    f.create_dataset(c, data=columns[c], dtype=h5py.string_dtype())
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: [float(v) if v != "" else None for v in columns[c]] if c in numeric else columns[c]
                          for c in COLUMNS})
        pq.write_table(table, target)
    os.remove(csv_path)
    return target
