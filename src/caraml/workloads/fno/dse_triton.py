"""PIC1D's two DSE products with the Vandermonde matrix made inside the kernel (dse_backend=triton).

The matmul backend builds V [B, 2m, P] (rows cos(k x_j) and -sin(k x_j)) once per step and every layer's forward
and inverse transform reads it: 256 MB per read at CARAML's shapes, both passes. Here each kernel computes its tile
of V from the positions (4 bytes a particle) in registers and feeds it to the tensor cores:

    spectrum(x, h)[b, r, c]  = sum_j V[b, r, j] h[b, j, c]      (the forward transform: V @ h)
    synthesis(x, y)[b, j, c] = sum_r V[b, r, j] y[b, r, c]      (the inverse: V^T @ y, y already scaled)

Each is the other's backward (d h = synthesis(x, d spectrum), d y = spectrum(x, d synthesis)), so two kernels
serve training. The positions get no gradient (they are data). The spectrum splits the particles into
chunks, one program each, and sums the partial spectra afterwards (deterministic, as the matmul backend's
chunks). Products in TF32 unless torch's float32 matmul precision is "highest" (then IEEE fp32),
as cuBLAS does for the matmul backend. Registered as torch.library ops (torch >= 2.6), so torch.compile keeps
them in its graph. Triton's interpreter (TRITON_INTERPRET=1) runs them on the CPU: the tests' way.
"""

from __future__ import annotations

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton: the backend is refused (unavailable)
    triton = None

BLOCK_P = 128  # particles per tile
CHUNK_P = 2048  # the spectrum's particles per program, at least: B x P / CHUNK_P programs sum partial spectra


def unavailable(modes: int, width: int) -> str | None:
    """Why dse_backend=triton cannot run here at these sizes (one line), or None."""
    if triton is None:
        return "needs Triton (it comes with PyTorch's CUDA wheels on Linux)"
    if not hasattr(torch.library, "triton_op"):
        return f"needs torch >= 2.6 (torch.library.triton_op); this is {torch.__version__}"
    for name, n in (("2 x modes", 2 * modes), ("width", width)):
        if n < 16 or n & (n - 1):
            return f"needs {name} a power of two >= 16 (the tensor cores' tile); it is {n}"
    return None


if triton is not None and hasattr(torch.library, "triton_op"):  # else unavailable() says why
    @triton.jit
    def _basis(x, rows, M: tl.constexpr):
        """V's tile [rows, particles]: cos(k x) for rows k < M, -sin(k x) = cos(k x + pi/2) for the rows M + k, so
        one cosine per element. The phase k x is the matmul backend's fp32 product, reduced to [-pi, pi] (where the
        cosine needs no slow path); the quarter turn is added after the reduction, so it rounds at pi's scale, not
        at k x's."""
        k = (rows % M).to(tl.float32)
        phase = k[:, None] * x[None, :]
        phase = phase - 6.283185307179586 * tl.floor(phase * 0.15915494309189535 + 0.5)  # 2 pi whole turns off
        phase = phase + tl.where(rows < M, 0.0, 1.5707963267948966)[:, None]
        phase = tl.where(phase > 3.141592653589793, phase - 6.283185307179586, phase)
        return tl.cos(phase)

    @triton.jit
    def _spectrum_kernel(x_ptr, h_ptr, out_ptr, P, CHUNK, M: tl.constexpr, C: tl.constexpr,
                         BLOCK: tl.constexpr, IEEE: tl.constexpr):
        b = tl.program_id(0)
        s = tl.program_id(1)
        rows = tl.arange(0, 2 * M)
        cols = tl.arange(0, C)
        acc = tl.zeros((2 * M, C), dtype=tl.float32)
        end = tl.minimum(s * CHUNK + CHUNK, P)
        for start in range(s * CHUNK, end, BLOCK):
            j = start + tl.arange(0, BLOCK)
            inside = j < end
            x = tl.load(x_ptr + b * P + j, mask=inside, other=0.0)
            h = tl.load(h_ptr + (b * P + j)[:, None] * C + cols[None, :], mask=inside[:, None], other=0.0)
            acc = tl.dot(_basis(x, rows, M), h, acc, input_precision="ieee" if IEEE else "tf32")  # h 0 outside
        tl.store(out_ptr + ((b * tl.num_programs(1) + s) * 2 * M + rows[:, None]) * C + cols[None, :], acc)

    @triton.jit
    def _synthesis_kernel(x_ptr, y_ptr, out_ptr, P, M: tl.constexpr, C: tl.constexpr,
                          BLOCK: tl.constexpr, IEEE: tl.constexpr):
        b = tl.program_id(0)
        j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = j < P
        rows = tl.arange(0, 2 * M)
        cols = tl.arange(0, C)
        x = tl.load(x_ptr + b * P + j, mask=inside, other=0.0)
        vt = tl.trans(_basis(x, rows, M))  # [particles, 2M]
        y = tl.load(y_ptr + (b * 2 * M + rows[:, None]) * C + cols[None, :])
        out = tl.dot(vt, y, input_precision="ieee" if IEEE else "tf32")
        tl.store(out_ptr + (b * P + j)[:, None] * C + cols[None, :], out, mask=inside[:, None])

    @torch.library.triton_op("caraml::dse_spectrum", mutates_args=())
    def spectrum(x: torch.Tensor, h: torch.Tensor, modes: int, ieee: bool) -> torch.Tensor:
        """x [B, P] positions, h [B, P, C] float32 -> V @ h [B, 2 modes, C], summed from chunks of >= CHUNK_P."""
        b, p, c = h.shape
        chunks = max(1, p // CHUNK_P)
        chunk = -(-p // chunks)
        partial = torch.empty(b, chunks, 2 * modes, c, device=h.device, dtype=torch.float32)
        torch.library.wrap_triton(_spectrum_kernel)[(b, chunks)](
            x, h, partial, p, chunk, M=modes, C=c, BLOCK=BLOCK_P, IEEE=ieee)
        return partial.sum(1)

    @torch.library.triton_op("caraml::dse_synthesis", mutates_args=())
    def synthesis(x: torch.Tensor, y: torch.Tensor, ieee: bool) -> torch.Tensor:
        """x [B, P] positions, y [B, 2m, C] float32 -> V^T @ y [B, P, C]."""
        b, p = x.shape
        rows, c = y.shape[1:]
        out = torch.empty(b, p, c, device=y.device, dtype=torch.float32)
        torch.library.wrap_triton(_synthesis_kernel)[(b, triton.cdiv(p, BLOCK_P))](
            x, y, out, p, M=rows // 2, C=c, BLOCK=BLOCK_P, IEEE=ieee)
        return out

    def _keep_spectrum(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.ieee = inputs[3]

    def _spectrum_backward(ctx, grad):
        return None, synthesis(ctx.saved_tensors[0], grad.contiguous(), ctx.ieee), None, None

    def _keep_synthesis(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.ieee, ctx.modes = inputs[2], inputs[1].shape[1] // 2

    def _synthesis_backward(ctx, grad):
        return None, spectrum(ctx.saved_tensors[0], grad.contiguous(), ctx.modes, ctx.ieee), None

    spectrum.register_autograd(_spectrum_backward, setup_context=_keep_spectrum)
    synthesis.register_autograd(_synthesis_backward, setup_context=_keep_synthesis)

