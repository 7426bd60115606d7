"""Legacy-generation idioms the SDK's own tests rely on (written here as our own kernels): an on-chip tensor
returned from a simulated kernel, `tensor_scalar_cumulative` / `reduce_cmd.load_reduce` in the legacy
namespace, `if param:` as the presence test of an optional tensor parameter, and Python `and` / `or` between
masks (the SDK's nc_match_replace8 mask example)."""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import KernelError
from tests.raises import raises_at


def _tripled_in_sbuf(a):
    result = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    result[...] = nl.multiply(nl.load(a), 3.0)
    return result                                                   # <- returns an SBUF tile


def test_a_returned_sbuf_tile_gives_its_values_with_a_warning(rng):
    a = rng.standard_normal((16, 8)).astype(np.float32)
    with pytest.warns(UserWarning, match="must return HBM tensors") as record:
        out = nki.simulate_kernel(_tripled_in_sbuf, a)
    np.testing.assert_allclose(out, 3 * a, rtol=1e-6)
    assert record[0].filename == __file__ and record[0].lineno == _tripled_in_sbuf.__code__.co_firstlineno + 3


def test_a_returned_sbuf_tile_is_an_error_in_hardware_strict_mode(rng):
    a = rng.standard_normal((16, 8)).astype(np.float32)
    with raises_at(KernelError, match="err_unsupported_memory", line="return result"):
        nki.jit(_tripled_in_sbuf, mode="simulation", hardware_strict=True)(a)


def _running_sum(src_data, init, reduce_cmd=nisa.reduce_cmd.reset_reduce):
    out = nl.ndarray(src_data.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    src = nl.load(src_data)
    start = nl.load(init) if init else None          # an optional tensor parameter, tested for presence
    dst = nl.ndarray(src_data.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_cumulative(src=src, dst=dst, op0=nl.multiply, op1=nl.add, imm0=2.0,
                                  imm1=start if start is not None else 0.0, reduce_cmd=reduce_cmd)
    nl.store(out, dst)
    return out


def test_legacy_tensor_scalar_cumulative_with_reset_and_load_reduce(rng):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    init = rng.standard_normal((32, 1)).astype(np.float32)
    reset = nki.simulate_kernel(_running_sum, x, None)
    np.testing.assert_allclose(reset, np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)
    loaded = nki.simulate_kernel(_running_sum, x, init, nisa.reduce_cmd.load_reduce)
    np.testing.assert_allclose(loaded, init + np.cumsum(2 * x, axis=1), rtol=1e-5, atol=1e-5)


def test_only_kernel_arguments_are_true_in_a_legacy_if(rng):
    def branches_on_a_tile(a):
        t = nl.load(a)
        if t:                                         # a tile: still NKI's error
            pass
        return a
    with raises_at(KernelError, code="err_ambiguous_tensor_truth_value"):
        nki.simulate_kernel(branches_on_a_tile, rng.standard_normal((4, 4)).astype(np.float32))


def test_nt_scalar_reads_a_run_time_trip_count(rng):
    import opennki.legacy.typing as nt

    def counted_doubling(x, steps):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        acc = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        acc[...] = nl.load(x)
        n = nl.load(steps)
        for _ in range(nt.scalar(n)):                 # the trip count comes from device memory
            acc[...] = nl.multiply(acc, 2.0)
        nl.store(out, acc)
        return out
    x = rng.standard_normal((8, 4)).astype(np.float32)
    for k in (0, 3):
        np.testing.assert_allclose(nki.simulate_kernel(counted_doubling, x, np.array([[k]], np.int32)), x * 2 ** k)
    with raises_at(KernelError, match="one-element"):
        nki.simulate_kernel(lambda x: [nt.scalar(nl.load(x)) for _ in (0,)] and x, x)


def _masked_copies(a, b):
    """Copies of `a` through masks joined by Python operators (each line says what Python makes of it)."""
    out = nl.ndarray((3, 16, 32), dtype=a.dtype, buffer=nl.shared_hbm)
    ix, iy = nl.mgrid[0:16, 0:32]
    for k in range(3):
        t = nl.full((16, 32), -1.0, dtype=a.dtype)
        if k == 0:
            t[ix, iy] = nl.load(a[ix, iy], mask=(ix < b and iy < 20))        # `and`: iy < 20 only
        elif k == 1:
            t[ix, iy] = nl.load(a[ix, iy], mask=(iy < 20 or ix < b))         # `or`: iy < 20 only
        else:
            t[ix, iy] = nl.load(a[ix, iy], mask=(4 <= iy < 20))              # chained: iy < 20 only
        nl.store(out[k, ix, iy], t)
    return out


def test_python_and_or_between_masks_keep_one_mask_with_a_warning(rng):
    a = rng.standard_normal((16, 32)).astype(np.float32)
    with pytest.warns(UserWarning, match="between masks is not a mask operator") as record:
        out = nki.simulate_kernel(_masked_copies, a, 8)
    ref = np.where(np.arange(32)[None, :] < 20, a, -1.0)
    for k in range(3):
        np.testing.assert_array_equal(out[k], ref)
    first = _masked_copies.__code__.co_firstlineno
    assert [(w.filename, w.lineno) for w in record] == [(__file__, first + 7), (__file__, first + 9),
                                                        (__file__, first + 11)]
    assert "keeps the right-hand mask" in str(record[0].message) and "join masks with &" in str(record[0].message)
    assert "keeps the left-hand mask" in str(record[1].message) and "join masks with |" in str(record[1].message)


def test_other_truth_tests_of_a_mask_stay_errors(rng):
    a = rng.standard_normal((16, 32)).astype(np.float32)

    def branches_on_a_mask(a):
        ix, iy = nl.mgrid[0:16, 0:32]
        if ix < 8:                                    # <- control flow on a mask
            pass
        return a

    def negates_a_mask(a):
        ix, iy = nl.mgrid[0:16, 0:32]
        t = nl.load(a[ix, iy], mask=not (ix < 8))     # <- `not` on a mask
        return a
    for kernel, line in ((branches_on_a_mask, "if ix < 8"), (negates_a_mask, "mask=not (ix < 8)")):
        with raises_at(KernelError, code="err_ambiguous_tensor_truth_value", line=line):
            nki.simulate_kernel(kernel, a)
