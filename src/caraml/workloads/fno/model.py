"""A PyTorch-native Fourier Neural Operator for grids (RBC) and particles (PIC).

    lift (pointwise in -> width) -> layers x [spectral conv + pointwise skip, GELU]
    -> projection (pointwise width -> 4 width, GELU, 4 width -> out)

as CARAML's operator_learning FNO: GELU after every Fourier layer, the last included; the projection's
hidden width is channel_mlp_expansion (4) x width.

A spectral conv is: forward transform to the kept Fourier modes, a per-mode channel mixing with
learned weights, inverse transform. The transform depends on where the samples live:

- GridFFT (RBC2D, RBC3D): torch.fft.rfftn / irfftn over the last 2 or 3 dims. Kept: `modes[i]` lowest
  positive and negative frequencies of every dim but the last (the usual corner blocks), the first
  `modes[-1]` rfft frequencies of the last.
- DSE (PIC1D): direct spectral evaluation on non-uniform particles x_j in [0, 2*pi): the Vandermonde
  matrix V[k, j] = exp(-i k x_j), k = 0..m-1, applied as one real matmul (cos and sin rows); the
  inverse is its adjoint with the irfft weights (1 for k = 0, 2 otherwise) and 1/P. On particles at
  the grid points 2*pi*j/P it equals rfft / irfft of the truncated spectrum. dse_layout=channels-last (the
  workload's default): activations [B, P, C], one matrix for both ways, the products over the particles in chunks,
  and compiled, the one-channel head fused with its GELU (see DSE and FNO._forward_channels_last).
- ParticleIndexNUFFT (PIC2D, CARAML's operator, the default): CARAML's Kaiser-Bessel path. torchkbnufft's
  KbNufft / KbNufftAdjoint over the particle *index* (im_size (P,), grid 2P, norm ortho, the trajectory
  -P/2 .. P/2-1 in radians, positions unused: the y coordinate is just a channel); the first kX trajectory
  points are kept and mixed, kY is not used. nufft_backend=matrix: the same operator restricted to the kept
  points, taken once from torchkbnufft's adjoint as a dense [2 kX, P] real matrix and applied as matmuls.
- NUFFT2d (PIC2D with pic2d_operator=grid2d, ours before): the 2D direct spectral evaluation on the particle
  positions, k in [-m1, m1) x [0, m2), computed as a type-1 / type-2 non-uniform FFT: Kaiser-Bessel
  gridding of the particles onto a 2x oversampled uniform grid, rfft2, deconvolution by the kernel's
  Fourier transform (and the reverse: deconvolve, irfft2, interpolate).

Spectral weights are real tensors with a trailing (real, imag) dim of 2 and the complex product is
done with one real batched matmul, so that torch.compile/inductor sees no complex parameters
(some inductor versions failed on complex64 weights with KeyError 'complex64'); `complex_weights=True` keeps
torch.cfloat weights and complex einsums (the classic implementation) for comparison.
`half_spectral=True` is CARAML's complex mixed precision: the FFTs and the spectral product in fp16
(cuFFT does half precision for power-of-two sizes only), scaled orthonormally (1/sqrt(N) both ways:
the same operator, but no unscaled sum over N points to overflow fp16). Otherwise the spectral part
runs in fp32 even under autocast.
"""

from __future__ import annotations

import contextlib
import itertools
import math

import torch
import torch.nn.functional as F
from torch import nn

from caraml.workloads.fno.problems import DSE_BACKENDS

PROJECTION_EXPANSION = 4  # hidden width of the projection / width: CARAML's channel_mlp_expansion
KB_WIDTH = 4  # Kaiser-Bessel kernel width in grid points (NUFFT)
KB_OVERSAMPLING = 2  # oversampling of the NUFFT grid
NUFFT_BACKENDS = ("torchkbnufft", "matrix")  # how CARAML's PIC2D operator is computed (the same operator)
# nufft_backend=matrix's products: float64 is exact for float32 operands whatever TF32 or torch.compile do, one cast
# and one GEMM each (3xTF32, hi/lo splits, would be three GEMMs plus bit masks); the matrices are only P x 2 kX,
# so FP64 tensor cores (H100/H200: the FP32 SIMT rate) keep the backend far ahead of torchkbnufft
MATRIX_PRODUCT_DTYPE = torch.float64
# PIC1D's activations: [B, P, C] with one Vandermonde matrix (channels-last) or [B, C, P] as CARAML's Conv1d
DSE_LAYOUTS = ("channels-last", "channels-first")
# particles per chunk of the channels-last DSE's products (at least): 100,000 particles in 40 chunks of 2,500, so a
# batch of 20 is 800 GEMMs of K = 2,500 (see DSE)
DSE_CHUNK = 2048


class Pointwise(nn.Module):
    """A 1x1 convolution over any number of trailing dims: y[b, o, ...] = W[o, c] x[b, c, ...] + b[o]."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        bound = 1 / math.sqrt(cin)
        self.weight = nn.Parameter(torch.empty(cout, cin).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(cout).uniform_(-bound, bound))
        self.as_conv = False  # the same product as a 1x1 convolution (cuDNN), as CARAML's Conv1d: for profiling

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(shape[0], shape[1], -1)
        if self.as_conv:
            y = F.conv1d(flat, self.weight[:, :, None], self.bias)
        else:
            y = torch.matmul(self.weight, flat) + self.bias[:, None]
        return y.reshape(shape[0], -1, *shape[2:])


class SpectralWeights(nn.Module):
    """Per-mode channel mixing Y[b, o, k] = sum_c X[b, c, k] W[c, o, k] of complex spectra.

    Real mode: X, Y and W are real with a trailing (real, imag) dim; the product is one batched real
    matmul over the modes with the block matrix [[Wr, Wi], [-Wi, Wr]] (8 real FLOPs per complex MAC).
    Complex mode: X, Y, W are complex and the product is a complex einsum.
    """

    def __init__(self, cin: int, cout: int, block: tuple[int, ...], complex_weights: bool = False):
        super().__init__()
        self.cin, self.cout, self.block = cin, cout, block
        self.complex_weights = complex_weights
        scale = 1 / (cin * cout)  # as Li et al.: uniform [0, 1) real and imaginary parts, scaled
        w = scale * torch.rand(cin, cout, *block, 2)
        self.weight = nn.Parameter(torch.view_as_complex(w) if complex_weights else w)

    def forward(self, x):
        if self.complex_weights:
            return torch.einsum("bi...,io...->bo...", x, self.weight.to(x.dtype))
        w = self.weight.to(x.dtype)
        b, m = x.shape[0], math.prod(self.block)
        wr, wi = w[..., 0].reshape(self.cin, self.cout, m), w[..., 1].reshape(self.cin, self.cout, m)
        big = torch.cat([torch.cat([wr, wi], 1), torch.cat([-wi, wr], 1)], 0).permute(2, 0, 1)  # [M, 2Ci, 2Co]
        xs = x.reshape(b, self.cin, m, 2).permute(2, 0, 3, 1).reshape(m, b, 2 * self.cin)  # [M, B, (re|im) Ci]
        ys = torch.bmm(xs, big)  # [M, B, 2Co]
        return ys.reshape(m, b, 2, self.cout).permute(1, 3, 0, 2).reshape(b, self.cout, *self.block, 2)


# transforms ---------------------------------------------------------------------------------------
class GridFFT(nn.Module):
    """rfftn over the last d dims, kept modes as one block [.., 2*m1, .., m_d] (corners of the non-last dims)."""

    def __init__(self, modes: tuple[int, ...]):
        super().__init__()
        self.modes = tuple(modes)
        self.block = tuple(2 * m for m in modes[:-1]) + (modes[-1],)
        self.norm = "backward"  # "ortho" for fp16 spectra: the same operator, no overflow in unscaled sums

    def describe(self) -> str:
        return f"rfftn/irfftn, modes {'x'.join(map(str, self.modes))}"

    def prepare(self, x):
        return None

    def forward(self, x, basis, complex_out: bool):
        d = len(self.modes)
        spec = torch.fft.rfftn(x, dim=tuple(range(-d, 0)), norm=self.norm)
        t = spec if complex_out else torch.view_as_real(spec)
        off = 0 if complex_out else 1  # the trailing (re, im) dim of the real view
        for i, m in enumerate(self.modes):
            dim = t.dim() - off - d + i
            if i < d - 1:
                n = t.shape[dim]
                t = torch.cat([t.narrow(dim, 0, m), t.narrow(dim, n - m, m)], dim)
            else:
                t = t.narrow(dim, 0, m)
        return t

    def inverse(self, y, basis, grid: tuple[int, ...]):
        """y: the kept block (complex, or real with a trailing (re, im) dim) -> real field on `grid`."""
        d = len(self.modes)
        complex_in = y.is_complex()
        sizes = tuple(grid[:-1]) + (grid[-1] // 2 + 1,)
        if complex_in:  # the classic way: a zero spectrum with the corner blocks assigned
            out = torch.zeros(*y.shape[:2], *sizes, dtype=y.dtype, device=y.device)
            for dst, src in self._corners():
                out[dst] = y[src]
            return torch.fft.irfftn(out, s=grid, dim=tuple(range(-d, 0)), norm=self.norm)
        t = y
        for i, m in enumerate(self.modes):  # zero-pad the block back to the full spectrum (real view)
            dim = t.dim() - 1 - d + i
            if i < d - 1:
                zeros_shape = list(t.shape)
                zeros_shape[dim] = sizes[i] - 2 * m
                t = torch.cat([t.narrow(dim, 0, m), t.new_zeros(zeros_shape), t.narrow(dim, m, m)], dim)
            else:
                t = F.pad(t, [0, 0, 0, sizes[i] - m])
        return torch.fft.irfftn(torch.view_as_complex(t.contiguous()), s=grid, dim=tuple(range(-d, 0)),
                                norm=self.norm)

    def _corners(self):
        """(destination, source) index pairs of the corner blocks: low and high frequencies of every non-last dim."""
        ends = [((slice(0, m), slice(0, m)), (slice(-m, None), slice(m, 2 * m))) for m in self.modes[:-1]]
        last = (slice(0, self.modes[-1]),)
        for combo in itertools.product(*ends):
            dst = (Ellipsis, *(c[0] for c in combo), *last)
            src = (Ellipsis, *(c[1] for c in combo), *last)
            yield dst, src


class DSE(nn.Module):
    """Direct spectral evaluation on 1D particles: one Vandermonde matrix per sample, used by every layer.

    channels_last (the default layout, dse_layout=channels-last): activations [B, P, C], so that the pointwise layers
    are plain [B P, C] products (channels-first [B, C, P] makes torch.matmul copy every input into that layout, in
    both passes), and one basis V [B, 2m, P] serves both transforms of every layer: forward V @ h, inverse
    V^T @ (scale * Y), the irfft weights and 1/P put on the small spectrum instead of on a second [B, 2m, P] matrix.
    V is kept as S chunks of the particles, [B S, 2m, P/S], and the products over P run per chunk, then summed: a
    batched GEMM of B [2m x P] x [P x C] products is B output tiles, B thread blocks on a GPU of 132 SMs reading
    P-long operands (cuBLAS's batched GEMMs do not split K), where B S blocks read the same bytes in parallel.
    The same operator as channels-first (the layout before, a forward and an inverse matrix), to rounding.
    """

    def __init__(self, modes: tuple[int, ...], channels_last: bool = False, backend: str = "matmul"):
        super().__init__()
        self.modes = tuple(modes)
        self.block = (modes[0],)
        self.norm = "backward"  # as GridFFT: "ortho" scales both ways by 1/sqrt(P) instead of 1/P on the way back
        self.channels_last = channels_last
        self.backend = backend  # triton, triton-fused: V made inside the products' kernels, never stored (dse_triton)

    def _in_kernel(self, t) -> bool:
        """Whether the products run in dse_triton's kernels: backend triton(-fused), except on the meta device (where
        the FLOPs are counted: the same products as matmuls)."""
        return self.backend != "matmul" and t.device.type != "meta"

    def fuses_layers(self, t) -> bool:
        """Whether each layer after its spectrum (inverse_skip_gelu) and the one-channel head run as kernels."""
        return self.backend == "triton-fused" and self._in_kernel(t)

    def describe(self) -> str:
        layout = ("[B, P, C] activations, one Vandermonde matrix for both ways" if self.channels_last else
                  "[B, C, P] activations, a forward and an inverse matrix (dse_layout=channels-first)")
        products = {"matmul": "Vandermonde matmul", "triton": "Vandermonde tiles made in Triton kernels",
                    "triton-fused": "Vandermonde tiles made in Triton kernels, whole layers fused"}[self.backend]
        return f"direct spectral evaluation ({products}) on the particle positions, {self.modes[0]} modes, " + layout

    def prepare(self, x):
        """[B, 2m, P] rows cos(k x_j) and -sin(k x_j): X = f @ V^T gives (Re, Im) of sum_j f_j exp(-i k x_j).
        The inverse, with the irfft weights: y_j = (1/P) sum_k c_k Re(Y_k exp(i k x_j)), c_0 = 1, c_k = 2.
        channels-first: (forward, inverse) matrices; channels-last: (forward, inverse scale [2m, 1]); backend triton:
        (positions [B, P], inverse scale [2m, 1])."""
        pos = x[:, 0].float()
        b, p = pos.shape
        c = torch.full((self.modes[0],), 2.0, device=x.device)
        c[0] = 1.0
        if self._in_kernel(x):  # the positions themselves (the kernels make V) and the inverse's scale
            if pos.requires_grad:
                raise ValueError(f"dse_backend={self.backend} gives the particle positions no gradient: use the matmul "
                                 "backend")
            return pos.contiguous(), torch.cat([c, c])[:, None] / p
        # channels-last: the particles in S chunks, V as [B S, 2m, P/S] (see the class); channels-first: [B, 2m, P]
        chunks = particle_chunks(p) if self.channels_last else 1
        pos = pos.reshape(b * chunks, 1, p // chunks)
        k = torch.arange(self.modes[0], device=x.device, dtype=torch.float32)
        phase = k[None, :, None] * pos
        forward = torch.cat([torch.cos(phase), -torch.sin(phase)], 1)
        if self.norm == "ortho":  # 1/sqrt(P) both ways: the inverse is the scaled forward's transpose times c
            forward, scale = forward / math.sqrt(p), torch.cat([c, c])
        else:
            scale = torch.cat([c, c]) / p
        if self.channels_last:
            return forward, scale[:, None]
        return forward, forward * scale[None, :, None]

    def forward(self, x, basis, complex_out: bool):
        forward, _ = basis
        m = self.modes[0]
        if self._in_kernel(x):  # x [B, P, C]
            spec = spectrum_layout(dse_kernels().spectrum(forward, x.contiguous(), m, _ieee()))
        elif self.channels_last:  # x [B, P, C]
            b, p, c = x.shape
            chunks = forward.shape[0] // b
            spec = torch.bmm(forward.to(x.dtype), x.reshape(b * chunks, p // chunks, c))  # [B S, 2m, C]
            spec = spectrum_layout(spec.view(b, chunks, 2 * m, c).sum(1))
        else:
            spec = torch.bmm(x, forward.to(x.dtype).transpose(1, 2))  # [B, C, 2m]
            spec = spec.reshape(*x.shape[:2], 2, m).transpose(-1, -2)  # [B, C, m, (re, im)]
        return torch.view_as_complex(spec.contiguous()) if complex_out else spec

    def inverse(self, y, basis, spatial):
        if y.is_complex():
            y = torch.view_as_real(y)
        if self.channels_last:  # -> [B, P, C]
            forward, scale = basis
            b, c = y.shape[:2]
            ys = _scaled_rows(y, scale)
            if self._in_kernel(y):  # `forward` holds the positions
                return dse_kernels().synthesis(forward, ys.contiguous(), _ieee())  # [B, P, C]
            chunks = forward.shape[0] // b
            ys = ys[:, None].expand(b, chunks, *ys.shape[1:]).reshape(b * chunks, -1, c)  # the same for every chunk
            # Re(Y e^{ikx}) = Yr cos - Yi sin: the forward rows are (cos, -sin), so its transpose does it
            out = torch.bmm(forward.to(ys.dtype).transpose(1, 2), ys)  # [B S, P/S, C]
            return out.view(b, -1, c)
        _, inverse = basis
        ys = y.transpose(-1, -2).reshape(*y.shape[:2], -1)  # [B, C, (re m | im m)]
        return torch.bmm(ys, inverse.to(ys.dtype))

    def inverse_skip_gelu(self, y, basis, h, skip):
        """out = GELU(inverse(y) + skip(h)) in one kernel (backend triton-fused, channels-last): h [B, P, C]; and
        out's spectrum, the next layer's (in forward's layout)."""
        positions, scale = basis
        out, spec = dse_kernels().layer(positions, _scaled_rows(y, scale).contiguous(), h.contiguous(), skip.weight,
                                        skip.bias, _ieee())
        return out, spectrum_layout(spec)


def spectrum_layout(rows):
    """The DSE's rows [B, (re m | im m), C] as a spectrum [B, C, m, (re, im)]."""
    b, r, c = rows.shape
    return rows.view(b, 2, r // 2, c).permute(0, 3, 2, 1)


def _scaled_rows(y, scale):
    """A spectrum [B, C, m, (re, im)] as the inverse's rows [B, (re m | im m), C], times the inverse's scale."""
    return y.permute(0, 3, 2, 1).reshape(y.shape[0], -1, y.shape[1]) * scale.to(y.dtype)


def dse_kernels():
    """dse_triton, imported where dse_backend=triton asks for it (Triton is imported nowhere else)."""
    from caraml.workloads.fno import dse_triton
    return dse_triton


def dse_backend_misfit(backend: str, device, modes: int, width: int) -> str | None:
    """Why dse_backend=`backend` cannot run on `device` at these sizes (one line), or None: the kernels need a CUDA
    GPU, Triton and the tensor cores' tiles."""
    if backend == "matmul":
        return None
    misfit = ("runs on CUDA GPUs (Triton's kernels); use dse_backend=matmul here" if device.type != "cuda"
              else dse_kernels().unavailable(modes, width))
    return f"fno: dse_backend={backend} {misfit}" if misfit else None


def _ieee() -> bool:
    """Whether float32 products stay float32 (matmul precision highest) rather than TF32, as cuBLAS is told. Not
    kit.precision.matmul_tf32_allowed: torch.compile cannot trace get_float32_matmul_precision, this flag it can."""
    return not torch.backends.cuda.matmul.allow_tf32


def particle_chunks(p: int) -> int:
    """How many equal chunks the DSE splits P particles into: the most that divides P with chunks of at least
    DSE_CHUNK particles (1 below 2 x DSE_CHUNK)."""
    return max((s for s in range(1, p // DSE_CHUNK + 1) if p % s == 0), default=1)


def kaiser_bessel(t, width: float, beta: float):
    """The Kaiser-Bessel kernel I0(beta sqrt(1 - (2t/w)^2)) / I0(beta) on |t| <= w/2 (peak 1), zero outside."""
    arg = (1 - (2 * t / width) ** 2).clamp_min(0)
    value = torch.special.i0(beta * arg.sqrt()) / _i0(beta)
    return torch.where(t.abs() <= width / 2, value, torch.zeros_like(t))


def kaiser_bessel_ft(xi, width: float, beta: float):
    """Its Fourier transform  int phi(t) exp(-2 pi i xi t) dt = w sinh(s) / (s I0(beta)),
    s = sqrt(beta^2 - (pi w xi)^2)."""
    s2 = beta ** 2 - (math.pi * width * xi) ** 2
    s = s2.abs().sqrt().clamp_min(1e-12)
    return width * torch.where(s2 >= 0, torch.sinh(s) / s, torch.sin(s) / s) / _i0(beta)


def _i0(x: float) -> float:
    """The modified Bessel function I0 of a number (its power series; x is about 9 here)."""
    return sum((x / 2) ** (2 * k) / math.factorial(k) ** 2 for k in range(60))


class NUFFT2d(nn.Module):
    """The 2D direct spectral evaluation sum_j f_j exp(-i k.x_j), k in [-m1, m1) x [0, m2), and its adjoint,
    computed as a Kaiser-Bessel NUFFT (width 4, 2x oversampling; about 1e-3 relative error)."""

    def __init__(self, modes: tuple[int, int]):
        super().__init__()
        self.modes = tuple(modes)
        self.block = (2 * modes[0], modes[1])
        self.norm = "backward"  # as DSE
        self.n = KB_OVERSAMPLING * 2 * max(modes)  # oversampled grid per dim: sigma x the full mode range
        self.width = KB_WIDTH
        sigma = KB_OVERSAMPLING
        self.beta = math.pi * math.sqrt((self.width / sigma) ** 2 * (sigma - 0.5) ** 2 - 0.8)  # Beatty et al.
        n, (m1, m2) = self.n, self.modes
        k1 = torch.cat([torch.arange(m1), torch.arange(-m1, 0)]).float()
        k2 = torch.arange(m2).float()
        deconv = 1 / (kaiser_bessel_ft(k1 / n, self.width, self.beta)[:, None]
                      * kaiser_bessel_ft(k2 / n, self.width, self.beta)[None, :])
        self.register_buffer("deconv", deconv, persistent=False)  # [2 m1, m2]

    def describe(self) -> str:
        return (f"Kaiser-Bessel NUFFT of the particle positions in 2D (width {self.width}, 2x oversampled grid "
                f"{self.n}), modes {self.modes[0]}x{self.modes[1]} (pic2d_operator=grid2d)")

    def prepare(self, x):
        """Per kernel point (w^2 of them): flat grid index [B, P] and weight [B, P] of each particle."""
        n, w = self.n, self.width
        pos = x[:, :2].float() * (n / (2 * math.pi))  # grid units, [B, 2, P]
        first = torch.floor(pos - w / 2) + 1  # the first grid point within w/2
        offsets = torch.arange(w, device=x.device, dtype=torch.float32)
        points = first[..., None] + offsets  # [B, 2, P, w]
        weights = kaiser_bessel(points - pos[..., None], w, self.beta)
        index = torch.remainder(points, n).long()
        flat = (index[:, 0, :, :, None] * n + index[:, 1, :, None, :]).flatten(1)  # [B, P*w*w]
        weight = (weights[:, 0, :, :, None] * weights[:, 1, :, None, :]).flatten(1)
        return flat, weight

    def forward(self, x, basis, complex_out: bool):
        flat, weight = basis
        b, c, p = x.shape
        n, (m1, m2) = self.n, self.modes
        taps = flat.shape[-1] // p
        # spread: grid[l] = sum_j f_j phi(l - u_j)
        src = (x[..., None] * weight.view(b, 1, p, taps).to(x.dtype)).reshape(b, c, -1)
        grid = x.new_zeros(b, c, n * n).scatter_add(2, flat.view(b, 1, -1).expand(b, c, -1), src)
        ortho = self.norm == "ortho"  # fp16: scaled FFTs, and the operator / sqrt(P) as the DSE's
        spec = torch.view_as_real(torch.fft.rfft2(grid.view(b, c, n, n), norm="ortho" if ortho else "backward"))
        deconv = self.deconv * (n / math.sqrt(p)) if ortho else self.deconv
        spec = torch.cat([spec[:, :, :m1, :m2], spec[:, :, n - m1:, :m2]], 2) * deconv[..., None].to(x.dtype)
        return torch.view_as_complex(spec.contiguous()) if complex_out else spec

    def inverse(self, y, basis, spatial):
        flat, weight = basis
        n, (m1, m2) = self.n, self.modes
        if y.is_complex():
            y = torch.view_as_real(y)
        p = spatial[-1]
        ortho = self.norm == "ortho"
        deconv = self.deconv * (n / math.sqrt(p)) if ortho else self.deconv
        y = y * deconv[..., None].to(y.dtype)  # [B, C, 2 m1, m2, 2]
        b, c = y.shape[:2]
        full = torch.cat([y[:, :, :m1], y.new_zeros(b, c, n - 2 * m1, m2, 2), y[:, :, m1:]], 2)
        full = F.pad(full, (0, 0, 0, n // 2 + 1 - m2))
        grid = torch.fft.irfft2(torch.view_as_complex(full.contiguous()), s=(n, n),
                                norm="ortho" if ortho else "forward")
        # interpolate: y_j = sum_l grid[l] phi(l - u_j), then 1/P as the DSE
        taps = flat.shape[-1] // p
        vals = torch.gather(grid.reshape(b, c, n * n), 2, flat.view(b, 1, -1).expand(b, c, -1))
        return (vals.view(b, c, p, taps) * weight.view(b, 1, p, taps).to(vals.dtype)).sum(-1) / (1 if ortho else p)


class ParticleIndexNUFFT(nn.Module):
    """CARAML's Kaiser-Bessel path (PIC2D, its `use_kb`): torchkbnufft's NUFFT over the particle index.

    CARAML: KbNufft(im_size=(P,), grid_size=(2P,)) of each channel (cast to complex64) at the trajectory
    omega = torch.arange(-P//2, P//2) (radians per voxel), norm 'ortho' (1/sqrt(2P)); the first kX of the P samples
    mixed by R1[dv, dv, kX]; those kX, zeros elsewhere, through KbNufftAdjoint on the same trajectory; the real
    part. Positions are not used (the y coordinate is just a channel) and kY is not.

    Here the same calls at the kept kX trajectory points only: every sample of a NUFFT is computed on its own, so
    the kept values are the same, and the adjoint of zeros adds nothing (checked against CARAML's full calls in a
    test). The full trajectory cannot be computed at CARAML's P = 100,000 in float32 anyway: torchkbnufft 1.5.2
    rounds the grid positions of frequencies of thousands of radians so far that it indexes out of its
    interpolation table (RuntimeError) for omega in about [-4000, 4000). The kept points, near -P/2, are placed
    with that float32 rounding too: it is torchkbnufft's float32 operator that is CARAML's (a consistent
    forward/adjoint pair), not the exact DFT it approximates at small P. The trajectory is the same for every
    sample and channel, so it is given once (CARAML repeats it per sample and channel), and the modules are
    made once (CARAML makes them at every call).

    backend 'matrix': the kept points' forward is a fixed [kX, P] complex matrix, the conjugate transpose of the
    adjoint's A; A is taken once from KbNufftAdjoint of the kX unit vectors (float32, the same rounding) and
    stored as G = [Re A; -Im A] [2 kX, P]: forward (re | im) = x G^T, inverse = (re | im) G, two real matmuls.
    The products run in float64 (MATRIX_PRODUCT_DTYPE), whatever the float32 matmul precision: under TF32 (CARAML's
    'high') their sums over P particles were off by ~5e-4 relative and the spectral weights' gradients by up to
    8e-3 (emulated on a CPU; 8e-4 measured on an H200), while torchkbnufft interpolates without matmuls.

    On the meta device (FLOP counting) torchkbnufft cannot run (it reads sizes from its buffers): the FFTs it
    runs (complex, 2P points, forward and adjoint) stand in on the shapes; its interpolation is a gather, which
    the FLOP convention does not count.
    """

    def __init__(self, modes: tuple[int, ...], particles: int, backend: str = "torchkbnufft"):
        super().__init__()
        if backend not in NUFFT_BACKENDS:
            raise ValueError(f"nufft backend {backend!r}: choose one of {', '.join(NUFFT_BACKENDS)}")
        p, kx = particles, modes[0]
        if not 1 <= kx <= p:
            raise ValueError(f"kX={kx} modes need 1 <= kX <= particles ({p})")
        self.modes, self.particles, self.backend = tuple(modes), p, backend
        self.block = (kx,)  # kX only: CARAML's weights R1[dv, dv, kX]; kY is not used
        self.norm = "ortho"
        self.shapes_only = torch.empty(0).device.type == "meta"
        kept = torch.arange(-p // 2, p // 2, dtype=torch.float32)[None, :kx]  # CARAML's trajectory, its first kX
        self.register_buffer("trajectory", kept, persistent=False)
        if self.shapes_only:
            if backend == "matrix":
                self.register_buffer("matrix", torch.empty(2 * kx, p, dtype=MATRIX_PRODUCT_DTYPE), persistent=False)
            return
        with torch.device("cpu"):
            from torchkbnufft import KbNufft, KbNufftAdjoint

            adjoint = KbNufftAdjoint(im_size=(p,), grid_size=(2 * p,))
            units = torch.eye(kx, dtype=torch.complex64)[:, None, :]  # [kX, 1, kX]: one kept mode each
            try:
                with torch.no_grad():
                    a = adjoint(units, kept, norm="ortho")[:, 0]  # [kX, P]; also a check that torchkbnufft can
            except RuntimeError as exc:
                raise ValueError(f"torchkbnufft cannot place the first {kx} trajectory points at {p} particles in "
                                 f"float32 ({str(exc).splitlines()[-1][:120]}); try other particles or modes") from None
        if backend == "matrix":
            matrix = torch.cat([a.real, -a.imag]).to(MATRIX_PRODUCT_DTYPE).contiguous()  # exact: float32 values
            self.register_buffer("matrix", matrix, persistent=False)
        else:
            self.nufft, self.adjoint = KbNufft(im_size=(p,), grid_size=(2 * p,)), adjoint

    def describe(self) -> str:
        p, kx = self.particles, self.block[0]
        how = ("torchkbnufft KbNufft/KbNufftAdjoint" if self.backend == "torchkbnufft"
               else "torchkbnufft's operator as a dense [2 kX, P] matrix, float64 products (nufft_backend=matrix)")
        return (f"CARAML's Kaiser-Bessel NUFFT over the particle index (im_size ({p},), grid {2 * p}, trajectory "
                f"-P/2..P/2-1 rad, norm ortho, float32), first kX={kx} points kept, kY unused: {how}")

    def prepare(self, x):
        if x.shape[-1] != self.particles:
            raise ValueError(f"the operator was made for {self.particles} particles; the input has {x.shape[-1]}")
        return None

    def forward(self, x, basis, complex_out: bool):
        b, c, p = x.shape
        kx = self.block[0]
        if self.backend == "matrix":
            spec = torch.matmul(x.to(self.matrix.dtype), self.matrix.t()).to(x.dtype)
            spec = spec.view(b, c, 2, kx).transpose(-1, -2)  # [B, C, kX, 2]
            return torch.view_as_complex(spec.contiguous()) if complex_out else spec
        z = x.to(torch.complex64).reshape(b * c, 1, p)
        if self.shapes_only:
            spec = torch.fft.fft(F.pad(z, (0, p)), norm="ortho")[..., :kx]
        else:
            spec = self.nufft(z, self.trajectory, norm="ortho")
        spec = spec.reshape(b, c, kx)
        return spec if complex_out else torch.view_as_real(spec)

    def inverse(self, y, basis, spatial):
        p, kx = spatial[-1], self.block[0]
        b, c = y.shape[:2]
        if self.backend == "matrix":
            if y.is_complex():
                y = torch.view_as_real(y)
            flat = y.transpose(-1, -2).reshape(b, c, 2 * kx)
            return torch.matmul(flat.to(self.matrix.dtype), self.matrix).to(y.dtype)
        z = y if y.is_complex() else torch.view_as_complex(y.contiguous())
        z = z.to(torch.complex64).reshape(b * c, 1, kx)
        if self.shapes_only:
            out = torch.fft.ifft(F.pad(z, (0, 2 * p - kx)), norm="ortho")[..., :p]
        else:
            out = self.adjoint(z, self.trajectory, norm="ortho")
        return out.real.reshape(b, c, p)


def _compiling() -> bool:
    """Whether torch.compile is tracing this call (torch >= 2.3: torch.compiler.is_compiling)."""
    check = getattr(torch.compiler, "is_compiling", None) or torch._dynamo.is_compiling
    return bool(check())


def no_autocast(t):
    """Autocast off for the device of `t` (the meta device used to count FLOPs has no autocast)."""
    if t.device.type in ("cuda", "cpu", "xpu", "mps", "hpu"):
        return torch.autocast(t.device.type, enabled=False)
    return contextlib.nullcontext()


# the operator -------------------------------------------------------------------------------------
class FNO(nn.Module):
    """kind: grid (GridFFT), dse (DSE), kbnufft (ParticleIndexNUFFT: needs `particles`, computed by
    `nufft_backend`) or nufft (NUFFT2d)."""

    def __init__(self, in_channels: int, out_channels: int, width: int, modes: tuple[int, ...], layers: int,
                 kind: str = "grid", complex_weights: bool = False, half_spectral: bool = False,
                 particles: int = 0, nufft_backend: str = "torchkbnufft", dse_layout: str = "channels-first",
                 dse_backend: str = "matmul"):
        super().__init__()
        if dse_layout not in DSE_LAYOUTS:
            raise ValueError(f"dse layout {dse_layout!r}: choose one of {', '.join(DSE_LAYOUTS)}")
        self.kind, self.half_spectral, self.complex_weights = kind, half_spectral, complex_weights
        # activations [B, P, C] (DSE only): see DSE
        self.channels_last = kind == "dse" and dse_layout == "channels-last"
        if dse_backend not in DSE_BACKENDS:
            raise ValueError(f"dse backend {dse_backend!r}: choose one of {', '.join(DSE_BACKENDS)}")
        if dse_backend != "matmul" and not (self.channels_last and not half_spectral):
            raise ValueError(f"dse_backend={dse_backend} needs the DSE in channels-last layout on float32 spectra")
        if kind == "kbnufft":
            if half_spectral:
                raise ValueError("CARAML's PIC2D operator runs in complex64 (torchkbnufft): no fp16 spectra")
            self.transform = ParticleIndexNUFFT(modes, particles, nufft_backend)
        elif kind == "dse":
            self.transform = DSE(modes, channels_last=self.channels_last, backend=dse_backend)
        else:
            self.transform = {"grid": GridFFT, "nufft": NUFFT2d}[kind](modes)
        if half_spectral:
            self.transform.norm = "ortho"
        self.lift = Pointwise(in_channels, width)
        self.spectral = nn.ModuleList(SpectralWeights(width, width, self.transform.block, complex_weights)
                                      for _ in range(layers))
        self.skips = nn.ModuleList(Pointwise(width, width) for _ in range(layers))
        hidden = PROJECTION_EXPANSION * width
        self.project = Pointwise(width, hidden)
        self.out = Pointwise(hidden, out_channels)
        self._spectral_conv = self.spectral_conv  # replaced by an uncompiled version for compile_scope=pointwise

    def exclude_spectral_from_compile(self) -> None:
        """Let torch.compile treat only the pointwise parts; FFTs and spectral products run eagerly."""
        self._spectral_conv = torch.compiler.disable(self.spectral_conv, recursive=True)

    def spectral_conv(self, h, i: int, basis):
        """transform -> per-mode mixing -> inverse, in fp32 (or fp16 with half_spectral) whatever autocast says."""
        dtype = torch.float16 if self.half_spectral else torch.float32
        with no_autocast(h):
            h = h.to(dtype)
            spec = self.transform(h, basis, self.complex_weights)
            return self.transform.inverse(self.spectral[i](spec), basis, tuple(h.shape[2:]))

    def forward(self, x):
        with no_autocast(x):
            basis = self.transform.prepare(x)
        if self.channels_last:
            return self._forward_channels_last(x, basis)
        h = self.lift(x)
        for i, skip in enumerate(self.skips):
            h = F.gelu(self._spectral_conv(h, i, basis) + skip(h))  # every layer, the last included (CARAML)
        return self.out(F.gelu(self.project(h)))

    def _forward_channels_last(self, x, basis):
        """The same layers on [B, P, C] activations: the pointwise layers as F.linear (no layout copies)."""
        h = F.linear(x.transpose(1, 2), self.lift.weight, self.lift.bias)  # [B, P, width]
        if self.transform.fuses_layers(h):
            h = self._fused_layers(h, basis)
        else:
            for i, skip in enumerate(self.skips):
                h = F.gelu(self._spectral_conv(h, i, basis) + F.linear(h, skip.weight, skip.bias))
        if self.out.weight.shape[0] == 1 and self.transform.fuses_layers(h):  # one kernel each way, H in registers
            return dse_kernels().head(h, self.project.weight, self.project.bias, self.out.weight[0], self.out.bias,
                                      _ieee())[:, None]
        h = F.gelu(F.linear(h, self.project.weight, self.project.bias))
        if self.out.weight.shape[0] == 1 and _compiling():
            # one output channel (PIC1D): a weighted sum over the hidden channels, which inductor fuses with the
            # GELU, so that the 4 x width hidden activation is read once and its GELU never written
            return ((h * self.out.weight[0]).sum(-1, keepdim=True) + self.out.bias).transpose(1, 2)
        return F.linear(h, self.out.weight, self.out.bias).transpose(1, 2)  # [B, out, P]

    def _fused_layers(self, h, basis):
        """dse_backend=triton-fused: each layer one kernel after its spectrum, which the layer before made."""
        with no_autocast(h):
            spec = self.transform(h, basis, False)
            for i, skip in enumerate(self.skips):
                h, spec = self.transform.inverse_skip_gelu(self.spectral[i](spec), basis, h, skip)
        return h


def build_model(problem, width: int, modes: tuple[int, ...], layers: int, complex_weights: bool = False,
                half_spectral: bool = False, particles: int = 0, nufft_backend: str = "torchkbnufft",
                dse_layout: str = "channels-first", dse_backend: str = "matmul") -> FNO:
    """The problem's operator; `particles` (PIC: the input's particles, else the problem's) sizes PIC2D's."""
    return FNO(problem.in_channels, problem.out_channels, width, modes, layers, kind=problem.kind,
               complex_weights=complex_weights, half_spectral=half_spectral,
               particles=particles or problem.particles, nufft_backend=nufft_backend, dse_layout=dse_layout,
               dse_backend=dse_backend)


def count_parameters(model: nn.Module) -> int:
    """Real numbers learned: a complex weight counts twice, so both weight kinds give the same count."""
    return sum(p.numel() * (2 if p.is_complex() else 1) for p in model.parameters())
