"""Simulator layer: one SPMD program while it runs, and the issue path every instruction takes.

Imports machine, instructions, events and errors. The program running on this thread is found through a
context variable (`current()`), which is how `nl` / `nisa` calls reach the machine without globals; two
simulators, or nested launches, never see each other's state.

Issue path: capture the user's kernel line, `check` the instruction (shapes/dtypes/buffers), `run` it on
the machine (unless shape-only), then emit an `InstructionExecuted` event to the listeners. Errors raised
on the way get the instruction's API name and the kernel line attached.

Deferred results (legacy functional style): `nl.exp(x)` allocates a result tile and *defers* its
instruction. If the next thing the kernel does is assign that tile into a destination
(`buf[...] = nl.exp(x)`, `acc += nl.matmul(...)`), the instruction is retargeted to write there directly,
as NKI's compiler does, instead of costing an extra copy. Any other issue first flushes the deferred
instruction, so program order is kept exactly.

A retarget changes only which instructions the listeners (the cost model) see, never a value the kernel can
observe: the result tile keeps the value Python semantics give it (`Program.retarget`).
"""

from __future__ import annotations

import contextvars
import gc
import sys
import dataclasses
import functools
import itertools
import math
import weakref

import numpy as np

from opennki.errors import KernelError, OpenNKIError, SourceLocation, is_internal, location_of, user_location
from opennki.events import (AccessKind, Engine, InstructionExecuted, MemoryKind, Operand, Region,
                            TensorAllocated, TensorFreed, positional_maker)
from opennki.listeners.findings import Finding, FindingKind
from opennki.machine.machine import Machine
from opennki.machine.memory import COUNTS_AS_EXPECTED, Memory, MemoryRegion, Storage, next_storage_id
from opennki.machine.tensor import TensorView, holds_view, row_major_strides
from opennki.sim import arrays
from opennki.sim.cooperative import Cooperation
from opennki.sim.frames import (frame_locals, peek_variable, pending_store_target, read_later, result_use,
                                user_frame)

# bound once: class lookups of members are slow (3.11)
_TENSOR, _PSUM, _HBM, _READ = Engine.TENSOR, MemoryKind.PSUM, MemoryKind.HBM, AccessKind.READ
_SBUF, _PSUM_REGION = MemoryRegion.sbuf, MemoryRegion.psum         # the on-chip regions
_refcount = sys.getrefcount

# Result tiles of retargeted temporaries are reused at their call site (Program.spare); False: every result
# tile is a new tensor (the plain path, which tests compare against). Needs CPython's reference counts of a local
# variable as `new_tensor` reads them (machine/memory.py measures them).
REUSE_RESULT_TILES = COUNTS_AS_EXPECTED
# Instructions take the lean issue path (`Program.lean`: checks skipped by signature, the front doors'
# decisions memoised, deferred temporaries retargeted without the general machinery, element-wise runs
# without the general read and write), with listeners too: it changes no event; False: every instruction
# takes the plain path (which tests compare against).
LEAN_ISSUE = True
# An unnamed on-chip tensor made at a kernel call site that made one of the same region, shape and dtype
# before is made from what that call decided (`Program._made_again`); False: every tensor takes the whole
# path (which tests compare against).
MEMO_TILE_SITES = True
# A tensor made at such a call site is reported allocated from what every tensor made there holds (the site's
# `TensorAllocated` fields but its storage id, address and size: `Program._allocation_fields`, kept with the site);
# False: each event's fields are read from its storage (the plain path, which tests compare against).
SITE_ALLOCATIONS = True
# An event's operand records are filled in from what all views of their view layout share (`_record_template`),
# its engine is its class's (`Instruction._engine`) where that is fixed, and a template's params are copied inline;
# False: each record is made by `operand_record`, the engine is `executor`'s and the params `event_params`' (the
# plain path, which tests compare against).
RECORD_TEMPLATES = True

# A non-matmul instruction ends the accumulation groups of the PSUM tiles it touches (`_run_and_emit`); until a
# Tensor Engine instruction has run in the program (`Machine.matmul_runs`), no tile has a group to end, so the
# look at the operands is skipped. False: every non-matmul instruction looks (the plain path).
SKIP_IDLE_GROUP_ENDS = True

# A planned instruction deferred at a call site decided before (`Program.defer`) is checked by `_check_clean`
# only when that check would do something: a lean observer looks at it, or an operand is not known in bounds
# or not placed (but its result tile). False: every such deferral calls `_check_clean` (the plain path).
QUIET_DEFERRALS = True

# A planned deferral claimed by its destination in the same statement (`acc += nisa.nc_matmul(...)`, `buf[...] =
# nl.add(x, 1.0)`) after a quiet check that touched its operands is checked at the destination alone
# (`Program._check_claimed`); False: the whole `_check_clean` (the plain path, which tests compare against).
CLAIMED_CHECKS = True

_current: contextvars.ContextVar["Program | None"] = contextvars.ContextVar("opennki_program", default=None)
# depth of `no_reorder` blocks around the running statement: their instructions' events say `ordered`
NO_REORDER: contextvars.ContextVar[int] = contextvars.ContextVar("opennki_no_reorder_depth", default=0)


def current(api: str | None = None) -> "Program":
    """The program running now; NKI APIs called outside a kernel raise `err_nki_api_outside_of_nki_kernel`."""
    program = _current.get()
    if program is None:
        raise KernelError(f"{api or 'NKI APIs'} can only be called inside a running NKI kernel",
                          code="err_nki_api_outside_of_nki_kernel",
                          hint="call the kernel (decorated with nki.jit) or run it with simulate_kernel")
    return program


# The program running now, or None (a bound method of the context variable: the issue path asks for every
# instruction, and a Python-level function around it cost a call)
active = _current.get


# Callables `setup(program)` run for every new Program; upper layers register rule checkers here (e.g. the
# legacy generation's parameter-mutability rules) without the simulator importing them.
PROGRAM_SETUP: list = []


class Observer:
    """Base of the language-layer rule checkers a Program calls (`Program.observers`); they may raise
    OpenNKIErrors, which get the instruction and kernel line attached like the instruction's own."""

    # its `check` raises or records something only for an instruction writing HBM: the lean path does not call
    # it for an instruction whose class writes only on chip (`Instruction.writes_on_chip_only`) or whose written
    # operands are all on chip
    hbm_writes_only = False
    # while true, its `check` does nothing for an instruction without `mask=` or with a bool one (the lean
    # path's): the lean path does not call it then; an observer changing it calls `Observers.refresh()`
    lean_idle = False
    # its `check` of a lean-path instruction only calls `out_of_scope(storage)` with the first operand's storage
    # whose scoped loop has finished (`Storage.scope`): the lean path finds that operand in its own pass over
    # the operands (`Program._check_clean`) and calls `out_of_scope` in its stead, when it is the first lean
    # observer (`Observers.lean_scopes`)
    lean_scopes = False

    def out_of_scope(self, storage) -> None:
        """The operand `storage` of the instruction being checked is used out of its scope (`lean_scopes`)."""

    def check(self, prog, instr) -> None:
        """After the instruction's own `check` (shapes, dtypes and buffers only)."""

    def executed(self, prog, instr, location) -> None:
        """After the instruction ran (run-time index offsets are still in `prog.machine.offsets`)."""

    def finished(self, prog, result) -> None:
        """After the kernel body returned `result` in this program."""

    def reclaim(self, prog, kind) -> bool:
        """Memory of `kind` is full: release tensors the kernel can provably no longer use (with
        `Memory.release_early`); True if any was released."""
        return False


class Observers(list):
    """A program's observers (`Program.observers`), with the ones that override each per-instruction hook
    kept apart (`checking`, `executing`): the issue path calls only those, not every observer's no-op for
    every instruction. Observers are only ever appended."""

    def __init__(self):
        super().__init__()
        self.checking: tuple = ()
        self.checking_on_chip: tuple = ()       # those of `checking` that look at on-chip writes, too
        self.hbm_writes_only = False            # some of `checking` look only at HBM writes
        self.executing: tuple = ()
        # the lean path's (`Program._check_clean`): those of `checking` not idle (`Observer.lean_idle`)
        self.lean_checking: tuple = ()
        self.lean_on_chip: tuple = ()
        self.lean_hbm_writes_only = False
        # the first of `lean_checking` if it checks only scopes there (`Observer.lean_scopes`), else None, and the
        # others of `lean_checking` and `lean_on_chip`: the lean path calls `lean_scopes.out_of_scope` in its
        # place, before the others, as the plain path calls it first
        self.lean_scopes = None
        self.lean_checking_rest: tuple = ()
        self.lean_on_chip_rest: tuple = ()

    def append(self, observer) -> None:
        super().append(observer)
        self.refresh()

    def refresh(self) -> None:
        """Sort the observers again (one was appended, or changed its `lean_idle`)."""
        self.checking = tuple(o for o in self if type(o).check is not Observer.check)
        self.checking_on_chip = tuple(o for o in self.checking if not o.hbm_writes_only)
        self.hbm_writes_only = len(self.checking_on_chip) < len(self.checking)
        self.executing = tuple(o for o in self if type(o).executed is not Observer.executed)
        self.lean_checking = tuple(o for o in self.checking if not o.lean_idle)
        self.lean_on_chip = tuple(o for o in self.lean_checking if not o.hbm_writes_only)
        self.lean_hbm_writes_only = len(self.lean_on_chip) < len(self.lean_checking)
        first = self.lean_checking[0] if self.lean_checking else None
        self.lean_scopes = first if first is not None and first.lean_scopes and not first.hbm_writes_only else None
        skip = 1 if self.lean_scopes is not None else 0      # then it is the first of `lean_on_chip`, too
        self.lean_checking_rest, self.lean_on_chip_rest = self.lean_checking[skip:], self.lean_on_chip[skip:]


@dataclasses.dataclass(slots=True)
class Deferred:
    """A checked instruction waiting for its result tile to be consumed. `use`: what the kernel statement
    does with the result (`frames.result_use`: "temporary", "local" with `frame` and `name`, or "held").
    `instr` is built when first read if `_instr` is None: `made[0](made[1], values)` (`Instruction.maker`: a
    planned instruction from its template, whose `values` start with its result tile in `dst`); the lean
    retarget of a temporary (`core.assign`) builds it with its destination there instead of moving it (one
    instruction built, not built and then changed: `core.BUILD_WHEN_CLAIMED`)."""
    _instr: object
    result: TensorView
    location: SourceLocation | None
    api: str | None
    use: str = "held"
    frame: object = None
    name: str | None = None
    plan: object = None     # the language layer's memo entry of a planned instruction (core._planned_binary)
    made: object = None     # `Instruction.maker`'s (make, template, ...) of one not built yet (`_instr` None)
    values: tuple = ()      # the values `made` builds it of
    touch: int = 0          # the touch its quiet check gave its operands, found clean (`Program._check_claimed`)

    @property
    def instr(self):
        instr = self._instr
        if instr is None:
            made = self.made
            instr = self._instr = made[0](made[1], self.values)
        return instr


class LaunchState:
    """What all programs of one launch share: HBM, the shared-HBM tensors the kernel creates, counters."""

    def __init__(self, sim, hbm_allocator, tensor_type, grid, kernel_name, fn=None, generation=None):
        self.sim = sim
        self.hbm = hbm_allocator
        self.tensor_type = tensor_type
        self.grid = grid
        self.kernel_name = kernel_name
        self.fn = fn                    # the kernel function (language rules read its annotations)
        self.body = None                # () -> the kernel body's result, run once per program
        self.args: tuple = ((), {})     # the bound (args, kwargs) the body receives (HBM tensors for arrays)
        self.cores_of = None            # program ids -> physical core (nl.nc grids), or None
        self.before_program = None      # callback (ids) -> None run before each program
        self.generation = generation    # a Generation, or None: selects generation-specific language rules
        self.pending_programs: list = []  # grid points not started yet, in launch order
        self.cooperation = None         # sim.cooperative.Cooperation once programs run as threads (all_reduce)
        self.interleave = None          # random.Random: the programs (one per core) run interleaved (cooperative)
        self.shared_state: dict = {}    # language-layer state of all programs (all_reduce, shared constants)
        self.shared: list = []
        self.seq = itertools.count()
        self.loop_ids = itertools.count()
        self.findings: list = []        # listeners.findings.Finding records of the checks in the programs
        self.collecting = False         # a findings.collecting() block is open: record findings, don't raise
        self.finding_keys: set = set()
        self.hbm_tensors: list = []     # weak references to the HBM storages the kernel made (sim/arrays.py)


class Program:
    """One SPMD program of a launch: its own SBUF/PSUM and engine state, plus the shared HBM."""

    def __init__(self, sim, launch: LaunchState, ids: tuple[int, ...], core: int = 0):
        self.sim = sim
        self.hw = sim.hw
        self.options = sim.options
        self.launch = launch
        self.ids = ids
        self.core = core
        # what every InstructionExecuted of this program holds but its own fields (`_event`), in field order
        self._event_fields = dict(seq=None, program=ids, core=core, opcode=None, engine=None, operands=None,
                                  params=None, mask=None, location=None, name=None, ordered=False, params_source=None)
        self._allocated_fields = dict(storage_id=None, program=ids, kind=None, name=None, shape=None, dtype=None,
                                      partitions=None, byte_start=None, size_bytes=None, location=None, direct=False)
        listening = bool(sim.listeners)
        # emit(event): `sim.emit`, or the one listener's `on_program_event` (else `on_event`) itself (the listeners
        # do not change while a launch runs; every instruction and every placement emits, and the loop over one
        # listener cost a call)
        self.emit = (getattr(sim.listeners[0], "on_program_event", sim.listeners[0].on_event)
                     if len(sim.listeners) == 1 else sim.emit)
        self.memory = Memory(self.hw, launch.hbm, self.options.precise_fp, self.options.shape_only, ids,
                             self if listening else None, self.options.uninitialized)
        self.machine = Machine(self.hw, self.memory, self.options.precise_fp, self.options.seed, self.options)
        if launch.cooperation is not None:
            self.machine.later = None   # programs running as threads share HBM: no data step waits
        self.pending: Deferred | None = None
        self.shared_count = 0
        self.loops: list = []   # language.control.LoopFrame of each loop running, outermost first
        # Language-layer rule checkers (see PROGRAM_SETUP): objects with optional `check(prog, instr)` (after
        # the instruction's own check), `executed(prog, instr, location)` (after it ran) and
        # `finished(prog, result)` (after the kernel body returned).
        self.observers = Observers()
        self.state: dict = {}   # language-layer per-program state, keyed by the owning module's name
        # (id of the code, call offset, region, shape, id of the dtype) -> a spare result tile made there (`spare`);
        # None: no reuse
        self._spares: dict | None = {} if REUSE_RESULT_TILES else None
        memory = self.memory
        # the same keys as `_spares` -> what new_tensor made there last (`_made_again`); None: every tensor
        # takes the whole path (MEMO_TILE_SITES off, or fresh memory zeroed or tracked per element, which
        # `Memory.new_storage` does for each tensor)
        self._tiles: dict | None = {} if MEMO_TILE_SITES and memory.fresh_fill is None and \
            not memory.track_initialized else None
        self._sites = self._spares is not None or self._tiles is not None     # new_tensor keys a site for either
        # (id of the code, call offset) of a kernel statement -> what a front door decided there last (its own
        # tuple, which holds the code: `core.remember_statement`)
        self.statements: dict = {}
        # the lean issue path (LEAN_ISSUE): the same instructions and events as the plain path, with less work
        self.lean = LEAN_ISSUE
        # a poisoned HBM tensor may get a kept array (sim/arrays.py); not where fresh memory holds zeros or
        # its elements are tracked, which `new_storage` decides only for a tensor without an array
        self._recycles_hbm = not (memory.shape_only or memory.track_initialized or memory.fresh_fill is not None)
        self._token = None
        for setup in PROGRAM_SETUP:
            setup(self)

    # -- context ----------------------------------------------------------------------------------------
    def __enter__(self):
        self._token = _current.set(self)
        return self

    def __exit__(self, *exc):
        try:
            if exc[0] is None:
                self.flush()
                self.machine.catch_up()     # the deferred data steps (`Machine.defer`): the caller reads HBM
        finally:
            if self.machine.later:
                self.machine.later = []     # a failed program's waiting steps: their arrays are dropped
            self.pending = None
            _current.reset(self._token)
            # the memory's event sink is this program (with listeners): a reference cycle that would keep the
            # program, its memory images and what the listeners hold alive until a full garbage collection
            self.memory.emit = None
        return False

    @property
    def grid(self) -> tuple[int, ...]:
        return self.launch.grid

    @property
    def core_rank(self) -> int:
        """This program's core rank in a new-generation LNC launch (grid `(lnc,)`; 0 when LNC=1)."""
        return self.ids[0] if self.grid else 0

    def meet_cores(self, kind: str, tag, ranks, value, what: str) -> dict:
        """Cross-core rendezvous of an LNC launch: the program of each core rank in `ranks` makes its k-th
        `kind` call with this `tag`; each posts `value` and waits for the others. Returns {rank: value}. A
        rank the launch does not have is a KernelError."""
        cores = self.grid[0] if len(self.grid) == 1 else 1
        for rank in ranks:
            if not 0 <= rank < cores:
                raise KernelError(f"{what}: core rank {rank} does not exist in an LNC={cores} launch",
                                  expected=f"a rank below {cores}", got=rank,
                                  hint="launch the kernel as kernel[2] for two cores (LNC=2)")
        me = self.core_rank
        if set(ranks) == {me}:
            return {me: value}
        calls = self.launch.shared_state.setdefault("core_meetings", {})
        number = calls[(self.ids, kind, tag)] = calls.get((self.ids, kind, tag), 0) + 1
        members = sorted({(r,) for r in ranks} | {self.ids})
        posts = Cooperation.of(self).rendezvous(self.ids, (kind, tag, number), members, value,
                                                f"{what} (call {number})")
        return {ids[0]: v for ids, v in posts.items()}

    def finish(self, result) -> None:
        """The kernel body returned: flush, then let the observers check the end-of-kernel rules."""
        self.flush()
        for observer in self.observers:
            observer.finished(self, result)

    # -- tensors ----------------------------------------------------------------------------------------
    def new_tensor(self, region: MemoryRegion, shape, dtype, name: str | None = None, *, fill=None,
                   location: SourceLocation | None = None, address=None, frame=None) -> TensorView:
        """Allocate a tensor (poisoned unless `fill`) and return its root view. An unnamed on-chip tensor made at
        a kernel call site is the site's (`result_tile`): the spare tile a retargeted temporary left there, or one
        made from what the site made before."""
        if location is None:
            if frame is None:           # `frame`: the caller found the kernel frame already (user_frame)
                frame = user_frame()
            if frame is not None and name is None and fill is None and address is None and \
                    (region is _SBUF or region is _PSUM_REGION) and self._sites:
                return self.result_tile(tuple(map(int, shape)), dtype, frame, region)
            location = location_of(frame) if frame is not None else None
        return self._new_tensor(region, tuple(map(int, shape)), dtype, name, fill, location, address)

    def _new_tensor(self, region: MemoryRegion, shape: tuple, dtype, name, fill, location, address, key=None,
                    frame=None) -> TensorView:
        """`new_tensor`'s tensor, made anew; `key`: the kernel call site's (`result_tile`) that makes it, at
        `frame`, which keeps what it made."""
        site = None
        if key is not None and self._spares is not None:
            site = (key, frame.f_code)
        if region is MemoryRegion.shared_hbm and self.launch.grid:
            k = self.shared_count
            self.shared_count += 1
            if k < len(self.launch.shared):
                storage = self.launch.shared[k]
                if storage.shape != shape or storage.dtype is not dtype:
                    raise KernelError("SPMD programs must create the same shared_hbm tensors",
                                      expected=(storage.shape, storage.dtype), got=(shape, dtype))
                return self.launch.tensor_type.root(storage)
        name = name or default_name(region._value_, shape)
        array = None
        hbm = region.kind is _HBM
        if hbm and fill is None and address is None and self._recycles_hbm:
            array = arrays.HBM_ARRAYS.poisoned(dtype, math.prod(shape), self.memory.precise)
        storage = self.memory.new_storage(region, dtype, shape, name, location, fill=fill, address=address,
                                          lazy=fill is None, array=array)
        if hbm:
            self.launch.hbm_tensors.append(weakref.ref(storage))
        if region is MemoryRegion.shared_hbm and self.launch.grid:
            self.launch.shared.append(storage)
        if site is not None:
            site += (self._allocation_fields(storage),)        # (`allocated`)
        storage.site = site
        view = self.launch.tensor_type.root(storage)
        tiles = self._tiles
        if key is not None and tiles is not None:
            # what this call made of these arguments, for the next call (`_made_again`)
            if len(tiles) >= 4096:
                tiles.clear()
            tiles[key] = (frame.f_code, region, dtype, shape, storage.name, location, storage.program,
                          storage.nbytes, storage._poison, site, view._layout)
        return view

    def result_tile(self, shape: tuple, dtype, frame, region: MemoryRegion = _SBUF, key=None) -> TensorView:
        """`new_tensor(region, shape, dtype, frame=frame)` for a front door's result tile or an unnamed on-chip
        tensor (`shape` a tuple of ints, `frame` the kernel frame or None, `region` SBUF or PSUM), which usually
        is the spare tile its call site's last statement left (`spare`), else one made from what the site made
        before (`_made_again`, a tile still held, as a load's), else (the site's first tile) a new one."""
        if frame is None or not self._sites:
            return self.new_tensor(region, shape, dtype, frame=frame)
        code = frame.f_code
        if key is None:                 # (else the caller kept this site's: `core.STATEMENT_PLANS`)
            key = (id(code), frame.f_lasti, region._value_, shape, id(dtype))
        spares = self._spares
        if spares is not None:
            # the spare tile (a load's site never has one), taken if nothing else refers to it (CPython's reference
            # counts: this variable alone holds the view, and the view alone its storage, the counts' arguments
            # aside), with the storage id a new tile would get (`spare` keeps the view itself: its storage's site
            # holds the code, so no other code takes the code's id while the view is kept)
            view = spares.pop(key, None)
            if view is not None and _refcount(view) <= 2 and _refcount(view.storage) <= 2:
                view.storage.id = next_storage_id()     # made at this line before: its location is this one
                return view
        view = self._made_again(key, code)
        if view is not None:
            return view
        return self._new_tensor(region, shape, dtype, None, None, location_of(frame), None, key, frame)

    def _made_again(self, key: tuple, code) -> TensorView | None:
        """`new_tensor` at a kernel call site (`key` as `_spares`', at the site of `code`) that made an unnamed
        on-chip tensor of this region, shape and dtype before (what it made is kept in `_tiles`; the caller has
        looked for a spare tile first, as the plain path does): a new tensor of the same name, kernel line and
        footprint, poisoned lazily as that one was (its `_poison`, an immutable tuple, is shared); None if the site
        made none (or `_tiles` is off). What the plain path computes again for each such tensor (the location, the
        name, the footprint and its shape rules, what `Memory.new_storage` decides from the memory's fixed
        options, the root view's layout) is a function of the site and these arguments."""
        tiles = self._tiles
        made = tiles.get(key) if tiles is not None else None
        if made is None or made[0] is not code:
            return None
        _, region, dtype, shape, name, location, program, nbytes, poison, site, layout = made
        storage = Storage(region, dtype, shape, None, None, name, location, program)
        storage.nbytes = nbytes
        storage._poison = poison
        storage.site = site
        return layout.view(storage, self.launch.tensor_type)

    def spare(self, result: TensorView, root: bool = False, planned: bool = False) -> None:
        """`result`, the result tile of a deferred temporary (`t[...] = nl.exp(x)`), was just retargeted: it was
        never placed, written or read, and the statement drops it. The next tensor its call site makes of the
        same region, shape and dtype may be it instead of a new one (`new_tensor`), if by then nothing refers
        to it (CPython's reference counts): such a tile is indistinguishable from a new one (the same name, kernel line,
        poison and scope, and the storage id a new tile would get, which it takes when reused: events show storage
        ids). Making the tensor objects of a temporary was about a tenth of the cost of a small instruction. `root`:
        the caller knows `result` is its storage's root view (`new_tensor` made it); `planned`: it is the result
        tile of a planned instruction (`Deferred.plan`), claimed by its retarget at once (`assign`, a matmul's
        `accumulate`): a root tile
        `new_tensor` or `result_tile` made for it, which nothing has placed (it was the deferral's `unplaced`),
        read or written (its instruction, the only one that could, never ran), so the tests of that are known."""
        st = result.storage
        site = st.site
        if site is not None and self._spares is not None and (planned or (
                st.placement is None and st._array is None and not st.written and st.matmul_written is None
                and st.unwritten is None and st.base is None and not st.declared and (root or result.is_root))):
            self._spares[site[0]] = result

    # allocation events (Memory calls these when listeners are attached)
    def allocated(self, storage, nbytes: int, direct: bool = False) -> None:
        event = _new(TensorAllocated)       # filled in from a template, as `_event` fills its own
        fields = event.__dict__
        site = storage.site
        # a tensor made at a kernel call site (`new_tensor`) holds what its site's first tensor held: the same name,
        # shape, dtype, kind and kernel line (`_made_again`, a spare tile); the fields of those, once per site
        fields.update(site[2] if site is not None and SITE_ALLOCATIONS else self._allocation_fields(storage))
        fields["storage_id"] = storage.id
        fields["byte_start"] = storage.placement.address
        fields["size_bytes"] = nbytes
        if direct:
            fields["direct"] = True
        self.emit(event)

    def _allocation_fields(self, storage) -> dict:
        """The fields of `storage`'s TensorAllocated events, in their order, but its id, address and size (set by
        `allocated`): this program's, and those its storage fixes (`Storage.partitions` inline)."""
        kind = storage.kind
        fields = dict(self._allocated_fields)
        fields["kind"] = kind
        fields["name"] = storage.name
        fields["shape"] = storage.shape
        fields["dtype"] = storage.dtype.name
        fields["partitions"] = storage.shape[0] if kind is not _HBM else 1
        fields["location"] = storage.location
        return fields

    def freed(self, storage_id: int, kind: MemoryKind) -> None:
        event = _new(TensorFreed)           # TensorFreed(storage_id, kind): its two fields set in its dict, in order
        fields = event.__dict__
        fields["storage_id"] = storage_id
        fields["kind"] = kind
        self.emit(event)

    def spilled(self, storage) -> None:
        """An on-chip tensor gives its range back under pressure (Memory.place): the copy out a compiler
        issues. PSUM: a Vector Engine instruction reading the whole tensor at its old range (to SBUF staging).
        SBUF: a DMA of the whole tensor to its HBM staging range."""
        if storage.kind is MemoryKind.SBUF:
            self._hbm_staging_copy("sbuf_spill", storage, to_hbm=True)
        else:
            self._staging_copy("psum_spill", storage, "data", AccessKind.READ)

    def reloaded(self, storage) -> None:
        """A spilled tensor got a range again: the copy back in, writing the whole tensor there."""
        if storage.kind is MemoryKind.SBUF:
            self._hbm_staging_copy("sbuf_reload", storage, to_hbm=False)
        else:
            self._staging_copy("psum_reload", storage, "dst", AccessKind.WRITE)

    def _hbm_staging_copy(self, opcode: str, storage, *, to_hbm: bool) -> None:
        on_chip = operand_record("src" if to_hbm else "dst", TensorView.root(storage),
                                 AccessKind.READ if to_hbm else AccessKind.WRITE)
        nbytes = on_chip.size_bytes
        if storage.spill_address is None:
            storage.spill_address = self.launch.hbm.allocate(nbytes, f"{storage.name}_spill")
        hbm = dataclasses.replace(
            on_chip, role="dst" if to_hbm else "src", access=AccessKind.WRITE if to_hbm else AccessKind.READ,
            region=Region(MemoryKind.HBM, storage.id, 0, 1, storage.spill_address, storage.spill_address + nbytes),
            partitions=1, free_elems=on_chip.partitions * on_chip.free_elems,
            strides=row_major_strides(on_chip.shape), offset=0, storage_shape=on_chip.shape)
        operands = (on_chip, hbm) if to_hbm else (hbm, on_chip)
        self.sim.emit(InstructionExecuted(next(self.launch.seq), self.ids, self.core, opcode, Engine.DMA,
                                          operands, {"tensor": storage.name}, None, user_location()))

    def _staging_copy(self, opcode: str, storage, role: str, access: AccessKind) -> None:
        operand = operand_record(role, TensorView.root(storage), access)
        self.sim.emit(InstructionExecuted(next(self.launch.seq), self.ids, self.core, opcode, Engine.VECTOR,
                                          (operand,), {"tensor": storage.name}, None, user_location()))

    # -- issuing ----------------------------------------------------------------------------------------
    def issue(self, instr, api: str | None = None, checked: bool = False, frame=None) -> None:
        """Check, run and report one instruction now. `checked`: its operand rules and check passed for its
        signature before (the caller knows the signature without computing it, as `defer` takes it); `frame`:
        the kernel frame, if the caller found it already (`user_frame`, `frames.as_kernel_frame`)."""
        if self.pending is not None:
            self.flush()
        self.execute(instr, user_location() if frame is None else location_of(frame), api, checked, checked)

    def defer(self, instr, result: TensorView, api: str | None = None, frame=None,
              checked: bool = False, plan=None, made=None, values: tuple = (), site=None) -> TensorView:
        """Check an instruction now and keep it pending until its result is consumed (module docstring).
        `frame`: the kernel frame, if the caller found it already (user_frame); `checked`: its operand rules
        and check passed for its signature before (the caller knows the signature without computing it);
        `plan`: the language layer's memo entry of a planned instruction (`Deferred.plan`). `instr` None (a
        checked one): `made[0](made[1], values)` is the instruction (of class `made[2]`: `Instruction.maker`),
        built here only if its check needs it, else when read (`Deferred.instr`). `site`: the statement's `_SITES`
        entry, if the caller kept it (`known_site`)."""
        p = self.pending
        if p is not None:               # `flush`, inline: most deferrals flush the one before
            self.pending = None
            self._run_and_emit(p.instr, p.location, p.api)
        if frame is None:
            frame = user_frame()        # the kernel line, and the statement that receives the result
        if frame is not None:
            code = frame.f_code
            if site is None:
                site = _SITES.get((id(code), frame.f_lasti))   # (code, location, use, name): `_SITES`
            if site is not None and site[0] is code:            # this call site's, decided before
                _, location, use, name = site
                touch = 0
                if checked:             # a planned instruction (lean path, no `mask=`) clean for its signature
                    observers = self.observers
                    if QUIET_DEFERRALS and not observers.lean_on_chip_rest:
                        # `_check_clean`'s no-op, told inline: no lean observer but the scope rule looks at an
                        # on-chip write, and its operands are known in bounds, placed (but the result tile, which
                        # it leaves unplaced), in their scope if the scope rule looks (`Observers.lean_scopes`),
                        # and none written in HBM if observers of HBM writes look at it. Those of one not built yet
                        # are its values at the places `made[3]` gives (`Instruction.maker`), all but its result
                        # tile in `dst`: a new on-chip root tile (in bounds) made in the running loop (in scope).
                        # It touches them, as the plain path's check does (`_touch_later`: a flush touches them
                        # again), with one number, which a claim of it in this statement gives its destination
                        # (`Deferred.touch`, `_check_claimed`)
                        unplaced, scopes = result.storage, observers.lean_scopes
                        hbm = not (made[2] if instr is None else instr).writes_on_chip_only and \
                            observers.lean_checking_rest
                        touch = next(_touches)
                        for _, view, access in made[3] if instr is None else instr._operands or instr.operands():
                            if instr is None:
                                view = values[view]
                            st = view.storage
                            root = st.base or st
                            root.last_touch = touch
                            if not view._inb or (st is not unplaced and (
                                    st.placement is None or root.placement is None)) or (
                                    scopes is not None and st.scope is not None and st.scope.finished) or (
                                    hbm and access is not _READ and st.kind is _HBM):
                                if instr is None:
                                    instr = made[0](made[1], values)
                                self._check_clean(instr, location, api, unplaced)
                                touch = 0
                                break
                    else:
                        if instr is None:
                            instr = made[0](made[1], values)
                        self._check_clean(instr, location, api, result.storage)
                else:
                    self._check(instr, location, api, result.storage)
                # `Deferred(instr, result, location, api, use, frame, name, plan, made, values)`, its slots set
                # here: calling the class runs its generated __init__ through the type's call (some 330 ns; this,
                # some 150), one store a slot (a tuple assignment of four builds and unpacks a tuple)
                pending = self.pending = _new(Deferred)
                pending._instr = instr
                pending.result = result
                pending.location = location
                pending.api = api
                pending.use = use
                pending.frame = frame
                pending.name = name
                pending.plan = plan
                pending.made = made
                pending.values = values
                pending.touch = touch
                return result
            location = location_of(frame)
        else:
            location = None
        if instr is None:
            instr = made[0](made[1], values)
        if checked:
            self._check_clean(instr, location, api, result.storage)
        else:
            self._check(instr, location, api, result.storage)
        if frame is not None:
            use, user, name = result_use(frame)
            if user is frame:           # decided in this frame (not through a helper's `return`)
                if len(_SITES) >= 8192:
                    _SITES.clear()
                _SITES[(id(frame.f_code), frame.f_lasti)] = (frame.f_code, location, use, name)
        else:
            use, user, name = "held", None, None
        self.pending = Deferred(instr, result, location, api, use, user, name, plan)
        return result

    def take_pending(self, result) -> Deferred | None:
        """Claim the pending instruction if `result` is its result tile (for retargeting)."""
        p = self.pending
        if p is not None and (p.result is result or isinstance(result, TensorView) and p.result.same_view(result)):
            self.pending = None
            return p
        return None

    def retarget(self, deferred: Deferred, changes: dict, retargeted=None) -> bool:
        """Issue a claimed deferred instruction with the fields `changes` replaced (usually `dst`), if that
        keeps every value the kernel can observe; False (nothing issued) if not, and the caller then issues
        the instruction as it is and copies its result. `retargeted`: that instruction, already made and
        checked by the caller (`check_instruction`), so it is not checked again.

        The decision (issue of record: a retarget once left `e` unwritten in `b1[...] = e; b2[...] = e`):
        - the result is a temporary of the statement (`buf[...] = nl.exp(x)`, `acc += nl.matmul(...)`, or
          returned by a helper into such a statement): nothing else can read it, so the instruction simply
          writes the destination;
        - the result is bound to a local variable the kernel's bytecode never reads again
          (`m = nl.matmul(...); acc += m`): the cost model sees the retargeted instruction, as a compiler's
          liveness analysis would give it; the result tile still gets its value, computed without an event
          (`_shadow_run`), so an alias made meanwhile (`tiles.append(m)`) reads the right numbers;
        - otherwise (the variable is read later, or the result went anywhere else): no retarget; the result
          is written as the plain path writes it, then copied (an instruction the cost model sees).
        A masked instruction (`mask=`, or masked operand views) bound to a local is never retargeted: the
        retarget would leave the destination's masked-off elements as they were, the copy writes the result's
        (never written) ones, and whether the local is read again must not decide which.
        """
        if deferred.use == "local":
            frame = deferred.frame
            deferred.frame = None
            if (_masked(deferred.instr) or read_later(frame, deferred.name)
                    or not self._shadow_run(deferred, changes)):
                return False
        elif deferred.use != "temporary":
            return False
        if retargeted is None:
            self.execute(deferred.instr.replace(**changes), deferred.location, deferred.api, moved=changes)
        else:
            self.execute(retargeted, deferred.location, deferred.api, checked=True, moved=changes)
        if deferred.use == "temporary":
            self.spare(deferred.result)
        return True

    def _shadow_run(self, deferred: Deferred, changes: dict) -> bool:
        """Compute a deferred instruction's result tile as the plain path would, emitting nothing and leaving
        the engines' hidden state (accumulators, random generator, registers) as it was, so the retargeted
        instruction that follows sees the same state. False if the instruction writes anything besides the
        operands the retarget moves (a second run would write it twice)."""
        instr = deferred.instr
        for fname, access in instr._operand_fields:
            if access is not AccessKind.READ and fname not in changes and getattr(instr, fname) is not None:
                return False
        if self.options.shape_only:
            return True
        machine = self.machine
        state = machine.hidden_state()
        try:
            runnable = instr.runnable()
            machine.engine = runnable.executor
            if machine.later and not runnable.defers_data:
                machine.catch_up()
            if machine.engine is _TENSOR:
                machine.matmul_runs = True
            runnable.run(machine)
        except OpenNKIError as e:
            raise _located(e, instr, deferred.location, deferred.api)
        finally:
            machine.restore_hidden_state(state)
            machine.offsets.clear()
            machine.uninitialized_reads.clear()    # the retargeted run reads the same elements again
        return True

    def flush(self) -> None:
        p = self.pending
        if p is not None:
            self.pending = None
            self._run_and_emit(p.instr, p.location, p.api)

    def execute(self, instr, location: SourceLocation | None, api: str | None, checked: bool = False,
                deferred: bool = False, moved=None) -> None:
        """Check, run and report `instr`. `checked`: its own check has passed already (`check_instruction`);
        `deferred`: it is a deferred instruction issued as it is, whose operand rules passed when it was
        deferred, too; `moved`: it is a deferred instruction retargeted with these fields replaced (`retarget`),
        whose other operands passed their operand rules and static bounds when it was deferred."""
        self._check(instr, location, api, None, checked or deferred, deferred, moved)     # positional: hot
        self._run_and_emit(instr, location, api, True)

    def _check(self, instr, location, api, unplaced=None, checked: bool = False,
               operands_checked: bool = False, moved=None) -> None:
        """`unplaced`: a deferred result's storage, which gets memory only if the instruction keeps it as its
        destination (a retargeted instruction writes elsewhere). `checked` / `operands_checked`: the
        instruction's own check / its operand rules passed already; the bounds, the language rules and
        placement still run. `moved`: only these fields need the operand rules and the bounds (`execute`).

        Lean path (`lean`, no `mask=` or a bool one): a deferred instruction's operands (`unplaced` given) are placed
        here if one needs memory, else left untouched (`_touch_later`); the operand rules are a function of the
        signature there, so a
        signature whose rules and check passed (`Simulator.clean`) skips both (and with `checked` and
        `operands_checked` the signature is not even computed); the bounds (cached per view), the language
        rules and placement run as on the plain path, but for the observers of HBM writes when the instruction
        writes only on chip: its class's check admits only on-chip written operands (and it passed), or none of
        its written operands is in HBM (a load's tile, a matmul's PSUM tile). A constant `mask=True` / `False`
        (legacy causal kernels compare loop indices) passes the operand rules whatever the operands are, and the
        bounds honour it as on the plain path."""
        try:
            if self.lean and (instr.mask is None or type(instr.mask) is bool):
                sig = True if checked and operands_checked else instr.signature()
                if sig is not None:
                    if sig is not True:
                        clean = self.sim.clean
                        if sig not in clean:
                            if not operands_checked:
                                instr.check_operands(moved)
                            if not checked:
                                self.check_instruction(instr)
                            clean.add(sig)
                    self._check_clean(instr, location, api, unplaced, moved)
                    return
            if not operands_checked:
                instr.check_operands(moved)
            if not checked:
                self.check_instruction(instr)
            check_static_bounds(instr, moved)
            for observer in self.observers.checking:
                observer.check(self, instr)
            self._place_operands(instr, unplaced)
        except OpenNKIError as e:
            raise _located(e, instr, location, api)

    def _check_clean(self, instr, location, api, unplaced=None, moved=None) -> None:
        """`_check` on the lean path of an instruction whose operand rules and check passed for its signature
        (`Simulator.clean`; a lean-path instruction: no `mask=`, or a bool one): the bounds, the language rules
        and placement. Called directly for an instruction known to be so (a planned one deferred as checked,
        or retargeted into a destination it was clean with), without `_check`'s tests of it.

        One pass over the operands finds what the steps need (a view not known in bounds, an operand without
        memory; once the scope rule is not idle, `Observers.lean_scopes`, or when the instruction may write HBM
        and a lean observer looks only at HBM writes, also an operand out of its scope and an HBM write: a second
        version of the pass) and touches the operands (not a deferred one's: `_touch_later`); the steps then run
        in the plain path's order: bounds, observers (the scope rule's first), placement. The touches may precede
        an error the steps raise, which ends the program: nothing reads them after."""
        try:
            operands = instr._operands or instr.operands()
            observers = self.observers
            if observers.lean_scopes is None and (instr.writes_on_chip_only or not observers.lean_hbm_writes_only):
                bounds = place = False
                if unplaced is None:
                    touch = next(_touches)
                    for _, view, _ in operands:
                        if not view._inb:
                            bounds = True
                        st = view.storage
                        root = st.base or st
                        root.last_touch = touch
                        if st.placement is None or root.placement is None:
                            place = True
                else:       # deferred: its operands are touched when it is issued (`_touch_later`)
                    for _, view, _ in operands:
                        if not view._inb:
                            bounds = True
                        st = view.storage
                        if (st.placement is None or (st.base or st).placement is None) and st is not unplaced:
                            place = True
                if bounds:
                    check_static_bounds(instr, moved)
                for observer in observers.lean_on_chip:
                    observer.check(self, instr)
                if place:
                    self._place_operands(instr, unplaced)
                return
            # all lean observers but the scope rule, those of on-chip writes until an HBM write is found
            scoped, checking = observers.lean_scopes, observers.lean_on_chip_rest
            hbm = not instr.writes_on_chip_only and observers.lean_hbm_writes_only
            bounds = place = False
            out = None                  # the first operand's storage whose scoped loop has finished
            if unplaced is None:
                touch = next(_touches)
                for _, view, access in operands:
                    if not view._inb:
                        bounds = True
                    st = view.storage
                    root = st.base or st
                    root.last_touch = touch
                    if st.placement is None or root.placement is None:
                        place = True
                    scope = st.scope
                    if scope is not None and scope.finished and out is None:
                        out = st
                    if hbm and access is not _READ and st.kind is _HBM:
                        checking = observers.lean_checking_rest
            else:
                for _, view, access in operands:
                    if not view._inb:
                        bounds = True
                    st = view.storage
                    if (st.placement is None or (st.base or st).placement is None) and st is not unplaced:
                        place = True
                    scope = st.scope
                    if scope is not None and scope.finished and out is None:
                        out = st
                    if hbm and access is not _READ and st.kind is _HBM:
                        checking = observers.lean_checking_rest
            if bounds:
                check_static_bounds(instr, moved)
            if out is not None and scoped is not None:
                scoped.out_of_scope(out)
            for observer in checking:
                observer.check(self, instr)
            if place:
                self._place_operands(instr, unplaced)
        except OpenNKIError as e:
            raise _located(e, instr, location, api)

    def _check_claimed(self, instr, location, api, moved, touch: int) -> None:
        """`_check_clean(instr, location, api, None, moved)` of a planned deferral claimed by its destination (`dst`,
        moved: `moved` holds "dst" and maybe parameter fields) in the statement that deferred it (`core.accumulate`,
        `core.assign`), whose quiet check (`defer`) found its other operands in bounds, placed and in their scope and
        touched them with `touch` (`Deferred.touch`; 0: it did not). No instruction was deferred or issued since (that
        would have flushed it), so none of them was placed, spilled or left its scope, and no other storage was touched:
        the steps run for the destination alone, in `_check_clean`'s order (bounds, the scope rule, the other lean
        observers, placement), and the destination takes the same touch (the plain path touches every operand here: the
        same order of touches). An instruction that may write HBM while observers of HBM writes look takes
        `_check_clean`, which looks at every written operand (`CLAIMED_CHECKS = False`: every claim)."""
        observers = self.observers
        if not touch or not CLAIMED_CHECKS or (
                not instr.writes_on_chip_only and observers.lean_hbm_writes_only):
            self._check_clean(instr, location, api, None, moved)
            return
        try:
            dst = instr.dst
            st = dst.storage
            root = st.base or st
            root.last_touch = touch
            if not dst._inb:
                check_static_bounds(instr, moved)
            scopes = observers.lean_scopes
            if scopes is not None:      # (none in most kernels: told before the tile's scope is looked at)
                scope = st.scope
                if scope is not None and scope.finished:
                    scopes.out_of_scope(st)
            for observer in observers.lean_on_chip_rest:
                observer.check(self, instr)
            if st.placement is None or root.placement is None:
                self._place_operands(instr)
        except OpenNKIError as e:
            raise _located(e, instr, location, api)

    def check_instruction(self, instr) -> None:
        """The instruction's own check, run once per signature (Instruction.signature): a signature whose
        check passed before passes again."""
        key = instr.signature()
        checked = self.sim.checked
        if key is None or key not in checked:
            instr.check(self)
            if key is not None:
                checked.add(key)

    def _place_operands(self, instr, unplaced=None) -> None:
        """On-chip tensors get their addresses when an instruction first touches them (Memory.place)."""
        touch = next(_touches)
        for _, view, _ in instr._operands or instr.operands():
            st = view.storage
            root = st.base or st
            root.last_touch = touch
            if (st.placement is None or root.placement is None) and st is not unplaced:
                if root.placement is None:
                    self.memory.place(root, self._reclaim, _operand_roots, instr)
                st.placement = root.placement

    def _reclaim(self, kind: MemoryKind, instr) -> bool:
        """Memory is full: free what a compiler's liveness analysis would know is dead. The observers release
        the tensors they know are dead (Observer.reclaim); the tensor the current statement is about to
        overwrite by rebinding its variable (`t = nl.zeros(...)` in a loop) is freed, since its last use is
        behind us though Python only drops it after the right-hand side is evaluated; so are tensors that
        only variables never read again hold (`_release_dead_locals`)."""
        freed = False
        for observer in self.observers:
            freed = observer.reclaim(self, kind) or freed
        frame = user_frame()
        if frame is None:
            return freed
        name = pending_store_target(frame)
        old = peek_variable(frame, name) if name is not None else None
        if isinstance(old, TensorView):
            views = [old]
        elif callable(getattr(old, "tiles", None)):      # block tensors: one storage per placement
            views = list(old.tiles())
        else:
            views = []
        storages = {id(v.storage): v.storage for v in views if isinstance(v, TensorView)}.values()
        operands = _operand_roots(instr)     # `acc = nl.add(acc, t)`: the old value is still this instruction's input
        for st in storages:
            if st.kind is kind and st.placement is not None and (st.base or st).id not in operands:
                Memory.release_early(st)
                freed = True
        return self._release_dead_locals(kind, frame, instr) or freed

    @staticmethod
    def _release_dead_locals(kind: MemoryKind, frame, instr) -> bool:
        """Release tensors that only local variables never read again hold (`frames.read_later`), in the
        kernel frames on the stack: `t = nl.ndarray(...)` used by a few instructions and then left alone keeps
        no memory on hardware; so do the tensors of a list (or nested lists) that only such a variable holds
        (NKI Library kernels keep per-tile lists: `weights = [nl.ndarray(...) for ...]`). Kept: the running
        instruction's operands, tensors a live variable reaches (directly, or one level into a container or
        object), and tensors anything else refers to (another view, a tuple a loop iterates over...). A wrong
        guess would only move addresses: a released tensor that is touched again gets a new range, and data
        never moves."""
        live, dead, lists = _operand_roots(instr), [], []
        while frame is not None:
            if not is_internal(frame.f_code.co_filename):
                for name, value in frame_locals(frame).items():
                    if isinstance(value, TensorView) and value.kind is kind and not read_later(frame, name):
                        dead.append(value)
                    elif isinstance(value, (list, tuple)) and not read_later(frame, name):
                        lists.append(value)
                    else:
                        live.update(_storages_in(value))
            frame = frame.f_back
        in_lists, boxes = _unshared_list_tensors(lists, kind)
        dead += in_lists
        del in_lists                    # a list holding the candidates would count as a referrer in _shared
        live.update(_shared(dead, boxes))
        freed = False
        for view in dead:
            st = view.storage.base or view.storage
            if st.id not in live and st.placement is not None:
                Memory.release_early(st)
                freed = True
        return freed

    def _run_and_emit(self, instr, location, api, placed: bool = False) -> None:
        """`placed`: `_check` has just placed every operand (a deferred instruction's result may still need
        its memory, and may have lost it to `_reclaim` while it waited)."""
        machine = self.machine
        if self.launch.interleave is not None:
            Cooperation.of(self).step(self.ids, location)
        if not placed:
            try:
                self._place_operands(instr)
            except OpenNKIError as e:
                raise _located(e, instr, location, api)
        if not self.options.shape_only:
            # the machine's `instruction_mask` is the running instruction's mask= (None between instructions: a
            # masked one sets it and puts it back, also when it fails)
            mask = instr.mask
            try:
                if mask is None:
                    runnable = instr
                    executor = machine.engine = instr.executor
                else:
                    runnable = instr.runnable()
                    executor = machine.engine = runnable.executor
                    machine.instruction_mask = runnable.mask
                if machine.later and not runnable.defers_data:
                    machine.catch_up()          # deferred data steps first (`Machine.defer`)
                if executor is _TENSOR:
                    machine.matmul_runs = True      # (before the run: a failed one may have set flags)
                runnable.run(machine)
                if mask is not None:
                    machine.instruction_mask = None
                if machine.uninitialized_reads:
                    self._uninitialized_reads(location, api or f"nisa.{instr.opcode}")
                for observer in self.observers.executing:
                    observer.executed(self, instr, location)
            except OpenNKIError as e:
                machine.instruction_mask = None
                raise _located(e, instr, location, api)
            except BaseException:
                machine.instruction_mask = None
                raise
            # a non-matmul access ends an accumulation group (none before a matmul ran: SKIP_IDLE_GROUP_ENDS)
            if (machine.matmul_runs or not SKIP_IDLE_GROUP_ENDS) and executor is not _TENSOR:
                for _, view, _access in instr._operands or instr.operands():
                    if view.storage.matmul_written is not None and view.kind is _PSUM:
                        Machine.clear_matmul_flags(view, machine.offsets.get(id(view)))
        if self.sim.listeners:
            self.emit(self._event(instr, location))
        if machine.offsets:             # run-time index offsets: none in most instructions
            machine.offsets.clear()
        if self.sim.progress is not None:
            self.sim.progress.instruction(location)

    def _uninitialized_reads(self, location, api: str) -> None:
        """The instruction just run read never-written elements (`uninitialized="raise"`): a finding per
        tensor, raised at once unless a `findings.collecting()` block is open (then recorded, once per
        tensor and line, and the run goes on with the poisoned values)."""
        launch = self.launch
        reads, self.machine.uninitialized_reads = self.machine.uninitialized_reads, []
        for view, offsets in reads:
            st = view.storage
            finding = uninitialized_finding(st, offsets, location, api, self.ids)
            if not launch.collecting:
                raise finding.error()
            if finding.key not in launch.finding_keys:
                launch.finding_keys.add(finding.key)
                launch.findings.append(finding)

    def _event(self, instr, location) -> InstructionExecuted:
        offsets = self.machine.offsets        # run-time index offsets: none in most instructions
        if offsets or not RECORD_TEMPLATES:
            operands = tuple([operand_record(role, view, access, offsets.get(id(view)))
                              for role, view, access in instr.operands()])
        else:                       # `operand_record` of each, from its view layout's template
            operands = []
            for role, view, access in instr._operands or instr.operands():
                layout = view._layout
                if layout is None:
                    operands.append(operand_record(role, view, access))
                    continue
                st = view.storage
                placement = st.placement
                address = placement.address
                sid = st.id
                # the last record of this layout (`_Layout.last`): the same storage at the same placement has the
                # same region, and with the same role and access the same record (records are frozen values)
                last = layout.last
                if last is not None and last[0] == sid and last[1] is placement and last[2] == address:
                    if last[3] == role and last[4] is access:
                        operands.append(last[5])
                        continue
                    region = last[6]
                else:
                    on_chip, p0, b0, b1, region_fields, _ = layout.record or _record_template(view)
                    region = _new(Region)
                    fields = region.__dict__
                    fields.update(region_fields)
                    fields["storage_id"] = sid
                    if on_chip:
                        fields["partition_start"] = placement.partition + p0
                    fields["byte_start"] = address + b0
                    fields["byte_end"] = address + b1
                record = _new(Operand)
                fields = record.__dict__
                fields.update(layout.record[5])
                fields["role"] = role
                fields["access"] = access
                fields["region"] = region
                fields["tensor_name"] = st.name
                operands.append(record)
                layout.last = (sid, placement, address, role, access, record, region)
            operands = tuple(operands)
        # the event's fields, in declaration order, filled in from this program's template (`positional_maker`'s
        # record, made by a dict copy and stores: fewer calls and arguments for every instruction)
        event = _new(InstructionExecuted)
        fields = event.__dict__
        fields.update(self._event_fields)
        fields["seq"] = next(self.launch.seq)
        fields["opcode"] = instr.opcode
        if RECORD_TEMPLATES:
            # the class's engine (`Instruction._engine`; None: its `executor` decides), and `event_params`'s first
            # case inline: a template's params
            engine, params = instr._engine, instr.__dict__.get("_params")
            fields["engine"] = engine if engine is not None else instr.executor
            fields["operands"] = operands
            if params is not None:
                fields["params"] = dict(params)
                fields["params_source"] = params
            else:
                fields["params"] = event_params(instr)
        else:
            fields["engine"] = instr.executor
            fields["operands"] = operands
            fields["params"] = event_params(instr)
            fields["params_source"] = instr.__dict__.get("_params")     # (what `event_params` copies if it is kept)
        if instr.mask is not None and instr.output is not None:
            fields["mask"] = Machine.effective_mask(instr.output, instr.mask)
        fields["location"] = location
        fields["name"] = instr.name
        if NO_REORDER.get() > 0:
            fields["ordered"] = True
        return event


_PARAMS: dict[tuple, dict] = {}        # Instruction.params_key() -> its params(), for `event_params`
_PARAMS_LIMIT = 4096


def event_params(instr) -> dict:
    """`instr.params()` for its event, kept per `Instruction.params_key()` (loops issue the same instruction
    over and over; the key is the signature when the check made it, else the parameter fields alone, since an
    instruction deferred as planned was checked without one). Equal keys give equal params: every parameter
    field is in the key, as a plain value or by what `plain` keeps of it (enum and operator names, NumPy
    scalars' values, tuples element by element), except a tensor in a parameter field, keyed by its view
    signature while `plain` names it: such instructions are not kept. Each event gets its own dict. An
    instruction built from a plan's template carries its `params()` (`Instruction.maker`, `replace`)."""
    params = instr.__dict__.get("_params")
    if params is not None:
        return dict(params)
    key = instr.params_key()
    if key is None:
        return instr.params()
    try:
        params = _PARAMS.get(key)
    except TypeError:                  # an unhashable key part
        return instr.params()
    if params is None:
        params = instr.params()
        fields = instr.__dict__
        if any(holds_view(fields[name]) for name in instr._param_fields):
            return params
        if len(_PARAMS) >= _PARAMS_LIMIT:
            _PARAMS.clear()
        _PARAMS[key] = params
    return dict(params)


def uninitialized_finding(storage, offsets, location, api: str, program) -> Finding:
    """The finding for a read of the never-written elements `offsets` (flat, into `storage`; an element a
    gather reads several times counts once)."""
    offsets = np.unique(offsets)
    first = tuple(int(i) for i in np.unravel_index(int(offsets[0]), storage.shape))
    created = storage.location
    where = f", created at line {created.lineno}" if created is not None else ""
    more = f" (and {offsets.size - 1} more never-written element(s))" if offsets.size > 1 else ""
    return Finding(
        FindingKind.UNINITIALIZED, "uninitialized_read",
        f"{api} reads element {list(first)} of tensor '{storage.name}'{where}, which was never written{more}",
        tuple(loc for loc in (location, created) if loc is not None), programs=(program,),
        extra={"tensor": storage.name, "element": first, "count": int(offsets.size)},
        why="on hardware fresh memory holds whatever was there before, so the value read is garbage; the "
            "simulator's NaN poisoning shows it only if it reaches an output that no mask hides",
        fix="write every element before reading it (nl.zeros / memset, or load the whole tile), or pass the "
            "same mask= to the instructions that read the partly written tile")


# (id of a code object, offset) -> (the code, location, use, name) of a call site issuing deferred instructions:
# its kernel line (`location_of`) and what the statement does with the result (`result_use`, when decided in that
# frame). A `CodeOffsetMemo` read inline (`Program.defer`): the entry holds its code, so the id is not reused.
_SITES: dict = {}


def known_site(frame):
    """The `_SITES` entry of the call running in `frame`, or None (not decided yet, or not in that frame)."""
    code = frame.f_code
    site = _SITES.get((id(code), frame.f_lasti))
    return site if site is not None and site[0] is code else None


def _masked(instr) -> bool:
    """True if `instr` may leave elements of its output unwritten (a `mask=`, or an operand view's mask)."""
    return instr.mask is not None or any(view.mask is not None for _, view, _ in instr.operands())


def _storages_in(value, depth: int = 1) -> dict:
    """{storage id: storage} of the tensors `value` holds (root storages of reinterpreting views), looking
    `depth` levels into containers and objects."""
    if isinstance(value, TensorView):
        st = value.storage.base or value.storage
        return {st.id: st}
    if depth == 0 or isinstance(value, (str, bytes, type)):
        return {}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = value
    elif isinstance(value, dict):
        items = value.values()
    elif hasattr(value, "__dict__") and not callable(value):
        items = vars(value).values()
    else:
        return {}
    out = {}
    for item in items:
        out.update(_storages_in(item, depth - 1))
    return out


def _unshared_list_tensors(lists: list, kind: MemoryKind) -> tuple[list, set[int]]:
    """The tensors of `kind` in `lists` (and in lists and tuples nested in them), and the ids of every list
    and tuple walked, leaving out each top-level list that anything but the walked lists and frames' local
    variables refers to (it may be read through that referrer). One heap scan for all lists: reclaiming
    runs whenever memory is full, PSUM spills included."""
    walked: dict[int, object] = {}
    found: list[list] = []
    for top in lists:
        views, stack = [], [top]
        while stack:
            box = stack.pop()
            if id(box) not in walked:
                walked[id(box)] = box
                views += [item for item in box if isinstance(item, TensorView) and item.kind is kind]
                stack += [item for item in box if isinstance(item, (list, tuple))]
        found.append(views)
    holders = [top for top, views in zip(lists, found) if views]
    index = {id(top): i for i, (top, views) in enumerate(zip(lists, found)) if views}
    shared = set()
    for referrer in gc.get_referrers(*holders) if holders else ():
        if id(referrer) in walked or referrer is lists or referrer is walked or referrer is holders:
            continue
        shared.update(index[id(t)] for t in gc.get_referents(referrer) if id(t) in index)
    views = [view for i in index.values() if i not in shared for view in found[i]]
    return views, set(walked)


def _shared(views: list, boxes: set[int] = frozenset()) -> set[int]:
    """Root storage ids of `views` that something other than a frame's local variables (or the dead lists
    `boxes`, by id) refers to: another view of the same storage, a reinterpreting storage, or any container
    or object holding one of the views. (The garbage collector does not report running frames' local
    variables as referrers.) The empty set for no views, without the heap scan (`gc.get_referrers` visits every
    object the collector tracks even when asked about none: milliseconds in a model-sized estimate)."""
    if not views:
        return set()
    view_ids = {id(v): v for v in views}
    roots = [v.storage.base or v.storage for v in views]
    root_ids = {id(st): st for st in roots}
    shared = set()
    # the call's argument tuple refers to them all: made here and passed as it is (a tuple given to `*` is not
    # copied), so that it can be told apart (CPython 3.13 reports it among the referrers)
    asked = (*views, *roots)
    for referrer in gc.get_referrers(*asked):
        if (referrer is asked or referrer is views or referrer is roots or referrer is view_ids
                or referrer is root_ids or id(referrer) in boxes):
            continue
        for target in gc.get_referents(referrer):
            if id(target) in view_ids:
                st = target.storage
                shared.add((st.base or st).id)
            elif id(target) in root_ids and id(referrer) not in view_ids:
                shared.add(target.id)
    return shared


def _operand_roots(instr) -> set[int]:
    """Storage ids of what an instruction touches, run-time index tiles included (Memory.place must not
    spill them while placing its operands)."""
    views = [view for _, view, _ in instr.operands()]
    views += [term.index for view in views for term in view.dynamic]
    return {(view.storage.base or view.storage).id for view in views}


def check_static_bounds(instr, fields=None) -> None:
    """Out-of-bounds accesses with compile-time indices are reported when the instruction is issued (as NKI's
    compiler does), honouring the mask on every operand it can be laid over (Machine.effective_mask).
    `fields`: only the operands of these fields (their run-time index tiles included)."""
    for role, view, _ in instr.operands():
        if view._inb or view.dynamic or view.in_bounds():      # `_inb`: the cached answer of in_bounds()
            continue
        if fields is not None and role.partition("[")[0].removeprefix("index:") not in fields:
            continue
        view.check_bounds(Machine.effective_mask(view, instr.mask))


def _located(e: OpenNKIError, instr, location, api) -> OpenNKIError:
    if e.instruction is None:
        e.instruction = api or f"nisa.{instr.opcode}"
    if location is not None:
        e.location = location
    return e


@functools.lru_cache(maxsize=1024)
def default_name(region: str, shape: tuple[int, ...]) -> str:
    """The name of a tensor the kernel did not name in `region` (a MemoryRegion's value, which is its name;
    cached, and keyed by a string: loops allocate the same shapes over and over, and hashing an Enum member
    runs Python code)."""
    return f"{region}_{shape}"


_touches = itertools.count(1)    # instruction order for Storage.last_touch (least recently used SBUF spills first)
# `_touch_later`: the lean path does not touch a deferred instruction's operands when it defers it, unless one needs
# memory then (`Program._check` places them, touching all, as the plain path does): whatever issues it touches them
# all again before anything reads `last_touch` (a flush places the operands, a retarget checks its instruction,
# which keeps every operand but the result tile, and nothing is placed in between), and the numbers it skips
# change no order between touches.
_new_region, _new_operand = positional_maker(Region), positional_maker(Operand)
_new = object.__new__


# what a layout fixes of an operand record -> its number (`Operand.layout`, and `Operand.form` for the fields a
# signature holds); a number is never given to others
_LAYOUT_NUMBERS: dict = {}
_layout_numbers = itertools.count()


def _layout_number(kind, partition_count, shape, dtype, itemsize, free, strides, offset, storage_shape,
                   width) -> int:
    """The number of an operand record's layout fields (`Operand.layout`): by value, so views of different
    layout objects with the same fields (made by different paths) get the same number. The templates hold it
    (`_record_template`): a record filled in from one gets it for nothing."""
    return _number((kind, partition_count, shape, dtype, itemsize, free, strides, offset, storage_shape, width))


def _form_number(kind, shape, dtype, itemsize, strides) -> int:
    """The number of what an event signature holds of an operand record but its first partition
    (`Operand.form`), by value, from the count layout numbers take (its contents are shorter than a layout's,
    so never equal to one); the templates hold it, as they hold the layout number."""
    return _number((kind, shape, dtype, itemsize, strides))


def _number(contents: tuple) -> int:
    number = _LAYOUT_NUMBERS.get(contents)
    if number is None:
        if len(_LAYOUT_NUMBERS) >= 1 << 16:
            _LAYOUT_NUMBERS.clear()         # the contents get new numbers: what listeners keep by the old misses
        number = _LAYOUT_NUMBERS[contents] = next(_layout_numbers)
    return number


def _record_template(view: TensorView) -> tuple:
    """What `operand_record` gives every view of `view`'s layout, whatever its storage: all but the role, the
    access, the storage's id, name and placement, which `Program._event` adds (a layout fixes the storage's
    shape, region and dtype, the view's shape, map and constants, and so every value derived from them).
    Kept on the layout (`_Layout.record`, read without a look-up): a kernel's loops make views of the same
    layouts again and again, and an estimate builds a record for every operand of every instruction."""
    st = view.storage
    dtype = st.dtype
    shape = tuple(view.shape)
    _, strides, offset = view._geo or view._geometry()
    free = view._free
    if free is None:
        free = view.free_size
    p0, pc, b0, b1 = view._extent or view._extents()
    on_chip = st.kind is not _HBM
    # the records' fields in declaration order (`positional_maker` order): those set per record are None here
    region = dict(kind=st.kind, storage_id=None, partition_start=0, partition_count=pc if on_chip else 1,
                  byte_start=None, byte_end=None)
    record = dict(role=None, access=None, region=None, shape=shape, dtype=dtype.name, itemsize=dtype.itemsize,
                  partitions=shape[0] if on_chip else 1, free_elems=free, strides=strides, offset=offset,
                  tensor_name=None, storage_shape=st.shape, offsets=None, gathered=False,
                  layout=_layout_number(st.kind, region["partition_count"], shape, dtype.name, dtype.itemsize,
                                        free, strides, offset, st.shape, b1 - b0),
                  form=_form_number(st.kind, shape, dtype.name, dtype.itemsize, strides))
    template = view._layout.record = (on_chip, p0 if p0 > 0 else 0, b0, b1, region, record)
    return template


def operand_record(role: str, view: TensorView, access: AccessKind, offsets=None) -> Operand:
    """The event record of one operand. Every event of a shape-only estimate builds these, so the view's
    cached geometry is read directly instead of through its properties (`partitions` is dim 0 on chip and 1
    in HBM, `free_size` as `TensorView.free_size` gives it; the region is the view's extent at its
    placement). The shape is a plain tuple: the view's `Shape` also equals lists, for kernels, and its
    Python-level `__eq__` would run in every look-up of the cost model's per-signature caches."""
    st = view.storage
    dtype = st.dtype
    shape = tuple(view.shape)
    gathered = False
    layout = form = None
    if view.dynamic:
        strides = offset = None
        gathered = any(term.columns is not None for term in view.dynamic)
    else:
        _, strides, offset = view._geo or view._geometry()
    free = view._free
    if free is None:
        free = view.free_size
    p0, pc, b0, b1 = view._extent or view._extents()
    placement = st.placement
    address = placement.address
    kind = st.kind
    if kind is not _HBM:
        region = _new_region(kind, st.id, placement.partition + (p0 if p0 > 0 else 0), pc, address + b0,
                             address + b1)
        partitions = shape[0]
    else:
        region = _new_region(kind, st.id, 0, 1, address + b0, address + b1)
        partitions = 1
    if offsets is None and not view.dynamic:
        layout = _layout_number(kind, region.partition_count, shape, dtype.name, dtype.itemsize, free, strides,
                                offset, st.shape, b1 - b0)
        form = _form_number(kind, shape, dtype.name, dtype.itemsize, strides)
    return _new_operand(role, access, region, shape, dtype.name, dtype.itemsize, partitions, free, strides,
                        offset, st.name, st.shape, offsets, gathered, layout, form)
