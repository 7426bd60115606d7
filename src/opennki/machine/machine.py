"""Machine layer: the state one SPMD program sees, and the only place instruction semantics touch memory.

Imports the rest of the machine package. `Machine.read` / `Machine.write` are how every instruction's `run`
reads operands and writes results: they check bounds (honouring masks), resolve run-time indices, convert
values (engines compute in fp32 and round on write) and record the element offsets of indirect accesses
for the event stream. Nothing else mutates storage arrays.

Hidden per-engine state lives here too: the Scalar Engine's reduce registers and the Vector Engine's
accumulators (spec/isa.md §2.4), the random generator behind `rand`/`dropout`, and the sequencers'
virtual registers (spec/isa.md §7.5).
"""

from __future__ import annotations

import numpy as np

from opennki.errors import IndirectIndexError, ShapeError
from opennki.events import Engine, MemoryKind
from opennki.machine import index
from opennki.machine.dtypes import FP32_STORAGE, convert, poison_value, to_float32
from opennki.machine.index import constant_mask, mask_array
from opennki.machine.memory import Memory
from opennki.machine.tensor import TensorView, indirection_group

_PSUM = MemoryKind.PSUM
# Engines compute fp32 results straight into fp32 destinations (`Machine.fp32_target`); False: the plain path,
# every result computed into a new array and then written (tests/sim/test_into_destination.py compares them)
COMPUTE_INTO_FP32_TARGETS = True
# The data steps of the usual DMAs and matmuls wait in `Machine.later` until something else needs the data
# (`Machine.catch_up`); False: every step runs when its instruction runs (tests/sim/test_deferred_data.py
# compares them)
DEFER_DATA = True
# at most this many steps, holding at most this many bytes of arrays, wait: the arrays (a load's tile, a matmul's
# operands) stay alive until their steps run, when the tiles themselves may be gone
LATER_STEPS = 64
LATER_BYTES = 16 << 20
# A waiting copy into a tile that is gone when its batch runs, whose copy only matmuls of the batch read, is not
# made: they read its source (`_forward`); False: every copy is made (tests/sim/test_values_forwarding.py)
FORWARD_COPIES = True


class Machine:
    """One program's NeuronCore state (see the module docstring).

    Attributes:
        hw: target parameters.
        memory: this program's SBUF/PSUM allocators and the shared HBM.
        precise: store low-precision floats in their real format (False: fp32, NKI_PRECISE_FP=0).
        act_acc: Scalar Engine reduce registers, one fp32 per lane.
        dve_acc: Vector Engine accumulators, one fp32 per lane (NaN = unknown).
        rng: random generator for `rand`, `dropout` and `rng` instructions.
        registers: virtual register values by register number (None: never written; instructions/registers.py).
        offsets: flat offsets of indirect accesses made by the current instruction, keyed by view id.
        uninitialized_reads: (view, flat offsets) of the never-written elements the current instruction read,
            for storages whose elements are tracked (`Storage.initialized`, `uninitialized="raise"`).
        options: the program's SimOptions (None outside a launch): register-driven control flow asks them which
            API release's rules apply (`while reg:`, opennki.releases).
        later: the data steps issued but not run yet (`defer`, `catch_up`), in issue order; None: each runs at
            once (`DEFER_DATA` off, or programs running as cooperating threads, which share HBM).
        forwardable: a copy `_forward` may drop was deferred since the last `catch_up` (`copy_plain`): without
            one (a bf16 kernel's batches) the batch is not analysed.
    """

    def __init__(self, hw, memory: Memory, precise: bool, seed: int = 0, options=None):
        self.hw = hw
        self.options = options
        self.memory = memory
        self.precise = precise
        lanes = hw.memory.partitions
        self.act_acc = np.zeros(lanes, np.float32)
        self.dve_acc = np.full(lanes, np.nan, np.float32)
        self._seed = seed
        self._rng = None                # made on first use (rng): most programs draw nothing
        self.registers: dict[int, int | float | None] = {}
        self.offsets: dict[int, np.ndarray] = {}
        self.uninitialized_reads: list[tuple[TensorView, np.ndarray]] = []
        self.instruction_mask = None    # the running instruction's mask= (set by the simulator around run)
        self.engine = Engine.UNKNOWN    # the running instruction's engine (likewise; lays out tensor indirection)
        self.later: list | None = [] if DEFER_DATA else None
        self.later_bytes = 0            # the bytes of the arrays `later`'s steps hold (`defer`)
        self.forwardable = False
        self.matmul_runs = False        # a Tensor Engine instruction has run (set by the simulator before it runs):
        #                                 until then no PSUM tile holds "last written by nc_matmul" flags

    @property
    def rng(self) -> np.random.Generator:
        """The program's random generator, seeded with the launch seed; made when first asked for, which
        gives the same draws as making it with the machine (its seed is fixed), and costs a program that draws
        nothing about 10 us less."""
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        return self._rng

    @rng.setter
    def rng(self, generator: np.random.Generator) -> None:
        self._rng = generator

    # -- hidden engine state ------------------------------------------------------------------------------
    def hidden_state(self) -> tuple:
        """A snapshot of the state instructions keep outside tensors (accumulators, random generator,
        registers), for running an instruction a second time without its side effects."""
        return (self.act_acc.copy(), self.dve_acc.copy(), self.rng, self.rng.bit_generator.state,
                dict(self.registers))

    def restore_hidden_state(self, state: tuple) -> None:
        act, dve, rng, rng_state, registers = state
        self.act_acc[...] = act
        self.dve_acc[...] = dve
        self.rng = rng
        rng.bit_generator.state = rng_state
        self.registers.clear()
        self.registers.update(registers)

    # -- masks ---------------------------------------------------------------------------------------
    @staticmethod
    def effective_mask(view: TensorView, mask) -> np.ndarray | None:
        """The elements of `view` an instruction's `mask=` (and the operand's own mask) switch on, as a
        boolean array of the view's shape, or None for all of them. A legacy mask is a predicate over index
        expressions: it applies to the operands it can be laid over (broadcast onto, or reduced onto a
        smaller operand); an operand it cannot be laid over (the [P, 6] result of a `bn_stats` whose mask
        restricts the [P, F] input) is not restricted element by element."""
        m = None
        if mask is not None:
            if (mask is True or mask is False or type(mask) is np.bool_) and view.mask is None \
                    and index.CONSTANT_MASK_VIEWS:
                return constant_mask(bool(mask), view.shape)       # read-only, of the view's shape
            try:
                m = mask_array(mask, view.shape)
            except ShapeError:
                m = None
        if view.mask is not None:
            own = mask_array(view.mask, view.shape)
            m = own if m is None else (m & own)
        return None if m is None else np.broadcast_to(m, view.shape)

    def dynamic_values(self, view: TensorView) -> list[np.ndarray]:
        """The run-time index values of an indirect view, one array (broadcast to the view) per DynamicTerm;
        a tensor-indirection term's offsets are laid out for the running instruction's engine (`engine`)."""
        values = []
        for term in view.dynamic:
            idx = self.read(term.index).astype(np.int64)
            if term.columns is not None:
                values.append(self._indirection_offsets(view, term, idx))
                continue
            shape = (1,) * term.lead + idx.shape + (1,) * (view.ndim - term.lead - idx.ndim)
            values.append(np.broadcast_to(idx.reshape(shape), view.shape))
        return values

    def _indirection_offsets(self, view: TensorView, term, idx: np.ndarray) -> np.ndarray:
        """The free-element offset of every element of a tensor-indirection view (TensorIndirection), each
        below the data view's elements per partition, else an IndirectIndexError naming the first."""
        rows, cols = term.columns.positions(view.shape[0], indirection_group(self.engine))
        offsets = idx.reshape(idx.shape[0], -1)[rows, cols]
        limit = term.columns.limit
        bad = offsets >= limit
        if bad.any():
            p, i = np.unravel_index(int(np.argmax(bad)), bad.shape)
            value = int(offsets[p, i])
            raise IndirectIndexError(
                f"tensor indirection on `{view.name}`: offset {value} (index `{term.index.name}` element "
                f"[{int(rows[p, i])}, {int(cols[p, i])}], for partition {p}, column {i}) is outside the "
                f"{limit} elements per partition", flat_index=value, size=limit,
                expected=f"offsets in [0, {limit - 1}]", got=value, code="err_tensor_access_out_of_bound",
                hint="keep every offset of the index below the data view's free size")
        return offsets

    # -- deferred data steps ------------------------------------------------------------------------------
    def defer(self, step, args: tuple, nbytes: int) -> None:
        """Run `step(*args)`, the data step of a usual DMA or matmul (`Machine.copy_plain`,
        `tensor_engine._store_usual`), now or, while `later` is a list, when something needs the data
        (`catch_up`). The step reads and writes only NumPy arrays of storages, fixed when it was issued, and
        cannot fail; everything else the instruction does (checks, flags, placement, events) is done at once.

        Why: a tiled matmul's k-loop is two loads and a matmul per step, and running their data steps in a row
        (some 50 of them before the copy-out reads the PSUM tile) keeps the simulator's Python and the tiles'
        NumPy work from evicting each other from the CPU's caches at every instruction. No value changes: the
        steps run in the order they were issued, and everything that may read or write their arrays runs them
        first: every other instruction (`Program._run_and_emit`, `defers_data`), `Machine.read` (run-time
        indices, host-side reads of values), the end of the program, and the start of cooperation (programs of
        one launch running as threads share HBM, so they do not defer). `nbytes`: the bytes of the arrays the
        step holds (its tiles), which wait with it (`LATER_BYTES`)."""
        later = self.later
        if later is None:
            step(*args)
            return
        later.append((step, args))
        self.later_bytes += nbytes
        if len(later) >= LATER_STEPS or self.later_bytes >= LATER_BYTES:
            self.catch_up()

    def catch_up(self) -> None:
        """Run the deferred data steps (`defer`), in the order they were issued."""
        later = self.later
        if later:
            self.later = []
            self.later_bytes = 0
            if self.forwardable:
                self.forwardable = False
                _forward(later)
            for step, args in later:
                step(*args)

    def stop_deferring(self) -> None:
        """Run the deferred data steps, and from now on run each at once (programs now run as threads)."""
        self.catch_up()
        self.later = None

    # -- reads -------------------------------------------------------------------------------------------
    def read(self, view: TensorView, mask=None) -> np.ndarray:
        """The stored elements of `view` (storage dtype). Masked-off elements of an out-of-bounds or
        indirect view are not read; they come back as poison. The result may share memory: don't mutate."""
        if self.later:
            self.catch_up()             # deferred steps may write it (`defer`)
        if view._inb and mask is None and view.mask is None and view.storage.initialized is None:
            return view._np if view._np is not None else view.np_view()    # the usual case, as below gives it
        m = self.effective_mask(view, mask) if mask is not None or view.mask is not None else None
        st = view.storage
        if not view.dynamic and view.in_bounds():
            if st.initialized is not None:
                self._check_initialized(view, None, self._read_mask(view, mask, m))
            return view.np_view()
        dyn = self.dynamic_values(view) if view.dynamic else None
        view.check_bounds(m, dyn)
        offs = view.flat_offsets(dyn)
        arr = st.array
        if view.dynamic:
            self.offsets[id(view)] = offs if m is None else offs[np.broadcast_to(m, view.shape)]
        if st.initialized is not None:
            self._check_initialized(view, offs, self._read_mask(view, mask, m))
        if m is None:
            return arr[offs]
        out = np.empty(view.shape, arr.dtype)
        with np.errstate(invalid="ignore"):
            out.fill(poison_value(view.dtype))
        active = np.broadcast_to(m, view.shape)
        out[active] = arr[offs[active]]
        return out

    def _read_mask(self, view: TensorView, mask, m):
        """The elements of `view` an instruction really reads, for the uninitialised-read check: `m` (its
        mask laid over the view); with no mask given, the running instruction's own (`instruction_mask`:
        helpers read [P, 1] operands without one); where a mask cannot be laid over the view (the [P, 6]
        `bn_stats` result under a [P, F] mask), the partitions it leaves active."""
        if mask is None:
            mask = self.instruction_mask
            if mask is None:
                return m
            m = self.effective_mask(view, mask)
        if m is not None or not view.is_on_chip:
            return m
        rows = np.asarray(getattr(mask, "array", mask), dtype=bool)
        if rows.ndim < 1 or rows.shape[0] != view.shape[0]:
            return None
        rows = rows.reshape(rows.shape[0], -1).any(axis=1)
        return np.broadcast_to(rows.reshape((-1,) + (1,) * (view.ndim - 1)), view.shape)

    def _check_initialized(self, view: TensorView, offs, m) -> None:
        """Record the elements of `view` (flat offsets `offs`, None for a direct view) read under mask `m`
        that were never written."""
        flags = view.storage.initialized
        if offs is None:
            offs = view.flat_offsets() if m is not None else None
            unwritten = ~_flag_view(view, flags)
            if m is not None:
                unwritten = unwritten & m
            if unwritten.any():
                self.uninitialized_reads.append((view, (offs if offs is not None else view.flat_offsets())
                                                 [unwritten]))
            return
        if m is not None:
            offs = offs[np.broadcast_to(m, view.shape)]      # masked-off offsets may lie out of bounds
        where = offs[~flags[offs]]
        if where.size:
            self.uninitialized_reads.append((view, where))

    def read_f32(self, view: TensorView, mask=None) -> np.ndarray:
        """`read`, converted to fp32 as an engine input (exact for floats). `read`'s usual case, and an fp32
        storage's identity conversion, are taken inline: every element-wise instruction reads this way."""
        if view._inb and mask is None and view.mask is None and view.storage.initialized is None:
            stored = view._np if view._np is not None else view.np_view()      # `read`, as it gives it
        else:
            stored = self.read(view, mask)
        if stored.dtype is FP32_STORAGE:
            return stored
        return to_float32(stored, view.dtype)

    # -- writes ------------------------------------------------------------------------------------------
    def write(self, view: TensorView, values, mask=None, *, raw: bool = False) -> None:
        """Write `values` (broadcast to the view) into `view`, rounding to its dtype unless `raw` (values
        already in the storage format: bit-exact copies). Masked-off elements are left untouched."""
        st = view.storage
        dst = self._plain_target(view) if mask is None else None
        if dst is not None:
            # the usual case (a DMA's tile, an engine's result), as below does it
            if not raw:
                dst[...] = convert(values, st.dtype, self.precise)
            else:
                vals = np.asarray(values)
                dst[...] = vals if vals.dtype == dst.dtype else vals.astype(dst.dtype)
            return
        m = self.effective_mask(view, mask) if mask is not None or view.mask is not None else None
        if m is None and st._array is None and view.covers_all():
            arr = st.fresh_array()            # every element is written: no poison needed first
        else:
            arr = st.array
        vals = np.asarray(values)
        if not raw:
            vals = convert(vals, view.dtype, self.precise)
        elif vals.dtype != arr.dtype:
            vals = vals.astype(arr.dtype)
        st.written = True
        if st.base is not None:
            st.base.written = True    # a reinterpreting view (`t.view(dtype)`) writes its owner's memory
            st.base.initialized = None  # in elements of another size: its owner's elements are no longer tracked
        if not view.dynamic and view.in_bounds():
            dst = view.np_view()
            if m is None:
                dst[...] = vals
            else:
                np.copyto(dst, np.broadcast_to(vals, view.shape), where=np.broadcast_to(m, view.shape))
            self._wrote_direct(view, m)
            return
        dyn = self.dynamic_values(view) if view.dynamic else None
        view.check_bounds(m, dyn)
        offs = view.flat_offsets(dyn)
        vals = np.broadcast_to(vals, view.shape)
        if m is not None:
            active = np.broadcast_to(m, view.shape)
            offs, vals = offs[active], vals[active]
        if view.dynamic:
            self.offsets[id(view)] = offs
        arr[offs] = vals
        if st.initialized is not None:
            st.initialized[offs] = True
        if st.kind is _PSUM:
            self._unwritten_flags(view)
            st.unwritten[offs] = False
        if st.physical is not None:
            st.physical.written(st, *view.extent())

    def copy_plain(self, dst: TensorView, src: TensorView) -> bool:
        """A raw copy of all of `src` into all of `dst` (same shape and dtype: the caller knows) when both are
        the usual case (`read`'s first one, `_plain_target`), as `read` then `write(raw=True)` make it (the
        copy itself may wait: `defer`); False, with nothing done, otherwise (the usual read has no side effect,
        so the caller's plain path may read again)."""
        if not (src._inb and src.mask is None and src.storage.initialized is None):
            return False
        values = src._np if src._np is not None else src.np_view()
        target = self._plain_target(dst)
        if target is None:
            return False
        tile = dst.storage.release      # (a weak reference to a placed tile's storage; None in HBM)
        if tile is not None and FORWARD_COPIES and _same_layout(target, values):
            self.forwardable = True     # a copy `_forward` may drop, with its tile, whose death it looks for
        else:
            tile = None
        self.defer(_assign, (target, values, tile), target.nbytes)
        return True

    @staticmethod
    def _plain_target(view: TensorView) -> np.ndarray | None:
        """The NumPy view that a write of all of `view`'s elements goes through in the usual case (in bounds,
        no operand mask, its own storage, no initialisation flags, no physical image; in PSUM only all of the
        tile, whose "unwritten" flags become one value as `_wrote_direct` makes them), with the storage marked
        written (and given its memory, without poison, when the view covers all of it); None otherwise. The
        caller writes every element."""
        st = view.storage
        if not (view._inb and view.mask is None and st.base is None and st.initialized is None
                and st.physical is None):
            return None
        covers = view._all              # (`covers_all()`'s cached answer, read inline: every load and matmul)
        if covers is None:
            covers = view.covers_all()
        if st.kind is _PSUM:
            if not covers:
                return None
            st.unwritten = False
        if st._array is None and covers:
            st.fresh_array()
        st.written = True
        return view._np if view._np is not None else view.np_view()

    def fp32_target(self, view: TensorView) -> np.ndarray | None:
        """Where an engine may compute an fp32 result for all of `view` straight into: the NumPy view of the
        usual write (`_plain_target`) of an fp32 tensor stored as fp32, whose rounding on write is the
        identity, so computing into it stores what `write` would (without the temporary and the copy).
        Marks the storage written; None: compute, then `write`."""
        if view.storage.dtype.mant_bits != 23 or not COMPUTE_INTO_FP32_TARGETS:   # fp32 (tf32 rounds)
            return None
        return self._plain_target(view)

    def _wrote_direct(self, view: TensorView, m) -> None:
        """The bookkeeping of a write through the NumPy view of an in-bounds direct view (`m`: the effective
        mask or None): PSUM "unwritten" flags and the physical image of directly placed tensors."""
        st = view.storage
        if st.initialized is not None:
            written = _flag_view(view, st.initialized)
            if m is None:
                written[...] = True
            else:
                written[np.broadcast_to(m, view.shape)] = True
        if st.kind is _PSUM:
            if m is None and view.covers_all():
                st.unwritten = False
            else:
                fresh = self._unwritten_flags(view)
                if m is None:
                    fresh[...] = False
                else:
                    fresh[np.broadcast_to(m, view.shape)] = False
        if st.physical is not None:
            st.physical.written(st, *view.extent())

    def accumulate(self, view: TensorView, values_f32: np.ndarray, mask=None) -> None:
        """Read-add-write in fp32 (PSUM accumulation, DMA accumulate), rounding once on the write. An fp32
        destination without mask or run-time indices is added to in place: the fp32 sum is what the write
        would store (rounding to fp32 is the identity), without the temporary."""
        st = view.storage
        arr = st.array
        if (mask is None and view.mask is None and arr.dtype == np.float32 and st.dtype.mant_bits == 23
                and not view.dynamic and view.in_bounds()):
            if st.initialized is not None:
                self._check_initialized(view, None, self._read_mask(view, None, None))
            dst = view.np_view()
            np.add(dst, values_f32, out=dst)
            st.written = True
            if st.base is not None:
                st.base.written = True
                st.base.initialized = None
            self._wrote_direct(view, None)
            return
        current = self.read_f32(view, mask)
        self.write(view, current + values_f32, mask)

    # -- PSUM accumulation-group state -------------------------------------------------------------------
    # Two per-element flags of a PSUM storage drive the accumulation groups. Each is kept as one value while it
    # is the same for every element of the storage (a tile that matmuls, copies and memsets touch whole: the
    # usual case) and as a flat bool array once an access touches part of the tile:
    #   Storage.unwritten:      None (every element unwritten since declared), False (none), or the array;
    #   Storage.matmul_written: None (no element last written by nc_matmul), True (every element), or the array.
    @staticmethod
    def _unwritten_flags(view: TensorView) -> np.ndarray:
        """Per-element flags "not written since the tensor was declared" of a PSUM view, as a view of the
        storage's flag array (made from the storage's one value when it has none)."""
        st = view.storage
        if type(st.unwritten) is not np.ndarray:
            st.unwritten = np.full(st.size, st.unwritten is None, bool)
        return _flag_view(view, st.unwritten)

    @staticmethod
    def is_unwritten(view: TensorView) -> bool:
        """True if no element of the PSUM view was written since its tensor was declared (where the legacy
        `psum_tile += nisa.nc_matmul(...)` starts an accumulation group). Views with run-time indices, and
        runs without data (shape-only), count as written."""
        st = view.storage
        if (st._array is None and st._poison is None) or view.dynamic or not view.in_bounds():
            return False
        flags = st.unwritten
        if type(flags) is not np.ndarray:
            return flags is None
        return bool(_flag_view(view, flags).all())

    @staticmethod
    def matmul_flags(view: TensorView) -> np.ndarray:
        """Per-element flags "last written by nc_matmul" of a PSUM view (drives `accumulate=None`), as a view
        of the storage's flag array (made from the storage's one value when it has none)."""
        return _flag_view(view, Machine.matmul_flag_array(view.storage))

    @staticmethod
    def matmul_flag_array(st) -> np.ndarray:
        """The flat "last written by nc_matmul" flags of PSUM storage `st` (made from its one value if needed)."""
        if type(st.matmul_written) is not np.ndarray:
            st.matmul_written = np.full(st.size, st.matmul_written is True, bool)
        return st.matmul_written

    @staticmethod
    def matmul_written(view: TensorView):
        """The "last written by nc_matmul" state of a direct PSUM view: True or False when it is the same for
        all of its elements as far as the storage's one value says, else the flags (view-shaped)."""
        flags = view.storage.matmul_written
        if type(flags) is not np.ndarray:
            return flags is True
        return _flag_view(view, flags)

    @staticmethod
    def set_matmul_written(view: TensorView, value: bool, mask: np.ndarray | None = None) -> None:
        """Mark the elements of a direct view (those `mask` leaves active) as last written by nc_matmul
        (`value` True) or not."""
        st = view.storage
        if mask is None and view.covers_all():
            st.matmul_written = True if value else None
        elif mask is None:
            Machine.matmul_flags(view)[...] = value
        else:
            Machine.matmul_flags(view)[np.broadcast_to(mask, view.shape)] = value

    @staticmethod
    def clear_matmul_flags(view: TensorView, offsets: np.ndarray | None = None) -> None:
        """A non-matmul access ends the accumulation group of the elements it touches (`offsets`: the flat
        offsets an access with run-time indices touched)."""
        st = view.storage
        if st.matmul_written is None:
            return
        if view.dynamic:
            if offsets is not None:
                Machine.matmul_flag_array(st)[offsets] = False
        elif view.in_bounds():
            Machine.set_matmul_written(view, False)


def _flag_view(view: TensorView, flags: np.ndarray) -> np.ndarray:
    """The elements of a per-element flag array of the view's storage that the view covers."""
    return np.ndarray(view.shape, bool, buffer=flags, offset=view.offset, strides=view.strides)


def _assign(target: np.ndarray, values: np.ndarray, tile=None) -> None:
    """`Machine.copy_plain`'s data step (`tile`: a weak reference to the target's storage for a copy `_forward` may
    drop, `_same_layout`'s; else None)."""
    target[...] = values


def _skipped() -> None:
    """A copy `_forward` dropped."""


# What a data step does with its arrays (`Machine.defer`), as (argument position, access) pairs in `step.operands`,
# for `_forward`: writes the array, reads it, reads it as an operand for which another array of the same values and
# layout may stand in, or writes it as a copy of the next argument (the one after it: a weak reference to the
# target's storage, or None)
READS, WRITES, OPERAND, COPY = 0, 1, 2, 3
_WRITE = 1              # the kinds that write have this bit
_assign.operands = ((1, READS), (0, COPY))
_skipped.operands = ()


def _forward(later: list) -> None:
    """Drop the waiting copies (`later`'s steps) into tiles that are gone (their storage died: nothing but the
    waiting steps can read the tile any more) and that the later steps read only as an `OPERAND`, the tile itself,
    before anything writes the copy's source: those readers take the source instead, which holds the values the
    copy would have given them. Only an fp32 copy (an fp32 matmul operand goes to the sgemm as it is, which packs
    it anyway; a narrower one is widened into a new array, slower from the source than copy and widening were) of
    a 2-D source with the tile's shape, dtype and layout but for the partition stride (elements adjacent along the
    free dim), which a BLAS call takes as its leading dimension: the same values in the same order, the same bits.
    Any other access of the tile's memory (its root array) after the copy keeps the copy and its readers."""
    pending = {}        # id of a gone tile's root array -> [copy's index, tile, source, readers, open]
    sources = {}        # id of a pending copy's source's root array -> those pending copies
    for j, (step, args) in enumerate(later):
        for pos, access in step.operands:
            a = args[pos]
            if pending:                     # (else nothing to look for)
                key = a.base
                key = id(a) if key is None else id(key)
                entry = pending.get(key)
                if entry is not None:
                    if access is OPERAND and a is entry[1] and entry[4]:
                        entry[3].append((j, pos))
                        continue
                    del pending[key]        # read or written otherwise: the copy stays
                if access & _WRITE and key in sources:
                    for e in sources.pop(key):
                        e[4] = False        # its source changes: no later reader takes it
            if access is COPY:
                tile = args[pos + 2]
                if tile is not None and tile() is None:     # (a copy of `_same_layout`'s, `copy_plain`)
                    values = args[pos + 1]
                    pending[id(a.base)] = entry = [j, a, values, [], True]
                    key = values.base
                    sources.setdefault(id(values) if key is None else id(key), []).append(entry)
    for i, _, values, readers, _ in pending.values():
        later[i] = (_skipped, ())
        for j, pos in readers:
            step, args = later[j]
            later[j] = (step, args[:pos] + (values,) + args[pos + 1:])


def _same_layout(tile: np.ndarray, values: np.ndarray) -> bool:
    """`values` may stand in for the fp32 tile `tile` as a matmul operand (`_forward`)."""
    return (tile.dtype is FP32_STORAGE and values.dtype is FP32_STORAGE and tile.ndim == 2
            and values.shape == tile.shape and tile.strides[1] == 4 and values.strides[1] == 4
            and values.strides[0] >= tile.strides[0] and tile.base is not None)
