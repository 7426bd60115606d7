"""ISA layer: GpSimd Engine (POOL) instructions (spec/isa.md §6.17).

GpSimd reads and writes SBUF only. `iota` materialises an affine integer pattern; the legacy generation's
`iota(expr)` with an index expression is the same instruction with the expression's coefficients as the
pattern.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import MemoryKindError, expect
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import WRITE, Instruction, check_partitions, instruction, operand


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


@instruction
class Iota(Instruction):
    """dst[p, f] = offset + channel_multiplier * p + the pattern's value at f (int32 arithmetic, then
    converted to dst's dtype). The free size of dst equals the product of the pattern counts."""

    opcode = "iota"
    default_engine = Engine.GPSIMD

    dst: object = operand(WRITE)
    pattern: tuple = ()
    offset: int = 0
    channel_multiplier: int = 0

    def check(self, ctx) -> None:
        expect(self.dst.kind is MemoryKind.SBUF, "iota writes SBUF only", expected="SBUF",
               got=self.dst.kind.name, code="err_unsupported_memory", error=MemoryKindError)
        check_partitions(self.dst, "dst", ctx.hw)
        count = int(np.prod([int(n) for _, n in self.pattern])) if self.pattern else 1
        expect(count == self.dst.free_size, "the pattern must cover dst's free size",
               expected=self.dst.free_size, got=count)

    def run(self, m) -> None:
        vals = pattern_values(self.dst.shape[0], self.pattern, self.offset, self.channel_multiplier)
        vals = vals.astype(np.int32).astype(np.int64)  # int32 arithmetic wraps
        m.write(self.dst, vals.reshape(self.dst.shape), self.mask)
