"""Bridges layer (JAX): the `nki_call` primitive — kernels inside `jax.jit`, on the simulator or for Neuron.

Imports jax (this module is only imported once a JAX array reaches a kernel) and the dispatch layer.

`nki_call_p` takes the call's arrays as operands and, as a static parameter, the kernel with the call's
non-array arguments. Its rules:
  * abstract evaluation: a shape-only trace of the kernel (cached per specialisation) gives the outputs;
  * eager evaluation and the lowering for every platform: a host callback (`jax.pure_callback`) that runs
    the simulator; so kernels work in `jax.jit` on the CPU (or any backend) and return JAX arrays;
  * the Neuron platform (registered when a `neuron` PJRT plugin is present): a `stablehlo.custom_call`
    `@AwsNeuronCustomNativeKernel` whose `backend_config` is the base64 JSON of the traced program, with
    operand-to-output aliases for the inputs the kernel writes and `mhlo.frontend_attributes` naming the
    kernel. `neuron_lowering_text(fn, *args)` produces that lowering on any machine, for inspection.
    `NKI_DONT_CACHE_TRACE_FOR_JAX_LOWERING=TRUE` re-traces the kernel at lowering time instead of reusing
    the cached trace.

Outputs: the kernel's returned tensors; the primitive also returns the inputs the kernel writes (JAX arrays
are immutable, so this is how a write becomes visible), and a kernel that returns nothing returns those.

Platform guard: NKI refuses JAX on anything but Neuron (`nki only support on neuron, current target: <p>`).
opennki runs the simulator instead, unless `OPENNKI_STRICT_PLATFORM=1` asks for the vendor's behaviour;
`NKI_SIMULATOR=1` lifts the guard again, as it routes every kernel to the simulator.
"""

from __future__ import annotations

import contextvars

import jax
import numpy as np
from jax import core as jax_core
from jax._src.interpreters import mlir as mlir_internal
from jax._src import xla_bridge
from jax.extend.core import Primitive
from jax.interpreters import mlir

from opennki.environment import VARIABLES, setting
from opennki.errors import KernelError
from opennki.kernels import arguments
from opennki.kernels.program import ResultKind
from opennki.machine.dtypes import dtype_of

CUSTOM_CALL_TARGET = "AwsNeuronCustomNativeKernel"
NEURON = "neuron"
SIMULATOR_ENV = VARIABLES["simulator"]

SHARES_MEMORY = False           # JAX arrays are immutable

_lowering_platform: contextvars.ContextVar[str | None] = contextvars.ContextVar("opennki_jax_lowering",
                                                                               default=None)


def is_jax_value(value) -> bool:
    return isinstance(value, (jax.Array, jax_core.Tracer))


def to_numpy(x) -> np.ndarray:
    """A writable NumPy copy of a concrete JAX array."""
    return np.array(x)


def from_numpy(a: np.ndarray):
    return jax.device_put(a)


def is_tracer(value) -> bool:
    return isinstance(value, jax_core.Tracer)


def check_platform(platform: str) -> None:
    """The vendor's guard, in strict mode only (module docstring)."""
    if platform != NEURON and setting("strict_platform") and not setting("simulator"):
        raise KernelError(f"nki only support on neuron, current target: {platform}",
                          hint=f"set {SIMULATOR_ENV}=1 to run the kernel on the CPU simulator")


class StaticCall:
    """The non-array part of a call: kernel, argument template, input infos (a hashable primitive param)."""

    def __init__(self, kernel, template: dict, infos: tuple):
        self.kernel = kernel
        self.template = template
        self.infos = infos
        try:
            self.key = (id(kernel), kernel.spec.grid_key, arguments.spec_key(template, infos))
        except arguments.NotCacheable:
            self.key = (id(kernel), id(self))

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, StaticCall) and other.key == self.key

    def program(self, cache: bool = True):
        return self.kernel.specialize_split(self.infos, self.template, cache=cache)

    def __repr__(self):
        return f"{self.kernel.spec.name}{list(self.kernel.spec.grid_key or ())}"


def _out_avals(avals, call: StaticCall):
    program = call.program()
    outs = [jax_core.ShapedArray(o.shape, dtype_of(o.dtype).dtype) for o in program.outputs]
    return outs + [avals[i] for i in program.mutated]


def _host(call: StaticCall):
    """The host function that runs the kernel on NumPy arrays: kernel outputs, then written inputs."""
    def run(*arrays):
        program = call.program()
        arrays = [to_numpy(a) for a in arrays]           # writable copies the simulator may update
        args, kwargs = arguments.call_args(call.kernel.spec.func, call.template, arrays)
        result = call.kernel.launch(args, kwargs)
        outs = [] if result is None else list(result) if isinstance(result, (tuple, list)) else [result]
        return [np.asarray(o) for o in outs] + [arrays[i] for i in program.mutated]
    return run


def _impl(*arrays, call, lowering):
    check_platform(jax.default_backend())
    return [from_numpy(o) for o in _host(call)(*arrays)]


def _abstract_eval(*avals, call, lowering):
    return _out_avals(avals, call)


nki_call_p = Primitive("nki_call")
nki_call_p.multiple_results = True
nki_call_p.def_impl(_impl)
nki_call_p.def_abstract_eval(_abstract_eval)


def _callback_lowering(*operands, call, lowering):
    shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in _out_avals([o.aval for o in operands], call)]
    return jax.pure_callback(_host(call), shapes, *operands)


_simulator_rule = mlir.lower_fun(_callback_lowering, multiple_results=True)


def _ir_type(ctx, aval):
    try:
        return mlir.aval_to_ir_type(ctx.module_context, aval)
    except TypeError:                      # JAX before the module context was passed
        return mlir.aval_to_ir_type(aval)


def _neuron_rule(ctx, *operands, call, lowering):
    program = call.program(cache=not setting("jax_no_trace_cache"))
    result_types = [_ir_type(ctx, a) for a in ctx.avals_out]
    n_out = len(program.outputs)
    aliases = {input_index: n_out + k for k, input_index in enumerate(program.mutated)}
    op = mlir_internal.custom_call(CUSTOM_CALL_TARGET, result_types=result_types, operands=list(operands),
                                   backend_config=program.backend_config(), api_version=2,
                                   operand_output_aliases=aliases or None)
    attrs = {"nki_kernel": program.func_name, "nki_grid": ",".join(map(str, program.grid)),
             "nki_platform_target": program.target}
    op.attributes["mhlo.frontend_attributes"] = mlir_internal.ir.DictAttr.get(
        {k: mlir_internal.ir.StringAttr.get(v) for k, v in attrs.items()})
    return op.results


def _default_rule(ctx, *operands, call, lowering):
    if lowering == NEURON:
        return _neuron_rule(ctx, *operands, call=call, lowering=lowering)
    for platform in ctx.module_context.platforms:
        check_platform(platform)
    return _simulator_rule(ctx, *operands, call=call, lowering=lowering)


mlir.register_lowering(nki_call_p, _default_rule)
if xla_bridge.is_known_platform(NEURON):
    mlir.register_lowering(nki_call_p, _neuron_rule, platform=NEURON)


def call(kernel, args, kwargs):
    """Call `kernel` (a JAXKernel) with JAX arrays or tracers through `nki_call_p` (module docstring)."""
    leaves, infos, template = kernel.split(args, kwargs)
    static = StaticCall(kernel, template, infos)
    program = static.program()
    outs = nki_call_p.bind(*leaves, call=static, lowering=_lowering_platform.get())
    n_out = len(program.outputs)
    results, written = list(outs[:n_out]), list(outs[n_out:])
    if program.result is ResultKind.NONE:
        if not written:
            return None
        return written[0] if len(written) == 1 else tuple(written)
    if program.result is ResultKind.SINGLE:
        return results[0]
    return tuple(results) if program.result is ResultKind.TUPLE else results


def neuron_lowering_text(fn, *args, **kwargs) -> str:
    """The StableHLO text of `jax.jit(fn)` lowered as for the Neuron platform (kernels become
    `stablehlo.custom_call @AwsNeuronCustomNativeKernel`); works without a Neuron device."""
    def traced(*a, **k):          # a fresh function: JAX's trace and lowering caches cannot reuse a CPU lowering
        return fn(*a, **k)
    token = _lowering_platform.set(NEURON)
    try:
        return jax.jit(traced).lower(*args, **kwargs).as_text()
    finally:
        _lowering_platform.reset(token)


__all__ = ["nki_call_p", "call", "neuron_lowering_text", "check_platform", "CUSTOM_CALL_TARGET"]
