"""A whole recurrent layer as one autograd node, :class:`RecurrentLayer` (chapter 3.4,
section 4.2's "layers as single nodes").

Run step by step with autograd, an LSTM or GRU layer records a GEMM and a gates node per
time step, and its backward adds each step's share of ``dW_hh`` into the weight's
gradient, T passes over a (G, H) matrix. Here the layer is one node, as in cuDNN:

* forward, for each step: gh = h W_hh^T + b_hh (one GEMM), then the fused gates kernel
  (``sitp.kernels.cpu.fused.lstm`` or ``.gru``), which writes h_t into the output and
  saves the gates;
* backward, from the last step to the first: the gates' backward kernel gives d(gh_t)
  (and d(gi_t)), and dh_{t-1} = d(gh_t) W_hh (+ the direct path of the GRU's z h term);
  after the loop, the weight's gradient is one GEMM over all steps,
  dW_hh = sum_t d(gh_t)^T h_{t-1} = dGH^T X with X the stacked h_{t-1}, and db_hh a
  column sum.

The input projections gi = x W_ih^T + b_ih of all steps come in as one (N, G) tensor,
made by one GEMM before the layer; their gradient goes out the same way. The rows are
those of a packed sequence (``sitp.nn.utils.rnn``): step t holds ``batch_sizes[t]``
rows, non-increasing, at offset ``batch_sizes[0] + ... + batch_sizes[t - 1]``; a padded
batch is the case of equal sizes. Step t reads its h_{t-1} from the first rows of the
previous step's output (going backward in time, the rows of sequences that start at t
come from h0); the forward pass copies each step's h_{t-1} (and c_{t-1}) into X (and
C), which the backward reads.
"""

from __future__ import annotations

import numpy as np

from sitp.autograd.function import Function
from sitp.kernels.cpu import blas
from sitp.kernels.cpu import ops as cpu
from sitp.kernels.cpu.fused import gru as cpu_gru
from sitp.kernels.cpu.fused import linear as cpu_linear
from sitp.kernels.cpu.fused import lstm as cpu_lstm


class RecurrentLayer(Function):
    """(out (N, H), h_T, c_T) for an LSTM or GRU layer in one direction.

    ``forward(ctx, gi_NG, h0_BH, c0_BH, w_hh, b_hh, mode, reverse, batch_sizes)``:
    ``mode`` is ``'LSTM'`` (gates i, f, g, o; G = 4H) or ``'GRU'`` (r, z, n; G = 3H; c0
    is None and no c_T is returned); ``reverse`` runs from the last step to the first;
    ``batch_sizes`` is a tuple of ints. out's rows are those of gi; h_T[b] is sequence
    b's h after its last step in the direction of travel.
    """

    @staticmethod
    def forward(ctx, gi_NG, h0, c0, w_hh, b_hh, mode, reverse, batch_sizes):
        gi_NG, h0 = gi_NG.contiguous(), h0.contiguous()
        (N, G), (B, H), dt = gi_NG.shape, h0.shape, h0.dtype
        lstm = mode == "LSTM"
        offs = np.cumsum((0,) + batch_sizes)
        out = cpu._new((N, H), dt, h0)
        # X (and C): each step's h_{t-1} (c_{t-1}); then what the gates kernels save:
        # LSTM: c_t, the gates (i, f, g, o), tanh(c_t); GRU: r, z, n, W_hn h + b_hn
        kept = [cpu._new((N, H), dt, h0) for _ in range(2 if lstm else 1)]
        saved = [cpu._new((N, G if lstm and k == 1 else H), dt, h0) for k in range(3 + (not lstm))]
        gi, o_ = cpu.flat(gi_NG).reshape(N, G), out._storage.reshape(N, H)
        X = kept[0]._storage.reshape(N, H)
        C = kept[1]._storage.reshape(N, H) if lstm else None
        sv = [a._storage.reshape(N, -1) for a in saved]
        h0_ = cpu.flat(h0).reshape(B, H)
        c0_ = cpu.flat(c0.contiguous()).reshape(B, H) if lstm else None
        w = cpu.as_numpy(w_hh).T  # (H, G), read in place
        bias = None if b_hh is None else cpu.as_numpy(b_hh)
        T = len(batch_sizes)
        steps = range(T - 1, -1, -1) if reverse else range(T)
        prev = None
        for t in steps:
            b, r = batch_sizes[t], slice(offs[t], offs[t] + batch_sizes[t])
            for dst, src, start in ((X, o_, h0_), (C, sv[0], c0_)) if lstm else ((X, o_, h0_),):
                if prev is None:  # the first step: h0
                    dst[r] = start[:b]
                else:  # the previous step's first rows, and h0 for sequences that start here
                    pb = min(b, batch_sizes[prev])
                    dst[offs[t] : offs[t] + pb] = src[offs[prev] : offs[prev] + pb]
                    dst[offs[t] + pb : offs[t] + b] = start[pb:b]
            gh = blas.matmul(X[r], w, bias).reshape(-1)
            if lstm:
                cpu_lstm.lstm_gates_kernel(
                    gi[r].reshape(-1),
                    gh,
                    C[r].reshape(-1),
                    H,
                    o_[r].reshape(-1),
                    *(a[r].reshape(-1) for a in sv),
                )
            else:
                cpu_gru.gru_gates_kernel(
                    gi[r].reshape(-1),
                    gh,
                    X[r].reshape(-1),
                    H,
                    o_[r].reshape(-1),
                    *(a[r].reshape(-1) for a in sv),
                )
            prev = t
        ctx.save_for_backward(w_hh, out, *kept, *saved)
        ctx.mode, ctx.reverse, ctx.sizes = mode, reverse, batch_sizes
        ctx.has_bias = b_hh is not None
        finals = [_final_rows(o_, batch_sizes, offs, reverse, B)]
        if lstm:
            finals.append(_final_rows(sv[0], batch_sizes, offs, reverse, B))
        return (out, *(h0._make(f.reshape(-1), (B, H), (H, 1), 0, dt) for f in finals))

    @staticmethod
    def backward(ctx, grads):
        lstm = ctx.mode == "LSTM"
        w_hh, out, *rest = ctx.saved_tensors
        kept, saved = (rest[:2], rest[2:]) if lstm else (rest[:1], rest[1:])
        sizes, reverse = ctx.sizes, ctx.reverse
        (N, H), G, dt = out.shape, w_hh.shape[0], out.dtype
        B, T = sizes[0], len(sizes)
        np_dt = out._storage.dtype
        offs = np.cumsum((0,) + sizes)

        def dense(g, shape):  # an incoming gradient as a fresh array (zeros for None)
            if g is None:
                return np.zeros(shape, np_dt)
            return cpu.flat(g.to(dt).contiguous()).reshape(shape).copy()

        # dO (dC): the gradient reaching each step's h_t (c_t): from the output, from the
        # final state, and (filled in as the loop goes) from the step that reads it next
        dO = dense(grads[0], (N, H))
        _final_rows(dO, sizes, offs, reverse, B, add=dense(grads[1], (B, H)))
        dC = None
        if lstm:
            dC = np.zeros((N, H), np_dt)
            _final_rows(dC, sizes, offs, reverse, B, add=dense(grads[2], (B, H)))
        dh0, dc0 = np.zeros((B, H), np_dt), (np.zeros((B, H), np_dt) if lstm else None)
        dgh = cpu._new((N, G), dt, out)
        dgi = dgh if lstm else cpu._new((N, G), dt, out)
        dgh_, dgi_ = dgh._storage.reshape(N, G), dgi._storage.reshape(N, G)
        X = kept[0]._storage.reshape(N, H)
        C = kept[1]._storage.reshape(N, H) if lstm else None
        sv = [a._storage.reshape(N, -1) for a in saved]
        w = cpu.as_numpy(w_hh)  # (G, H)
        order = list(range(T - 1, -1, -1) if reverse else range(T))
        for i in range(T - 1, -1, -1):  # the forward pass's steps, last first
            t, b = order[i], sizes[order[i]]
            r = slice(offs[t], offs[t] + b)
            if lstm:
                dc_prev = np.empty((b, H), np_dt)
                cpu_lstm.lstm_gates_backward_kernel(
                    dO[r].reshape(-1),
                    dC[r].reshape(-1),
                    C[r].reshape(-1),
                    sv[1][r].reshape(-1),
                    sv[2][r].reshape(-1),
                    H,
                    dgh_[r].reshape(-1),
                    dc_prev.reshape(-1),
                )
                d_prev = blas.matmul(dgh_[r], w)
            else:
                d_prev = np.empty((b, H), np_dt)  # first the direct path, z dh'
                cpu_gru.gru_gates_backward_kernel(
                    dO[r].reshape(-1),
                    X[r].reshape(-1),
                    *(a[r].reshape(-1) for a in sv),
                    H,
                    dgi_[r].reshape(-1),
                    dgh_[r].reshape(-1),
                    d_prev.reshape(-1),
                )
                d_prev += blas.matmul(dgh_[r], w)
            # send dh_{t-1} (dc_{t-1}) where step t read h_{t-1} from
            pairs = ((dO, dh0, d_prev), (dC, dc0, dc_prev)) if lstm else ((dO, dh0, d_prev),)
            for into, start, d in pairs:
                if i == 0:
                    start[:b] += d
                else:
                    p = order[i - 1]
                    pb = min(b, sizes[p])
                    into[offs[p] : offs[p] + pb] += d[:pb]
                    start[pb:b] += d[pb:]
        need = ctx.needs_input_grad
        dw = db = None
        if need[3]:  # dW_hh = dGH^T X: every step's share in one GEMM
            dw_ = blas.matmul(dgh_.T, X)
            dw = w_hh._make(dw_.reshape(-1), (G, H), (H, 1), 0, dt)
        if ctx.has_bias and need[4]:
            db = cpu._new((G,), dt, out)
            cpu_linear.column_sum(dgh_, db._storage)

        def as_tensor(a):
            return out._make(a.reshape(-1), (B, H), (H, 1), 0, dt)

        return (
            dgi if need[0] else None,
            as_tensor(dh0) if need[1] else None,
            as_tensor(dc0) if lstm and need[2] else None,
            dw,
            db,
        )


def _final_rows(rows, sizes, offs, reverse, B, add=None):
    """The rows of each sequence's last step in the direction of travel, as a (B, H)
    array; with ``add``, add ``add``'s rows into those rows instead."""
    if reverse:  # every sequence ends at step 0, whose rows are all B
        if add is not None:
            rows[:B] += add
        return rows[:B].copy()
    T = len(sizes)
    final = None if add is not None else np.empty((B, rows.shape[1]), rows.dtype)
    for t in range(T):  # the sequences b in [sizes[t + 1], sizes[t]) end at step t
        lo, hi = (sizes[t + 1] if t + 1 < T else 0), sizes[t]
        if lo < hi:
            if add is not None:
                rows[offs[t] + lo : offs[t] + hi] += add[lo:hi]
            else:
                final[lo:hi] = rows[offs[t] + lo : offs[t] + hi]
    return final


def fits(mode, gi_NG, h0, c0, w_hh, b_hh) -> bool:
    """Whether :class:`RecurrentLayer` takes these: CPU floats of one dtype, no empty
    dims, and a fused kernel for ``mode`` (LSTM or GRU)."""
    dt = h0.dtype
    tensors = [t for t in (gi_NG, h0, c0, w_hh, b_hh) if t is not None]
    return (
        mode in ("LSTM", "GRU")
        and dt.is_floating_point
        and all(t.dtype is dt for t in tensors)
        and gi_NG.numel() > 0
        and h0.shape[-1] > 0
        and all(isinstance(t._storage, np.ndarray) for t in tensors)
    )
