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

dse_backend=triton-fused adds two ops that make whole layers, so that no [B, P, C] tensor is written but each
layer's output and the gradients of its input:

    layer(x, y, h, W, b) = (out, V @ out),  out = GELU(V^T y + h W^T + b)   (a Fourier layer after its spectrum,
                                                                            and the next layer's spectrum)
    head(h, Wp, bp, v, c)[b, j] = GELU(h Wp^T + bp)[b, j, :] . v + c     (PIC1D's one-channel projection)

Their backward kernels make the pre-activations again from h (never stored) and sum the weights' gradients per
chunk of particles, as the spectrum does.
"""

from __future__ import annotations

import math
import os

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton: the backend is refused (unavailable)
    triton = None

BLOCK_P = 128  # particles per tile of the spectrum and synthesis kernels
FUSED_BLOCK_P = 64  # particles per tile of triton-fused's layer kernels: at 128 their backward spills (ptxas)
HEAD_BLOCK_P = 64  # the head's particles per tile: its [particles, 4 x width] tiles are 4 times as wide
HEAD_HIDDEN_CHUNK = 32  # hidden units per program of the head's weight gradients (a power of two, as the width)
FUSED_WARPS = 4  # warps per program of triton-fused's kernels (layer, head, their gradients)
CHUNK_P = 2048  # the spectrum's particles per program, at least: B x P / CHUNK_P programs sum partial spectra
# Under TF32 products V's cosines come from the GPU's approximate unit (cos.approx, absolute error below 2^-20 on
# [-pi, pi]): the products round V to TF32 (2^-11) anyway. IEEE products keep the accurate cosine.
APPROX_COS = 1
# Under TF32 products every operand is rounded to TF32 (to nearest) once, where it is made or read, as cuBLAS rounds:
# Triton hands the tensor cores float32 bits, which they truncate (triton-lang/triton#4574), a bias toward zero that
# scales each product and adds up through the layers (truncated, triton-fused's gradients were 4.7e-3 off on an H100,
# six times the matmul backend's 7.8e-4 against the same reference; with only the sums over particles rounded still
# 3.0e-3).
ROUND_TF32 = 1
TUNABLE = ("BLOCK_P", "FUSED_BLOCK_P", "HEAD_BLOCK_P", "HEAD_HIDDEN_CHUNK", "FUSED_WARPS", "CHUNK_P", "APPROX_COS",
           "ROUND_TF32")  # what a benchmark may set (set_constant)


def set_constant(name: str, value: str) -> None:
    """One of the kernels' module constants set for this process (a benchmark's variant); read at each launch."""
    from caraml.errors import BadInput

    if name not in TUNABLE or not value.isdigit():
        raise BadInput(f"dse_triton.{name}={value}: expected one of {', '.join(TUNABLE)} = a non-negative integer")
    globals()[name] = int(value)


def launches() -> dict[str, tuple[int, int]]:
    """Each kernel's particles per tile (BLOCK) and warps per program, as its op launches it. Read at each launch,
    so that the constants a profile variant sets hold; ahead_of_time compiles the same."""
    return {"_spectrum_kernel": (BLOCK_P, 4), "_synthesis_kernel": (BLOCK_P, 4),
            "_layer_kernel": (FUSED_BLOCK_P, FUSED_WARPS), "_layer_grad_kernel": (FUSED_BLOCK_P, FUSED_WARPS),
            "_head_kernel": (HEAD_BLOCK_P, FUSED_WARPS), "_head_grad_kernel": (HEAD_BLOCK_P, FUSED_WARPS),
            "_head_weight_grad_kernel": (HEAD_BLOCK_P, FUSED_WARPS)}


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
    from triton.language.extra.cuda import libdevice  # Triton >= 3 (what torch >= 2.6 brings)

    @triton.jit
    def _basis(x, rows, M: tl.constexpr, APPROX: tl.constexpr):
        """V's tile [rows, particles]: cos(k x) for rows k < M, -sin(k x) = cos(k x + pi/2) for the rows M + k, so
        one cosine per element. The phase k x is the matmul backend's fp32 product, reduced to [-pi, pi] (where the
        cosine needs no slow path); the quarter turn is added after the reduction, so it rounds at pi's scale, not
        at k x's. APPROX: the GPU's approximate cosine (_approx_cos says when)."""
        k = (rows % M).to(tl.float32)
        phase = k[:, None] * x[None, :]
        phase = phase - 6.283185307179586 * tl.floor(phase * 0.15915494309189535 + 0.5)  # 2 pi whole turns off
        phase = phase + tl.where(rows < M, 0.0, 1.5707963267948966)[:, None]
        phase = tl.where(phase > 3.141592653589793, phase - 6.283185307179586, phase)
        if APPROX:
            return libdevice.fast_cosf(phase)
        return tl.cos(phase)

    @triton.jit
    def _tf32(x, ROUND: tl.constexpr):
        """x rounded to TF32 (to nearest) where ROUND: a TF32 product's operand, rounded once where it is made."""
        if ROUND:
            return tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,f", [x], dtype=tl.int32, is_pure=True,
                                             pack=1).to(tl.float32, bitcast=True)
        return x

    @triton.jit
    def _dot(a, b, acc, IEEE: tl.constexpr):
        """a b + acc on the tensor cores: IEEE float32, else TF32 (its operands rounded by _tf32 where made)."""
        return tl.dot(a, b, acc, input_precision="ieee" if IEEE else "tf32")

    @triton.jit
    def _spectrum_kernel(x_ptr, h_ptr, out_ptr, P, CHUNK, M: tl.constexpr, C: tl.constexpr,
                         BLOCK: tl.constexpr, IEEE: tl.constexpr, ROUND: tl.constexpr, APPROX: tl.constexpr):
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
            acc = _dot(_tf32(_basis(x, rows, M, APPROX), ROUND), _tf32(h, ROUND), acc, IEEE)  # h 0 outside
        tl.store(out_ptr + ((b * tl.num_programs(1) + s) * 2 * M + rows[:, None]) * C + cols[None, :], acc)

    @triton.jit
    def _synthesis_kernel(x_ptr, y_ptr, out_ptr, P, M: tl.constexpr, C: tl.constexpr,
                          BLOCK: tl.constexpr, IEEE: tl.constexpr, ROUND: tl.constexpr, APPROX: tl.constexpr):
        b = tl.program_id(0)
        j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = j < P
        rows = tl.arange(0, 2 * M)
        cols = tl.arange(0, C)
        x = tl.load(x_ptr + b * P + j, mask=inside, other=0.0)
        vt = tl.trans(_tf32(_basis(x, rows, M, APPROX), ROUND))  # [particles, 2M]
        y = _tf32(tl.load(y_ptr + (b * 2 * M + rows[:, None]) * C + cols[None, :]), ROUND)
        out = _dot(vt, y, None, IEEE)
        tl.store(out_ptr + (b * P + j)[:, None] * C + cols[None, :], out, mask=inside[:, None])

    @triton.jit
    def _gelu(z):
        return 0.5 * z * (1 + tl.erf(z * 0.7071067811865476))

    @triton.jit
    def _gelu_grad(z):
        return 0.5 * (1 + tl.erf(z * 0.7071067811865476)) + z * 0.3989422804014327 * tl.exp(-0.5 * z * z)

    @triton.jit
    def _layer_operands(y_ptr, w_ptr, bias_ptr, b, M: tl.constexpr, C: tl.constexpr, ROUND: tl.constexpr):
        """What a layer's program reads once: y [2M, C] of sample b, W^T [C in, C out], the bias [1, C]."""
        rows = tl.arange(0, 2 * M)
        cols = tl.arange(0, C)
        y = _tf32(tl.load(y_ptr + (b * 2 * M + rows[:, None]) * C + cols[None, :]), ROUND)
        return y, _tf32(tl.load(w_ptr + cols[None, :] * C + cols[:, None]), ROUND), tl.load(bias_ptr + cols)[None, :]

    @triton.jit
    def _pre_activation(x_ptr, h_ptr, y, w_t, bias, b, j, inside, P, M: tl.constexpr, C: tl.constexpr,
                        IEEE: tl.constexpr, ROUND: tl.constexpr, APPROX: tl.constexpr):
        """A layer's z = V^T y + h W^T + bias for particles j of sample b ([particles, C]); V's tile and h too."""
        cols = tl.arange(0, C)
        x = tl.load(x_ptr + b * P + j, mask=inside, other=0.0)
        v = _tf32(_basis(x, tl.arange(0, 2 * M), M, APPROX), ROUND)  # [2M, particles]
        h = _tf32(tl.load(h_ptr + (b * P + j)[:, None] * C + cols[None, :], mask=inside[:, None], other=0.0), ROUND)
        return _dot(h, w_t, _dot(tl.trans(v), y, None, IEEE), IEEE) + bias, v, h

    @triton.jit
    def _layer_kernel(x_ptr, y_ptr, h_ptr, w_ptr, bias_ptr, out_ptr, spec_ptr, P, CHUNK, M: tl.constexpr,
                      C: tl.constexpr, BLOCK: tl.constexpr, IEEE: tl.constexpr, ROUND: tl.constexpr,
                      APPROX: tl.constexpr):
        """out = GELU(z) per tile, and this chunk's part of the next layer's spectrum V out (V's tile made once)."""
        b = tl.program_id(0)
        s = tl.program_id(1)
        rows = tl.arange(0, 2 * M)
        cols = tl.arange(0, C)
        y, w_t, bias = _layer_operands(y_ptr, w_ptr, bias_ptr, b, M, C, ROUND)
        acc = tl.zeros((2 * M, C), dtype=tl.float32)
        end = tl.minimum(s * CHUNK + CHUNK, P)
        for start in range(s * CHUNK, end, BLOCK):
            j = start + tl.arange(0, BLOCK)
            inside = j < end
            z, v, _ = _pre_activation(x_ptr, h_ptr, y, w_t, bias, b, j, inside, P, M, C, IEEE, ROUND, APPROX)
            out = tl.where(inside[:, None], _gelu(z), 0.0)
            tl.store(out_ptr + (b * P + j)[:, None] * C + cols[None, :], out, mask=inside[:, None])
            acc = _dot(v, _tf32(out, ROUND), acc, IEEE)
        tl.store(spec_ptr + ((b * tl.num_programs(1) + s) * 2 * M + rows[:, None]) * C + cols[None, :], acc)

    @triton.jit
    def _layer_grad_kernel(x_ptr, y_ptr, h_ptr, w_ptr, bias_ptr, g_ptr, gs_ptr, dh_ptr, dy_ptr, dw_ptr, dbias_ptr, P,
                           CHUNK, M: tl.constexpr, C: tl.constexpr, BLOCK: tl.constexpr, IEEE: tl.constexpr,
                           ROUND: tl.constexpr, APPROX: tl.constexpr):
        """The output's gradient g plus V^T gs (the next spectrum's); z made again from h (never stored),
        dz = g GELU'(z); dh's skip part dz W per tile; this chunk's partial sums of dy = V dz, dW = dz^T h, dbias."""
        b = tl.program_id(0)
        s = tl.program_id(1)
        rows = tl.arange(0, 2 * M)
        cols = tl.arange(0, C)
        y, w_t, bias = _layer_operands(y_ptr, w_ptr, bias_ptr, b, M, C, ROUND)
        gs = _tf32(tl.load(gs_ptr + (b * 2 * M + rows[:, None]) * C + cols[None, :]), ROUND)
        acc_y = tl.zeros((2 * M, C), dtype=tl.float32)
        acc_w = tl.zeros((C, C), dtype=tl.float32)
        acc_bias = tl.zeros((C,), dtype=tl.float32)
        end = tl.minimum(s * CHUNK + CHUNK, P)
        for start in range(s * CHUNK, end, BLOCK):
            j = start + tl.arange(0, BLOCK)
            inside = j < end
            z, v, h = _pre_activation(x_ptr, h_ptr, y, w_t, bias, b, j, inside, P, M, C, IEEE, ROUND, APPROX)
            at = (b * P + j)[:, None] * C + cols[None, :]
            g = tl.load(g_ptr + at, mask=inside[:, None], other=0.0)
            g = _dot(tl.trans(v), gs, g, IEEE)
            dz = tl.where(inside[:, None], g * _gelu_grad(z), 0.0)
            dz_products = _tf32(dz, ROUND)
            tl.store(dh_ptr + at, _dot(dz_products, tl.trans(w_t), None, IEEE), mask=inside[:, None])
            acc_y = _dot(v, dz_products, acc_y, IEEE)
            acc_w = _dot(tl.trans(dz_products), h, acc_w, IEEE)
            acc_bias += tl.sum(dz, 0)
        program = b * tl.num_programs(1) + s
        tl.store(dy_ptr + (program * 2 * M + rows[:, None]) * C + cols[None, :], acc_y)
        tl.store(dw_ptr + (program * C + cols[:, None]) * C + cols[None, :], acc_w)
        tl.store(dbias_ptr + program * C + cols, acc_bias)

    @triton.jit
    def _head_operands(w_ptr, bias_ptr, v_ptr, first, C: tl.constexpr, H: tl.constexpr, ROUND: tl.constexpr):
        """What a head's program reads once of hidden units first ... first + H: W^T [C, H], the bias [1, H], the
        output weights v [1, H]."""
        cols = tl.arange(0, C)
        hidden = first + tl.arange(0, H)
        w_t = _tf32(tl.load(w_ptr + hidden[None, :] * C + cols[:, None]), ROUND)
        return w_t, tl.load(bias_ptr + hidden)[None, :], tl.load(v_ptr + hidden)[None, :]

    @triton.jit
    def _head_pre(h_ptr, w_t, bias, b, j, inside, P, C: tl.constexpr, IEEE: tl.constexpr, ROUND: tl.constexpr):
        """The projection's z = h W^T + bias [particles, H] for particles j of sample b, and h."""
        h = _tf32(tl.load(h_ptr + (b * P + j)[:, None] * C + tl.arange(0, C)[None, :], mask=inside[:, None],
                          other=0.0), ROUND)
        return _dot(h, w_t, None, IEEE) + bias, h

    @triton.jit
    def _head_kernel(h_ptr, w_ptr, bias_ptr, v_ptr, out_bias_ptr, out_ptr, P, C: tl.constexpr, H: tl.constexpr,
                     BLOCK: tl.constexpr, IEEE: tl.constexpr, ROUND: tl.constexpr):
        b = tl.program_id(0)
        j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = j < P
        w_t, bias, v = _head_operands(w_ptr, bias_ptr, v_ptr, 0, C, H, ROUND)
        z, _ = _head_pre(h_ptr, w_t, bias, b, j, inside, P, C, IEEE, ROUND)
        tl.store(out_ptr + b * P + j, tl.sum(_gelu(z) * v, 1) + tl.load(out_bias_ptr), mask=inside)

    @triton.jit
    def _head_grad_kernel(h_ptr, w_ptr, bias_ptr, v_ptr, g_ptr, dh_ptr, P, C: tl.constexpr, H: tl.constexpr,
                          BLOCK: tl.constexpr, IEEE: tl.constexpr, ROUND: tl.constexpr):
        """dh = dz W per tile, dz = g v GELU'(z), z made again from h. The weights' gradients are the next kernel's
        (summed beside dh, their [H, C] accumulator spilled 2 KB a thread: ptxas, sm_90)."""
        b = tl.program_id(0)
        j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        inside = j < P
        w_t, bias, v = _head_operands(w_ptr, bias_ptr, v_ptr, 0, C, H, ROUND)
        z, _ = _head_pre(h_ptr, w_t, bias, b, j, inside, P, C, IEEE, ROUND)
        g = tl.load(g_ptr + b * P + j, mask=inside, other=0.0)[:, None]
        dz = _tf32(g * v * _gelu_grad(z), ROUND)
        tl.store(dh_ptr + (b * P + j)[:, None] * C + tl.arange(0, C)[None, :], _dot(dz, tl.trans(w_t), None, IEEE),
                 mask=inside[:, None])

    @triton.jit
    def _head_weight_grad_kernel(h_ptr, w_ptr, bias_ptr, v_ptr, g_ptr, dw_ptr, dbias_ptr, dv_ptr, P, CHUNK,
                                 C: tl.constexpr, H: tl.constexpr, HC: tl.constexpr, BLOCK: tl.constexpr,
                                 IEEE: tl.constexpr, ROUND: tl.constexpr):
        """This chunk's partial dW, dbias, dv for hidden units k HC ... (k + 1) HC (program axis 2): z and dz made
        again for those units only, so the accumulators stay in registers."""
        b = tl.program_id(0)
        s = tl.program_id(1)
        first = tl.program_id(2) * HC
        cols = tl.arange(0, C)
        hidden = first + tl.arange(0, HC)
        w_t, bias, v = _head_operands(w_ptr, bias_ptr, v_ptr, first, C, HC, ROUND)
        acc_w = tl.zeros((HC, C), dtype=tl.float32)
        acc_bias = tl.zeros((HC,), dtype=tl.float32)
        acc_v = tl.zeros((HC,), dtype=tl.float32)
        end = tl.minimum(s * CHUNK + CHUNK, P)
        for start in range(s * CHUNK, end, BLOCK):
            j = start + tl.arange(0, BLOCK)
            inside = j < end
            z, h = _head_pre(h_ptr, w_t, bias, b, j, inside, P, C, IEEE, ROUND)
            g = tl.load(g_ptr + b * P + j, mask=inside, other=0.0)[:, None]  # 0 outside
            dz = g * v * _gelu_grad(z)
            acc_bias += tl.sum(dz, 0)
            acc_v += tl.sum(g * _gelu(z), 0)
            acc_w = _dot(tl.trans(_tf32(dz, ROUND)), h, acc_w, IEEE)
        program = b * tl.num_programs(1) + s
        tl.store(dw_ptr + (program * H + hidden[:, None]) * C + cols[None, :], acc_w)
        tl.store(dbias_ptr + program * H + hidden, acc_bias)
        tl.store(dv_ptr + program * H + hidden, acc_v)

    def _approx_cos(ieee: bool, gpu: bool | None = None) -> bool:
        """The approximate cosine under TF32 products, on a GPU (Triton's interpreter has no libdevice); gpu None:
        whether the kernels run on one here."""
        return bool(APPROX_COS) and not ieee and (not _interpreting() if gpu is None else gpu)

    def _round_tf32(ieee: bool, gpu: bool | None = None) -> bool:
        """Operands rounded to TF32 before TF32 products, on a GPU (the interpreter's products are float32)."""
        return bool(ROUND_TF32) and not ieee and (not _interpreting() if gpu is None else gpu)

    def _hidden_chunk(hidden: int) -> int:
        """Hidden units per program of the head's weight gradients: a divisor of the hidden width."""
        return math.gcd(HEAD_HIDDEN_CHUNK, hidden)

    def _interpreting() -> bool:
        """Whether Triton runs kernels in its interpreter, by its own setting (older Triton: TRITON_INTERPRET=1)."""
        knobs = getattr(triton, "knobs", None)
        return bool(knobs.runtime.interpret) if knobs is not None else os.environ.get("TRITON_INTERPRET") == "1"

    def _chunks(p: int) -> tuple[int, int]:
        """How many programs share a sample's particles in the summing kernels, and the particles each takes."""
        chunks = max(1, p // CHUNK_P)
        return chunks, -(-p // chunks)

    def ahead_of_time(kernel: str, modes: int, width: int, hidden: int, ieee: bool, arch: int = 90):
        """One kernel compiled by Triton for a CUDA GPU of compute capability `arch` that need not be here (PTX and
        ptxas only, no driver), launched as its op launches it at these sizes: Triton's CompiledKernel, whose
        asm["ptx"] ptxas -v reads for registers and spills (bench/dse_kernels_ptxas.py)."""
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource

        fn = globals()[kernel]
        block, warps = launches()[kernel]
        constants = {"M": modes, "C": width, "H": hidden, "HC": _hidden_chunk(hidden), "BLOCK": block, "IEEE": ieee,
                     "APPROX": _approx_cos(ieee, gpu=True), "ROUND": _round_tf32(ieee, gpu=True)}
        signature, constexprs = {}, {}
        for i, param in enumerate(fn.params):
            if param.is_constexpr:
                signature[param.name], constexprs[(i,)] = "constexpr", constants[param.name]
            else:
                signature[param.name] = "*fp32" if param.name.endswith("_ptr") else "i32"
        return triton.compile(ASTSource(fn=fn, signature=signature, constexprs=constexprs),
                              target=GPUTarget("cuda", arch, 32), options={"num_warps": warps})

    @torch.library.triton_op("caraml::dse_spectrum", mutates_args=())
    def spectrum(x: torch.Tensor, h: torch.Tensor, modes: int, ieee: bool) -> torch.Tensor:
        """x [B, P] positions, h [B, P, C] float32 -> V @ h [B, 2 modes, C], summed from chunks of >= CHUNK_P."""
        b, p, c = h.shape
        chunks, chunk = _chunks(p)
        partial = torch.empty(b, chunks, 2 * modes, c, device=h.device, dtype=torch.float32)
        block, warps = launches()["_spectrum_kernel"]
        torch.library.wrap_triton(_spectrum_kernel)[(b, chunks)](
            x, h, partial, p, chunk, M=modes, C=c, BLOCK=block, IEEE=ieee, ROUND=_round_tf32(ieee),
            APPROX=_approx_cos(ieee), num_warps=warps)
        return partial.sum(1)

    @torch.library.triton_op("caraml::dse_synthesis", mutates_args=())
    def synthesis(x: torch.Tensor, y: torch.Tensor, ieee: bool) -> torch.Tensor:
        """x [B, P] positions, y [B, 2m, C] float32 -> V^T @ y [B, P, C]."""
        b, p = x.shape
        rows, c = y.shape[1:]
        out = torch.empty(b, p, c, device=y.device, dtype=torch.float32)
        block, warps = launches()["_synthesis_kernel"]
        torch.library.wrap_triton(_synthesis_kernel)[(b, triton.cdiv(p, block))](
            x, y, out, p, M=rows // 2, C=c, BLOCK=block, IEEE=ieee, ROUND=_round_tf32(ieee),
            APPROX=_approx_cos(ieee), num_warps=warps)
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

    @torch.library.triton_op("caraml::dse_layer", mutates_args=())
    def layer(x: torch.Tensor, y: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
              ieee: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """A whole Fourier layer after the spectrum: out = GELU(V^T y + h W^T + bias) [B, P, C], and V @ out
        [B, 2m, C], the next layer's spectrum (dse_backend=triton-fused: out written once, read by no product)."""
        b, p, c = h.shape
        rows = y.shape[1]
        chunks, chunk = _chunks(p)
        out = torch.empty_like(h)
        spec = torch.empty(b, chunks, rows, c, device=h.device, dtype=torch.float32)
        block, warps = launches()["_layer_kernel"]
        torch.library.wrap_triton(_layer_kernel)[(b, chunks)](
            x, y, h, weight, bias, out, spec, p, chunk, M=rows // 2, C=c, BLOCK=block, IEEE=ieee,
            ROUND=_round_tf32(ieee), APPROX=_approx_cos(ieee), num_warps=warps)
        return out, spec.sum(1)

    @torch.library.triton_op("caraml::dse_layer_backward", mutates_args=())
    def layer_backward(x: torch.Tensor, y: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       grad: torch.Tensor, grad_spec: torch.Tensor,
                       ieee: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The layer's gradients (dy, dh through the skip product, dW, dbias) from its output's and its spectrum's;
        dh through the layer's own spectrum is the layer before's (or the spectrum op's) backward."""
        b, p, c = h.shape
        rows = y.shape[1]
        chunks, chunk = _chunks(p)
        dh = torch.empty_like(h)
        dy = torch.empty(b, chunks, rows, c, device=h.device, dtype=torch.float32)
        dw = torch.empty(b * chunks, c, c, device=h.device, dtype=torch.float32)
        dbias = torch.empty(b * chunks, c, device=h.device, dtype=torch.float32)
        block, warps = launches()["_layer_grad_kernel"]
        torch.library.wrap_triton(_layer_grad_kernel)[(b, chunks)](
            x, y, h, weight, bias, grad, grad_spec, dh, dy, dw, dbias, p, chunk, M=rows // 2, C=c, BLOCK=block,
            IEEE=ieee, ROUND=_round_tf32(ieee), APPROX=_approx_cos(ieee), num_warps=warps)
        return dy.sum(1), dh, dw.sum(0), dbias.sum(0)

    def _keep_layer(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:5])
        ctx.ieee = inputs[5]

    def _layer_backward(ctx, grad, grad_spec):
        y, h = ctx.saved_tensors[1:3]
        grad = torch.zeros_like(h) if grad is None else grad.contiguous()
        grad_spec = torch.zeros_like(y) if grad_spec is None else grad_spec.contiguous()  # the last layer's
        dy, dh, dw, dbias = layer_backward(*ctx.saved_tensors, grad, grad_spec, ctx.ieee)
        return None, dy, dh, dw, dbias, None

    layer.register_autograd(_layer_backward, setup_context=_keep_layer)

    @torch.library.triton_op("caraml::fno_head", mutates_args=())
    def head(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out_weight: torch.Tensor,
             out_bias: torch.Tensor, ieee: bool) -> torch.Tensor:
        """A one-channel projection head, GELU(h W^T + bias) v + out_bias [B, P] (dse_backend=triton-fused): the
        hidden [B, P, H] activation lives in registers only, both passes."""
        b, p, c = h.shape
        out = torch.empty(b, p, device=h.device, dtype=torch.float32)
        block, warps = launches()["_head_kernel"]
        torch.library.wrap_triton(_head_kernel)[(b, triton.cdiv(p, block))](
            h, weight, bias, out_weight, out_bias, out, p, C=c, H=weight.shape[0], BLOCK=block, IEEE=ieee,
            ROUND=_round_tf32(ieee), num_warps=warps)
        return out

    @torch.library.triton_op("caraml::fno_head_backward", mutates_args=())
    def head_backward(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, out_weight: torch.Tensor,
                      grad: torch.Tensor, ieee: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The head's gradients but out_bias's: dh, dW, dbias, d out_weight."""
        b, p, c = h.shape
        hidden = weight.shape[0]
        chunks, chunk = _chunks(p)
        dh = torch.empty_like(h)
        dw = torch.empty(b * chunks, hidden, c, device=h.device, dtype=torch.float32)
        dbias = torch.empty(b * chunks, hidden, device=h.device, dtype=torch.float32)
        dv = torch.empty(b * chunks, hidden, device=h.device, dtype=torch.float32)
        block, warps = launches()["_head_grad_kernel"]
        torch.library.wrap_triton(_head_grad_kernel)[(b, triton.cdiv(p, block))](
            h, weight, bias, out_weight, grad, dh, p, C=c, H=hidden, BLOCK=block, IEEE=ieee, ROUND=_round_tf32(ieee),
            num_warps=warps)
        block, warps = launches()["_head_weight_grad_kernel"]
        units = _hidden_chunk(hidden)
        torch.library.wrap_triton(_head_weight_grad_kernel)[(b, chunks, hidden // units)](
            h, weight, bias, out_weight, grad, dw, dbias, dv, p, chunk, C=c, H=hidden, HC=units, BLOCK=block,
            IEEE=ieee, ROUND=_round_tf32(ieee), num_warps=warps)
        return dh, dw.sum(0), dbias.sum(0), dv.sum(0)

    def _keep_head(ctx, inputs, output):
        ctx.save_for_backward(*inputs[:4])
        ctx.ieee, ctx.out_bias_shape = inputs[5], inputs[4].shape

    def _head_backward(ctx, grad):
        dh, dw, dbias, dv = head_backward(*ctx.saved_tensors, grad.contiguous(), ctx.ieee)
        return dh, dw, dbias, dv, grad.sum().reshape(ctx.out_bias_shape), None

    head.register_autograd(_head_backward, setup_context=_keep_head)
