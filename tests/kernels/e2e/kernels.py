"""This project's own end-to-end kernels in the legacy (`neuronxcc.nki`) style, for tests/kernels/e2e.

Each kernel takes HBM tensors, allocates its outputs in shared HBM and returns them, tiles its work for
128 partitions, and uses the legacy idioms: index tiles from nl.arange, masks, affine / sequential loops,
PSUM accumulation with `+=`, functional nl / nisa calls assigned into buffers.
"""

import math

import numpy as np

import opennki.legacy as nki
import opennki.legacy.compiler as ncc
import opennki.legacy.isa as nisa
import opennki.legacy.language as nl

P = 128


@nki.jit
def flash_attention_fwd(q, k, v):
    """Causal attention o = softmax(q^T k / sqrt(d) + causal mask) v^T, one 128-query block at a time, with
    an online softmax over 128-key blocks (running max m, running sum l, rescaled accumulator).

    q, k: [d, S] (head dim on partitions, d <= 128); v: [S, d]; o: [S, d] fp32.
    """
    d, seq = q.shape
    out = nl.ndarray((seq, d), dtype=nl.float32, buffer=nl.shared_hbm)
    scale = 1.0 / math.sqrt(d)
    i_q, i_k = nl.arange(P)[:, None], nl.arange(P)[None, :]
    for qi in nl.affine_range(seq // P):
        q_tile = nl.load(q[:, qi * P:(qi + 1) * P])                     # [d, 128 queries]
        m = nl.full((P, 1), nl.fp32.min, dtype=nl.float32)               # running row max
        l_sum = nl.zeros((P, 1), dtype=nl.float32)                        # running sum of exp
        acc = nl.zeros((P, d), dtype=nl.float32)                          # running sum of p @ v
        for ki in nl.sequential_range(qi + 1):                          # causal: keys up to the diagonal
            k_tile = nl.load(k[:, ki * P:(ki + 1) * P])
            v_tile = nl.load(v[ki * P:(ki + 1) * P, :])
            scores = nl.multiply(nl.matmul(q_tile, k_tile, transpose_x=True), scale)   # [128 q, 128 k]
            # on the diagonal block, key j > query i is masked out (iterations below it are all visible)
            scores = nisa.affine_select(qi * P + i_q >= ki * P + i_k, scores, nl.fp32.min)
            m_new = nl.maximum(m, nl.max(scores, axis=[1]))
            alpha = nl.exp(nl.subtract(m, m_new))                          # rescales the old state
            probs = nl.exp(nl.subtract(scores, m_new), dtype=v.dtype)      # matmul operands share a dtype
            l_sum[...] = nl.add(nl.multiply(l_sum, alpha), nl.sum(probs, axis=[1]))
            acc[...] = nl.add(nl.multiply(acc, alpha), nl.matmul(probs, v_tile))
            m[...] = m_new
        nl.store(out[qi * P:(qi + 1) * P, :], value=nl.multiply(acc, nl.reciprocal(l_sum)))
    return out


@nki.jit
def rmsnorm_matmul(x, gamma, w, eps):
    """out = (x * rsqrt(mean(x^2) + eps) * gamma) @ w, fused: the normalised tile never leaves SBUF.

    x: [N, D] (N a multiple of 128, D a multiple of 128); gamma: [1, D]; w: [D, F] (F <= 512).
    Sum of squares on the Scalar Engine (activation with a reduction), the normalised tile transposed on the
    Tensor Engine so the matmul contracts over D on the partitions.
    """
    n, dim = x.shape
    _, f = w.shape
    out = nl.ndarray((n, f), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.broadcast_to(nl.load(gamma), shape=(P, dim))
    w_tiles = nl.ndarray((dim // P, nl.par_dim(P), f), dtype=w.dtype)
    for c in nl.affine_range(dim // P):
        w_tiles[c] = nl.load(w[c * P:(c + 1) * P, :])
    for t in nl.affine_range(n // P):
        x_tile = nl.load(x[t * P:(t + 1) * P, :])
        sum_sq = nl.ndarray((P, 1), dtype=nl.float32)
        nisa.activation_reduce(op=nl.square, data=x_tile, reduce_op=np.add, reduce_res=sum_sq)
        inv_rms = nl.rsqrt(nisa.tensor_scalar(sum_sq, np.multiply, 1.0 / dim, op1=np.add, operand1=eps))
        normed = nl.multiply(nl.multiply(x_tile, inv_rms), g)
        acc = nl.zeros((P, f), dtype=nl.float32, buffer=nl.psum)
        for c in nl.affine_range(dim // P):
            normed_t = nisa.nc_transpose(normed[:, c * P:(c + 1) * P])          # [128 d, 128 tokens] in PSUM
            acc += nl.matmul(nl.copy(normed_t), w_tiles[c], transpose_x=True)
        nl.store(out[t * P:(t + 1) * P, :], value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def selective_scan(x, delta, a, b, c):
    """Mamba-style selective state-space scan, channels on partitions, time along the free dim:
        h_n[t] = exp(delta[t] * a[:, n]) * h_n[t-1] + delta[t] * b[n, t] * x[t];  y[t] = sum_n c[n, t] h_n[t]
    x, delta: [C, T] (C <= 128); a: [C, N]; b, c: [N, T]; y: [C, T]. One tensor_tensor_scan per state n.
    """
    channels, steps = x.shape
    n_state = a.shape[1]
    y = nl.ndarray((channels, steps), dtype=nl.float32, buffer=nl.shared_hbm)
    x_t, dt, a_t = nl.load(x), nl.load(delta), nl.load(a)
    dt_x = nl.multiply(dt, x_t)
    total = nl.zeros((channels, steps), dtype=nl.float32)
    for n in nl.affine_range(n_state):
        decay = nisa.activation(op=nl.exp, data=dt, scale=a_t[:, n:n + 1])            # exp(delta * a_n)
        drive = nl.multiply(dt_x, nl.load(b[n:n + 1, :]))                             # delta * b_n * x
        h = nisa.tensor_tensor_scan(decay, drive, 0.0, np.multiply, np.add)         # h = decay * h + drive
        total += nl.multiply(h, nl.load(c[n:n + 1, :]))
    nl.store(y, value=total)
    return y


@nki.jit
def max_pool2d(x, kernel_size, stride):
    """out[c, i, j] = max over the kernel_size x kernel_size window at (stride*i, stride*j); x: [C, H, W] with
    channels on partitions in tiles of 128 (a ragged last tile is masked). The window is one 5-D index
    expression, so the load reads overlapping windows and one reduction over two axes finishes it."""
    channels, height, width = x.shape
    oh, ow = (height - kernel_size) // stride + 1, (width - kernel_size) // stride + 1
    out = nl.ndarray((channels, oh, ow), dtype=x.dtype, buffer=nl.shared_hbm)
    i_p = nl.arange(P)[:, None, None, None, None]
    i_h = nl.arange(oh)[None, :, None, None, None]
    i_w = nl.arange(ow)[None, None, :, None, None]
    i_kh = nl.arange(kernel_size)[None, None, None, :, None]
    i_kw = nl.arange(kernel_size)[None, None, None, None, :]
    o_p, o_h, o_w = nl.arange(P)[:, None, None], nl.arange(oh)[None, :, None], nl.arange(ow)[None, None, :]
    for t in nl.affine_range((channels + P - 1) // P):
        valid = t * P + i_p < channels
        windows = nl.load(x[t * P + i_p, stride * i_h + i_kh, stride * i_w + i_kw], mask=valid)
        pooled = nl.max(windows, axis=[3, 4], mask=valid)
        nl.store(out[t * P + o_p, o_h, o_w], value=pooled, mask=t * P + o_p < channels)
    return out


@nki.jit
def resize_nearest(img, out_h, out_w):
    """Nearest-neighbour resize of each image of img [B, H, W] to [B, out_h, out_w] (out_h <= 128):
    source row = floor(r * H / out_h) and column = floor(s * W / out_w). Rows are gathered by an indirect DMA
    (run-time row indices on the partition dim), columns by a per-partition gather on chip."""
    batch, height, width = img.shape
    out = nl.ndarray((batch, out_h, out_w), dtype=img.dtype, buffer=nl.shared_hbm)
    rows_f = nl.floor(nl.multiply(nisa.iota(nl.arange(out_h)[:, None], dtype=nl.float32), height / out_h))
    rows = nl.copy(rows_f, dtype=nl.int32)                                             # [out_h, 1]
    cols_f = nl.floor(nl.multiply(nisa.iota(nl.arange(out_w)[None, :], dtype=nl.float32), width / out_w))
    cols = nl.copy(nl.broadcast_to(cols_f, shape=(out_h, out_w)), dtype=nl.uint32)      # [out_h, out_w]
    i_w = nl.arange(width)[None, :]
    for b in nl.affine_range(batch):
        picked_rows = nl.load(img[b, rows, i_w])                                       # [out_h, W]
        nl.store(out[b], value=nl.gather_flattened(picked_rows, cols))
    return out


@nki.jit
def embedding_grad(token_ids, grads, vocab):
    """table_grad[v] = sum of grads[i] over tokens i with token_ids[i] == v, by atomic scatter-adds into HBM
    (duplicate ids in one tile accumulate). token_ids: [N, 1] int32; grads: [N, D]; N a multiple of 128."""
    n, dim = grads.shape
    table = nl.ndarray((vocab, dim), dtype=nl.float32, buffer=nl.shared_hbm)
    for r in nl.affine_range((vocab + P - 1) // P):
        rows = r * P + nl.arange(P)[:, None]
        nl.store(table[rows, nl.arange(dim)[None, :]], value=0.0, mask=rows < vocab)
    i_f = nl.arange(dim)[None, :]
    for t in nl.affine_range(n // P):
        ids = nl.load(token_ids[t * P:(t + 1) * P, :])
        nl.atomic_rmw(table[ids, i_f], value=nl.load(grads[t * P:(t + 1) * P, :]), op=np.add)
    return table


@nki.jit
def top16(x):
    """The 16 largest values of each row of x [R, F] (R <= 128, 8 <= F) and their column indices, descending:
    two rounds of max8 + nc_find_index8, the first round's winners knocked out with nc_match_replace8."""
    rows, _ = x.shape
    values = nl.ndarray((rows, 16), dtype=nl.float32, buffer=nl.shared_hbm)
    indices = nl.ndarray((rows, 16), dtype=nl.uint32, buffer=nl.shared_hbm)
    data = nl.load(x)
    for r in nl.static_range(2):
        best = nisa.max8(src=data)
        nl.store(values[:, r * 8:(r + 1) * 8], value=best)
        nl.store(indices[:, r * 8:(r + 1) * 8], value=nisa.nc_find_index8(data=data, vals=best))
        data = nisa.nc_match_replace8(data=data, vals=best, imm=nl.fp32.min)
    return values, indices


@nki.jit
def layernorm_bn(x, gamma, beta, eps):
    """out = (x - mean) / sqrt(var + eps) * gamma + beta over the last dim of x [N, D], with the Vector
    Engine's bn_stats on chunks of at most bn_stats_fmax elements and bn_aggr to combine them."""
    n, dim = x.shape
    fmax = nl.tile_size.bn_stats_fmax
    chunks = (dim + fmax - 1) // fmax
    out = nl.ndarray((n, dim), dtype=x.dtype, buffer=nl.shared_hbm)
    g = nl.broadcast_to(nl.load(gamma), shape=(P, dim))
    bt = nl.broadcast_to(nl.load(beta), shape=(P, dim))
    for t in nl.affine_range((n + P - 1) // P):
        rows = t * P + nl.arange(P)[:, None]
        live = rows < n
        tile = nl.load(x[rows, nl.arange(dim)[None, :]], mask=live)
        stats = nl.ndarray((P, 6 * chunks), dtype=nl.float32)
        for c in nl.static_range(chunks):
            width = min(fmax, dim - c * fmax)
            stats[:, 6 * c:6 * (c + 1)] = nisa.bn_stats(tile[:, c * fmax:c * fmax + width], mask=live)
        mean_var = nisa.bn_aggr(stats, mask=live)                                     # [P, 2]
        inv_std = nl.rsqrt(nl.add(mean_var[:, 1:2], eps, mask=live), mask=live)
        centred = nl.subtract(tile, mean_var[:, 0:1], mask=live)
        result = nl.add(nl.multiply(nl.multiply(centred, inv_std, mask=live), g, mask=live), bt, mask=live)
        nl.store(out[rows, nl.arange(dim)[None, :]], value=result, mask=live)
    return out


@nki.jit
def matmul_direct_alloc(a_t, b):
    """c = a_t^T @ b with every on-chip tensor placed by hand (nki.compiler): double-buffered input tiles
    (modulo allocation over the K blocks), a PSUM accumulator pinned to bank 0, and explicit bias tiles for
    the Scalar Engine. a_t: [K, M] (M <= 128); b: [K, N] (N <= 512); K a multiple of 128."""
    k_total, m = a_t.shape
    _, n = b.shape
    kt = k_total // P
    c = nl.ndarray((m, n), dtype=nl.float32, buffer=nl.shared_hbm)
    a_bufs = nl.ndarray((kt, nl.par_dim(P), m), dtype=a_t.dtype,
                        buffer=ncc.sbuf.mod_alloc(base_addr=0, num_free_tiles=(2,)))
    b_bufs = nl.ndarray((kt, nl.par_dim(P), n), dtype=b.dtype,
                        buffer=ncc.sbuf.mod_alloc(base_addr=2 * m * 4, num_free_tiles=(2,)))
    acc = nl.ndarray((m, n), dtype=nl.float32, buffer=ncc.psum.mod_alloc(base_bank=0))
    zero_bias = nl.ndarray((m, 1), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2 * (m + n) * 4))
    zero_bias[...] = 0.0
    result = nl.ndarray((m, n), dtype=nl.float32, buffer=ncc.sbuf.mod_alloc(base_addr=2 * (m + n) * 4 + 64))
    acc[...] = 0.0
    for ki in nl.affine_range(kt):
        a_bufs[ki] = nl.load(a_t[ki * P:(ki + 1) * P, :])
        b_bufs[ki] = nl.load(b[ki * P:(ki + 1) * P, :])
        acc += nisa.nc_matmul(a_bufs[ki], b_bufs[ki])
    result[...] = nisa.activation(op=nl.copy, data=acc, bias=zero_bias)
    nl.store(c, value=result)
    return c
