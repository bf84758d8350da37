"""Triton pieces shared by the standard and the replay Mamba2 decode kernels."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX: tl.constexpr):
    """Cache slot of batch row ``pid_b`` (int64) and whether the row is padding."""
    if HAS_SLOT_IDX:
        slot = tl.load(slot_idx_ptr + pid_b).to(tl.int64)
    else:
        slot = pid_b.to(tl.int64)
    is_pad = slot == pad_slot_id
    # An index outside the pool would write someone else's memory: treat it as an
    # error row (the caller writes NaN to its output) rather than trusting it.
    is_bad = (not is_pad) & ((slot < 0) | (slot >= num_slots))
    return slot, is_pad, is_bad


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
def finish_output(y, x, offs_p, mask_p, pid_b, pid_h,
                  D_ptr, z_ptr, out_ptr, stride_D_h, stride_D_p, stride_z_b, stride_z_h,
                  stride_out_b, stride_out_h, HAS_D: tl.constexpr, HAS_Z: tl.constexpr):
    """``y += D x``; ``y *= silu(z)``; store ``y`` in the output dtype."""
    if HAS_D:
        D = tl.load(D_ptr + pid_h * stride_D_h + offs_p * stride_D_p, mask=mask_p, other=0.0).to(tl.float32)
        y += x * D
    if HAS_Z:
        z = tl.load(z_ptr + pid_b * stride_z_b + pid_h * stride_z_h + offs_p, mask=mask_p, other=0.0).to(tl.float32)
        y *= z * tl.sigmoid(z)
    out_ptrs = out_ptr + pid_b * stride_out_b + pid_h * stride_out_h + offs_p
    tl.store(out_ptrs, y.to(out_ptr.dtype.element_ty), mask=mask_p)


@triton.jit
def store_nan_output(out_ptr, offs_p, mask_p, pid_b, pid_h, stride_out_b, stride_out_h):
    """Mark a row whose slot or cursor was invalid; nothing else is written."""
    out_ptrs = out_ptr + pid_b * stride_out_b + pid_h * stride_out_h + offs_p
    tl.store(out_ptrs, tl.full(offs_p.shape, float("nan"), tl.float32).to(out_ptr.dtype.element_ty), mask=mask_p)
