"""Language layer: the legacy SPMD collective `nl.all_reduce`, made of DMA copies and Vector Engine ops.

Imports sim (program, cooperative), instructions and language.core. `all_reduce(x, op, program_axes)`
reduces a tile across the programs of the SPMD grid that share their coordinates on every axis not in
`program_axes`, and gives every one of them the result (spec/language.md §5.8).

How it runs: programs normally execute one after the other, but a collective needs all members of its group
at once. The first `all_reduce` call therefore switches the launch to cooperating threads
(sim/cooperative.py): the programs not started yet are adopted and run on their own threads, one at a time.
Each member DMA-copies its tile into its slot of a shared HBM exchange buffer (one per call and group), then
waits until every member has written; each member then loads all slots and folds them with `op` in program
order, so every member computes bit-identical results. Members are matched by call order: the k-th
`all_reduce` of one program meets the k-th of the others. A member that finishes without making the call,
or programs that disagree, give a KernelError naming the waiting programs instead of a hang.
`parallel_reduce` and `asynchronous` only change performance on hardware; the result is always ready here.
"""

from __future__ import annotations

import itertools

from opennki.errors import KernelError
from opennki.instructions.dma import DmaCopy
from opennki.instructions.ops import alu
from opennki.instructions.vector import TensorTensor
from opennki._src import core
from opennki.machine.dtypes import dtype_of
from opennki.machine.memory import MemoryRegion
from opennki.sim.cooperative import Cooperation


def _exchange_buffer(prog, members, shape, dtype, number: int):
    """The shared HBM buffer of one all_reduce call of one group: one slot per member."""
    storage = prog.memory.new_storage(MemoryRegion.shared_hbm, dtype, (len(members),) + tuple(shape),
                                      f"all_reduce_{number}_exchange", None)
    return prog.launch.tensor_type.root(storage)


def _axes(program_axes, ndim: int) -> tuple[int, ...]:
    axes = (program_axes,) if isinstance(program_axes, int) else tuple(program_axes)
    out = []
    for a in axes:
        a = int(a)
        if not 0 <= a < max(ndim, 1):
            raise KernelError("nl.all_reduce program_axes must name axes of the SPMD grid",
                              expected=f"[0, {max(ndim, 1) - 1}]", got=program_axes)
        out.append(a)
    return tuple(sorted(set(out)))


def group_of(ids, grid, axes) -> list[tuple[int, ...]]:
    """Programs sharing `ids`' coordinates on every grid axis outside `axes`, in grid order."""
    if not grid:
        return [ids]
    ranges = [range(n) if a in axes else (ids[a],) for a, n in enumerate(grid)]
    return [tuple(p) for p in itertools.product(*ranges)]


def all_reduce(x, op, program_axes, *, dtype=None, mask=None, parallel_reduce=True, asynchronous=False,
               api: str = "nl.all_reduce"):
    """op-reduce the tile `x` over the SPMD programs along `program_axes`; every member gets the result
    (module docstring). Result: a new SBUF tile of x's shape, dtype `dtype` or x's."""
    prog = core.current(api)
    core.require_tile(x, "x", api)
    opdef = alu(op)
    if opdef.arity != 2:
        raise KernelError(f"{api} needs a binary reduction operator", got=opdef.name, instruction=api)
    x = core.to_sbuf(x, api)
    axes = _axes(program_axes, len(prog.grid))
    members = group_of(prog.ids, prog.grid, axes)
    out_dtype = dtype_of(dtype) if dtype is not None else x.dtype
    if len(members) == 1:
        return core.copy(x, dtype=out_dtype, mask=mask, api=api)
    state = prog.launch.shared_state.setdefault("all_reduce", {})
    calls = state.setdefault("calls", {})
    calls[prog.ids] = number = calls.get(prog.ids, 0) + 1
    key = (number, members[0], axes)
    coop = Cooperation.of(prog)
    buffer = state.get(key)
    if buffer is None:
        buffer = state[key] = _exchange_buffer(prog, members, x.shape, out_dtype, number)
    prog.issue(DmaCopy(dst=buffer[members.index(prog.ids)], src=x, mask=mask), api)
    coop.rendezvous(prog.ids, ("all_reduce", key), members, None, f"{api} call {number}")
    result = core.load(buffer[0], dtype=out_dtype, mask=mask, api=api)
    for j in range(1, len(members)):
        other = core.load(buffer[j], dtype=out_dtype, mask=mask, api=api)
        prog.issue(TensorTensor(dst=result, data1=result, data2=other, op=opdef, mask=mask), api)
    return result


__all__ = ["all_reduce", "group_of"]
