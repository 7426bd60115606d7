"""ISA layer: microscaling (MX) instructions of NeuronCore-v4, new generation (spec/isa.md §5.2, §6.12).

Imports the ISA base and the PSUM write of tensor_engine.py. MX data is packed: a `float8_e5m2_x4` /
`float8_e4m3fn_x4` element is a 32-bit word holding 4 consecutive fp8 values (byte 0 first), a
`float4_e2m1fn_x4` element a 16-bit word holding 4 e2m1 nibbles (low nibble first). One scale, a biased
power-of-two exponent (`float8_e8m0fnu`, or its bits in a `uint8` tile), covers a group of 8 partitions
x 4 packed values = 32 values. Scales live in the data's quadrant: group-row i (partitions 8i..8i+7) has
its scale on partition (i // 4) * 32 + i % 4 of the scale view (for at most 32 partitions that is just
partition i, a compact [P/8, F] tile); slicing the scale tile at 4, 8 or 12 packs four tensors' scales.

Decision (spec/isa.md §12.1 C16): `quantize_mx` uses the NKI 2.31+ rule, scale exponent
floor(log2(amax)) - (E_MAX - 1) (E_MAX 8 for e4m3fn, 15 for e5m2), so scaled values never need saturation;
an all-zero group gets exponent -127. Values round to nearest even into fp8.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from opennki.errors import KernelError, MemoryKindError, ShapeError, expect
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import (ACCUMULATE, READ, WRITE, Instruction, check_dtype, require,
                                       check_partitions, flat, instruction, operand)
from opennki.instructions.indirection import check_indirection, check_untiled, indirection_term
from opennki.instructions.tensor_engine import write_psum

_FP8_X4 = {"float8_e4m3fn_x4": ml_dtypes.float8_e4m3fn, "float8_e5m2_x4": ml_dtypes.float8_e5m2}
_E_MAX = {"float8_e4m3fn_x4": 8, "float8_e5m2_x4": 15}
_X4 = tuple(_FP8_X4) + ("float4_e2m1fn_x4",)
_SCALE_DTYPES = ("float8_e8m0fnu", "uint8")
_E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)


def scale_rows(groups: int) -> np.ndarray:
    """Scale-view partition of each group-row of 8 data partitions."""
    i = np.arange(groups)
    return (i // 4) * 32 + i % 4


def check_scale(scale, role: str, data_partitions: int, columns: int) -> None:
    expect(scale.kind is MemoryKind.SBUF, f"'{role}' must be in SBUF", got=scale.kind.name,
           code="err_unsupported_memory", error=MemoryKindError)
    check_dtype(scale, role, _SCALE_DTYPES)
    need = int(scale_rows(data_partitions // 8)[-1]) + 1
    expect(scale.shape[0] >= need and scale.free_size == columns,
           f"'{role}' holds one scale per 8 partitions in the data's quadrant layout",
           expected=f"[>= {need}, {columns}]", got=scale.shape)


def read_scales(m, scale, data_partitions: int) -> np.ndarray:
    """[K, cols] fp32 scale factor of every data row (each group's 2^(e - 127) repeated over its 8 rows)."""
    rows = scale_rows(data_partitions // 8)
    used = np.zeros((scale.shape[0],) + (1,) * (scale.ndim - 1), bool)
    used[rows] = True           # the other partitions of the view are not read
    if scale.dtype.name == "uint8":
        e = flat(m.read(scale, used)).astype(np.int64)[rows]
        factors = np.exp2((e - 127).astype(np.float64)).astype(np.float32)
    else:
        factors = flat(m.read_f32(scale, used))[rows]
    return np.repeat(factors, 8, axis=0)


def unpack(words: np.ndarray, dtype_name: str) -> np.ndarray:
    """[K, F] packed words -> [K, F, 4] fp32 values (lane 0 = lowest byte / nibble)."""
    if dtype_name in _FP8_X4:
        lanes = np.ascontiguousarray(words.astype(np.uint32)).view(np.uint8).reshape(words.shape + (4,))
        return lanes.view(_FP8_X4[dtype_name]).astype(np.float32)
    w = words.astype(np.uint32)
    nibbles = np.stack([(w >> (4 * q)) & 0xF for q in range(4)], axis=-1)
    return _E2M1[nibbles]


@instruction
class QuantizeMx(Instruction):
    """dst (fp8 x4) and dst_scale = MX quantization of src (fp16 / bf16, SBUF): per group of 8 partitions
    x 4 consecutive elements, a power-of-two scale from the group's largest magnitude (module docstring),
    and the values divided by it, rounded into fp8 and packed 4 per word. src [P, F] with P a multiple of
    8 (at most 32) or of 32, F a multiple of 4; dst [P, F/4]; dst_scale in the quadrant layout."""

    opcode = "quantize_mx"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    src: object = operand(READ)
    dst_scale: object = operand(WRITE)

    def check(self, ctx) -> None:
        require(ctx, "mx", "quantize_mx")
        for role, t in (("dst", self.dst), ("src", self.src), ("dst_scale", self.dst_scale)):
            expect(t.kind is MemoryKind.SBUF, f"quantize_mx works in SBUF ('{role}')", got=t.kind.name,
                   code="err_unsupported_memory", error=MemoryKindError)
            check_partitions(t, role, ctx.hw)
        check_dtype(self.src, "src", ("float16", "bfloat16"))
        check_dtype(self.dst, "dst", tuple(_FP8_X4))
        P, F = self.src.shape[0], self.src.free_size
        expect(P % 8 == 0 and (P <= 32 or P % 32 == 0), "quantize_mx needs whole 8-partition groups (a multiple "
               "of 32 partitions above 32)", got=P, error=ShapeError)
        expect(F % 4 == 0, "src has a multiple of 4 elements per partition", got=F)
        expect(self.dst.shape[0] == P and self.dst.free_size == F // 4, "dst is [P, F/4] packed words",
               expected=(P, F // 4), got=self.dst.shape)
        check_scale(self.dst_scale, "dst_scale", P, F // 4)

    def run(self, m) -> None:
        x = flat(m.read_f32(self.src))
        P, F = x.shape
        groups = x.reshape(P // 8, 8, F // 4, 4)
        amax = np.abs(groups).max(axis=(1, 3))
        _, exp2 = np.frexp(amax)                               # amax = mant * 2^exp2, mant in [0.5, 1)
        e = np.where(amax > 0, exp2 - 1 - (_E_MAX[self.dst.dtype.name] - 1), -127).astype(np.int64)
        scaled = groups / np.exp2(e.astype(np.float64))[:, None, :, None]
        q = scaled.reshape(P, F).astype(np.float32).astype(_FP8_X4[self.dst.dtype.name])
        words = np.ascontiguousarray(q).view(np.uint8).reshape(P, F // 4, 4).copy().view(np.uint32)[..., 0]
        m.write(self.dst, words.reshape(self.dst.shape), raw=True)
        rows = scale_rows(P // 8)
        values = np.zeros((self.dst_scale.shape[0], F // 4), np.float32)
        written = np.zeros(values.shape, bool)
        if self.dst_scale.dtype.name == "uint8":
            values[rows] = e + 127
        else:
            values[rows] = np.exp2(e.astype(np.float64))      # an exact power of two: e8m0 stores it exactly
        written[rows] = True
        m.write(self.dst_scale, values.reshape(self.dst_scale.shape), written.reshape(self.dst_scale.shape))


@instruction
class NcMatmulMx(Instruction):
    """dst (+)= (stationary * scale).T @ (moving * scale) on the Tensor Engine with MX operands
    (NeuronCore-v4): each packed element contributes its 4 values to the contraction, every value times
    its group's scale; products and sums in fp32, accumulation into PSUM as `nc_matmul` (`accumulate`).

    Args:
        stationary [K, M], moving [K, N]: fp8 x4 or fp4 x4 words in SBUF (formats may be mixed); K a multiple
            of 32 up to 128 (contraction 4K), M even up to 128, N up to 4096 (fp32 dst) / 8192 (bf16 dst).
        stationary_scale / moving_scale: float8_e8m0fnu or uint8, in SBUF, quadrant layout, M / N columns.
        dst: PSUM [M, N], fp32 or bf16.
        tile_position / tile_size: row tiling only ((64 or 32, 128) at (row, 0)); no functional effect.
    """

    opcode = "nc_matmul_mx"
    indirect_fields = ("dst", "stationary", "moving", "stationary_scale", "moving_scale")
    default_engine = Engine.TENSOR

    dst: object = operand(ACCUMULATE)
    stationary: object = operand(READ)
    moving: object = operand(READ)
    stationary_scale: object = operand(READ)
    moving_scale: object = operand(READ)
    tile_position: object = None
    tile_size: object = None
    accumulate: object = None

    def check(self, ctx) -> None:
        require(ctx, "mx", "nc_matmul_mx")
        if check_indirection(self, ctx):
            check_untiled(self, self.tile_position)
            for data, scale in (("stationary", "stationary_scale"), ("moving", "moving_scale")):
                a, b = indirection_term(getattr(self, data)), indirection_term(getattr(self, scale))
                expect((a is None) == (b is None) and (a is None or a.index.same_view(b.index)),
                       f"'{data}' and '{scale}' use tensor indirection with the same index, or neither does (MX "
                       "data and scales are one logical tensor)", error=KernelError)
        for role, t in (("stationary", self.stationary), ("moving", self.moving)):
            expect(t.kind is MemoryKind.SBUF, f"nc_matmul_mx reads '{role}' from SBUF", got=t.kind.name,
                   code="err_unsupported_memory", error=MemoryKindError)
            check_partitions(t, role, ctx.hw)
            check_dtype(t, role, _X4, "an MX x4 dtype")
        expect(self.dst.kind is MemoryKind.PSUM, "nc_matmul_mx writes PSUM", got=self.dst.kind.name,
               code="err_unsupported_memory", error=MemoryKindError)
        check_dtype(self.dst, "dst", ("float32", "bfloat16"))
        K, M, N = self.stationary.shape[0], self.stationary.free_size, self.moving.free_size
        expect(self.moving.shape[0] == K, "stationary and moving share the contraction (partition) dim",
               expected=K, got=self.moving.shape[0], code="err_num_partition_mismatch")
        expect(K % 32 == 0, "the contraction partitions are a multiple of 32", got=K)
        expect(M % 2 == 0 and M <= ctx.hw.tiles.gemm_stationary_fmax, "stationary has an even free size up to 128",
               got=M)
        nmax = ctx.hw.tiles.matmul_moving_max_bf16 if self.dst.dtype.name == "bfloat16" else \
            ctx.hw.tiles.matmul_moving_max_fp32
        expect(N <= nmax, f"moving free size {N} exceeds maximum {nmax}", got=N)
        expect(self.dst.shape[0] == M and self.dst.free_size == N, "dst must be [M, N]", expected=(M, N),
               got=self.dst.shape)
        check_scale(self.stationary_scale, "stationary_scale", K, M)
        check_scale(self.moving_scale, "moving_scale", K, N)
        if self.tile_position or self.tile_size:
            rows, cols = (int(v) for v in self.tile_size)
            row0, col0 = (int(v) for v in self.tile_position)
            expect(rows in (32, 64, 128) and cols == 128 and col0 == 0 and row0 % rows == 0 and K <= rows,
                   "nc_matmul_mx tiles rows only: tile_size (32/64/128, 128) at (row, 0)",
                   got=(self.tile_position, self.tile_size), error=KernelError)

    def run(self, m) -> None:
        K = self.stationary.shape[0]
        S = unpack(flat(m.read(self.stationary)), self.stationary.dtype.name)
        Mv = unpack(flat(m.read(self.moving)), self.moving.dtype.name)
        S = S * read_scales(m, self.stationary_scale, K)[:, :, None]
        Mv = Mv * read_scales(m, self.moving_scale, K)[:, :, None]
        result = np.einsum("kiq,kjq->ij", S, Mv, dtype=np.float32)
        write_psum(m, self.dst, result, self.accumulate, None)

