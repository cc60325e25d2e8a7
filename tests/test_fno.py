"""fno: smoke runs of every problem through the CLI, the spectral transforms against direct DFTs, the FLOP
convention, HDF5 data files, DDP on two CPU processes, the suite against CARAML's table, the typed config,
the precision parameter (formerly amp) and CARAML's epochs as a stoppable phase after the steady-state window.

The CLI runs are mostly interpreter and torch start-up, so the module starts them all at once (four at a
time) in one fixture and the tests read their results; a run that hangs fails only the tests that read it.
"""

from __future__ import annotations

import json
import math
import queue
import signal
import subprocess
import sys
import threading
import time

import handmade
import pytest
import torch
from conftest import ROOT, caraml, cli_env, describe_tree, kill_tree, records_in, run_all, torchrun

PROBLEMS = ("PIC1D", "PIC2D", "RBC2D", "RBC3D")
# CARAML's FNO table (CARAML-FACTS.md): in/out channels, width, modes, layers, batch size
CARAML_TABLE = {
    "PIC1D": ((2, 1), 32, "16", 4, 20),
    "PIC2D": ((3, 2), 32, "16x16", 4, 8),
    "RBC2D": ((4, 4), 16, "12x12", 2, 20),
    "RBC3D": ((5, 5), 25, "12x12x6", 2, 20),
}
CARAML_INPUT_SHAPES = {"PIC1D": [20, 2, 100000], "PIC2D": [8, 3, 100000], "RBC2D": [20, 4, 256, 64],
                       "RBC3D": [20, 5, 64, 64, 32]}
PARALLEL = 4


def _cli(*args) -> list[str]:
    return [sys.executable, "-m", "caraml", *map(str, args)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    base = tmp_path_factory.mktemp("fno")
    results, data = base / "results", base / "data"
    caraml("data", "fno-synthetic", "RBC2D", "--samples", "10", "--out", data, check=0)
    bad = base / "bad.h5"
    import h5py

    with h5py.File(bad, "w") as f:  # outputs missing, inputs a group
        f.create_group("inputs")
        f.create_group("infos")
    commands = {f"{problem}-{mode}": _cli("run", "fno", "--preset", f"smoke-{problem}", f"mode={mode}", "--results",
                                         results, "--json")
                for problem in PROBLEMS for mode in ("train", "eval")}
    commands["file"] = _cli("run", "fno", "--preset", "smoke-RBC2D", "data=file", f"data_path={data}", "--results",
                            results, "--json")
    commands["malformed"] = _cli("run", "fno", "--preset", "smoke-RBC2D", "data=file", f"data_path={bad}",
                                 "--results", results, "--json")
    commands["host"] = _cli("run", "fno", "--preset", "smoke-PIC2D", "data=synthetic-host", "--results", results,
                            "--json")
    commands["ddp"] = [*torchrun(), "-m", "caraml", "run", "fno", "--preset", "smoke-PIC1D", "--results",
                       str(base / "ddp"), "--json"]
    # CARAML's global batch (8: 4 a rank) through its loaders with a DistributedSampler
    commands["ddp-host"] = [*torchrun(), "-m", "caraml", "run", "fno", "--preset", "smoke-RBC2D", "batch_size=0",
                            "global_batch_size=8", "data=synthetic-host", "--results", str(base / "ddp"), "--json"]
    # each run bounded on its own: one that hangs fails the tests that read it, not the module
    return run_all(commands, PARALLEL, env=cli_env(OMP_NUM_THREADS=1), cwd=ROOT)


def _record(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stderr[-3000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, f"stdout must hold exactly one JSON record, got:\n{proc.stdout}"
    return json.loads(lines[0])


# runs through the CLI -----------------------------------------------------------------------------------
@pytest.mark.multiprocess
@pytest.mark.parametrize("problem", PROBLEMS)
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_smoke_run_of_every_problem(runs, problem, mode):
    record = _record(runs[f"{problem}-{mode}"])
    m = record["metrics"]
    assert record["status"] == "ok", record["error"]
    assert record["params"]["problem"] == problem and record["params"]["mode"] == mode
    assert record["params"]["precision"] == "fp32" and "amp" not in record["params"]
    assert m["throughput"]["unit"] == "timesteps/s" and m["throughput"]["value"] > 0
    assert m["throughput"]["value"] == pytest.approx(4 * m["measured_steps"] / m["measured_time_s"], rel=1e-6)
    assert m["flops_per_unit"] > 0 and m["tflops_per_device"] > 0
    assert m["flops"]["fft_per_sample"] > 0 if problem != "PIC1D" else m["flops"]["fft_per_sample"] == 0
    assert m["model_params"] > 0 and m["model_size_mb"] == pytest.approx(m["model_params"] * 4 / 1e6)
    (cin, cout), *_ = CARAML_TABLE[problem]
    assert m["settings"]["in_channels"] == cin and m["settings"]["out_channels"] == cout
    assert m["input_shape"].startswith(f"[4,{cin},")
    if mode == "train":
        epochs = m["epochs"]
        assert epochs["epochs"] == 2 and epochs["counted_epochs"] == 1 and epochs["first_epoch_left_out"]
        assert not epochs["stopped"]
        assert m["train_throughput"]["value"] > 0 and m["caraml_timesteps_per_s"] > 0
        assert m["caraml_timesteps_per_s"] == pytest.approx(
            (epochs["train_samples_per_epoch"] + epochs["val_samples_per_epoch"])
            / (epochs["train_time_s"][1] + epochs["val_time_s"][1]))
        assert math.isfinite(epochs["last_train_loss"]) and math.isfinite(epochs["last_val_loss"])
        assert "flops_convention" in m and "forward+backward" in m["flops_convention"]
    else:
        assert "epochs" not in m and "train_throughput" not in m
        assert "forward pass (inference)" in m["flops_convention"]


@pytest.mark.multiprocess
def test_ddp_two_gloo_processes(runs):
    record = _record(runs["ddp"])
    m = record["metrics"]
    assert record["status"] == "ok" and record["launch"]["world_size"] == 2 and record["launch"]["backend"] == "gloo"
    assert m["dp"] == 2 and m["global_batch_size"] == 8
    assert m["units"] == 2 * 4 * m["measured_steps"]  # both replicas' timesteps
    assert m["epochs"]["train_samples_per_epoch"] == 2 * 16  # each rank its own 4 training batches of 4


@pytest.mark.multiprocess
def test_hdf5_round_trip_through_fno_synthetic(runs):
    record = _record(runs["file"])
    m = record["metrics"]
    assert record["status"] == "ok", record["error"]
    assert m["data"]["source"] == "file" and m["data"]["samples_in_file"] == 10 and m["data"]["synthetic_file"]
    assert m["data_source"] == "file" and m["data"]["path_taken"].startswith("host DataLoader")
    assert (m["data"]["train_samples"], m["data"]["val_samples"]) == (8, 2)  # CARAML's 80/20 split
    assert m["timesteps"] == 10 and m["train_timesteps"] == 8  # one counted epoch of the whole file
    assert m["grid"] == "256x64" and m["input_shape"] == "[4,4,256,64]"  # the file's grid, not the preset's


@pytest.mark.multiprocess
def test_bad_data_file_is_one_line_exit_2(runs):
    proc = runs["malformed"]  # missing, not HDF5 and other shapes: test_data_files_layout_and_bad_files
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.strip().splitlines() if line.startswith("caraml")]
    assert len(lines) == 1 and "'inputs' is not a dataset" in lines[0] and "Traceback" not in proc.stderr


@pytest.mark.multiprocess
def test_host_loader_path(runs):
    record = _record(runs["host"])
    m = record["metrics"]
    assert record["status"] == "ok", record["error"]
    assert m["data_source"] == "synthetic-host" and m["data"]["workers"] == 1 and not m["data"]["pinned_memory"]
    assert (m["data"]["train_samples"], m["data"]["val_samples"]) == (16, 4)  # 5 global batches, split 80/20
    assert m["caraml_timesteps_per_s"] == pytest.approx(m["timesteps"] / m["total_compute_time_s"])


@pytest.mark.multiprocess
def test_ddp_global_batch_through_distributed_loaders(runs):
    record = _record(runs["ddp-host"])
    m = record["metrics"]
    assert record["status"] == "ok", record["error"]
    assert record["params"]["global_batch_size"] == 8 and m["global_batch_size"] == 8 and m["dp"] == 2
    assert m["data"]["batch_per_device"] == 4 and "DistributedSampler" in m["data"]["shuffle"]
    assert m["units"] == 8 * m["measured_steps"]
    assert m["epochs"]["train_samples_per_epoch"] == 32  # the data set's, as CARAML counts (5 x 8, 80 %)


def _config(**given):
    from caraml.params import resolve
    from caraml.workloads.fno import WORKLOAD

    return WORKLOAD.config_of(resolve(WORKLOAD.params, given, "fno"))


def test_presets_and_settings_follow_caraml_table():
    from caraml.workloads.fno import PRESETS
    from caraml.workloads.fno.problems import PROBLEMS as TABLE

    for problem, ((cin, cout), width, modes, layers, batch) in CARAML_TABLE.items():
        auto = _config(problem=problem)  # every 0/auto: the problem's value
        preset = PRESETS[problem]
        assert (auto.width, auto.modes, auto.layers, auto.batch_size) == (
            width, modes, layers, batch)
        assert auto.problem_spec is TABLE[problem] and auto.lr == TABLE[problem].lr
        assert (preset["width"], preset["modes"], preset["layers"], preset["batch_size"]) == (width, modes, layers,
                                                                                              batch)
        pb = TABLE[problem]
        assert (pb.in_channels, pb.out_channels) == (cin, cout)
        assert list(pb.input_shape) == CARAML_INPUT_SHAPES[problem]


def test_precision_is_the_parameter_and_amp_its_former_name():
    from caraml.errors import BadInput
    from caraml.runner import RunSpec, resolve

    def resolved(**given):
        return resolve(RunSpec("fno", given, preset="smoke-RBC2D"))

    assert resolved().config.precision == "fp32"
    for given, precision in (({"amp": "off"}, "fp32"), ({"amp": "fp16"}, "fp16"), ({"precision": "bf16"}, "bf16")):
        run = resolved(**given)
        assert run.config.precision == precision and run.values["precision"] == precision and "amp" not in run.values
    with pytest.raises(BadInput,
                       match="precision=tf32 is not valid; did you mean fp32\\? choose one of: fp32, fp16, bf16"):
        resolved(precision="tf32")
    with pytest.raises(BadInput, match="modes=12 has 1 sizes; RBC2D is 2D, e.g. modes=12x12"):
        resolved(modes="12")  # refused while the config is made, before any device is touched
    with pytest.raises(BadInput, match="RBC2D with modes=12x12: modes 12 in grid dim 0 need at least 24 points"):
        resolved(modes="12x12", grid="16x16")


def test_precision_column_shows_older_records_amp():
    """Records written before the rename carry amp=off|fp16|bf16; the column reads them through Param.aliases and
    value_aliases, as today's precision."""
    from caraml.results.aggregate import group
    from caraml.results.columns import columns_for, find

    old_off = handmade.fno("H100", "RBC2D", 1, 20, "off", "default", 100.0)  # handmade records carry amp
    old_fp16 = handmade.fno("H100", "RBC3D", 1, 20, "fp16", "default", 100.0)
    new = handmade.record("fno", "H100", {"problem": "PIC1D", "precision": "bf16"}, 100.0)
    column = find(columns_for("fno"), "precision")
    assert column.header == "MixedPrecision" and column.param == "precision"
    assert [column.get(p) for p in group([old_off, old_fp16, new])] == ["fp32", "fp16", "bf16"]


def _smoke_bench(**params):
    from caraml.runner import RunSpec, build_bench

    return build_bench(RunSpec("fno", params, preset="smoke-RBC2D"), device="cpu")


def _stop_after(calls: int):
    asked = []

    def should_stop():
        asked.append(1)
        return len(asked) > calls

    return should_stop, asked


def test_epochs_are_the_extra_phase_and_stop_at_a_step():
    bench = _smoke_bench(epochs=3)
    assert bench.extra_phase == "caraml-epochs" and bench.epochs is None  # nothing of them ran in build
    steps_per_epoch = len(bench.data.train_batches) + 1  # 4 training batches, 1 validation batch
    should_stop, asked = _stop_after(10**9)
    bench.run_extra(should_stop)
    assert len(asked) == 3 * steps_per_epoch  # once per step
    assert bench.epochs["epochs"] == 3 and not bench.epochs["stopped"] and bench.epochs["caraml_timesteps_per_s"] > 0
    should_stop, asked = _stop_after(steps_per_epoch + 2)  # in the second epoch's training
    bench.run_extra(should_stop)
    assert len(asked) == steps_per_epoch + 3  # it stopped at the step that was told to
    e = bench.epochs
    assert e["stopped"] and e["epochs"] == 1 and e["counted_epochs"] == 1 and not e["first_epoch_left_out"]
    assert e["caraml_timesteps_per_s"] > 0 and math.isfinite(e["last_train_loss"])
    bench.close()


def test_compile_report_asks_to_stop_at_every_iteration():
    bench = _smoke_bench(mode="eval", compile_report="on")
    assert bench.extra_phase == "caraml-compile-report"
    should_stop, asked = _stop_after(5)  # eager's 5 iterations, then stop before the first compiled one
    bench.run_extra(should_stop)
    report = bench.compile_report
    assert len(asked) == 6 and report["stopped"] and [r["mode"] for r in report["rows"]] == ["eager"]
    assert len(report["rows"][0]["times_s"]) == 5 and report["precision"] == "fp32"
    bench.close()


def test_compile_report_rows_time_iterations_3_to_5_and_speed_up_over_eager():
    """Iterations timed by a fake (torch.compile is lazy: nothing compiles): eager 4 s, each mode 1 s after a
    slow first call, so every compiled row is 4x eager and the mean leaves the first two iterations out."""
    from caraml.kit.compile import COMPILE_MODES

    bench = _smoke_bench(mode="eval", compile_report="on")
    timed = {False: [9.0, 8.0, 3.0, 4.0, 5.0], True: [60.0, 7.0, 0.5, 1.0, 1.5]}
    calls = {False: 0, True: 0}

    def iteration(fn, x, compiled):
        calls[compiled] += 1
        return timed[compiled][(calls[compiled] - 1) % 5]

    bench._report_iteration = iteration
    bench.run_extra(lambda: False)
    rows = bench.compile_report["rows"]
    assert [r["mode"] for r in rows] == ["eager", *COMPILE_MODES]
    assert rows[0]["time_s"] == pytest.approx(4.0) and rows[0]["first_s"] == 9.0 and rows[0]["speedup"] == 1.0
    for row in rows[1:]:
        assert row["time_s"] == pytest.approx(1.0) and row["first_s"] == 60.0
        assert row["speedup"] == pytest.approx(4.0)  # eager's time over the mode's: faster is above 1
    bench.close()


class _Stderr:
    """A run's stderr, read on a thread, so that a test waits for a line (an event) with a deadline."""

    def __init__(self, proc):
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, args=(proc.stderr,), daemon=True).start()

    def _read(self, stream) -> None:
        for line in stream:
            self.seen.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                return False
            if line is None:  # the run ended
                return False
            if text in line:
                return True
        return False

    def text(self) -> str:
        return "".join(self.seen)[-3000:]


def _interrupted_in_the_epochs(cmd, results) -> dict:
    """Start `cmd`, SIGTERM it once CARAML's epochs have begun; its record must come within a minute (generous:
    the stop is checked at every step of a few milliseconds)."""
    proc = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=cli_env(OMP_NUM_THREADS=1), cwd=ROOT)
    stderr = _Stderr(proc)
    try:
        assert stderr.wait_for("caraml: caraml-epochs", timeout=300), stderr.text()
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"no exit within 60 s of SIGTERM; its processes:\n{describe_tree(proc)}\n"
                        f"its stderr:\n{stderr.text()}")
    finally:
        if proc.poll() is None:
            kill_tree(proc)
    assert proc.returncode != 0, stderr.text()
    [record] = [r for r in records_in(results) if "-rank" not in r["run_id"]]  # rank 0's
    assert record["status"] == "interrupted", record["error"]
    assert record["error"].startswith("stopped by SIGTERM during caraml-epochs"), record["error"]
    m = record["metrics"]  # the steady-state figures, measured before the epochs, are kept
    assert m["measured_steps"] == 5 and m["throughput"]["value"] > 0 and m["warmup"]["steps"] == 2
    return record


@pytest.mark.subprocess
def test_sigterm_during_the_epochs_leaves_an_interrupted_record(tmp_path):
    results = tmp_path / "results"
    record = _interrupted_in_the_epochs(
        _cli("run", "fno", "--preset", "smoke-RBC2D", "epochs=100000", "power=off", "--results", results, "--json"),
        results)
    assert record["params"]["epochs"] == 100000


@pytest.mark.multiprocess
def test_sigterm_to_torchrun_during_the_epochs_leaves_an_interrupted_record(tmp_path):
    results = tmp_path / "results"
    record = _interrupted_in_the_epochs(
        [*torchrun(), "-m", "caraml", "run", "fno", "--preset", "smoke-PIC1D", "epochs=100000", "power=off",
         "--results", results, "--json"], results)
    assert record["launch"]["world_size"] == 2 and record["metrics"]["units"] == 2 * 4 * 5  # both ranks' steps


# the transforms against direct sums ---------------------------------------------------------------------
def _spectral_pair(cin, cout, modes):
    from caraml.workloads.fno.model import GridFFT, SpectralWeights

    t = GridFFT(modes)
    complex_w = SpectralWeights(cin, cout, t.block, complex_weights=True)
    real_w = SpectralWeights(cin, cout, t.block)
    real_w.weight.data = torch.view_as_real(complex_w.weight.data).clone()  # the same numbers, stored as pairs
    return t, complex_w.double(), real_w.double()


@pytest.mark.parametrize("grid, modes", [((16, 10), (3, 4)), ((8, 8, 6), (2, 3, 2))])
def test_spectral_conv_matches_direct_dft(grid, modes):
    torch.manual_seed(0)
    b, cin, cout = 2, 3, 4
    t, complex_w, real_w = _spectral_pair(cin, cout, modes)
    x = torch.randn(b, cin, *grid, dtype=torch.float64)
    y_real = t.inverse(real_w(t(x, None, False)), None, grid)
    y_complex = t.inverse(complex_w(t(x, None, True)), None, grid)
    assert torch.allclose(y_real, y_complex, atol=1e-12)
    # direct DFT: sum over the kept modes k of c_k Re(W^T X_k e^{i k.n}) / N, X_k = sum_n x_n e^{-i k.n}
    w = complex_w.weight.data.to(torch.complex128)
    axes = [torch.arange(n, dtype=torch.float64) for n in grid]
    kept = [list(range(m)) + list(range(-m, 0)) for m in modes[:-1]] + [list(range(modes[-1]))]
    reference = torch.zeros(b, cout, *grid, dtype=torch.float64)
    import itertools

    for index in itertools.product(*(range(len(k)) for k in kept)):
        ks = [k[i] for k, i in zip(kept, index)]
        phase = sum(k * a.reshape([-1 if d == j else 1 for j in range(len(grid))]) / n
                    for d, (k, a, n) in enumerate(zip(ks, axes, grid)))
        basis = torch.exp(-2j * math.pi * phase)
        coeff = (x.to(torch.complex128) * basis).sum(tuple(range(2, 2 + len(grid))))
        mixed = torch.einsum("bi,io->bo", coeff, w[(slice(None), slice(None), *index)])
        weight = 1 if ks[-1] == 0 else 2  # the rfft half spectrum stands for its mirror image too
        reference += weight * (mixed[(..., *([None] * len(grid)))] * basis.conj()).real / math.prod(grid)
    assert torch.allclose(y_real, reference, atol=1e-12)


def test_dse_matches_dense_dft_and_rfft_on_a_uniform_grid():
    from caraml.workloads.fno.model import DSE

    torch.manual_seed(0)
    b, c, p, m = 2, 3, 64, 5
    dse = DSE((m,))
    f = torch.randn(b, c, p)
    # non-uniform particles: the forward transform is sum_j f_j exp(-i k x_j)
    pos = 2 * math.pi * torch.rand(b, 1, p)
    spec = dse(f, dse.prepare(torch.cat([pos, f], 1)), True)
    k = torch.arange(m, dtype=torch.float64)
    dense = torch.einsum("bcp,bkp->bck", f.double().to(torch.complex128),
                         torch.exp(-1j * k[None, :, None] * pos.double()))
    assert torch.allclose(spec.to(torch.complex128), dense, rtol=1e-4, atol=1e-4)
    # at the grid points 2 pi j / P: rfft, and the inverse is irfft of the truncated spectrum
    grid = (2 * math.pi * torch.arange(p) / p).expand(b, 1, p)
    basis = dse.prepare(torch.cat([grid, f], 1))
    spec = dse(f, basis, True)
    assert torch.allclose(spec, torch.fft.rfft(f)[..., :m], atol=1e-4)
    back = dse.inverse(spec, basis, (p,))
    assert torch.allclose(back, torch.fft.irfft(torch.fft.rfft(f)[..., :m], n=p), atol=1e-5)


def test_nufft_matches_dense_dft_and_its_adjoint():
    from caraml.workloads.fno.model import NUFFT2d

    torch.manual_seed(0)
    b, c, p, (m1, m2) = 2, 3, 400, (4, 5)
    nufft = NUFFT2d((m1, m2))
    pos = 2 * math.pi * torch.rand(b, 2, p)
    f = torch.randn(b, c, p)
    basis = nufft.prepare(torch.cat([pos, f], 1))
    k1 = torch.tensor(list(range(m1)) + list(range(-m1, 0)), dtype=torch.float64)
    k2 = torch.arange(m2, dtype=torch.float64)
    phase = k1[:, None, None] * pos[:, None, None, 0].double() + k2[None, :, None] * pos[:, None, None, 1].double()
    e = torch.exp(-1j * phase)  # [B, 2 m1, m2, P]
    dense = torch.einsum("bcp,bklp->bckl", f.double().to(torch.complex128), e)
    spec = nufft(f, basis, True).to(torch.complex128)
    assert ((spec - dense).abs().max() / dense.abs().max()).item() < 3e-3
    y = torch.randn(b, c, 2 * m1, m2, dtype=torch.complex64)
    weight = torch.ones(m2, dtype=torch.float64)
    weight[1:] = 2
    adjoint = torch.einsum("bckl,bklp->bcp", y.to(torch.complex128) * weight, e.conj()).real / p
    back = nufft.inverse(y, basis, (p,)).double()
    assert ((back - adjoint).abs().max() / adjoint.abs().max()).item() < 3e-3


@pytest.mark.parametrize("kind, modes, spatial", [("grid", (4, 3), (16, 8)), ("dse", (5,), (300,)),
                                                  ("nufft", (4, 4), (300,))])
def test_orthonormal_scaling_for_fp16_spectra_is_the_same_operator(kind, modes, spatial):
    from caraml.workloads.fno.model import FNO

    torch.manual_seed(0)
    model = FNO(3, 2, 6, modes, 2, kind=kind).double()
    x = torch.randn(2, 3, *spatial, dtype=torch.float64)
    if kind != "grid":
        x[:, :2] = 2 * math.pi * torch.rand(2, 2, *spatial, dtype=torch.float64)
    plain = model(x)
    model.transform.norm = "ortho"  # what complex_mixed_precision=on uses, here in fp64
    assert torch.allclose(model(x), plain, rtol=1e-4, atol=1e-6)


def _complex_ops_in_compiled_graphs(complex_weights: bool) -> list[set[str]]:
    """The ops with complex values in the forward and backward graphs torch.compile makes (no code generated)."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_module_simplified

    from caraml.workloads.fno.model import FNO

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm.forward)

    def backend(gm, example_inputs):
        return aot_module_simplified(gm, example_inputs, fw_compiler=capture, bw_compiler=capture)

    torch._dynamo.reset()
    model = FNO(4, 4, 6, (3, 3), 2, complex_weights=complex_weights)
    torch.compile(model, backend=backend, fullgraph=True)(torch.randn(2, 4, 16, 8)).sum().backward()
    torch._dynamo.reset()
    found = []
    for gm in graphs:
        ops = set()
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if not any(isinstance(v, torch.Tensor) and v.is_complex() for v in (val if isinstance(val, (tuple, list))
                                                                                 else [val])):
                continue
            ops.add("complex input" if node.op == "placeholder" else str(node.target))
        found.append(ops)
    return found


@pytest.mark.skipif(tuple(map(int, torch.__version__.split(".")[:2])) < (2, 4),
                    reason="torch 2.3's dynamo cannot trace Tensor.is_complex into one graph (fullgraph=True)")
def test_real_spectral_weights_leave_only_ffts_complex_in_the_compiled_graph():
    forward, backward = _complex_ops_in_compiled_graphs(complex_weights=False)
    assert forward <= {"aten._fft_r2c.default", "aten._fft_c2r.default", "aten.view_as_complex.default",
                       "aten.view_as_real.default"}, forward
    assert "complex input" not in backward and "aten.bmm.default" not in backward  # torch's rfft backward only
    forward, _ = _complex_ops_in_compiled_graphs(complex_weights=True)
    assert {"complex input", "aten.bmm.default"} <= forward  # the classic way: complex weights and products


# FLOPs -----------------------------------------------------------------------------------------------
def test_flop_count_convention():
    from caraml.workloads.fno import flops
    from caraml.workloads.fno.model import FNO, PROJECTION_EXPANSION

    b, cin, cout, width, modes, grid = 2, 4, 4, 8, (4, 4), (16, 8)
    hidden = PROJECTION_EXPANSION * width
    model = lambda: FNO(cin, cout, width, modes, 1)  # made on the meta device by the kit
    x = lambda: torch.empty(b, cin, *grid)
    counted = flops.count(model, x, train=False)
    points = math.prod(grid)
    pointwise = 2 * b * points * (cin * width + width * width + width * hidden + hidden * cout)
    kept = 2 * modes[0] * modes[1]
    spectral = 8 * b * width * width * kept  # a complex multiply-add is 4 real ones
    fft = 2 * 2.5 * points * math.log2(points) * b * width  # rfft2 and irfft2 of each channel
    assert counted["fft"] == pytest.approx(fft)
    assert counted["total"] == pytest.approx(pointwise + spectral + fft)
    # training adds the backward FFTs as torch runs them: an rfft2 for irfft2, a complex FFT for rfft2
    trained = flops.count(model, x, train=True)
    per_vector = points * math.log2(points) * b * width
    assert trained["fft"] == pytest.approx((2.5 + 2.5 + 2.5 + 5) * per_vector)
    assert "5 N log2 N" in flops.FLOPS_CONVENTION and "2.5 N log2 N" in flops.FLOPS_CONVENTION


# data files ------------------------------------------------------------------------------------------
def test_data_files_layout_and_bad_files(tmp_path):
    h5py = pytest.importorskip("h5py")
    from caraml.errors import BadInput
    from caraml.workloads.fno import files
    from caraml.workloads.fno.problems import PROBLEMS as TABLE

    pic = TABLE["PIC2D"]
    path = files.write_synthetic(pic, tmp_path, samples=3, spatial=(50,))
    assert path.name == "PIC2D_electrostatic.h5"
    with h5py.File(path) as f:
        assert f["inputs"].shape == (3, 3, 50) and f["outputs"].shape == (3, 2, 50)
        positions = f["inputs"][:, :2]
        assert positions.min() >= 0 and positions.max() < 2 * math.pi and f["infos/particles"][()] == 50
    got = files.read(path, pic, samples=2)
    assert got["inputs"].shape == (2, 3, 50) and got["samples_in_file"] == 3 and got["synthetic"]

    def bad(make, says, problem=pic):
        target = tmp_path / "bad.h5"
        target.unlink(missing_ok=True)
        make(target)
        with pytest.raises(BadInput, match=says):
            files.check(target, problem)

    def without(name):
        def make(target):
            with h5py.File(target, "w") as f:
                for key in ("inputs", "outputs"):
                    if key != name:
                        f[key] = torch.zeros(3, 3 if key == "inputs" else 2, 50).numpy()
                if name != "infos":
                    f.create_group("infos")
        return make

    bad(without("outputs"), "has no 'outputs'")
    bad(without("infos"), "has no 'infos'")
    bad(lambda t: t.write_text("not hdf5"), "is not a readable HDF5 file")
    bad(lambda t: None, "does not exist")
    bad(lambda t: files.write_synthetic(pic, tmp_path, 3, spatial=(50,), overwrite=True).rename(t),
        "PIC1D needs \\[N, 2, P\\] \\(2 channels of any number P", problem=TABLE["PIC1D"])
    with pytest.raises(BadInput, match="data=file needs data_path"):
        files.resolve_path("", pic, None)
    assert files.resolve_path(str(tmp_path), pic, None) == tmp_path / pic.file


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("complex_weights", [False, True])
@pytest.mark.parametrize("norm", ["backward", "ortho"])
@pytest.mark.parametrize("chunk", [2048, 50])
def test_dse_layouts_are_the_same_operator(dtype, complex_weights, norm, chunk, monkeypatch):
    """PIC1D's channels-last layout (one Vandermonde matrix, [B, P, C], the particles in chunks of `chunk`: 300 in 1
    or 6) against channels-first (the implementation before): output, input and weight gradients within 1e-4
    relative (norm-wise), from the same weights."""
    import torch.nn.functional as F

    from caraml.workloads.fno import model as fno_model
    from caraml.workloads.fno.model import FNO

    monkeypatch.setattr(fno_model, "DSE_CHUNK", chunk)
    assert fno_model.particle_chunks(300) == (1 if chunk == 2048 else 6)

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 2, 300, generator=gen, dtype=dtype)
    x[:, 0] = 2 * math.pi * torch.rand(2, 300, generator=gen, dtype=dtype)
    y = torch.randn(2, 1, 300, generator=gen, dtype=dtype)
    results, weights = [], None
    for layout in ("channels-first", "channels-last"):
        model = FNO(2, 1, 8, (5,), 3, kind="dse", complex_weights=complex_weights, dse_layout=layout).to(dtype)
        model.transform.norm = norm
        if weights is None:
            weights = model.state_dict()
        model.load_state_dict(weights)
        xx = x.clone().requires_grad_(True)
        out = model(xx)
        F.l1_loss(out, y).backward()
        assert out.shape == (2, 1, 300) and model.channels_last == (layout == "channels-last")
        results.append({"out": out.detach(), "x": xx.grad[:, 1], **{n: p.grad for n, p in model.named_parameters()}})
    first, last = results
    for name, ref in first.items():
        rel = ((last[name] - ref).abs().norm() / ref.abs().norm()).item()
        assert rel < 1e-4, (name, rel)


def test_dse_layout_is_refused_off_pic1d_and_quiet_at_its_default():
    from caraml.errors import BadInput
    from caraml.params import id_view, resolve
    from caraml.workloads.fno import WORKLOAD

    declared = WORKLOAD.params
    assert _config(problem="PIC1D").dse_layout == "channels-last"
    assert _config(problem="PIC1D", dse_layout="channels-first").dse_layout == "channels-first"
    with pytest.raises(BadInput, match="dse_layout=channels-first applies to PIC1D only"):
        _config(problem="RBC2D", dse_layout="channels-first")
    # the configuration ids of PIC1D points stored before the parameter (the same operator) stay as they were
    assert "dse_layout" not in id_view(declared, resolve(declared, {"problem": "PIC1D"}, "fno"))
    assert id_view(declared, resolve(declared, {"problem": "PIC1D", "dse_layout": "channels-first"}, "fno"))[
        "dse_layout"] == "channels-first"


# dse_backend=triton's kernels run here in Triton's interpreter (its own process: the variable is read at import)
_TRITON_CHECK = """
import json, math, torch
import torch.nn.functional as F
from caraml.workloads.fno import dse_triton
from caraml.workloads.fno.model import FNO
torch.set_float32_matmul_precision("highest")
gen = torch.Generator().manual_seed(3)
x = torch.randn(2, 2, 5000, generator=gen)
x[:, 0] = 2 * math.pi * torch.rand(2, 5000, generator=gen)  # 5000: two spectrum chunks, the last tile partial
y = torch.randn(2, 1, 5000, generator=gen)
results, weights = {}, None
for backend in ("matmul", "triton", "triton-fused"):
    model = FNO(2, 1, 16, (8,), 2, kind="dse", dse_layout="channels-last", dse_backend=backend)
    weights = weights if weights is not None else model.state_dict()
    model.load_state_dict(weights)
    out = model(x)
    F.l1_loss(out, y).backward()
    results[backend] = {"out": out.detach(), **{n: p.grad for n, p in model.named_parameters()}}
rel = {f"{b} {n}": ((results[b][n] - ref).norm() / ref.norm()).item()
       for b in ("triton", "triton-fused") for n, ref in results["matmul"].items()}
try:  # positions that ask for a gradient
    FNO(2, 1, 16, (8,), 1, kind="dse", dse_layout="channels-last", dse_backend="triton")(x.requires_grad_())
    positions = "not refused"
except ValueError as exc:
    positions = str(exc)
print(json.dumps({"rel": rel, "refused": [positions, dse_triton.unavailable(8, 24)]}))
"""


@pytest.mark.subprocess
def test_pic1d_triton_kernels_are_the_same_layers():
    """dse_backend=triton (V made inside the two products' kernels) and triton-fused (also each layer's inverse,
    skip product, bias and GELU in one kernel, its gradients in another) against the matmul backend, from the same
    weights, in Triton's interpreter on the CPU: output and every weight's gradient within 1e-5 (float32, IEEE
    products); positions that ask for a gradient and widths the tensor cores cannot tile are refused."""
    pytest.importorskip("triton")
    if not hasattr(torch.library, "triton_op"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.triton_op (the kernels need torch >= 2.6)")
    proc = subprocess.run([sys.executable, "-c", _TRITON_CHECK], capture_output=True, text=True, timeout=600,
                          env=cli_env(TRITON_INTERPRET="1", OMP_NUM_THREADS="1"), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    assert {"triton out", "triton-fused out", "triton-fused skips.1.weight", "triton-fused skips.1.bias"} <= set(
        found["rel"]) and len(found["rel"]) > 20  # each backend's output and weights' gradients
    assert all(v < 1e-5 for v in found["rel"].values()), found["rel"]
    positions, width = found["refused"]
    assert "gives the particle positions no gradient" in positions
    assert "width a power of two >= 16" in width and "it is 24" in width


def test_the_approximate_cosine_only_under_tf32_on_a_gpu(monkeypatch):
    """V's cosines come from the GPU's approximate unit only where the products round V to TF32 anyway: never under
    IEEE products, never in Triton's interpreter (it has no libdevice), never with APPROX_COS = 0."""
    pytest.importorskip("triton")
    from caraml.workloads.fno import dse_triton

    if not hasattr(dse_triton, "_approx_cos"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.triton_op (the kernels need torch >= 2.6)")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert dse_triton._approx_cos(ieee=False) and not dse_triton._approx_cos(ieee=True)
    for interpret in ("1", "true"):
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
        assert not dse_triton._approx_cos(ieee=False), interpret
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(dse_triton, "APPROX_COS", 0)
    assert not dse_triton._approx_cos(ieee=False)


@pytest.mark.subprocess  # Triton's compiler runs ptxas
def test_pic1d_kernels_compile_for_hopper_without_a_gpu():
    """Triton's own compiler (not its interpreter) takes each DSE kernel at PIC1D's sizes for sm_90, launched as its
    op launches it, under TF32 products: PTX and a cubin for the GPU, V's cosines from the approximate unit, the
    products' operands rounded to TF32 (not truncated by the tensor cores), and shared memory within what one
    program may take on Hopper (227 KB)."""
    pytest.importorskip("triton")
    from caraml.workloads.fno import dse_triton

    if not hasattr(dse_triton, "ahead_of_time"):
        pytest.skip(f"torch {torch.__version__} has no torch.library.triton_op (the kernels need torch >= 2.6)")
    assert set(dse_triton.launches()) == {name for name in vars(dse_triton) if name.endswith("_kernel")}
    for kernel in dse_triton.launches():
        compiled = dse_triton.ahead_of_time(kernel, modes=16, width=32, hidden=128, ieee=False)
        ptx = compiled.asm["ptx"]
        assert f".entry {kernel}(" in ptx and ".target sm_90a" in ptx and compiled.asm["cubin"], kernel
        assert ("cos.approx" in ptx) == ("head" not in kernel), kernel  # the head makes no V
        assert "cvt.rna.tf32.f32" in ptx, kernel
        assert 0 < compiled.metadata.shared <= 232_448, (kernel, compiled.metadata.shared)


def test_a_benchmark_sets_only_the_kernels_tunable_constants(monkeypatch):
    """bench/fno_profile.py's dse_triton.CONSTANT=N and dse_kernels_ptxas.py's --set: a misspelt constant is refused
    (set as a new attribute it would leave the kernels as they were, and the variant would time the default)."""
    from caraml.errors import BadInput
    from caraml.workloads.fno import dse_triton

    monkeypatch.setattr(dse_triton, "FUSED_WARPS", dse_triton.FUSED_WARPS)  # restored after the test
    dse_triton.set_constant("FUSED_WARPS", "8")
    if hasattr(dse_triton, "launches"):
        assert dse_triton.launches()["_layer_kernel"][1] == 8
    for name, value in (("FUSED_WARP", "8"), ("FUSED_WARPS", "eight"), ("triton", "1")):
        with pytest.raises(BadInput, match=r"expected one of BLOCK_P, .*ROUND_TF32"):
            dse_triton.set_constant(name, value)
    assert dse_triton.FUSED_WARPS == 8 and not hasattr(dse_triton, "FUSED_WARP")


def test_dse_backend_is_refused_where_its_kernels_cannot_run():
    from caraml.errors import BadInput
    from caraml.params import id_view, resolve
    from caraml.workloads.fno import WORKLOAD

    assert _config(problem="PIC1D").dse_backend == "matmul"
    assert _config(problem="PIC1D", dse_backend="triton").dse_backend == "triton"
    for given, says in (({"problem": "RBC2D"}, "applies to PIC1D only"),
                        ({"dse_layout": "channels-first"}, "needs dse_layout=channels-last"),
                        ({"complex_mixed_precision": True}, "works on float32 spectra")):
        with pytest.raises(BadInput, match=f"dse_backend=triton {says}"):
            _config(**{"problem": "PIC1D", "dse_backend": "triton", **given})
    with pytest.raises(BadInput, match=r"dse_backend=triton-fused runs the skip products in its float32 kernels: use "
                                       r"precision=fp32 \(not bf16\)"):
        _config(problem="PIC1D", dse_backend="triton-fused", precision="bf16")
    assert _config(problem="PIC1D", dse_backend="triton-fused").dse_backend == "triton-fused"
    declared = WORKLOAD.params  # PIC1D's ids stay as they were at the default
    assert "dse_backend" not in id_view(declared, resolve(declared, {"problem": "PIC1D"}, "fno"))


@pytest.mark.subprocess
@pytest.mark.parametrize("backend", ["triton", "triton-fused"])
def test_dse_backend_triton_on_a_cpu_is_one_line_exit_2(tmp_path, backend):
    proc = caraml("run", "fno", "--preset", "smoke-PIC1D", f"dse_backend={backend}", "--results", str(tmp_path),
                  check=2)
    assert f"dse_backend={backend} runs on CUDA GPUs" in proc.stderr and "Traceback" not in proc.stderr


def test_pic1d_compiled_head_is_the_same_projection(monkeypatch):
    """Compiled, channels-last PIC1D's last layer (one output channel) is a weighted sum inductor fuses with the GELU:
    the same output and gradients as F.linear, within 1e-4 (here its math, traced eagerly)."""
    import torch.nn.functional as F

    from caraml.workloads.fno import model as fno_model

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 2, 200, generator=gen)
    x[:, 0] = 2 * math.pi * torch.rand(2, 200, generator=gen)
    y = torch.randn(2, 1, 200, generator=gen)
    results = []
    for compiling in (False, True):
        monkeypatch.setattr(fno_model, "_compiling", lambda c=compiling: c)
        torch.manual_seed(0)
        model = fno_model.FNO(2, 1, 8, (5,), 2, kind="dse", dse_layout="channels-last")
        out = model(x)
        F.l1_loss(out, y).backward()
        results.append({"out": out.detach(), **{n: p.grad for n, p in model.named_parameters()}})
    for name, ref in results[0].items():
        assert ((results[1][name] - ref).norm() / ref.norm()).item() < 1e-5, name


@pytest.mark.parametrize("particles, chunks", [(100_000, 40), (20_000, 8), (6_144, 3), (4_096, 2), (4_095, 1),
                                               (2_047, 1), (9_973, 1)])
def test_dse_chunks_are_the_most_equal_ones_of_at_least_dse_chunk_particles(particles, chunks):
    """100,000 particles: 40 chunks of 2,500; 20,000: 8 of 2,500 (10 of 2,000 would be too small); a prime: one."""
    from caraml.workloads.fno.model import DSE_CHUNK, particle_chunks

    assert particle_chunks(particles) == chunks
    assert particles % chunks == 0 and (chunks == 1 or particles // chunks >= DSE_CHUNK)


def test_a_channels_last_head_of_several_outputs_stays_a_linear_layer_when_compiled(monkeypatch):
    """Only a one-channel head becomes the weighted sum: three output channels give the same output compiled."""
    from caraml.workloads.fno import model as fno_model

    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 2, 100, generator=gen)
    x[:, 0] = 2 * math.pi * torch.rand(2, 100, generator=gen)
    torch.manual_seed(0)
    model = fno_model.FNO(2, 3, 8, (5,), 2, kind="dse", dse_layout="channels-last")
    eager = model(x)
    monkeypatch.setattr(fno_model, "_compiling", lambda: True)
    compiled = model(x)
    assert eager.shape == compiled.shape == (2, 3, 100)
    assert torch.allclose(eager, compiled)


@pytest.mark.parametrize("layout", ["channels-last", "channels-first"])
def test_the_pic1d_bench_trains_the_layout_asked_for(layout):
    from caraml.runner import RunSpec, build_bench

    bench = build_bench(RunSpec("fno", {"dse_layout": layout}, preset="smoke-PIC1D"), device="cpu")
    assert bench.raw_model.channels_last == (layout == "channels-last")
    assert bench.details()["settings"]["dse_layout"] == layout
    assert ("[B, P, C] activations" in bench.details()["math"]["transform"]) == (layout == "channels-last")
    bench.close()
