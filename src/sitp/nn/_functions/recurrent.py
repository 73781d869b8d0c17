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

The input projections gi = x W_ih^T + b_ih of all steps come in as one (T, B, G) tensor,
made by one GEMM before the layer; their gradient goes out the same way.
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
    """(out (T, B, H), h_T, c_T) for an LSTM or GRU layer in one direction.

    ``forward(ctx, gi_TBG, h0_BH, c0_BH, w_hh, b_hh, mode, reverse)``: ``mode`` is
    ``'LSTM'`` (gates i, f, g, o; G = 4H) or ``'GRU'`` (r, z, n; G = 3H; c0 is None and
    c_T too); ``reverse`` runs from the last step to the first. out[t] is h after step
    t, in time order either way.
    """

    @staticmethod
    def forward(ctx, gi_TBG, h0, c0, w_hh, b_hh, mode, reverse):
        gi_TBG, h0 = gi_TBG.contiguous(), h0.contiguous()
        T, B, G = gi_TBG.shape
        H, dt = h0.shape[-1], h0.dtype
        lstm = mode == "LSTM"
        out = cpu._new((T, B, H), dt, h0)
        # what the backward reads, per step: rows of the gates kernels' saved values
        saved = [
            cpu._new((T, B, G if lstm and k == 1 else H), dt, h0) for k in range(3 + (not lstm))
        ]
        gi, o_ = cpu.flat(gi_TBG).reshape(T, -1), out._storage.reshape(T, -1)
        sv = [s._storage.reshape(T, -1) for s in saved]
        w = cpu.as_numpy(w_hh).T  # (H, G), read in place
        b = None if b_hh is None else cpu.as_numpy(b_hh)
        h_prev = cpu.flat(h0)
        c_prev = cpu.flat(c0.contiguous()) if lstm else None
        for t in range(T - 1, -1, -1) if reverse else range(T):
            gh = blas.matmul(h_prev.reshape(B, H), w, b).reshape(-1)
            if lstm:  # saved: c_t, the gates (i, f, g, o), tanh(c_t)
                cpu_lstm.lstm_gates_kernel(
                    gi[t], gh, c_prev, H, o_[t], sv[0][t], sv[1][t], sv[2][t]
                )
                c_prev = sv[0][t]
            else:  # saved: r, z, n, the hidden part of n's pre-activation
                cpu_gru.gru_gates_kernel(gi[t], gh, h_prev, H, o_[t], *(s[t] for s in sv))
            h_prev = o_[t]
        ctx.save_for_backward(h0, c0 if lstm else None, w_hh, out, *saved)
        ctx.mode, ctx.reverse, ctx.has_bias = mode, reverse, b_hh is not None
        last = 0 if reverse else T - 1
        h_T = out[last].clone()  # copies: outputs of their own, not views of out
        return (out, h_T, saved[0][last].clone()) if lstm else (out, h_T)

    @staticmethod
    def backward(ctx, grads):
        h0, c0, w_hh, out, *saved = ctx.saved_tensors
        lstm = ctx.mode == "LSTM"
        d_out, dh_T = grads[0], grads[1]
        dc_T = grads[2] if lstm else None
        T, B, H = out.shape
        G, dt = w_hh.shape[0], out.dtype
        np_dt = out._storage.dtype

        def rows(t):  # a gradient as (T, B*H) rows (None stays None)
            return None if t is None else cpu.flat(t.to(dt).contiguous()).reshape(T, -1)

        d_o = rows(d_out)
        dh = np.zeros(B * H, np_dt) if dh_T is None else cpu.flat(dh_T.to(dt).contiguous()).copy()
        dc = None
        if lstm:
            dc = (
                np.zeros(B * H, np_dt)
                if dc_T is None
                else cpu.flat(dc_T.to(dt).contiguous()).copy()
            )
        dgh = cpu._new((T, B, G), dt, out)
        dgi = dgh if lstm else cpu._new((T, B, G), dt, out)
        dgh_, dgi_ = dgh._storage.reshape(T, -1), dgi._storage.reshape(T, -1)
        o_ = out._storage.reshape(T, -1)
        sv = [s._storage.reshape(T, -1) for s in saved]
        h0_, c0_ = cpu.flat(h0), (cpu.flat(c0.contiguous()) if lstm else None)
        w = cpu.as_numpy(w_hh)  # (G, H)
        g = np.empty(B * H, np_dt)
        first = T - 1 if ctx.reverse else 0  # the step whose h_{t-1} is h0
        direct = np.empty(B * H, np_dt)
        for t in range(T) if ctx.reverse else range(T - 1, -1, -1):
            if d_o is not None:  # the output's gradient at t joins the recurrent one
                np.add(dh, d_o[t], out=g)
            else:
                np.copyto(g, dh)
            prev = t + 1 if ctx.reverse else t - 1
            if lstm:
                c_prev = c0_ if t == first else sv[0][prev]
                dc_new = np.empty_like(dc)
                cpu_lstm.lstm_gates_backward_kernel(
                    g, dc, c_prev, sv[1][t], sv[2][t], H, dgh_[t], dc_new
                )
                dc = dc_new
                dh = blas.matmul(dgh_[t].reshape(B, G), w).reshape(-1)
            else:
                h_prev = h0_ if t == first else o_[prev]
                cpu_gru.gru_gates_backward_kernel(
                    g, h_prev, *(s[t] for s in sv), H, dgi_[t], dgh_[t], direct
                )
                dh = blas.matmul(dgh_[t].reshape(B, G), w).reshape(-1) + direct
        need = ctx.needs_input_grad
        dw = db = None
        if need[3]:  # dW_hh = dGH^T X, X the h_{t-1} of every step in the rows' order
            X = np.empty((T, B * H), np_dt)
            if ctx.reverse:
                X[: T - 1], X[T - 1] = o_[1:], h0_
            else:
                X[0], X[1:] = h0_, o_[: T - 1]
            dw_ = blas.matmul(dgh._storage.reshape(T * B, G).T, X.reshape(T * B, H))
            dw = w_hh._make(dw_.reshape(-1), (G, H), (H, 1), 0, dt)
        if ctx.has_bias and need[4]:
            db = cpu._new((G,), dt, out)
            cpu_linear.column_sum(dgh._storage.reshape(T * B, G), db._storage)
        dh0 = h0._make(dh, tuple(h0.shape), (H, 1), 0, dt) if need[1] else None
        dc0 = h0._make(dc, tuple(h0.shape), (H, 1), 0, dt) if lstm and need[2] else None
        return dgi if need[0] else None, dh0, dc0, dw, db


def fits(mode, gi_TBG, h0, c0, w_hh, b_hh) -> bool:
    """Whether :class:`RecurrentLayer` takes these: CPU floats of one dtype, no empty dims,
    and a fused kernel for ``mode``."""
    dt = h0.dtype
    tensors = [t for t in (gi_TBG, h0, c0, w_hh, b_hh) if t is not None]
    return (
        mode in ("LSTM", "GRU")
        and dt.is_floating_point
        and all(t.dtype is dt for t in tensors)
        and gi_TBG.numel() > 0
        and h0.shape[-1] > 0
        and all(isinstance(t._storage, np.ndarray) for t in tensors)
    )
