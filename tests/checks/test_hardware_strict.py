"""Hardware-strict mode covers every documented case of "works in simulation, fails on hardware": the
catalogue below has one entry per such spec entry (docs/compatibility.md, "Hardware-strict mode", lists the
same ids), each with a kernel of ours that runs without hardware_strict (its value checked against NumPy)
and raises with it, naming the kernel line."""

import re
from pathlib import Path

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import HardwareUnsupportedError, KernelError
from tests.language.test_debug_and_strict import NEW_GEN_FAILURES, _binary_kernel
from tests.raises import raises_at

DOCS = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"


def _two(rng):
    a, b = rng.uniform(1, 2, (2, 4, 8)).astype(np.float32)
    a[0, 0], b[0, 0] = 7.25, 2.0
    return a, b


def _nisa_divide(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    q = nisa.tensor_tensor(ta, tb, op=nl.divide)
    nl.store(out, q)
    return out


def _operator_partition_broadcast(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b[0:1, :])
    nl.store(out, ta + tb)
    return out


def _device_print(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    nl.device_print("a =", t)
    nl.store(out, t)
    return out


def _on_chip_output(a, b):
    t = nl.load(a)
    doubled = nl.multiply(t, 2.0)
    return doubled


def _invert_bool(a, b):
    out = nl.ndarray(a.shape, dtype=nl.bool_, buffer=nl.shared_hbm)
    flags = nl.greater(nl.load(a), nl.load(b))
    flipped = nl.invert(flags)
    nl.store(out, flipped)
    return out


def _affine_select_from_psum(a, b):
    out = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:4, 0:4]
    p = nl.ndarray((4, 4), dtype=nl.float32, buffer=nl.psum)
    p[...] = nl.load(a[0:4, 0:4])
    lower = nisa.affine_select(pred=(iy < ix), on_true_tile=p, on_false_value=0.0)
    nl.store(out, lower)
    return out


def _gpsimd_tensor_scalar(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a)
    s = nisa.tensor_scalar(t, np.add, 1.5, engine=nisa.gpsimd_engine)
    nl.store(out, s)
    return out


def _reduce_middle_axis(a, b):
    out = nl.ndarray((4, 1, 2), dtype=a.dtype, buffer=nl.shared_hbm)
    t = nl.load(a.reshape((4, 4, 2)))
    r = nisa.tensor_reduce(np.add, t, axis=1, keepdims=True)
    nl.store(out, r)
    return out


def _block_dims(a, b):
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    blocks = nl.ndarray((2, nl.par_dim(4), 8), dtype=a.dtype, buffer=nl.sbuf)
    blocks[0] = nl.load(a)
    blocks[1] = nl.load(b)
    nl.store(out, nl.add(blocks[0], blocks[1]))
    return out


def _mask_lower(x):
    return np.where(np.arange(4)[None, :] < np.arange(4)[:, None], x[0:4, 0:4], 0.0)


# id: (spec entry, kernel, NumPy reference of its value without hardware_strict, error, match, kernel line)
CATALOGUE = {
    # the new generation's nl ops (their kernels live with the nl tests; the error names the op's line)
    **{f"new generation: {what}": ("spec/language.md §6.1 / §8 (unsupported on hardware, may run in simulation)",
                                   _binary_kernel(fn, None, None), ref, HardwareUnsupportedError, message, None)
       for what, fn, ref, message in NEW_GEN_FAILURES},
    "nisa divide / mod / fmod opcodes": (
        "spec/language.md §6.1 (no division instruction)", _nisa_divide, lambda a, b: a / b,
        HardwareUnsupportedError, "opcode on hardware", "q = nisa.tensor_tensor"),
    "legacy tile operators broadcasting partitions": (
        "spec/language.md §6 broadcasting (legacy known issue)", _operator_partition_broadcast,
        lambda a, b: a + b[0:1], HardwareUnsupportedError, "partition", "nl.store(out, ta + tb)"),
    "legacy device_print": (
        "spec/language.md §5.9 (only works in simulation)", _device_print, lambda a, b: a,
        HardwareUnsupportedError, "only works in simulation", "nl.device_print("),
    "legacy on-chip kernel output": (
        "spec/entrypoints.md outputs (the simulator returns it, compilation rejects it)", _on_chip_output,
        lambda a, b: 2 * a, KernelError, "err_unsupported_memory", "return doubled"),
    "legacy nl.invert of a bool tile": (
        # the simulation computes what the Vector Engine does: NOT of the 0/1 byte is never 0, so all True
        "spec/language.md §6.2 invert (legacy known issue: wrong results for bool)", _invert_bool,
        lambda a, b: np.ones(a.shape, bool), HardwareUnsupportedError, "bool input", "flipped = nl.invert(flags)"),
    "affine_select reading PSUM": (
        "spec/isa.md §2 (GpSimd accesses SBUF only)", _affine_select_from_psum, lambda a, b: _mask_lower(a),
        HardwareUnsupportedError, "SBUF", "lower = nisa.affine_select("),
    "tensor_scalar on GpSimd other than rsqrt": (
        "spec/isa.md C23 (gpsimd documented for rsqrt only)", _gpsimd_tensor_scalar, lambda a, b: a + 1.5,
        HardwareUnsupportedError, "rsqrt only", "s = nisa.tensor_scalar("),
    "tensor_reduce over non-trailing axes": (
        "spec/isa.md C15 (NKI >= 0.3 reduces trailing free axes)", _reduce_middle_axis,
        lambda a, b: a.reshape(4, 4, 2).sum(axis=1, keepdims=True), HardwareUnsupportedError,
        "trailing free axes", "r = nisa.tensor_reduce("),
    "legacy block dimensions": (
        "spec/language.md §3.2 (block dims deprecated, rejected by later compilers)", _block_dims,
        lambda a, b: a + b, KernelError, "err_leading_dimension_of_tensor_must_be_partition",
        "blocks = nl.ndarray("),
}


@pytest.mark.parametrize("entry", list(CATALOGUE))
def test_runs_in_simulation_and_raises_under_hardware_strict(entry, rng):
    _spec, kernel, ref, error, match, line = CATALOGUE[entry]
    a, b = _two(rng)
    with pytest.warns(UserWarning) if entry == "legacy on-chip kernel output" else _nothing():
        got = nki.jit(kernel)(a, b)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), np.asarray(ref(a, b), dtype=np.float64),
                               rtol=1e-6, atol=1e-6)
    with raises_at(error, match=match, line=line) as exc:
        nki.jit(kernel, hardware_strict=True)(a, b)
    assert exc.value.location.filename == __file__ or entry.startswith("new generation: ")


def test_the_documented_list_is_the_catalogue():
    text = DOCS.read_text()
    section = text[text.index("## Hardware-strict mode"):]
    section = section[:section.index("\n## ", 4)] if "\n## " in section[4:] else section
    documented = re.findall(r"^\| ([^|]+?) \|", section, flags=re.M)[1:]      # the rows after the header
    assert sorted(documented) == sorted(CATALOGUE)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
