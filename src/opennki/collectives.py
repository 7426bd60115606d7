"""Front door (new generation): `nki.collectives`, data exchange between the ranks of replica groups
(spec/entrypoints.md §10).

Imports sim and the DMA instruction. opennki simulates one device, which is rank 0. A collective over a
replica group holding only that rank is well defined: for one rank, reducing, gathering, scattering or
exchanging is copying each source to its destination, so it runs as DMA copies (with the documented checks
on operands). A group with other ranks needs devices opennki does not have: an UnsupportedError names the
kernel line. (NKI's own simulator implements no collective; NKI Library kernels import this module at load
time and reach collectives only through the replica groups their caller passes.)
"""

from __future__ import annotations

import enum

from opennki.errors import KernelError, ShapeError, UnsupportedError, expect, user_location
from opennki.events import MemoryKind
from opennki.instructions import collectives as _coll
from opennki.instructions.dma import DmaCopy
from opennki.instructions.ops import alu
from opennki.instructions.registers import RegisterAlloc, VirtualRegister
from opennki.machine.tensor import TensorView
from opennki.releases import added_in
from opennki.sim.program import Observer, current

_RANK = 0       # the one simulated device
_REDUCE_OPS = ("add", "minimum", "maximum")


class rg_partition_op(enum.Enum):
    """NKI 0.7 (docs: v2.33 `_modules/nki/collectives`): how `ReplicaGroup.from_partition_op` maps a rank to
    the id of its rank-list."""

    bitwise_and = "bitwise_and"
    div = "div"
    mod = "mod"


_PARTITION_OPS = {rg_partition_op.bitwise_and: lambda r, k: r & k, rg_partition_op.div: lambda r, k: r // k,
                  rg_partition_op.mod: lambda r, k: r % k}


class ReplicaGroup:
    """`nki.collectives.ReplicaGroup`: non-overlapping groups of ranks that communicate together."""

    @staticmethod
    def from_partition_op(world_size: int, op, operand: int) -> "ReplicaGroup":
        """NKI 0.7: ranks [0, world_size) sharing `op(rank, operand)` form one rank-list, lists ordered by that
        id (bitwise_and 0: every rank in one list; div 4: contiguous fours; mod 4: strided)."""
        fn = _PARTITION_OPS.get(op if isinstance(op, rg_partition_op) else rg_partition_op(op))
        lists: dict[int, list[int]] = {}
        for rank in range(int(world_size)):
            lists.setdefault(fn(rank, int(operand)), []).append(rank)
        return ReplicaGroup([lists[k] for k in sorted(lists)])

    def __init__(self, replica_groups):
        groups = tuple(tuple(int(r) for r in g) for g in replica_groups)
        ranks = [r for g in groups for r in g]
        if not groups or not all(groups) or len(ranks) != len(set(ranks)):
            raise KernelError("ReplicaGroup needs non-empty, non-overlapping groups of ranks", got=replica_groups)
        self.groups = groups

    def __repr__(self) -> str:
        return f"ReplicaGroup({[list(g) for g in self.groups]})"


def _one_rank(replica_group, api: str) -> None:
    """The group this device belongs to must be this device alone."""
    groups = replica_group.groups if isinstance(replica_group, ReplicaGroup) else ReplicaGroup(replica_group).groups
    mine = next((g for g in groups if _RANK in g), None)
    expect(mine is not None, f"{api}: the replica group does not contain this device's rank", expected=_RANK,
           got=[list(g) for g in groups], error=KernelError)
    if len(mine) > 1:
        raise UnsupportedError(f"{api} over ranks {list(mine)} needs {len(mine)} devices; opennki simulates one "
                               "device (rank 0), so only single-rank replica groups run", got=list(mine))


def _copy_each(srcs, dsts, api: str, *, hbm_only: bool = False) -> None:
    """dst = src for every pair: a collective among one rank. Documented operand rules: matching lists,
    all tensors in HBM or all in SBUF, several tensors per list only in HBM."""
    prog = current(api)
    srcs, dsts = list(srcs), list(dsts)
    expect(len(srcs) == len(dsts) and srcs, f"{api} takes as many destinations as sources",
           expected=len(srcs), got=len(dsts), error=KernelError)
    tensors = srcs + dsts
    expect(all(isinstance(t, TensorView) for t in tensors), f"{api} srcs and dsts are tensors",
           got=[type(t).__name__ for t in tensors], error=KernelError)
    kinds = {t.kind for t in tensors}
    allowed = {MemoryKind.HBM} if hbm_only else {MemoryKind.HBM, MemoryKind.SBUF}
    expect(len(kinds) == 1 and kinds <= allowed, f"{api} tensors are all in HBM" + ("" if hbm_only else
           " or all in SBUF"), got=sorted(k.name for k in kinds), error=KernelError)
    expect(len(srcs) == 1 or kinds == {MemoryKind.HBM}, f"{api} takes lists of several tensors only in HBM",
           got=len(srcs), error=KernelError)
    for src, dst in zip(srcs, dsts):
        expect(src.shape == dst.shape and src.dtype is dst.dtype, f"{api} among one rank writes each source "
               "unchanged to its destination: same shape and dtype", expected=(src.shape, src.dtype.name),
               got=(dst.shape, dst.dtype.name), error=ShapeError)
        prog.issue(DmaCopy(dst=dst, src=src), api)


def _check_dim(srcs, collective_dim, api: str, sbuf_dims=(0,)) -> None:
    t = list(srcs)[0] if srcs else None
    dims = sbuf_dims if isinstance(t, TensorView) and t.kind is MemoryKind.SBUF else (0,)
    expect(collective_dim in dims, f"{api} collective_dim", expected=" or ".join(map(str, dims)),
           got=collective_dim, error=KernelError)


def all_reduce(srcs, dsts, replica_group, op, priority=None, name=None) -> None:
    """dsts = op-reduction of every rank's srcs (op: nl.add, nl.minimum or nl.maximum)."""
    api = "nki.collectives.all_reduce"
    expect(alu(op).name in _REDUCE_OPS, f"{api} op", expected="/".join(_REDUCE_OPS), got=alu(op).name,
           error=KernelError)
    _one_rank(replica_group, api)
    _copy_each(srcs, dsts, api)


def all_gather(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """dsts = every rank's srcs concatenated along collective_dim (HBM: 0; SBUF, 2-D: 0 or 1)."""
    api = "nki.collectives.all_gather"
    _check_dim(srcs, collective_dim, api, sbuf_dims=(0, 1))
    _one_rank(replica_group, api)
    _copy_each(srcs, dsts, api)


def reduce_scatter(srcs, dsts, replica_group, collective_dim, op, priority=None, name=None) -> None:
    """dsts = this rank's part (along dim 0) of the op-reduction of every rank's srcs."""
    api = "nki.collectives.reduce_scatter"
    expect(alu(op).name in _REDUCE_OPS, f"{api} op", expected="/".join(_REDUCE_OPS), got=alu(op).name,
           error=KernelError)
    _check_dim(srcs, collective_dim, api)
    _one_rank(replica_group, api)
    _copy_each(srcs, dsts, api)


def all_to_all(srcs, dsts, replica_group, collective_dim, priority=None, name=None) -> None:
    """Rank r's dsts part i (along dim 0) = rank i's srcs part r; HBM only."""
    api = "nki.collectives.all_to_all"
    _check_dim(srcs, collective_dim, api)
    _one_rank(replica_group, api)
    _copy_each(srcs, dsts, api, hbm_only=True)


def collective_permute(srcs, dsts, source_target_pairs, priority=None, name=None) -> None:
    """Each (source, target) pair sends the source rank's srcs to the target rank's dsts; HBM only, one
    tensor per list."""
    api = "nki.collectives.collective_permute"
    pairs = [tuple(int(r) for r in p) for p in source_target_pairs]
    others = sorted({r for p in pairs for r in p} - {_RANK})
    if others:
        raise UnsupportedError(f"{api} between ranks {pairs} needs {len(others) + 1} devices; opennki simulates "
                               "one device (rank 0)", got=pairs)
    expect(len(list(srcs)) == 1, f"{api} takes one tensor per list", got=len(list(srcs)), error=KernelError)
    _copy_each(srcs, dsts, api, hbm_only=True)


# ------------------------------------------------------------------ variable-length collectives (0.3, 0.6)

def _one_tensor(tensors, role: str, api: str) -> TensorView:
    tensors = list(tensors)
    expect(len(tensors) == 1 and isinstance(tensors[0], TensorView), f"{api} takes exactly one {role} tensor",
           got=len(tensors), error=KernelError)
    return tensors[0]


def _variable_operands(srcs, dsts, replica_group, api: str):
    _one_rank(replica_group, api)
    return _one_tensor(srcs, "srcs", api), _one_tensor(dsts, "dsts", api)


def all_to_all_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """NKI 0.3: each rank sends its own count of flat elements to each rank (counts and displacements in the
    uint32 metadata tensor); among one rank one chunk of src lands in dst (opennki.instructions.collectives)."""
    api = "nki.collectives.all_to_all_v"
    src, dst = _variable_operands(srcs, dsts, replica_group, api)
    current(api).issue(_coll.AllToAllV(src=src, dst=dst, metadata=metadata_tensor, has_rdispls=bool(has_rdispls),
                                       recv_counts_known=bool(recv_counts_known), name=name), api)


def all_gather_v(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                 priority=None, name=None) -> None:
    """NKI 0.6: each rank broadcasts one variable-size chunk into its slot of every rank's dst."""
    api = "nki.collectives.all_gather_v"
    src, dst = _variable_operands(srcs, dsts, replica_group, api)
    current(api).issue(_coll.AllGatherV(src=src, dst=dst, metadata=metadata_tensor, has_rdispls=bool(has_rdispls),
                                        recv_counts_known=bool(recv_counts_known), name=name), api)


class SplitCollectives(Observer):
    """NKI 0.7's pairing rules of prepare / trigger (docs: all_to_all_v_prepare, v2.33): each prepare is
    followed by exactly one trigger of its kind, with no other prepare in between (prepares share one slot);
    a prepare never triggered is an error when the kernel ends."""

    def __init__(self):
        self.pending = None

    @staticmethod
    def of(prog) -> "SplitCollectives":
        rule = next((o for o in prog.observers if isinstance(o, SplitCollectives)), None)
        if rule is None:
            rule = SplitCollectives()
            prog.observers.append(rule)
        return rule

    def prepared(self, handle, api: str) -> None:
        if self.pending is not None:
            raise KernelError(f"{api}: the prepare issued at {self.pending.location} has not been triggered; "
                              "prepares share a single slot, so another prepare in between is rejected",
                              instruction=api, hint=f"call {self.pending.kind}_trigger on it first")
        self.pending = handle

    def triggered(self, handle, kind: str, api: str) -> None:
        expect(isinstance(handle, _coll.CollectiveHandle), f"{api} takes the instruction a {kind}_prepare returned",
               got=type(handle).__name__, error=KernelError)
        if handle.triggered:
            raise KernelError(f"{api}: this prepare (at {handle.location}) was already triggered; each prepare is "
                              "followed by exactly one trigger", instruction=api)
        if handle.kind != kind:
            raise KernelError(f"{api} triggers a {kind} prepare, but got a {handle.kind} one", instruction=api,
                              expected=f"{kind}_prepare", got=f"{handle.kind}_prepare")
        if handle is not self.pending:
            raise KernelError(f"{api}: its prepare is not the one waiting to be triggered", instruction=api)
        handle.triggered = True
        self.pending = None

    def finished(self, prog, result) -> None:
        if self.pending is not None:
            raise KernelError(f"the {self.pending.kind}_prepare issued at {self.pending.location} was never "
                              "triggered; each prepare is followed by exactly one trigger",
                              location=self.pending.location, instruction=f"nki.collectives.{self.pending.kind}_prepare")


def _prepare(kind, srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls, name):
    api = f"nki.collectives.{kind}_prepare"
    prog = current(api)
    added_in("0.7", api, prog.options)
    src, dst = _variable_operands(srcs, dsts, replica_group, api)
    handle = _coll.CollectiveHandle(kind, src, dst, metadata_tensor, bool(has_rdispls), user_location())
    instr = (_coll.AllToAllVPrepare if kind == "all_to_all_v" else _coll.AllGatherVPrepare)
    # the operands' own rules (HBM, dtypes, metadata shape) are those of the plain collective
    (_coll.AllToAllV if kind == "all_to_all_v" else _coll.AllGatherV)(
        src=src, dst=dst, metadata=metadata_tensor, has_rdispls=bool(has_rdispls),
        recv_counts_known=bool(recv_counts_known)).check(prog)
    SplitCollectives.of(prog).prepared(handle, api)
    prog.issue(instr(metadata=metadata_tensor, handle=handle, name=name), api)
    return handle


def _trigger(kind, prepare_instr, name):
    api = f"nki.collectives.{kind}_trigger"
    prog = current(api)
    SplitCollectives.of(prog).triggered(prepare_instr, kind, api)
    instr = (_coll.AllToAllVTrigger if kind == "all_to_all_v" else _coll.AllGatherVTrigger)
    prog.issue(instr(src=prepare_instr.src, dst=prepare_instr.dst, handle=prepare_instr, name=name), api)
    return prepare_instr


def all_to_all_v_prepare(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                         priority=None, name=None):
    """NKI 0.7: the metadata setup of an all_to_all_v (reads only metadata_tensor); returns the instruction
    to pass to `all_to_all_v_trigger`."""
    return _prepare("all_to_all_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                    name)


def all_to_all_v_trigger(prepare_instr, name=None):
    """NKI 0.7: run the all_to_all_v its prepare set up (reads srcs, writes dsts)."""
    return _trigger("all_to_all_v", prepare_instr, name)


def all_gather_v_prepare(srcs, dsts, replica_group, metadata_tensor, recv_counts_known=False, has_rdispls=False,
                         priority=None, name=None):
    """NKI 0.7: the metadata setup of an all_gather_v; returns the instruction for `all_gather_v_trigger`."""
    return _prepare("all_gather_v", srcs, dsts, replica_group, metadata_tensor, recv_counts_known, has_rdispls,
                    name)


def all_gather_v_trigger(prepare_instr, name=None):
    """NKI 0.7: run the all_gather_v its prepare set up."""
    return _trigger("all_gather_v", prepare_instr, name)


def rank_id(name=None) -> VirtualRegister:
    """A register holding this device's rank within the collective group: 0, the one simulated device."""
    api = "ncc.rank_id"
    prog = current(api)
    reg = VirtualRegister(prog.machine)
    prog.issue(RegisterAlloc(register=reg, value=_RANK, name=name), api)
    return reg


__all__ = ["ReplicaGroup", "rg_partition_op", "rank_id", "all_gather", "all_reduce", "all_to_all", "collective_permute", "reduce_scatter",
           "all_to_all_v", "all_gather_v", "all_to_all_v_prepare", "all_to_all_v_trigger", "all_gather_v_prepare",
           "all_gather_v_trigger"]
