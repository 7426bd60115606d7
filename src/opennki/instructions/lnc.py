"""ISA layer: the cross-core instructions of an LNC=2 launch, `sendrecv` and `core_barrier` (spec/isa.md §7.4).

Imports machine, events, errors and the instruction base. Both exist from NeuronCore-v3 on. `check` and
`run` see one core's tensors only; `issue_on(prog, api)` (what the `nisa` facade calls) pairs the calls of
the cores (same `pipe_id` / same `cores`, in call order) through the program's `meet_cores` rendezvous and
issues the instruction, so that `SendRecv.src` is already the sending core's tile when it runs.
Shape-only runs (benchmark, profile) have no data to exchange and issue both locally.
"""

from __future__ import annotations

from opennki.errors import DtypeError, KernelError, MemoryKindError, ShapeError, expect
from opennki.events import Engine, MemoryKind
from opennki.instructions.base import READ, WRITE, Instruction, require, instruction, operand
from opennki.instructions.enums import engine_of

# gpsimd_dma moves at most this many bytes per partition, by element size: 1024 B of 32-bit, 512 B of 16-bit,
# 256 B of 8-bit elements (spec/hardware.md §6, the sendrecv row)
_GPSIMD_DMA_BYTES = {4: 1024, 2: 512, 1: 256}


def check_core_rank(rank, role: str) -> None:
    """LNC=2 core ranks are 0 and 1."""
    if type(rank) is not int or rank not in (0, 1):
        raise KernelError(f"{role} must be a core rank of the LNC=2 launch (0 or 1)", expected="0 or 1", got=rank)


@instruction
class SendRecv(Instruction):
    """dst = src, where src is the tile the core `recv_from_rank` sends (DMA between the two cores' SBUFs).

    Args:
        dst: SBUF tile of the receiving (issuing) core.
        src: the sending core's SBUF tile, with dst's dtype and shape.
        send_to_rank / recv_from_rank: core ranks (0 or 1) this core sends to / receives from.
        pipe_id: the transfers of both cores with one pipe_id complete together.
        dma_engine: `dma` or `gpsimd_dma` (which caps the bytes per partition; no functional effect).
    Raises:
        MemoryKindError: src or dst outside SBUF.
        ShapeError / DtypeError: src and dst differ in shape / dtype; too many bytes for gpsimd_dma.
        KernelError: before NeuronCore-v3; a rank other than 0 or 1.
    """

    opcode = "sendrecv"
    default_engine = Engine.DMA

    dst: object = operand(WRITE)
    src: object = operand(READ)
    send_to_rank: object = None
    recv_from_rank: object = None
    pipe_id: object = None
    dma_engine: object = "dma"

    def check(self, ctx) -> None:
        require(ctx, "lnc2", "nisa.sendrecv")
        check_core_rank(self.send_to_rank, "send_to_rank")
        check_core_rank(self.recv_from_rank, "recv_from_rank")
        for role, t in (("src", self.src), ("dst", self.dst)):
            expect(t.kind is MemoryKind.SBUF, f"sendrecv {role} must be in SBUF", expected="SBUF", got=t.kind.name,
                   error=MemoryKindError, code="err_unsupported_memory")
        expect(tuple(self.src.shape) == tuple(self.dst.shape), "sendrecv src and dst must have the same shape",
               expected=self.dst.shape, got=self.src.shape, error=ShapeError)
        expect(self.src.dtype is self.dst.dtype, "sendrecv src and dst must have the same dtype",
               expected=self.dst.dtype, got=self.src.dtype, error=DtypeError)
        expect(self.dma_engine in ("dma", "gpsimd_dma"), "dma_engine must be nisa.dma_engine.dma or .gpsimd_dma",
               got=self.dma_engine, error=KernelError)
        if self.dma_engine == "gpsimd_dma":
            limit = _GPSIMD_DMA_BYTES[self.dst.dtype.itemsize]
            per_partition = self.dst.free_size * self.dst.dtype.itemsize
            expect(per_partition <= limit, "sendrecv over gpsimd_dma moves at most "
                   f"{limit} bytes per partition for {self.dst.dtype.itemsize}-byte elements",
                   expected=f"<= {limit}", got=per_partition, error=ShapeError)

    def run(self, m) -> None:
        m.write(self.dst, m.read(self.src), raw=True)

    def issue_on(self, prog, api: str) -> None:
        """Issue on `prog`'s core with the peer's src; neither core goes on before both transfers are done
        (so each may reuse its src afterwards)."""
        if prog.options.shape_only:     # no data moves: the local src stands for the peer's (same shape, dtype)
            prog.issue(self, api)
            return
        check_core_rank(self.send_to_rank, "send_to_rank")
        check_core_rank(self.recv_from_rank, "recv_from_rank")
        me = prog.core_rank
        ranks = {me, self.send_to_rank, self.recv_from_rank}
        what = f"{api} pipe_id={self.pipe_id}"
        posts = prog.meet_cores("sendrecv", self.pipe_id, ranks, (self.src, self.send_to_rank), what)
        peer_src, peer_target = posts[self.recv_from_rank]
        if peer_target != me:
            raise KernelError(f"{what}: core {me} receives from core {self.recv_from_rank}, which sends to core "
                              f"{peer_target}", expected=f"send_to_rank={me} on core {self.recv_from_rank}",
                              got=peer_target, instruction=api)
        prog.issue(self.replace(src=peer_src), api)
        prog.meet_cores("sendrecv done", self.pipe_id, ranks, None, what)


@instruction
class CoreBarrier(Instruction):
    """No core of `cores` proceeds on `engine` before all of them reached the barrier; `data` is the shared
    HBM tensor whose accesses it orders (it is neither read nor written).

    Raises:
        MemoryKindError: data outside HBM.
        KernelError: before NeuronCore-v3; cores other than ranks 0 / 1.
    """

    opcode = "core_barrier"
    default_engine = Engine.GPSIMD

    data: object = operand(READ)
    cores: tuple = ()
    engine: object = None

    @property
    def executor(self) -> Engine:
        chosen = engine_of(self.engine)
        return self.default_engine if chosen is Engine.UNKNOWN else chosen

    def check(self, ctx) -> None:
        require(ctx, "lnc2", "nisa.core_barrier")
        expect(self.data.kind is MemoryKind.HBM, "core_barrier data must be the shared HBM tensor it guards",
               expected="HBM", got=self.data.kind.name, error=MemoryKindError)
        for rank in self.cores:
            check_core_rank(rank, "core_barrier cores")

    def run(self, m) -> None:
        return None

    def issue_on(self, prog, api: str) -> None:
        """Issue, then wait until every core of `cores` has issued its barrier (not in shape-only runs)."""
        prog.issue(self, api)
        if not prog.options.shape_only:
            me = prog.core_rank
            if me not in self.cores:
                raise KernelError(f"{api}: core {me} waits at a barrier of cores {list(self.cores)}",
                                  expected=f"a core of {list(self.cores)}", got=me, instruction=api)
            prog.meet_cores("core_barrier", tuple(sorted(set(self.cores))), self.cores, None, api)


__all__ = ["SendRecv", "CoreBarrier", "check_core_rank"]
