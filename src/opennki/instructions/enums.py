"""ISA layer: the public `nisa` enums and their normalisation (spec/isa.md §3).

The new generation's enums are `Enum`s and the legacy ones `IntEnum`s, with different numbers for
`dge_mode`; instructions never rely on the numbers, only on member names, via the `*_of` helpers.
"""

from __future__ import annotations

import enum

from opennki.errors import KernelError
from opennki.events import Engine


class engine(enum.Enum):
    """`nisa.engine`: which engine runs an instruction (`unknown`: let the instruction choose)."""

    unknown = 0
    tensor = 1
    scalar = 2
    gpsimd = 3
    dma = 4
    vector = 5
    sync = 6


class reduce_cmd(enum.Enum):
    """`nisa.reduce_cmd`: what an instruction does with the engine's accumulator registers."""

    idle = 0
    reset = 1
    reduce = 2
    reset_reduce = 3
    load_reduce = 4


class dge_mode(enum.Enum):
    """`nisa.dge_mode`: who generates DMA descriptors (values as in the new generation)."""

    unknown = 0
    swdge = 1
    hwdge = 2
    none = 3


class oob_mode(enum.Enum):
    """`nisa.oob_mode`: what an indirect DMA does with out-of-bounds indices."""

    error = 0
    skip = 1


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class dma_engine(enum.Enum):
    """`nisa.dma_engine` (NKI 0.3+): which DMA hardware a `sendrecv` uses: `dma`, the shared DMA rings (any
    engine triggers them), or `gpsimd_dma`, GpSimd's internal DMA for low-latency SBUF-to-SBUF swaps in LNC=2."""

    dma = 1
    gpsimd_dma = 2


def dma_engine_of(value) -> str:
    """The name of a `dma_engine` member (its spelling as a string is accepted too)."""
    return value.name if isinstance(value, dma_engine) else value


class nc_version(enum.IntEnum):
    """`nisa.nc_version`: NeuronCore generation of the target."""

    gen2 = 2
    gen3 = 3
    gen4 = 4


def _member(enum_cls, value, what: str):
    if value is None:
        return None
    if isinstance(value, enum_cls):
        return value
    if isinstance(value, enum.Enum):
        value = value.name
    if isinstance(value, str):
        try:
            return enum_cls[value]
        except KeyError:
            pass
    raise KernelError(f"invalid {what}: {value!r}", expected=f"a member of nisa.{enum_cls.__name__}",
                      got=value, hint="pass the enum member (raw integers are rejected)")


# the Engine of each enum member already normalised (either generation's `nisa.engine`, or an Engine), by the
# member's id: id -> (member, Engine). `engine_of` runs for every instruction that takes `engine=`; raw integers
# are never cached, so still raise
_ENGINE_OF: dict[int, tuple[enum.Enum, Engine]] = {}


def engine_of(value) -> Engine:
    """Normalise an `engine=` argument (nisa.engine member, opennki Engine or None) to an Engine. An enum member's
    Engine is found by the member's id (`_ENGINE_OF`, whose entry holds the member, so the id is never another
    object's): hashing an enum member is a Python call, and every instruction's `executor` asks."""
    if value is None:
        return Engine.UNKNOWN
    found = _ENGINE_OF.get(id(value))
    if found is not None and found[0] is value:
        return found[1]
    if isinstance(value, Engine):
        chosen = value
    elif not isinstance(value, enum.Enum):
        return Engine(_member(engine, value, "engine").value)
    else:
        chosen = Engine(_member(engine, value, "engine").value)
    _ENGINE_OF[id(value)] = (value, chosen)       # enum members: a few dozen
    return chosen


def chosen_engine(value, default: Engine) -> Engine:
    """The engine an `engine=` argument names, or `default` when it names none."""
    chosen = engine_of(value)
    return default if chosen is Engine.UNKNOWN else chosen


def reduce_cmd_of(value) -> reduce_cmd:
    return _member(reduce_cmd, value, "reduce_cmd") or reduce_cmd.idle


def dge_mode_of(value) -> dge_mode:
    return _member(dge_mode, value, "dge_mode") or dge_mode.unknown


def oob_mode_of(value) -> oob_mode:
    return _member(oob_mode, value, "oob_mode") or oob_mode.error


def perf_mode_of(value) -> matmul_perf_mode:
    if isinstance(value, str) and value.startswith("double_row"):
        return matmul_perf_mode.double_row   # legacy kernels pass 'double_row_gen3'
    return _member(matmul_perf_mode, value, "perf_mode") or matmul_perf_mode.none
