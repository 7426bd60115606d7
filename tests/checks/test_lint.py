"""The compiler-rule lint (opennki.checks.lint): each tracing rule of spec/language.md §8.9 / §8.10 that a CPU run
does not notice is reported at its line with its rule code; the same kernel fixed reports nothing; the
Python-subset rules of the new generation follow the API release (NKI 0.7 traces plain Python)."""

import inspect

import pytest

import opennki.isa as nisa
import opennki.language as nl
import opennki.legacy.language as lnl
from opennki.checks.lint import lint
from opennki.listeners.findings import FindingKind
from opennki.releases import Generation
from opennki.sim import SimOptions


def _line(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _rules(fn, generation=Generation.LEGACY, options=None):
    found = lint(fn, generation, options)
    assert all(f.kind is FindingKind.LINT and f.why and f.fix for f in found)
    return [(f.rule, f.lines[0].lineno) for f in found]


# -- legacy generation ----------------------------------------------------------------------------------------

def branch_on_value(x):
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    t = lnl.load(x)
    if lnl.max(t, axis=[1]) > 0:
        t = lnl.exp(t)
    lnl.store(out, t)
    return out


def branch_fixed(x):
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    t = lnl.load(x)
    lnl.store(out, lnl.where(lnl.greater(t, 0.0), lnl.exp(t), t))
    return out


def test_control_flow_on_a_tensor_value():
    # the branch is NKI control flow, so the `t` it creates is also local to it
    assert _rules(branch_on_value) == [
        ("err_dynamic_control_flow_not_supported", _line(branch_on_value, "if lnl.max")),
        ("err_local_variable_used_out_of_scope", _line(branch_on_value, "lnl.store(out, t)"))]
    assert _rules(branch_fixed) == []


def branch_on_arange(x):
    i_p = lnl.arange(128)[:, None]
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    if i_p < 64:
        lnl.store(out[i_p, 0], lnl.load(x[i_p, 0]))
    return out


def mask_instead(x):
    i_p = lnl.arange(128)[:, None]
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    lnl.store(out[i_p, 0], lnl.load(x[i_p, 0], mask=(i_p < 64)), mask=(i_p < 64))
    return out


def test_control_flow_on_arange_indices():
    assert _rules(branch_on_arange) == [("err_control_flow_condition_depending_on_arange",
                                         _line(branch_on_arange, "if i_p < 64"))]
    assert _rules(mask_instead) == []


def boolean_operators(x):
    i_p, i_f = lnl.arange(128)[:, None], lnl.arange(64)[None, :]
    t = lnl.load(x[i_p, i_f], mask=(i_p < 100 and i_f < 32))
    u = not t
    return u


def boolean_operators_fixed(x):
    i_p, i_f = lnl.arange(128)[:, None], lnl.arange(64)[None, :]
    t = lnl.load(x[i_p, i_f], mask=((i_p < 100) & (i_f < 32)))
    return lnl.logical_not(t)


def test_and_or_not_on_tensors_and_indices():
    assert _rules(boolean_operators) == [
        ("err_ambiguous_tensor_truth_value", _line(boolean_operators, "i_p < 100 and")),
        ("err_ambiguous_tensor_truth_value", _line(boolean_operators, "u = not t"))]
    assert _rules(boolean_operators_fixed) == []


def local_out_of_scope(x):
    out = lnl.ndarray((128, 64), dtype=x.dtype, buffer=lnl.shared_hbm)
    for i in lnl.affine_range(4):
        if i < 2:
            tmp = lnl.load(x[0])
        else:
            tmp = lnl.load(x[1])
        lnl.store(out, tmp)
    for j in lnl.sequential_range(2):
        last = lnl.exp(lnl.load(x[j]))
    lnl.store(out, last)
    return out


def local_declared_before(x):
    out = lnl.ndarray((128, 64), dtype=x.dtype, buffer=lnl.shared_hbm)
    tmp = lnl.ndarray((128, 64), dtype=x.dtype)
    for i in lnl.affine_range(4):
        if i < 2:
            tmp[...] = lnl.load(x[0])
        else:
            tmp[...] = lnl.load(x[1])
        lnl.store(out, tmp)
    for j in lnl.static_range(2):                  # unrolled while tracing: not a scope
        last = lnl.exp(lnl.load(x[j]))
    lnl.store(out, last)
    return out


def test_tensors_used_outside_the_block_that_created_them():
    assert _rules(local_out_of_scope) == [
        ("err_local_variable_used_out_of_scope", _line(local_out_of_scope, "lnl.store(out, tmp)")),
        ("err_local_variable_used_out_of_scope", _line(local_out_of_scope, "lnl.store(out, last)"))]
    assert _rules(local_declared_before) == []


def shared_hbm_in_branch(x, flag):
    if flag:
        out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    for i in lnl.affine_range(2):
        scratch = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    return out, scratch


def shared_hbm_at_kernel_level(x, flag):
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    scratch = lnl.ndarray((2,) + x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    for i in lnl.affine_range(2):
        lnl.store(scratch[i], value=lnl.load(x))
    return out, scratch


def test_shared_hbm_tensors_belong_at_kernel_level():
    # the `if flag:` on a plain parameter is decided while tracing; the loop body is a scope
    assert _rules(shared_hbm_in_branch) == [
        ("err_shared_hbm_must_in_kernel_level", _line(shared_hbm_in_branch, "scratch = lnl.ndarray")),
        ("err_local_variable_used_out_of_scope", _line(shared_hbm_in_branch, "return out, scratch"))]
    assert _rules(shared_hbm_at_kernel_level) == []


# -- new generation -------------------------------------------------------------------------------------------

def new_branch(x):
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    if t != None:                                   # presence test: fine
        nisa.dma_copy(dst=x, src=t)
    if t > 0:                                       # a branch on data
        nisa.dma_copy(dst=x, src=t)
    return x


def test_new_generation_control_flow_on_data():
    assert _rules(new_branch, Generation.NEW) == [("err_dynamic_control_flow_not_supported", _line(new_branch, "if t > 0"))]


def mixing(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = lnl.load(x)
    nisa.dma_copy(dst=out, src=t)
    return out


def one_generation(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=out, src=t)
    return out


def test_legacy_apis_inside_a_new_generation_kernel():
    assert _rules(mixing, Generation.NEW) == [("mixed_generations", _line(mixing, "t = lnl.load"))]
    assert _rules(one_generation, Generation.NEW) == []


def _row_starts(rows):
    for start in range(0, rows, 8):
        yield start


def _row_starts_list(rows):
    return [start for start in range(0, rows, 8)]


def restricted(x, *, scale=1.0, dims=[1, 2]):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if scale is not None:
        nisa.dma_copy(dst=out, src=x)
    width = sum(d for d in dims)
    for start in _row_starts(x.shape[0]):
        nisa.dma_copy(dst=out[start:start + 8, 0:width], src=x[start:start + 8, 0:width])
    return out


def within_the_subset(x, scale=1.0, dims=(1, 2)):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    if scale != None:      # noqa: E711 - the comparison NKI 0.6 accepts
        nisa.dma_copy(dst=out, src=x)
    width = sum([d for d in dims])
    for start in _row_starts_list(x.shape[0]):
        nisa.dma_copy(dst=out[start:start + 8, 0:width], src=x[start:start + 8, 0:width])
    return out


@pytest.mark.parametrize("version,frontend,reported", [
    ("0.6", "tracer", True), ("0.3", "tracer", True), ("0.7", "tracer", False), ("0.7", "custom", True),
    (None, "tracer", False),
])
def test_python_subset_rules_follow_the_api_release(version, frontend, reported):
    options = SimOptions(api_version=version, compiler_frontend=frontend)
    expected = [("kernel_signature", _line(restricted, "def restricted")),
                ("kernel_signature", _line(restricted, "def restricted")),
                ("unsupported_is", _line(restricted, "if scale is not None")),
                ("unsupported_generator", _line(restricted, "width = sum(d for")),
                ("unsupported_generator", _line(_row_starts, "yield start"))]
    found = _rules(restricted, Generation.NEW, options)
    assert sorted(found) == (sorted(set(expected)) if reported else [])
    assert _rules(within_the_subset, Generation.NEW, options) == []


# -- helper functions the kernel calls ------------------------------------------------------------------------

def _exp_if_positive(x):
    t = lnl.load(x)
    if lnl.max(t, axis=[1]) > 0:               # control flow on a tensor value, in a helper
        t = lnl.exp(t)
    return t


def _exp_where_positive(x):
    t = lnl.load(x)
    return lnl.where(lnl.greater(t, 0.0), lnl.exp(t), t)


def _two_levels(x, fixed):
    return _exp_where_positive(x) if fixed else _exp_if_positive(x)


def _jit_helper(x):
    t = lnl.load(x)
    return t if not t else lnl.exp(t)          # 'not' on a tensor, in a jit-decorated helper


def calls_helpers(x):
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, _two_levels(x, False))
    lnl.store(out, jit_helper(x))
    return out


def calls_fixed_helpers(x):
    out = lnl.ndarray(x.shape, dtype=x.dtype, buffer=lnl.shared_hbm)
    lnl.store(out, _exp_where_positive(x))
    return out


def test_helpers_called_from_the_kernel_are_linted_at_their_own_lines():
    found = lint(calls_helpers, Generation.LEGACY)
    got = sorted((f.rule, f.lines[0].lineno, f.lines[0].function, f.kernel) for f in found)
    assert got == sorted([
        ("err_dynamic_control_flow_not_supported", _line(_exp_if_positive, "if lnl.max(t"), "_exp_if_positive",
         "calls_helpers"),
        # the branch is NKI control flow, so the `t` it creates is local to it (as in branch_on_value)
        ("err_local_variable_used_out_of_scope", _line(_exp_if_positive, "    return t"), "_exp_if_positive",
         "calls_helpers"),
        ("err_ambiguous_tensor_truth_value", _line(_jit_helper, "if not t"), "_jit_helper", "calls_helpers"),
        ("err_dynamic_control_flow_not_supported", _line(_jit_helper, "if not t"), "_jit_helper",
         "calls_helpers")])
    assert all(f.why and f.fix for f in found)
    assert lint(calls_fixed_helpers, Generation.LEGACY) == []


jit_helper = __import__("opennki.legacy", fromlist=["jit"]).jit(_jit_helper)
