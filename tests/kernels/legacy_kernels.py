"""This project's own legacy-generation (`neuronxcc.nki` style) kernels for the foundation tests.

Written in the style of the official NKI tutorials: kernels take HBM tensors, allocate their outputs in
shared HBM and return them.
"""

import opennki.legacy as nki
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl


@nki.jit
def add_tile(a_input, b_input):
    """One [128, 512] tile: out = a + b."""
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    a_tile = nl.load(a_input)
    b_tile = nl.load(b_input)
    nl.store(out, value=nl.add(a_tile, b_tile))
    return out


@nki.jit
def add_spmd(a_input, b_input):
    """out = a + b over a 2-D grid of programs, each adding one [128, 512] tile."""
    out = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)
    row = nl.program_id(0) * 128
    col = nl.program_id(1) * 512
    i_p = row + nl.arange(128)[:, None]
    i_f = col + nl.arange(512)[None, :]
    a_tile = nl.load(a_input[i_p, i_f])
    b_tile = nl.load(b_input[i_p, i_f])
    nl.store(out[i_p, i_f], value=a_tile + b_tile)
    return out


@nki.jit
def transpose2d(in_tensor, shape2d):
    """Transpose each [P, F] block of the free dims of a [P, F*...] tile: out[p, j*a + i] = in[p, i*b + j]."""
    a, b = shape2d
    out = nl.ndarray(in_tensor.shape, dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(in_tensor.shape[0])[:, None, None]
    i_x = nl.arange(a)[None, :, None]
    i_y = nl.arange(b)[None, None, :]
    tile = nl.load(in_tensor[i_p, i_x * b + i_y])          # [P, a, b]
    nl.store(out[i_p, i_y * a + i_x], value=tile)          # write it back with the free axes swapped
    return out


@nki.jit
def softmax_rows(x):
    """Row softmax over a ragged row count (the last tile is masked with a [128, 1] row mask)."""
    n_rows, n_cols = x.shape
    out = nl.ndarray((n_rows, n_cols), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_f = nl.arange(n_cols)[None, :]
    for t in nl.affine_range((n_rows + 127) // 128):
        rows = t * 128 + i_p
        valid = rows < n_rows                                # [128, 1] predicate, broadcast over the tile
        tile = nl.load(x[rows, i_f], mask=valid)
        row_max = nl.max(tile, axis=[1], mask=valid)         # [128, 1]
        e = nl.exp(nl.subtract(tile, row_max, mask=valid), mask=valid)
        total = nl.sum(e, axis=[1], mask=valid)
        nl.store(out[rows, i_f], value=nl.divide(e, total, mask=valid), mask=valid)
    return out


@nki.jit
def rmsnorm(a_tensor, g_tensor):
    """out = a / sqrt(mean(a^2) + eps) * g, one row tile of 128 at a time."""
    n, d = a_tensor.shape
    out = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(128)[:, None]
    i_d = nl.arange(d)[None, :]
    g = nl.load(g_tensor.reshape((1, d))[nl.arange(1)[:, None], i_d])      # [1, d]
    for t in nl.affine_range((n + 127) // 128):
        rows = t * 128 + i_p
        a = nl.load(a_tensor[rows, i_d], mask=(rows < n))
        sq = nl.square(a, mask=(rows < n))
        # every op masked: the rows past n of the last tile are never loaded (reading them is an
        # uninitialised read, even though the store's mask would discard the result)
        ms = nl.multiply(nl.sum(sq, axis=[1], mask=(rows < n)), 1.0 / d, mask=(rows < n))
        inv = nl.rsqrt(nl.add(ms, 1e-6, mask=(rows < n)), mask=(rows < n))
        normed = nl.multiply(a, inv, mask=(rows < n))
        g_b = g.broadcast_to((128, d))
        nl.store(out[rows, i_d], value=nl.multiply(normed, g_b, mask=(rows < n)), mask=(rows < n))
    return out


@nki.jit
def layernorm_meanvar(x, gamma, beta, eps):
    """Layer norm with explicit mean and variance reductions."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    i_d = nl.arange(d)[None, :]
    g = nl.load(gamma.reshape((1, d))[nl.arange(1)[:, None], i_d]).broadcast_to((128, d))
    b = nl.load(beta.reshape((1, d))[nl.arange(1)[:, None], i_d]).broadcast_to((128, d))
    for t in nl.affine_range(n // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        mean = nl.mean(tile, axis=[1])
        centered = tile - mean
        var = nl.mean(nl.square(centered), axis=[1])
        inv = nl.rsqrt(var + eps)
        y = centered * inv
        nl.store(out[t * 128:(t + 1) * 128, :], value=y * g + b)
    return out


@nki.jit
def layernorm_bn(x, gamma, beta, eps):
    """Layer norm with nisa.bn_stats / nisa.bn_aggr, splitting rows longer than bn_stats_fmax."""
    n, d = x.shape
    out = nl.ndarray((n, d), dtype=x.dtype, buffer=nl.shared_hbm)
    fmax = nl.tile_size.bn_stats_fmax
    chunks = (d + fmax - 1) // fmax
    g = nl.load(gamma.reshape((1, d))).broadcast_to((128, d))
    b = nl.load(beta.reshape((1, d))).broadcast_to((128, d))
    for t in nl.affine_range(n // 128):
        tile = nl.load(x[t * 128:(t + 1) * 128, :])
        stats = nl.ndarray((128, 6 * chunks), dtype=nl.float32)
        for c in nl.affine_range(chunks):
            width = min(fmax, d - c * fmax)
            stats[:, c * 6:(c + 1) * 6] = nisa.bn_stats(tile[:, c * fmax:c * fmax + width], dtype=nl.float32)
        mv = nisa.bn_aggr(stats)                                     # [128, 2]: mean, variance
        mean = mv[:, 0:1]
        inv = nl.rsqrt(mv[:, 1:2] + eps)
        y = nisa.tensor_scalar(tile, nl.subtract, mean, op1=nl.multiply, operand1=inv)
        nl.store(out[t * 128:(t + 1) * 128, :], value=y * g + b)
    return out


@nki.jit
def avgpool2d(in_tensor, pool):
    """2-D average pooling (stride = pool) of [C, H, W] with channels on partitions, via nl.mgrid."""
    c, h, w = in_tensor.shape
    oh, ow = h // pool, w // pool
    out = nl.ndarray((c, oh, ow), dtype=in_tensor.dtype, buffer=nl.shared_hbm)
    i_oh, i_ph, i_ow, i_pw = nl.mgrid[0:oh, 0:pool, 0:ow, 0:pool]
    i_c = nl.arange(c)[:, None, None, None, None]
    tile = nl.load(in_tensor[i_c, pool * i_oh + i_ph, pool * i_ow + i_pw])      # [C, oh, pool, ow, pool]
    total = nl.sum(tile, axis=[2, 4])
    nl.store(out, value=total * (1.0 / (pool * pool)))
    return out


@nki.jit
def matmul_single(lhsT, rhs):
    """One 64x128x512 matmul: result[M, N] = lhsT.T @ rhs with K = 128 on partitions."""
    K, M = lhsT.shape
    _, N = rhs.shape
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    lhs_tile = nl.load(lhsT)
    rhs_tile = nl.load(rhs)
    res_psum = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
    nl.store(result, value=nl.copy(res_psum, dtype=result.dtype))
    return result


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Tiled matmul: affine_range over output tiles, PSUM accumulation over K tiles."""
    K, M = lhsT.shape
    _, N = rhs.shape
    TK, TM, TN = nl.tile_size.pmax, nl.tile_size.gemm_stationary_fmax, nl.tile_size.gemm_moving_fmax
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TM):
        for n in nl.affine_range(N // TN):
            acc = nl.zeros((TM, TN), nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TK):
                lhs_tile = nl.load(lhsT[k * TK:(k + 1) * TK, m * TM:(m + 1) * TM])
                rhs_tile = nl.load(rhs[k * TK:(k + 1) * TK, n * TN:(n + 1) * TN])
                acc += nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
            out_tile = nl.copy(acc, dtype=result.dtype)
            nl.store(result[m * TM:(m + 1) * TM, n * TN:(n + 1) * TN], value=out_tile)
    return result


@nki.jit
def matmul_nested_load(x, y):
    """result = x @ y for x [M <= 128, K <= 128] (not transposed), y [K, N]; loads nested in the call."""
    M, K = x.shape
    _, N = y.shape
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(result, value=nl.copy(nl.matmul(nl.load(x), nl.load(y))))
    return result
