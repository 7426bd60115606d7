"""ISA layer: GpSimd Engine (POOL) instructions (spec/isa.md §6.8, §6.17, §6.18, §6.26-6.29).

Imports the ISA base. GpSimd reads and writes SBUF only and has 8 cores, each wired to 16 consecutive
partitions. `iota` and `affine_select` evaluate an affine integer pattern (int32 arithmetic); the legacy
generation's `iota(expr)` / `affine_select(pred, ...)` pass the evaluated index expression / predicate.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import (DtypeError, HardwareUnsupportedError, KernelError, MemoryKindError, OutOfBoundsError,
                            expect)
from opennki.machine.machine import Machine
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import (READ, WRITE, Instruction, check_dtype, require,
                                       check_on_chip, check_partitions, check_same_partitions, flat, instruction,
                                       operand, read_operand)
from opennki.instructions.ops import alu, op_name
from opennki.instructions.vector import check_elementwise
from opennki.machine.index import mask_array
from opennki.machine.arguments import as_pattern
from opennki.machine.dtypes import SCALAR_TYPES, convert

_CORE_PARTITIONS = 16
_ELEMS_PER_INDEX = (1, 2, 4, 8, 16, 32)


def check_sbuf(t, role: str) -> None:
    if t.kind is not MemoryKind.SBUF:
        raise MemoryKindError(f"GpSimd reads and writes SBUF only ('{role}')", expected="SBUF", got=t.kind.name,
                              code="err_unsupported_memory")


def pattern_values(partitions: int, pattern, offset: int, channel_multiplier: int) -> np.ndarray:
    """[P, F] int64 values of `offset + sum(step_k * i_k) + channel_multiplier * p` over the pattern's
    [step, num] pairs (outermost first)."""
    steps = [int(s) for s, _ in pattern]
    nums = [int(n) for _, n in pattern]
    vals = np.full(nums or [1], int(offset), dtype=np.int64)
    for axis, (s, n) in enumerate(zip(steps, nums)):
        shape = [1] * len(nums)
        shape[axis] = n
        vals = vals + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    rows = vals.reshape(1, -1)
    return rows + int(channel_multiplier) * np.arange(partitions, dtype=np.int64).reshape(-1, 1)


def pattern_size(pattern) -> int:
    """Elements a `[step, count]` pattern covers; a malformed pattern is a ShapeError (as_pattern)."""
    return int(np.prod([n for _, n in as_pattern(pattern, "pattern", allow_empty=True)]))


@instruction
class Iota(Instruction):
    """dst[p, f] = offset + channel_multiplier * p + the pattern's value at f (int32 arithmetic, wrapping,
    then converted to dst's dtype). The free size of dst equals the product of the pattern counts."""

    opcode = "iota"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    pattern: tuple = ()
    offset: int = 0
    channel_multiplier: int = 0

    def check(self, ctx) -> None:
        check_sbuf(self.dst, "dst")
        check_partitions(self.dst, "dst", ctx.hw)
        count = pattern_size(self.pattern)
        expect(count == self.dst.free_size, "the pattern must cover dst's free size",
               expected=self.dst.free_size, got=count)

    def run(self, m) -> None:
        vals = pattern_values(self.dst.shape[0], self.pattern, self.offset, self.channel_multiplier)
        vals = vals.astype(np.int32).astype(np.int64)  # int32 arithmetic wraps
        m.write(self.dst, vals.reshape(self.dst.shape), self.mask)


# An affine_select without an instruction mask writes its selection in one write; False: the plain path, the
# selected elements and the others in two masked writes (tests/sim/test_into_destination.py compares them)
SELECT_IN_ONE_WRITE = True


@instruction
class AffineSelect(Instruction):
    """dst = on_true_tile where an affine predicate holds, else on_false_value.

    The predicate is either the new generation's `cmp_op(offset + channel_multiplier * p + pattern value at
    f, 0)` (int32, as `iota`), or the legacy generation's `pred`: an affine comparison of `nl.arange`
    indices (`iy < ix`), evaluated over the index grid and broadcast to dst. Selected elements are copied
    bit-exactly when dtypes match (else converted through fp32); the others get on_false_value converted
    to dst's dtype. dst is in SBUF. on_true_tile should be in SBUF too; legacy kernels (official samples)
    pass PSUM tiles, which the compiler staged, so PSUM is accepted except in hardware-strict mode.
    """

    opcode = "affine_select"
    result_like = "on_true_tile"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    on_true_tile: object = operand(READ)
    on_false_value: float = 0.0
    pattern: tuple = ()
    offset: int = 0
    channel_multiplier: int = 0
    cmp_op: object = "equal"
    pred: object = None

    def check(self, ctx) -> None:
        check_elementwise(ctx, self.dst, {"on_true_tile": self.on_true_tile})
        check_sbuf(self.dst, "dst")
        if ctx.options.hardware_strict:
            expect(self.on_true_tile.kind is MemoryKind.SBUF, "affine_select reads on_true_tile from SBUF",
                   got=self.on_true_tile.kind.name, error=HardwareUnsupportedError)
        expect(isinstance(self.on_false_value, SCALAR_TYPES), "on_false_value must be a scalar",
               got=type(self.on_false_value).__name__, error=DtypeError)
        if self.pred is not None:
            expect(getattr(self.pred, "affine", True), "affine_select needs an affine predicate of arange "
                   "indices", got=self.pred, error=KernelError, code="err_unsupported_expression_in_mask")
            mask_array(self.pred, self.dst.shape)   # raises if it cannot be laid over dst
        else:
            expect(alu(self.cmp_op).name in ("equal", "not_equal", "less", "less_equal", "greater",
                                             "greater_equal"), "cmp_op must be a comparison",
                   got=alu(self.cmp_op).name, error=KernelError)
            expect(pattern_size(self.pattern) == self.dst.free_size, "the pattern must cover dst's free size",
                   expected=self.dst.free_size, got=pattern_size(self.pattern))

    def run(self, m) -> None:
        if self.pred is not None:
            keep = np.broadcast_to(mask_array(self.pred, self.dst.shape), self.dst.shape)
        else:
            vals = pattern_values(self.dst.shape[0], self.pattern, self.offset, self.channel_multiplier)
            vals = vals.astype(np.int32)
            keep = (alu(self.cmp_op).fn(vals, np.int32(0)) != 0).reshape(self.dst.shape)
        active = Machine.effective_mask(self.dst, self.mask)
        same = self.on_true_tile.dtype is self.dst.dtype
        x = read_operand(m, self.on_true_tile, self.dst, self.mask, raw=same)
        if active is None and SELECT_IN_ONE_WRITE:
            # every element written: the selection of what the two writes below store, in one write
            dt = self.dst.dtype
            values = x.reshape(self.dst.shape)
            chosen = np.where(keep, values if same else convert(values, dt, m.precise),
                              convert(np.float32(self.on_false_value), dt, m.precise))
            m.write(self.dst, chosen, raw=True)
            return
        on, off = (keep, ~keep) if active is None else (keep & active, ~keep & active)
        m.write(self.dst, x.reshape(self.dst.shape), on, raw=same)
        m.write(self.dst, np.float32(self.on_false_value), off)


_PARTITION_REDUCE = {
    "add": lambda x: x.sum(axis=0, keepdims=True, dtype=np.float32),
    "maximum": lambda x: x.max(axis=0, keepdims=True),
    "average": lambda x: x.mean(axis=0, keepdims=True, dtype=np.float32),
    "bitwise_or": lambda x: np.bitwise_or.reduce(x, axis=0, keepdims=True),
    "bitwise_and": lambda x: np.bitwise_and.reduce(x, axis=0, keepdims=True),
}


@instruction
class TensorPartitionReduce(Instruction):
    """dst[1, F...] = reduce(op, data) across the partition dim (data [P, F...] -> one partition with the
    same free shape). ops: add, maximum, average (fp32), bitwise_or, bitwise_and (raw integers). SBUF only.
    """

    opcode = "tensor_partition_reduce"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    op: object = None
    data: object = operand(READ)

    @classmethod
    def result(cls, *, data):
        """One partition of `data`'s free shape: [P, F...] -> [1, F...], its dtype."""
        return (1,) + tuple(data.shape[1:]), data.dtype

    def check(self, ctx) -> None:
        name = op_name(self.op)
        expect(name in _PARTITION_REDUCE, "tensor_partition_reduce op must be add, maximum, average, bitwise_or "
               "or bitwise_and", got=name, error=KernelError)
        for role, t in (("data", self.data), ("dst", self.dst)):
            check_sbuf(t, role)
            check_partitions(t, role, ctx.hw)
        expect(self.dst.shape[0] == 1, "dst has one partition", expected=1, got=self.dst.shape[0])
        expect(self.dst.free_size == self.data.free_size, "dst has the free shape of data",
               expected=self.data.free_size, got=self.dst.free_size)
        if name.startswith("bitwise"):
            expect(self.data.dtype.is_int, "bitwise reductions need integer data", got=self.data.dtype,
                   error=DtypeError)

    def run(self, m) -> None:
        name = op_name(self.op)
        x = flat(m.read(self.data) if name.startswith("bitwise") else m.read_f32(self.data))
        m.write(self.dst, _PARTITION_REDUCE[name](x).reshape(self.dst.shape), self.mask)


@instruction
class LocalGather(Instruction):
    """Gather within each GpSimd core (16 partitions): for core c, the core's uint16 indices are read in
    partition-major order (`index[16c:16c+16].flatten(order='F')`), the first `num_valid_indices` of them
    kept, and index h copies elements h .. h + num_elem_per_idx - 1 of every partition's flattened free
    dim (the same gather for all 16 partitions of the core; spec/isa.md §12.1 C11):

        dst[p, j, :] = src_buffer[p, h_j : h_j + num_elem_per_idx]

    dst is [P, V, num_elem_per_idx] (any shape with that many elements per partition), dtype of src_buffer
    (no conversion). P is a multiple of 16; num_elem_per_idx in {1, 2, 4, 8, 16, 32}; V <= 4096 and at most
    the core's index count (default: all of them). Out-of-range indices are undefined on hardware; opennki
    raises. SBUF only."""

    opcode = "local_gather"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    src_buffer: object = operand(READ)
    index: object = operand(READ)
    num_elem_per_idx: int = 1
    num_valid_indices: object = None

    @classmethod
    def result(cls, *, src_buffer, index, num_elem_per_idx=1, num_valid_indices=None):
        """[P, V, num_elem_per_idx] of `src_buffer`'s dtype; V defaults to every index of a core (16 partitions
        of `index`)."""
        valid = num_valid_indices if num_valid_indices is not None else index.free_size * 16
        return (src_buffer.shape[0], int(valid), int(num_elem_per_idx)), src_buffer.dtype

    def valid_indices(self) -> int:
        per_core = self.index.free_size * _CORE_PARTITIONS
        return per_core if self.num_valid_indices is None else int(self.num_valid_indices)

    def check(self, ctx) -> None:
        for role, t in (("dst", self.dst), ("src_buffer", self.src_buffer), ("index", self.index)):
            check_sbuf(t, role)
            check_partitions(t, role, ctx.hw)
        check_same_partitions(self.src_buffer, self.index, "src_buffer", "index")
        check_same_partitions(self.dst, self.src_buffer, "dst", "src_buffer")
        expect(self.index.shape[0] % _CORE_PARTITIONS == 0, "local_gather works on whole GpSimd cores: the "
               "partition count is a multiple of 16", got=self.index.shape[0])
        check_dtype(self.index, "index", ("uint16",), "a uint16 tile")
        k = int(self.num_elem_per_idx)
        expect(k in _ELEMS_PER_INDEX, "num_elem_per_idx must be 1, 2, 4, 8, 16 or 32", got=k, error=KernelError)
        V = self.valid_indices()
        expect(0 < V <= min(4096, self.index.free_size * _CORE_PARTITIONS),
               "num_valid_indices is at most 4096 and at most the indices one core holds",
               expected=f"<= {min(4096, self.index.free_size * _CORE_PARTITIONS)}", got=V, error=KernelError)
        expect(self.dst.dtype is self.src_buffer.dtype, "local_gather does not convert: dst has src's dtype",
               expected=self.src_buffer.dtype, got=self.dst.dtype, error=DtypeError)
        expect(self.dst.free_size == V * k, "dst holds num_valid_indices * num_elem_per_idx elements per "
               "partition", expected=V * k, got=self.dst.free_size)

    def run(self, m) -> None:
        S = flat(m.read(self.src_buffer))
        I_ = flat(m.read(self.index)).astype(np.int64)
        P, F = S.shape
        k, V = int(self.num_elem_per_idx), self.valid_indices()
        out = np.empty((P, V, k), S.dtype)
        for c in range(P // _CORE_PARTITIONS):
            rows = slice(_CORE_PARTITIONS * c, _CORE_PARTITIONS * (c + 1))
            idx = I_[rows].flatten(order="F")[:V]
            if idx.size and (idx.min() < 0 or idx.max() + k > F):
                raise OutOfBoundsError(f"local_gather index out of range for core {c}",
                                       expected=f"indices in [0, {F - k}]", got=f"[{idx.min()}, {idx.max()}]",
                                       code="err_tensor_access_out_of_bound")
            gathered = S[rows][:, idx[:, None] + np.arange(k)[None, :]]
            out[rows] = gathered
        m.write(self.dst, out.reshape(self.dst.shape), self.mask, raw=True)


@instruction
class NcNGather(Instruction):
    """dst[p, j] = data[p, indices[p, j]] over each partition's flattened free elements (NumPy
    `take_along_axis`), bit-exact. indices: an integer tile (uint32 documented; any integer dtype accepted)
    with values in [0, F_data); dst has data's dtype and as many elements per partition as indices. SBUF
    only. New generation (replaces `nl.gather_flattened`)."""

    opcode = "nc_n_gather"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    data: object = operand(READ)
    indices: object = operand(READ)

    def check(self, ctx) -> None:
        for role, t in (("dst", self.dst), ("data", self.data), ("indices", self.indices)):
            check_sbuf(t, role)
            check_partitions(t, role, ctx.hw)
        check_same_partitions(self.dst, self.data, "dst", "data")
        check_same_partitions(self.dst, self.indices, "dst", "indices")
        expect(self.indices.dtype.is_int, "indices must be an integer tile", got=self.indices.dtype,
               error=DtypeError)
        expect(self.dst.dtype is self.data.dtype, "dst has data's dtype", expected=self.data.dtype,
               got=self.dst.dtype, error=DtypeError)
        expect(self.dst.free_size == self.indices.free_size, "dst has as many elements per partition as indices",
               expected=self.indices.free_size, got=self.dst.free_size)

    def run(self, m) -> None:
        d = flat(m.read(self.data))
        idx = read_operand(m, self.indices, self.dst, self.mask, raw=True).astype(np.int64)
        active = Machine.effective_mask(self.dst, self.mask)
        check_idx = idx if active is None else idx[flat(active)]
        if check_idx.size and (check_idx.min() < 0 or check_idx.max() >= d.shape[1]):
            raise OutOfBoundsError("nc_n_gather index out of range", expected=f"[0, {d.shape[1] - 1}]",
                                   got=f"[{check_idx.min()}, {check_idx.max()}]",
                                   code="err_tensor_access_out_of_bound")
        out = np.take_along_axis(d, np.clip(idx, 0, d.shape[1] - 1), axis=1)
        m.write(self.dst, out.reshape(self.dst.shape), self.mask, raw=True)


@instruction
class SequenceBounds(Instruction):
    """For each element of segment_ids[1, n] (0 = padding), the [start, end) bounds of its run of equal
    consecutive ids: dst[1, 2, n] = (start, end); padding elements get (n, -1). fp32 or int32."""

    opcode = "sequence_bounds"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    segment_ids: object = operand(READ)

    @classmethod
    def result(cls, *, segment_ids):
        """[1, 2, n] for the n ids, their dtype."""
        return (1, 2, segment_ids.free_size), segment_ids.dtype

    def check(self, ctx) -> None:
        check_sbuf(self.segment_ids, "segment_ids")
        check_sbuf(self.dst, "dst")
        check_on_chip(self.dst, "dst")
        expect(self.segment_ids.shape[0] == 1 and self.dst.shape[0] == 1, "sequence_bounds works on one "
               "partition", expected=1, got=(self.segment_ids.shape[0], self.dst.shape[0]))
        for role, t in (("segment_ids", self.segment_ids), ("dst", self.dst)):
            check_dtype(t, role, ("float32", "int32"))
        expect(self.dst.free_size == 2 * self.segment_ids.free_size, "dst is [1, 2, n]",
               expected=(1, 2, self.segment_ids.free_size), got=self.dst.shape)

    def run(self, m) -> None:
        s = flat(m.read_f32(self.segment_ids))[0]
        n = s.size
        pos = np.arange(n)
        new_run = np.ones(n, bool)
        new_run[1:] = s[1:] != s[:-1]
        start = np.maximum.accumulate(np.where(new_run, pos, 0))
        run_end = np.ones(n, bool)
        run_end[:-1] = s[:-1] != s[1:]
        end = np.minimum.accumulate(np.where(run_end, pos + 1, n)[::-1])[::-1]
        pad = s == 0
        out = np.stack([np.where(pad, n, start), np.where(pad, -1, end)]).astype(np.float32)
        m.write(self.dst, out.reshape(self.dst.shape), self.mask)


@instruction
class NonzeroWithCount(Instruction):
    """For the first partition of each GpSimd core (0, 16, ..., 112): dst[p, :n] = the flat indices of the
    nonzero elements of src[p] (+ index_offset), dst[p, n:T] = padding_val, dst[p, T] = n. Other
    partitions of dst are left untouched. src [P, T] fp32/int32, dst [P, T + 1] int32, SBUF only,
    NeuronCore-v3+ (new generation)."""

    opcode = "nonzero_with_count"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    src: object = operand(READ)
    index_offset: int = 0
    padding_val: int = -1

    def check(self, ctx) -> None:
        require(ctx, "nonzero_with_count", "nonzero_with_count")
        for role, t in (("dst", self.dst), ("src", self.src)):
            check_sbuf(t, role)
            check_partitions(t, role, ctx.hw)
        check_same_partitions(self.dst, self.src, "dst", "src")
        check_dtype(self.src, "src", ("float32", "int32"))
        check_dtype(self.dst, "dst", ("int32",))
        expect(self.dst.free_size == self.src.free_size + 1, "dst holds the indices and the count: [P, T + 1]",
               expected=self.src.free_size + 1, got=self.dst.free_size)

    def run(self, m) -> None:
        s = flat(m.read(self.src))
        P, T = s.shape
        out = np.zeros((P, T + 1), np.int64)
        rows = np.zeros(P, bool)
        for p in range(0, P, _CORE_PARTITIONS):
            nz = np.flatnonzero(s[p] != 0) + int(self.index_offset)
            out[p, :nz.size] = nz
            out[p, nz.size:T] = int(self.padding_val)
            out[p, T] = nz.size
            rows[p] = True
        written = np.broadcast_to(rows.reshape((P,) + (1,) * (self.dst.ndim - 1)), self.dst.shape)
        m.write(self.dst, out.reshape(self.dst.shape), written)


_TOPK_GROUP = 16


def topk_snake(src: np.ndarray, n: int) -> np.ndarray:
    """[groups, n] fp32: each 16-partition group's first n elements in snake order (element e of a group at
    partition e % 16, free position e // 16)."""
    P = src.shape[0]
    groups = src.reshape(P // _TOPK_GROUP, _TOPK_GROUP, -1)          # [g, partition in group, position]
    return np.swapaxes(groups, 1, 2).reshape(P // _TOPK_GROUP, -1)[:, :n].astype(np.float32)


@instruction
class Topk(Instruction):
    """The k largest values of each 16-partition group of src and their indices (NKI 0.6: SDK 2.32; the
    semantics of the NKI 0.7 / SDK 2.33 page, the newest, which makes the 2.32 text precise).

    Each group of 16 partitions holds one problem: its element e is src[g + e % 16, e // 16], for e < n
    (storage past n is ignored). k is val_dst's free size. Result j of a group is written in the same snake
    layout, at partition g + j % 16, free position j // 16: val_dst (bf16) the value, idx_dst (uint32) its
    index in the group's snake. Only the first ceil(k / 16) free positions are written (the rest of val_dst /
    idx_dst keeps its contents); the hardware writes a position across all 16 partitions, and the page's
    sentence on the partitions past k in the last position is cut in the stored copy [GAP]: opennki writes
    them with the next results in rank order (j < n), and -inf / 0xFFFFFFFF past n.

    Order [GAP: decision]: `sorted=True` gives the largest first (descending); `sorted=False` (the default;
    "order unspecified") gives them ascending, the order NKI 0.6's page documents. Ties keep snake order
    (the lower index ranks first); NaN ranks below every number. src bf16, outputs SBUF, P a multiple of 16,
    8 <= n < 65536, 1 <= k < 32768, k <= n, src free size >= ceil(n / 16)."""

    opcode = "topk"
    default_engine = Engine.GPSIMD

    val_dst: object = operand(WRITE)
    idx_dst: object = operand(WRITE)
    src: object = operand(READ)
    n: int = 8
    sorted: bool = False

    def check(self, ctx) -> None:
        require(ctx, "topk", "topk")
        for role, t in (("val_dst", self.val_dst), ("idx_dst", self.idx_dst), ("src", self.src)):
            check_sbuf(t, role)
            check_partitions(t, role, ctx.hw)
        check_same_partitions(self.val_dst, self.src, "val_dst", "src")
        check_same_partitions(self.idx_dst, self.src, "idx_dst", "src")
        check_dtype(self.src, "src", ("bfloat16",))
        check_dtype(self.val_dst, "val_dst", ("bfloat16",))
        check_dtype(self.idx_dst, "idx_dst", ("uint32",))
        P, n, k = self.src.shape[0], self.n, self.val_dst.free_size
        expect(P % _TOPK_GROUP == 0, "topk needs a partition count that is a multiple of 16", got=P)
        expect(isinstance(n, (int, np.integer)) and 8 <= n < 65536, "topk needs 8 <= n < 65536", got=n,
               error=KernelError)
        expect(1 <= k < 32768 and k <= n, "topk's k (val_dst's free size) must satisfy 1 <= k < 32768 and k <= n",
               expected=f"[1, {min(n, 32767)}]", got=k)
        expect(self.idx_dst.free_size == k, "idx_dst has val_dst's shape [P, k]", expected=k,
               got=self.idx_dst.free_size)
        expect(self.src.free_size >= -(-n // _TOPK_GROUP), "topk's src needs ceil(n / 16) free elements",
               expected=f">= {-(-n // _TOPK_GROUP)}", got=self.src.free_size)

    def run(self, m) -> None:
        n, k = int(self.n), self.val_dst.free_size
        seq = topk_snake(flat(m.read(self.src)), n)                 # [groups, n]
        key = np.where(np.isnan(seq), -np.inf, seq)
        order = np.argsort(-key, axis=1, kind="stable")             # descending, ties in snake order
        slots = -(-k // _TOPK_GROUP) * _TOPK_GROUP                  # whole written positions
        rank = np.arange(slots)
        if not self.sorted:                                          # the k results ascending, then the rest
            rank = np.where(rank < k, k - 1 - rank, rank)
        valid = rank < n
        idx = np.take_along_axis(order, np.minimum(rank, n - 1)[None, :].repeat(seq.shape[0], 0), axis=1)
        vals = np.take_along_axis(seq, idx, axis=1)
        vals = np.where(valid, vals, -np.inf)
        idx = np.where(valid, idx, 0xFFFFFFFF)
        P, F = self.src.shape[0], k
        positions = slots // _TOPK_GROUP
        out_v = np.zeros((P, F), np.float32)
        out_i = np.zeros((P, F), np.int64)
        for snake, out in ((vals, out_v), (idx, out_i)):           # result j -> (g + j % 16, j // 16)
            placed = snake.reshape(-1, positions, _TOPK_GROUP).swapaxes(1, 2).reshape(P, positions)
            out[:, :positions] = placed
        written = np.zeros((P, F), bool)
        written[:, :positions] = True
        m.write(self.val_dst, out_v.reshape(self.val_dst.shape), written.reshape(self.val_dst.shape))
        m.write(self.idx_dst, out_i.astype(np.uint32).reshape(self.idx_dst.shape),
                written.reshape(self.idx_dst.shape), raw=True)
