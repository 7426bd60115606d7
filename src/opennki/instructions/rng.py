"""ISA layer: random-number instructions (spec/isa.md §6.31).

Imports the ISA base. The hardware generators (an LFSR on the Vector Engine before NeuronCore-v4, XORWOW
after) and their bit streams are not documented, so opennki models them statistically with one seeded,
deterministic generator per program: `Machine.rng` (a NumPy PCG64 generator seeded from
`SimOptions.seed`). `set_rng_seed` re-seeds it, so the same seed reproduces the same `rng`, `rand2` and
`dropout` values, on every engine (on hardware `nl.random_seed` may seed a different engine than the one
`rand` uses; opennki keeps one stream). `rand_get_state` / `rand_set_state` move that stream's state in the
documented shape (per lane, 6 uint32 words for GpSimd's XORWOW generator, 24 for the Vector Engine's four);
the words themselves are opennki's (the real XORWOW state is not reproduced), but what the instructions promise
holds: a state read back and set again continues the stream exactly where it was read, and the same state
words always give the same random values.
"""

from __future__ import annotations

import weakref

import numpy as np

from opennki.errors import DtypeError, KernelError, expect
from opennki.events import Engine
from opennki.instructions.base import (READ, WRITE, Instruction, check_column, require,
                                       check_on_chip, check_partitions, column, flat, instruction, is_tensor,
                                       operand, read_operand)
from opennki.instructions.enums import chosen_engine
from opennki.instructions.vector import check_elementwise, check_engine, check_gpsimd_buffers

_RAND2_DTYPES = ("float8_e4m3", "float8_e5m2", "float16", "bfloat16", "float32", "tfloat32", "int8", "int16",
                 "int32", "uint8", "uint16", "uint32")


def reseed(m, seed: int) -> None:
    """Restart the program's random stream from `seed` (a 32-bit value)."""
    m.rng = np.random.default_rng(int(seed) & 0xFFFFFFFF)


@instruction
class Dropout(Instruction):
    """dst = data with each element replaced by 0 with probability `prob` (a scalar, or a [P, 1] tile of
    per-partition probabilities); survivors are not rescaled (no 1/(1-prob) factor is documented).
    prob 0 keeps everything, 1 drops everything. Integer data needs an fp32 prob tile and keeps its dtype
    (bit-exact survivors). A random number is drawn for every element of the tile, so results depend only
    on the seed and the sequence of random instructions."""

    opcode = "dropout"
    result_like = "data"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    data: object = operand(READ)
    prob: object = operand(READ, optional=True)

    def check(self, ctx) -> None:
        check_elementwise(ctx, self.dst, {"data": self.data})
        check_column(self.prob, "prob", self.data.shape[0])
        if is_tensor(self.prob):
            expect(self.prob.dtype.is_float, "prob must be a float tile", got=self.prob.dtype, error=DtypeError)
            if self.data.dtype.is_int:
                expect(self.prob.dtype.name == "float32", "integer data needs an fp32 prob",
                       got=self.prob.dtype, error=DtypeError)
        else:
            expect(0.0 <= float(self.prob) <= 1.0, "prob must be in [0, 1]", got=self.prob, error=KernelError)
        if self.data.dtype.is_int:
            expect(self.dst.dtype is self.data.dtype, "dropout of integer data keeps its dtype",
                   expected=self.data.dtype, got=self.dst.dtype, error=DtypeError)

    def run(self, m) -> None:
        P = self.data.shape[0]
        same = self.dst.dtype is self.data.dtype
        x = read_operand(m, self.data, self.dst, self.mask, raw=same)
        keep = m.rng.random(x.shape, dtype=np.float32) >= column(m, self.prob, P)
        out = np.where(keep, x, np.zeros((), x.dtype))
        m.write(self.dst, out.reshape(self.dst.shape), self.mask, raw=same)


@instruction
class Rng(Instruction):
    """dst = random bits: 32 random bits per element, truncated to the low bits of dst's integer dtype.
    Engines: vector (default), gpsimd (NeuronCore-v3+, SBUF only). New generation."""

    opcode = "rng"
    default_engine = Engine.VECTOR
    chooses_engine = True

    dst: object = operand(WRITE)
    engine: object = None


    def check(self, ctx) -> None:
        check_on_chip(self.dst, "dst")
        check_partitions(self.dst, "dst", ctx.hw)
        expect(self.dst.dtype.name in ("int8", "int16", "int32", "uint8", "uint16", "uint32"),
               "rng writes an 8/16/32-bit integer tile", got=self.dst.dtype, error=DtypeError)
        ex = self.executor
        check_engine(ex, (Engine.VECTOR, Engine.GPSIMD), self.opcode)
        if ex is Engine.GPSIMD:
            require(ctx, "gpsimd_rng", "rng on the GpSimd engine")
        check_gpsimd_buffers(ex, {"dst": self.dst})

    def run(self, m) -> None:
        bits = m.rng.integers(0, 2 ** 32, size=self.dst.shape, dtype=np.uint64).astype(np.uint32)
        width = self.dst.dtype.np_dtype
        low = (bits & np.uint32((1 << (8 * width.itemsize)) - 1)).astype(f"u{width.itemsize}")
        m.write(self.dst, low.view(width), self.mask, raw=True)


@instruction
class Rand2(Instruction):
    """dst = uniform fp32 values in [min, max] (scalars or [P, 1] tiles, min < max), converted to dst's
    dtype. Vector Engine, NeuronCore-v4 only. New generation."""

    opcode = "rand2"
    default_engine = Engine.VECTOR

    dst: object = operand(WRITE)
    min: object = operand(READ, optional=True)
    max: object = operand(READ, optional=True)

    def check(self, ctx) -> None:
        require(ctx, "rand2", "rand2")
        check_on_chip(self.dst, "dst")
        check_partitions(self.dst, "dst", ctx.hw)
        expect(self.dst.dtype.name in _RAND2_DTYPES, "rand2 dst dtype", expected="/".join(_RAND2_DTYPES),
               got=self.dst.dtype, error=DtypeError)
        P = self.dst.shape[0]
        check_column(self.min, "min", P)
        check_column(self.max, "max", P)
        if not is_tensor(self.min) and not is_tensor(self.max):
            expect(float(self.min) < float(self.max), "rand2 needs min < max", got=(self.min, self.max),
                   error=KernelError)

    def run(self, m) -> None:
        P = self.dst.shape[0]
        lo, hi = column(m, self.min, P), column(m, self.max, P)
        u = m.rng.random((P, self.dst.free_size), dtype=np.float32)
        m.write(self.dst, (lo + u * (hi - lo)).reshape(self.dst.shape), self.mask)


@instruction
class SetRngSeed(Instruction):
    """Seed the random stream from a 32-bit value: a [1, 1] 32-bit integer tile in SBUF/PSUM (as the new
    generation has it), or a Python int (for compositions such as the legacy `nl.random_seed(seed=5)`).
    The same seed reproduces the same sequence of random values."""

    opcode = "set_rng_seed"
    default_engine = Engine.VECTOR

    src_seeds: object = operand(READ, immediate=True)

    def check(self, ctx) -> None:
        if is_tensor(self.src_seeds):
            check_on_chip(self.src_seeds, "src_seeds")
            expect(self.src_seeds.size == 1, "src_seeds is one [1, 1] element", got=self.src_seeds.shape)
            expect(self.src_seeds.dtype.name in ("int32", "uint32", "float32"),
                   "src_seeds is a 32-bit value", got=self.src_seeds.dtype, error=DtypeError)
        else:
            expect(isinstance(self.src_seeds, (int, np.integer)), "the seed must be an integer or a [1, 1] tile",
                   got=type(self.src_seeds).__name__, error=DtypeError)

    def run(self, m) -> None:
        if is_tensor(self.src_seeds):
            raw = flat(m.read(self.src_seeds)).reshape(-1)[:1]
            seed = int(np.ascontiguousarray(raw).view(np.uint32)[0]) if raw.itemsize == 4 else int(raw[0])
        else:
            seed = int(self.src_seeds)
        reseed(m, seed)



# -- generator state (rand_get_state / rand_set_state) ---------------------------------------------------------

STATE_WORDS = {Engine.GPSIMD: 6, Engine.VECTOR: 24}     # uint32 words per lane: one XORWOW state / four
_READ_BACK: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # machine -> {state words: stream state}


def _check_state_tile(ctx, t, role: str, engine: Engine, psum_ok: bool) -> None:
    check_on_chip(t, role)
    check_partitions(t, role, ctx.hw)
    expect(t.dtype.name == "uint32", f"'{role}' holds the generator state as uint32 words", got=t.dtype,
           error=DtypeError)
    words = STATE_WORDS[engine]
    expect(t.free_size == words, f"a {engine.name.lower()} generator state is {words} words per lane",
           expected=words, got=t.free_size)
    if not (psum_ok and engine is Engine.VECTOR):
        from opennki.instructions.gpsimd import check_sbuf
        check_sbuf(t, role)


def _state_engine(ctx, value, opcode: str) -> Engine:
    ex = chosen_engine(value, Engine.GPSIMD)
    check_engine(ex, (Engine.GPSIMD, Engine.VECTOR), opcode)
    if ex is Engine.GPSIMD:
        require(ctx, "gpsimd_rng", f"{opcode} on the GpSimd engine")
    else:
        require(ctx, "rand2", f"{opcode} on the Vector Engine (its XORWOW generators)")
    return ex


@instruction
class RandGetState(Instruction):
    """dst [P, words] uint32 = the random generator's state, per lane (6 words on GpSimd, 24 on the Vector
    Engine; see the module docstring). Reading the state does not advance the stream. dst in SBUF (PSUM too
    for the Vector Engine on NeuronCore-v4); GpSimd NeuronCore-v3+, Vector NeuronCore-v4+."""

    opcode = "rand_get_state"
    default_engine = Engine.GPSIMD
    chooses_engine = True

    dst: object = operand(WRITE)
    engine: object = None


    def check(self, ctx) -> None:
        _check_state_tile(ctx, self.dst, "dst", _state_engine(ctx, self.engine, self.opcode), psum_ok=True)

    def run(self, m) -> None:
        state = m.rng.bit_generator.state
        seed = [int(state["state"]["state"]) >> s & 0xFFFFFFFF for s in range(0, 128, 32)]
        words = np.random.SeedSequence(seed).generate_state(self.dst.size, dtype=np.uint32)
        words = words.reshape(self.dst.shape)
        _READ_BACK.setdefault(m, {})[words.tobytes()] = state
        m.write(self.dst, words, raw=True)


@instruction
class RandSetState(Instruction):
    """Set the random generator's state from src_seeds [P, words] uint32 (SBUF; 6 words per lane on GpSimd,
    24 on the Vector Engine). Words a `rand_get_state` read continue the stream from where it was read; any
    other words seed it deterministically (the same words, the same random values)."""

    opcode = "rand_set_state"
    default_engine = Engine.GPSIMD
    chooses_engine = True

    src_seeds: object = operand(READ)
    engine: object = None


    def check(self, ctx) -> None:
        _check_state_tile(ctx, self.src_seeds, "src_seeds", _state_engine(ctx, self.engine, self.opcode),
                          psum_ok=False)

    def run(self, m) -> None:
        words = np.ascontiguousarray(m.read(self.src_seeds)).view(np.uint32).reshape(self.src_seeds.shape)
        state = _READ_BACK.get(m, {}).get(words.tobytes())
        if state is not None:
            m.rng = np.random.Generator(np.random.PCG64())
            m.rng.bit_generator.state = state
        else:
            m.rng = np.random.default_rng(np.random.SeedSequence(words.reshape(-1).tolist()))
