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

Not checked [GAP]: the base-partition rules for manually allocated operands (every index on a quadrant
boundary, an indirected input on its index's partitions), which concern addresses only, and the
`tensor_scalar` exclusion of the "int32/uint32 address-arithmetic pattern", which the pages do not define.
"""

from __future__ import annotations

from opennki.errors import KernelError, MemoryKindError, ShapeError, expect
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
    return True


def check_untiled(instr, tile_position) -> None:
    """Tensor indirection on the Tensor Engine is incompatible with PE tiling: `tile_position` unset or (0, 0)."""
    expect(not tile_position or tuple(int(v) for v in tile_position) == (0, 0),
           f"{instr.api_name()} with tensor indirection cannot be tiled: tile_position must be (0, 0) or unset",
           got=tile_position, error=KernelError)
