"""`nki.compiler` direct allocation: placements honoured by the allocator (addresses in events), modulo
allocation of block tensors, the allocated-kernel rules and the kernel decorators
(spec/entrypoints.md §8)."""

import numpy as np
import pytest

import opennki.legacy as nki
import opennki.legacy.compiler as ncc
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl
from opennki.errors import AllocationError, KernelError
from opennki.events import TensorAllocated
from opennki.listeners import Recorder
from tests.language.helpers import run
from tests.raises import raises_at


def _double_buffered(x):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    bufs = nl.ndarray((4, nl.par_dim(128), 64), dtype=x.dtype,
                      buffer=ncc.sbuf.mod_alloc(base_addr=1024, num_free_tiles=(2,)))
    bias = nl.ndarray((128, 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
    bias[...] = 0.0
    for b in nl.affine_range(4):
        res = nl.ndarray((128, 64), dtype=x.dtype, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
        bufs[b] = nl.load(x[b * 128:(b + 1) * 128, :])
        res[...] = nisa.activation(op=nl.exp, data=bufs[b], bias=bias)
        nl.store(out[b * 128:(b + 1) * 128, :], value=res)
    return out


def test_mod_alloc_places_physical_tiles_modulo_and_results_match(rng):
    x = rng.standard_normal((512, 64)).astype(np.float32)
    rec = Recorder()
    out = nki.jit(_double_buffered).launch((x,), listeners=[rec])
    np.testing.assert_allclose(out, np.exp(x), rtol=1e-6)
    sbuf = [(e.name, e.byte_start) for e in rec.of_type(TensorAllocated) if e.kind.name == "SBUF"
            and e.size_bytes == 64 * 4 and e.byte_start >= 1024 and e.byte_start < 4096]
    assert sorted({a for _, a in sbuf}) == [1024, 1024 + 256]     # two physical tiles: blocks 0/2 and 1/3


def test_psum_mod_alloc_rotates_banks(rng):
    a = rng.standard_normal((4, 64, 32)).astype(np.float32)
    rec = Recorder()

    def kernel(a):
        out = nl.ndarray((4, 32, 32), dtype=nl.float32, buffer=nl.shared_hbm)
        ps = nl.ndarray((4, nl.par_dim(32), 32), dtype=nl.float32,
                        buffer=ncc.psum.mod_alloc(base_bank=2, num_bank_tiles=(2,)))
        sb = nl.ndarray((4, nl.par_dim(64), 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0,
                                                                                              num_free_tiles=(4,)))
        for i in nl.affine_range(4):
            res = nl.ndarray((32, 32), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=4096))
            sb[i] = nl.load(a[i])
            ps[i] = nisa.nc_matmul(sb[i], sb[i])
            res[...] = nl.copy(ps[i])
            nl.store(out[i], value=res)
        return out
    out = nki.jit(kernel).launch((a,), listeners=[rec])
    np.testing.assert_allclose(out, np.einsum("ikm,ikn->imn", a, a), rtol=1e-4, atol=1e-4)
    banks = {e.byte_start // 2048 for e in rec.of_type(TensorAllocated) if e.kind.name == "PSUM"}
    assert banks == {2, 3}


def test_alloc_with_a_placement_function(rng):
    x = rng.standard_normal((2, 32, 16)).astype(np.float32)
    calls = []

    def place(idx, pdim_size, fdim_size):
        calls.append((idx, pdim_size, fdim_size))
        return (32 * idx[0], 512)

    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((2, nl.par_dim(32), 16), dtype=nl.float32, buffer=ncc.sbuf.alloc(place))
        for i in nl.affine_range(2):
            t[i] = nl.load(x[i])
            nl.store(out[i], value=t[i])
        return out
    np.testing.assert_array_equal(run(kernel, x), x)
    assert ((0,), 32, 64) in calls and ((1,), 32, 64) in calls


@pytest.mark.parametrize("buffer,match", [
    (ncc.sbuf.alloc(lambda idx, p, f: (16, 0)), "must start at partition 0"),
    (ncc.sbuf.mod_alloc(base_addr=3), "address 3 .* must be aligned to 4 bytes"),
    (ncc.sbuf.mod_alloc(base_addr=10 ** 7), "end within the 245760 usable bytes"),
    (ncc.psum.mod_alloc(base_bank=8), "PSUM bank 8 does not exist"),
    (ncc.psum.alloc(lambda idx, p, f: (0, 0, 64)), "PSUM tiles start at partition 0 and byte 0 of their bank"),
])
def test_illegal_placements_are_rejected(buffer, match):
    with raises_at(AllocationError, match=match, line="nl.ndarray((128, 16)"):
        run(lambda: nl.ndarray((128, 16), dtype=nl.float32, buffer=buffer))


def test_allocated_kernel_rules():
    def mixing():
        nl.ndarray((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    with raises_at(AllocationError, match="mix"):
        run(mixing)
    with raises_at(KernelError, match="err_tensor_creation_on_scratchpad_with_init_value_not_supported"):
        run(lambda: nl.zeros((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0)))

    def exp_without_bias(x):
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[...] = nl.load(x)
        t[...] = nl.exp(t)
    with raises_at(KernelError, match="err_bias_tensor_must_be_specified_in_allocation"):
        run(exp_without_bias, np.zeros((128, 4), np.float32))

    def pe_transpose(x):
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[...] = nl.load(x)
        nl.transpose(t)
    with raises_at(KernelError, match="err_transpose_on_tensor_engine_not_allowed_in_allocated_kernel"):
        run(pe_transpose, np.zeros((128, 4), np.float32))


def test_force_auto_alloc_ignores_direct_allocation(rng):
    x = rng.standard_normal((128, 4)).astype(np.float32)

    @ncc.force_auto_alloc
    @nki.jit
    def kernel(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        t = nl.ndarray((128, 4), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=0))
        t[...] = nl.load(x)
        nl.store(out, value=nl.exp(t))         # allowed: the kernel is not an allocated kernel any more
        return out
    np.testing.assert_allclose(kernel(x), np.exp(x), rtol=1e-6)


def test_stack_allocator_needs_skip_middle_end_transformations(rng):
    x = rng.standard_normal((4, 4)).astype(np.float32)

    @ncc.enable_stack_allocator(log_level=20)
    @nki.jit
    def alone(x):
        return x
    with raises_at(KernelError, match="skip_middle_end_transformations"):
        alone(x)

    @ncc.enable_stack_allocator
    @ncc.skip_middle_end_transformations
    @nki.jit
    def both(x):
        out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
        with ncc.allocation_scope(), ncc.multi_buffer(2), ncc.no_reorder():
            nl.store(out, value=nl.load(x))
        return out
    np.testing.assert_array_equal(both(x), x)
