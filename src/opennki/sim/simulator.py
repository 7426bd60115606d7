"""Simulator layer: launching a kernel over its SPMD grid on the simulated machine.

`Simulator.launch(fn, args, kwargs, grid=...)` copies array arguments into HBM tensors (named after the
kernel's parameters; the caller's arrays are never touched unless the kernel writes them, in which case the
new contents are copied back), runs the kernel body as ordinary Python once per program of the grid (each
with its own SBUF, PSUM and engine state; `nl.shared_hbm` tensors are shared), and returns what the kernel
returns with its tensors converted to NumPy arrays. Listeners attached to the simulator receive every event.
"""

from __future__ import annotations

import dataclasses
import inspect
import itertools
import math
import random
import time
import warnings

import numpy as np

from opennki.errors import KernelError
from opennki.events import LaunchFinished, LaunchStarted, MemoryKind, ProgramFinished, ProgramStarted
from opennki.hw import get_target
from opennki.listeners import findings as _findings
from opennki.listeners.races import RaceChecker
from opennki.machine.dtypes import convert, dtype_of, to_public
from opennki.machine.memory import Allocator, MemoryRegion, Placement, Storage
from opennki.machine.tensor import TensorView
from opennki.sim import arrays
from opennki.sim.options import SimOptions
from opennki.sim.program import LaunchState, Program
from opennki.sim.progress import progress_for

HBM_ALIGN_BYTES = 64
# Hooks the language layers register: hook(launch, name) is True when no instruction of `launch` can write the
# kernel argument named `name` (a parameter's name, `x[1]` for an element of a tuple or list parameter) without
# its check failing first (legacy immutable parameters: legacy/typing.py). Such an argument's HBM tensor is the
# caller's array itself rather than a copy, as is a read-only array's (`_arg_tensor`).
UNWRITABLE_ARGUMENTS: list = []
# A returned tensor the kernel made (not an argument, first of the outputs to name it) hands out its HBM array
# itself, which the finished launch no longer uses; False: every output is a copy (the plain path, which
# tests compare against).
RETURN_STORAGE_ARRAYS = True


class LaunchClock:
    """The CPU seconds (all threads of the process, as `time.process_time` counts them) spent inside launches
    since the process started, counting nested launches once: what `pytest --nki-durations` reports per test.
    Two `process_time` reads per launch, nothing per instruction."""

    def __init__(self):
        self.seconds = 0.0
        self.depth = 0
        self._start = 0.0

    def __enter__(self):
        if self.depth == 0:
            self._start = time.process_time()
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        if self.depth == 0:
            self.seconds += time.process_time() - self._start


LAUNCH_CLOCK = LaunchClock()


class ShapeSpec:
    """A shape-and-dtype stand-in for an array argument (`nt.tensor[[M, K], nl.bfloat16]`): enough to run a
    kernel shape-only, e.g. for a cost estimate."""

    def __init__(self, shape, dtype):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dtype_of(dtype)

    def __repr__(self):
        return f"ShapeSpec({list(self.shape)}, {self.dtype})"


def is_array_arg(x) -> bool:
    """An array the caller passes in (NumPy, framework, or a shape placeholder). Scalar type objects such as
    `np.float32` or `ml_dtypes.bfloat16` (a kernel's `dtype` parameter) have `shape` and `dtype` attributes too,
    as class-level descriptors, so classes are excluded."""
    return isinstance(x, (np.ndarray, ShapeSpec)) or (hasattr(x, "__array__") and hasattr(x, "shape")
                                                      and hasattr(x, "dtype") and not isinstance(x, (TensorView, type)))


class Simulator:
    """Runs kernels. See the module docstring.

    Args:
        target: NeuronCore target (overrides `options.target`).
        options: SimOptions (defaults read from the environment).
        listeners: objects with `on_event(event)`; they observe and never change results.
    """

    def __init__(self, target=None, *, options: SimOptions | None = None, listeners=()):
        self.options = options or SimOptions()
        self.hw = get_target(target if target is not None else self.options.target)
        self.listeners = list(listeners)
        self.findings: list = []    # what the checks found in this simulator's launches (listeners/findings.py)
        # signatures (Instruction.signature) of the instructions whose check passed: the check needs no data
        # and reads only what the signature holds, so it runs once per signature; hw and options are fixed
        self.checked: set = set()
        # signatures of instructions without `mask=` whose operand rules (check_operand_types, a function of
        # the signature for them) and check both passed: the lean issue path skips both (Program._check)
        self.clean: set = set()
        # retargets whose check failed (the language layer's `core._retargeted`, lean path), by what gives the
        # retargeted instruction's signature: the check would fail again, so such a retarget is not tried again
        self.unretargetable: set = set()
        # the language layer's memo of clean instructions it builds from a plan (opennki._src.core._PLANS):
        # (plan key, value key) -> ({destination key its retargeted instruction is clean with: that instruction's
        # kept params or None}, how to build the instruction: Instruction.maker)
        self.planned: dict = {}
        self.progress = None            # the running launch's sim.progress.Progress, if it draws one

    def emit(self, event) -> None:
        for listener in self.listeners:
            listener.on_event(event)

    def launch(self, fn, args=(), kwargs=None, *, grid=(), tensor_type=TensorView, kernel_name=None,
               cores_of=None, before_program=None, after_program=None, generation=None):
        """Run `fn` over `grid` and return its outputs (see the module docstring).

        Args:
            grid: SPMD grid sizes, () for a single program.
            tensor_type: the tensor class kernels see (the language layer's NkiTensor).
            cores_of: optional function mapping program ids to a physical core index.
            before_program / after_program: callbacks `(ids) -> None` and `(ids) -> bool | None`; when
                after_program returns False the remaining programs are skipped.
            generation: the kernel's `Generation` (opennki.releases) when the front door knows it; selects generation-specific
                language rules (e.g. legacy kernel parameters are immutable unless `nt.mutable_tensor`).

        Programs run one after the other in grid order, except that a launch over several physical cores
        (LNC=2, `nl.nc` grids) runs its cores interleaved instruction by instruction, each core's programs
        one after another (`SimOptions.interleave_seed`, sim/cooperative.py). A collective (`nl.all_reduce`) needs every program
        of its group at once: the first one switches the launch to cooperating threads (sim/cooperative.py),
        which adopt the programs not started yet; the loop below then skips them and waits for them at the end.
        """
        kwargs = dict(kwargs or {})
        grid = tuple(int(g) for g in grid)
        name = kernel_name or getattr(fn, "__name__", "kernel")
        collected, options = _findings.collector(), self.options
        if options.shape_only and options.uninitialized == "raise":
            # shape-only launches (benchmark, profile, estimates) compute no values and track no written
            # elements: say so rather than report a clean run (docs/design-notes.md, the checks)
            warnings.warn(f"{name}: uninitialized='raise' is not checked in a shape-only run (benchmark, profile, "
                          "estimate); run the kernel (jit, simulate) to find uninitialised reads", stacklevel=2)
        if collected is not None and collected.all_checks:
            self.options = dataclasses.replace(options, detect_races=True, uninitialized="raise")
        checker = RaceChecker() if self.options.detect_races else None
        if checker is not None:
            self.listeners.append(checker)
        try:
            with LAUNCH_CLOCK:
                return self._launch(fn, args, kwargs, grid, tensor_type, name, cores_of, before_program,
                                    after_program, generation, checker)
        finally:
            self.options = options
            if checker is not None:
                self.listeners.remove(checker)

    def _launch(self, fn, args, kwargs, grid, tensor_type, name, cores_of, before_program, after_program,
                generation, checker):
        hbm = Allocator(MemoryKind.HBM, self.hw.memory.hbm_bytes, HBM_ALIGN_BYTES, self.hw.name)
        launch = LaunchState(self, hbm, tensor_type, grid, name, fn=fn, generation=generation)
        launch.collecting = _findings.collector() is not None
        if launch.collecting:
            _findings.launched(fn, generation, self.options)
        bound_args, bound_kwargs, arg_storages = self._bind(fn, args, kwargs, launch)
        launch.body = lambda: fn(*bound_args, **bound_kwargs)
        launch.args = (bound_args, bound_kwargs)
        launch.cores_of = cores_of
        launch.before_program = before_program
        cores = len({cores_of(ids) for ids in _grid_points(grid)}) if cores_of else 1
        if cores > 1 and not self.options.shape_only:
            launch.interleave = random.Random(self.options.interleave_seed)    # sim/cooperative.py
        self.emit(LaunchStarted(name, grid, self.hw.name, cores, self.options.shape_only))
        result, ran = None, 0
        launch.pending_programs = list(_grid_points(grid))
        self.progress = progress_for(self.options.progress, name, len(launch.pending_programs))
        try:
            while launch.pending_programs:
                ids = launch.pending_programs.pop(0)
                result = self.run_program(launch, ids)
                ran += 1
                if self.progress is not None:
                    self.progress.program_done()
                if after_program is not None and after_program(ids) is False:
                    launch.pending_programs.clear()
            if launch.cooperation is not None:
                ran += launch.cooperation.finish()
        except BaseException as e:
            if launch.cooperation is not None:
                launch.cooperation.abort()
            if launch.collecting and getattr(e, "program_lines", None):
                launch.findings.append(_divergence(e))
            self._report(launch, checker, raising=False)
            raise
        finally:
            if self.progress is not None:
                self.progress.close()
                self.progress = None
        self.emit(LaunchFinished(name, ran))
        self._write_back(arg_storages)
        self._report(launch, checker)
        outputs = self._outputs(result, set())
        if not self.options.shape_only:
            made = (ref() for ref in launch.hbm_tensors)
            # an argument that is the caller's array (`_arg_tensor`) has a view of it, which is never kept
            arrays.HBM_ARRAYS.give([storage.array for storage, _ in arg_storages] +
                                   [st._array for st in made if st is not None and st._array is not None])
        return outputs

    def _report(self, launch, checker, raising: bool = True) -> None:
        """Hand on what the checks found in the launch (listeners/findings.py): into the open `collecting()`
        list, else raise the first finding (unless the launch already failed)."""
        found = launch.findings + (checker.report() if checker is not None else [])
        if not found:
            return
        found = [_findings.with_kernel(f, launch.kernel_name) for f in _findings.unique(found)]
        self.findings.extend(found)
        if raising or launch.collecting:
            _findings.report(found)

    def run_program(self, launch, ids):
        """Run the kernel body as the program `ids` of `launch` and return what it returned."""
        core = launch.cores_of(ids) if launch.cores_of else 0
        if launch.before_program is not None:
            launch.before_program(ids)
        self.emit(ProgramStarted(ids, core, launch.grid))
        with Program(self, launch, ids, core) as prog:
            result = launch.body()
            prog.finish(result)
        self.emit(ProgramFinished(ids, core))
        return result

    # -- arguments ------------------------------------------------------------------------------------------
    def _bind(self, fn, args, kwargs, launch):
        """Wrap array arguments (also inside tuples/lists) as HBM tensors named after the parameters."""
        storages = []
        wrap = self._wrap
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as e:
            raise KernelError(f"kernel {launch.kernel_name} called with mismatching arguments: {e}") from None
        except ValueError:   # no introspectable signature: positional names arg0, arg1, ...
            return (tuple(wrap(a, f"arg{i}", launch, storages) for i, a in enumerate(args)),
                    {k: wrap(v, k, launch, storages) for k, v in kwargs.items()}, storages)
        for pname, value in list(bound.arguments.items()):
            bound.arguments[pname] = wrap(value, pname, launch, storages)
        return bound.args, bound.kwargs, storages

    def _wrap(self, value, name, launch, storages):
        """An argument as the kernel sees it: arrays as HBM tensors (their storages and the caller's values
        appended to `storages`), also inside tuples and lists. A method rather than a closure calling itself:
        such a closure is a reference cycle, which kept the launch and its argument copies alive until the
        garbage collector ran."""
        if isinstance(value, np.generic):
            return value.item()      # a NumPy scalar (`1 / np.sqrt(d)`) is a scalar argument, like a float
        if is_array_arg(value):
            view = self._arg_tensor(value, name, launch)
            storages.append((view.storage, value))
            return view
        if isinstance(value, (tuple, list)):
            return type(value)(self._wrap(v, f"{name}[{i}]", launch, storages) for i, v in enumerate(value))
        return value

    def _arg_tensor(self, value, name, launch) -> TensorView:
        dtype = dtype_of(value.dtype, f"kernel argument {name!r}")
        shape = tuple(int(s) for s in value.shape) or (1,)
        nbytes = math.prod(shape) * dtype.itemsize
        address = launch.hbm.allocate(nbytes, name)
        array = None
        read_only = isinstance(value, np.ndarray) and not value.flags.writeable
        if not self.options.shape_only:
            if isinstance(value, ShapeSpec):
                raise KernelError(f"argument {name!r} is a shape placeholder; it can only be used shape-only "
                                  "(benchmark/profile)")
            src = np.asarray(value)
            array = np.ascontiguousarray(convert(src.reshape(shape), dtype, self.options.precise_fp)).reshape(-1)
            # no copy of an argument no instruction can write: a read-only array (the operand rules reject any
            # write, `check_writable`) or one a hook vouches for; its values are the caller's array itself
            if (array is src or np.shares_memory(array, src)) and not (
                    read_only or any(hook(launch, name) for hook in UNWRITABLE_ARGUMENTS)):
                array = arrays.HBM_ARRAYS.copy(array)
        storage = Storage(MemoryRegion.shared_hbm, dtype, shape, array, Placement(0, address), name, None)
        storage.is_kernel_arg = True
        storage.read_only = read_only
        return launch.tensor_type.root(storage)

    def _write_back(self, arg_storages) -> None:
        if self.options.shape_only:
            return
        for storage, caller in arg_storages:
            if storage.written and isinstance(caller, np.ndarray) and caller.flags.writeable:
                caller[...] = to_public(storage.array, storage.dtype).reshape(caller.shape)

    def _outputs(self, result, handed: set):
        if isinstance(result, TensorView):
            return self._to_numpy(result, handed)
        if isinstance(result, tuple):
            return tuple(self._outputs(r, handed) for r in result)
        if isinstance(result, list):
            return [self._outputs(r, handed) for r in result]
        if isinstance(result, dict):
            return {k: self._outputs(v, handed) for k, v in result.items()}
        return result

    def _to_numpy(self, view: TensorView, handed: set):
        """A returned tensor as a NumPy array of its public dtype. The array of a whole tensor the kernel made is
        handed out as it is (`RETURN_STORAGE_ARRAYS`): nothing of the finished launch writes it again, and
        the HBM array pool (sim/arrays.py) never takes an array something else still refers to. Copied: an
        argument's array (the caller's, or the launch's copy of it), a tensor an earlier output already handed
        out (`return out, out` gives two arrays, as two copies did), and parts of tensors."""
        if self.options.shape_only:
            return ShapeSpec(view.shape, view.dtype)
        st = view.storage
        if view.is_root:
            data = st.array.reshape(view.shape)
        elif view.in_bounds() and not view.dynamic:
            data = view.np_view()
        else:
            raise KernelError("a kernel can only return whole tensors or in-bounds views of them")
        out = to_public(data, view.dtype)
        if not np.may_share_memory(out, st.array):
            return out                              # a conversion made a new array
        if RETURN_STORAGE_ARRAYS and view.is_root and not st.is_kernel_arg and st.id not in handed:
            handed.add(st.id)
            return out
        return np.array(out)


def _divergence(error) -> "_findings.Finding":
    """The finding of a launch whose programs diverged around an exchange (sim/cooperative.py): the error's
    message, the line where each program involved waits or ended, its programs. The launch still fails
    with the error (its programs cannot go on), after the finding is handed on."""
    lines = error.program_lines
    return _findings.Finding(
        _findings.FindingKind.DIVERGENCE, error.code, error.rule, tuple(loc for _, loc in lines),
        programs=tuple(ids for ids, _ in lines),
        why="on hardware a core that waits at a barrier, sendrecv or collective its peers never make waits "
            "forever (the device hangs); the simulator sees every core's path and stops",
        fix=error.hint or "")


def _grid_points(grid):
    if not grid:
        yield ()
        return
    yield from itertools.product(*(range(g) for g in grid))
