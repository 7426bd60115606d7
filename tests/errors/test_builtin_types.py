"""opennki's errors and the built-in exception types NKI documents (docs/design-notes.md, "Errors are also
the built-in exceptions NKI documents"): tests written against NKI (`assertRaises(IndexError)`,
`type(e) is IndexError`, `pytest.raises(AssertionError)`) hold, and the error still names its rule, code and
kernel line."""

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy as legacy
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import (DtypeError, IndirectIndexError, MemoryKindError, OpenNKIError, OutOfBoundsError,
                            ShapeError)


@pytest.mark.parametrize("cls, builtins", [(ShapeError, (ValueError, AssertionError)),
                                           (DtypeError, (TypeError, AssertionError)),
                                           (MemoryKindError, (ValueError, AssertionError)),
                                           (OutOfBoundsError, (IndexError,))])
def test_error_classes_are_the_documented_builtins_too(cls, builtins):
    assert issubclass(cls, OpenNKIError) and all(issubclass(cls, b) for b in builtins)


def _gather_rows(data, stride):
    """Legacy kernel: rows stride*i of `data`, with run-time (indirect) row indices."""
    out = nl.ndarray((64, data.shape[1]), data.dtype, buffer=nl.shared_hbm)
    rows = nisa.iota(stride * nl.arange(64)[:, None], dtype=np.int32)
    i_f = nl.arange(data.shape[1])[None, :]
    tile = nl.load(data[rows, i_f])                                   # <- the faulting line
    nl.store(out, tile)
    return out


def test_run_time_index_out_of_range_is_exactly_index_error_with_numpy_text(rng):
    data = rng.standard_normal((100, 32)).astype(np.float32)
    np.testing.assert_array_equal(legacy.simulate_kernel(_gather_rows, data, 1), data[:64])
    with pytest.raises(IndexError) as info:
        legacy.simulate_kernel(_gather_rows, data, 2)
    exc = info.value
    assert type(exc) is IndexError
    first_row = 50                                                    # 2 * 50 = 100 is the first row outside
    assert str(exc) == f"index {2 * first_row * 32} is out of bounds for axis 0 with size {100 * 32}"
    assert exc.code == "err_tensor_access_out_of_bound"              # opennki's fields are kept
    assert exc.location.source.endswith("# <- the faulting line")
    assert isinstance(exc.opennki_error, IndirectIndexError)
    assert "run-time index range [0, 126]" in exc.__notes__[0] and "_gather_rows" in exc.__notes__[0]


def test_an_indirect_store_out_of_range_names_its_first_flat_element(rng):
    def kernel(src):
        out = nl.ndarray((64, 16), src.dtype, buffer=nl.shared_hbm)
        rows = nisa.iota(nl.arange(32)[:, None] * 3, dtype=np.int32)
        i_f = nl.arange(16)[None, :]
        nl.store(out[rows, i_f], nl.load(src))
        return out
    with pytest.raises(IndexError) as info:
        legacy.simulate_kernel(kernel, rng.standard_normal((32, 16)).astype(np.float32))
    assert type(info.value) is IndexError
    assert str(info.value) == f"index {66 * 16} is out of bounds for axis 0 with size {64 * 16}"   # row 3*22


def test_new_generation_constraint_checks_are_assertion_errors(rng):
    def kernel(a):
        out = nl2.ndarray((128, 8), nl2.float32, buffer=nl2.shared_hbm)
        t = nl2.ndarray((128, 8), nl2.float32)
        nisa2.dma_copy(dst=t, src=a)
        big = nl2.ndarray((128, 16), nl2.float32)
        nisa2.tensor_tensor(dst=big, data1=t, data2=t, op=nl2.add)    # dst shape differs from the operands
        nisa2.dma_copy(dst=out, src=t)
        return out
    with pytest.raises(AssertionError) as info:
        nki.simulate(kernel)(rng.standard_normal((128, 8)).astype(np.float32))
    assert isinstance(info.value, ShapeError) and info.value.location.function == "kernel"


def test_affine_out_of_bounds_stays_the_richer_index_error(rng):
    def kernel(a):
        out = nl.ndarray((8, 8), a.dtype, buffer=nl.shared_hbm)
        nl.store(out, nl.load(a[0:8, 4:12]))
        return out
    with pytest.raises(IndexError) as info:
        legacy.simulate_kernel(kernel, rng.standard_normal((8, 8)).astype(np.float32))
    assert isinstance(info.value, OutOfBoundsError) and info.value.code == "err_tensor_access_out_of_bound"


def test_host_arrays_of_types_neuroncores_lack_are_rejected_naming_the_argument(rng):
    def kernel(a, scale):
        out = nl2.ndarray(a.shape, a.dtype, buffer=nl2.shared_hbm)
        nl2.store(out, nl2.multiply(nl2.load(a), scale))
        return out
    x = rng.standard_normal((4, 8)).astype(np.float32)
    np.testing.assert_allclose(nki.simulate(kernel)(x, np.float64(0.5)), x * 0.5)   # a NumPy scalar is a scalar
    with pytest.raises(TypeError) as info:
        nki.simulate(kernel)(x.astype(np.float64), 0.5)
    assert isinstance(info.value, DtypeError) and "'a'" in str(info.value) and "float64" in str(info.value)
    with pytest.raises(DtypeError, match="complex64"):
        nki.simulate(kernel)(x.astype(np.complex64), 2)
