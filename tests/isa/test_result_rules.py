"""Every instruction's result rule (`Instruction.result`, what the legacy functional `nisa` allocates) agrees
with the instruction's own check and run: for each opcode with a rule, on valid random operands, a
destination of exactly the rule's shape and dtype passes the check and the run writes every element of it
(never-written memory raises here), and a destination one element wider in its last dim is rejected by
the check. The cases cover every opcode with a rule (`has_result_rule`), so a new rule needs a case."""

import inspect
import re

import ml_dtypes
import numpy as np
import pytest

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki._src import core
from opennki.errors import ShapeError
from opennki.events import Engine
from opennki.instructions.base import REGISTRY
from tests.isa.helpers import rand
from tests.raises import raises_at
from tests.running import run

F32, BF16 = np.float32, ml_dtypes.bfloat16
P = 128


def _column(value: float):
    """A [P, 1] fp32 SBUF column holding `value` (a per-partition operand)."""
    return core.fill(core.alloc((P, 1), F32), value, "test")


def _out_column():
    return core.alloc((P, 1), F32)


def _dynamic_src(t, offsets):
    ix, iy = nl.mgrid[0:P, 0:1]
    return t[ix, offsets[0, 1] + iy]


def _lower_triangle(t):
    ix, iy = nl.mgrid[0:P, 0:t.shape[1]]
    return ix >= iy


# opcode -> cases: (input arrays (shape, dtype, low, high), {field: tile index, or function of the loaded tiles},
# plain fields, the destination's memory)
CASES = {
    "tensor_tensor": [([((P, 64), F32), ((P, 64), BF16)], {"data1": 0, "data2": 1}, {"op": nl.add}, core.SBUF)],
    "tensor_scalar": [([((P, 64), BF16)], {"data": 0}, {"op0": nl.multiply, "operand0": 2.0}, core.SBUF)],
    "scalar_tensor_tensor": [([((P, 64), BF16), ((P, 64), F32)], {"data": 0, "operand1": 1},
                              {"op0": nl.multiply, "operand0": 2.0, "op1": nl.add}, core.SBUF)],
    "reciprocal": [([((P, 64), F32, 0.5, 2.0)], {"data": 0}, {}, core.SBUF)],
    "tensor_copy": [([((P, 64), BF16)], {"src": 0}, {}, core.SBUF)],
    "tensor_copy_dynamic_src": [([((P, 40), F32), ((1, 4), np.int32, 0, 39)],
                                 {"src": lambda t: _dynamic_src(t[0], t[1])}, {}, core.SBUF)],
    "dropout": [([((P, 64), F32)], {"data": 0}, {"prob": 0.5}, core.SBUF)],
    "tensor_reduce": [([((P, 16, 8), F32)], {"data": 0}, {"op": nl.add, "axis": (2,)}, core.SBUF),
                      ([((P, 16, 8), F32)], {"data": 0}, {"op": nl.maximum, "axis": (1, 2), "keepdims": True},
                       core.SBUF)],
    "tensor_partition_reduce": [([((P, 64), F32)], {"data": 0}, {"op": nl.add}, core.SBUF)],
    "tensor_tensor_scan": [([((P, 64), F32, 0.5, 1.0), ((P, 64), F32)], {"data0": 0, "data1": 1},
                            {"initial": 0.0, "op0": nl.multiply, "op1": nl.add}, core.SBUF)],
    "tensor_scalar_reduce": [([((P, 64), F32)], {"data": 0, "reduce_res": lambda t: _out_column()},
                              {"op0": nl.multiply, "operand0": 2.0, "reduce_op": nl.add}, core.SBUF)],
    "range_select": [([((P, 64), F32)],
                      {"on_true_tile": 0, "bound0": lambda t: _column(8.0), "bound1": lambda t: _column(40.0)},
                      {"comp_op0": nl.greater_equal, "comp_op1": nl.less, "reduce_op": np.amax,
                       "on_false_value": nisa.fp32.min}, core.SBUF)],
    "bn_stats": [([((P, 64), F32)], {"data": 0}, {}, core.SBUF)],
    "bn_aggr": [([((P, 12), F32, 1.0, 2.0)], {"data": 0}, {}, core.SBUF)],
    "max8": [([((P, 64), F32)], {"src": 0}, {}, core.SBUF)],
    "nc_find_index8": [([((P, 64), F32), ((P, 8), F32)], {"data": 0, "vals": 1}, {}, core.SBUF)],
    "nc_match_replace8": [([((P, 64), F32), ((P, 8), F32)], {"data": 0, "vals": 1}, {"imm": 0.0}, core.SBUF)],
    "activation": [([((P, 64), BF16)], {"data": 0}, {"op": nl.exp}, core.SBUF)],
    "activation_reduce": [([((P, 64), F32)], {"data": 0, "reduce_res": lambda t: _out_column()},
                           {"op": nl.exp, "reduce_op": nl.add}, core.SBUF)],
    "nc_matmul": [([((P, 64), BF16), ((P, 256), BF16)], {"stationary": 0, "moving": 1}, {"accumulate": False},
                   core.PSUM)],
    "nc_transpose": [([((P, 64), F32)], {"data": 0}, {"engine": Engine.TENSOR}, core.PSUM),
                     ([((32, 16), F32)], {"data": 0}, {"engine": Engine.VECTOR}, core.SBUF)],
    "affine_select": [([((P, 64), F32)], {"on_true_tile": 0, "pred": lambda t: _lower_triangle(t[0])},
                       {"on_false_value": -1.0}, core.SBUF)],
    "local_gather": [([((P, 32), F32), ((P, 4), np.uint16, 0, 31)], {"src_buffer": 0, "index": 1}, {}, core.SBUF)],
    "sequence_bounds": [([((1, 64), np.int32, 0, 3)], {"segment_ids": 0}, {}, core.SBUF)],
    "dma_transpose": [([((32, 64), BF16)], {"src": 0}, {}, core.SBUF)],
}


def _arrays(rng, specs):
    out = []
    for spec in specs:
        shape, dtype = spec[0], spec[1]
        low, high = (spec[2], spec[3]) if len(spec) == 4 else (-2.0, 2.0)
        if np.issubdtype(np.dtype(dtype), np.integer):
            out.append(rng.integers(low, high + 1, size=shape).astype(dtype))
        else:
            out.append(rand(rng, *shape, low=low, high=high).astype(dtype))
    return out


def _instruction_kernel(cls, fields, params, buffer, wider):
    """A legacy kernel: load the inputs, issue `cls` into a destination allocated by its result rule (one
    element wider in its last dim if `wider`) and store that destination."""
    parameters = inspect.signature(cls.result).parameters.values()
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    rule_args = {p.name for p in parameters}

    def kernel(*arrays):
        tiles = [nl.load(a) for a in arrays]
        inputs = {name: (tiles[how] if isinstance(how, int) else how(tiles)) for name, how in fields.items()}
        shape, dtype = cls.result(**{k: v for k, v in {**inputs, **params}.items() if takes_all or k in rule_args})
        if wider:
            shape = shape[:-1] + (shape[-1] + 1,)
        dst = core.alloc(shape, dtype, buffer)
        core.issue(cls(dst=dst, **inputs, **params), cls.api_name(), operator_names=True)
        out = nl.ndarray(shape, dtype=dtype, buffer=nl.shared_hbm)
        nl.store(out, nisa.tensor_copy(dst) if buffer is core.PSUM else dst)
        return out
    return kernel


def _cases():
    for opcode, cases in CASES.items():
        for i, case in enumerate(cases):
            yield pytest.param(opcode, *case, id=f"{opcode}-{i}")


def test_every_opcode_with_a_result_rule_has_a_case():
    assert set(CASES) == {op for op, cls in REGISTRY.items() if cls.has_result_rule()}
    assert len(CASES) >= 25


@pytest.mark.parametrize("opcode,inputs,fields,params,buffer", list(_cases()))
def test_the_check_and_run_take_exactly_the_rule_s_destination(rng, opcode, inputs, fields, params, buffer):
    cls = REGISTRY[opcode]
    arrays = _arrays(rng, inputs)
    kernel = _instruction_kernel(cls, fields, params, buffer, wider=False)
    out = run(kernel, *arrays, options={"uninitialized": "raise"})    # a never-written element raises
    assert out.size > 0 and not np.isnan(np.asarray(out, np.float64)).any()
    with raises_at(ShapeError, match=re.escape(cls.api_name() + ":"), line="core.issue(cls(dst=dst"):
        run(_instruction_kernel(cls, fields, params, buffer, wider=True), *arrays,
            options={"uninitialized": "raise"})
