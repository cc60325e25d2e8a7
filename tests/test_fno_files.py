"""FNO's HDF5 data files and `caraml data fno-synthetic` against hostile input: every bad file or
argument is one line of bad input (exit 2) before training, naming the file, the dataset and what was expected."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import cli, torchrun

h5py = pytest.importorskip("h5py")

from caraml.errors import BadInput  # noqa: E402
from caraml.workloads.fno import files  # noqa: E402
from caraml.workloads.fno.problems import PROBLEMS  # noqa: E402

PIC1D, PIC2D, RBC2D = PROBLEMS["PIC1D"], PROBLEMS["PIC2D"], PROBLEMS["RBC2D"]


def _file(path, problem, n=3, spatial=(50,), dtype="float32", inputs=None, infos=None, fill=1.0):
    """A small file of the problem's layout; `inputs(f)` / `infos(group)` replace or add what a test needs."""
    with h5py.File(path, "w") as f:
        if inputs is None:
            f["inputs"] = np.full((n, problem.in_channels, *spatial), fill).astype(dtype)
        else:
            inputs(f)
        f["outputs"] = np.ones((n, problem.out_channels, *spatial)).astype(dtype)
        group = f.create_group("infos")
        if infos:
            infos(group)
    return path


def _refused(path, problem, *says):
    with pytest.raises(BadInput) as caught:
        files.check(path, problem)
    text = str(caught.value)
    assert "\n" not in text and str(path) in text, text
    for part in says:
        assert part in text, text
    return text


@pytest.mark.parametrize("dtype", ["int32", "complex64", "bool", "int64", "uint8"])
def test_inputs_of_a_dtype_other_than_float_are_refused(tmp_path, dtype):
    path = _file(tmp_path / "f.h5", PIC1D, dtype=dtype)
    _refused(path, PIC1D, f"inputs holds {dtype} values", "expected float32")


def test_outputs_of_another_dtype_are_refused(tmp_path):
    path = tmp_path / "f.h5"
    with h5py.File(path, "w") as f:
        f["inputs"] = np.ones((3, 2, 50), dtype="float32")
        f["outputs"] = np.ones((3, 1, 50), dtype="complex64")
        f.create_group("infos")
    _refused(path, PIC1D, "outputs holds complex64 values", "expected float32")


@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_float64_and_float16_are_converted_to_float32_and_the_record_says_so(tmp_path, dtype):
    path = _file(tmp_path / "f.h5", PIC1D, dtype=dtype, fill=0.5)
    got = files.read(path, PIC1D)
    assert got["inputs"].dtype == np.float32 and got["outputs"].dtype == np.float32
    assert float(got["inputs"][0, 0, 0]) == 0.5
    assert got["file_dtype"] == f"{dtype} (converted to float32)"
    assert "file_dtype" not in files.read(_file(tmp_path / "g.h5", PIC1D), PIC1D)


def test_a_float64_file_trains_and_its_record_names_the_conversion(tmp_path):
    from caraml.runner import RunSpec, build_bench

    path = _file(tmp_path / "r.h5", RBC2D, n=10, spatial=(32, 16), dtype="float64")
    bench = build_bench(RunSpec("fno", {"data": "file", "data_path": str(path), "epochs": 0, "workers": 0},
                                preset="smoke-RBC2D"), device="cpu")  # read here: no worker process to start
    try:
        bench.step()
        x, y = bench.data.next_batch()
        assert str(x.dtype) == str(y.dtype) == "torch.float32"
        assert bench.data.describe()["file_dtype"] == "float64 (converted to float32)"
    finally:
        bench.close()


@pytest.mark.parametrize("domain, says", [(0.0, "infos/domain is 0.0"), (-1.0, "infos/domain is -1.0"),
                                          ("abc", "infos/domain is a string"),
                                          (np.ones(3), "infos/domain is an array of shape [3]"),
                                          (math.nan, "infos/domain is nan"), (math.inf, "infos/domain is inf")])
@pytest.mark.parametrize("problem", [PIC1D, PIC2D], ids=lambda p: p.name)
def test_a_pic_domain_that_is_not_a_positive_number_is_refused(tmp_path, problem, domain, says):
    path = _file(tmp_path / "f.h5", problem, infos=lambda g: g.__setitem__("domain", domain))
    _refused(path, problem, says, "expected a positive finite number")


def test_a_pic_domain_group_is_refused_and_a_good_one_is_read(tmp_path):
    _refused(_file(tmp_path / "f.h5", PIC1D, infos=lambda g: g.create_group("domain")), PIC1D,
             "infos/domain is a group")
    assert files.read(_file(tmp_path / "g.h5", PIC1D, infos=lambda g: g.__setitem__("domain", 3)),
                      PIC1D)["domain"] == 3.0


@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_nan_or_inf_in_a_sample_is_refused(tmp_path, where, value):
    def inputs(f):
        x = np.full((4, 2, 50), 1.0, dtype="float32")
        x[0 if where == "first" else 3, 0, 7] = value
        f["inputs"] = x

    path = _file(tmp_path / "f.h5", PIC1D, n=4, inputs=inputs)
    if where == "first":  # checked before the run starts
        _refused(path, PIC1D, "inputs sample 0 holds 1 NaN or infinite value(s)", "expected finite numbers")
    else:  # checked when read: samples=3 leaves it out
        files.check(path, PIC1D)
        assert files.read(path, PIC1D, samples=3)["inputs"].shape == (3, 2, 50)
        with pytest.raises(BadInput, match=r"inputs sample 3 holds 1 NaN or infinite value\(s\); expected finite"):
            files.read(path, PIC1D)


@pytest.mark.parametrize("problem, spatial, says", [(PIC2D, (0,), "0 particles"), (PIC1D, (0,), "0 particles"),
                                                    (RBC2D, (0, 16), "0 grid points")])
def test_samples_of_no_particles_or_grid_points_are_refused(tmp_path, problem, spatial, says):
    _refused(_file(tmp_path / "f.h5", problem, spatial=spatial), problem, says)


def test_shape_messages_say_any_grid_or_number_of_particles_fits(tmp_path):
    text = _refused(_file(tmp_path / "f.h5", PIC2D, spatial=(32, 16)), RBC2D, "RBC2D needs [N, 4, X, Y]",
                    "any 2D grid")
    assert "256, 64]" not in text
    _refused(_file(tmp_path / "g.h5", PIC2D), PIC1D, "PIC1D needs [N, 2, P]", "any number P >= 1 of particles")


def _links(kind):
    def inputs(f):
        if kind == "external":
            f["inputs"] = h5py.ExternalLink("missing.h5", "/inputs")
        elif kind == "dangling":
            f["inputs"] = h5py.SoftLink("/nowhere")
        else:
            f["inputs"] = h5py.SoftLink("/loop")
            f["loop"] = h5py.SoftLink("/inputs")
    return inputs


@pytest.mark.parametrize("kind, says", [("external", "'inputs' is an external link to missing.h5:/inputs"),
                                        ("dangling", "'inputs' is a soft link to /nowhere"),
                                        ("loop", "'inputs' is a soft link to /loop")])
def test_links_that_cannot_be_followed_are_refused(tmp_path, kind, says):
    _refused(_file(tmp_path / "f.h5", PIC1D, inputs=_links(kind)), PIC1D, says, "cannot be followed")


def test_a_dangling_domain_link_is_refused(tmp_path):
    path = _file(tmp_path / "f.h5", PIC1D, infos=lambda g: g.__setitem__("domain", h5py.SoftLink("/none")))
    _refused(path, PIC1D, "'infos/domain' is a soft link to /none", "cannot be followed")


def _stored(path, samples, particles):
    """A file of zeros whose every sample is stored, compressed: a few bytes a sample on disk, however large its
    shape (each sample's compressed bytes written straight to the file)."""
    import zlib

    with h5py.File(path, "w") as f:
        for name, channels in (("inputs", 2), ("outputs", 1)):
            dataset = f.create_dataset(name, (samples, channels, particles), dtype="float32",
                                       chunks=(1, channels, particles), compression="gzip")
            zeros = zlib.compress(bytes(4 * channels * particles))
            for i in range(samples):
                dataset.id.write_direct_chunk((i, 0, 0), zeros)
        f.create_group("infos")
    return path


def test_a_file_larger_than_the_memory_is_not_read_whole(tmp_path, monkeypatch):
    path = _stored(tmp_path / "large.h5", samples=1000, particles=256)
    monkeypatch.setattr(files, "available_memory", lambda: 100 * 3 * 256 * 4)  # 100 samples
    files.check(path, PIC1D)  # the layout is fine
    with pytest.raises(BadInput, match=r"holds 1000 samples .* read the first ones only with samples=N"):
        files.read(path, PIC1D)
    assert files.read(path, PIC1D, samples=3)["inputs"].shape == (3, 2, 256)


@pytest.mark.subprocess
def test_a_stop_while_a_large_file_is_checked_ends_the_build_at_once(tmp_path):
    """Every sample a run reads is checked for NaN before the run, a block at a time: minutes for a large file,
    which a stop (SLURM's SIGTERM, then SIGKILL 30 s later) ends between two blocks."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from conftest import HANG_S, cli_env, read_stderr_until, wait_until

    path = _stored(tmp_path / "large.h5", samples=20_000, particles=100_000)  # 24 GB of samples, 30 MB on disk
    results = tmp_path / "results"
    proc = subprocess.Popen([sys.executable, "-m", "caraml", "run", "fno", "--preset", "smoke-PIC1D", "data=file",
                             f"data_path={path}", "power=off", "log_interval=1", "--results", str(results), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env())
    seen = read_stderr_until(proc, "caraml: build: still running after")
    proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_until(lambda: list((results / "runs").glob("*.json")), "a record", proc=proc)
    assert time.monotonic() - signalled < 30  # SLURM's default KillWait
    out, err = proc.communicate(timeout=HANG_S)
    record = json.loads(out)
    assert (record["status"], record["error"]) == ("interrupted", "stopped by SIGTERM during build"), seen + err


def _never_written(path, chunked: bool, samples: int, written: int):
    with h5py.File(path, "w") as f:
        for name, channels in (("inputs", 2), ("outputs", 1)):
            dataset = f.create_dataset(name, (samples, channels, 100_000), dtype="float32",
                                       chunks=(1, channels, 100_000) if chunked else None)
            dataset[:written] = 1.0
        f.create_group("infos")
    return path


@pytest.mark.parametrize("chunked, samples, written, says", [
    (True, 10 ** 7, 10, "inputs stores 7.6 MiB of the 7.3 TiB its shape [10000000, 2, 100000] claims (10 of its "
                        "10000000 chunks written)"),
    (False, 3, 0, "inputs stores 0 B of the 2.3 MiB its shape [3, 2, 100000] claims"),
])
def test_a_file_that_stores_far_fewer_samples_than_it_claims_is_refused(tmp_path, chunked, samples, written, says):
    path = _never_written(tmp_path / "claims.h5", chunked, samples, written)
    _refused(path, PIC1D, says, "what was never written reads as zeros; expected a file whose samples are all written")
    proc = cli("run", "fno", "--preset", "smoke-PIC1D", "data=file", f"data_path={path}",
               "--results", tmp_path / "results")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr


def test_a_compressed_file_that_stores_every_sample_is_read(tmp_path):
    path = _stored(tmp_path / "zeros.h5", samples=2000, particles=1000)  # 24 MB of samples in a few hundred KB
    with h5py.File(path) as f:
        assert f["inputs"].id.get_storage_size() < f["inputs"].nbytes / 100
    files.check(path, PIC1D)
    assert files.read(path, PIC1D)["inputs"].shape == (2000, 2, 1000)


def test_each_process_reads_only_its_shard_and_the_memory_check_counts_the_node(tmp_path, monkeypatch):
    path = _stored(tmp_path / "large.h5", samples=1000, particles=256)  # 3 KiB a sample
    with files.DataFile(path, PIC1D) as data:
        monkeypatch.setattr(files, "available_memory", lambda: 100 * data.sample_bytes)
        data.check_fits(80)
        with pytest.raises(BadInput, match=r"the 2 processes on this node would read 160 of them .*samples=80\)"):
            data.check_fits(80, readers=2, world=2)
        x, y = data.rows(10, 14)
        assert x.shape == (4, 2, 256) and y.shape == (4, 1, 256)


def test_a_bad_file_is_one_line_exit_2_before_training(tmp_path):
    path = _file(tmp_path / "f.h5", PIC1D, spatial=(512,), dtype="int32")
    proc = cli("run", "fno", "--preset", "smoke-PIC1D", "data=file", f"data_path={path}",
               "--results", tmp_path / "results")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "inputs holds int32 values" in proc.stderr, proc.stderr


# caraml data fno-synthetic ------------------------------------------------------------------------------------
def _left_in(folder):
    return sorted(p.name for p in folder.rglob("*")) if folder.exists() else []


@pytest.mark.parametrize("args, says", [
    (["PIC1D", "--samples", "99999999999999999999"], "--samples 99999999999999999999: the PIC1D file would take"),
    (["RBC3D", "--samples", "2000000000"], "--samples 2000000000: the RBC3D file would take"),
    (["RBC2D", "--seed", "-1"], "--seed -1: the seed must be a whole number >= 0"),
    (["PIC1D", "--samples", "1"], "--samples 1: the train/validation split needs at least 2 samples"),
])
def test_fno_synthetic_bad_arguments_are_one_line_exit_2_and_leave_nothing(tmp_path, args, says):
    out = tmp_path / "out"
    proc = cli("data", "fno-synthetic", *args, "--out", out)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert _left_in(out) == []


def test_fno_synthetic_never_replaces_an_existing_file_without_overwrite(tmp_path):
    first = cli("data", "fno-synthetic", "PIC1D", "--samples", "3", "--particles", "16", "--out", tmp_path, check=0)
    path = tmp_path / PIC1D.file
    assert first.stdout.strip() == str(path)
    mine = path.read_bytes()
    again = cli("data", "fno-synthetic", "PIC1D", "--samples", "4", "--particles", "16", "--out", tmp_path, check=2)
    assert again.stderr == f"caraml: error: {path} already exists; pass --overwrite to replace it, or give another " \
                           "--out\n", again.stderr
    assert path.read_bytes() == mine and _left_in(tmp_path) == [PIC1D.file]
    cli("data", "fno-synthetic", "PIC1D", "--samples", "4", "--particles", "16", "--out", tmp_path, "--overwrite",
        check=0)
    with h5py.File(path) as f:
        assert f["inputs"].shape[0] == 4


def test_fno_synthetic_size_names_the_free_space_and_what_fits(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_free_space", lambda folder: 10 * files.synthetic_bytes(PIC1D, 1, (64,)))
    with pytest.raises(BadInput, match=r"more than the .* free in .*; use at most --samples 10$"):
        files.write_synthetic(PIC1D, tmp_path, samples=11, spatial=(64,))
    assert files.write_synthetic(PIC1D, tmp_path, samples=10, spatial=(64,)).stat().st_size > 0


@pytest.mark.parametrize("problem, samples", [(PIC1D, 99999999999999999999), (PROBLEMS["RBC3D"], 2_000_000_000)])
def test_a_write_that_fails_anyway_is_bad_input_and_leaves_no_partial_file(tmp_path, monkeypatch, problem, samples):
    # the size check cannot tell (no such check before the fix): the write itself fails
    monkeypatch.setattr(files, "_free_space", lambda folder: None, raising=False)
    with pytest.raises(BadInput, match="cannot write"):
        files.write_synthetic(problem, tmp_path, samples=samples)
    assert _left_in(tmp_path) == []


# messages that say what is required --------------------------------------------------------------------------
@pytest.mark.parametrize("param", ["grid", "modes"])
@pytest.mark.parametrize("value, says", [("0x16", "has a size below 1: every size must be a whole number >= 1"),
                                         ("-3x4", "has a size below 1: every size must be a whole number >= 1"),
                                         ("16x", "is not 'auto' or whole numbers >= 1 joined by x"),
                                         ("abc", "is not 'auto' or whole numbers >= 1 joined by x")])
def test_a_shape_parameter_says_what_is_wrong_with_it(tmp_path, param, value, says):
    proc = cli("run", "fno", "--preset", "smoke-RBC2D", f"{param}={value}", "--results", tmp_path / "results")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert f"{param}={value} {says}" in proc.stderr, proc.stderr


@pytest.mark.parametrize("dataset", ["inputs", "outputs"])
def test_nan_in_a_middle_sample_is_refused_when_the_run_reads_it(tmp_path, dataset):
    from caraml.runner import RunSpec, build_bench

    path = _file(tmp_path / "r.h5", RBC2D, n=10, spatial=(32, 16))
    with h5py.File(path, "r+") as f:
        f[dataset][8, 1, 3, 2] = math.nan  # a validation sample: neither the first nor the last
    files.check(path, RBC2D)  # the cheap check before the run reads only the first and the last samples
    with pytest.raises(BadInput, match=rf"r.h5: {dataset} sample 8 holds 1 NaN or infinite value\(s\)"):
        build_bench(RunSpec("fno", {"data": "file", "data_path": str(path), "epochs": 0}, preset="smoke-RBC2D"),
                    device="cpu")
    with pytest.raises(BadInput, match=rf"{dataset} sample 8 holds 1 NaN"):
        files.read(path, RBC2D)


def test_the_finite_check_looks_at_blocks_of_samples(tmp_path):
    values = np.zeros((200, 2, 3), dtype="float32")
    files.check_finite(values, "x")
    values[130, 1, 2] = math.inf
    with pytest.raises(BadInput, match=r"^x sample 1130 holds 1 NaN"):
        files.check_finite(values, "x", first=1000, block=64)


def test_a_refusal_on_one_rank_refuses_every_rank():
    from caraml.workloads.fno.bench import _on_every_rank

    class Dist:
        def __init__(self, others):
            self.others = others

        def all_reduce(self, value, op="sum"):
            assert op == "max"
            return max(value, self.others)

    assert _on_every_rank(Dist(0.0), lambda: 7) == 7
    with pytest.raises(BadInput, match="refused by another process"):
        _on_every_rank(Dist(1.0), lambda: 7)

    def refuse():
        raise BadInput("mine")

    with pytest.raises(BadInput, match="^mine$"):
        _on_every_rank(Dist(0.0), refuse)


def test_a_file_claiming_samples_of_a_terabyte_is_refused_before_a_sample_is_read(tmp_path):
    path = tmp_path / "wide.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", (3, 2, 10 ** 11), dtype="float32", chunks=(1, 1, 10 ** 6))
        f.create_dataset("outputs", (3, 1, 10 ** 11), dtype="float32", chunks=(1, 1, 10 ** 6))
        f.create_group("infos")
    _refused(path, PIC1D, "holds samples of 1.1 TiB each", "one would not fit in 80% of the")


def test_empty_datasets_are_refused(tmp_path):
    def inputs(f):
        f["inputs"] = h5py.Empty("float32")

    _refused(_file(tmp_path / "f.h5", PIC1D, inputs=inputs), PIC1D, "'inputs' is an empty dataset")


def test_a_data_path_that_is_a_fifo_is_not_said_to_be_missing(tmp_path):
    import os

    fifo = tmp_path / "pipe.h5"
    os.mkfifo(fifo)
    text = _refused(fifo, PIC1D, "is not a regular file (a FIFO, socket or device)")
    assert "does not exist" not in text


@pytest.mark.multiprocess
def test_nan_in_one_ranks_shard_refuses_both_ranks_under_torchrun(tmp_path):

    from conftest import ROOT, cli_env, records_in, run

    path = files.write_synthetic(RBC2D, tmp_path / "data", 20, spatial=(32, 16))
    with h5py.File(path, "r+") as f:
        f["inputs"][12, 0, 0, 0] = math.nan  # 16 train samples: rank 1 trains on 8-15
    results = tmp_path / "results"
    proc = run([*torchrun(), "-m", "caraml", "run", "fno", "--preset", "smoke-RBC2D", "data=file",
                f"data_path={path}", "epochs=0", "--results", str(results)], env=cli_env(OMP_NUM_THREADS=1), cwd=ROOT)
    assert proc.returncode != 0, proc.stderr[-3000:]
    assert "inputs sample 12 holds 1 NaN or infinite value(s)" in proc.stderr, proc.stderr[-3000:]
    assert "refused by another process" in proc.stderr, proc.stderr[-3000:]
    assert not [r for r in (records_in(results) if results.exists() else []) if r["status"] == "ok"]


def test_fno_synthetic_out_with_a_nul_byte_is_one_line_exit_2(tmp_path):
    proc = cli("data", "fno-synthetic", "PIC1D", "--samples", "3", "--out", f"{tmp_path}/a\0b")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "cannot create the folder" in proc.stderr and "embedded null byte" in proc.stderr, proc.stderr


def test_links_that_can_be_followed_are_read(tmp_path):
    target = _file(tmp_path / "target.h5", PIC1D, fill=0.25)

    def inputs(f):
        f["inputs"] = h5py.ExternalLink(str(target), "/inputs")

    path = _file(tmp_path / "linked.h5", PIC1D, inputs=inputs,
                 infos=lambda g: (g.__setitem__("d", 4.0), g.__setitem__("domain", h5py.SoftLink("/infos/d"))))
    got = files.read(path, PIC1D)
    assert float(got["inputs"][0, 0, 0]) == 0.25 and got["domain"] == 4.0


def test_mixed_float_dtypes_are_named_in_the_record(tmp_path):
    path = tmp_path / "mixed.h5"
    with h5py.File(path, "w") as f:
        f["inputs"] = np.ones((3, 2, 50), dtype="float64")
        f["outputs"] = np.ones((3, 1, 50), dtype="float32")
        f.create_group("infos")
    got = files.read(path, PIC1D)
    assert got["file_dtype"] == "inputs float64, outputs float32 (converted to float32)"
    assert got["inputs"].dtype == got["outputs"].dtype == np.float32


def test_a_path_with_a_newline_stays_one_line(tmp_path):
    folder = tmp_path / "two\nlines"
    folder.mkdir()
    path = _file(folder / "f.h5", PIC1D, dtype="int32")
    with pytest.raises(BadInput) as caught:
        files.check(path, PIC1D)
    assert "\n" not in str(caught.value) and "two\\nlines" in str(caught.value)
