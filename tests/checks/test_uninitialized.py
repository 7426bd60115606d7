"""Uninitialised reads (`uninitialized=` "nan" / "raise" / "zero"): the first read of a never-written element
raises, element by element and honouring masks, naming the tensor, the element, the reading line and the
line that created the tensor; inside a collecting block it is a finding and the run goes on."""

import inspect

import numpy as np
import pytest

import opennki as nki_new
import opennki.isa as nisa_new
import opennki.language as nl_new
import opennki.legacy as nki
import opennki.legacy.language as nl
from opennki.errors import UninitializedReadError
from opennki.listeners.findings import FindingKind, collecting
from opennki.sim import SimOptions
from tests.raises import raises_at


def _line(fn, text: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def _ragged(masked_exp: bool):
    """Rows >= 100 of the tile are never loaded; exp reads them unless it gets the load's mask, and the store's
    mask then hides what it made of them (so NaN poisoning never shows the read)."""
    def ragged(x):
        out = nl.ndarray((128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        i_p, i_f = nl.arange(128)[:, None], nl.arange(64)[None, :]
        t = nl.ndarray((128, 64), dtype=nl.float32)
        t[i_p, i_f] = nl.load(x[i_p, i_f], mask=(i_p < 100))
        if masked_exp:
            e = nl.exp(t, mask=(i_p < 100))
        else:
            e = nl.exp(t)
        nl.store(out[i_p, i_f], value=e, mask=(i_p < 100))
        return out
    return ragged


def test_poisoning_hides_a_read_that_a_later_mask_discards(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    out = nki.jit(_ragged(False))(x)             # default "nan": runs, the valid rows are right
    np.testing.assert_allclose(out[:100], np.exp(x[:100]), rtol=1e-6)


def test_raise_names_tensor_element_reading_line_and_creation_site(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    kernel = _ragged(False)
    with raises_at(UninitializedReadError, match="uninitialized_read") as info:
        nki.jit(kernel, uninitialized="raise")(x)
    error = info.value
    assert error.location.lineno == _line(kernel, "e = nl.exp(t)")
    text = str(error)
    assert "element [100, 0]" in text and f"created at line {_line(kernel, ' t = nl.ndarray')}" in text
    assert f"{28 * 64 - 1} more" in text


def test_the_fixed_kernel_reads_only_written_elements(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    out = nki.jit(_ragged(True), uninitialized="raise")(x)
    np.testing.assert_allclose(out[:100], np.exp(x[:100]), rtol=1e-6)


def test_collecting_records_the_finding_and_runs_on(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)
    kernel = _ragged(False)
    with collecting() as found:
        out = nki.jit(kernel, uninitialized="raise")(x)
    np.testing.assert_allclose(out[:100], np.exp(x[:100]), rtol=1e-6)
    assert [f.kind for f in found] == [FindingKind.UNINITIALIZED]
    assert [loc.lineno for loc in found[0].lines] == [_line(kernel, "e = nl.exp(t)"),
                                                     _line(kernel, " t = nl.ndarray")]
    assert found[0].extra["element"] == (100, 0) and found[0].extra["count"] == 28 * 64


def _partly_written(x):
    out = nl_new.ndarray((32, 16), dtype=x.dtype, buffer=nl_new.shared_hbm)
    t = nl_new.ndarray((32, 16), dtype=x.dtype, buffer=nl_new.sbuf)
    nisa_new.dma_copy(dst=t[:, 0:8], src=x[:, 0:8])
    u = nl_new.ndarray((32, 16), dtype=x.dtype, buffer=nl_new.sbuf)
    nisa_new.memset(dst=u, value=0.0)
    nisa_new.tensor_copy(dst=u[:, 0:8], src=t[:, 0:8])          # only what was written: fine
    nisa_new.tensor_copy(dst=u[:, 8:16], src=t[:, 8:16])        # never written
    nisa_new.dma_copy(dst=out, src=u)
    return out


def test_new_generation_reads_are_checked_element_by_element(rng):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    with raises_at(UninitializedReadError, match=r"element \[0, 8\]") as info:
        nki_new.jit(_partly_written, uninitialized="raise")(x)
    assert info.value.location.lineno == _line(_partly_written, "src=t[:, 8:16]")


@pytest.mark.parametrize("mode,expected", [("nan", np.nan), ("zero", 0.0)])
def test_fresh_memory_holds_nan_or_zero(mode, expected, rng):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    out = nki_new.jit(_partly_written, uninitialized=mode)(x)
    np.testing.assert_array_equal(out[:, :8], x[:, :8])
    np.testing.assert_array_equal(out[:, 8:], np.full((32, 8), expected, np.float32))


def test_environment_variable_and_bad_mode(rng, monkeypatch):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    monkeypatch.setenv("OPENNKI_UNINITIALIZED", "raise")
    with raises_at(UninitializedReadError):
        nki_new.jit(_partly_written)(x)
    with pytest.raises(ValueError, match="uninitialized"):
        SimOptions(uninitialized="garbage")


def _odd_partitions_forward(source_row: int):
    """Only partition 16 of each quadrant is written; the shuffle moves partition `source_row` of each quadrant
    to its partition 0 and keeps the others (255), so it reads nothing else."""
    def kernel(x):
        out = nl_new.ndarray((64, 8), dtype=x.dtype, buffer=nl_new.shared_hbm)
        t = nl_new.ndarray((64, 8), dtype=x.dtype, buffer=nl_new.sbuf)
        for q in range(2):
            nisa_new.dma_copy(dst=t[q * 32 + 16:q * 32 + 17, :], src=x[q:q + 1, :])
        nisa_new.nc_stream_shuffle(dst=t, src=t, shuffle_mask=[source_row] + [255] * 31)
        for q in range(2):
            nisa_new.dma_copy(dst=out[q:q + 1, :], src=t[q * 32:q * 32 + 1, :])
        return out
    return kernel


def test_a_shuffle_reads_only_the_partitions_its_mask_names(rng):
    x = rng.standard_normal((64, 8)).astype(np.float32)
    got = nki_new.jit(_odd_partitions_forward(16), uninitialized="raise")(x)
    np.testing.assert_array_equal(got[0:2], x[0:2])
    kernel = _odd_partitions_forward(3)          # partition 3 of each quadrant was never written
    with raises_at(UninitializedReadError, match="element \\[3, 0\\]", line="nisa_new.nc_stream_shuffle("):
        nki_new.jit(kernel, uninitialized="raise")(x)


def _windows(x):
    """Sliding windows of 3 over the free axis: rows 6 and 7 are never loaded, and the windows read each of
    their elements up to three times."""
    out = nl.ndarray((8, 2), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p, i_f = nl.mgrid[0:8, 0:4]
    t = nl.ndarray((8, 4), dtype=nl.float32)
    t[i_p, i_f] = nl.load(x[i_p, i_f], mask=(i_p < 6))
    i_q, i_w, i_k = nl.mgrid[0:8, 0:2, 0:3]
    m = nl.max(t[i_q, i_w + i_k], axis=[2])
    i_o, i_c = nl.mgrid[0:8, 0:2]
    nl.store(out[i_o, i_c], value=m, mask=(i_o < 6))
    return out


def test_an_element_read_several_times_counts_once(rng):
    x = rng.standard_normal((8, 4)).astype(np.float32)
    with collecting() as found:
        out = nki.jit(_windows, uninitialized="raise")(x)
    np.testing.assert_array_equal(out[:6], np.maximum(np.maximum(x[:6, 0:2], x[:6, 1:3]), x[:6, 2:4]))
    assert len(found) == 1 and found[0].extra["element"] == (6, 0)
    assert found[0].extra["count"] == 8 and "(and 7 more never-written element(s))" in found[0].message
