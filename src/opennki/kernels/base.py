"""Dispatch layer: what every kernel class shares — launching on the simulator, tracing, specialisation.

Imports sim, language (the tensor class, SPMD grid resolution), listeners (Recorder) and errors. Front doors
and framework bridges sit above it. Pieces:
  * `run_kernel(fn, args, kwargs, grid=, ...)`: one launch on a fresh Simulator, NumPy outputs, opennki's
    internal traceback frames hidden (the last frame of an error is the user's kernel line).
  * `LaunchSpec`: a kernel function with its launch configuration (grid key, generation, target, options).
  * `TraceKernel`: the base of every per-mode kernel class. `launch()` runs it with listeners and per-program
    callbacks (the interpreter-client API), `specialize()` traces it shape-only into a `TracedProgram`
    (cached per shapes, dtypes and scalar values), `dump_config()` gives the backend_config NKI's framework
    paths carry. Called inside a running kernel, any kernel is inlined (a helper sub-kernel, NKI's `trace`
    mode); otherwise `TraceKernel` itself runs on the simulator.
  * call observers (`observe_calls`): every top-level kernel call a program makes is reported to them, which
    is how `opennki benchmark SCRIPT` sees the kernel calls of an unmodified script.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import warnings
from dataclasses import dataclass, field, replace

from opennki.environment import VARIABLES, setting
from opennki.errors import KernelError, OpenNKIError, SourceLocation, public_error
from opennki.events import InstructionExecuted
from opennki.hw import get_target
from opennki.instructions.base import require
from opennki.kernels import arguments
from opennki.kernels.frameworks import to_shape_spec
from opennki.kernels.program import (TracedProgram, instruction_json, mutated_inputs, output_infos,
                                     result_kind)
from opennki._src.spmd import nc, resolve_grid
from opennki._src.tensor import NkiTensor
from opennki.listeners import Recorder
from opennki.machine.memory import MemoryRegion
from opennki.machine.tensor import TensorView
from opennki.releases import Change, Generation, ReleaseError, level_of, release, warn_custom_frontend
from opennki.sim.frames import return_lines
from opennki.sim.options import SimOptions
from opennki.sim.program import active
from opennki.sim.simulator import ShapeSpec, Simulator, is_array_arg

LNC_ENV = VARIABLES["lnc"]


def run_kernel(fn, args=(), kwargs=None, *, grid=(), target=None, options: SimOptions | None = None,
               listeners=(), **launch_kwargs):
    """Run `fn` on a fresh Simulator and return its outputs as NumPy arrays.

    `launch_kwargs` go to `Simulator.launch` (`cores_of`, `before_program`, `after_program`, `kernel_name`).
    """
    sim = Simulator(target, options=options, listeners=listeners)
    try:
        return sim.launch(fn, args, kwargs, grid=grid, tensor_type=NkiTensor, **launch_kwargs)
    except OpenNKIError as e:
        raise public_error(e) from None


@dataclass(frozen=True)
class LaunchSpec:
    """A kernel function and how to launch it.

    Fields:
        func: the kernel function (undecorated).
        generation: legacy grids (`kernel[g0, g1]`, `nl.nc`) or new LNC launches (`kernel[lnc]`).
        grid_key: the subscript the kernel was launched with (None: no subscript).
        target: NeuronCore target name; None reads `$NEURON_PLATFORM_TARGET_OVERRIDE` at call time.
        options: SimOptions for the simulator (None: defaults from the environment at call time).
        listeners: listeners attached to every launch.
        config: the decorator's other keyword arguments (mode-specific: `save_neff_name`, `warmup`, ...).
    """

    func: object
    generation: Generation = Generation.LEGACY
    grid_key: object = None
    target: str | None = None
    options: SimOptions | None = None
    listeners: tuple = ()
    config: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return getattr(self.func, "__name__", "kernel")

    def with_grid(self, key) -> "LaunchSpec":
        """The spec launched as `kernel[key]`; `kernel[None]` keeps its None as a grid dimension, which the
        launch rejects (grid_key None means no subscript)."""
        return replace(self, grid_key=(None,) if key is None else key)


@dataclass(frozen=True)
class Grid:
    """A resolved launch grid: sizes and the program -> physical core map (None: one core)."""

    sizes: tuple[int, ...] = ()
    cores_of: object = None


def _compiler_lnc() -> int | None:
    """The graph compiler's LNC degree: `--lnc=N` / `--lnc N` in NEURON_CC_FLAGS, else
    NEURON_LOGICAL_NC_CONFIG, else unknown (None)."""
    flags = setting("compiler_flags")
    for i, flag in enumerate(flags):
        value = flag[len("--lnc="):] if flag.startswith("--lnc=") else (
            flags[i + 1] if flag == "--lnc" and i + 1 < len(flags) else None)
        if value is not None and value.strip().isdigit():
            return int(value)
    return setting("lnc")


def new_generation_lnc(spec: LaunchSpec, options=None) -> int:
    """The LNC degree of a new-generation launch (spec/entrypoints.md §2, LNC launch; NKI 0.7 LNC overview).

    `kernel[lnc]` gives it; without brackets NKI 0.7 takes NEURON_LOGICAL_NC_CONFIG (earlier releases
    launched LNC=1 and refused a configuration of 2). Either way it must equal the graph compiler's degree
    (NEURON_CC_FLAGS `--lnc`, else NEURON_LOGICAL_NC_CONFIG): NCC_EVRF066."""
    key = spec.grid_key
    if key is not None and (isinstance(key, tuple) or not isinstance(key, int) or isinstance(key, bool)):
        raise KernelError("a new-generation kernel is launched as kernel[lnc] with one integer (1 or 2)", got=key)
    compiler = _compiler_lnc()
    configured = setting("lnc")
    if key is None and configured is not None and level_of(options, Generation.NEW) >= release("0.7"):
        lnc = configured
    else:
        lnc = 1 if key is None else key
    if compiler is not None and compiler != lnc:
        raise KernelError(f"NKI kernel '{spec.name}' is configured with LNC={lnc}, but neuronx-cc is using "
                          f"LNC={compiler}", expected=compiler, got=lnc, code="NCC_EVRF066",
                          hint=f"set {LNC_ENV} to the degree you want and launch the kernel without brackets "
                               "(or with that degree)")
    return lnc


def resolve(spec: LaunchSpec, hw, options=None) -> Grid:
    """The launch grid of `spec` on target `hw` (legacy SPMD grid or new-generation LNC degree)."""
    key = spec.grid_key
    if spec.generation is Generation.NEW:
        lnc = new_generation_lnc(spec, options)
        if lnc == 1:
            return Grid()
        if lnc != 2:
            raise KernelError(f"LNC={lnc} is not supported on current architecture {hw.name}; use 1 or 2",
                              got=lnc)
        require(hw, "lnc2", "LNC=2 (two physical cores per logical core)")
        sizes, cores_of = resolve_grid(nc(2), hw)
        return Grid(sizes, cores_of)
    if key is None:
        return Grid()
    sizes, cores_of = resolve_grid(key, hw)
    return Grid(sizes, cores_of)


HBM_OUTPUTS = Change("a kernel output in nl.hbm", "nl.shared_hbm for outputs (nl.ndarray(..., buffer=nl.shared_hbm))",
                     removed_in="0.3", code="err_unsupported_memory",
                     source="Migrating from NKI 0.2.0 to NKI 0.3.0: Output tensors must use nl.shared_hbm")


def return_location(func) -> SourceLocation | None:
    """The kernel's `return` line (the last one, if it has several), which output errors name."""
    code = getattr(inspect.unwrap(func), "__code__", None)
    lines = return_lines(code) if code is not None else ()
    return SourceLocation(code.co_filename, lines[-1], code.co_name) if lines else None


def check_outputs(result, generation: Generation, func, options=None) -> None:
    """Kernel outputs live in HBM (legacy) / in `nl.shared_hbm` (new generation); SBUF/PSUM never. A new-
    generation output in `nl.hbm` (private HBM) was accepted before NKI 0.3 (`HBM_OUTPUTS`). A legacy kernel
    returning an on-chip tensor gets its values back with a warning, as from NKI's simulator (an error in
    hardware-strict mode). The error names the `return` line and where the tensor was created."""
    func_name = getattr(func, "__name__", "kernel")
    items = result if isinstance(result, (tuple, list)) else (result,)
    for i, out in enumerate(items):
        if not isinstance(out, TensorView):
            continue
        region = out.storage.region
        ok = region is MemoryRegion.shared_hbm if generation is Generation.NEW else not out.is_on_chip
        if not ok and generation is Generation.NEW and region is MemoryRegion.private_hbm and options is not None:
            HBM_OUTPUTS.apply(options, location=out.storage.location)
            continue
        if not ok and generation is Generation.LEGACY and not getattr(options, "hardware_strict", False):
            # NKI's legacy simulator hands back an on-chip tensor's values (the SDK's own range_select test
            # returns its SBUF result tile); hardware compilation rejects it, as hardware-strict mode does
            location = return_location(func) or out.storage.location
            warnings.warn_explicit(f"kernel {func_name} returns {out.name!r} (output {i}) from nl.{region.name}: "
                                   "NKI's simulator returns its values, but a kernel compiled for hardware must "
                                   "return HBM tensors (nl.shared_hbm)", UserWarning,
                                   location.filename if location else "<kernel>", location.lineno if location else 0)
            continue
        if not ok:
            wanted = "nl.shared_hbm" if generation is Generation.NEW else "HBM (nl.shared_hbm)"
            where = out.storage.location
            created = f" (created at {where}: {where.source})" if where is not None else ""
            raise KernelError(f"kernel {func_name} returns {out.name!r}{created} (output {i}), which is in "
                              f"nl.{region.name}; kernel outputs must be allocated in {wanted}",
                              expected=wanted, got=f"nl.{region.name}",
                              location=return_location(func) or out.storage.location,
                              code="err_unsupported_memory",
                              hint="allocate outputs with nl.ndarray(shape, dtype, buffer=nl.shared_hbm) and copy "
                                   "the result into them")


KEYWORD_ONLY = Change("the '*' separator in a kernel signature (keyword-only parameters)", "ordinary parameters with "
                      "defaults at the end", removed_in="0.3", restored_in="0.7",
                      source="Migrating from NKI 0.2.0 to NKI 0.3.0: Remove keyword-only argument separator")
LIST_ARGUMENTS = Change("a list as a kernel argument", "a tuple", removed_in="0.3",
                        source="Migrating from NKI 0.2.0 to NKI 0.3.0: Replace list kernel arguments with tuples")


def check_signature(func, options=None) -> None:
    """New-generation signature rules (spec/entrypoints.md §2.4): no keyword-only parameters from NKI 0.3 to
    0.6 (NKI 0.2's compiler allowed them, and 0.7 traces kernels as plain Python: `KEYWORD_ONLY`; the compiler-
    rule lint applies the same levels)."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return
    keyword_only = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    if keyword_only:
        try:
            KEYWORD_ONLY.apply(options)
        except ReleaseError as e:
            raise KernelError(f"nki.jit kernels cannot use the '*' separator in their signature (keyword-only "
                              f"parameters {keyword_only} of {func.__name__})", hint=e.hint,
                              code=e.code) from None


def check_arguments(func_name: str, named: dict, options=None) -> None:
    """New-generation argument rules: lists are not kernel arguments (tuples are; NKI 0.2 took lists:
    `LIST_ARGUMENTS`). `options` is a callable giving the SimOptions, asked only when a list is there (a call
    traced by torch.compile must not build them)."""
    for name, value in named.items():
        if isinstance(value, list):
            try:
                LIST_ARGUMENTS.apply(options() if options is not None else None)
            except ReleaseError:
                raise KernelError(f"lists are not accepted as kernel arguments (argument {name!r} of {func_name}); "
                                  "pass a tuple", got=type(value).__name__, hint=f"call with tuple({name})") from None


# ------------------------------------------------------------------------------------------- call observers

@dataclass(frozen=True)
class KernelCall:
    """A top-level kernel call a program made, as call observers see it.

    Fields:
        kernel: the TraceKernel that ran it (its `spec` has the function, grid key and target).
        args / kwargs: the arguments as given (NumPy arrays, framework tensors, shape placeholders).
        result: what the call returned.
    """

    kernel: "TraceKernel"
    args: tuple
    kwargs: dict
    result: object

    @property
    def name(self) -> str:
        return self.kernel.spec.name

    def shape_args(self):
        """(args, kwargs) with every tensor replaced by a ShapeSpec (enough for a shape-only cost estimate)."""

        def conv(v):
            if isinstance(v, (tuple, list)):
                return type(v)(conv(x) for x in v)
            return to_shape_spec(v) if _is_tensor_like(v) else v
        return tuple(conv(a) for a in self.args), {k: conv(v) for k, v in self.kwargs.items()}


_observers: list = []


@contextlib.contextmanager
def observe_calls(observer):
    """Within the block, call `observer(KernelCall)` after every top-level kernel call (not nested ones)."""
    _observers.append(observer)
    try:
        yield observer
    finally:
        _observers.remove(observer)


def in_running_kernel() -> bool:
    """Is a kernel running on this thread (so a kernel call is a nested helper call)? Never while
    torch.compile traces a model: Dynamo cannot follow the context variable, and no kernel runs then."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.compiler.is_compiling():
        return False
    return active() is not None


def _is_tensor_like(v) -> bool:
    return is_array_arg(v) or (hasattr(v, "shape") and hasattr(v, "dtype") and not isinstance(v, type))


# ------------------------------------------------------------------------------------------------ kernels

# decorator keywords that set a SimOptions field of the same name
CHECK_SWITCHES = {"hardware_strict": bool, "detect_races": bool, "uninitialized": str, "interleave_seed": int}


class TraceKernel:
    """Base of the per-mode kernel classes (module docstring). `mode="trace"` gives this class itself."""

    __test__ = False     # a kernel is never a pytest test, whatever its name (as GenericKernel)

    def __init__(self, spec: LaunchSpec):
        self.spec = spec
        self._traces: dict = {}
        self.trace_count = 0     # how many shape-only traces ran (the cache's misses)

    # -- configuration --------------------------------------------------------------------------------
    @property
    def func(self):
        return self.spec.func

    def target(self):
        """The HwConfig this call runs on (decided at call time: the environment may change)."""
        return get_target(self.spec.target if self.spec.target is not None else
                          (self.spec.options.target if self.spec.options else None))

    def options(self, **changes) -> SimOptions:
        """The simulator options of this kernel: the decorator's check switches (`hardware_strict=`,
        `detect_races=`, `uninitialized=`, `interleave_seed=`) and `api_version=` (if given) over the environment's defaults, then
        `changes`."""
        base = self.spec.options or SimOptions()
        for name, convert in CHECK_SWITCHES.items():
            value = self.spec.config.get(name)
            if value is not None:
                changes.setdefault(name, convert(value))
        version = self.spec.config.get("api_version")
        if version is not None:
            release(version, self.spec.generation)      # an unknown release is an error at the call
            changes.setdefault("api_version", str(version))
        return replace(base, **changes) if changes else base

    def body(self):
        """The kernel function wrapped with the output rules (signature preserved for argument binding)."""
        func, generation = self.spec.func, self.spec.generation

        @functools.wraps(func)
        def kernel_body(*args, **kwargs):
            prog = active()
            if generation is Generation.NEW and prog is not None:
                code = getattr(inspect.unwrap(func), "__code__", None)
                warn_custom_frontend(prog.options, code and SourceLocation(code.co_filename, code.co_firstlineno,
                                                                           code.co_name))
            result = func(*args, **kwargs)
            check_outputs(result, generation, func, prog.options if prog is not None else None)
            return result
        return kernel_body

    # -- running ----------------------------------------------------------------------------------------
    def __call__(self, *args, **kwargs):
        if in_running_kernel():
            return self.inline(args, kwargs)
        try:
            if self.spec.generation is Generation.NEW:
                check_arguments(self.spec.name, arguments.bind(self.spec.func, args, kwargs), self.options)
            result = self.call(args, kwargs)
        except OpenNKIError as e:
            raise public_error(e) from None
        for observer in list(_observers):
            observer(KernelCall(self, args, kwargs, result))
        return result

    def inline(self, args, kwargs):
        """A kernel called from inside a running kernel is a helper: its body runs in the caller's program."""
        if self.spec.grid_key not in (None, 1) and self.spec.generation is Generation.LEGACY:
            raise KernelError(f"kernel {self.spec.name} is launched with an SPMD grid from inside another kernel",
                              code="err_nested_kernel_with_spmd_grid",
                              hint="call the helper without a grid")
        return self.spec.func(*args, **kwargs)

    def call(self, args, kwargs):
        """Run the kernel (subclasses change what a call means)."""
        return self.launch(args, kwargs)

    def launch(self, args, kwargs=None, *, options: SimOptions | None = None, listeners=(),
               before_program=None, after_program=None):
        """Run once on the simulator with NumPy arrays; the interpreter-client entry point.

        Args:
            listeners: extra listeners for this launch (added to the kernel's own).
            before_program: `(program_ids) -> None`, called before each program of the grid.
            after_program: `(program_ids) -> bool | None`, called after each program; returning False
                stops the remaining programs, and the launch returns what the finished ones wrote.
        """
        options = options or self.options()
        hw = get_target(self.spec.target) if self.spec.target is not None else get_target(options.target)
        grid = resolve(self.spec, hw, options)
        return run_kernel(self.body(), args, kwargs, grid=grid.sizes, target=hw, options=options,
                          listeners=self.spec.listeners + tuple(listeners), cores_of=grid.cores_of,
                          before_program=before_program, after_program=after_program,
                          kernel_name=self.spec.name, generation=self.spec.generation)

    # -- tracing ----------------------------------------------------------------------------------------
    def split(self, args, kwargs):
        """(leaves, LeafInfos, template) of a call (see opennki.kernels.arguments)."""
        leaves, names, template = arguments.split(self.spec.func, args, kwargs, self.is_leaf)
        infos = tuple(self.leaf_info(leaf, name) for leaf, name in zip(leaves, names))
        return leaves, infos, template

    def is_leaf(self, value) -> bool:
        """Is `value` a tensor argument (as opposed to a compile-time constant)?"""
        return _is_tensor_like(value)

    def leaf_info(self, leaf, name) -> arguments.LeafInfo:
        spec = to_shape_spec(leaf)
        return arguments.LeafInfo(name, spec.shape, spec.dtype.name)

    def specialize(self, args, kwargs=None, *, cache: bool = True) -> TracedProgram:
        """The traced program for these arguments (shapes, dtypes and scalar values are the cache key)."""
        _, infos, template = self.split(args, kwargs or {})
        return self.specialize_split(infos, template, cache=cache)

    def specialize_split(self, infos, template, *, cache: bool = True) -> TracedProgram:
        hw = self.target()
        try:
            key = (hw.name, self.spec.grid_key, arguments.spec_key(template, infos))
        except arguments.NotCacheable:
            key, cache = None, False
        if cache and key in self._traces:
            return self._traces[key]
        program = self._trace(infos, template, hw)
        if key is not None:
            self._traces[key] = program
        return program

    def _trace(self, infos, template, hw) -> TracedProgram:
        self.trace_count += 1
        recorder = Recorder()
        args, kwargs = arguments.call_args(self.spec.func, template,
                                           [ShapeSpec(i.shape, i.dtype) for i in infos])
        options = self.options(shape_only=True)
        grid = resolve(self.spec, hw, options)
        result = run_kernel(self.body(), args, kwargs, grid=grid.sizes, target=hw, options=options,
                            listeners=(recorder,), cores_of=grid.cores_of, kernel_name=self.spec.name,
                            generation=self.spec.generation)
        events = recorder.events
        return TracedProgram(
            func_name=self.spec.name, grid=grid.sizes, target=hw.name, inputs=tuple(infos),
            outputs=output_infos(result, self.spec.name), result=result_kind(result),
            mutated=mutated_inputs(events, tuple(infos)),
            instructions=tuple(instruction_json(e) for e in events if isinstance(e, InstructionExecuted)),
            opts=self.spec.config.get("additional_compile_opt"))

    def dump_config(self, *args, **kwargs):
        """(backend_config, input_names, output_names) of this call, as NKI's FrameworkKernel gives them."""
        program = self.specialize(args, kwargs)
        return program.backend_config(), program.input_names, program.output_names

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.spec.name}>"
