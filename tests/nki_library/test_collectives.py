"""`nki.collectives` on the one simulated device (spec/entrypoints.md §10): over a replica group holding only
rank 0 a collective copies each source to its destination; groups with other ranks need devices opennki
does not have."""

import numpy as np
import pytest

import opennki as nki
import opennki.collectives as ncc
import opennki.isa as nisa
import opennki.language as nl
from opennki.errors import KernelError, ShapeError, UnsupportedError
from tests.raises import raises_at


@nki.jit
def reduce_then_gather(x, y, groups):
    """HBM all_reduce of two tensors at once, then an SBUF all_gather of x + y, over `groups`."""
    group = ncc.ReplicaGroup(groups)
    rx = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ry = nl.ndarray(y.shape, dtype=y.dtype, buffer=nl.shared_hbm)
    ncc.all_reduce(srcs=[x, y], dsts=[rx, ry], replica_group=group, op=nl.add)
    a = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    b = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=rx)
    nisa.dma_copy(dst=b, src=ry)
    nisa.tensor_tensor(dst=a, data1=a, data2=b, op=nl.add)
    gathered = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    ncc.all_gather(srcs=[a], dsts=[gathered], replica_group=group, collective_dim=1)
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=gathered)
    return out


@pytest.mark.parametrize("groups", [((0,),), ((0,), (1, 2))])
def test_collectives_among_one_rank_copy(rng, groups):
    x = rng.standard_normal((8, 16)).astype(np.float32)
    y = rng.standard_normal((8, 16)).astype(np.float32)
    np.testing.assert_array_equal(reduce_then_gather(x, y, groups), x + y)


@nki.jit
def reduce_into(x, out_shape: tuple, op_name: str, groups):
    out = nl.ndarray(out_shape, dtype=x.dtype, buffer=nl.shared_hbm)
    ncc.all_reduce(srcs=[x], dsts=[out], replica_group=ncc.ReplicaGroup(groups), op=getattr(nl, op_name))
    return out


@pytest.mark.parametrize("out_shape, op_name, groups, error, message", [
    ((4, 4), "add", ((0, 1),), UnsupportedError, "needs 2 devices"),
    ((4, 4), "add", ((1,),), KernelError, "does not contain"),
    ((4, 4), "multiply", ((0,),), KernelError, "op"),
    ((4, 2), "add", ((0,),), ShapeError, "same shape"),
])
def test_collective_errors_name_the_kernel_line(out_shape, op_name, groups, error, message):
    with raises_at(error, match=message) as exc:
        reduce_into(np.zeros((4, 4), np.float32), out_shape, op_name, groups)
    assert "ncc.all_reduce(" in exc.value.location.source


def test_replica_groups_do_not_overlap():
    with raises_at(KernelError, match="non-overlapping"):
        ncc.ReplicaGroup([[0, 1], [1]])
