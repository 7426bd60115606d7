"""Randomness (spec/isa.md §6.31): nisa.dropout (both generations) and the new generation's rng, rand2 and
set_rng_seed, all drawing from the program's seeded generator."""

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.language as nl2
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import DtypeError, KernelError, ShapeError
from opennki.sim.options import SimOptions
from tests.isa.helpers import rand, rejecting, run, to_hbm
from tests.running import run as run_grid


def _dropout_kernel(prob_tile):
    def kernel(x, prob):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        p = nl.load(prob) if prob_tile else float(prob_tile is False and 0.3)
        nl.store(out, nisa.dropout(nl.load(x), prob=p))
        return out
    return kernel


def test_dropout_drops_the_requested_fraction_without_rescaling(rng):
    x = rand(rng, 128, 512, low=1.0, high=2.0)
    got = run(_dropout_kernel(False), x, np.zeros((1, 1), np.float32))
    dropped = got == 0
    assert abs(dropped.mean() - 0.3) < 0.02
    np.testing.assert_array_equal(got[~dropped], x[~dropped])           # survivors are not rescaled


def test_dropout_per_partition_probabilities(rng):
    x = rand(rng, 128, 256, low=1.0, high=2.0)
    prob = np.repeat(np.array([0.0, 1.0, 0.5, 0.9], np.float32), 32)[:, None]
    got = run(_dropout_kernel(True), x, prob)
    np.testing.assert_array_equal(got[:32], x[:32])
    np.testing.assert_array_equal(got[32:64], 0.0)
    assert abs((got[64:96] == 0).mean() - 0.5) < 0.03
    assert abs((got[96:] == 0).mean() - 0.9) < 0.03


def test_dropout_is_deterministic_per_seed_and_keeps_integer_data(rng):
    x = rng.integers(1, 1000, size=(64, 64)).astype(np.int32)
    prob = np.full((64, 1), 0.5, np.float32)
    a = run(_dropout_kernel(True), x, prob, options=SimOptions(seed=7))
    b = run(_dropout_kernel(True), x, prob, options=SimOptions(seed=7))
    c = run(_dropout_kernel(True), x, prob, options=SimOptions(seed=8))
    assert a.dtype == np.int32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    np.testing.assert_array_equal(a[a != 0], x[a != 0])



def test_dropout_draws_from_the_launch_seed_in_every_program(rng):
    """Each program's generator is PCG64 seeded with the launch seed (made when first drawn from): the kept
    elements are those whose uniform draw reaches the probability, in every program of a grid alike."""
    x = rand(rng, 128, 64, low=1.0, high=2.0)
    prob = np.full((128, 1), 0.4, np.float32)

    def kernel(x, prob):
        out = nl.ndarray((2, 128, 64), dtype=x.dtype, buffer=nl.shared_hbm)
        nl.store(out[nl.program_id(0)], nisa.dropout(nl.load(x), prob=nl.load(prob)))
        return out

    got = run_grid(kernel, x, prob, grid=2, target="trn3", options=SimOptions(seed=11))
    keep = np.random.default_rng(11).random(x.shape, dtype=np.float32) >= np.float32(0.4)
    for program in got:
        np.testing.assert_array_equal(program, np.where(keep, x, 0))

def _seeded_bits(seed_a, seed_b):
    def kernel():
        out = nl2.ndarray((2, 64, 32), dtype=nl2.uint32, buffer=nl2.shared_hbm)
        s = nl2.ndarray((1, 1), dtype=nl2.int32, buffer=nl2.sbuf)
        t = nl2.ndarray((64, 32), dtype=nl2.uint32, buffer=nl2.sbuf)
        for k, seed in enumerate((seed_a, seed_b)):
            nisa2.memset(dst=s, value=seed)
            nisa2.set_rng_seed(src_seeds=s)
            nisa2.rng(dst=t)
            nisa2.dma_copy(dst=out[k], src=t)
        return out
    return kernel


def test_set_rng_seed_reproduces_rng_bits():
    same = run(_seeded_bits(1234, 1234))
    np.testing.assert_array_equal(same[0], same[1])
    other = run(_seeded_bits(1234, 99))
    assert not np.array_equal(other[0], other[1])
    bits = np.unpackbits(same[0].view(np.uint8))
    assert abs(bits.mean() - 0.5) < 0.01                                   # 32 random bits per element


@pytest.mark.parametrize("dtype,np_dtype", [(nl2.int8, np.int8), (nl2.uint16, np.uint16), (nl2.int32, np.int32)])
def test_rng_truncates_to_the_destination_width(dtype, np_dtype):
    def kernel():
        out = nl2.ndarray((32, 256), dtype=dtype, buffer=nl2.shared_hbm)
        t = nl2.ndarray((32, 256), dtype=dtype, buffer=nl2.sbuf)
        nisa2.rng(dst=t, engine=nisa2.gpsimd_engine)
        nisa2.dma_copy(dst=out, src=t)
        return out

    got = run(kernel, target="trn2")
    info = np.iinfo(np_dtype)
    assert got.dtype == np_dtype
    assert int(got.max()) - int(got.min()) > 0.9 * (int(info.max) - int(info.min))      # spans the whole range


def test_rand2_uniform_between_bounds():
    def kernel():
        lo = nl2.ndarray((128, 1), dtype=nl2.float32, buffer=nl2.sbuf)
        t = nl2.ndarray((128, 256), dtype=nl2.float32, buffer=nl2.sbuf)
        nisa2.iota(dst=lo, pattern=[[0, 1]], offset=0, channel_multiplier=1)        # min = partition index
        nisa2.rand2(dst=t, min=lo, max=200.0)
        return to_hbm(t)

    got = run(kernel)
    lo = np.arange(128, dtype=np.float32)[:, None]
    assert np.all(got >= lo) and np.all(got <= 200.0)
    np.testing.assert_allclose(got.mean(1), (lo[:, 0] + 200) / 2, atol=16.0)   # 4.4 sigma


def _prob_range(x):
    nisa.dropout(nl.load(x), prob=1.5)


def _int_data_bf16_prob(x):
    nisa.dropout(nl.zeros((128, 16), dtype=nl.int32), prob=nl.zeros((128, 1), dtype=nl.bfloat16))


def _rng_float(x):
    nisa2.rng(dst=nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf))


def _rng_gpsimd_v2(x):
    nisa2.rng(dst=nl2.ndarray((8, 8), dtype=nl2.int32, buffer=nl2.sbuf), engine=nisa2.gpsimd_engine)


def _rand2_bounds(x):
    nisa2.rand2(dst=nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf), min=1.0, max=1.0)


def _rand2_v3(x):
    nisa2.rand2(dst=nl2.ndarray((8, 8), dtype=nl2.float32, buffer=nl2.sbuf), min=0.0, max=1.0)


def _seed_shape(x):
    nisa2.set_rng_seed(src_seeds=nl2.ndarray((1, 2), dtype=nl2.int32, buffer=nl2.sbuf))


REJECTS = [
    ("dropout_prob_above_one", _prob_range, "trn3", KernelError, r"\[0, 1\]"),
    ("dropout_int_data_needs_fp32_prob", _int_data_bf16_prob, "trn3", DtypeError, "fp32 prob"),
    ("rng_float_dst", _rng_float, "trn3", DtypeError, "integer"),
    ("rng_gpsimd_before_v3", _rng_gpsimd_v2, "trn1", KernelError, "NeuronCore-v3"),
    ("rand2_min_not_below_max", _rand2_bounds, "trn3", KernelError, "min < max"),
    ("rand2_before_v4", _rand2_v3, "trn2", KernelError, "NeuronCore-v4"),
    ("seed_tile_size", _seed_shape, "trn3", ShapeError, r"\[1, 1\]"),
]


test_random_rejects = rejecting(REJECTS)
