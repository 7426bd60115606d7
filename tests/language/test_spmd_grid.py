"""Legacy SPMD grid annotations: nl.nc, nl.spmd_dim and resolve_grid (spec/language.md §5.8)."""

import pytest

from opennki.errors import KernelError
from opennki._src.spmd import nc, resolve_grid, spmd_dim
from tests.raises import raises_at


@pytest.mark.parametrize("key,sizes", [(4, (4,)), ((2, 3), (2, 3)), ((1,), (1,))])
def test_plain_int_grids_have_no_core_map(key, sizes):
    assert resolve_grid(key) == (sizes, None)


def test_nc_outer_subdim_puts_consecutive_ids_on_one_core():
    sizes, cores_of = resolve_grid((nc(2) * 2, 3))
    assert sizes == (4, 3)
    assert [cores_of((i, 0)) for i in range(4)] == [0, 0, 1, 1]
    assert cores_of.cores == 2


def test_nc_inner_subdim_interleaves():
    sizes, cores_of = resolve_grid((spmd_dim(2, nc(2)), 2))
    assert sizes == (4, 2)
    assert [cores_of((i, 1)) for i in range(4)] == [0, 1, 0, 1]
    assert resolve_grid(2 * nc(2))[0] == (4,)


def test_bare_nc_dimension_maps_its_index_to_the_core():
    sizes, cores_of = resolve_grid((nc(2), 2))
    assert sizes == (2, 2)
    assert [cores_of((i, j)) for i in range(2) for j in range(2)] == [0, 0, 1, 1]


@pytest.mark.parametrize("bad", [0, -1, 2.5, "2"])
def test_bad_sizes_are_rejected(bad):
    with raises_at(KernelError, match="an SPMD grid dimension must be a positive integer"):
        resolve_grid((bad,))


def test_a_bare_zero_grid_launches_one_program_with_a_warning(rng):
    import numpy as np
    import opennki.legacy as nki
    import opennki.legacy.language as nl

    @nki.jit
    def rows_of_program(a):
        out = nl.ndarray((2, 8), dtype=a.dtype, buffer=nl.shared_hbm)
        i = nl.program_id(0)
        nl.store(out[i], nl.multiply(nl.load(a[i]), float(nl.num_programs() + 1)))
        return out

    a = rng.standard_normal((2, 8)).astype(np.float32)
    with pytest.warns(UserWarning, match=r"kernel\[0\].*runs it as kernel\[1\]") as record:
        out = nki.simulate_kernel(rows_of_program[0], a)    # <- launch
    np.testing.assert_array_equal(out[0], a[0] * 2.0)       # one program, id 0, num_programs() == 1
    assert record[0].filename == __file__ and "# <- launch" in open(__file__).read().splitlines()[record[0].lineno - 1]
    with pytest.warns(UserWarning, match="kernel"):
        assert resolve_grid(0) == ((1,), None)
    for bad in ((0,), (2, 0), -1):
        with raises_at(KernelError, match="an SPMD grid dimension must be a positive integer"):
            resolve_grid(bad)


def test_more_cores_than_a_logical_core_has_are_rejected_when_the_grid_is_resolved():
    nc(4), nc(0), spmd_dim()        # checked at launch, so the error ends at the launching line
    with raises_at(KernelError, match="at most 2 physical cores"):
        resolve_grid(nc(4))
    with raises_at(KernelError, match=r"nl.nc\(n\) must be a positive integer"):
        resolve_grid(nc(0) * 2)
    with raises_at(KernelError, match="at least one sub-dimension"):
        resolve_grid(spmd_dim())
    with raises_at(KernelError, match="at most 2"):
        resolve_grid((nc(2), nc(2)))


def test_multi_core_grids_need_trn2_or_newer():
    with raises_at(KernelError, match="err_multi_cores_spmd_not_supported"):
        resolve_grid((nc(2),), target="trn1")
    assert resolve_grid((nc(2),), target="trn2")[0] == (2,)
