"""Every member of the new generation's `NkiTensor` (spec/language.md §7.1 and the NKI 0.6 / 0.7 class page:
methods ap ... view, attributes buffer ... strides, plus NKI 0.3 / 0.4's is_identity, sim_value, device_value)
exists and is exercised by a test in this module that checks values on random data against NumPy (tensor
indirection in depth: tests/isa/test_tensor_indirection.py)."""

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from tests.raises import raises_at
from tests.running import run

MEMBERS = """
ap broadcast expand_dim flatten_dims get_pattern is_contiguous is_indirect permute rearrange reshape reshape_dim
select slice squeeze_dim vector_select view reinterpret_cast buffer dtype name ndim offset shape size strides
__getitem__ __setitem__ is_identity sim_value device_value indirect
""".split()
_NUMPY_CHECK = re.compile(r"np\.testing\.|np\.array_equal")


def _uses(member: str, source: str) -> bool:
    if member == "__getitem__":
        return re.search(r"\w\[[^\]]*:[^\]]*\]", source) is not None
    if member == "__setitem__":
        return re.search(r"\w\[[^\]]*\] = ", source) is not None
    return re.search(rf"\.{member}\b", source) is not None


def test_every_member_exists():
    for member in MEMBERS:
        assert hasattr(nl.NkiTensor, member), member


def test_every_member_is_exercised_by_a_numpy_checked_test():
    text = Path(__file__).read_text()
    tree = ast.parse(text)
    top = {n.name: ast.get_source_segment(text, n) for n in tree.body if isinstance(n, ast.FunctionDef)}
    tests = {name: src + "".join(s for n, s in top.items() if n != name and re.search(rf"\b{n}\b", src))
             for name, src in top.items() if name.startswith("test_") and _NUMPY_CHECK.search(src)}
    missing = [m for m in MEMBERS if not any(_uses(m, src) for src in tests.values())]
    assert not missing, f"NkiTensor members without a NumPy-checked test: {missing}"


def _sbuf(x):
    t = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    return t


def _out(view):
    """The view copied into a fresh SBUF tile (a Vector Engine copy through the view) and returned."""
    t = nl.ndarray(view.shape, view.dtype, buffer=nl.sbuf)
    if view.buffer == nl.sbuf:
        nisa.tensor_copy(dst=t, src=view)
    else:
        nisa.dma_copy(dst=t, src=view)
    out = nl.ndarray(view.shape, view.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@pytest.fixture
def x(rng):
    return rng.standard_normal((16, 24)).astype(np.float32)


def test_attributes_and_patterns_of_a_slice(x):
    seen = {}

    def kernel(x):
        t = nl.ndarray((16, 24), nl.float32, buffer=nl.sbuf, name="tile")
        nisa.dma_copy(dst=t, src=x)
        v = t.slice(1, 8, 20, 2)
        seen.update(shape=v.shape, strides=t.strides, offset=v.offset, dtype=v.dtype, buffer=v.buffer, name=t.name,
                    ndim=v.ndim, size=v.size, pattern=v.get_pattern(), contiguous=(t.is_contiguous(),
                                                                                   v.is_contiguous()))
        return _out(v)

    np.testing.assert_array_equal(nki.simulate(kernel)(x), x[:, 8:20:2])
    assert seen == dict(shape=(16, 6), strides=(24, 1), offset=8, dtype=nl.float32, buffer=nl.sbuf, name="tile",
                        ndim=2, size=96, pattern=[[24, 16], [2, 6]], contiguous=(True, False))


def test_shape_equals_the_list_of_its_sizes(rng):
    """NKI's indexing overview compares shapes with lists (`assert x[1].shape == [2, 2]`); a kernel doing so
    runs, and the shape is still a hashable tuple."""
    h = rng.standard_normal((2, 16, 24)).astype(np.float32)

    def kernel(h):
        assert h[1].shape == [16, 24] and h[1, :, 0:8].shape == [16, 8] and h.shape == (2, 16, 24)
        assert h[1].shape != [16, 25] and [16, 24] == h[1].shape and h.shape != [2, 16]
        assert {h.shape: 1}[(2, 16, 24)] == 1 and repr(h[1].shape) == "(16, 24)"
        return _out(h[1, :, 0:8])

    np.testing.assert_array_equal(nki.simulate(kernel)(h), h[1, :, 0:8])


def test_subscripts_read_and_assign(x, rng):
    y = rng.standard_normal((8, 5)).astype(np.float32)

    def kernel(x, y):
        t = _sbuf(x)
        t[0:8, 3:8] = _sbuf(y)
        return _out(t[0:16:2, 1:20])

    want = x.copy()
    want[0:8, 3:8] = y
    np.testing.assert_array_equal(nki.simulate(kernel)(x, y), want[0:16:2, 1:20])


def test_select_static_and_dynamic(rng):
    h = rng.standard_normal((4, 16, 8)).astype(np.float32)

    def kernel(h, i):
        idx = _sbuf(i)
        rows = _out(h.select(0, idx))                     # run-time row of an HBM tensor
        t = nl.ndarray((16, 4, 8), nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=h.permute((1, 0, 2)))
        assert not t.is_indirect() and h.select(0, idx).is_indirect()
        return rows, _out(t.select(1, 2))

    rows, picked = nki.simulate(kernel)(h, np.array([[3]], np.int32))
    np.testing.assert_array_equal(rows, h[3])
    np.testing.assert_array_equal(picked, h[2])


def test_vector_select_gathers_rows_per_partition(rng):
    h = rng.standard_normal((10, 3, 4)).astype(np.float32)
    offsets = rng.integers(0, 10, (16, 1)).astype(np.int32)

    def kernel(h, offsets):
        o = _sbuf(offsets)
        view = h.vector_select(0, o)
        assert view.is_indirect() and view.shape == (16, 3, 4)
        return _out(view), _out(h[:, 1:3, :].vector_select(0, o))

    whole, part = nki.simulate(kernel)(h, offsets)
    np.testing.assert_array_equal(whole, h[offsets[:, 0]])
    np.testing.assert_array_equal(part, h[offsets[:, 0], 1:3, :])


def test_vector_select_rules(rng):
    def on_chip(x):
        t = _sbuf(x)
        o = nl.ndarray((16, 1), nl.int32, buffer=nl.sbuf)
        t.vector_select(0, o)

    with raises_at(nki.errors.KernelError, match="only supported on HBM"):
        nki.simulate(on_chip)(rng.standard_normal((16, 4)).astype(np.float32))


def test_permute_broadcast_and_unit_dims(rng):
    a = rng.standard_normal((16, 4, 6)).astype(np.float32)
    c = rng.standard_normal((16, 1)).astype(np.float32)

    def kernel(a, c):
        t, col = _sbuf(a), _sbuf(c)
        unit = t.expand_dim(1)
        return (_out(t.permute((0, 2, 1))), _out(col.broadcast(1, 5)), _out(unit),
                _out(unit.squeeze_dim(1)))

    perm, wide, unit, back = nki.simulate(kernel)(a, c)
    np.testing.assert_array_equal(perm, a.transpose(0, 2, 1))
    np.testing.assert_array_equal(wide, np.broadcast_to(c, (16, 5)))
    np.testing.assert_array_equal(unit, a[:, None])
    np.testing.assert_array_equal(back, a)


def test_reshapes_and_rearrange(x):
    def kernel(x):
        t = _sbuf(x)
        split = t.reshape_dim(1, (4, 6))
        return (_out(split), _out(split.flatten_dims(1, 2)), _out(x.reshape((8, 48))),
                _out(split.rearrange(("p", "a", "b"), ("p", "b", "a"))))

    split, flat, hbm, swapped = nki.simulate(kernel)(x)
    np.testing.assert_array_equal(split, x.reshape(16, 4, 6))
    np.testing.assert_array_equal(flat, x)
    np.testing.assert_array_equal(hbm, x.reshape(8, 48))
    np.testing.assert_array_equal(swapped, x.reshape(16, 4, 6).transpose(0, 2, 1))


def test_view_reinterpret_cast_and_access_patterns(x):
    def kernel(x):
        t = _sbuf(x)
        return (_out(t.view(nl.int32)), _out(t.reinterpret_cast(nl.uint16)),
                _out(t.ap([[24, 16], [2, 12]], offset=1)))

    bits, halves, odd = nki.simulate(kernel)(x)
    np.testing.assert_array_equal(bits, x.view(np.int32))
    np.testing.assert_array_equal(halves, x.view(np.uint16))
    np.testing.assert_array_equal(odd, x[:, 1::2])


def test_identity_and_simulated_values(x):
    seen = {}

    def kernel(x):
        t = _sbuf(x)
        doubled = nl.ndarray(x.shape, x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=doubled, data=t, op0=nl.multiply, operand0=2.0)
        seen.update(identity=(t.is_identity(), t[0:8, :].is_identity()), sim=t.sim_value,
                    device=doubled.device_value)
        return _out(doubled)

    np.testing.assert_array_equal(nki.simulate(kernel)(x), 2 * x)
    assert seen["identity"] == (True, False)
    np.testing.assert_array_equal(seen["sim"], x)
    np.testing.assert_array_equal(seen["device"], 2 * x)


def test_indirect_gathers_columns_at_run_time_offsets(rng, x):
    index = rng.integers(0, 24, (16, 2)).astype(np.uint16)

    def kernel(x, index):
        t, i = _sbuf(x), _sbuf(index)
        return _out(t.indirect(i))            # the default num_elem: index.size, one group of 16 partitions

    offsets = index.T.reshape(-1)             # offset k at index[k % 16, k // 16], for every partition
    np.testing.assert_array_equal(run(kernel, x, index, target="trn3"), x[:, offsets])

@pytest.mark.parametrize("legacy", [False, True])
def test_dot_t_is_not_a_member_and_the_error_says_how_to_transpose(legacy, x):
    """NumPy's and torch's `.T` is not an NKI tensor member (both generations): the AttributeError names the
    kernel line and the instructions that transpose; `hasattr` stays False, as for any absent member."""
    import opennki.legacy as lnki
    import opennki.legacy.language as lnl
    seen = []

    def kernel(a):
        t = (lnl.load(a) if legacy else _sbuf(a))
        seen.append(hasattr(t, "T"))
        return t.T

    front = lnki.simulate_kernel if legacy else (lambda k, *args: nki.simulate(k)(*args))
    with raises_at(AttributeError, match=r"no attribute 'T'(.|\n)*nl\.transpose", line="return t.T") as info:
        front(kernel, x)
    assert isinstance(getattr(info.value, "opennki_error", info.value), nki.errors.MemberError)
    assert seen == [False]
