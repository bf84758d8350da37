"""ReplaySSM Mamba2 decode step (``replayssm.md`` section 1).

Per slot the pool keeps a checkpoint ``S_0`` and a ring of the last ``w = write_pos``
step inputs (``x``, processed ``dt``, ``B``). A step with ``c_j`` the running sum of dt
(current token included) and ``T = c_w`` computes

    S_w = exp(A T) S_0 + sum_{j<=w} dt_j exp(A (T - c_j)) x_j B_j^T
    y   = S_w C + D x          (gated by silu(z))

and writes the state back only on a flush (``w == L - 1``, a per-row force-flush flag, or
the ``always_flush`` route); otherwise it appends the step's inputs at ``w``.

Routes (``MODE`` is a compile-time switch of the step kernel):
- ``output_only``: non-flush rows never build ``S``; they need ``S_0 C`` (one pass over
  the checkpoint), the dots ``B_j . C`` and the x window. Flush rows are served by a
  second launch of a kernel of its own (:mod:`.replay_fold`), compiled and tuned apart
  so the fold does not set the register budget of the common step; a fold program may
  loop over several heads (``heads_per_prog``) so the launch is cheap on the many steps
  where no row flushes. At large batches the fold runs on a side stream beside the
  non-flush launch (:mod:`..streams`, ``launch.FOLD_SIDE_STREAM``).
- ``state_and_output``: every step rebuilds the ``S`` tile (``w`` rank-1 updates on top
  of ``exp(A T) S_0``, the ``(P x w) @ (w x N)`` product) and takes ``y = S C``.
- ``standard_step``: the standard kernel takes the step and the ring stays empty: what
  the standard kernel costs, which is what the dispatcher takes where replay cannot win.
  The ring must be empty on entry (a row whose cursor is not 0 gets NaN outputs and
  nothing written), so a caller that comes from another route at the same slots drains
  first (``always_flush`` for one step, or :func:`~trtllm_replayssm.ops.fold.fold_mamba2_rings`).
- ``always_flush``: the same step for any ring, in one launch of the standard kernel: a
  row whose ring is not empty replays its cached steps on its state first. Safe where a
  slot's route can change from step to step (an engine whose batch size varies); with
  every ring empty it costs what ``standard_step`` costs.
- Both leave the state exact after every step; cursors are then advanced with
  ``flush_all=True`` (:data:`~trtllm_replayssm.ops.cursors.FLUSH_EVERY_STEP`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch
import triton
import triton.language as tl

from ..._validation import FLAG_DTYPES, check_buffer_len, check_contiguous, check_slot_major, check_tensor, check_vector
from ..common import dim_mask, even_rows_and_cols, let_dependents_launch, load_slot, store_nan_output, tile_masks
from ._common import load_dt, load_output_terms, ring_args, store_output
from ..cursors import FLUSH_EVERY_STEP
from ..launch import (LaunchConfig, clamp_loop_blocks, config_kernel, device_table_tag, fold_programmatic_launch,
                      fold_side_stream, grid, launch_kernel, pdl_options, select_config, select_route)
from ..streams import launch_fold_beside
from .replay_fold import launch_fold
from .standard import launch_standard_step
from .step_inputs import Mamba2Step, check_state_pool, parse_mamba2_step

ROUTES = ("output_only", "state_and_output", "standard_step", "always_flush")


@triton.jit
def _ring_entry(j, w, seen, total, A, dtc_base, xc_base, Bc_base, stride_xc_l, stride_Bc_l,
                offs_p, offs_n, mask_p, mask_n):
    """Ring entry ``j`` (zeros past ``w``) and its weight ``dt_j exp(A (T - c_j))``;
    ``seen`` carries ``c_j``, the running sum of dt."""
    m = j < w
    dt_j = tl.load(dtc_base + j, mask=m, other=0.0)
    seen += dt_j
    coef_j = dt_j * tl.exp(tl.minimum(A * (total - seen), 0.0))
    x_j = tl.load(xc_base + j * stride_xc_l + offs_p, mask=mask_p & m, other=0.0).to(tl.float32)
    B_j = tl.load(Bc_base + j * stride_Bc_l + offs_n, mask=mask_n & m, other=0.0).to(tl.float32)
    return seen, coef_j, x_j, B_j


# Kernel modes: which rows a launch serves and how it forms the output. (Rows that flush
# on the output_only route are the fold kernel's: :mod:`.replay_fold`.)
NONFLUSH = tl.constexpr(1)  # rows that do not flush: output only, never forms S; appends
REBUILD = tl.constexpr(3)  # every row: rebuild S each step, store it on flush, else append


@triton.jit
def _step_loads(state_ptr, slot, pid_b, pid_h, heads_per_group, mask_p, mask_n, offs_p, offs_n, x_ptr, dt_ptr, A_ptr,
                B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, stride_state_slot, stride_state_h, stride_state_p,
                stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h, stride_B_b, stride_B_g, stride_C_b,
                stride_C_g, stride_D_h, stride_D_p, stride_z_b, stride_z_h, stride_dtb_h, HAS_D: tl.constexpr,
                HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr):
    """The loads of a step that do not depend on the cursor: the checkpoint tile
    ``[BLOCK_P, BLOCK_N]`` (fp32, with its pointers and mask for the flush's store) and this
    step's inputs of head ``pid_h`` (``g``: its group). The pointers are formed here, next
    to their load: formed before the cursor's checks they stay live across them (68 -> 112
    registers for Super's output_only tile, and a slower non-flush step)."""
    g = pid_h // heads_per_group
    state_ptrs = (state_ptr + slot * stride_state_slot + pid_h * stride_state_h
                  + offs_p[:, None] * stride_state_p + offs_n[None, :])
    mask_pn = mask_p[:, None] & mask_n[None, :]
    S0 = tl.load(state_ptrs, mask=mask_pn, other=0.0).to(tl.float32)
    C = tl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    x = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p, other=0.0)
    xf = x.to(tl.float32)
    dt = load_dt(dt_ptr, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h, HAS_DT_BIAS, DT_SOFTPLUS)
    A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
    B = tl.load(B_ptr + pid_b * stride_B_b + g * stride_B_g + offs_n, mask=mask_n, other=0.0)
    Bf = B.to(tl.float32)
    # Before the ring's appends, which would keep them at the program's end (load_output_terms).
    D, z = load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b,
                             stride_z_h, HAS_D, HAS_Z)
    return g, state_ptrs, mask_pn, S0, C, x, xf, dt, A, B, Bf, D, z


@triton.jit
def _store_nan_rows(out_ptr, offs_p, mask_p, headdim, pid_b, pid_h, stride_out_b, stride_out_h, EVEN_ROWS: tl.constexpr,
                    BLOCK_P: tl.constexpr, CHUNKS: tl.constexpr):
    """NaN outputs over a program's rows: its block ``offs_p``, or the run of CHUNKS blocks
    from it."""
    if CHUNKS == 1:
        store_nan_output(out_ptr, offs_p, mask_p, pid_b, pid_h, stride_out_b, stride_out_h)
    else:
        for c in tl.static_range(CHUNKS):
            store_nan_output(out_ptr, offs_p + c * BLOCK_P, dim_mask(offs_p + c * BLOCK_P, headdim, EVEN_ROWS), pid_b,
                             pid_h, stride_out_b, stride_out_h)


@triton.jit
def _nonflush_row_blocks(state_ptr, slot, pid_p, pid_h, pid_b, w, heads_per_group, headdim, dstate, x_ptr, dt_ptr, A_ptr,
                         B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, dtc_base_slot, xc_base_slot, Bc_base_slot,
                         stride_dtc_h, stride_xc_h, stride_xc_l, stride_Bc_g, stride_Bc_l, x_cache_ptr, B_cache_ptr,
                         stride_state_slot, stride_state_h, stride_state_p, stride_x_b, stride_x_h, stride_dt_b,
                         stride_dt_h, stride_A_h, stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
                         stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
                         HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
                         BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, CHUNKS: tl.constexpr,
                         EVEN_ROWS: tl.constexpr, EVEN_COLS: tl.constexpr):
    """The non-flush step of one row over CHUNKS blocks of BLOCK_P rows of head ``pid_h``,
    one block after another: the ring's weights ``v_j = coef_j (B_j . C)`` (and this
    token's, ``dt (B . C)``) are formed once for all of them, so a program's fixed cost
    (the slot, the cursor, the ring's B tile and dt) is paid once a run of blocks, not once
    a block. ``y = exp(A T) S_0 C + sum_j v_j x_j + dt (B . C) x`` per block; the block's x
    is appended at ``w``."""
    g = pid_h // heads_per_group
    offs_n = tl.arange(0, BLOCK_N)
    mask_n = dim_mask(offs_n, dstate, EVEN_COLS)
    C = tl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    dt = load_dt(dt_ptr, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h, HAS_DT_BIAS, DT_SOFTPLUS)
    A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
    B = tl.load(B_ptr + pid_b * stride_B_b + g * stride_B_g + offs_n, mask=mask_n, other=0.0)
    dtc_base = dtc_base_slot + pid_h * stride_dtc_h
    xc_base = xc_base_slot + pid_h * stride_xc_h
    Bc_base = Bc_base_slot + g * stride_Bc_g
    offs_l = tl.arange(0, BLOCK_L)
    in_ring = offs_l < w
    dt_ring = tl.load(dtc_base + offs_l, mask=in_ring, other=0.0)
    total = tl.sum(dt_ring, axis=0) + dt  # T: dt summed over the cached steps and this one
    decay0 = tl.exp(tl.minimum(A * total, 0.0))
    coef = dt_ring * tl.exp(tl.minimum(A * (total - tl.cumsum(dt_ring, axis=0)), 0.0))
    Bm = tl.load(Bc_base + offs_l[:, None] * stride_Bc_l + offs_n[None, :],
                 mask=in_ring[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
    v = coef * tl.sum(Bm * C[None, :], axis=1)  # [BLOCK_L]
    v_now = dt * tl.sum(B.to(tl.float32) * C, axis=0)
    head = state_ptr + slot * stride_state_slot + pid_h * stride_state_h
    for c in range(0, CHUNKS):
        offs_p = (pid_p * CHUNKS + c) * BLOCK_P + tl.arange(0, BLOCK_P)
        mask_p = dim_mask(offs_p, headdim, EVEN_ROWS)
        S0 = tl.load(head + offs_p[:, None] * stride_state_p + offs_n[None, :],
                     mask=mask_p[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
        x = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p, other=0.0)
        X = tl.load(xc_base + offs_l[None, :] * stride_xc_l + offs_p[:, None],
                    mask=mask_p[:, None] & in_ring[None, :], other=0.0).to(tl.float32)
        D, z = load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b,
                                 stride_z_h, HAS_D, HAS_Z)
        xf = x.to(tl.float32)
        y = decay0 * tl.sum(S0 * C[None, :], axis=1) + v_now * xf + tl.sum(X * v[None, :], axis=1)
        tl.store(xc_base + w * stride_xc_l + offs_p, x.to(x_cache_ptr.dtype.element_ty), mask=mask_p)
        store_output(y, xf, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b, stride_out_h, HAS_D, HAS_Z)
    if pid_p == 0:
        tl.store(dtc_base + w, dt)
        if pid_h % heads_per_group == 0:  # one head per group appends the shared B
            tl.store(Bc_base + w * stride_Bc_l + offs_n, B.to(B_cache_ptr.dtype.element_ty), mask=mask_n)


# Batch-dependent sizes are not specialised on, so one compile serves every batch.
@triton.jit(do_not_specialize=["num_slots"])
def _replay_step_kernel(
    state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, force_flush_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, nheads, headdim, dstate, heads_per_group, buffer_len, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p,
    stride_xc_slot, stride_xc_h, stride_xc_l,
    stride_dtc_slot, stride_dtc_h,
    stride_Bc_slot, stride_Bc_g, stride_Bc_l,
    stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
    stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
    stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    HAS_SLOT_IDX: tl.constexpr, DT_SOFTPLUS: tl.constexpr,
    HAS_FORCE_FLUSH: tl.constexpr, MODE: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, FOLD_CHUNK: tl.constexpr,
    EVEN_ROWS: tl.constexpr, EVEN_COLS: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr = False,
    EARLY_STATE: tl.constexpr = False, CHUNKS: tl.constexpr = 1,
):
    let_dependents_launch(LAUNCH_DEPENDENTS)  # the fold's programmatic launch
    pid_p = tl.program_id(0)
    pid_h = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_p = pid_p * (BLOCK_P * CHUNKS) + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p, mask_n = tile_masks(offs_p, offs_n, headdim, dstate, EVEN_ROWS, EVEN_COLS)

    # This launch reports an invalid slot or cursor (NaN outputs); the fold launch skips them.
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    if is_pad:
        return
    if is_bad:
        _store_nan_rows(out_ptr, offs_p, mask_p, headdim, pid_b, pid_h, stride_out_b, stride_out_h, EVEN_ROWS, BLOCK_P,
                        CHUNKS)
        return
    if EARLY_STATE:
        # The launch config's choice (``early_state``): the checkpoint's load waits on the
        # slot alone, as in the standard kernel, not on the cursor as well (a round trip
        # less before the state's first byte); on the non-flush launch a row that flushes
        # then reads its tile for nothing.
        g, state_ptrs, mask_pn, S0, C, x, xf, dt, A, B, Bf, D, z = _step_loads(
            state_ptr, slot, pid_b, pid_h, heads_per_group, mask_p, mask_n, offs_p, offs_n, x_ptr, dt_ptr, A_ptr,
            B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, stride_state_slot, stride_state_h, stride_state_p, stride_x_b,
            stride_x_h, stride_dt_b, stride_dt_h, stride_A_h, stride_B_b, stride_B_g, stride_C_b, stride_C_g,
            stride_D_h, stride_D_p, stride_z_b, stride_z_h, stride_dtb_h, HAS_D, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS)
    w = tl.load(write_pos_ptr + slot)
    if (w < 0) | (w >= buffer_len):
        _store_nan_rows(out_ptr, offs_p, mask_p, headdim, pid_b, pid_h, stride_out_b, stride_out_h, EVEN_ROWS, BLOCK_P,
                        CHUNKS)
        return
    is_flush = w == buffer_len - 1
    if HAS_FORCE_FLUSH:
        is_flush = is_flush | (tl.load(force_flush_ptr + pid_b) != 0)
    # The non-flush and the flush work are separate launches (and kernels) so that each
    # is compiled (registers) and tuned (tile) for itself.
    if MODE == NONFLUSH:
        if is_flush:
            return

    if CHUNKS > 1:  # the non-flush launch over runs of row blocks (launch config ``loop_blocks``)
        _nonflush_row_blocks(state_ptr, slot, pid_p, pid_h, pid_b, w, heads_per_group, headdim, dstate, x_ptr, dt_ptr,
                             A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr,
                             dt_cache_ptr + slot * stride_dtc_slot, x_cache_ptr + slot * stride_xc_slot,
                             B_cache_ptr + slot * stride_Bc_slot, stride_dtc_h, stride_xc_h, stride_xc_l, stride_Bc_g,
                             stride_Bc_l, x_cache_ptr, B_cache_ptr, stride_state_slot, stride_state_h, stride_state_p,
                             stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h, stride_B_b, stride_B_g,
                             stride_C_b, stride_C_g, stride_D_h, stride_D_p, stride_z_b, stride_z_h, stride_dtb_h,
                             stride_out_b, stride_out_h, HAS_D, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS, BLOCK_P, BLOCK_N,
                             BLOCK_L, CHUNKS, EVEN_ROWS, EVEN_COLS)
    else:
        if not EARLY_STATE:
            g, state_ptrs, mask_pn, S0, C, x, xf, dt, A, B, Bf, D, z = _step_loads(
                state_ptr, slot, pid_b, pid_h, heads_per_group, mask_p, mask_n, offs_p, offs_n, x_ptr, dt_ptr, A_ptr,
                B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, stride_state_slot, stride_state_h, stride_state_p, stride_x_b,
                stride_x_h, stride_dt_b, stride_dt_h, stride_A_h, stride_B_b, stride_B_g, stride_C_b, stride_C_g,
                stride_D_h, stride_D_p, stride_z_b, stride_z_h, stride_dtb_h, HAS_D, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS)
        dtc_base = dt_cache_ptr + slot * stride_dtc_slot + pid_h * stride_dtc_h
        xc_base = x_cache_ptr + slot * stride_xc_slot + pid_h * stride_xc_h
        Bc_base = B_cache_ptr + slot * stride_Bc_slot + g * stride_Bc_g
        offs_l = tl.arange(0, BLOCK_L)
        dt_hist = tl.load(dtc_base + offs_l, mask=offs_l < w, other=0.0)
        total = tl.sum(dt_hist, axis=0) + dt  # T: dt summed over the cached steps and this one
        decay0 = tl.exp(tl.minimum(A * total, 0.0))
        seen = dt * 0.0

        # The ring is walked in chunks of FOLD_CHUNK entries: a chunk's loads are independent
        # and issue together, and a chunk past w is skipped by a uniform branch. (The trip
        # count is a constant: the interpreter cannot loop to a loaded bound.) Everything
        # stays in the blocked layout of the checkpoint.
        if MODE == NONFLUSH:
            # y = exp(A T) S_0 C + sum_j coef_j (B_j . C) x_j + dt (B . C) x, never forming S.
            y = decay0 * tl.sum(S0 * C[None, :], axis=1) + (dt * tl.sum(Bf * C, axis=0)) * xf
            if FOLD_CHUNK == 0:
                # The whole ring as tiles ([L, N] of B, [P, L] of x, masked past w): every
                # entry's loads and its B_j . C issue together, with no chain over j.
                in_ring = offs_l < w
                dt_ring = tl.load(dtc_base + offs_l, mask=in_ring, other=0.0)
                coef = dt_ring * tl.exp(tl.minimum(A * (total - tl.cumsum(dt_ring, axis=0)), 0.0))
                Bm = tl.load(Bc_base + offs_l[:, None] * stride_Bc_l + offs_n[None, :],
                             mask=in_ring[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
                X = tl.load(xc_base + offs_l[None, :] * stride_xc_l + offs_p[:, None],
                            mask=mask_p[:, None] & in_ring[None, :], other=0.0).to(tl.float32)
                y += tl.sum(X * (coef * tl.sum(Bm * C[None, :], axis=1))[None, :], axis=1)
            else:
                for c in range(0, BLOCK_L // FOLD_CHUNK):
                    if c * FOLD_CHUNK < w:
                        for i in tl.static_range(FOLD_CHUNK):
                            seen, coef_j, x_j, B_j = _ring_entry(c * FOLD_CHUNK + i, w, seen, total, A, dtc_base,
                                                                 xc_base, Bc_base, stride_xc_l, stride_Bc_l, offs_p,
                                                                 offs_n, mask_p, mask_n)
                            y += (coef_j * tl.sum(B_j * C, axis=0)) * x_j
        else:
            # S = exp(A T) S_0 + sum_j coef_j x_j B_j^T + dt x B^T, as w rank-1 updates (fp32 FMAs).
            S = S0 * decay0 + (dt * xf)[:, None] * Bf[None, :]
            for c in range(0, BLOCK_L // FOLD_CHUNK):
                if c * FOLD_CHUNK < w:
                    for i in tl.static_range(FOLD_CHUNK):
                        seen, coef_j, x_j, B_j = _ring_entry(c * FOLD_CHUNK + i, w, seen, total, A, dtc_base, xc_base,
                                                             Bc_base, stride_xc_l, stride_Bc_l, offs_p, offs_n,
                                                             mask_p, mask_n)
                        S += (coef_j * x_j)[:, None] * B_j[None, :]
            y = tl.sum(S * C[None, :], axis=1)
            if is_flush:
                tl.store(state_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_pn)

        if not is_flush:
            tl.store(xc_base + w * stride_xc_l + offs_p, x.to(x_cache_ptr.dtype.element_ty), mask=mask_p)
            if pid_p == 0:
                tl.store(dtc_base + w, dt)
                if pid_h % heads_per_group == 0:  # one head per group appends the shared B
                    tl.store(Bc_base + w * stride_Bc_l + offs_n, B.to(B_cache_ptr.dtype.element_ty), mask=mask_n)

        store_output(y, xf, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b, stride_out_h, HAS_D, HAS_Z)


def check_ring(step: Mamba2Step, state: torch.Tensor, x_cache: torch.Tensor, dt_cache: torch.Tensor,
               B_cache: torch.Tensor, write_pos: torch.Tensor) -> int:
    """Check one layer's ring against the step; returns the buffer length L."""
    slots, H, P, N, G = state.shape[0], step.nheads, step.headdim, step.dstate, step.ngroups
    dev = step.x.device
    check_tensor("x_cache", x_cache, (slots, H, None, P), (step.x.dtype,), dev)
    L = x_cache.shape[2]
    check_buffer_len(L)
    check_tensor("dt_cache", dt_cache, (slots, H, L), (torch.float32,), dev)
    check_tensor("B_cache", B_cache, (slots, G, L, N), (step.B.dtype,), dev)
    check_tensor("write_pos", write_pos, (slots,), (torch.int32,), dev)
    for name, t in (("x_cache", x_cache), ("dt_cache", dt_cache), ("B_cache", B_cache)):
        check_slot_major(name, t)
    check_contiguous("write_pos", write_pos)
    return L


def choose_route(state: torch.Tensor, x: torch.Tensor, B: torch.Tensor) -> str:
    """Route the measured table picks for this batch size and geometry."""
    return select_route(device_table_tag(x.device), state.dtype, x.dtype, x.shape[2], B.shape[2], x.shape[0],
                        nheads=x.shape[1])


def selective_state_update_replayssm(
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
    *,
    x_cache: torch.Tensor,
    dt_cache: torch.Tensor,
    B_cache: torch.Tensor,
    write_pos: torch.Tensor,
    force_flush: Optional[torch.Tensor] = None,
    route: str = "auto",
    config: Optional[LaunchConfig] = None,
    fold_config: Optional[LaunchConfig] = None,
) -> torch.Tensor:
    """One ReplaySSM Mamba2 decode step for a batch (one layer).

    Same step arguments as :func:`selective_state_update`; ``state`` is the checkpoint pool
    ``(slots, H, P, N)``. Ring of this layer: ``x_cache (slots, H, L, P)`` in x's dtype,
    ``dt_cache (slots, H, L)`` fp32, ``B_cache (slots, G, L, N)`` in B's dtype; cursors
    ``write_pos (slots,)`` int32 in ``[0, L)``, shared by all layers and advanced once per
    step by :func:`advance_write_pos` after every layer ran. ``force_flush (B,)``: rows
    whose ring is folded into the checkpoint at this step.

    A padding row (slot ``pad_slot_id``) changes nothing. A row whose slot or cursor is out
    of range gets NaN outputs and changes nothing (checked on device: no host sync).
    ``route="auto"`` takes :func:`choose_route`; pass the same route to the cursor advance.
    ``config`` / ``fold_config``: launch configs of the main and the fold launch (by
    default the ones measured for this shape).
    """
    step = parse_mamba2_step(x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id, out)
    check_state_pool("state", state, step)
    L = check_ring(step, state, x_cache, dt_cache, B_cache, write_pos)
    if force_flush is not None:
        check_vector("force_flush", force_flush, step.batch, FLAG_DTYPES, x.device)
    if route == "auto":
        route = choose_route(state, x, B)
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES + ('auto',)}, got {route!r}")
    if step.batch == 0:
        return step.out
    arch = device_table_tag(x.device)

    def pick(kernel: str, given: Optional[LaunchConfig]) -> LaunchConfig:
        return given or select_config(kernel, arch, state.dtype, x.dtype, step.headdim, step.dstate, step.batch,
                                      nheads=step.nheads)

    if route in FLUSH_EVERY_STEP:
        # One launch of the standard kernel: on always_flush a row whose ring is not empty (a
        # route switch) replays it on its state first, and with every ring empty it costs
        # what standard_step costs; standard_step takes only an empty ring.
        cfg = pick(config_kernel(route), config)
        if route == "always_flush":
            launch_standard_step(state, step, cfg, write_pos, L, rings=(x_cache, dt_cache, B_cache))
        else:
            launch_standard_step(state, step, cfg, write_pos, 1)
        return step.out
    step_cfg = pick(route, config)
    args = dict(
        state_ptr=state, **ring_args(x_cache, dt_cache, B_cache), write_pos_ptr=write_pos,
        force_flush_ptr=force_flush if force_flush is not None else write_pos,
        num_slots=state.shape[0], nheads=step.nheads, headdim=step.headdim, dstate=step.dstate,
        heads_per_group=step.nheads // step.ngroups, buffer_len=L,
        stride_state_slot=state.stride(0), stride_state_h=state.stride(1), stride_state_p=state.stride(2),
        **step.kernel_args(), HAS_FORCE_FLUSH=force_flush is not None,
    )
    block_n, block_l = triton.next_power_of_2(step.dstate), max(2, triton.next_power_of_2(L))
    head_rows = step.batch * step.nheads
    pdl = route == "output_only" and fold_programmatic_launch(x.device, head_rows, "mamba2")
    mode = NONFLUSH.value if route == "output_only" else REBUILD.value

    # The non-flush launch may run several row blocks a program (loop_blocks); the rebuild
    # launch runs one.
    step_cfg = clamp_loop_blocks(step_cfg, step.headdim) if mode == NONFLUSH.value else replace(step_cfg, loop_blocks=1)
    chunks = step_cfg.loop_blocks

    def launch_step():
        launch_kernel(_replay_step_kernel, grid(step.batch, step.nheads, step.headdim, step_cfg), **args,
                      MODE=mode, BLOCK_P=step_cfg.block_p, BLOCK_N=block_n, BLOCK_L=block_l,
                      # 0: the non-flush launch walks the ring as whole tiles (no chunks)
                      FOLD_CHUNK=(min(step_cfg.fold_chunk, block_l) if mode == NONFLUSH.value
                                  else max(1, min(step_cfg.fold_chunk, block_l))),
                      **even_rows_and_cols(step.headdim, step_cfg.block_p * chunks, step.dstate, block_n),
                      **({"CHUNKS": chunks} if chunks > 1 else {}),
                      EARLY_STATE=bool(step_cfg.early_state), num_warps=step_cfg.num_warps,
                      **pdl_options(pdl, primary=True))

    if route == "state_and_output":
        launch_step()
    else:
        fold_cfg = pick("fold", fold_config)
        launch_fold_beside(lambda: launch_fold(args, step, fold_cfg, block_n, block_l, pdl=pdl), launch_step,
                           x.device, fold_side_stream(x.device, head_rows, "mamba2"))
    return step.out


def selective_state_update_replayssm_output_only(*args, **kwargs) -> torch.Tensor:
    """:func:`selective_state_update_replayssm` on the ``output_only`` route."""
    return selective_state_update_replayssm(*args, route="output_only", **kwargs)


def selective_state_update_replayssm_state_and_output(*args, **kwargs) -> torch.Tensor:
    """:func:`selective_state_update_replayssm` on the ``state_and_output`` route."""
    return selective_state_update_replayssm(*args, route="state_and_output", **kwargs)
