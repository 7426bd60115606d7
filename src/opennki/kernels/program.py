"""Dispatch layer: the traced program of one specialisation of a kernel, and its JSON / backend_config form.

Imports the simulator, the listeners' Recorder and events. A kernel is traced by running it shape-only (no
data, every instruction checked and reported) with a Recorder attached. The result says what framework
paths need without running the kernel for real: the output shapes and dtypes (torch fake tensors, JAX
abstract evaluation), which inputs the kernel writes (operand-to-output aliases), and the instruction
stream. `to_json()` is that record as plain JSON values; `backend_config()` is the same JSON, base64-encoded,
which is what NKI's framework paths carry in the `backend_config` of their custom call (spec/entrypoints.md
§9.2). There is no compiler and no NEFF behind it: the "binary" is this record.
"""

from __future__ import annotations

import base64
import enum
import json
from dataclasses import dataclass

import numpy as np

from opennki.events import AccessKind, InstructionExecuted, MemoryKind, TensorAllocated
from opennki.kernels.arguments import LeafInfo
from opennki.sim.simulator import ShapeSpec

KERNEL_VERSION = 1


class ResultKind(enum.Enum):
    """How a kernel returns: nothing (outputs written into arguments), one tensor, or a tuple/list."""

    NONE = "none"
    SINGLE = "single"
    TUPLE = "tuple"
    LIST = "list"


@dataclass(frozen=True)
class TracedProgram:
    """One specialisation of a kernel, traced shape-only. See the module docstring.

    Fields:
        func_name: the kernel function's name.
        grid: the launch grid sizes.
        target: the NeuronCore target it was traced for.
        inputs / outputs: name, shape and dtype of every tensor input (call order) and returned tensor.
        result: how the kernel returns its outputs.
        mutated: indices into `inputs` of the tensors the kernel writes.
        instructions: the instruction stream as JSON-ready dicts.
        opts: extra compiler options the caller gave (recorded, not interpreted).
    """

    func_name: str
    grid: tuple[int, ...]
    target: str
    inputs: tuple[LeafInfo, ...]
    outputs: tuple[LeafInfo, ...]
    result: ResultKind
    mutated: tuple[int, ...]
    instructions: tuple[dict, ...]
    opts: str | None = None

    @property
    def input_names(self) -> list[str]:
        return [i.name for i in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.outputs]

    def to_json(self) -> dict:
        """The program as JSON values (keys follow NKI's backend_config where NKI has one)."""
        return {
            "kernel_version": KERNEL_VERSION,
            "func_name": self.func_name,
            "grid": list(self.grid),
            "platform_target": self.target,
            "has_collectives": False,
            "opts": self.opts,
            "kernel_return": self.result is not ResultKind.NONE,
            "result_is_sequence": self.result in (ResultKind.TUPLE, ResultKind.LIST),
            "input_names": self.input_names,
            "output_names": self.output_names,
            "inputs": [_info_json(i) for i in self.inputs],
            "outputs": [_info_json(o) for o in self.outputs],
            "mutated_inputs": [self.inputs[i].name for i in self.mutated],
            "instructions": list(self.instructions),
            "simulated_by": "opennki (no Neuron compiler ran; there is no NEFF)",
        }

    def dumps(self, **json_kwargs) -> str:
        return json.dumps(self.to_json(), **json_kwargs)

    def backend_config(self) -> str:
        """The base64-encoded JSON record, as carried by a framework custom call."""
        return base64.b64encode(self.dumps(separators=(",", ":")).encode()).decode("ascii")


def _info_json(info: LeafInfo) -> dict:
    return {"name": info.name, "shape": list(info.shape), "dtype": info.dtype}


def _plain(value):
    """JSON-safe form of an instruction parameter (enums by name, arrays as lists, anything else as text)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return str(value)


def instruction_json(event: InstructionExecuted) -> dict:
    return {
        "seq": event.seq,
        "program": list(event.program),
        "core": event.core,
        "opcode": event.opcode,
        "engine": event.engine.name,
        "operands": [{"role": o.role, "access": o.access.value, "memory": o.kind.value, "tensor": o.tensor_name,
                      "shape": list(o.shape), "dtype": o.dtype} for o in event.operands],
        "params": _plain(event.params),
        "location": str(event.location) if event.location is not None else None,
        "name": event.name,
    }


def result_kind(result) -> ResultKind:
    if result is None:
        return ResultKind.NONE
    if isinstance(result, tuple):
        return ResultKind.TUPLE
    if isinstance(result, list):
        return ResultKind.LIST
    return ResultKind.SINGLE


def output_infos(result, func_name: str) -> tuple[LeafInfo, ...]:
    specs = [] if result is None else list(result) if isinstance(result, (tuple, list)) else [result]
    infos = []
    for i, spec in enumerate(specs):
        if not isinstance(spec, ShapeSpec):
            from opennki.errors import KernelError
            raise KernelError(f"kernel {func_name} returned {type(spec).__name__}; kernels return tensors "
                              "(or a tuple of tensors)", got=spec)
        infos.append(LeafInfo(f"{func_name}_output{i}", spec.shape, spec.dtype.name))
    return tuple(infos)


def mutated_inputs(events, inputs: tuple[LeafInfo, ...]) -> tuple[int, ...]:
    """Indices of the inputs some instruction wrote (HBM storages the kernel did not allocate itself)."""
    allocated = {e.storage_id for e in events if isinstance(e, TensorAllocated)}
    by_name = {info.name: i for i, info in enumerate(inputs)}
    written = set()
    for e in events:
        if isinstance(e, InstructionExecuted):
            for o in e.operands:
                if (o.access is not AccessKind.READ and o.kind is MemoryKind.HBM
                        and o.region.storage_id not in allocated and o.tensor_name in by_name):
                    written.add(by_name[o.tensor_name])
    return tuple(sorted(written))
