"""Every public name of the legacy `neuronxcc.nki.language` (the SDK 2.26 stub's 125, spec/language.md §1)
is importable and exercised by at least one test that checks its result against NumPy.

The claims come from the `@covers(...)` decorators of the test modules below (tests/language/coverage.py);
each decorated test verifies, while it runs, that the names it claims really ran.
"""

import importlib
import pkgutil

import numpy as np
import pytest

import opennki.legacy.language as nl
from tests.language.coverage import COVERED

LEGACY_NAMES = """
abs add affine_range all all_reduce arange arctan atomic_rmw bfloat16 bfp16 bitwise_and bitwise_or
bitwise_xor bool_ broadcast_to ceil copy cos device_print divide dropout ds empty_like equal erf erf_dx exp
expand_dims finfo float16 float32 float8_e4m3 float8_e5m2 floor fmod fp32 full gather_flattened gelu
gelu_apprx_sigmoid gelu_apprx_tanh gelu_dx gemm_grid gemm_stationary_grid greater greater_equal hbm int16
int32 int8 invert left_shift less less_equal load load_transpose2d log logical_and logical_not logical_or
logical_xor loop_reduce matmul max maximum mean mgrid min minimum mish mod multiply nc ndarray negative
not_equal num_programs ones par_dim power private_hbm prod program_id program_ndim psum rand random_seed
reciprocal relu right_shift rms_norm rsqrt sbuf sequential_range shared_constant shared_hbm
shared_identity_matrix sigmoid sign silu silu_dx sin softmax softplus spmd_dim sqrt square static_cast
static_range store subtract sum tan tanh tfloat32 tile_size transpose trunc uint16 uint32 uint8 var where
zeros zeros_like
""".split()

COVERING_PACKAGES = ("tests.language", "tests.kernels.e2e", "tests.properties", "tests.errors")


def _import_covering_tests():
    for package in COVERING_PACKAGES:
        pkg = importlib.import_module(package)
        for info in pkgutil.iter_modules(pkg.__path__):
            if info.name.startswith("test_"):
                importlib.import_module(f"{package}.{info.name}")


def test_the_list_has_the_125_names_of_the_stub():
    assert len(LEGACY_NAMES) == len(set(LEGACY_NAMES)) == 125


@pytest.mark.parametrize("name", LEGACY_NAMES)
def test_name_is_importable(name):
    assert hasattr(nl, name)
    assert name in nl.__all__


def test_the_module_exports_exactly_the_legacy_names():
    assert sorted(nl.__all__) == sorted(LEGACY_NAMES)


def test_every_name_is_exercised_by_a_numpy_checked_test():
    _import_covering_tests()
    missing = sorted(set(LEGACY_NAMES) - set(COVERED))
    assert not missing, f"legacy nl names without a covering test: {missing}"


def test_a_claim_the_test_never_exercises_fails_the_test():
    from tests.language.coverage import covers
    from tests.language.helpers import apply
    before = {k: set(v) for k, v in COVERED.items()}
    try:
        @covers("exp")
        def claims_exp_but_runs_log():
            apply(nl.log, np.ones((2, 2), np.float32))
        with pytest.raises(AssertionError, match="never ran"):
            claims_exp_but_runs_log()
        with pytest.raises(AssertionError, match="never uses nl.float16"):
            covers("float16")(claims_exp_but_runs_log)
    finally:
        COVERED.clear()
        COVERED.update(before)
