"""ISA layer: Vector Engine statistics and top-8 instructions (spec/isa.md §6.21-6.24).

Imports the ISA base. `bn_stats` / `bn_aggr` compute batch-norm statistics per partition; `max8`,
`nc_find_index8` and `nc_match_replace8` are the building blocks of a top-k (repeated `max8` +
`nc_match_replace8(imm=-inf)`, then `nc_find_index8` for positions). All compare and compute in fp32.
The documentation does not name the engine of `max8` / `nc_find_index8`; opennki runs them on the Vector
Engine like `nc_match_replace8`.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from opennki.errors import DtypeError, expect
from opennki.machine.machine import Machine
from opennki.events import Engine
from opennki.machine.dtypes import SCALAR_TYPES, uint32
from opennki.instructions.base import (READ, WRITE, Instruction, check_dtype, check_on_chip,
                                       check_partitions, check_same_partitions, flat, instruction, operand,
                                       read_operand)

_FMIN, _FMAX = 8, 16384          # elements per partition accepted by the top-8 instructions
TOP = 8                          # values (and indices) per partition the top-8 instructions write
_INDEX_DTYPES = ("uint16", "uint32")


def check_rows(ctx, dst, inputs: dict) -> None:
    """On-chip operands with the same partition count (at most pmax)."""
    check_on_chip(dst, "dst")
    check_partitions(dst, "dst", ctx.hw)
    for role, t in inputs.items():
        check_on_chip(t, role)
        check_partitions(t, role, ctx.hw)
        check_same_partitions(dst, t, "dst", role)


@instruction
class BnStats(Instruction):
    """Batch-norm statistics of each partition's free elements, for even and odd positions separately:
    dst[P, 6] = (count, mean, variance * count) of the even elements, then of the odd ones (fp32). An empty
    half (a single element) gives (0, 0, 0) (spec gap: zero-count tuples)."""

    opcode = "bn_stats"
    default_engine = Engine.VECTOR
    width: ClassVar[int] = 6    # elements per partition of the result

    dst: object = operand(WRITE)
    data: object = operand(READ)

    @classmethod
    def result(cls, *, data):
        """[P, 6] (two (count, mean, variance * count) triples), `data`'s dtype."""
        return (data.shape[0], cls.width), data.dtype

    def check(self, ctx) -> None:
        check_rows(ctx, self.dst, {"data": self.data})
        fmax = ctx.hw.tiles.bn_stats_fmax
        expect(self.data.free_size <= fmax, f"bn_stats input has at most {fmax} elements per partition",
               expected=f"<= {fmax}", got=self.data.free_size, hint="split the free dim and aggregate "
               "the statistics of all chunks with bn_aggr")
        expect(self.dst.free_size == self.width, f"bn_stats writes {self.width} elements per partition",
               expected=self.width, got=self.dst.free_size)

    def run(self, m) -> None:
        # a legacy mask over the input (the official layernorm tutorial masks the ragged last chunk of the
        # free dim) leaves the masked-off elements out of the statistics
        active = m.effective_mask(self.data, self.mask)
        x = flat(m.read_f32(self.data, active)).astype(np.float64)
        on = np.ones(x.shape, bool) if active is None else flat(active)
        cols = []
        for half in (slice(0, None, 2), slice(1, None, 2)):
            part, a = x[:, half], on[:, half]
            n = a.sum(axis=1).astype(np.float64)
            total = np.where(a, part, 0.0).sum(axis=1)
            mean = np.divide(total, n, out=np.zeros_like(n), where=n > 0)
            m2 = np.where(a, (part - mean[:, None]) ** 2, 0.0).sum(axis=1)
            cols += [n, mean, m2]
        m.write(self.dst, np.stack(cols, axis=1).astype(np.float32).reshape(self.dst.shape), self.mask)


@instruction
class BnAggr(Instruction):
    """Aggregate bn_stats tuples: dst[P, 2] = (mean, population variance) over all (count, mean, m2)
    triples of data (the free size is a multiple of 3)."""

    opcode = "bn_aggr"
    default_engine = Engine.VECTOR
    width: ClassVar[int] = 2    # elements per partition of the result

    dst: object = operand(WRITE)
    data: object = operand(READ)

    @classmethod
    def result(cls, *, data):
        """[P, 2] (mean, variance), `data`'s dtype."""
        return (data.shape[0], cls.width), data.dtype

    def check(self, ctx) -> None:
        check_rows(ctx, self.dst, {"data": self.data})
        expect(self.data.free_size % 3 == 0, "bn_aggr input is a sequence of (count, mean, m2) triples",
               expected="a multiple of 3 elements per partition", got=self.data.free_size)
        expect(self.dst.free_size == self.width, f"bn_aggr writes {self.width} elements per partition (mean, "
               "variance)", expected=self.width, got=self.dst.free_size)

    def run(self, m) -> None:
        t = flat(m.read_f32(self.data)).astype(np.float64).reshape(self.data.shape[0], -1, 3)
        n, mu, m2 = t[..., 0], t[..., 1], t[..., 2]
        total = n.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = (n * mu).sum(axis=1) / total
            var = (m2 + n * (mu - mean[:, None]) ** 2).sum(axis=1) / total
        m.write(self.dst, np.stack([mean, var], axis=1).astype(np.float32).reshape(self.dst.shape), self.mask)


def _check_top8_input(t, role: str, max_rank: int = 5) -> None:
    expect(_FMIN <= t.free_size <= _FMAX, f"'{role}' must have {_FMIN}..{_FMAX} elements per partition",
           expected=f"[{_FMIN}, {_FMAX}]", got=t.free_size)
    expect(t.ndim <= max_rank, f"'{role}' has at most {max_rank} dimensions", got=t.shape)


def _check_eight(t, role: str) -> None:
    expect(t.free_size == TOP, f"'{role}' holds exactly {TOP} elements per partition", expected=TOP,
           got=t.free_size)


def _masked_data(m, view, mask) -> np.ndarray:
    """fp32 [P, F] values; elements the legacy mask switches off are NaN (never match, never maximal)."""
    active = Machine.effective_mask(view, mask) if mask is not None else None
    x = flat(m.read_f32(view, active))
    if active is not None:
        x = np.where(flat(active), x, np.float32(np.nan))
    return x


@instruction
class Max8(Instruction):
    """dst[P, 8] = the 8 largest fp32 values of each partition of src, in descending order. src has
    8..16384 elements per partition (up to 5-D). NaN sorts below every number (spec gap)."""

    opcode = "max8"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    src: object = operand(READ)

    @classmethod
    def result(cls, *, src):
        """[P, 8], `src`'s dtype."""
        return (src.shape[0], TOP), src.dtype

    def check(self, ctx) -> None:
        check_rows(ctx, self.dst, {"src": self.src})
        _check_top8_input(self.src, "src")
        _check_eight(self.dst, "dst")

    def run(self, m) -> None:
        x = _masked_data(m, self.src, self.mask)
        neg = -np.where(np.isnan(x), -np.inf, x)
        if neg.shape[1] > 8:
            neg = np.partition(neg, 7, axis=1)[:, :8]     # the 8 largest, then only they are sorted
        top = -np.sort(neg, axis=1)
        # NaN only fills the slots left when a partition has fewer than 8 numbers
        count = (~np.isnan(x)).sum(axis=1, keepdims=True)
        top = np.where(np.arange(8)[None, :] >= count, np.float32(np.nan), top)
        m.write(self.dst, top.astype(np.float32).reshape(self.dst.shape))


@instruction
class NcFindIndex8(Instruction):
    """dst[P, 8] = for each of the 8 values of `vals` (per partition), the flat free-dim index of its first
    occurrence in `data` (fp32 comparison). Duplicate values map to successive occurrences in ascending
    order; a value that does not occur gives all ones (0xFFFF / 0xFFFFFFFF), as NKI 2.32 documents.
    dst is uint16 or uint32; data has 8..16384 elements per partition; vals exactly 8."""

    opcode = "nc_find_index8"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    data: object = operand(READ)
    vals: object = operand(READ)

    @classmethod
    def result(cls, *, data):
        """[P, 8] uint32 indices (uint16 if asked)."""
        return (data.shape[0], TOP), uint32

    def check(self, ctx) -> None:
        check_rows(ctx, self.dst, {"data": self.data, "vals": self.vals})
        _check_top8_input(self.data, "data")
        _check_eight(self.vals, "vals")
        _check_eight(self.dst, "dst")
        check_dtype(self.dst, "dst", _INDEX_DTYPES)

    def run(self, m) -> None:
        d = _masked_data(m, self.data, self.mask)
        v = flat(m.read_f32(self.vals))
        missing = np.iinfo(self.dst.dtype.np_dtype).max
        out = np.full(v.shape, missing, np.int64)
        used = np.zeros(d.shape, bool)
        rows = np.arange(d.shape[0])
        for j in range(8):          # slot by slot, each taking the first occurrence no earlier slot took
            hits = (d == v[:, j:j + 1]) & ~used
            found = hits.any(axis=1)
            first = hits.argmax(axis=1)
            out[found, j] = first[found]
            used[rows[found], first[found]] = True
        m.write(self.dst, out.astype(self.dst.dtype.np_dtype).reshape(self.dst.shape), raw=True)


@instruction
class NcMatchReplace8(Instruction):
    """dst = data with the first occurrence of each of the 8 `vals` (per partition) replaced by `imm`.

    The hardware walks vals from slot 7 down to 0, and a replaced element no longer matches, so duplicate
    values replace successive occurrences (NKI 2.32 example: data [1,2,3,4,8,8,...], vals [3,8,8,...] ->
    indices [2, 10, 9, ..., 4]). `dst_idx` ([P, 8], integer) optionally receives the flat index replaced
    for each slot; for a value that does not occur its slot of dst_idx is left unwritten (spec gap).
    """

    opcode = "nc_match_replace8"
    result_like = "data"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    data: object = operand(READ)
    vals: object = operand(READ)
    imm: float = 0.0
    dst_idx: object = operand(WRITE, optional=True)

    def check(self, ctx) -> None:
        check_rows(ctx, self.dst, {"data": self.data, "vals": self.vals})
        expect(self.data.free_size <= _FMAX, f"'data' has at most {_FMAX} elements per partition",
               got=self.data.free_size)
        expect(self.dst.free_size == self.data.free_size, "dst must have as many elements as data",
               expected=self.data.free_size, got=self.dst.free_size)
        _check_eight(self.vals, "vals")
        expect(isinstance(self.imm, SCALAR_TYPES), "imm must be an fp32 scalar",
               got=type(self.imm).__name__, error=DtypeError)
        if self.dst_idx is not None:
            check_rows(ctx, self.dst_idx, {"data": self.data})
            _check_eight(self.dst_idx, "dst_idx")
            expect(self.dst_idx.dtype.is_int, "dst_idx must be an integer tile", got=self.dst_idx.dtype,
                   error=DtypeError)

    def run(self, m) -> None:
        d = read_operand(m, self.data, self.dst, self.mask).copy()
        v = flat(m.read_f32(self.vals))
        idx = np.zeros(v.shape, np.int64)
        found = np.zeros(v.shape, bool)
        imm = np.float32(self.imm)
        rows = np.arange(d.shape[0])
        for j in reversed(range(8)):    # slot 7 first; a replaced element no longer matches later slots
            hits = d == v[:, j:j + 1]
            found[:, j] = hits.any(axis=1)
            first = hits.argmax(axis=1)
            idx[found[:, j], j] = first[found[:, j]]
            d[rows[found[:, j]], first[found[:, j]]] = imm
        m.write(self.dst, d.reshape(self.dst.shape), self.mask)
        if self.dst_idx is not None:
            m.write(self.dst_idx, idx.reshape(self.dst_idx.shape), found.reshape(self.dst_idx.shape))
