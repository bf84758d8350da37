"""Standard Gated DeltaNet decode step: read the state, update it, write it back.

Baseline and fallback of the ReplaySSM GDN step. State pool ``(slots, HV, V, K)``, K
innermost, as TensorRT-LLM keeps it; launch configs from the measured table (family ``gdn``).
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl

from ..common import dim_mask, even_tile, load_cursor, load_slot, store_nan_output
from ..launch import LaunchConfig, device_table_tag, drain_rows, grid, launch_kernel, maxnreg_option, select_config
from ._common import delta_rule_step, load_gates, load_qk, ring_args, state_tile_ptrs
from .step_inputs import GDNStateLayout, check_gdn_state_pool, parse_gdn_step


@triton.jit(do_not_specialize=["num_slots"])
def _gdn_update_kernel(
    state_ptr, q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr, write_pos_ptr,
    num_slots, head_k_dim, head_v_dim, v_heads_per_k_head, pad_slot_id, buffer_len,
    stride_state_slot, stride_state_h, STATE_ROW_STRIDE: tl.constexpr,
    stride_q_b, stride_q_h, stride_k_b, stride_k_h, stride_v_b, stride_v_h,
    stride_a_b, stride_a_h, stride_b_b, stride_b_h, stride_out_b, stride_out_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, HAS_CURSOR: tl.constexpr = False, V_INNER: tl.constexpr = False,
    # The always_flush route's ring (None elsewhere: the parameters then drop out of the
    # compiled kernel, and the standard route's C call keeps its signature).
    d_cache_ptr=None, k_cache_ptr=None, g_cache_ptr=None, stride_dc_slot=None, stride_dc_h=None, stride_dc_l=None,
    stride_kc_slot=None, stride_kc_h=None, stride_kc_l=None, stride_gc_slot=None, stride_gc_h=None,
    DRAIN: tl.constexpr = False, BLOCK_L: tl.constexpr = 1, DRAIN_ROWS: tl.constexpr = 1,
    EARLY_STATE: tl.constexpr = False, EVEN_TILE: tl.constexpr = False,
):
    # The pool's row stride is a constant (the layout packs each slot's block:
    # check_gdn_state_pool) and EVEN_TILE (the tile within the head) drops the masks, so a
    # tile's rows load from one base address plus immediate offsets, unpredicated, as
    # fla-core's kernel with its constant shapes does: sm_90, fp32, one warp, uncapped,
    # 8 rows 698 -> 642 SASS instructions, 4 rows 495 -> 474 (fla-core's: 656, 472).
    pid_v = tl.program_id(0)
    hv = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    mask_v = dim_mask(offs_v, head_v_dim, EVEN_TILE)
    mask_k = dim_mask(offs_k, head_k_dim, EVEN_TILE)

    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    if is_pad:
        return
    if is_bad:
        store_nan_output(out_ptr, offs_v, mask_v, pid_b, hv, stride_out_b, stride_out_h)
        return
    w, bad_cursor = load_cursor(write_pos_ptr, slot, buffer_len, HAS_CURSOR)  # bad_cursor masks the stores below
    state_ptrs = state_tile_ptrs(state_ptr + slot * stride_state_slot + hv * stride_state_h, offs_v, offs_k,
                                 STATE_ROW_STRIDE, V_INNER)
    mask_vk = mask_v[:, None] & mask_k[None, :]
    S = tl.load(state_ptrs, mask=mask_vk, other=0.0).to(tl.float32)
    if EARLY_STATE:
        # The config's choice (``early_state``): the barrier keeps ptxas from sinking the
        # tile's loads below the q / k loads and their norms' reductions, where it issues
        # the last few (fp32, 8 rows on one warp: 3 of the 8 after ~250 SASS instructions
        # of shuffles; fla-core's kernel issues all 8 first), so that the tile's round trip
        # overlaps the norms instead of following them.
        tl.debug_barrier()

    q, k = load_qk(q_ptr, k_ptr, pid_b, hv // v_heads_per_k_head, stride_q_b, stride_q_h, stride_k_b, stride_k_h,
                   offs_k, mask_k, scale, USE_QK_L2NORM)
    v = tl.load(v_ptr + pid_b * stride_v_b + hv * stride_v_h + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    g, beta = load_gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_h, stride_b_b,
                         stride_b_h, softplus_beta, softplus_threshold)

    if DRAIN:
        # A slot that arrives from a replay route with a non-empty ring (cursor w > 0)
        # takes its w cached steps first, in order: S = exp(g_j) S + d_j k_j^T on the cached
        # corrected values (the always_flush route in one launch; with every ring empty it
        # costs what standard_step costs). That branch takes the whole step in tiles of
        # DRAIN_ROWS value rows and returns, so that its registers do not set the launch's
        # (``launch.drain_rows``; as in the Mamba2 kernel).
        if (w > 0) & ~bad_cursor:
            for part in tl.static_range(BLOCK_V // DRAIN_ROWS):
                _drain_rows(pid_v * BLOCK_V + part * DRAIN_ROWS + tl.arange(0, DRAIN_ROWS), offs_k, mask_k, w, slot,
                            pid_b, hv, q, k, g, beta, head_v_dim, v_heads_per_k_head, state_ptr, v_ptr, out_ptr,
                            d_cache_ptr, k_cache_ptr, g_cache_ptr, stride_state_slot, stride_state_h,
                            STATE_ROW_STRIDE, stride_v_b, stride_v_h, stride_out_b, stride_out_h, stride_dc_slot,
                            stride_dc_h, stride_dc_l, stride_kc_slot, stride_kc_h, stride_kc_l, stride_gc_slot,
                            stride_gc_h, V_INNER, BLOCK_L, EVEN_TILE)
            return
    S, o = delta_rule_step(S, q, k, v, tl.exp(g), beta)
    tl.store(state_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_vk & ~bad_cursor)
    o = tl.where(bad_cursor, float("nan"), o)
    tl.store(out_ptr + pid_b * stride_out_b + hv * stride_out_h + offs_v, o.to(out_ptr.dtype.element_ty), mask=mask_v)


@triton.jit
def _drain_rows(offs_v, offs_k, mask_k, w, slot, pid_b, hv, q, k, g, beta, head_v_dim, v_heads_per_k_head, state_ptr,
                v_ptr, out_ptr, d_cache_ptr, k_cache_ptr, g_cache_ptr, stride_state_slot, stride_state_h,
                stride_state_row, stride_v_b, stride_v_h, stride_out_b, stride_out_h, stride_dc_slot, stride_dc_h,
                stride_dc_l, stride_kc_slot, stride_kc_h, stride_kc_l, stride_gc_slot, stride_gc_h,
                V_INNER: tl.constexpr, BLOCK_L: tl.constexpr, EVEN_TILE: tl.constexpr):
    """The always_flush step of value rows ``offs_v`` of a head whose ring holds ``w > 0``
    entries: the ring's steps on the state in order, then this step (``q``, ``k`` normalised,
    gates ``g``, ``beta``); state, output."""
    mask_v = dim_mask(offs_v, head_v_dim, EVEN_TILE)
    state_ptrs = state_tile_ptrs(state_ptr + slot * stride_state_slot + hv * stride_state_h, offs_v, offs_k,
                                 stride_state_row, V_INNER)
    mask_vk = mask_v[:, None] & mask_k[None, :]
    S = tl.load(state_ptrs, mask=mask_vk, other=0.0).to(tl.float32)
    dc_base = d_cache_ptr + slot * stride_dc_slot + hv * stride_dc_h
    kc_base = k_cache_ptr + slot * stride_kc_slot + (hv // v_heads_per_k_head) * stride_kc_h
    gc_base = g_cache_ptr + slot * stride_gc_slot + hv * stride_gc_h
    for j in range(0, BLOCK_L):  # a constant trip count: the interpreter cannot loop to a loaded bound
        if j < w:
            d_j = tl.load(dc_base + j * stride_dc_l + offs_v, mask=mask_v, other=0.0).to(tl.float32)
            k_j = tl.load(kc_base + j * stride_kc_l + offs_k, mask=mask_k, other=0.0).to(tl.float32)
            S = S * tl.exp(tl.load(gc_base + j)) + d_j[:, None] * k_j[None, :]
    v = tl.load(v_ptr + pid_b * stride_v_b + hv * stride_v_h + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    S, o = delta_rule_step(S, q, k, v, tl.exp(g), beta)
    tl.store(state_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_vk)
    tl.store(out_ptr + pid_b * stride_out_b + hv * stride_out_h + offs_v, o.to(out_ptr.dtype.element_ty), mask=mask_v)


def fused_sigmoid_gating_delta_rule_update(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
    initial_state_indices: Optional[torch.Tensor] = None,
    pad_slot_id: int = -1,
    out: Optional[torch.Tensor] = None,
    softplus_beta: float = 1.0,
    softplus_threshold: float = 20.0,
    config: Optional[LaunchConfig] = None,
) -> torch.Tensor:
    """One standard GDN decode step, updating ``state`` in place.

    Args:
        state: ``(slots, HV, V, K)`` pool, fp32/bf16/fp16, contiguous, or the
            ``.transpose(-1, -2)`` view of a contiguous ``(slots, HV, K, V)`` pool.
        q, k: ``(B, H, K)``; v: ``(B, HV, V)`` (views of a packed row are fine:
            :func:`split_packed_qkv`). a, b: ``(B, HV)``; A_log, dt_bias: ``(HV,)``.
        scale: q scale (default ``K ** -0.5``); use_qk_l2norm: normalise q and k in-kernel.
        initial_state_indices: ``(B,)`` slot per row; ``pad_slot_id`` rows are skipped.
        out: ``(B, HV, V)``.
    Returns:
        ``out``.
    """
    step = parse_gdn_step(q, k, v, a, b, A_log, dt_bias, scale, use_qk_l2norm, initial_state_indices,
                          pad_slot_id, out, softplus_beta, softplus_threshold)
    layout = check_gdn_state_pool("state", state, step)
    if config is None:
        config = select_config("standard", device_table_tag(q.device), state.dtype, q.dtype, step.head_v_dim,
                               step.head_k_dim, step.batch, family="gdn", nheads=step.num_v_heads)
    if step.batch == 0:
        return step.out
    launch_standard_step(state, step, config, layout=layout)
    return step.out


def launch_standard_step(state: torch.Tensor, step, config: LaunchConfig,
                         write_pos: Optional[torch.Tensor] = None, buffer_len: int = 0, *,
                         layout: GDNStateLayout,
                         rings: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None) -> None:
    """The standard kernel on a parsed step; with ``write_pos``, rows whose cursor is
    outside ``[0, buffer_len)`` get NaN outputs and leave their state alone. ``layout``:
    what :func:`check_gdn_state_pool` returned for ``state``. With ``rings`` (``d_cache,
    k_cache, g_cache`` of :func:`~.replay.check_gdn_ring`'s layout) a row whose ring is not
    empty replays it on its state first (the ``always_flush`` route)."""
    block_k = triton.next_power_of_2(step.head_k_dim)
    drain = {} if rings is None else dict(ring_args(*rings), DRAIN=True, BLOCK_L=triton.next_power_of_2(buffer_len),
                                          DRAIN_ROWS=drain_rows(config.block_p))
    launch_kernel(_gdn_update_kernel, grid(step.batch, step.num_v_heads, step.head_v_dim, config),
        state_ptr=state, write_pos_ptr=write_pos if write_pos is not None else state, num_slots=state.shape[0],
        head_k_dim=step.head_k_dim, head_v_dim=step.head_v_dim,
        v_heads_per_k_head=step.num_v_heads // step.num_k_heads, buffer_len=buffer_len,
        stride_state_slot=state.stride(0), stride_state_h=state.stride(1), STATE_ROW_STRIDE=layout.stride_row,
        **step.kernel_args(),
        BLOCK_V=config.block_p, BLOCK_K=block_k, HAS_CURSOR=write_pos is not None,
        V_INNER=layout.v_inner, EARLY_STATE=bool(config.early_state),
        EVEN_TILE=even_tile(step.head_v_dim, config.block_p, step.head_k_dim, block_k),
        num_warps=config.num_warps, **maxnreg_option(config.maxnreg), **drain,
    )
