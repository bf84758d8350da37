"""Fused kernels for the decoder's non-SSM per-token work, each next to its plain PyTorch
reference: the causal conv update, RMSNorm and the gated RMSNorm of the mixers.

TensorRT-LLM runs these as single fused kernels (``causal_conv1d_update``, its RMSNorm
and gated-RMSNorm kernels). As chains of PyTorch ops (casts, unfold, pow, mean, rsqrt,
silu: ~35 launches a Mamba2 layer) they took a third of the rig's decode step at batch
512, time neither a real engine nor the SSM kernels spend, which shrank every path's
measured share of the SSM step. Both the standard and the ReplaySSM path use them.
Everything is computed in fp32 and stored once in the output dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

# -- causal conv update ----------------------------------------------------------------


@triton.jit
def _conv_window_value(conv_ptr, x_ptr, j: tl.constexpr, pid_b, offs_c, mask_c, stride_conv_b, stride_conv_c, stride_x_b,
                       stride_x_t, K: tl.constexpr):
    """Entry ``j`` of a row's conv window: the kept inputs ``0..K-2``, then the new tokens."""
    if j < K - 1:
        v = tl.load(conv_ptr + pid_b * stride_conv_b + offs_c * stride_conv_c + j, mask=mask_c, other=0.0)
    else:
        v = tl.load(x_ptr + pid_b * stride_x_b + (j - (K - 1)) * stride_x_t + offs_c, mask=mask_c, other=0.0)
    return v


@triton.jit
def _conv_update_kernel(conv_ptr, x_ptr, w_ptr, bias_ptr, window_ptr, out_ptr, channels,
                        stride_conv_b, stride_conv_c, stride_x_b, stride_x_t, stride_win_b, stride_win_c,
                        stride_out_b, stride_out_t, K: tl.constexpr, T: tl.constexpr, BLOCK_C: tl.constexpr):
    pid_b = tl.program_id(1)
    offs_c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_c = offs_c < channels
    for j in tl.static_range(K - 1 + T):
        v = _conv_window_value(conv_ptr, x_ptr, j, pid_b, offs_c, mask_c, stride_conv_b, stride_conv_c, stride_x_b,
                               stride_x_t, K)
        tl.store(window_ptr + pid_b * stride_win_b + offs_c * stride_win_c + j, v, mask=mask_c)
    bias = tl.load(bias_ptr + offs_c, mask=mask_c, other=0.0).to(tl.float32)
    for t in tl.static_range(T):
        acc = bias
        for i in tl.static_range(K):
            v = _conv_window_value(conv_ptr, x_ptr, t + i, pid_b, offs_c, mask_c, stride_conv_b, stride_conv_c,
                                   stride_x_b, stride_x_t, K).to(tl.float32)
            acc += tl.load(w_ptr + offs_c * K + i, mask=mask_c, other=0.0).to(tl.float32) * v
        acc = acc * tl.sigmoid(acc)  # SiLU
        tl.store(out_ptr + pid_b * stride_out_b + t * stride_out_t + offs_c, acc.to(out_ptr.dtype.element_ty),
                 mask=mask_c)


def causal_conv_update(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       window: torch.Tensor) -> torch.Tensor:
    """Depthwise causal conv + SiLU of ``x (B, T, C)`` (unit stride along C) over the row's
    kept inputs ``conv_state (B, C, K-1)``; the whole window ``(B, C, K-1+T)`` (unit stride
    along it) is written to ``window`` for the caller's commit. ``weight (C, K)``,
    ``bias (C,)``. Returns ``(B, T, C)`` contiguous, in x's dtype."""
    B, T, C = x.shape
    K = weight.shape[1]
    assert x.stride(2) == 1 and conv_state.stride(2) == 1 and window.stride(2) == 1 and weight.is_contiguous()
    out = torch.empty(B, T, C, dtype=x.dtype, device=x.device)
    block = min(256, triton.next_power_of_2(C))
    _conv_update_kernel[(triton.cdiv(C, block), B)](
        conv_state, x, weight, bias, window, out, C, conv_state.stride(0), conv_state.stride(1), x.stride(0),
        x.stride(1), window.stride(0), window.stride(1), out.stride(0), out.stride(1), K=K, T=T, BLOCK_C=block)
    return out


def causal_conv_update_ref(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                           window: torch.Tensor) -> torch.Tensor:
    """:func:`causal_conv_update` in PyTorch ops."""
    K = weight.shape[1]
    window[:, :, :K - 1].copy_(conv_state)
    window[:, :, K - 1:].copy_(x.transpose(1, 2))
    out = (window.unfold(-1, K, 1).float() * weight.float()[:, None, :]).sum(-1) + bias.float()[:, None]
    return F.silu(out).transpose(1, 2).to(x.dtype).contiguous()


# -- RMSNorm, plain and gated ----------------------------------------------------------


@triton.jit
def _rms_norm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, size, stride_x, stride_z, stride_out, stride_w_group, eps,
                     GATE: tl.constexpr, NORM_BEFORE_GATE: tl.constexpr, BLOCK: tl.constexpr):
    """Program ``(row, group)``: RMSNorm over a group of ``size`` features with the group's
    weight (``stride_w_group`` 0: one weight for all groups); with ``GATE``, times
    ``silu(z)`` after the norm (``NORM_BEFORE_GATE``) or before it."""
    row, grp = tl.program_id(0), tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    mask = offs < size
    col = grp * size + offs
    x = tl.load(x_ptr + row * stride_x + col, mask=mask, other=0.0).to(tl.float32)
    if GATE:
        z = tl.load(z_ptr + row * stride_z + col, mask=mask, other=0.0).to(tl.float32)
        gate = z * tl.sigmoid(z)
        if not NORM_BEFORE_GATE:
            x = x * gate
    w = tl.load(w_ptr + grp * stride_w_group + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / size + eps) * w
    if GATE:
        if NORM_BEFORE_GATE:
            y = y * gate
    tl.store(out_ptr + row * stride_out + col, y.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t (..., D)`` as ``(rows, D)`` without a copy where its rows are evenly strided."""
    assert t.stride(-1) == 1
    return t.reshape(-1, t.shape[-1])


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of ``x (..., D)`` with ``weight (D,)``, in x's dtype."""
    return gated_rms_norm(x, None, weight, x.shape[-1], eps=eps, out_dtype=x.dtype)


def gated_rms_norm(x: torch.Tensor, z, weight: torch.Tensor, group_size: int, norm_before_gate: bool = False,
                   eps: float = 1e-6, out_dtype: torch.dtype = None) -> torch.Tensor:
    """RMSNorm of ``x (..., D)`` over groups of ``group_size`` features with ``weight (D,)``
    (or ``(group_size,)``, shared by the groups), gated by ``silu(z)`` (``z`` like ``x``, or
    None): Mamba2's norm gates first (``norm_before_gate=False``), GDN's after. Returns
    ``out_dtype`` (default x's)."""
    D = x.shape[-1]
    assert D % group_size == 0 and weight.is_contiguous() and weight.numel() in (D, group_size)
    xr = _rows(x)
    zr = _rows(z) if z is not None else xr
    out = torch.empty(xr.shape, dtype=out_dtype or x.dtype, device=x.device)
    block = triton.next_power_of_2(group_size)
    _rms_norm_kernel[(xr.shape[0], D // group_size)](
        xr, zr, weight, out, group_size, xr.stride(0), zr.stride(0), out.stride(0),
        group_size if weight.numel() == D else 0, eps, GATE=z is not None,
        NORM_BEFORE_GATE=norm_before_gate, BLOCK=block, num_warps=min(8, max(1, block // 256)))
    return out.view(x.shape)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """:func:`rms_norm` in PyTorch ops."""
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def gated_rms_norm_ref(x: torch.Tensor, z, weight: torch.Tensor, group_size: int, norm_before_gate: bool = False,
                       eps: float = 1e-6, out_dtype: torch.dtype = None) -> torch.Tensor:
    """:func:`gated_rms_norm` in PyTorch ops (fp32 throughout)."""
    shape = x.shape
    xf = x.float()
    gate = F.silu(z.float()) if z is not None else None
    if gate is not None and not norm_before_gate:
        xf = xf * gate
    g = xf.reshape(*shape[:-1], -1, group_size)
    y = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).reshape(shape)
    y = y * weight.float().repeat(shape[-1] // weight.numel())
    if gate is not None and norm_before_gate:
        y = y * gate
    return y.to(out_dtype or x.dtype)
