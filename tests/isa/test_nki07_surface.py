"""The NKI 0.7 (Neuron SDK 2.33) surface: names and signatures written from the 2.33 API reference
(docs: awsdocs-neuron.readthedocs-hosted.com/en/v2.33.0/nki/api/generated/<name>.html, and for the scalar APIs
and grid classes the pages of the same names under en/latest, which document NKI 0.7), and the behaviour of
each 2.33 signature change checked against NumPy."""

import inspect

import numpy as np
import pytest

import opennki as nki
import opennki.collectives as ncc
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import KernelError

E = inspect.Parameter.empty     # no default
RC = nisa.reduce_cmd
ENG = nisa.engine

# name -> [(parameter, default or E for none, keyword_only)] as the 2.33 reference prints them
SIGNATURES_2_33 = {
    nisa: {
        "scalar_load": [("src", E)],
        "scalar_store": [("dst", E), ("value", E)],
        "scalar_alu": [("data1", E), ("data2", E), ("op", E), ("name", None)],
        "register_alloc": [("x", None)],
        "register_load": [("dst", E), ("src", E)],
        "tensor_tensor": [("dst", E), ("data1", E), ("data2", E), ("op", E), ("engine", ENG.unknown), ("name", None)],
        "tensor_scalar": [("dst", E), ("data", E), ("op0", E), ("operand0", E), ("reverse0", False), ("op1", None),
                          ("operand1", None), ("reverse1", False), ("engine", ENG.unknown), ("name", None)],
        "scalar_tensor_tensor": [("dst", E), ("data", E), ("op0", E), ("operand0", E), ("op1", E), ("operand1", E),
                                 ("reverse0", False), ("reverse1", False), ("reduce_cmd", RC.reset_reduce),
                                 ("reduce_op", Ellipsis), ("reduce_res", None), ("name", None)],
        "tensor_scalar_reduce": [("dst", E), ("data", E), ("op0", E), ("operand0", E), ("reduce_op", E),
                                 ("reduce_res", None), ("reverse0", False), ("reduce_cmd", RC.reset_reduce),
                                 ("reduce_init", None), ("reduce_res_negate", False), ("name", None)],
        "activation": [("dst", E), ("op", E), ("data", E), ("bias", None), ("scale", 1.0), ("reduce_op", None),
                       ("reduce_res", None), ("reduce_cmd", RC.idle), ("engine", ENG.scalar), ("name", None)],
        "activation_reduce": [("dst", E), ("op", E), ("data", E), ("reduce_op", E), ("reduce_res", E), ("bias", None),
                              ("scale", 1.0), ("name", None)],
        "activate2": [("dst", E), ("op", E), ("data", E), ("imm0", E), ("imm1", E), ("op0", E), ("op1", E),
                      ("relu_param", 0.0), ("reverse0", False), ("reverse1", False), ("reduce_op", None),
                      ("reduce_res", None), ("reduce_cmd", RC.idle), ("engine", ENG.scalar), ("name", None)],
    },
    nl: {
        "fori_loop": [("lower", E), ("upper", E), ("body_fun", E), ("step", 1)],
        "tiles": [("source", E), ("tile_shape", None, "kw")],
        "blocks": [("source", E), ("tile_shape", None, "kw"), ("block_shape", E, "kw")],
        "alloc_tiles": [("tile_shape", E, "kw"), ("element_shape", E, "kw"), ("buffer", E, "kw"), ("dtype", E, "kw"),
                        ("address", None, "kw"), ("name", "", "kw")],
        "alloc_blocks": [("tile_shape", E, "kw"), ("block_shape", E, "kw"), ("element_shape", E, "kw"),
                         ("buffer", E, "kw"), ("dtype", E, "kw"), ("address", None, "kw"), ("name", "", "kw")],
        "empty_like": [("x", E), ("dtype", None), ("buffer", None), ("name", ""), ("transpose_axes", None, "kw"),
                       ("address", None, "kw")],
        "contiguous_indices": [("extent", E), ("shard_id", E, "kw"), ("num_shards", E, "kw")],
        "interleaved_indices": [("extent", E), ("shard_id", E, "kw"), ("num_shards", E, "kw")],
        "grid_element_offset": [("offset", E)],
    },
    ncc: {
        **{name: [("srcs", E), ("dsts", E), ("replica_group", E), ("metadata_tensor", E), ("recv_counts_known", False),
                  ("has_rdispls", False), ("priority", None), ("name", None)]
           for name in ("all_to_all_v", "all_gather_v", "all_to_all_v_prepare", "all_gather_v_prepare")},
        "all_to_all_v_trigger": [("prepare_instr", E), ("name", None)],
        "all_gather_v_trigger": [("prepare_instr", E), ("name", None)],
        "all_to_all": [("srcs", E), ("dsts", E), ("replica_group", E), ("collective_dim", E), ("priority", None),
                       ("name", None)],
    },
}
CASES = [(module.__name__, name, params) for module, names in SIGNATURES_2_33.items()
         for name, params in sorted(names.items())]
MODULES = {m.__name__: m for m in SIGNATURES_2_33}

GRID_ATTRIBUTES = ("buffer", "data", "dtype", "element_shape", "index_step_elements", "is_data_representable",
                   "is_remainder", "shape", "tile_shape")


@pytest.mark.parametrize("module,name,params", CASES)
def test_2_33_signatures(module, name, params):
    """Every documented parameter, in order, with its default and kind; opennki may only add a trailing
    `name=None` (the scheduling label every new-generation instruction takes)."""
    sig = inspect.signature(getattr(MODULES[module], name))
    got = list(sig.parameters.values())
    extra = [p.name for p in got[len(params):]]
    assert extra in ([], ["name"]), extra
    for p, (pname, default, *kw) in zip(got, params):
        assert p.name == pname
        assert p.default is default or p.default == default, (pname, p.default)
        assert (p.kind is p.KEYWORD_ONLY) == bool(kw), pname


def test_2_33_names():
    assert isinstance(nisa.NkiScalar, type) and isinstance(nisa.VirtualRegister, type)
    for cls in (nl.NkiGrid, nl.NkiTileGrid, nl.NkiBlockGrid):
        assert all(isinstance(getattr(cls, a, None), property) or a == "tile_shape" for a in GRID_ATTRIBUTES), cls
    assert issubclass(nl.NkiTileGrid, nl.NkiGrid) and issubclass(nl.NkiBlockGrid, nl.NkiGrid)
    assert nl.int64 == "int64" and nl.tile_size.psum_bank_fmax == 512
    assert {"all_to_all_v_prepare", "all_to_all_v_trigger", "all_gather_v_prepare",
            "all_gather_v_trigger"} <= set(ncc.__all__)


@nki.jit
def stt_with_reduction(data, operand1, bias):
    """dst = (data * 2) + operand1; reduce_res = the row sums of dst, then max across a second STT that
    continues the accumulation (reduce_cmd=reduce)."""
    P, F = data.shape
    d, u = nl.ndarray((P, F), dtype=data.dtype, buffer=nl.sbuf), nl.ndarray((P, F), dtype=data.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=d, src=data)
    nisa.dma_copy(dst=u, src=operand1)
    dst = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    sums = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=dst, data=d, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=u,
                              reduce_op=nl.add, reduce_res=sums)
    both = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
    plain = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=plain, data=d, op0=nl.add, operand0=bias, op1=nl.subtract, operand1=u)
    nisa.scalar_tensor_tensor(dst=plain, data=plain, op0=nl.multiply, operand0=1.0, op1=nl.add, operand1=u,
                              reduce_cmd=nisa.reduce_cmd.reduce, reduce_op=nl.add, reduce_res=both)
    outs = [nl.ndarray(t.shape, dtype=nl.float32, buffer=nl.shared_hbm) for t in (dst, sums, both)]
    for o, t in zip(outs, (dst, sums, both)):
        nisa.dma_copy(dst=o, src=t)
    return tuple(outs)


def test_scalar_tensor_tensor_reduces_into_the_accumulators(rng):
    data = rng.standard_normal((64, 32)).astype(np.float32)
    u = rng.standard_normal((64, 32)).astype(np.float32)
    dst, sums, both = stt_with_reduction(data, u, 0.5)
    want = data * 2 + u
    np.testing.assert_allclose(dst, want, rtol=1e-6)
    np.testing.assert_allclose(sums[:, 0], want.sum(axis=1), rtol=1e-4, atol=1e-4)
    # the plain STT leaves the accumulators alone, the reducing one continues the first sum
    np.testing.assert_allclose(both[:, 0], want.sum(axis=1) + (data + 0.5).sum(axis=1), rtol=1e-4, atol=1e-3)


def activation_on(engine, **extra):
    @nki.jit
    def kernel(x):
        t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.activation(dst=t, op=nl.exp, data=t, scale=0.5, engine=engine, **extra)
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=t)
        return out
    return kernel


def test_activation_on_gpsimd_needs_neuroncore_v4_and_no_accumulator(rng, monkeypatch):
    x = rng.standard_normal((32, 16)).astype(np.float32)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn3")
    np.testing.assert_allclose(activation_on(nisa.engine.gpsimd)(x), np.exp(0.5 * x), rtol=1e-6)
    np.testing.assert_array_equal(activation_on(nisa.engine.gpsimd)(x), activation_on(nisa.engine.scalar)(x))
    with pytest.raises(KernelError, match="accumulator is only available on the Scalar Engine"):
        activation_on(nisa.engine.gpsimd, reduce_cmd=nisa.reduce_cmd.reset)(x)
    monkeypatch.setenv("NEURON_PLATFORM_TARGET_OVERRIDE", "trn2")
    with pytest.raises(KernelError, match="needs NeuronCore-v4"):
        activation_on(nisa.engine.gpsimd)(x)
