"""Kernels for the cost-model tests, written for opennki (both generations' styles)."""

import opennki.isa as nisa
import opennki.language as nl
import opennki.legacy.language as lnl
import opennki.legacy.isa as lisa
from examples.tiled_matmul import tiled_matmul  # noqa: F401  (the textbook tiled matmul, a bundled example)


# -- single instructions (new generation, explicit dst) -------------------------------------------------------

def one_tensor_scalar(a):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0)
    return a


def one_tensor_tensor(a):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.tensor_tensor(dst=y, data1=x, data2=x, op=nl.maximum)
    return a


def one_activation(a):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    y = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    nisa.activation(dst=y, op=nl.exp, data=x)
    nisa.activation(dst=x, op=nl.exp, data=y)
    return a


def one_matmul(s, m):
    st = nl.ndarray(s.shape, dtype=s.dtype, buffer=nl.sbuf)
    mv = nl.ndarray(m.shape, dtype=m.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=s)
    nisa.dma_copy(dst=mv, src=m)
    acc = nl.ndarray((s.shape[1], m.shape[1]), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    return s


def one_iota(a):
    t = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=t, pattern=[[1, a.shape[1]]], offset=0)
    return a


def one_load(a):
    x = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=x, src=a)
    return a


# -- whole kernels (legacy generation) --------------------------------------------------------------------

def stream_copy(a):
    """HBM -> SBUF -> HBM in [128, F] tiles: DMA-bound."""
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    for i in lnl.affine_range(a.shape[0] // 128):
        t = lnl.load(a[i * 128:(i + 1) * 128, :])
        lnl.store(out[i * 128:(i + 1) * 128, :], value=t)
    return out


def matmul_resident(lhsT, rhs, reps):
    """Operands loaded once, then `reps` matmuls into rotating PSUM tiles: Tensor-Engine-bound."""
    out = lnl.ndarray((128, 512), dtype=lnl.float32, buffer=lnl.shared_hbm)
    a = lnl.load(lhsT)
    b = lnl.load(rhs)
    for r in lnl.affine_range(reps):
        acc = lnl.zeros((128, 512), lnl.float32, buffer=lnl.psum)
        acc += lisa.nc_matmul(a, b)
        if r == reps - 1:
            lnl.store(out, value=lnl.copy(acc))
    return out


def scale_fresh(a):
    """load -> scale -> store per tile, each iteration with its own SBUF tiles (they overlap)."""
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    for i in lnl.affine_range(a.shape[0] // 128):
        t = lnl.load(a[i * 128:(i + 1) * 128, :])
        u = lnl.multiply(t, 3.0)
        lnl.store(out[i * 128:(i + 1) * 128, :], value=u)
    return out


def scale_reused(a):
    """The same work through one SBUF buffer pair allocated once: iterations serialise."""
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    t = lnl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=lnl.sbuf)
    u = lnl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=lnl.sbuf)
    for i in lnl.affine_range(a.shape[0] // 128):
        t[...] = lnl.load(a[i * 128:(i + 1) * 128, :])
        u[...] = lnl.multiply(t, 3.0)
        lnl.store(out[i * 128:(i + 1) * 128, :], value=u)
    return out


def softmax_rows(a):
    """Row softmax per [128, F] tile: Scalar, Vector and DMA work."""
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    for i in lnl.affine_range(a.shape[0] // 128):
        x = lnl.load(a[i * 128:(i + 1) * 128, :])
        m = lnl.max(x, axis=1)
        e = lnl.exp(lnl.subtract(x, m))
        s = lnl.sum(e, axis=1)
        lnl.store(out[i * 128:(i + 1) * 128, :], value=lnl.divide(e, s))
    return out


def narrow_loads(a):
    """[128, 16] tiles: 64-byte rows, far below the DMA's efficient size."""
    out = lnl.ndarray(a.shape, dtype=a.dtype, buffer=lnl.shared_hbm)
    for j in lnl.affine_range(a.shape[1] // 16):
        t = lnl.load(a[:, j * 16:(j + 1) * 16])
        lnl.store(out[:, j * 16:(j + 1) * 16], value=t)
    return out


def hwdge_loads(a):
    """Loads issued by hardware DGEs from two engines (the instances serve them in turn), scaled and stored."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(a.shape[0] // 128):
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        engine = nisa.scalar_engine if i % 2 else nisa.gpsimd_engine
        nisa.dma_copy(dst=x, src=a[i * 128:(i + 1) * 128, :], dge_mode=nisa.dge_mode.hwdge, engine=engine)
        nisa.tensor_scalar(dst=y, data=x, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=y, dge_mode=nisa.dge_mode.hwdge)
    return out



def mixed_boxes(a):
    """Tiles accessed whole, in place (read and written as one box by one instruction, then written again:
    the write and the read it waits for end together), then in parts (a storage accessed as one box gets its
    address index: at an operand's search, and within one instruction after an earlier operand's), fresh
    tiles per iteration over addresses earlier ones used."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    half = a.shape[1] // 2
    for i in range(a.shape[0] // 128):
        rows = a[i * 128:(i + 1) * 128, :]
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=rows)
        nisa.tensor_scalar(dst=x, data=x, op0=nl.multiply, operand0=2.0)
        nisa.dma_copy(dst=x, src=rows)
        nisa.tensor_copy(dst=y, src=x)
        nisa.tensor_tensor(dst=x[:, 0:half], data1=x[:, half:], data2=x[:, 0:half], op=nl.add)
        nisa.tensor_scalar(dst=y, data=y, op0=nl.multiply, operand0=y[:, 0:1])
        nisa.tensor_tensor(dst=y, data1=y, data2=x, op=nl.maximum)
        w = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_copy(dst=w[:, half:], src=w[:, 0:half])      # (a shape-only estimate reads no value)
        nisa.tensor_tensor(dst=y[:, half:], data1=y[:, half:], data2=w[:, half:], op=nl.add)
        nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, :], src=y)
    return out



def alternating_tiles(a):
    """Lines that issue instructions of several signatures in turn: views of one tile whose widths (same
    strides) and first partitions alternate, and operators, so plans remembered per kernel line must tell
    them apart."""
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    for i in range(a.shape[0] // 128):
        rows = slice(i * 128, (i + 1) * 128)
        width = a.shape[1] if i % 2 else a.shape[1] // 2
        p = 64 * ((i // 2) % 2)
        x = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((128, a.shape[1]), dtype=a.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[rows, :])
        op = nl.add if i % 3 == 2 else nl.multiply
        nisa.tensor_scalar(dst=y[p:p + 64, 0:width], data=x[p:p + 64, 0:width], op0=op, operand0=2.0)
        nisa.dma_copy(dst=out[rows, 0:width], src=y[:, 0:width])
    return out
