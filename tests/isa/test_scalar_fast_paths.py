"""The Scalar Engine's fast paths give what the plain computations give: activation functions that are NumPy
ufuncs evaluated without a float64 copy of the tile, and `engine=` members normalised through a cache."""

import enum
import warnings

import numpy as np
import pytest

import opennki.isa as nisa2
import opennki.legacy.isa as nisa
from opennki.errors import KernelError
from opennki.events import Engine
from opennki.instructions import enums
from opennki.instructions.ops import ACTIVATIONS, evaluate


def _plain(fn, x):
    """`evaluate`'s general path: widen the whole tile to float64, apply the function, round to fp32."""
    return np.asarray(fn.fn(np.asarray(x, dtype=np.float64)), dtype=np.float64).astype(np.float32)


def _specials():
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-38, 3.4e38, -3.4e38, 88.7, 89.0,
                     -103.9, -104.0, 709.0, 1.0, -1.0], np.float32)


@pytest.mark.parametrize("name", [n for n, f in ACTIVATIONS.items() if getattr(f.fn, "ufunc", None) is not None])
def test_ufunc_activations_match_the_widened_tile_bit_for_bit(rng, name):
    fn = ACTIVATIONS[name]
    tiles = [rng.uniform(-1, 1, (128, 512)).astype(np.float32) * np.float32(scale) for scale in (1, 20, 120)]
    tiles.append(np.abs(tiles[1]) + np.float32(1e-3))
    tiles.append(rng.uniform(-3, 3, (7, 1)).astype(np.float32))
    tiles.append(np.resize(_specials(), (16, 40)))
    tiles.append(tiles[0][:, ::3])                       # a strided view
    for x in tiles:
        with warnings.catch_warnings(record=True) as fast_warned:
            warnings.simplefilter("always")
            got = evaluate(fn, x)
        with warnings.catch_warnings(record=True) as plain_warned:
            warnings.simplefilter("always")
            want = _plain(fn, x)
        # the same warnings too (an fp32 overflow of the rounding, as `exp(89)`)
        assert [(w.category, str(w.message)) for w in fast_warned] == \
            [(w.category, str(w.message)) for w in plain_warned]
        assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_ufunc_activation_of_non_fp32_input_takes_the_general_path(rng):
    fn = ACTIVATIONS["exp"]
    for x in (rng.uniform(-3, 3, (4, 9)), rng.integers(-5, 5, (4, 9)), 1.5, [0.5, -2.0]):
        got, want = evaluate(fn, x), _plain(fn, x)
        np.testing.assert_array_equal(np.asarray(got).view(np.uint32), np.asarray(want).view(np.uint32))


def _engine_plain(value):
    """`engine_of` without its cache."""
    if value is None:
        return Engine.UNKNOWN
    if isinstance(value, Engine):
        return value
    return Engine(enums._member(enums.engine, value, "engine").value)


class _Foreign(enum.IntEnum):
    tensor = 1
    bogus = 2


@pytest.mark.parametrize("repeat", [0, 1])
def test_engine_of_matches_the_uncached_normalisation(repeat):
    values = [None, *Engine, *nisa2.engine, *nisa.engine, _Foreign.tensor, "vector", "gpsimd"]
    for value in values:
        assert enums.engine_of(value) is _engine_plain(value), value
    # what the plain path rejects is still rejected, cached members of equal value notwithstanding
    for bad in (1, 3, _Foreign.bogus, nisa.reduce_cmd.reset, nisa2.reduce_cmd.reset, "bogus", 2.0, [1]):
        with pytest.raises(KernelError):
            _engine_plain(bad)
        with pytest.raises(KernelError):
            enums.engine_of(bad)
