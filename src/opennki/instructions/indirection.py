"""ISA layer: the rules of tensor indirection (`NkiTensor.indirect`, NeuronCore-v4+) that an instruction taking
it checks, from the `Tensor indirection` section of each instruction's NKI 0.7 page and the
`nki-tensor-indirection` deep dive. Imports the ISA base, machine views and events.

An instruction class lists the operand fields that may be indirection views in `indirect_fields`; any other
field holding one is rejected for every instruction (`check_operand_types`). The class's `check` calls
`check_indirection`, which applies what all of them share: the target has the capability, the instruction
runs on an engine that takes indirection, each view's offsets fit its index for that engine's partition
groups (16 partitions, 32 on the Tensor Engine: `machine.tensor.indirection_group`), and on the Scalar Engine
a scattered `dst` is not in PSUM. Rules of one instruction (the matmul dtypes and tiling, the MX pairs) stay
in that instruction's check.

For operands the kernel placed itself (`address=`), the pages' base-partition rules: every index starts on a
quadrant boundary (a multiple of 32); an indirected input starts on the partition its index starts on; an
indirected `dst`'s index starts where the instruction's primary input (the first input of `indirect_fields`)
does, or where that input's own index does when the input is a PSUM indirection view. The compiler satisfies
them for tensors it places, so they are checked only between directly placed tensors. Not checked [GAP]: the
`tensor_scalar` exclusion of the "int32/uint32 address-arithmetic pattern", which the pages do not define.
"""

from __future__ import annotations

from opennki.errors import AllocationError, KernelError, MemoryKindError, ShapeError, expect
from opennki.events import AccessKind, Engine, MemoryKind
from opennki.instructions.base import require
from opennki.machine.tensor import TensorView, indirection_group


def indirection_term(view):
    """The tensor-indirection term of `view` (a DynamicTerm with `columns`), or None."""
    if isinstance(view, TensorView):
        for term in view.dynamic:
            if term.columns is not None:
                return term
    return None


def indirect_operands(instr) -> list[tuple[str, TensorView, AccessKind]]:
    """(field, view, access) of each operand of `instr` that is a tensor-indirection view."""
    return [(name, view, access) for name, view, access in instr.operands()
            if indirection_term(view) is not None]


def check_indirection(instr, ctx, engines: tuple[Engine, ...] | None = None) -> bool:
    """The shared rules (module docstring) for the indirection views among `instr`'s operands; `engines`: the
    engines the instruction takes indirection on, where it runs on several. True if it has any."""
    views = indirect_operands(instr)
    if not views:
        return False
    api = instr.api_name()
    require(ctx, "tensor_indirection", f"a tensor-indirection operand ('{views[0][0]}')")
    engine = instr.executor
    if engines is not None and engine not in engines:
        names = " or ".join(e.name.lower() for e in engines)
        raise KernelError(f"{api} takes tensor indirection only on the {names} engine", expected=names,
                          got=engine.name.lower(), hint=f"pass engine=nisa.engine.{engines[0].name.lower()}")
    group = indirection_group(engine)
    for name, view, access in views:
        term = indirection_term(view)
        index = term.index
        outside = term.columns.outside(tuple(index.shape), view.shape[0], group)
        if outside is not None:
            p, i, r, c = outside
            raise ShapeError(
                f"'{name}': offset {i} of partition {p} is read from index element [{r}, {c}], outside the "
                f"{tuple(index.shape)} index `{index.name}` (partition groups of {group} on the "
                f"{engine.name.lower()} engine: a group holds {group} x {index.shape[1]} offsets)",
                expected=f"num_elem <= {group * index.shape[1]} with whole groups of {group} index rows",
                got=(view.shape[0], term.columns.num_elem), hint="pass num_elem= to .indirect()")
        if access is not AccessKind.READ and engine is Engine.SCALAR and view.kind is MemoryKind.PSUM:
            raise MemoryKindError(f"on the Scalar Engine a scattered '{name}' cannot be in PSUM",
                                  expected="SBUF", got="PSUM", code="err_unsupported_memory")
    _check_base_partitions(instr, views)
    return True


def _first_partition(view) -> int | None:
    """The partition a directly placed tensor's view starts on; None for a tensor the allocator places."""
    st = view.storage.base or view.storage
    if not st.direct or st.placement is None:
        return None
    return st.placement.partition + view.extent()[0]


def _same_start(a, b, rule: str, api: str) -> None:
    pa, pb = _first_partition(a), _first_partition(b)
    if pa is not None and pb is not None and pa != pb:
        raise AllocationError(f"{api}: {rule}", expected=f"partition {pb}", got=f"partition {pa}",
                              hint="place the tensors so that their first partitions agree (address=)")


def _check_base_partitions(instr, views) -> None:
    api = instr.api_name()
    for name, view, access in views:
        index = indirection_term(view).index
        first = _first_partition(index)
        if first is not None and first % 32:
            raise AllocationError(f"{api}: the index of '{name}' must start on a quadrant boundary (a multiple "
                                  "of 32)", expected="a partition multiple of 32", got=f"partition {first}",
                                  hint="place the index at partition 0, 32, 64 or 96 (address=)")
        if access is AccessKind.READ:
            _same_start(view, index, f"an indirected '{name}' starts on the partition its index starts on", api)
    dst = getattr(instr, "dst", None)
    dst_term = indirection_term(dst)
    if dst_term is None or len(instr.indirect_fields) < 2:
        return
    primary = instr.indirect_fields[1]
    data = getattr(instr, primary)
    data_term = indirection_term(data)
    if isinstance(data, TensorView) and data.kind is MemoryKind.SBUF:
        _same_start(dst_term.index, data, f"the index of 'dst' starts on the partition '{primary}' starts on", api)
    elif data_term is not None:
        _same_start(dst_term.index, data_term.index,
                    f"the index of 'dst' starts on the partition the index of '{primary}' starts on", api)


def check_untiled(instr, tile_position) -> None:
    """Tensor indirection on the Tensor Engine is incompatible with PE tiling: `tile_position` unset or (0, 0)."""
    expect(not tile_position or tuple(int(v) for v in tile_position) == (0, 0),
           f"{instr.api_name()} with tensor indirection cannot be tiled: tile_position must be (0, 0) or unset",
           got=tile_position, error=KernelError)
