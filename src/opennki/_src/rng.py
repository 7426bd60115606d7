"""Language layer: random numbers for the legacy `nl.rand`, `nl.random_seed` and `nl.dropout`.

Imports language.core and the RNG instructions. The hardware generators are not documented bit for bit;
opennki keeps one seeded stream per program (instructions/rng.py), so a seed reproduces the same values.
"""

from __future__ import annotations

from opennki.instructions.rng import Dropout, Rand2, Rng, SetRngSeed
from opennki.instructions.vector import TensorScalar
from opennki._src import core
from opennki.machine.dtypes import dtype_of, float32, uint32

_MANTISSA_BITS = 24   # an fp32 holds every multiple of 2^-24 in [0, 1) exactly


def rand(shape, dtype=float32, *, api: str = "nl.rand"):
    """A new SBUF tile of i.i.d. uniform values in [0, 1).

    NeuronCore-v4 (trn3): one `rand2(min=0, max=1)`. Earlier targets: `rng` draws 32 random bits, the top
    24 are kept (logical shift right by 8) and scaled by 2^-24, which is exact in fp32 and stays below 1."""
    prog = core.current(api)
    shape = core.normalize_shape(shape)
    result = core.alloc(shape, dtype_of(dtype))
    if prog.hw.capabilities.rand2:
        return prog.defer(Rand2(dst=result, min=0.0, max=1.0), result, api)
    bits = core.alloc(shape, uint32)
    prog.issue(Rng(dst=bits), api)
    prog.issue(TensorScalar(dst=bits, data=bits, op0="right_shift", operand0=32 - _MANTISSA_BITS), api)
    return prog.defer(TensorScalar(dst=result, data=bits, op0="multiply", operand0=2.0 ** -_MANTISSA_BITS),
                      result, api)


def random_seed(seed, *, mask=None, api: str = "nl.random_seed"):
    """Seed the random stream: `seed` is a 32-bit integer or a one-element integer tile ([1, 1] SBUF)."""
    prog = core.current(api)
    prog.issue(SetRngSeed(src_seeds=seed, mask=mask), api)


def dropout(x, rate, *, dtype=None, mask=None, api: str = "nl.dropout"):
    """x with each element replaced by 0 with probability `rate` (a scalar or a one-element tile, or a [P, 1]
    tile of per-partition rates); survivors are not rescaled. Vector Engine `dropout`."""
    prog = core.current(api)
    core.require_tile(x, "x", api)
    if not core.is_scalar(rate):
        core.require_tile(rate, "rate", api)
        if rate.shape[0] != x.shape[0]:
            rate = core.materialize_broadcast(rate, (x.shape[0],) + rate.shape[1:], api)
    result = core.alloc(x.shape, dtype if dtype is not None else x.dtype)
    return prog.defer(Dropout(dst=result, data=x, prob=rate, mask=mask), result, api)


__all__ = ["rand", "random_seed", "dropout"]
