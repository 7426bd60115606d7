"""Events layer: the frozen records the simulator emits and listeners read. Imports only opennki.errors.

This module is the whole contract between the simulator and its listeners (cost model, profiler, tracer,
race checker). An event never holds live tensors or machine state, only values: listeners can keep every
event without keeping memory alive, and they cannot change results through them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields

import numpy as np

from opennki.errors import SourceLocation


class Engine(enum.Enum):
    """Executors of a NeuronCore. Values follow `nisa.engine` where NKI numbers them."""

    UNKNOWN = 0
    TENSOR = 1      # PE: matmul, transpose
    SCALAR = 2      # ACT: activation functions
    GPSIMD = 3      # POOL: general SIMD cores
    DMA = 4         # DMA queues
    VECTOR = 5      # DVE
    SYNC = 6        # SP: sequencer that triggers DMAs


class MemoryKind(enum.Enum):
    HBM = "hbm"
    SBUF = "sbuf"
    PSUM = "psum"

    @property
    def is_on_chip(self) -> bool:
        return self is not MemoryKind.HBM


class AccessKind(enum.Enum):
    READ = "read"
    WRITE = "write"
    ACCUMULATE = "accumulate"   # read-modify-write by the instruction itself (PSUM accumulate, DMA RMW)


@dataclass(frozen=True)
class Region:
    """A rectangle of physical memory: partitions x bytes (on chip) or a byte range (HBM, partition 0/1).

    `byte_start`/`byte_end` are physical addresses from the allocator (per partition on chip, linear in HBM),
    so two regions overlap exactly when the hardware accesses could conflict, even across different tensors
    that reuse the same freed address range.
    """

    kind: MemoryKind
    storage_id: int
    partition_start: int
    partition_count: int
    byte_start: int
    byte_end: int

    @property
    def size_bytes(self) -> int:
        return self.partition_count * (self.byte_end - self.byte_start)

    def overlaps(self, other: "Region") -> bool:
        return (self.kind is other.kind
                and self.byte_start < other.byte_end and other.byte_start < self.byte_end
                and self.partition_start < other.partition_start + other.partition_count
                and other.partition_start < self.partition_start + self.partition_count)


@dataclass(frozen=True, eq=False)
class Operand:
    """One tensor operand of an executed instruction, as values.

    Fields:
        role: the instruction argument it was passed as (`dst`, `data`, `stationary`, `index:src` ...).
        access: read, write or accumulate.
        region: the physical memory it touched (bounding rectangle).
        shape / dtype: the access's logical shape and NKI dtype name.
        partitions: partition count (dim 0 on chip; 1 for HBM).
        free_elems: elements per partition (product of the free dims; all elements for HBM).
        strides / offset: element strides and offset of the access into its tensor, for clients that
            want element addresses (`element_offsets()`); None for indirect accesses.
        tensor_name: the tensor's name (kernel argument name for kernel inputs).
        storage_shape: shape of the whole tensor the access is part of.
        offsets: flat element offsets actually touched, for indirect (dynamic-index) accesses only.
        gathered: a tensor-indirection access (`NkiTensor.indirect`): free-dim columns at run-time offsets.
        layout: a number of the access's layout (its memory, shapes, dtype, strides, offset and byte width),
            or None (run-time indices). Operands of one process with equal numbers have equal values in every
            field but the role, the access, the tensor name and the region's storage id and placement
            (`partition_start`, `byte_start`, `byte_end`), so a listener may keep what it derives from those
            per number. A number is never given to other values in a process.
        form: a number of what a cost rule's signature holds of the access but its first partition (its memory,
            shape, dtype, item size and strides), or None (run-time indices): operands of one process with equal
            numbers have equal values in those fields, so a listener may compare operands by it. A number is
            never given to other values in a process (nor is a `layout` number).
    """

    role: str
    access: AccessKind
    region: Region
    shape: tuple[int, ...]
    dtype: str
    itemsize: int
    partitions: int
    free_elems: int
    strides: tuple[int, ...] | None
    offset: int | None
    tensor_name: str
    storage_shape: tuple[int, ...]
    offsets: np.ndarray | None = None
    gathered: bool = False
    layout: int | None = None
    form: int | None = None

    @property
    def kind(self) -> MemoryKind:
        return self.region.kind

    @property
    def size_bytes(self) -> int:
        return self.partitions * self.free_elems * self.itemsize

    def element_offsets(self) -> np.ndarray:
        """Flat element offsets (into the whole tensor) of every element of the access, in access order."""
        if self.offsets is not None:
            return self.offsets
        idx = np.full(self.shape, self.offset, dtype=np.int64)
        for axis, (n, stride) in enumerate(zip(self.shape, self.strides)):
            shape = [1] * len(self.shape)
            shape[axis] = n
            idx = idx + (np.arange(n, dtype=np.int64) * stride).reshape(shape)
        return idx


class Event:
    """Base of all events (a marker; listeners dispatch with isinstance)."""


@dataclass(frozen=True, eq=False)
class InstructionExecuted(Event):
    """One instruction was executed (or, in shape-only mode, checked and accounted).

    Fields:
        seq: issue order within the launch, from 0.
        program: the SPMD program (grid coordinates) that issued it.
        core: physical NeuronCore the program runs on (LNC / `nl.nc` placement), from 0.
        opcode: the instruction's NKI name (`nc_matmul`, `dma_copy`, `activation`, ...).
        engine: the engine (or DMA) that executes it.
        operands: every tensor operand, reads and writes.
        params: the instruction's non-tensor arguments as plain values (ops as names, flags, sizes).
        mask: for masked legacy instructions, the boolean mask over the output (None: all active).
        location: the kernel line that issued it.
        name: the user's `name=` label, if any.
        ordered: issued inside `no_reorder` (the compiler keeps program order for it).
        params_source: the dict `params` was copied from when the instruction keeps one (built from a plan's
            template, or retargeted: `Instruction._params`), else None. Such a dict is never changed once an
            instruction holds it, so events copied from one dict have equal params in the same order (the cost
            model's `_site_plan` takes that instead of comparing them). Not part of the event's value: left out
            of its repr and comparisons.
    """

    seq: int
    program: tuple[int, ...]
    core: int
    opcode: str
    engine: Engine
    operands: tuple[Operand, ...]
    params: dict = field(default_factory=dict)
    mask: np.ndarray | None = None
    location: SourceLocation | None = None
    name: str | None = None
    ordered: bool = False
    params_source: dict | None = field(default=None, repr=False, compare=False)

    @property
    def reads(self) -> tuple[Operand, ...]:
        return tuple(o for o in self.operands if o.access is not AccessKind.WRITE)

    @property
    def writes(self) -> tuple[Operand, ...]:
        return tuple(o for o in self.operands if o.access is not AccessKind.READ)


@dataclass(frozen=True, eq=False)
class TensorAllocated(Event):
    """A tensor got memory: on chip an address range in every partition, in HBM a byte range."""

    storage_id: int
    program: tuple[int, ...]
    kind: MemoryKind
    name: str
    shape: tuple[int, ...]
    dtype: str
    partitions: int
    byte_start: int
    size_bytes: int          # per partition on chip, total in HBM
    location: SourceLocation | None
    direct: bool = False     # placed where the kernel said (direct allocation), not by the allocator


@dataclass(frozen=True, eq=False)
class TensorFreed(Event):
    """A tensor became unreachable and its memory was released."""

    storage_id: int
    kind: MemoryKind


@dataclass(frozen=True, eq=False)
class ProgramStarted(Event):
    program: tuple[int, ...]
    core: int
    grid: tuple[int, ...]


@dataclass(frozen=True, eq=False)
class ProgramFinished(Event):
    program: tuple[int, ...]
    core: int


@dataclass(frozen=True, eq=False)
class LaunchStarted(Event):
    """A kernel launch began: its name, grid, target and the number of physical cores it runs on."""

    kernel: str
    grid: tuple[int, ...]
    target: str
    cores: int
    shape_only: bool


@dataclass(frozen=True, eq=False)
class LaunchFinished(Event):
    kernel: str
    programs_run: int


@dataclass(frozen=True, eq=False)
class LoopStarted(Event):
    """A kernel loop (`affine_range`, `sequential_range`, `static_range`, range) began.

    `parallel`: its iterations are independent by contract (the legacy generation's `affine_range`), so
    the compiler may reorder or overlap them. `program`: the SPMD program running it."""

    loop_id: int
    kind: str
    trip_count: int
    location: SourceLocation | None
    parallel: bool = False
    program: tuple[int, ...] = ()


@dataclass(frozen=True, eq=False)
class ProgramsMet(Event):
    """Program `program` left an exchange all of `members` took part in (`nisa.core_barrier`,
    `nisa.sendrecv`, a collective): what each member did before it is ordered before what the others do
    after it."""

    program: tuple[int, ...]
    members: tuple[tuple[int, ...], ...]
    what: str
    location: SourceLocation | None


@dataclass(frozen=True, eq=False)
class LoopIteration(Event):
    loop_id: int
    iteration: int


@dataclass(frozen=True, eq=False)
class LoopFinished(Event):
    loop_id: int


def positional_maker(cls):
    """A constructor of the frozen record `cls` taking every field positionally, in declaration order: it
    fills the instance's dict from one dict display, where the dataclass __init__ sets each field through
    `object.__setattr__` (most of the cost of building an instruction's events). The record is the same;
    a wrong number of values is a TypeError, as for any function. The constructor is generated once per
    class (its parameters are the field names)."""
    names = tuple(f.name for f in fields(cls))
    if not all(name.isidentifier() and not name.startswith("_maker_") for name in names):
        raise TypeError(f"{cls.__name__}: field names must be identifiers not starting with _maker_")
    source = (f"def make({', '.join(names)}):\n"
              f"    _maker_record = _maker_new(_maker_cls)\n"
              f"    _maker_record.__dict__.update({{{', '.join(f'{n!r}: {n}' for n in names)}}})\n"
              f"    return _maker_record\n")
    scope = {"_maker_new": object.__new__, "_maker_cls": cls}
    exec(compile(source, f"<{cls.__name__} maker>", "exec"), scope)
    return scope["make"]

