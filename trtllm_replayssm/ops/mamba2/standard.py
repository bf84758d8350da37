"""Standard Mamba2 decode step: read the state, update it, write it back, every step.

The baseline ReplaySSM is measured against and the fallback it can always take. Same
call as TensorRT-LLM's ``selective_state_update``; launch configs come from the table
measured on the GPU (see :mod:`.launch`), not from a fixed default.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from ..common import load_cursor, load_slot, store_nan_output
from ._common import load_dt, load_output_terms, ring_args, store_output
from ..launch import LaunchConfig, device_table_tag, drain_rows, grid, launch_kernel, maxnreg_option, select_config
from .step_inputs import check_state_pool, parse_mamba2_step


# Batch-dependent sizes are not specialised on, so one compile serves every batch.
@triton.jit(do_not_specialize=["num_slots"])
def _selective_state_update_kernel(
    state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr, write_pos_ptr,
    num_slots, headdim, dstate, heads_per_group, pad_slot_id, buffer_len,
    stride_state_slot, stride_state_h, stride_state_p,
    stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
    stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
    stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    HAS_SLOT_IDX: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, HAS_CURSOR: tl.constexpr = False,
    # The always_flush route's ring (None elsewhere: the parameters then drop out of the
    # compiled kernel, and the standard route's C call keeps its signature).
    x_cache_ptr=None, dt_cache_ptr=None, B_cache_ptr=None, stride_xc_slot=None, stride_xc_h=None, stride_xc_l=None,
    stride_dtc_slot=None, stride_dtc_h=None, stride_Bc_slot=None, stride_Bc_g=None, stride_Bc_l=None,
    DRAIN: tl.constexpr = False, BLOCK_L: tl.constexpr = 1, EARLY_TERMS: tl.constexpr = False,
    DRAIN_ROWS: tl.constexpr = 1,
):
    pid_p = tl.program_id(0)
    pid_h = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p = offs_p < headdim
    mask_n = offs_n < dstate

    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    if is_pad:
        return
    if is_bad:
        store_nan_output(out_ptr, offs_p, mask_p, pid_b, pid_h, stride_out_b, stride_out_h)
        return
    w, bad_cursor = load_cursor(write_pos_ptr, slot, buffer_len, HAS_CURSOR)  # bad_cursor masks the stores below
    g = pid_h // heads_per_group

    state_ptrs = (state_ptr + slot * stride_state_slot + pid_h * stride_state_h
                  + offs_p[:, None] * stride_state_p + offs_n[None, :])
    mask_pn = mask_p[:, None] & mask_n[None, :]
    S = tl.load(state_ptrs, mask=mask_pn, other=0.0).to(tl.float32)

    x = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p, other=0.0).to(tl.float32)
    dt = load_dt(dt_ptr, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h, HAS_DT_BIAS, DT_SOFTPLUS)
    A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
    B = tl.load(B_ptr + pid_b * stride_B_b + g * stride_B_g + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    C = tl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    if EARLY_TERMS:  # the launch config's choice (``early_terms``): see load_output_terms
        D, z = load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b,
                                 stride_z_h, HAS_D, HAS_Z)

    if DRAIN:
        # A slot that arrives from a replay route with a non-empty ring (cursor w > 0)
        # takes its w cached steps first, in order (the standard recurrence on the cached
        # processed dt, x and B): the always_flush route in one launch, which in steady
        # state (every ring empty) costs what standard_step costs. That branch takes the
        # whole step in tiles of DRAIN_ROWS rows and returns: a smaller tile than the
        # common path's, so that its registers (the ring's entries beside the state) do
        # not set the launch's, and nothing it computes merges into the common path.
        if (w > 0) & ~bad_cursor:
            for part in tl.static_range(BLOCK_P // DRAIN_ROWS):
                _drain_rows(pid_p * BLOCK_P + part * DRAIN_ROWS + tl.arange(0, DRAIN_ROWS), offs_n, mask_n, w, slot,
                            pid_b, pid_h, g, headdim, state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr,
                            dt_bias_ptr, out_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, stride_state_slot,
                            stride_state_h, stride_state_p, stride_x_b, stride_x_h, stride_dt_b, stride_dt_h,
                            stride_A_h, stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
                            stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h, stride_xc_slot,
                            stride_xc_h, stride_xc_l, stride_dtc_slot, stride_dtc_h, stride_Bc_slot, stride_Bc_g,
                            stride_Bc_l, HAS_D, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS, BLOCK_L)
            return
    S = S * tl.exp(A * dt) + (dt * x)[:, None] * B[None, :]
    tl.store(state_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_pn & ~bad_cursor)
    y = tl.where(bad_cursor, float("nan"), tl.sum(S * C[None, :], axis=1))
    if not EARLY_TERMS:  # late: no registers held for them over the step
        D, z = load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b,
                                 stride_z_h, HAS_D, HAS_Z)
    store_output(y, x, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b, stride_out_h, HAS_D, HAS_Z)


@triton.jit
def _drain_rows(offs_p, offs_n, mask_n, w, slot, pid_b, pid_h, g, headdim, state_ptr, x_ptr, dt_ptr, A_ptr, B_ptr,
                C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, stride_state_slot,
                stride_state_h, stride_state_p, stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
                stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p, stride_z_b, stride_z_h,
                stride_dtb_h, stride_out_b, stride_out_h, stride_xc_slot, stride_xc_h, stride_xc_l, stride_dtc_slot,
                stride_dtc_h, stride_Bc_slot, stride_Bc_g, stride_Bc_l, HAS_D: tl.constexpr, HAS_Z: tl.constexpr,
                HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr, BLOCK_L: tl.constexpr):
    """The always_flush step of rows ``offs_p`` of a head whose ring holds ``w > 0``
    entries: the ring's steps on the state in order, then this step; state, output."""
    mask_p = offs_p < headdim
    state_ptrs = (state_ptr + slot * stride_state_slot + pid_h * stride_state_h
                  + offs_p[:, None] * stride_state_p + offs_n[None, :])
    mask_pn = mask_p[:, None] & mask_n[None, :]
    S = tl.load(state_ptrs, mask=mask_pn, other=0.0).to(tl.float32)
    A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
    xc_base = x_cache_ptr + slot * stride_xc_slot + pid_h * stride_xc_h
    dtc_base = dt_cache_ptr + slot * stride_dtc_slot + pid_h * stride_dtc_h
    Bc_base = B_cache_ptr + slot * stride_Bc_slot + g * stride_Bc_g
    for j in range(0, BLOCK_L):  # a constant trip count: the interpreter cannot loop to a loaded bound
        if j < w:
            dt_j = tl.load(dtc_base + j)
            x_j = tl.load(xc_base + j * stride_xc_l + offs_p, mask=mask_p, other=0.0).to(tl.float32)
            B_j = tl.load(Bc_base + j * stride_Bc_l + offs_n, mask=mask_n, other=0.0).to(tl.float32)
            S = S * tl.exp(A * dt_j) + (dt_j * x_j)[:, None] * B_j[None, :]
    x = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p, other=0.0).to(tl.float32)
    dt = load_dt(dt_ptr, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h, HAS_DT_BIAS, DT_SOFTPLUS)
    B = tl.load(B_ptr + pid_b * stride_B_b + g * stride_B_g + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    C = tl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    S = S * tl.exp(A * dt) + (dt * x)[:, None] * B[None, :]
    tl.store(state_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_pn)
    D, z = load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b,
                             stride_z_h, HAS_D, HAS_Z)
    store_output(tl.sum(S * C[None, :], axis=1), x, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b,
                 stride_out_h, HAS_D, HAS_Z)


def selective_state_update(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    state_batch_indices: Optional[torch.Tensor] = None,
    pad_slot_id: int = -1,
    out: Optional[torch.Tensor] = None,
    config: Optional[LaunchConfig] = None,
) -> torch.Tensor:
    """One standard Mamba2 decode step, updating ``state`` in place.

    Args:
        state: ``(slots, H, P, N)`` state pool, fp32/bf16/fp16, contiguous.
        x: ``(B, H, P)``; ``dt``: ``(B, H)`` or ``(B, H, P)`` with stride 0 along P.
        A: ``(H,)`` or ``(H, P, N)`` with stride 0 along P and N; ``dt_bias``: ``(H,)`` or
            ``(H, P)`` with stride 0; ``D``: ``(H,)`` or ``(H, P)``.
        B, C: ``(B, G, N)``; ``z``: optional ``(B, H, P)`` gate.
        state_batch_indices: ``(B,)`` slot per row; rows equal to ``pad_slot_id`` are skipped.
        out: ``(B, H, P)``, written for non-padding rows.
        config: launch config; by default the one measured for this shape.
    Returns:
        ``out``.
    """
    step = parse_mamba2_step(x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id, out)
    check_state_pool("state", state, step)
    if config is None:
        config = select_config("standard", device_table_tag(x.device), state.dtype, x.dtype,
                               step.headdim, step.dstate, step.batch, nheads=step.nheads)
    if step.batch == 0:
        return step.out
    launch_standard_step(state, step, config)
    return step.out


def launch_standard_step(state: torch.Tensor, step, config: LaunchConfig,
                         write_pos: Optional[torch.Tensor] = None, buffer_len: int = 0,
                         rings: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None) -> None:
    """The standard kernel on a parsed step; with ``write_pos``, rows whose cursor is
    outside ``[0, buffer_len)`` get NaN outputs and leave their state alone. With
    ``rings`` (``x_cache, dt_cache, B_cache`` of :func:`~.replay.check_ring`'s layout) a
    row whose ring is not empty replays it on its state first (the ``always_flush`` route)."""
    drain = {} if rings is None else dict(ring_args(*rings), DRAIN=True, BLOCK_L=triton.next_power_of_2(buffer_len),
                                          DRAIN_ROWS=drain_rows(config.block_p))
    launch_kernel(_selective_state_update_kernel, grid(step.batch, step.nheads, step.headdim, config),
        state_ptr=state, write_pos_ptr=write_pos if write_pos is not None else state, num_slots=state.shape[0],
        headdim=step.headdim, dstate=step.dstate, heads_per_group=step.nheads // step.ngroups, buffer_len=buffer_len,
        stride_state_slot=state.stride(0), stride_state_h=state.stride(1), stride_state_p=state.stride(2),
        **step.kernel_args(),
        BLOCK_P=config.block_p, BLOCK_N=triton.next_power_of_2(step.dstate), HAS_CURSOR=write_pos is not None,
        EARLY_TERMS=bool(config.early_terms), num_warps=config.num_warps, **maxnreg_option(config.maxnreg), **drain,
    )
