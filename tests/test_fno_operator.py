"""fno: the model as CARAML's code builds it: parameter counts of the four problems, PIC2D's Kaiser-Bessel
operator over the particle index (against a dense DFT, against CARAML's own torchkbnufft calls, and its matrix
backend against torchkbnufft), GELU after every Fourier layer, and the PIC2D operator as a parameter."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("torchkbnufft")

# CARAML's parameter counts, computed by hand from its operator_learning code (model/fno.py, layers/mlp.py,
# layers/spectral_layers.py, layers/dse.py, layers/nufft.py) and its configs (bias: false, channel_mlp_expansion 4):
#   P (lift)   MLP('linear', n_layers=1): nn.Linear(da, dv)                          da*dv + dv
#   per layer  spectral weights R (complex, stored as real pairs: x 2) + W = MLP('channel', n_layers=1):
#              nn.Conv1d(dv, dv, 1)                                                    dv*dv + dv
#   Q          MLP('linear', n_layers=2, hidden 4*dv): Linear(dv, 4dv), GELU, Linear(4dv, du)
#                                                                  dv*4dv + 4dv + 4dv*du + du
#   PIC1D (da 2, du 1, dv 32, kX 16, 4 layers; DSE R[dv, dv, kX]):
#       96 + 4 * (32*32*16*2 + 1056) + (4224 + 129)                               = 139,745
#   PIC2D (da 3, du 2, dv 32, kX 16, 4 layers; Kaiser-Bessel R1[dv, dv, kX], kY unused):
#       128 + 4 * (32*32*16*2 + 1056) + (4224 + 258)                              = 139,906
#   RBC2D (da = du = 4, dv 16, kX = kY = 12, 2 layers; R[dv, dv, 2kX, kY]):
#       80 + 2 * (16*16*24*12*2 + 272) + (1088 + 260)                             = 296,884
#   RBC3D (da = du = 5, dv 25, 12x12x6, 2 layers; R[dv, dv, 2kX, 2kY, kZ]):
#       150 + 2 * (25*25*24*24*6*2 + 650) + (2600 + 505)                          = 8,644,555
CARAML_PARAMETERS = {"PIC1D": 139_745, "PIC2D": 139_906, "RBC2D": 296_884, "RBC3D": 8_644_555}


def _dense(p: int, kx: int) -> torch.Tensor:
    """CARAML's operator exactly: E[k, n] = exp(-i w_k (n - P//2)) / sqrt(2P), w = -P//2, -P//2 + 1, ... (rad),
    torchkbnufft's ortho scaling being that of its 2P-point grid."""
    n = torch.arange(p, dtype=torch.float64)
    w = torch.arange(-p // 2, p // 2, dtype=torch.float64)[:kx]
    return torch.exp(-1j * w[:, None] * (n - p // 2)) / math.sqrt(2 * p)


def _rel(a, b) -> float:
    return ((a.to(torch.complex128) - b.to(torch.complex128)).abs().max() / b.abs().max()).item()


@pytest.mark.parametrize("problem", list(CARAML_PARAMETERS))
def test_parameter_counts_match_caramls_code(problem):
    from caraml.workloads.fno.model import build_model, count_parameters
    from caraml.workloads.fno.problems import PROBLEMS

    pb = PROBLEMS[problem]
    with torch.device("meta"):  # shapes only: RBC3D's 8.6 M parameters, PIC2D's 100,000-particle operator
        model = build_model(pb, pb.width, pb.modes, pb.layers)
    assert count_parameters(model) == pytest.approx(CARAML_PARAMETERS[problem], rel=0.01)
    assert count_parameters(model) == CARAML_PARAMETERS[problem]  # in fact exactly


def test_pic2d_operator_matches_a_dense_nonuniform_dft_and_its_adjoint():
    from caraml.workloads.fno.model import ParticleIndexNUFFT

    torch.manual_seed(0)
    b, c, p, kx = 2, 3, 96, 5
    op = ParticleIndexNUFFT((kx, 7), p)
    assert op.block == (kx,)  # kX only; kY (7) is not used
    x = torch.randn(b, c, p)
    e = _dense(p, kx)
    dense = torch.einsum("bcn,kn->bck", x.double().to(torch.complex128), e)
    assert _rel(op(x, None, True), dense) < 3e-3  # the Kaiser-Bessel kernel's error (6 points, 2x grid)
    assert torch.equal(torch.view_as_complex(op(x, None, False).contiguous()), op(x, None, True))
    y = torch.randn(b, c, kx, dtype=torch.complex64)
    adjoint = torch.einsum("bck,kn->bcn", y.to(torch.complex128), e.conj()).real
    assert _rel(op.inverse(y, None, (p,)), adjoint) < 3e-3
    assert torch.equal(op.inverse(torch.view_as_real(y), None, (p,)), op.inverse(y, None, (p,)))


def test_pic2d_operator_equals_caramls_torchkbnufft_calls():
    """CARAML: all P trajectory points, one copy of the trajectory per sample and channel, the first kX kept;
    the adjoint of those kX with zeros elsewhere. Ours computes the kept points only: the same values."""
    from torchkbnufft import KbNufft, KbNufftAdjoint

    from caraml.workloads.fno.model import ParticleIndexNUFFT

    torch.manual_seed(1)
    b, c, p, kx = 2, 3, 96, 5
    kb, adj = KbNufft(im_size=(p,), grid_size=(2 * p,)), KbNufftAdjoint(im_size=(p,), grid_size=(2 * p,))
    ktraj = torch.arange(-p // 2, p // 2, dtype=torch.float32)[None, None, :].repeat(b * c, 1, 1)
    x = torch.randn(b, c, p)
    full = kb(x.to(torch.complex64).reshape(b * c, 1, p), ktraj, norm="ortho").reshape(b, c, p)
    out_ft = torch.zeros(b, c, p, dtype=torch.complex64)
    out_ft[:, :, :kx] = full[:, :, :kx]
    back = adj(out_ft.reshape(b * c, 1, p), ktraj, norm="ortho").reshape(b, c, p).real
    op = ParticleIndexNUFFT((kx,), p)
    assert torch.allclose(op(x, None, True), full[:, :, :kx], rtol=0, atol=1e-6)
    assert torch.allclose(op.inverse(full[:, :, :kx], None, (p,)), back, rtol=0, atol=1e-6)


def _tf32_study():
    """caraml.compare.tf32_emulation (bench/pic_tf32_cpu.py's): the TF32 emulation and a backend's results."""
    from caraml.compare import tf32_emulation

    return tf32_emulation


def _worst(results: dict, reference: dict, rel) -> tuple[float, str]:
    return max((rel(results[k], reference[k]), k) for k in reference)


def _rel_norm(a, b) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("p", [96, 3000])
def test_matrix_backend_equals_torchkbnufft_with_gradients(p):
    """Outputs and gradients w.r.t. the operator's input, the model's input and every weight, within 1e-4 (norm-wise
    and elementwise: largest difference over largest value)."""
    study = _tf32_study()
    size = {"particles": p, "batch": 2, "width": 6, "modes": 4, "layers": 2}
    reference = study.backend_results("torchkbnufft", **size)
    results = study.backend_results("matrix", **size)
    for rel in (_rel, _rel_norm):
        worst, name = _worst(results, reference, rel)
        assert worst < 1e-4, (rel.__name__, name, worst)


def test_truncated_tf32_is_a_bias_toward_zero_where_rounding_is_none():
    """Triton's TF32 products hand the tensor cores float32 bits, which keep 10 mantissa bits by truncation: every
    operand moves toward zero, by about 2^-11.5 relative on average, where rounding to nearest moves it either way."""
    study = _tf32_study()
    x = torch.randn(100_000, generator=torch.Generator().manual_seed(1))
    truncated, rounded = study.tf32_round(x, truncate=True), study.tf32_round(x)
    assert truncated.view(torch.int32).bitwise_and(0x1FFF).eq(0).all() and (truncated.abs() <= x.abs()).all()
    shrink = float(((x.abs() - truncated.abs()) / x.abs()).mean())
    assert 2.0 ** -13 < shrink < 2.0 ** -11, shrink
    assert abs(float(((x.abs() - rounded.abs()) / x.abs()).mean())) < shrink / 20


def test_matrix_backend_stays_within_1e_4_under_tf32():
    """With every float32 product rounded as TF32 does (CARAML's 'high' on a GPU), the matrix backend's float64
    products keep it within 1e-4 of torchkbnufft (which has no matmul); float32 products would be off by more.
    Norm-wise: the model's other products (TF32 for both backends) round inputs that differ in the last float32 bit
    to TF32 values a TF32 step apart now and then, which moves single elements by ~1e-4 whatever the backend."""
    study = _tf32_study()
    x = torch.randn(1000)
    assert study.tf32_round(x).view(torch.int32).bitwise_and(0x1FFF).eq(0).all()  # 10 mantissa bits left
    assert ((study.tf32_round(x) - x).abs() <= x.abs() * 2.0 ** -11).all()  # rounded to nearest
    size, matmul = {"particles": 3000, "batch": 2, "width": 6, "modes": 4, "layers": 2}, torch.matmul
    with study.emulated_tf32():
        reference = study.backend_results("torchkbnufft", **size)
        worst, name = _worst(study.backend_results("matrix", **size), reference, _rel_norm)
        rounded, _ = _worst(study.backend_results("matrix", matrix_dtype=torch.float32, **size), reference, _rel_norm)
    assert worst < 1e-4, (name, worst)
    assert rounded > 1e-4, rounded  # the emulation bites: without float64 products the check fails
    assert torch.matmul is matmul  # restored


def test_gelu_after_every_fourier_layer_and_a_4x_projection():
    from caraml.workloads.fno.model import FNO

    torch.manual_seed(4)
    model = FNO(4, 3, 6, (3, 3), 2)
    assert (model.project.weight.shape, model.out.weight.shape) == ((24, 6), (3, 24))
    x = torch.randn(2, 4, 16, 8)
    h = model.lift(x)
    for i, skip in enumerate(model.skips):
        h = F.gelu(model.spectral_conv(h, i, None) + skip(h))
    assert torch.allclose(model(x), model.out(F.gelu(model.project(h))), atol=1e-6)


def test_pic2d_operator_is_a_parameter_and_only_pic2d_has_one():
    from caraml.errors import BadInput
    from caraml.params import resolve
    from caraml.workloads.fno import WORKLOAD
    from caraml.workloads.fno.config import FNOConfig
    from caraml.workloads.fno.problems import PROBLEMS

    def config(**given):
        return FNOConfig.from_params(resolve(WORKLOAD.params, given, "fno"))

    default = config(problem="PIC2D")
    assert (default.problem_spec.kind, default.pic2d_operator, default.nufft_backend) == ("kbnufft", "caraml",
                                                                                     "torchkbnufft")
    assert default.kept_modes == (16, 16)  # CARAML's config names kX x kY; its operator keeps kX
    assert config(problem="PIC2D", pic2d_operator="grid2d").problem_spec.kind == "nufft"
    for problem in ("PIC1D", "RBC2D", "RBC3D"):
        assert config(problem=problem, pic2d_operator="grid2d").problem_spec is PROBLEMS[problem]
    with pytest.raises(BadInput, match="complex_mixed_precision=on is not available for PIC2D's CARAML operator"):
        config(problem="PIC2D", complex_mixed_precision="on")
    with pytest.raises(BadInput, match="nufft_backend=sparse is not valid"):
        config(problem="PIC2D", nufft_backend="sparse")
    with pytest.raises(BadInput, match="kX=20 modes need at least 20 particles, there are 16"):
        config(problem="PIC2D", modes="20x4", particles=16)


def test_spectral_conv_equals_neuraloperators_for_the_same_weights():
    """Ours against neuraloperator's SpectralConv (dense weights, no bias), when neuraloperator is installed."""
    neuralop = pytest.importorskip("neuralop", reason="neuraloperator is optional (bench/fno_bench.py's check)")
    from caraml.workloads.fno.model import GridFFT, SpectralWeights

    torch.manual_seed(5)
    c, modes, grid = 3, (3, 4), (16, 10)
    # neuraloperator's n_modes: all kept frequencies of a dim, the last halved (n // 2 + 1 kept of the rfft)
    theirs = neuralop.layers.spectral_convolution.SpectralConv(c, c, n_modes=(2 * modes[0], 2 * (modes[1] - 1)),
                                                               bias=False, fft_norm="backward")
    w = theirs.weight.to_tensor() if hasattr(theirs.weight, "to_tensor") else theirs.weight
    w = w.detach()
    assert w.shape == (c, c, 2 * modes[0], modes[1])  # [in, out, frequencies -m1 .. m1 - 1, 0 .. m2 - 1]
    t = GridFFT(modes)
    ours = SpectralWeights(c, c, t.block, complex_weights=True)
    # neuraloperator keeps -m1 .. m1-1 in order (fftshift); ours the corner blocks [0, m1) then [-m1, 0)
    ours.weight.data = torch.cat([w[:, :, modes[0]:], w[:, :, :modes[0]]], 2).to(ours.weight.dtype)
    x = torch.randn(2, c, *grid)
    with torch.no_grad():
        expected = theirs(x)
        got = t.inverse(ours(t(x, None, True)), None, grid)
        real = SpectralWeights(c, c, t.block)  # ours as it runs: real (re, im) pairs
        real.weight.data = torch.view_as_real(ours.weight.data).clone()
        got_real = t.inverse(real(t(x, None, False)), None, grid)
    assert torch.allclose(got, expected, atol=1e-5), (got - expected).abs().max()
    assert torch.allclose(got_real, expected, atol=1e-5), (got_real - expected).abs().max()


def test_pointwise_as_a_1x1_convolution_is_the_same_product():
    from caraml.workloads.fno.model import Pointwise

    torch.manual_seed(6)
    layer = Pointwise(5, 7)
    x = torch.randn(2, 5, 6, 4, 3)
    plain = layer(x)
    layer.as_conv = True
    assert torch.allclose(layer(x), plain, atol=1e-6) and layer(x).shape == (2, 7, 6, 4, 3)


@pytest.mark.subprocess
def test_the_record_counts_the_graph_breaks_pic2d_compiles_with(tmp_path):
    """PIC2D compiled: its matrix backend is one graph, torchkbnufft breaks it (`.item()`, data-dependent shapes);
    the record counts the breaks with their reasons and the run says so in one line. The breaks are the tracer's
    (dynamo), whichever compiler takes the graphs: torchkbnufft's 35 graphs under aot_eager, which spares inductor's
    C++ builds of each (minutes on the CPU); the matrix backend through inductor, the FNO's compiled run end to end.
    The breaks counted are the warm-up's: CARAML's epochs after it (compiled again for evaluation) are left out."""
    import json

    from conftest import caraml

    breaks, lines = {}, {}
    for backend, compiler in (("matrix", "inductor"), ("torchkbnufft", "aot_eager")):
        proc = caraml("run", "fno", "--preset", "smoke-PIC2D", f"nufft_backend={backend}", f"compile={compiler}",
                      "warmup_steps=2", "measure_steps=2", "epochs=0", "power=off", "--results", tmp_path, "--json",
                      check=0)
        breaks[backend] = json.loads(proc.stdout.strip().splitlines()[-1])["metrics"]["warmup"]["graph_breaks"]
        lines[backend] = [line for line in proc.stderr.splitlines() if "graph breaks" in line]
    assert breaks["matrix"] == {"count": 0, "graphs": 1, "reasons": []} and not lines["matrix"]
    assert breaks["torchkbnufft"]["count"] > 0 and breaks["torchkbnufft"]["graphs"] > 1
    assert any(".item()" in r["reason"] for r in breaks["torchkbnufft"]["reasons"])
    assert len(lines["torchkbnufft"]) == 1 and "ran eagerly" in lines["torchkbnufft"][0]


def test_graph_breaks_count_only_those_since_the_build_began(monkeypatch):
    """dynamo's counters live as long as the process: a run counts what its own build and steps added."""
    from caraml.kit import compile as compile_mod

    item = "Unsupported Tensor.item() call\n  Explanation: ...\n  Developer debug context: "
    graphs = compile_mod.GRAPHS
    now = {item + "a": 5, item + "b": 2, "Dynamic shape operator": 4, "old": 3, graphs: 12}
    monkeypatch.setattr(compile_mod, "graph_break_counts", lambda: dict(now))
    found = compile_mod.graph_breaks({item + "a": 2, "old": 3, graphs: 2})
    # one kind on two operators is one reason (3 + 2), the most frequent first; what came before is not counted
    assert found == {"count": 9, "graphs": 10, "reasons": [{"reason": "Unsupported Tensor.item() call", "times": 5},
                                                           {"reason": "Dynamic shape operator", "times": 4}]}
    # no graph made since: nothing torch.compile'd (a TorchScript trace, PopTorch), no entry at all
    assert compile_mod.graph_breaks(dict(now)) is None
