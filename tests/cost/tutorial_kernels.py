"""Kernels written for the ranking tests in the style of the official NKI tutorials' optimisation sequences
(matrix multiplication, layernorm): each step makes the change the tutorial describes, in this project's
own code. Legacy generation, shape-only estimates."""

import numpy as np

import opennki.legacy.isa as nisa
import opennki.legacy.language as nl

TK, TM, TN = 128, 128, 512          # contraction tile, stationary free tile, moving free tile


# -- matrix multiplication: out[M, N] = lhsT[K, M].T @ rhs[K, N] --------------------------------------------

def mm_tiled(lhsT, rhs):
    """Step 0: every output tile loads its own operand tiles inside the contraction loop."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                a = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                b = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                acc += nisa.nc_matmul(a, b)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=nl.copy(acc, dtype=out.dtype))
    return out


def mm_hoisted(lhsT, rhs):
    """Step 1: the stationary column of an output row is loaded once per row, outside the n loop."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        a = nl.ndarray((K // TK, nl.par_dim(TK), TM), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TK):
            a[k] = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                b = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                acc += nisa.nc_matmul(a[k], b)
            nl.store(out[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=nl.copy(acc, dtype=out.dtype))
    return out


def mm_blocked(lhsT, rhs, bm=2, bn=2):
    """Step 2: blocks of bm x bn output tiles share their loaded operands (each loaded once per block)."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for mb in nl.affine_range(M // (TM * bm)):
        a = nl.ndarray((K // TK, nl.par_dim(TK), TM * bm), dtype=lhsT.dtype, buffer=nl.sbuf)
        for k in nl.affine_range(K // TK):
            a[k] = nl.load(lhsT[k * TK:(k + 1) * TK, mb * TM * bm:(mb + 1) * TM * bm])
        for nb in nl.affine_range(N // (TN * bn)):
            b = nl.ndarray((K // TK, nl.par_dim(TK), TN * bn), dtype=rhs.dtype, buffer=nl.sbuf)
            for k in nl.affine_range(K // TK):
                b[k] = nl.load(rhs[k * TK:(k + 1) * TK, nb * TN * bn:(nb + 1) * TN * bn])
            for i in nl.affine_range(bm):
                for j in nl.affine_range(bn):
                    acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TK):
                        acc += nisa.nc_matmul(a[k, :, i * TM:(i + 1) * TM], b[k, :, j * TN:(j + 1) * TN])
                    rows = (mb * bm + i) * TM
                    cols = (nb * bn + j) * TN
                    nl.store(out[rows:rows + TM, cols:cols + TN], value=nl.copy(acc, dtype=out.dtype))
    return out


def mm_fully_blocked(lhsT, rhs, bm=4, bn=2, bk=8):
    """Step 3: the contraction is blocked too; partial sums of a bm x bn block live in SBUF across k blocks,
    so each operand block is loaded once per block pair, and results leave in wide coalesced stores."""
    K, M = lhsT.shape
    N = rhs.shape[1]
    out = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for nb in nl.affine_range(N // (TN * bn)):
        for mb in nl.affine_range(M // (TM * bm)):
            part = nl.zeros((bm, nl.par_dim(TM), TN * bn), dtype=nl.float32, buffer=nl.sbuf)
            for kb in nl.sequential_range(K // (TK * bk)):
                a = nl.ndarray((bk, nl.par_dim(TK), TM * bm), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((bk, nl.par_dim(TK), TN * bn), dtype=rhs.dtype, buffer=nl.sbuf)
                for k in nl.affine_range(bk):
                    row = (kb * bk + k) * TK
                    a[k] = nl.load(lhsT[row:row + TK, mb * TM * bm:(mb + 1) * TM * bm])
                    b[k] = nl.load(rhs[row:row + TK, nb * TN * bn:(nb + 1) * TN * bn])
                for i in nl.affine_range(bm):
                    for j in nl.affine_range(bn):
                        acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
                        for k in nl.affine_range(bk):
                            acc += nisa.nc_matmul(a[k, :, i * TM:(i + 1) * TM], b[k, :, j * TN:(j + 1) * TN])
                        part[i, :, j * TN:(j + 1) * TN] = nl.add(part[i, :, j * TN:(j + 1) * TN], acc)
            for i in nl.affine_range(bm):
                rows = (mb * bm + i) * TM
                nl.store(out[rows:rows + TM, nb * TN * bn:(nb + 1) * TN * bn],
                         value=nl.copy(part[i], dtype=out.dtype))
    return out


MATMUL_STEPS = (mm_tiled, mm_hoisted, mm_blocked, mm_fully_blocked)


# -- layernorm over rows: out = (x - mean) / sqrt(var + eps) * gamma + beta ---------------------------------

def layernorm_v1(x, gamma, beta):
    """v1: mean and variance by separate reductions and element-wise passes."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma.reshape((1, d)))
    bt = nl.load(beta.reshape((1, d)))
    for i in nl.affine_range((n + 127) // 128):
        ip = i * 128 + nl.arange(128)[:, None]
        jf = nl.arange(d)[None, :]
        t = nl.load(x[ip, jf], mask=(ip < n))
        mean = nl.mean(t, axis=[1], mask=(ip < n))
        shifted = nl.subtract(t, mean, mask=(ip < n))
        var = nl.mean(nl.multiply(shifted, shifted, mask=(ip < n)), axis=[1], mask=(ip < n))
        rstd = nl.rsqrt(nl.add(var, 1e-5, mask=(ip < n)), mask=(ip < n))
        normed = nl.multiply(shifted, rstd, mask=(ip < n))
        scaled = nl.multiply(normed, g.broadcast_to((128, d)), mask=(ip < n))
        nl.store(out[ip, jf], value=nl.add(scaled, bt.broadcast_to((128, d)), mask=(ip < n)), mask=(ip < n))
    return out


def layernorm_v2(x, gamma, beta):
    """v2: bn_stats / bn_aggr give mean and variance in one pass; the shift and scale are one
    tensor_scalar."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.load(gamma.reshape((1, d)))
    bt = nl.load(beta.reshape((1, d)))
    chunk = min(d, 512)
    for i in nl.affine_range((n + 127) // 128):
        ip = i * 128 + nl.arange(128)[:, None]
        jf = nl.arange(d)[None, :]
        t = nl.load(x[ip, jf], mask=(ip < n))
        stats = nl.ndarray((128, 6 * (d // chunk)), dtype=np.float32)
        for c in nl.affine_range(d // chunk):
            jc = nl.arange(chunk)[None, :]
            stats[ip - i * 128, c * 6 + nl.arange(6)[None, :]] = nisa.bn_stats(t[ip - i * 128, c * chunk + jc],
                                                                             mask=(ip < n))
        mv = nisa.bn_aggr(stats, mask=(ip < n))
        rstd = nl.rsqrt(nl.add(mv[:, 1:2], 1e-5, mask=(ip < n)), mask=(ip < n))
        normed = nisa.tensor_scalar(t, np.subtract, mv[:, 0:1], op1=np.multiply, operand1=rstd, mask=(ip < n))
        scaled = nl.multiply(normed, g.broadcast_to((128, d)), mask=(ip < n))
        nl.store(out[ip, jf], value=nl.add(scaled, bt.broadcast_to((128, d)), mask=(ip < n)), mask=(ip < n))
    return out


LAYERNORM_STEPS = (layernorm_v1, layernorm_v2)
