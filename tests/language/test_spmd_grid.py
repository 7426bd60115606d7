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
