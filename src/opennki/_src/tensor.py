"""Language layer: `NkiTensor`, the tensor object kernels of both generations hold.

Imports machine (views) and language.core (for operators and assignment). It adds to the machine's view:
  * subscripts (`t[i_p, i_f]`, `t[0:128, k]`) and assignment (`t[...] = value`, `acc += nl.matmul(...)`);
  * the legacy tile operators (`+ - * / ** << >> & | ^ ~`, comparisons) and methods (`reshape`, `view`,
    `broadcast_to`, `expand_dims`, `astype`, `assert_shape`);
  * the new generation's view algebra (`slice`, `select`, `permute`, `broadcast`, `expand_dim`,
    `squeeze_dim`, `reshape_dim`, `flatten_dims`, `reshape`, `ap`, `get_pattern`, `is_contiguous`, ...).

Views never copy. Reshapes and `ap` patterns are expressed over the flat storage (partition x row on chip),
where every dense view stays affine.
"""

from __future__ import annotations

import math
import sys

import numpy as np

from opennki.errors import DtypeError, KernelError, MemberError, MemoryKindError, ShapeError, UnsupportedError, expect
from opennki.events import MemoryKind
from opennki.instructions.registers import RuntimeInt
from opennki.instructions.scalars import NkiScalar
from opennki._src import core
from opennki.machine.arguments import as_dim, as_int, as_pattern, as_shape
from opennki.machine.dtypes import dtype_of
from opennki.machine.index import Index
from opennki.machine.memory import Storage
from opennki.machine.tensor import TensorView, row_major_strides, slice_params
from opennki.releases import Generation, level_of, release, requested_version


def _nocopy_reshape(old_shape, old_strides, new_shape):
    """Strides of `new_shape` over the same elements as (old_shape, old_strides), or None if a copy would be
    needed (the algorithm NumPy uses for views)."""
    old = [(n, s) for n, s in zip(old_shape, old_strides) if n != 1]
    new_strides = [0] * len(new_shape)
    oi = ni = 0
    nonunit_new = [i for i, n in enumerate(new_shape) if n != 1]
    if math.prod(old_shape) != math.prod(new_shape):
        return None
    j = 0
    while oi < len(old) and j < len(nonunit_new):
        ni = nonunit_new[j]
        np_, op_ = new_shape[ni], old[oi][0]
        ni_end, oi_end = j + 1, oi + 1
        while np_ != op_:
            if np_ < op_:
                np_ *= new_shape[nonunit_new[ni_end]]
                ni_end += 1
            else:
                op_ *= old[oi_end][0]
                oi_end += 1
        for k in range(oi, oi_end - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        stride = old[oi_end - 1][1]
        for k in reversed(range(j, ni_end)):
            idx = nonunit_new[k]
            new_strides[idx] = stride
            stride *= new_shape[idx]
        oi, j = oi_end, ni_end
    return new_strides


class NkiTensor(TensorView):
    """A tensor or view in HBM, SBUF or PSUM (both generations). See the module docstring."""

    __slots__ = ()
    __array_priority__ = 1000   # `np.float32(2) * t` must defer to the tile operator

    # -- indexing and assignment -----------------------------------------------------------------------
    __getitem__ = TensorView.subscript      # `t[key]` (an alias: no Python frame of its own for every subscript)

    def __setitem__(self, key, value):
        core.assign(self.assigned_view(key), value)

    def assigned_view(self, key):
        """The view `t[key] = value` writes: `t` itself for `t[...]` (the view `t[...]` would address what `t`
        does), else `t[key]`."""
        if key is Ellipsis and self.mask is None and not self.dynamic and len(self.shape) >= 2:
            return self
        return self.subscript(key)

    def _inplace(self, value, op):
        core.accumulate(self, value, op, api=f"tensor {op}=")
        return self

    def __iadd__(self, v):
        # `_inplace`, without its frame (`acc += ...`); its caller, the kernel's line if it is a kernel file's
        core.accumulate(self, v, "add", api="tensor add=", caller=sys._getframe(1))
        return self

    def __isub__(self, v):
        return self._inplace(v, "subtract")

    def __imul__(self, v):
        return self._inplace(v, "multiply")

    def __itruediv__(self, v):
        return self._inplace(v, "divide")

    @property
    def T(self):
        """NKI tensors have no `.T` (spec/language.md §7.1 lists the members; NumPy and torch code has it):
        a transpose is an instruction, so the missing member says which one."""
        raise MemberError(f"'{type(self).__name__}' object has no attribute 'T': an NKI tensor is not "
                          "transposed by an attribute", hint="transpose on the Tensor Engine with nl.transpose(x) "
                          "(nisa.nc_transpose), or by DMA with nisa.dma_transpose")

    # -- operators ------------------------------------------------------------------------------------
    def _bin(self, other, op, reflect=False, default_dtype=None):
        if op == "add" and isinstance(other, Index):
            return other + self   # `offsets[0, k] + iy`: a dynamic index (legacy tensor_copy_dynamic_*)
        x, y = (other, self) if reflect else (self, other)
        return core.binary(op, x, y, api=f"tensor operator {op}", default_dtype=default_dtype)

    def __add__(self, o): return self._bin(o, "add")
    def __radd__(self, o): return self._bin(o, "add", True)
    def __sub__(self, o): return self._bin(o, "subtract")
    def __rsub__(self, o): return self._bin(o, "subtract", True)
    def __mul__(self, o): return self._bin(o, "multiply")
    def __rmul__(self, o): return self._bin(o, "multiply", True)
    def __truediv__(self, o): return self._bin(o, "divide")
    def __rtruediv__(self, o): return self._bin(o, "divide", True)
    def __pow__(self, o): return self._bin(o, "power")
    def __rpow__(self, o): return self._bin(o, "power", True)
    def __mod__(self, o): return self._bin(o, "mod")
    def __lshift__(self, o): return self._bin(o, "left_shift")
    def __rshift__(self, o): return self._bin(o, "right_shift")
    def __and__(self, o): return self._bin(o, "bitwise_and")
    def __or__(self, o): return self._bin(o, "bitwise_or")
    def __xor__(self, o): return self._bin(o, "bitwise_xor")

    def __invert__(self):
        return core.unary_alu("invert", self, api="tensor operator ~")

    def __neg__(self):
        return core.unary("negative", self, api="tensor operator -")

    def _cmp(self, other, op):
        from opennki.machine.dtypes import bool_
        return self._bin(other, op, default_dtype=bool_)

    def __lt__(self, o): return self._cmp(o, "less")
    def __le__(self, o): return self._cmp(o, "less_equal")
    def __gt__(self, o): return self._cmp(o, "greater")
    def __ge__(self, o): return self._cmp(o, "greater_equal")
    # Element-wise, as NKI tiles; but against None (`if cos != None:`, an optional argument test that NKI
    # library kernels write and NKI's tracer answers at trace time) it is a Python bool (spec silent).
    def __eq__(self, o): return False if o is None else self._cmp(o, "equal")  # noqa: D105
    def __ne__(self, o): return True if o is None else self._cmp(o, "not_equal")
    __hash__ = object.__hash__

    def __bool__(self):
        """Legacy kernels: an error (NKI traces control flow and cannot branch on data). New-generation kernels:
        a tensor the kernel was given or declared is True, as for any object. The spec lists `if tensor:` as
        not allowed there, but NKI Library kernels test optional tensor arguments so (`if
        params.expert_index:`, the `!= None` idiom's short form) and run on hardware, so NKI's compiler
        answers it at trace time: the tensor is there. A computed value (`if t > 0:`, the result of an
        operator) would be a branch on data, and stays an error. In legacy kernels too, a kernel argument is
        True (`imm1 = nl.load(imm1) if imm1 else None` for an optional tensor parameter: the SDK's own
        legacy-namespace tests at 2.32 test presence so)."""
        from opennki.sim.program import active
        prog = active()
        st = self.storage.base or self.storage
        if st.is_kernel_arg:
            return True
        if prog is not None and prog.launch.generation is Generation.NEW and \
                (st.declared or not st.kind.is_on_chip):
            return True
        if self.size == 1:
            # one element: a run-time value, which kernel control flow cannot depend on (legacy NKI)
            raise KernelError("control flow cannot depend on a tensor's run-time value",
                              code="err_dynamic_control_flow_not_supported",
                              hint="compute both outcomes and select with nl.where, or use mask=")
        raise KernelError("Cannot evaluate truth value of a multi-element tensor/array.",
                          code="err_ambiguous_tensor_truth_value",
                          hint="control flow cannot depend on tensor values; use masks or nl.where")

    def __len__(self):
        return self.shape[0]

    def __iter__(self):
        raise KernelError("tensors cannot be iterated in a kernel; index them instead")

    def __array__(self, *a, **k):
        raise KernelError("a kernel tensor cannot be converted to a NumPy array inside the kernel",
                          hint="return it from the kernel, or print it with nl.device_print")

    # -- plain attributes -------------------------------------------------------------------------------
    @property
    def offset(self):
        return TensorView.offset.fget(self)

    @property
    def shape_2d(self) -> tuple[int, int]:
        return (self.shape[0], self.free_size) if self.is_on_chip else (1, self.size)

    # -- flat (rebased) form ----------------------------------------------------------------------------
    def _flat_coords(self):
        if self.is_on_chip:
            return (self.storage.shape[0], math.prod(self.storage.shape[1:]))
        return (self.storage.size,)

    def _from_strides(self, shape, strides, offset, dynamic=()):
        """A view given element strides and offset over the flat storage."""
        coords = self._flat_coords()
        if self.is_on_chip:
            row = coords[1]
            cols = []
            for a, s in enumerate(strides):
                if s != 0 and s % row == 0:
                    cols.append((s // row, 0))
                elif abs(s) < row:
                    cols.append((0, s))
                else:
                    raise UnsupportedError("this view mixes partition and free strides", got=strides)
            amap = (tuple(c[0] for c in cols), tuple(c[1] for c in cols))
            consts = (offset // row, offset % row)
        else:
            amap = (tuple(strides),)
            consts = (offset,)
        return self._derive(tuple(shape), amap, consts, dynamic, None, coords)

    # -- new-generation view algebra --------------------------------------------------------------------
    def slice(self, dim, start, end, step=1):
        key = [slice(None)] * self.ndim
        key[dim] = slice(start, end, step)
        expect(0 <= start < end <= self.shape[dim] and step >= 1, "slice bounds must satisfy 0 <= start < end "
               "<= shape[dim] and step >= 1", expected=f"[0, {self.shape[dim]}]", got=(start, end, step))
        return self.subscript(tuple(key))

    def _shifted(self, dim: int, step: int, by=None) -> "NkiTensor":
        """This view moved along view axis `dim` by `step` elements, times the run-time value of `by` (a
        one-element on-chip integer tile, read when an instruction uses the view) if given. Bounds are checked
        at that use, as for every indirect view (a tile grid's run-time key, `opennki._src.grids`)."""
        col = tuple(row[dim] for row in self.amap)
        if by is None:
            return self._derive(self.shape, self.amap, tuple(c + a * step for c, a in zip(self.consts, col)),
                                self.dynamic)
        expect(not self.dynamic, "only one run-time offset per view", error=UnsupportedError)
        from opennki.machine.tensor import DynamicTerm
        term = DynamicTerm(by.subscript((0, 0)) if by.ndim >= 2 else by, 0, tuple(a * step for a in col))
        return self._derive(self.shape, self.amap, self.consts, (term,))

    def select(self, dim, index):
        if isinstance(index, TensorView):
            expect(not (self.is_on_chip and dim == 0), "a dynamic select cannot be on the partition dim of an "
                   "on-chip tensor", got=dim)
            key = [slice(None)] * self.ndim
            dyn = self.subscript(tuple(key))
            col = tuple(dyn.amap[d][dim] for d in range(len(dyn.amap)))
            keep = [a for a in range(self.ndim) if a != dim]
            amap = tuple(tuple(dyn.amap[d][a] for a in keep) for d in range(len(dyn.amap)))
            from opennki.machine.tensor import DynamicTerm
            term = DynamicTerm(index.subscript((0, 0)) if index.ndim >= 2 else index, 0, col)
            return self._derive(tuple(self.shape[a] for a in keep), amap, self.consts, (term,), None)
        n = self.shape[dim]
        expect(0 <= int(index) < n, "select index out of range", expected=f"[0, {n - 1}]", got=index)
        key = [slice(None)] * self.ndim
        key[dim] = int(index)
        return self.subscript(tuple(key))

    def vector_select(self, dim, vector_offset):
        """Per-partition indirect rows (NKI 0.5+): row p of the result is row `vector_offset[p]` of this HBM
        tensor along dim 0, so the result's dim 0 has `vector_offset.shape[0]` entries. `vector_offset` is an
        on-chip integer tile `(num_partitions, 1)`; only dim 0, only HBM, only one dynamic select per tensor.
        The rows are read when an instruction uses the view (bounds too, as for `.ap(vector_offset=...)`)."""
        expect(dim == 0, "vector_select indexes dim 0", expected=0, got=dim, error=KernelError)
        expect(not self.is_on_chip, "vector_select is only supported on HBM tensors", expected="an HBM tensor",
               got=self.kind.name, error=KernelError)
        expect(not self.dynamic, "only one dynamic select per tensor (this view is already indirect)",
               error=UnsupportedError)
        expect(self.ndim >= 2, "vector_select needs a tensor of rank >= 2", got=self.shape)
        from opennki.machine.tensor import DynamicTerm
        if not (isinstance(vector_offset, TensorView) and vector_offset.is_on_chip
                and vector_offset.dtype.kind in ("int", "uint")):
            raise DtypeError("vector_offset must be an on-chip integer tile", instruction="NkiTensor.vector_select",
                             got=getattr(vector_offset, "dtype", type(vector_offset).__name__))
        expect(vector_offset.size == vector_offset.shape[0], "vector_offset holds one offset per partition",
               expected=f"[{vector_offset.shape[0]}, 1]", got=vector_offset.shape)
        index = vector_offset
        while index.ndim > 2:
            index = index.squeeze_dim(index.ndim - 1)
        strides = self.strides
        term = DynamicTerm(index, 0, (strides[0],))
        return self._from_strides((index.shape[0],) + self.shape[1:], [0] + list(strides[1:]), self.offset, (term,))

    def permute(self, dims):
        dims = tuple(as_dim(d, self.ndim, "permute dim") for d in (dims if isinstance(dims, (tuple, list)) else
                                                                    as_shape(dims, "permute dims")))
        expect(sorted(dims) == list(range(self.ndim)), "permute needs a permutation of the dims", got=dims)
        if self.is_on_chip:
            expect(dims[0] == 0, "the partition dim of an on-chip tensor must stay first", got=dims)
        amap = tuple(tuple(row[d] for d in dims) for row in self.amap)
        return self._derive(tuple(self.shape[d] for d in dims), amap, self.consts, self.dynamic)

    def broadcast(self, dim, size):
        dim, size = as_dim(dim, self.ndim, "broadcast dim"), as_int(size, "broadcast size", minimum=1)
        expect(self.shape[dim] == 1, "only a size-1 dim can be broadcast", got=self.shape)
        if self.is_on_chip:
            expect(dim != 0, "the partition dim cannot be broadcast by a view", got=dim)
        shape = list(self.shape)
        shape[dim] = int(size)
        amap = tuple(tuple(0 if a == dim else c for a, c in enumerate(row)) for row in self.amap)
        return self._derive(tuple(shape), amap, self.consts, self.dynamic)

    def expand_dim(self, dim):
        dim = as_dim(dim, self.ndim + 1, "expand dim")
        if self.is_on_chip:
            expect(dim != 0, "a new dim cannot go before the partition dim", got=dim)
        shape = self.shape[:dim] + (1,) + self.shape[dim:]
        amap = tuple(row[:dim] + (0,) + row[dim:] for row in self.amap)
        return self._derive(shape, amap, self.consts, self.dynamic)

    def squeeze_dim(self, dim):
        dim = as_dim(dim, self.ndim, "squeeze dim")
        expect(self.shape[dim] == 1, "only a size-1 dim can be squeezed", got=self.shape)
        if self.is_on_chip:
            expect(dim != 0, "the partition dim cannot be squeezed", got=dim)
        shape = self.shape[:dim] + self.shape[dim + 1:]
        amap = tuple(row[:dim] + row[dim + 1:] for row in self.amap)
        return self._derive(shape, amap, self.consts, self.dynamic)

    def reshape(self, shape=None, *args, new_shape=None):
        if shape is None:
            shape = new_shape
        elif args or isinstance(shape, (int, np.integer)):
            shape = (shape,) + args
        shape = list(as_shape(shape, "reshape shape", wildcard=True))
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape[shape.index(-1)] = self.size // max(known, 1)
        shape = tuple(shape)
        expect(math.prod(shape) == self.size, "reshape must keep the number of elements",
               expected=self.size, got=shape)
        if self.is_on_chip:
            expect(shape[0] == self.shape[0], "reshaping an on-chip tensor must keep the partition dim",
                   expected=self.shape[0], got=shape)
        if self.dynamic:
            raise UnsupportedError("an indirect view cannot be reshaped")
        strides = _nocopy_reshape(self.shape, self.strides, shape)
        if strides is None:
            raise ShapeError("this view cannot be reshaped without a copy", got=(self.shape, self.strides))
        return self._from_strides(shape, strides, self.offset)

    def reshape_dim(self, dim, shape):
        dim = as_dim(dim, self.ndim, "reshape dim")
        shape = list(as_shape(shape, "reshape_dim shape", wildcard=True))
        if -1 in shape:
            shape[shape.index(-1)] = self.shape[dim] // max(math.prod(s for s in shape if s != -1), 1)
        expect(math.prod(shape) == self.shape[dim], "reshape_dim must keep the dim's size",
               expected=self.shape[dim], got=shape)
        return self.reshape(self.shape[:dim] + tuple(shape) + self.shape[dim + 1:])

    def flatten_dims(self, start_dim, end_dim):
        if self.is_on_chip:
            expect(start_dim > 0, "the partition dim cannot be flattened", got=start_dim)
        merged = math.prod(self.shape[start_dim:end_dim + 1])
        return self.reshape(self.shape[:start_dim] + (merged,) + self.shape[end_dim + 1:])

    def rearrange(self, src_pattern, dst_pattern, fixed_sizes=None):
        """einops-style: split groups of `src_pattern`, permute, merge groups of `dst_pattern`."""
        fixed = dict(fixed_sizes or {})
        names, split_shape = [], []
        for dim, entry in enumerate(src_pattern):
            group = list(entry) if isinstance(entry, (tuple, list)) else [entry]
            unknown = [g for g in group if g not in fixed]
            known = math.prod(fixed[g] for g in group if g in fixed)
            expect(len(unknown) <= 1, "rearrange: at most one unknown size per group", got=group)
            for g in group:
                size = fixed[g] if g in fixed else self.shape[dim] // max(known, 1)
                names.append(g)
                split_shape.append(size)
        view = self.reshape(tuple(split_shape))
        flat_dst = [g for entry in dst_pattern for g in (entry if isinstance(entry, (tuple, list)) else [entry])]
        expect(sorted(flat_dst) == sorted(names), "rearrange patterns must name the same dims",
               got=(src_pattern, dst_pattern))
        view = view.permute([names.index(g) for g in flat_dst])
        merged = []
        i = 0
        for entry in dst_pattern:
            group = list(entry) if isinstance(entry, (tuple, list)) else [entry]
            merged.append(math.prod(view.shape[i:i + len(group)]))
            i += len(group)
        return view.reshape(tuple(merged))

    def view(self, dtype):
        """Reinterpret the bits as another dtype; the last dim scales by the itemsize ratio. Into a dtype of
        another size, the tensor is a whole tensor or a reshape of one (every element of the storage, in
        row-major order); into one of the same size, any view (its elements keep their places). The NKI
        samples' paged-attention kernels reinterpret reshaped tiles and slices of tiles so. Writes through
        the result change the original's bits."""
        new = dtype_of(dtype)
        old = self.dtype
        st = self.storage
        if st.array is not None and st.array.dtype != old.np_dtype:
            raise UnsupportedError("view(dtype) needs precise storage (NKI_PRECISE_FP=1)")
        np_new = new.np_dtype if new.kind != "bool" else np.uint8
        if new.itemsize == old.itemsize and not (self.is_root or self._is_whole_reshape()):
            array = None if st.array is None else st.array.view(np_new)
            clone = self._storage_clone(new, st.shape, array)
            view = object.__new__(type(self))
            TensorView.__init__(view, clone, self.shape, self.amap, self.consts, self.dynamic, self.mask,
                                self.coords)
            return view
        expect(self.is_root or self._is_whole_reshape(),
               "only whole tensors, or reshapes of them, can be reinterpreted with view() as a dtype of "
               "another size", got=self.shape, error=UnsupportedError)
        last = self.shape[-1] * old.itemsize
        expect(last % new.itemsize == 0, "the last dim must divide evenly into the new dtype",
               expected=f"multiple of {new.itemsize} bytes", got=last)
        shape = self.shape[:-1] + (last // new.itemsize,)
        array = None
        if st.array is not None:
            if not st.array.flags.c_contiguous:
                raise UnsupportedError("view(dtype) needs the storage in row-major order", got=self.shape)
            array = st.array.reshape(self.shape).view(np_new)
        return type(self).root(self._storage_clone(new, shape, array))

    def _storage_clone(self, dtype, shape, array) -> Storage:
        """The same bytes as this tensor's storage, as `dtype` of `shape` (what `view` returns over)."""
        st = self.storage
        clone = Storage(st.region, dtype, shape, array, st.placement, st.name, st.location, st.program)
        clone.is_kernel_arg = st.is_kernel_arg
        clone.base = st.base or st
        return clone

    def _is_whole_reshape(self) -> bool:
        """Every element of the storage, in row-major order, under another shape (a reshape of the whole)."""
        st_shape = self.storage.shape
        if self.dynamic or self.mask is not None or self.offset != 0 or self.size != math.prod(st_shape):
            return False
        if self.is_on_chip:
            row = math.prod(st_shape[1:])
            if self.shape[0] != st_shape[0] or (self.shape[0] > 1 and self.strides[0] != row):
                return False
        return self.is_contiguous()

    reinterpret_cast = view

    def ap(self, pattern, offset=None, scalar_offset=None, vector_offset=None, indirect_dim=0, dtype=None):
        """A raw access pattern over the storage: `pattern` = [[stride, count], ...], outermost first; on
        chip the first pair is the partition access and its stride must be the per-partition size.

        On a view narrower than its storage whose rows the pattern's partition step matches (the view's
        per-partition size, not the storage's), the pattern and offset address the view's own elements in
        row-major order: the NKI Library's TensorView helper calls `.ap` on such views so, and is correct on
        hardware only that way (the spec documents `.ap` on whole tensors).

        Run-time offsets (spec/language.md §7.1) make the view indirect: `scalar_offset` (a [1, 1] integer
        tile) adds its value times `prod(shape[indirect_dim + 1:])` elements; a `VirtualRegister` or NKI 0.7 `NkiScalar` offset (a
        device loop's variable, say) does the same with the register's value when the pattern is made, which
        is when the statement making it issues its instruction (a shape-only run, knowing no value, uses 0);
        `vector_offset` (an integer tile with one value per row of the pattern, `indirect_dim=0` only)
        replaces the leading stride: row p starts `vector_offset[p] * prod(shape[1:])` elements after
        `offset`. `shape` is the tensor's: that of a whole-tensor view such as a reshape, else the storage's
        (the spec is silent on sliced views).

        Bounds are checked when an instruction uses the pattern (as for every view), not when it is made:
        NKI Library kernels build out-of-range patterns in loop iterations that then skip the instruction.
        """
        same_dtype = dtype is None or dtype_of(dtype) is self.dtype
        base = self if same_dtype else type(self).root(self.storage).view(dtype)
        pattern = as_pattern(pattern, "access pattern")
        coords = base._flat_coords()
        if (base.is_on_chip and same_dtype and pattern[0][0] != coords[1] and pattern[0][0] == self.free_size
                and not self.is_root):
            strides, off = self._pattern_over_view(pattern, offset)
        else:
            if base.is_on_chip:
                expect(pattern[0][0] == coords[1], "the partition step of an on-chip access pattern must equal "
                       "the per-partition size (no partition skipping)", expected=coords[1], got=pattern[0][0])
            if offset is None:     # the view's offset from NKI 0.5; before, 0 (spec/language.md §7.1)
                from opennki.sim.program import active
                prog = active()
                before_0_5 = (prog is not None and requested_version(prog.options) is not None
                              and level_of(prog.options, Generation.NEW) < release("0.5"))
                offset = 0 if before_0_5 else self.offset
            strides, off = [s for s, _ in pattern], int(offset)
        expect(scalar_offset is None or vector_offset is None, "an access pattern takes at most one of "
               "scalar_offset and vector_offset", error=UnsupportedError)
        dynamic = ()
        if isinstance(scalar_offset, RuntimeInt):
            if isinstance(scalar_offset, NkiScalar) and base.is_on_chip:
                expect(scalar_offset.dtype.itemsize == 4, "on an SBUF or PSUM operand a scalar_offset must be "
                       "nl.int32 (a 64-bit offset is rejected, not narrowed)", got=scalar_offset.dtype,
                       error=DtypeError)
            off += (0 if scalar_offset.is_unknown else scalar_offset.index("scalar_offset")) \
                * base._offset_step(indirect_dim)
        elif scalar_offset is not None:
            dynamic = (base._offset_term(scalar_offset, indirect_dim, "scalar_offset"),)
        elif vector_offset is not None:
            expect(indirect_dim == 0, "vector_offset indexes the leading dimension (indirect_dim=0)",
                   got=indirect_dim)
            expect(vector_offset.shape[0] == pattern[0][1], "vector_offset needs one offset per row of the "
                   "access pattern", expected=pattern[0][1], got=vector_offset.shape[0])
            strides[0] = 0
            dynamic = (base._offset_term(vector_offset, 0, "vector_offset"),)
        return base._from_strides([n for _, n in pattern], strides, off, dynamic)

    def _pattern_over_view(self, pattern, offset):
        """Storage strides and offset of `pattern` (partition step = this view's per-partition size) applied
        to this view's own elements (see `ap`)."""
        row = self.free_size
        off = 0 if offset is None else int(offset)
        strides = self.strides
        free_dims = [d for d in range(1, self.ndim) if self.shape[d] > 1]
        scale = strides[free_dims[-1]] if free_dims else 1
        expected = row_major_strides(self.shape)
        linear = all(strides[d] == scale * expected[d] for d in free_dims)
        first = off % row
        last = first + sum(s * (n - 1) for s, n in pattern[1:] if s > 0)
        low = first + sum(s * (n - 1) for s, n in pattern[1:] if s < 0)
        if not linear or low < 0 or last >= row:
            raise UnsupportedError("this access pattern over a view crosses the view's rows, or the view's free "
                                   "dims are not evenly strided", got=(pattern, off))
        return ([strides[0]] + [scale * s for s, _ in pattern[1:]],
                self.offset + (off // row) * strides[0] + scale * first)

    def _offset_step(self, indirect_dim: int) -> int:
        """Elements one run-time offset unit moves: the tensor's row size below `indirect_dim`."""
        # the tensor's shape: a whole-tensor view's own (`t.reshape((1, n)).ap(...)`), else the storage's
        shape = self.shape if self.size == self.storage.size else self.storage.shape
        expect(0 <= indirect_dim < len(shape), "indirect_dim must be a dimension of the tensor",
               expected=f"[0, {len(shape) - 1}]", got=indirect_dim)
        return math.prod(shape[indirect_dim + 1:])

    def _offset_term(self, index, indirect_dim: int, role: str):
        """The DynamicTerm adding `index` times the tensor's row size below `indirect_dim` (flat coordinates)."""
        from opennki.machine.tensor import DynamicTerm
        if not (isinstance(index, TensorView) and index.is_on_chip and index.dtype.kind in ("int", "uint")):
            raise KernelError(f"{role} must be an on-chip integer tile or a VirtualRegister",
                              got=getattr(index, "dtype", type(index).__name__))
        step = self._offset_step(indirect_dim)
        if role == "scalar_offset":
            expect(index.size == 1, "scalar_offset must be a [1, 1] tile", got=index.shape)
            index = index.subscript((0, 0)) if index.ndim >= 2 else index
        else:   # one offset per partition: a [P, 1, ...] view (an `.ap` column, say) counts as its [P, 1] column
            expect(index.size == index.shape[0], "vector_offset holds one offset per partition",
                   expected=f"[{index.shape[0]}, 1]", got=index.shape)
            while index.ndim > 2:
                index = index.squeeze_dim(index.ndim - 1)
        if not self.is_on_chip:
            return DynamicTerm(index, 0, (step,))
        row = self._flat_coords()[1]
        return DynamicTerm(index, 0, (step // row, 0) if step % row == 0 else (0, step))

    def get_pattern(self):
        strides = self.strides
        return [[int(s), int(n)] for s, n in zip(strides, self.shape)]

    def is_contiguous(self) -> bool:
        expected = row_major_strides(self.shape)
        strides = self.strides
        axes = range(1, self.ndim) if self.is_on_chip else range(self.ndim)
        return all(strides[a] == expected[a] or self.shape[a] == 1 for a in axes)

    def is_indirect(self) -> bool:
        return bool(self.dynamic)

    def is_identity(self) -> bool:
        """NKI 0.3 / 0.4: True if this view is its whole tensor, unchanged (no slice, permute or offset)."""
        return self.is_root

    def indirect(self, index, num_elem=None):
        """Tensor indirection (NeuronCore-v4+, NKI 0.5+; the `nki-tensor-indirection` deep dive): a
        `(P, num_elem)` view of this SBUF or PSUM view whose column i, in partition p, is free element
        `offset(p, i)` of partition p. One compute instruction gathers through it (an input) or scatters through
        it (its `dst`); the instructions and operands that take it, and the target, are checked when one uses it.

        `index` is an SBUF `uint16` tensor `(P, K)` on the same partitions as the data (P = this view's
        partition count). Partitions form groups of G adjacent ones (16 for the Vector, Scalar and GpSimd
        engines, 32 for the Tensor Engine: the engine of the instruction that uses the view); every partition
        of a group uses the same offsets, read from the group's own G rows of `index` in snake order:
        `offset(p, i) = index[g * G + i % G, i // G]` with `g = p // G` (for the first group the page's
        `index[i % G, i // G]`). An offset is a position along this view's free dims, row-major (for a whole
        tensor: its column), and must be below their size: a larger one is an IndirectIndexError when the
        instruction runs (the instructions taking indirection have no `oob_mode`).

        `num_elem` defaults to `index.size`, as documented; a group holds only `G * K` offsets, so with more
        than G partitions pass `num_elem` (the instruction's check names the index element a default would
        need). [GAP] decided here: the group rows past the first group (the 0.7 page gave only the first
        group's formula; the deep dive's "partition group ... reads its offsets from the same rows of the
        index", with the rule that an indirected input starts on the same partition as its index), offsets
        counted over this view's own free elements, and duplicate offsets in a scatter (the last column
        written wins)."""
        from opennki.machine.tensor import DynamicTerm, TensorIndirection
        api = "NkiTensor.indirect"
        if not self.is_on_chip:
            raise MemoryKindError("tensor indirection reads or writes an SBUF or PSUM tensor", instruction=api,
                                  expected="SBUF/PSUM", got=self.kind.name, code="err_unsupported_memory",
                                  hint="gather HBM rows with .ap(vector_offset=...) / .vector_select(0, offsets)")
        expect(not self.dynamic, "an indirect view cannot be indirected again", error=KernelError)
        if not (isinstance(index, TensorView) and index.kind is MemoryKind.SBUF and index.dtype.name == "uint16"):
            raise DtypeError("the index of tensor indirection is an SBUF tensor of uint16 offsets", instruction=api,
                             expected="uint16 in SBUF", got=(f"{index.dtype} in {index.kind.name}"
                                                             if isinstance(index, TensorView) else type(index).__name__))
        rows = self.shape[0]
        expect(index.ndim == 2 and index.shape[0] == rows, "the index is (P, K) with P the data's partition count",
               expected=f"({rows}, K)", got=tuple(index.shape), error=ShapeError)
        count = index.size if num_elem is None else as_int(num_elem, "num_elem", minimum=1)
        free = self.free_size
        flat = self if self.ndim == 2 else self.reshape((rows, free))
        step = flat.strides[1] if free > 1 else 1
        term = DynamicTerm(index, 0, (0, step), TensorIndirection(count, free))
        return self._from_strides((rows, count), [flat.strides[0], 0], flat.offset, (term,))

    # -- legacy tile methods ----------------------------------------------------------------------------
    def broadcast_to(self, shape):
        return core.broadcast_view(self, as_shape(shape, "broadcast_to shape"))

    def expand_dims(self, axis):
        axes = [axis] if isinstance(axis, (int, np.integer)) else list(as_shape(axis, "expand_dims axes"))
        view = self
        for a in sorted(axes):
            view = view.expand_dim(a)
        return view

    def astype(self, dtype):
        return core.copy(self, dtype=dtype, api="tensor.astype")

    def assert_shape(self, shape):
        expect(tuple(self.shape) == tuple(shape), "tensor shape does not match the annotation",
               expected=tuple(shape), got=self.shape, code="err_annotation_shape_mismatch")
        return self

    @property
    def device_value(self):
        """NKI 0.3 / 0.4: the tensor's values as dumped from the device. opennki's device is the simulator, so
        this is `sim_value`."""
        return self.sim_value

    @property
    def sim_value(self):
        """The simulator's current values of this tensor (a NumPy copy), for debugging."""
        from opennki.machine.dtypes import to_public
        from opennki.sim.program import current
        prog = current("tensor.sim_value")
        prog.flush()
        return np.array(to_public(np.array(prog.machine.read(self)), self.dtype))


__all__ = ["NkiTensor", "slice_params"]
