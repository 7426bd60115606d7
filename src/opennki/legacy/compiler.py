"""Front door (legacy generation): `neuronxcc.nki.compiler`, direct allocation of SBUF / PSUM tensors.

Imports language (blocks, core), instructions, sim and errors. A direct-allocation object goes in the
`buffer=` slot of a tensor declaration and places each logical block of the tensor itself
(spec/entrypoints.md §8, the legacy direct-allocation guide):

* `sbuf.alloc(func)`: `func(idx, pdim_size, fdim_size) -> (start_partition, byte_addr)` for the block index
  `idx`, the tile's partitions and bytes per partition (passed by these names when `func` takes them);
* `sbuf.mod_alloc(base_addr=, base_partition=0, num_par_tiles=(), num_free_tiles=())`: block `i` goes to
  physical tile `i mod num_*_tiles`, at `base_addr + linear(i mod num_free_tiles) * fdim_size_bytes` and
  partition `base_partition + linear(i mod num_par_tiles) * pdim_size`;
* `psum.alloc(func)`: `func(...) -> (bank_id, start_partition, byte_addr)`, a tile fits one 2 KiB bank;
* `psum.mod_alloc(base_bank=, base_addr=0, base_partition=0, num_bank_tiles=(), ...)`: banks rotate modulo
  `num_bank_tiles`;
* `sbuf.auto_alloc()` / `psum.auto_alloc()`: the compiler places the tensor (`nl.sbuf` / `nl.psum`).

Placements are checked as documented: start partitions on quadrant boundaries (0 for more than 64
partitions; 0 or 64 for 33-64; 0, 32, 64 or 96 up to 32), byte addresses aligned and inside the usable SBUF
(or the bank), PSUM start partition and byte address 0. Blocks placed at the same spot share one physical
tile, and tensors declared over overlapping bytes alias each other as on hardware, in any dtypes
(machine/physical.py): a declaration starts with the bytes its range holds. Placements made inside an
`affine_range` / `sequential_range` body are decided once, as NKI traces the body once (_src/blocks.py).

A kernel that places tensors directly is an "allocated kernel": it may not mix in automatically placed
SBUF/PSUM declarations, give initial values to its on-chip tensors, transpose on the Tensor Engine
(`err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel`, which includes `nl.matmul` without
`transpose_x`) or run Scalar Engine activations without an explicit bias tensor
(`err_bias_tensor_must_be_specified_in_allocation`, which includes `nl.exp` & co.).

Kernel decorators set flags on the kernel function: `force_auto_alloc` (direct allocations are ignored),
`skip_middle_end_transformations`, `enable_stack_allocator` (needs `skip_middle_end_transformations`);
the last two only change compilation, so they are checked and recorded but do not change results.
`allocation_scope()`, `multi_buffer(factor)` and `no_reorder()` are scheduling and allocation directives
with no effect on results; they are context managers here, as in the stub.
"""

from __future__ import annotations

import contextlib
import inspect
import math

from opennki.errors import AllocationError, KernelError
from opennki.events import Engine
from opennki.instructions.tensor_engine import NcTranspose
from opennki._src import core
from opennki.machine.memory import MemoryRegion
from opennki.sim.program import NO_REORDER, PROGRAM_SETUP, Observer


def _modulo(base: int, tiles, index, scale: int) -> int:
    """`base + linear(index mod tiles) * scale`, as the documented reference function computes it: an empty
    `tiles` means one tile (every block maps there); the block index and the tile counts pair up from the
    left (`zip`), so a tensor without block dims sits at `base` whatever the counts (the official attention
    tutorial passes `num_free_tiles=(n,)` for plain tiles), and the linear position weighs index `d` by the
    product of the counts after `d`."""
    tiles = tuple(int(t) for t in tiles) or (1,) * len(index)
    reduced = [i % t for i, t in zip(index, tiles)]
    return base + sum(i * math.prod(tiles[d + 1:]) for d, i in enumerate(reduced)) * scale


def _call_user_placement(func, index: tuple[int, ...], P: int, fdim_bytes: int):
    """Call an allocation function the way the compiler does: by the documented parameter names
    `func(idx=, pdim_size=, fdim_size=)` when its signature takes them (so `functools.partial(f, bank_map=...)`
    of `def f(bank_map, idx, pdim_size, fdim_size)` works, as in the official samples), else positionally
    (a function with other parameter names, or a callable without an inspectable signature)."""
    by_name = {"idx": index, "pdim_size": P, "fdim_size": fdim_bytes}
    try:
        inspect.signature(func).bind(**by_name)
    except (TypeError, ValueError):
        return func(index, P, fdim_bytes)
    return func(**by_name)


def _check_partition(start: int, P: int, api: str) -> None:
    allowed = (0,) if P > 64 else (0, 64) if P > 32 else (0, 32, 64, 96)
    if start not in allowed:
        raise AllocationError(f"{api}: a tile of {P} partitions must start at partition "
                              f"{' or '.join(map(str, allowed))}", expected=allowed, got=start)


class _DirectAllocation:
    """Base of the allocation objects: `region`, and `placement(index, P, fdim_bytes, hw, api)`."""

    region: MemoryRegion

    def install(self, prog) -> None:
        """Mark the running program as an allocated kernel (its rules apply from now on)."""
        if not any(isinstance(o, AllocatedKernelRules) for o in prog.observers):
            prog.observers.append(AllocatedKernelRules())


class _SbufAllocation(_DirectAllocation):
    region = MemoryRegion.sbuf

    def __init__(self, func):
        self.func = func

    def placement(self, index, P, fdim_bytes, hw, api):
        got = _call_user_placement(self.func, tuple(index), P, fdim_bytes)
        try:
            partition, address = (int(v) for v in got)
        except (TypeError, ValueError):
            raise AllocationError(f"{api}: an SBUF allocation function returns (start_partition, byte_addr)",
                                  got=got) from None
        _check_partition(partition, P, api)
        usable = hw.memory.sbuf_usable_bytes_per_partition
        align = hw.tiles.sbuf_min_align
        if address < 0 or address % align or address + fdim_bytes > usable:
            raise AllocationError(f"{api}: SBUF byte address {address} (+{fdim_bytes} bytes per partition) must be "
                                  f"aligned to {align} bytes and end within the {usable} usable bytes of a "
                                  f"partition on {hw.name}", expected=f"[0, {usable - fdim_bytes}]",
                                  got=address)
        if partition + P > hw.memory.partitions:
            raise AllocationError(f"{api}: the tile spans partitions {partition}..{partition + P - 1}",
                                  expected=f"<= {hw.memory.partitions} partitions", got=partition + P)
        return partition, address

    def __repr__(self):
        return f"ncc.sbuf.alloc({self.func!r})"


class _PsumAllocation(_DirectAllocation):
    region = MemoryRegion.psum

    def __init__(self, func):
        self.func = func

    def placement(self, index, P, fdim_bytes, hw, api):
        got = _call_user_placement(self.func, tuple(index), P, fdim_bytes)
        try:
            bank, partition, address = (int(v) for v in got)
        except (TypeError, ValueError):
            raise AllocationError(f"{api}: a PSUM allocation function returns (bank_id, start_partition, "
                                  "byte_addr)", got=got) from None
        bank_bytes, banks = hw.memory.psum_bank_bytes, hw.memory.psum_banks
        if not 0 <= bank < banks:
            raise AllocationError(f"{api}: PSUM bank {bank} does not exist", expected=f"[0, {banks - 1}]",
                                  got=bank)
        if partition != 0 or address != 0:
            raise AllocationError(f"{api}: PSUM tiles start at partition 0 and byte 0 of their bank",
                                  expected=(0, 0), got=(partition, address))
        if fdim_bytes > bank_bytes:
            raise AllocationError(f"{api}: a PSUM tile holds at most one bank ({bank_bytes} bytes) per partition",
                                  expected=f"<= {bank_bytes}", got=fdim_bytes)
        return 0, bank * bank_bytes

    def __repr__(self):
        return f"ncc.psum.alloc({self.func!r})"


class sbuf:
    """`nki.compiler.sbuf`: direct allocation of SBUF tensors (module docstring)."""

    @staticmethod
    def alloc(func) -> _SbufAllocation:
        return _SbufAllocation(func)

    @staticmethod
    def mod_alloc(*, base_addr, base_partition=0, num_par_tiles=(), num_free_tiles=()) -> _SbufAllocation:
        def place(index, P, fdim_bytes):
            return (_modulo(base_partition, num_par_tiles, index, P),
                    _modulo(base_addr, num_free_tiles, index, fdim_bytes))
        return _SbufAllocation(place)

    @staticmethod
    def auto_alloc() -> MemoryRegion:
        return MemoryRegion.sbuf


class psum:
    """`nki.compiler.psum`: direct allocation of PSUM tensors (module docstring)."""

    @staticmethod
    def alloc(func) -> _PsumAllocation:
        return _PsumAllocation(func)

    @staticmethod
    def mod_alloc(*, base_bank, base_addr=0, base_partition=0, num_bank_tiles=(), num_par_tiles=(),
                  num_free_tiles=()) -> _PsumAllocation:
        def place(index, P, fdim_bytes):
            return (_modulo(base_bank, num_bank_tiles, index, 1),
                    _modulo(base_partition, num_par_tiles, index, P),
                    _modulo(base_addr, num_free_tiles, index, fdim_bytes))
        return _PsumAllocation(place)

    @staticmethod
    def auto_alloc() -> MemoryRegion:
        return MemoryRegion.psum


class AllocatedKernelRules(Observer):
    """The instruction rules of an allocated kernel (module docstring)."""

    def check(self, prog, instr) -> None:
        if isinstance(instr, NcTranspose) and instr.executor is Engine.TENSOR:
            raise KernelError("a kernel with direct allocation cannot transpose on the Tensor Engine (this "
                              "includes nl.matmul without transpose_x=True)",
                              code="err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel",
                              hint="multiply by an identity matrix with nisa.nc_matmul(..., is_transpose=True) "
                                   "or pass operands already transposed")
        if instr.opcode.startswith("activation") and getattr(instr, "bias", False) is None:
            raise KernelError("a kernel with direct allocation must pass an explicit bias tensor to Scalar "
                              "Engine activations (this includes nl.exp & co.)",
                              code="err_bias_tensor_must_be_specified_in_allocation",
                              hint="allocate a [P, 1] zero tensor and pass it as bias=")


# ------------------------------------------------------------------------------------------ decorators

def _flag(func, **flags):
    """Record compilation flags on the kernel function (works above or below `@nki.jit`)."""
    target = inspect.unwrap(getattr(func, "func", func))
    recorded = dict(getattr(target, "__opennki_compiler__", {}))
    recorded.update(flags)
    target.__opennki_compiler__ = recorded
    return func


def skip_middle_end_transformations(func=None):
    """Turn off the compiler's middle-end loop transformations (no effect on results)."""
    if func is None:
        return skip_middle_end_transformations
    return _flag(func, skip_middle_end_transformations=True)


def enable_stack_allocator(func=None, log_level=50):
    """Let a stack allocator place the kernel's SBUF/PSUM tensors; needs `skip_middle_end_transformations`
    (checked when the kernel runs)."""
    if func is None:
        return lambda f: enable_stack_allocator(f, log_level=log_level)
    return _flag(func, enable_stack_allocator=True)


def force_auto_alloc(func=None):
    """Ignore every direct allocation in the kernel: the compiler places all tensors."""
    if func is None:
        return force_auto_alloc
    return _flag(func, force_auto_alloc=True)


def _check_flags(prog) -> None:
    flags = getattr(core.kernel_function(prog), "__opennki_compiler__", {})
    if flags.get("enable_stack_allocator") and not flags.get("skip_middle_end_transformations"):
        raise KernelError("nki.compiler.enable_stack_allocator must be used together with "
                          "nki.compiler.skip_middle_end_transformations",
                          hint="decorate the kernel with both")


PROGRAM_SETUP.append(_check_flags)


@contextlib.contextmanager
def allocation_scope():
    """A scope for tensor allocation lifetimes (a compiler hint; no effect on results)."""
    yield


@contextlib.contextmanager
def multi_buffer(factor=2):
    """Allocate tensors declared inside with `factor` physical buffers (a compiler hint; no effect on results)."""
    if int(factor) < 1:
        raise KernelError("multi_buffer factor must be a positive integer", got=factor)
    yield


@contextlib.contextmanager
def no_reorder():
    """Keep program order for the instructions inside (a scheduling constraint; no effect on results: their
    events say `ordered`, and the cost model keeps them in order on their engines)."""
    token = NO_REORDER.set(NO_REORDER.get() + 1)
    try:
        yield
    finally:
        NO_REORDER.reset(token)


__all__ = ["sbuf", "psum", "skip_middle_end_transformations", "enable_stack_allocator", "force_auto_alloc",
           "allocation_scope", "multi_buffer", "no_reorder"]
