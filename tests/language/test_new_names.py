"""Every public name of the new generation's `nki.language` (the 134 of the NKI 0.6 / SDK 2.32 stub,
spec/language.md §1) is importable and exercised by a test that checks its result against NumPy.

The claims come from `@covers(..., new=True)` decorators (tests/language/coverage.py), here and in the test
modules listed below; each decorated test verifies, while it runs, that the names it claims really ran.
"""

import importlib

import ml_dtypes
import numpy as np
import pytest

import opennki as nki
import opennki.isa as nisa
import opennki.language as nl
from tests.language.coverage import COVERED_NEW, covers
from tests.language.helpers import sigmoid
from tests.language.test_elementwise import BINARY, UNARY, _operands, assert_unary_matches

NEW_NAMES = """
DType MemoryRegion NKIObject NkiTensor abs abs_max abs_min add affine_range all arctan average bfloat16
bitwise_and bitwise_or bitwise_xor bool_ broadcast_to bypass ceil copy cos device_print divide dropout ds
dynamic_range empty_like equal erf erf_dx exp expand_dims float16 float32 float4_e2m1fn_x4 float8_e4m3
float8_e4m3fn float8_e4m3fn_x4 float8_e5m2 float8_e5m2_x4 float8_e8m0fnu floor fmod fori_loop full
gather_flattened gelu gelu_apprx_sigmoid gelu_apprx_sigmoid_dx gelu_apprx_tanh gelu_dx greater greater_equal
hbm int16 int32 int8 invert is_hbm is_on_chip is_psum is_sbuf left_shift less less_equal load
load_transpose2d log logical_and logical_not logical_or logical_xor matmul max maximum mean min minimum mish
mod multiply ndarray negative no_reorder not_equal num_programs ones power prelu private_hbm prod program_id
program_ndim psum rand random_seed reciprocal relu right_shift rms_norm rsqrt sbuf sequential_range
shared_constant shared_hbm shared_identity_matrix sigmoid sign silu silu_dx sin softmax softplus sqrt square
static_range store subtract sum tan tanh tfloat32 tile_size transpose trunc uint16 uint32 uint8 var where
while_loop zeros zeros_like
""".split()

# NKI 0.7's tile and block grid names (docs latest/nki/api/generated/nki.language.<name>; SDK 2.33 release notes:
# "tiled/blocked on-chip memory layout APIs"), not in the 0.6 stub
GRID_NAMES_0_7 = """
NkiBlockGrid NkiGrid NkiTileGrid alloc_blocks alloc_tiles blocks contiguous_indices grid_element_offset
interleaved_indices tiles
""".split()

COVERING_MODULES = ("tests.language.test_new_names", "tests.isa.test_mx", "tests.language.test_grid_selection")
SHAPE = (32, 48)


def simulate(fn, *arrays):
    """outs = fn(*tiles) with each array loaded whole into SBUF; every result tensor is stored and returned."""
    def kernel(*xs):
        results = fn(*[nl.load(x) for x in xs])
        outs = []
        for r in results if isinstance(results, tuple) else (results,):
            out = nl.ndarray(r.shape, r.dtype, buffer=nl.shared_hbm)
            nl.store(out, r)
            outs.append(out)
        return tuple(outs) if len(outs) > 1 else outs[0]
    return nki.simulate(kernel)(*arrays)


# ------------------------------------------------------------------------------------------- the name list

def test_the_list_has_the_134_names_of_the_stub():
    assert len(NEW_NAMES) == len(set(NEW_NAMES)) == 134


@pytest.mark.parametrize("name", NEW_NAMES)
def test_name_is_importable(name):
    assert hasattr(nl, name) and name in nl.__all__


@pytest.mark.parametrize("name", GRID_NAMES_0_7)
def test_0_7_grid_name_is_importable(name):
    assert hasattr(nl, name) and name in nl.__all__ and name not in NEW_NAMES


def test_every_name_is_exercised_by_a_numpy_checked_test():
    for module in COVERING_MODULES:
        importlib.import_module(module)
    missing = sorted(set(NEW_NAMES + GRID_NAMES_0_7) - set(COVERED_NEW))
    assert not missing, f"new-generation nl names without a covering test: {missing}"


# ---------------------------------------------------------------------------------------- element-wise

def _gelu_sigmoid_dx(x):
    s = sigmoid(1.702 * x)
    return s + 1.702 * x * s * (1 - s)


NEW_UNARY = dict(UNARY, gelu_apprx_sigmoid_dx=(_gelu_sigmoid_dx, (-4, 4)))


@covers(*NEW_UNARY, via="name", new=True)
@pytest.mark.parametrize("name", sorted(NEW_UNARY))
def test_unary_matches_numpy(name, rng):
    ref, bounds = NEW_UNARY[name]
    assert_unary_matches(simulate, getattr(nl, name), ref, bounds, rng)


# abs_max / abs_min: the signed value of the larger / smaller magnitude, ties to y (spec/isa.md §7)
NEW_BINARY = dict(BINARY, abs_max=(lambda a, b: np.where(np.abs(a) > np.abs(b), a, b), "float"),
                  abs_min=(lambda a, b: np.where(np.abs(a) < np.abs(b), a, b), "float"))


@covers(*NEW_BINARY, via="name", new=True)
@pytest.mark.parametrize("name", sorted(NEW_BINARY))
def test_binary_matches_numpy(name, rng):
    ref, kind = NEW_BINARY[name]
    a, b = _operands(kind, rng)
    out = simulate(getattr(nl, name), a, b)
    expected = ref(a.astype(np.float64), b.astype(np.float64)) if a.dtype.kind == "f" else ref(a, b)
    assert out.dtype == a.dtype
    np.testing.assert_allclose(out, expected.astype(a.dtype), rtol=2e-6, atol=1e-6)


COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater, "greater_equal": np.greater_equal,
           "less": np.less, "less_equal": np.less_equal, "logical_and": np.logical_and,
           "logical_or": np.logical_or, "logical_xor": np.logical_xor}


@covers(*COMPARE, via="name", new=True)
@pytest.mark.parametrize("name", sorted(COMPARE))
def test_comparisons_keep_the_input_dtype_with_one_and_zero(name, rng):
    a = rng.integers(-2, 3, SHAPE).astype(np.float32)
    b = rng.integers(-2, 3, SHAPE).astype(np.float32)
    out = simulate(getattr(nl, name), a, b)
    assert out.dtype == np.float32                     # new-generation rule: input dtype, values 1 / 0
    np.testing.assert_array_equal(out, COMPARE[name](a, b).astype(np.float32))


@covers("logical_not", "invert", new=True)
def test_logical_not_and_invert(rng):
    flags = rng.integers(0, 2, SHAPE).astype(np.float32)
    np.testing.assert_array_equal(simulate(nl.logical_not, flags), 1.0 - flags)
    bits = rng.integers(-2 ** 31, 2 ** 31 - 1, SHAPE, dtype=np.int64).astype(np.int32)
    out = simulate(nl.invert, bits)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, np.invert(bits))


# ----------------------------------------------------------------------------------- reductions, composites

@covers("sum", "prod", "max", "min", "mean", "var", "all", new=True)
def test_reductions_match_numpy(rng):
    x = rng.uniform(0.5, 1.5, SHAPE).astype(np.float32)
    outs = simulate(lambda t: (nl.sum(t, axis=1), nl.prod(t, axis=1), nl.max(t, axis=1), nl.min(t, axis=1),
                               nl.mean(t, axis=1), nl.var(t, axis=1, keepdims=False),
                               nl.all(nl.greater(t, 0.6), axis=1)), x)
    refs = [x.sum(1, keepdims=True), x.prod(1, keepdims=True), x.max(1, keepdims=True), x.min(1, keepdims=True),
            x.mean(1, keepdims=True), x.var(1, keepdims=True), (x > 0.6).all(1, keepdims=True).astype(np.float32)]
    for out, ref in zip(outs, refs):
        assert out.shape == (SHAPE[0], 1)              # var ignores keepdims: the reduced dim stays
        np.testing.assert_allclose(out, ref, rtol=2e-5, atol=1e-6)
    assert 0 < refs[-1].sum() < SHAPE[0]               # the data makes both answers of `all` appear


@covers("softmax", "rms_norm", "where", new=True)
def test_composites_match_numpy(rng):
    x = rng.standard_normal(SHAPE).astype(np.float32)
    w = rng.standard_normal(SHAPE).astype(np.float32)
    soft, norm, sel = simulate(lambda t, u: (nl.softmax(t), nl.rms_norm(t, u, axis=1, n=SHAPE[1]),
                                             nl.where(nl.greater(t, 0.0), t, u)), x, w)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(soft, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    rms = x / np.sqrt((x.astype(np.float64) ** 2).sum(1, keepdims=True) / SHAPE[1] + 1e-6) * w
    np.testing.assert_allclose(norm, rms, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(sel, np.where(x > 0, x, w))


@covers("dropout", "rand", "random_seed", new=True)
def test_random_ops_are_seeded_uniform_and_drop_without_rescaling(rng):
    x = rng.uniform(1, 2, (128, 256)).astype(np.float32)

    def kernel(t, seed):
        nl.random_seed(nl.load(seed))
        return nl.rand((128, 256), nl.float32), nl.dropout(t, 0.25)

    def run(seed):
        return nki.simulate(lambda a, s: _stored(kernel(nl.load(a), s)))(x, np.array([[seed]], np.int32))
    r1, d1 = run(5)
    r2, d2 = run(5)
    r3, _ = run(6)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(d1, d2)
    assert not np.array_equal(r1, r3)
    assert r1.min() >= 0 and r1.max() < 1 and abs(r1.mean() - 0.5) < 0.01
    kept = d1 != 0
    np.testing.assert_array_equal(d1[kept], x[kept])    # survivors are not rescaled
    assert abs(1 - kept.mean() - 0.25) < 0.01
    with pytest.raises(TypeError, match="random_seed"):
        nki.simulate(lambda: nl.random_seed(3))()


def _stored(results):
    outs = []
    for r in results:
        out = nl.ndarray(r.shape, r.dtype, buffer=nl.shared_hbm)
        nl.store(out, r)
        outs.append(out)
    return tuple(outs)


# --------------------------------------------------------------------------------------- data movement

@covers("load", "store", "load_transpose2d", "copy", "transpose", "matmul", "gather_flattened",
        "broadcast_to", "expand_dims", new=True)
def test_movement_and_tensor_engine_ops(rng):
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 16)).astype(np.float32)
    idx = rng.integers(0, 32, (64, 8)).astype(np.uint32)

    def kernel(x, y, i):
        tx, ty, ti = nl.load(x), nl.load(y), nl.load(i)
        mm = nl.copy(nl.matmul(tx, ty, transpose_x=True), dtype=nl.float32)      # x.T @ y
        tr = nl.copy(nl.transpose(tx))
        row = nl.broadcast_to(tx[0:1, :], (64, 32))
        wide = nl.expand_dims(tx, -1)
        return _stored((nl.load_transpose2d(x), mm, tr, nl.gather_flattened(tx, ti), row, wide))
    lt, mm, tr, gathered, row, wide = nki.simulate(kernel)(a, b, idx)
    np.testing.assert_array_equal(lt, a.T)
    np.testing.assert_allclose(mm, a.T @ b, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(tr, a.T)
    np.testing.assert_array_equal(gathered, np.take_along_axis(a, idx.astype(np.int64), axis=1))
    np.testing.assert_array_equal(row, np.broadcast_to(a[0:1], (64, 32)))
    assert wide.shape == (64, 32, 1)
    np.testing.assert_array_equal(wide[..., 0], a)


@covers("shared_constant", "shared_identity_matrix", new=True)
def test_constants(rng):
    c = rng.standard_normal((16, 8)).astype(np.float32)

    def kernel():
        ident = nl.shared_identity_matrix(16, dtype=nl.float32)
        return _stored((nl.load(nl.shared_constant(c)), ident))
    loaded, ident = nki.simulate(kernel)()
    np.testing.assert_array_equal(loaded, c)
    np.testing.assert_array_equal(ident, np.eye(16, dtype=np.float32))


@covers("device_print", new=True)
def test_device_print_prints_the_values(capsys):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) * 1.5
    nki.simulate(lambda a: nl.device_print("values:", nl.load(a)))(x)
    out = capsys.readouterr().out
    assert out.startswith("values:") and str(x[1, 2]) in out


# ----------------------------------------------------------------------------------- creation and memory

DTYPE_NAMES = ["bool_", "int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32", "bfloat16",
               "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu"]


@covers(*DTYPE_NAMES, "tfloat32", "DType", new=True)
def test_dtype_strings_convert_like_numpy(rng):
    table = {nl.bool_: np.bool_, nl.int8: np.int8, nl.int16: np.int16, nl.int32: np.int32, nl.uint8: np.uint8,
             nl.uint16: np.uint16, nl.uint32: np.uint32, nl.float16: np.float16, nl.float32: np.float32,
             nl.bfloat16: ml_dtypes.bfloat16, nl.float8_e4m3: ml_dtypes.float8_e4m3,
             nl.float8_e5m2: ml_dtypes.float8_e5m2, nl.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
             nl.float8_e8m0fnu: ml_dtypes.float8_e8m0fnu}
    assert len(table) == len(DTYPE_NAMES) and nl.tfloat32 == "tfloat32"
    x = rng.uniform(0.5, 8, SHAPE).astype(np.float32)
    for dtype, numpy_type in table.items():
        dtype: nl.DType
        out = simulate(lambda t: nl.copy(t, dtype=dtype), x)
        if dtype == nl.bool_:
            expected = x != 0
        elif np.dtype(numpy_type).kind in "iu":      # fp32 -> int rounds to nearest even (spec/language.md §8.13)
            expected = np.rint(x).astype(numpy_type)
        else:
            expected = x.astype(numpy_type)
        assert out.dtype == np.dtype(numpy_type), dtype
        np.testing.assert_array_equal(out, expected)


@covers("ndarray", "zeros", "ones", "full", "zeros_like", "empty_like", "sbuf", "psum", "hbm", "private_hbm",
        "shared_hbm", "MemoryRegion", "is_hbm", "is_on_chip", "is_psum", "is_sbuf", "NkiTensor", new=True)
def test_creation_and_memory_regions(rng):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    seen = {}

    def kernel(a):
        t = nl.load(a)
        z, o, f = nl.zeros((8, 16), nl.float32), nl.ones((8, 16), nl.float32, buffer=nl.psum), nl.full((8, 16), 2.5,
                                                                                                           nl.float32)
        zl, el = nl.zeros_like(t), nl.empty_like(t)
        el[...] = nl.add(t, f)
        scratch = nl.ndarray((8, 16), nl.float32, buffer=nl.hbm)
        nl.store(scratch, el)
        seen.update(regions=[r is nl.MemoryRegion[r.name] for r in (nl.sbuf, nl.psum, nl.private_hbm,
                                                                    nl.shared_hbm)],
                    hbm_is_private=nl.hbm is nl.private_hbm, kinds=(nl.is_hbm(a.buffer), nl.is_on_chip(o.buffer),
                                                                   nl.is_psum(o.buffer), nl.is_sbuf(t.buffer),
                                                                   nl.is_sbuf(o.buffer)),
                    tensor=isinstance(t, nl.NkiTensor))
        return _stored((z, nl.copy(o), f, zl, nl.load(scratch)))
    z, o, f, zl, back = nki.simulate(kernel)(x)
    np.testing.assert_array_equal(z, np.zeros((8, 16), np.float32))
    np.testing.assert_array_equal(o, np.ones((8, 16), np.float32))
    np.testing.assert_array_equal(f, np.full((8, 16), 2.5, np.float32))
    np.testing.assert_array_equal(zl, np.zeros_like(x))
    np.testing.assert_array_equal(back, x + 2.5)
    assert seen == {"regions": [True] * 4, "hbm_is_private": True, "kinds": (True, True, True, True, False),
                    "tensor": True}


# ------------------------------------------------------------------------------------ loops, SPMD, objects

@covers("affine_range", "sequential_range", "static_range", "dynamic_range", "fori_loop", "while_loop",
        "no_reorder", "ds", "tile_size", new=True)
def test_loops_accumulate_like_python(rng):
    x = rng.standard_normal((128, 64)).astype(np.float32)

    def kernel(a):
        acc = nl.zeros((128, 16), nl.float32)
        for i in nl.affine_range(2):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=nl.load(a[:, nl.ds(i * 16, 16)]), op=nl.add)
        for i in nl.sequential_range(2, 3):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=nl.load(a[:, nl.ds(i * 16, 16)]), op=nl.add)
        for i in nl.static_range(3, 4):
            nisa.tensor_tensor(dst=acc, data1=acc, data2=nl.load(a[:, nl.ds(i * 16, 16)]), op=nl.add)
        count = nl.zeros((1, 1), nl.int32)
        for _ in nl.dynamic_range(3):
            nisa.tensor_scalar(dst=count, data=count, op0=nl.add, operand0=1)

        def body(_):
            nisa.tensor_scalar(dst=count, data=count, op0=nl.add, operand0=10)
        nl.fori_loop(0, 2, body)
        left = nisa.register_alloc(2)

        def step(reg):
            nisa.tensor_scalar(dst=count, data=count, op0=nl.add, operand0=100)
            nisa.register_move(reg, 0)
            return reg
        nl.while_loop(left, step)
        with nl.no_reorder():
            doubled = nl.multiply(acc, 2.0)
        assert nl.tile_size.pmax == 128
        return _stored((doubled, count))
    doubled, count = nki.simulate(kernel)(x)
    np.testing.assert_allclose(doubled, 2 * x.reshape(128, 4, 16).sum(1), rtol=1e-5, atol=1e-5)
    assert count[0, 0] == 3 + 20 + 100


@covers("program_id", "num_programs", "program_ndim", new=True)
def test_spmd_queries_under_lnc2(rng):
    x = rng.standard_normal((2, 64, 8)).astype(np.float32)

    @nki.jit
    def kernel(a):
        out = nl.ndarray(a.shape, a.dtype, buffer=nl.shared_hbm)
        p = nl.program_id(0)
        t = nl.multiply(nl.load(a[p]), float(p + nl.num_programs(0) * 10 + nl.program_ndim() * 100))
        nl.store(out[p], t)
        return out
    out = nki.simulate(kernel)[2](x)
    np.testing.assert_allclose(out[0], x[0] * 120, rtol=1e-6)
    np.testing.assert_allclose(out[1], x[1] * 121, rtol=1e-6)
    np.testing.assert_array_equal(nki.simulate(kernel[2])(x), out)    # both spellings of an LNC=2 launch


@covers("NKIObject", new=True)
def test_nkiobject_fields_carry_kernel_parameters(rng):
    class Scale(nl.NKIObject):
        factor = 1.0
        bias: float = 0.0

    x = rng.standard_normal((4, 8)).astype(np.float32)
    cfg = Scale(factor=3.0)
    out = simulate(lambda t: nl.add(nl.multiply(t, cfg.factor), cfg.bias), x)
    np.testing.assert_allclose(out, 3 * x, rtol=1e-6)


@covers("prelu", "bypass", "average", new=True)
def test_pure_tokens_as_instruction_opcodes(rng):
    x = rng.standard_normal((32, 16)).astype(np.float32)

    def kernel(a):
        t = nl.load(a)
        leaky = nl.ndarray(t.shape, nl.float32)
        nisa.activate2(dst=leaky, op=nl.prelu, data=t, imm0=2.0, imm1=0.0, op0=nl.multiply, op1=nl.bypass,
                       relu_param=0.1)
        mean = nl.ndarray((1, 16), nl.float32)
        nisa.tensor_partition_reduce(dst=mean, op=nl.average, data=t)
        return _stored((leaky, mean))
    leaky, mean = nki.simulate(kernel)(x)
    y = 2 * x
    np.testing.assert_allclose(leaky, np.where(y > 0, y, 0.1 * y), rtol=1e-6)
    np.testing.assert_allclose(mean, x.mean(0, keepdims=True), rtol=1e-5, atol=1e-6)
