"""ISA layer: instructions between the physical cores of an LNC=2 launch (spec/isa.md §7.4).

Imports the ISA base. `sendrecv` moves a tile from this core's SBUF into the SBUF of the other core while
receiving the other core's tile; `core_barrier` makes the listed cores wait for each other. Both reach the
other core through the machine's `link` (the simulator's `sim.cooperative.CoreLink`), which matches the
calls of the two programs in call order.
"""

from __future__ import annotations

import numpy as np

from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError, expect
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import READ, WRITE, Instruction, check_nc_version, instruction, operand
from opennki.instructions.vector import chosen_engine

# gpsimd_dma moves at most 1 KiB of 32-bit, 512 B of 16-bit or 256 B of 8-bit data per partition: 256 elements
_GPSIMD_DMA_MAX_ELEMENTS = 256


def _lnc_cores(ctx, what: str) -> int:
    """The number of physical cores of the launch, which must be an LNC launch (one program per core)."""
    launch = ctx.launch
    cores = launch.cores_of.cores if launch.cores_of is not None else 1
    programs = int(np.prod(launch.grid)) if launch.grid else 1
    expect(cores > 1 and programs == cores, f"{what} connects the cores of an LNC=2 launch (kernel[2])",
           got=f"{programs} program(s) on {cores} core(s)", error=KernelError)
    return cores


def _check_rank(rank, role: str, cores: int) -> None:
    expect(isinstance(rank, (int, np.integer)) and not isinstance(rank, bool) and 0 <= rank < cores,
           f"{role} must be a core rank of the launch", expected=f"an int in [0, {cores - 1}]", got=rank,
           error=KernelError)


@instruction
class SendRecv(Instruction):
    """dst = the tile core `recv_from_rank` sends, while `src` goes to the `dst` of core `send_to_rank`.

    Calls with the same `pipe_id` pair up in program order: the k-th send from core a to core b on a pipe is
    the k-th receive of core b from core a on it. The data moves as raw bits.

    Args:
        dst: SBUF tile receiving the other core's tile; same dtype and shape as src.
        src: SBUF tile sent.
        send_to_rank, recv_from_rank: core ranks (0 or 1).
        pipe_id: pairs up the calls of the two cores.
        dma_engine: `dma` (shared DMA rings) or `gpsimd_dma` (at most 256 elements per partition).
    Raises:
        KernelError: outside an LNC=2 launch, before NeuronCore-v3, or a rank that is no core of the launch.
        MemoryKindError / ShapeError / DtypeError: src or dst outside SBUF, or with different shapes or dtypes.
    """

    opcode = "sendrecv"
    default_engine = Engine.DMA

    dst: object = operand(WRITE)
    src: object = operand(READ)
    send_to_rank: int = 0
    recv_from_rank: int = 0
    pipe_id: int = 0
    dma_engine: object = None

    def check(self, ctx) -> None:
        check_nc_version(ctx, 3, "sendrecv")
        cores = _lnc_cores(ctx, "sendrecv")
        _check_rank(self.send_to_rank, "send_to_rank", cores)
        _check_rank(self.recv_from_rank, "recv_from_rank", cores)
        for role, t in (("src", self.src), ("dst", self.dst)):
            if t.kind is not MemoryKind.SBUF:
                raise MemoryKindError(f"sendrecv '{role}' must be in SBUF", expected="SBUF", got=t.kind.name)
        expect(self.src.shape == self.dst.shape, "sendrecv src and dst must have the same shape",
               expected=self.dst.shape, got=self.src.shape, error=ShapeError)
        expect(self.src.dtype is self.dst.dtype, "sendrecv src and dst must have the same dtype",
               expected=self.dst.dtype, got=self.src.dtype, error=DtypeError)
        if str(self.dma_engine) == "gpsimd_dma":
            per_partition = self.src.size // self.src.shape[0]
            expect(per_partition <= _GPSIMD_DMA_MAX_ELEMENTS,
                   "sendrecv with gpsimd_dma moves at most 1 KiB (32-bit), 512 B (16-bit) or 256 B (8-bit) per "
                   "partition", expected=f"<= {_GPSIMD_DMA_MAX_ELEMENTS} elements", got=per_partition,
                   error=ShapeError, hint="use dma_engine=nisa.dma_engine.dma")

    def run(self, m) -> None:
        received = m.link.send_recv(self.send_to_rank, self.recv_from_rank, self.pipe_id, m.read(self.src))
        m.write(self.dst, received, raw=True)


@instruction
class CoreBarrier(Instruction):
    """Every core in `cores` waits until all of them reached this barrier (their k-th barrier over the same
    cores meet); `data` is the shared HBM tensor whose accesses the barrier orders.

    Raises:
        KernelError: outside an LNC=2 launch, or `cores` not the launch's cores (0, 1) including this one.
    """

    opcode = "core_barrier"
    default_engine = Engine.GPSIMD

    data: object = operand(READ)
    cores: tuple = ()
    engine: object = None

    @property
    def executor(self) -> Engine:
        return chosen_engine(self.engine, Engine.GPSIMD)

    def check(self, ctx) -> None:
        check_nc_version(ctx, 3, "core_barrier")
        n = _lnc_cores(ctx, "core_barrier")
        expect(sorted(self.cores) == list(range(n)), "core_barrier cores must be the launch's cores",
               expected=tuple(range(n)), got=self.cores, error=KernelError)

    def run(self, m) -> None:
        m.link.barrier(tuple(self.cores))
