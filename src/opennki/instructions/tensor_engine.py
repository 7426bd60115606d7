"""ISA layer: Tensor Engine (PE) instructions (spec/isa.md §5).

`nc_matmul` computes `stationary.T @ moving` with fp32 products and fp32 accumulation, contracting over the
partition dim, and writes (or accumulates into) PSUM. `accumulate=None` follows the hardware's
accumulation groups: an element last written by a matmul accumulates, any other element is overwritten;
a non-matmul access to PSUM closes the group for the elements it touches (the emulation spec/isa.md §5.1
suggests).
"""

from __future__ import annotations

from threading import get_ident

import numpy as np

from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError, expect
from opennki.events import Engine, MemoryKind
from opennki.hw import first_with
from opennki.instructions.base import (ACCUMULATE, READ, WRITE, Instruction, check_on_chip, check_partitions,
                                       flat, instruction, operand, require)
from opennki.instructions.enums import engine_of, matmul_perf_mode, perf_mode_of
from opennki.instructions.indirection import check_indirection, check_untiled, indirection_term
from opennki.machine.dtypes import FP32_STORAGE, PACKED, float32, to_float32
from opennki.machine.machine import OPERAND, WRITES, Machine

_FP32_LIKE = ("float32", "tfloat32")
_FP8 = ("float8_e4m3", "float8_e5m2", "float8_e4m3fn")
_PE_INDIRECT = ("float16", "bfloat16") + _FP8     # the dtypes of an indirect matmul operand (its 0.7 page)


def _operand_values(m, view) -> tuple[np.ndarray, np.ndarray | None]:
    """fp32 [K, F] values of a matmul operand, with masked-off elements zeroed, and its [K, F] mask."""
    mask = m.effective_mask(view, None)
    x = flat(m.read_f32(view, mask))
    if mask is None:
        return x, None
    mk = flat(np.broadcast_to(mask, view.shape))
    return np.where(mk, x, np.float32(0)), mk


def _double_row(perf_mode) -> bool:
    """`perf_mode` selects double-row mode (`double_row`, the legacy `double_row_gen3`, or such a member)."""
    return perf_mode is not None and str(getattr(perf_mode, "value", perf_mode)).startswith("double_row")


@instruction
class NcMatmul(Instruction):
    """dst (+)= stationary.T @ moving on the Tensor Engine.

    Args:
        dst: PSUM [M, N], fp32 (bf16 also on NeuronCore-v4).
        stationary: SBUF [K, M]; moving: SBUF [K, N]; K <= 128 partitions, M <= 128, N <= 512 (v4: 4096
            for an fp32 result, 8192 for bf16). With `perf_mode=double_row` (fp8, v3+): [K, 2, M] and
            [K, 2, N], contracting over both.
        accumulate: True adds to dst, False overwrites, None follows the accumulation group (module doc).
        is_transpose: transpose mode (v3+): dst = stationary.T bit-exactly (moving is the identity).
        tile_position / tile_size: PE array tiling (row, column), multiples of 32; functionally a no-op.
        is_stationary_onezero / is_moving_onezero: performance hints only.
    """

    opcode = "nc_matmul"
    indirect_fields = ("dst", "stationary", "moving")
    default_engine = Engine.TENSOR
    writes_on_chip_only = True              # check: dst in PSUM
    defers_data = True                      # `run`'s usual product may wait (`Machine.defer`)

    dst: object = operand(ACCUMULATE)
    stationary: object = operand(READ)
    moving: object = operand(READ)
    is_stationary_onezero: bool = False
    is_moving_onezero: bool = False
    is_transpose: bool = False
    accumulate: object = None
    tile_position: tuple = ()
    tile_size: tuple = ()
    perf_mode: object = None

    @classmethod
    def result(cls, *, stationary, moving, is_transpose=False, perf_mode=None):
        """[M, N] fp32 for stationary [K, M] and moving [K, N] (double-row: [K, 2, M] / [K, 2, N]); in
        transpose mode stationary.T, [M, K] of its dtype."""
        halves = 2 if _double_row(perf_mode) else 1
        rows = stationary.free_size // halves
        if is_transpose:
            return (rows, stationary.shape[0]), stationary.dtype
        return (rows, moving.free_size // halves), float32

    def check(self, ctx) -> None:
        if check_indirection(self, ctx):
            self._check_indirection()
        # every matmul of a kernel passes here: rules are tested before their messages are formatted
        hw = ctx.hw
        for role, t in (("stationary", self.stationary), ("moving", self.moving)):
            if t.kind is not MemoryKind.SBUF:
                raise MemoryKindError(f"nc_matmul reads '{role}' from SBUF", expected="SBUF", got=t.kind.name,
                                      code="err_unsupported_memory")
            check_partitions(t, role, hw)
            expect(t.dtype.kind != PACKED, "packed MX dtypes need nc_matmul_mx", got=t.dtype, error=DtypeError)
        if self.dst.kind is not MemoryKind.PSUM:
            raise MemoryKindError("nc_matmul writes its result to PSUM", expected="PSUM", got=self.dst.kind.name,
                                  code="err_unsupported_memory")
        check_partitions(self.dst, "dst", hw)
        K = self.stationary.shape[0]
        expect(self.moving.shape[0] == K, "stationary and moving must share the contraction (partition) dim",
               expected=K, got=self.moving.shape[0], code="err_num_partition_mismatch")
        double_row = self.perf_mode is not None and perf_mode_of(self.perf_mode) is matmul_perf_mode.double_row
        if double_row:
            self._check_double_row(hw)
        M = self.stationary.free_size // (2 if double_row else 1)
        N = self.moving.free_size // (2 if double_row else 1)
        if self.is_transpose:
            expect(self.dst.shape[0] == M and self.dst.free_size == K,
                   "transpose mode writes stationary.T", expected=(M, K), got=self.dst.shape)
            return
        mmax = hw.tiles.gemm_stationary_fmax
        if M > mmax:
            raise ShapeError(f"stationary free size {M} exceeds maximum {mmax}", expected=f"<= {mmax}", got=M,
                             hint="tile M into blocks of 128 (gemm_stationary_fmax)")
        dst_dtype = self.dst.dtype.name
        nmax = hw.tiles.matmul_moving_max_bf16 if dst_dtype == "bfloat16" else hw.tiles.matmul_moving_max_fp32
        if N > nmax:
            raise ShapeError(f"moving free size {N} exceeds maximum {nmax}", expected=f"<= {nmax}", got=N,
                             hint="tile N into blocks of 512 (gemm_moving_fmax): one PSUM bank of fp32")
        expect(self.dst.shape[0] == M and self.dst.free_size == N, "dst must be [M, N]",
               expected=(M, N), got=self.dst.shape)
        bf16 = hw.capabilities.psum_bf16_matmul
        if dst_dtype != "float32" and not (dst_dtype == "bfloat16" and bf16):
            allowed = ("float32",) + (("bfloat16",) if bf16 else ())
            raise DtypeError("nc_matmul results are fp32 in PSUM"
                             + (f" (or bf16 from {first_with('psum_bf16_matmul')} on)" if bf16 else ""),
                             expected="/".join(allowed), got=dst_dtype)
        s, mv = self.stationary.dtype.name, self.moving.dtype.name
        expect((s in _FP32_LIKE) == (mv in _FP32_LIKE), "fp32/tf32 operands can only be paired with "
               "fp32/tf32", got=(s, mv), error=DtypeError)
        if "float8_e4m3fn" in (s, mv):
            expect(not ({s, mv} >= {"float8_e4m3", "float8_e4m3fn"}),
                   "float8_e4m3 and float8_e4m3fn cannot be mixed in one matmul", got=(s, mv), error=DtypeError)
            require(hw, "fp8_e4m3fn_matmul", "a float8_e4m3fn operand", error=DtypeError)
        self._check_tiling(hw, K, M)

    def _check_indirection(self) -> None:
        """nc_matmul's own rules for tensor-indirection operands (its NKI 0.7 page)."""
        check_untiled(self, self.tile_position)
        expect(not (self.is_transpose and indirection_term(self.moving) is not None),
               "with is_transpose=True 'moving' cannot use tensor indirection", error=KernelError)
        for role, t in (("stationary", self.stationary), ("moving", self.moving)):
            if indirection_term(t) is not None:
                expect(t.dtype.name in _PE_INDIRECT, f"an indirect '{role}' has a Tensor Engine float dtype",
                       expected="/".join(_PE_INDIRECT), got=t.dtype.name, error=DtypeError)

    def _check_double_row(self, hw) -> None:
        require(hw, "double_row_matmul", "perf_mode=double_row")
        for role, t in (("stationary", self.stationary), ("moving", self.moving)):
            expect(t.ndim == 3 and t.shape[1] == 2, f"double_row '{role}' must be [K, 2, F]", got=t.shape)
            expect(t.dtype.name in _FP8, "double_row takes fp8 operands only", got=t.dtype, error=DtypeError)
        expect(not self.tile_position or self.tile_position[1] == 0,
               "double_row cannot be combined with column tiling", got=self.tile_position, error=KernelError)

    def _check_tiling(self, hw, K: int, M: int) -> None:
        if not self.tile_position and not self.tile_size:
            return
        expect(len(self.tile_position) == 2 and len(self.tile_size) == 2,
               "tile_position and tile_size must both be (row, column) pairs",
               got=(self.tile_position, self.tile_size), error=KernelError)
        sizes = (32, 64, 128) if hw.capabilities.pe_tile_32 else (64, 128)
        rows, cols = (int(v) for v in self.tile_size)
        row0, col0 = (int(v) for v in self.tile_position)
        for what, size, start in (("row", rows, row0), ("column", cols, col0)):
            expect(size in sizes, f"tile {what} size must be one of {sizes}", got=size, error=KernelError)
            expect(start % size == 0 and 0 <= start < 128, f"tile {what} position must be a multiple of the "
                   "tile size below 128", got=start, error=KernelError)
        expect(K <= rows and M <= cols, "the matmul must fit its PE tile (K <= rows, M <= columns)",
               expected=(rows, cols), got=(K, M))

    def run(self, m) -> None:
        if USUAL_MATMULS and self.mask is None and self.perf_mode is None and not self.is_transpose:
            S, Mv = _plain_stored(self.stationary), _plain_stored(self.moving)
            if S is not None and Mv is not None and _store_usual(m, self.dst, S, Mv, self.accumulate,
                                                                 self.stationary.storage.dtype,
                                                                 self.moving.storage.dtype):
                return
        if m.later:
            m.catch_up()                # the plain path reads and writes at once (`Machine.defer`)
        if self.is_transpose and m.hw.capabilities.pe_transpose_moves_bits:
            data = flat(m.read(self.stationary))
            m.write(self.dst, data.T.reshape(self.dst.shape), raw=self.dst.dtype is self.stationary.dtype)
            m.set_matmul_written(self.dst, True)
            return
        if self._masked_off():
            return
        S, smask = _operand_values(m, self.stationary)
        Mv, mmask = _operand_values(m, self.moving)
        if self.perf_mode is not None and perf_mode_of(self.perf_mode) is matmul_perf_mode.double_row:
            K = S.shape[0]
            S, Mv = S.reshape(2 * K, -1), Mv.reshape(2 * K, -1)   # contract over (partition, pair)
        if (smask is None and mmask is None and self.mask is None and USUAL_MATMULS
                and _store_usual(m, self.dst, S, Mv, self.accumulate)):
            return
        result = S.T @ Mv
        out_mask = None
        if smask is not None or mmask is not None:
            rows = smask.any(axis=0) if smask is not None else np.ones(result.shape[0], bool)
            cols = mmask.any(axis=0) if mmask is not None else np.ones(result.shape[1], bool)
            out_mask = np.outer(rows, cols).reshape(self.dst.shape)
        if self.mask is not None:
            inst = np.broadcast_to(m.effective_mask(self.dst, self.mask), self.dst.shape)
            out_mask = inst if out_mask is None else (out_mask & inst)
        write_psum(m, self.dst, result, self.accumulate, out_mask)


    def _masked_off(self) -> bool:
        """A constant `mask=False` (a causal kernel's tile above the diagonal, `i * 128 >= j * 512`) over
        direct in-bounds operands: the product would write no element, and reading the operands under that
        mask can neither fail nor find a never-written element, so the run does nothing."""
        mask = self.mask
        if not (mask is False or (type(mask) is np.bool_ and not mask)):
            return False
        return all(not v.dynamic and v.in_bounds() for v in (self.dst, self.stationary, self.moving))


def _plain_stored(view) -> np.ndarray | None:
    """The stored elements of an operand that `Machine.read`'s usual case reads (in bounds, no mask of its own, no
    initialisation flags: with no instruction mask, nothing to zero or check), as that case gives them;
    `_usual_product` makes `_operand_values`' fp32 values of them, without its mask steps. None otherwise (the
    caller takes the plain path, which reads it with its checks)."""
    if not (view._inb and view.mask is None and view.storage.initialized is None):
        return None
    return view._np if view._np is not None else view.np_view()


def _store_usual(m, dst, S: np.ndarray, Mv: np.ndarray, accumulate, s_dtype=None, m_dtype=None) -> bool:
    """`write_psum` of the product `S.T @ Mv` without an output mask, for the usual destination: a whole fp32
    PSUM tile with one "last written by nc_matmul" state, written through `Machine.fp32_target` (the usual
    write: in bounds, its own storage, no initialisation flags or physical image; it marks the tile written
    and not unwritten). An added product is computed, then added in place (`Machine.accumulate`'s fp32 path; a
    tile not yet given its memory holds poison, so it is left to the plain path); one that overwrites is
    computed straight into the tile (the sgemm NumPy runs for `S.T @ Mv` into a C-contiguous result, into the
    destination instead of a temporary then copied: the same bits; fp32 rounding on write is the identity).
    The tile becomes all matmul results. False, with nothing done, for any other destination: the caller
    computes the product and takes `write_psum`. `S` and `Mv` are fp32 values, or, with their dtypes `s_dtype`
    and `m_dtype`, stored elements (`_plain_stored`) that the data step converts as `Machine.read_f32` does; the
    data step (`_usual_product`) may wait (`Machine.defer`)."""
    st = dst.storage
    flags = st.matmul_written
    if type(flags) is np.ndarray:
        return False
    add = flags is True if accumulate is None else bool(accumulate)
    if add and st._array is None:
        return False
    target = m.fp32_target(dst)
    if target is None:
        return False
    m.defer(_usual_product, (S, s_dtype, Mv, m_dtype, target, add), S.nbytes + Mv.nbytes)
    st.matmul_written = True
    return True


def _usual_product(S: np.ndarray, s_dtype, Mv: np.ndarray, m_dtype, target: np.ndarray, add: bool) -> None:
    """`_store_usual`'s data step: the operands' fp32 values (`Machine.read_f32`'s conversion of stored elements
    of dtype `s_dtype` / `m_dtype`; None: fp32 values already), their product added into or stored straight
    into `target`."""
    if s_dtype is not None:
        if S.dtype is not FP32_STORAGE:
            S = to_float32(S, s_dtype)
        if S.ndim != 2:                 # a [P, F] tile is its own `flat` (the same array, without the call)
            S = flat(S)
    if m_dtype is not None:
        if Mv.dtype is not FP32_STORAGE:
            Mv = to_float32(Mv, m_dtype)
        if Mv.ndim != 2:
            Mv = flat(Mv)
    if add:
        product = _product(S, Mv) if MATMUL_SCRATCH else S.T @ Mv
        np.add(target, product if product.shape == target.shape else product.reshape(target.shape), out=target)
    elif target.ndim == 2 and target.strides == (4 * target.shape[1], 4):   # the layout of NumPy's own result
        np.matmul(S.T, Mv, out=target)
    else:
        target[...] = (S.T @ Mv).reshape(target.shape)


_usual_product.operands = ((0, OPERAND), (2, OPERAND), (4, WRITES))


def _product(S: np.ndarray, Mv: np.ndarray) -> np.ndarray:
    """`S.T @ Mv` of fp32 operands, into a scratch array this thread keeps per result shape (and reuses on its next
    call). NumPy runs the same sgemm into a given C-contiguous result of the right shape and dtype as into the one it
    would make, so the bits are the same; what it saves is the [M, N] temporary of every accumulating matmul: freed
    at the top of the heap, it makes glibc give the memory back and take it again, and the new pages fault in (51
    minor faults per k-step of the 2048^3 bf16 tiled matmul). The caller adds the product into its tile at once, so
    the array is never seen after the next call."""
    if S.dtype is not FP32_STORAGE or Mv.dtype is not FP32_STORAGE:
        return S.T @ Mv
    key = (get_ident(), S.shape[1], Mv.shape[1])
    out = _SCRATCH.get(key)
    if out is None:
        if len(_SCRATCH) >= 64:
            _SCRATCH.clear()
        out = _SCRATCH[key] = np.empty(key[1:], np.float32)
    return np.matmul(S.T, Mv, out=out)


_SCRATCH: dict = {}      # (thread id, M, N) -> the [M, N] fp32 array `_product` computes into
# an accumulating matmul's product goes into a scratch array (`_product`); False: a new array per product, as
# `S.T @ Mv` makes it (tests/sim/test_usual_matmuls.py compares them)
MATMUL_SCRATCH = True


# nc_matmul's product without any mask into a whole fp32 PSUM tile is stored by `_store_usual`, from operands
# read as `_plain_f32` reads them when they are in its case; False: every matmul reads its operands with
# `_operand_values` and takes `write_psum` (tests/sim/test_usual_matmuls.py compares them)
USUAL_MATMULS = True


def write_psum(m, dst, result: np.ndarray, accumulate, out_mask=None) -> None:
    """Store an fp32 [M, N] matmul result into PSUM: add it to dst where the accumulation rule says so
    (`accumulate` True / False, or None: elements last written by a matmul), then mark the written
    elements as matmul results."""
    if dst.dynamic:
        _write_psum_scattered(m, dst, result, accumulate, out_mask)
        return
    if accumulate is None:
        add = m.matmul_written(dst)             # one value when the tile shares one state (the usual case)
        if type(add) is np.ndarray:
            add = _one_state(add.reshape(result.shape))
    else:
        add = bool(accumulate)
    _store_product(m, dst, result, add, out_mask)
    m.set_matmul_written(dst, True, out_mask)


def _one_state(add: np.ndarray):
    """Per-element "accumulate here" flags as True / False when they all agree."""
    if add.all():
        return True
    return False if not add.any() else add


def _store_product(m, dst, result: np.ndarray, add, out_mask) -> None:
    """dst = result, dst += result, or per element (`add` a bool array) one or the other."""
    if add is True:
        m.accumulate(dst, result.reshape(dst.shape), out_mask)
        return
    if add is not False:
        current = flat(m.read_f32(dst)).reshape(result.shape)
        result = np.where(add, current + result, result)
    m.write(dst, result.reshape(dst.shape), out_mask)


def _write_psum_scattered(m, dst, result: np.ndarray, accumulate, out_mask) -> None:
    """write_psum for a dst with run-time offsets (tensor indirection): its flags are read and marked through
    the flat offsets of its elements."""
    flags = Machine.matmul_flag_array(dst.storage)
    offsets = dst.flat_offsets(m.dynamic_values(dst))
    if accumulate is None:
        add = _one_state(flags[offsets].reshape(result.shape))
    else:
        add = bool(accumulate)
    _store_product(m, dst, result, add, out_mask)
    flags[offsets if out_mask is None else offsets[out_mask]] = True


@instruction
class NcTranspose(Instruction):
    """dst[F, P] = data[P, F]ᵀ, on the Tensor Engine (SBUF -> PSUM, up to 128 x 128) or the Vector Engine
    (SBUF/PSUM, up to 32 x 32). On NeuronCore-v2 the Tensor Engine multiplies by an identity, so NaN/Inf
    spread along output rows; elsewhere the transpose is a bit-exact permutation."""

    opcode = "nc_transpose"
    default_engine = Engine.TENSOR

    dst: object = operand(WRITE)
    data: object = operand(READ)
    engine: object = None

    @classmethod
    def result(cls, *, data):
        """[P, F] -> [F, P], `data`'s dtype."""
        return (data.free_size, data.shape[0]), data.dtype

    @property
    def executor(self) -> Engine:
        chosen = engine_of(self.engine)
        if chosen is not Engine.UNKNOWN:
            return chosen
        return Engine.TENSOR if self.dst.kind is MemoryKind.PSUM else Engine.VECTOR

    def check(self, ctx) -> None:
        ex = self.executor
        expect(ex in (Engine.TENSOR, Engine.VECTOR), "nc_transpose runs on the tensor or vector engine",
               got=ex.name.lower(), error=KernelError)
        check_on_chip(self.data, "data")
        check_on_chip(self.dst, "dst")
        P, F = self.data.shape[0], self.data.free_size
        limit = 128 if ex is Engine.TENSOR else 32
        if P > limit or F > limit:
            raise ShapeError(f"nc_transpose on the {ex.name.lower()} engine handles at most {limit} x {limit}",
                             expected=f"<= {limit} x {limit}", got=(P, F),
                             code="err_size_of_dimension_exceed_arch_limit")
        if ex is Engine.TENSOR:
            expect(self.data.kind is MemoryKind.SBUF and self.dst.kind is MemoryKind.PSUM,
                   "Tensor Engine transposes read SBUF and write PSUM", got=(self.data.kind.name,
                   self.dst.kind.name), code="err_unsupported_memory", error=MemoryKindError)
        expect(self.dst.shape[0] == F and self.dst.free_size == P, "dst must be [F, P]", expected=(F, P),
               got=self.dst.shape)

    def run(self, m) -> None:
        # a mask (laid over dst) writes the dst elements it switches on, from the data elements transposed onto
        # them: those are the ones read
        mask = self.mask
        active = None if mask is None else Machine.effective_mask(self.dst, mask)
        x = flat(m.read(self.data, None if active is None else flat(active).T.reshape(self.data.shape)))
        if self.executor is Engine.TENSOR and not m.hw.capabilities.pe_transpose_moves_bits:
            xf = x.astype(np.float32)
            with np.errstate(invalid="ignore", over="ignore"):
                y = xf.T @ np.eye(xf.shape[0], dtype=np.float32)
            m.write(self.dst, y.reshape(self.dst.shape), mask)
        elif self.dst.dtype is self.data.dtype:
            m.write(self.dst, x.T.reshape(self.dst.shape), mask, raw=True)
        else:
            m.write(self.dst, x.T.astype(np.float32).reshape(self.dst.shape), mask)
