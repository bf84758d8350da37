"""Triton pieces shared by the standard and the replay Mamba2 decode kernels."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


def ring_args(x_cache: torch.Tensor, dt_cache: torch.Tensor, B_cache: torch.Tensor) -> dict:
    """A layer's ring as the kernels take it (pointers and strides, by parameter name)."""
    return dict(x_cache_ptr=x_cache, dt_cache_ptr=dt_cache, B_cache_ptr=B_cache,
                stride_xc_slot=x_cache.stride(0), stride_xc_h=x_cache.stride(1), stride_xc_l=x_cache.stride(2),
                stride_dtc_slot=dt_cache.stride(0), stride_dtc_h=dt_cache.stride(1),
                stride_Bc_slot=B_cache.stride(0), stride_Bc_g=B_cache.stride(1), stride_Bc_l=B_cache.stride(2))


@triton.jit
def load_dt(dt_ptr, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h,
            HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr):
    """Processed dt of one head: ``softplus(dt + dt_bias)`` (identity above 20), fp32."""
    dt = tl.load(dt_ptr + pid_b * stride_dt_b + pid_h * stride_dt_h).to(tl.float32)
    if HAS_DT_BIAS:
        dt += tl.load(dt_bias_ptr + pid_h * stride_dtb_h).to(tl.float32)
    if DT_SOFTPLUS:
        dt = tl.where(dt <= 20.0, tl.log(1.0 + tl.exp(dt)), dt)
    return dt


@triton.jit
def load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b, stride_z_h,
                      HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """The output's skip ``D`` and gate ``z`` of one head ``[BLOCK_P]`` (fp32; zeros where
    absent). Loaded with the step's other inputs they overlap the state's load: below a
    store (the state's, the ring's) the compiler cannot move a load up, since it cannot
    tell the pointers apart, and they add a round trip to memory at the end of the program
    (what a latency-bound small batch pays). The price is their registers over the step."""
    D = tl.zeros(offs_p.shape, tl.float32)
    z = tl.zeros(offs_p.shape, tl.float32)
    if HAS_D:
        D = tl.load(D_ptr + pid_h * stride_D_h + offs_p * stride_D_p, mask=mask_p, other=0.0).to(tl.float32)
    if HAS_Z:
        z = tl.load(z_ptr + pid_b * stride_z_b + pid_h * stride_z_h + offs_p, mask=mask_p, other=0.0).to(tl.float32)
    return D, z


@triton.jit
def store_output(y, x, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b, stride_out_h,
                 HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """``y += D x``; ``y *= silu(z)`` (``D``, ``z`` from :func:`load_output_terms`); store
    ``y`` in the output dtype."""
    if HAS_D:
        y += x * D
    if HAS_Z:
        y *= z * tl.sigmoid(z)
    out_ptrs = out_ptr + pid_b * stride_out_b + pid_h * stride_out_h + offs_p
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask_p)


@triton.jit
def finish_output(y, x, offs_p, mask_p, pid_b, pid_h,
                  D_ptr, z_ptr, out_ptr, stride_D_h, stride_D_p, stride_z_b, stride_z_h,
                  stride_out_b, stride_out_h, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """``y += D x``; ``y *= silu(z)``; store ``y`` in the output dtype, loading ``D`` and
    ``z`` here (late: no registers held for them over the step)."""
    D, z = load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b,
                             stride_z_h, HAS_D, HAS_Z)
    store_output(y, x, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b, stride_out_h, HAS_D, HAS_Z)
