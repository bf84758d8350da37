"""Triton pieces shared by the standard and the replay GDN decode kernels."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def ring_args(d_cache: torch.Tensor, k_cache: torch.Tensor, g_cache: torch.Tensor) -> dict:
    """A layer's ring as the kernels take it (pointers and strides, by parameter name)."""
    return dict(d_cache_ptr=d_cache, k_cache_ptr=k_cache, g_cache_ptr=g_cache,
                stride_dc_slot=d_cache.stride(0), stride_dc_h=d_cache.stride(1), stride_dc_l=d_cache.stride(2),
                stride_kc_slot=k_cache.stride(0), stride_kc_h=k_cache.stride(1), stride_kc_l=k_cache.stride(2),
                stride_gc_slot=g_cache.stride(0), stride_gc_h=g_cache.stride(1))


@triton.jit
def state_tile_ptrs(head_ptr, offs_v, offs_k, stride_row, V_INNER: tl.constexpr):
    """Pointers to the ``[V, K]`` tile (rows ``offs_v``, columns ``offs_k``) of the head at
    ``head_ptr``: K innermost (``stride_row`` between v rows), or with ``V_INNER`` V
    innermost (a ``[K, V]`` head as TensorRT-LLM 1.2 lays it out; ``stride_row`` between k
    rows). The innermost offsets are added last: added to the pointer as one precomputed
    offset tile, the loads lost their vectorisation (GDN standard step 61 -> 77 registers)."""
    if V_INNER:
        ptrs = head_ptr + offs_k[None, :] * stride_row + offs_v[:, None]
    else:
        ptrs = head_ptr + offs_v[:, None] * stride_row + offs_k[None, :]
    return ptrs


@triton.jit
def load_qk(q_ptr, k_ptr, pid_b, h, stride_q_b, stride_q_h, stride_k_b, stride_k_h, offs_k, mask_k, scale,
            USE_QK_L2NORM: tl.constexpr):
    """q and k of one key head in fp32: L2-normalised (``x / sqrt(sum x^2 + 1e-6)``), q scaled."""
    q = tl.load(q_ptr + pid_b * stride_q_b + h * stride_q_h + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    k = tl.load(k_ptr + pid_b * stride_k_b + h * stride_k_h + offs_k, mask=mask_k, other=0.0).to(tl.float32)
    if USE_QK_L2NORM:
        q = q * tl.rsqrt(tl.sum(q * q, axis=0) + 1e-6)
        k = k * tl.rsqrt(tl.sum(k * k, axis=0) + 1e-6)
    return q * scale, k


@triton.jit
def load_gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_h, stride_b_b, stride_b_h,
               softplus_beta, softplus_threshold):
    """Log-decay ``g = -exp(A_log) softplus(a + dt_bias)`` and ``beta = sigmoid(b)``, fp32."""
    x = tl.load(a_ptr + pid_b * stride_a_b + hv * stride_a_h).to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32)
    bx = softplus_beta * x
    sp = tl.where(bx <= softplus_threshold, tl.log(1.0 + tl.exp(bx)) / softplus_beta, x)
    g = -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32)) * sp
    beta = tl.sigmoid(tl.load(b_ptr + pid_b * stride_b_b + hv * stride_b_h).to(tl.float32))
    return g, beta


@triton.jit
def delta_rule_step(S, q, k, v, alpha, beta):
    """One gated delta-rule step on a ``[V, K]`` tile: ``S = alpha S``, the corrected value
    ``d = beta (v - S k)``, ``S += d k^T``; returns ``(S, S q)``."""
    S = alpha * S
    d = beta * (v - tl.sum(S * k[None, :], axis=1))
    S += d[:, None] * k[None, :]
    return S, tl.sum(S * q[None, :], axis=1)
