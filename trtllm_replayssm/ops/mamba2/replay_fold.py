"""The fold launch of the Mamba2 ReplaySSM step: rows that flush at this step fold their
ring into the checkpoint and store it.

A kernel of its own, not a mode of the replay step kernel: registers are allocated for
the largest path of a kernel, and a fold that shared its source with the output-only
step and its ring walk needed 200-255 registers a thread, which left two or three
programs an SM and half the copy bandwidth. Here the program holds only the checkpoint
tile and two small ring tiles (~100 registers at 32 rows x 128 states on 4 warps).

The step's own token is entry ``w`` of the ring tiles (the ring holds entries ``0..w-1``
and ``w < L <= BLOCK_L``), so the fold is one matmul with no separate rank-1 term:

    S_new = exp(A T) S_0 + (X * coef) @ B_ring,  coef_j = dt_j exp(A (T - c_j))
    y     = S_new C + D x  (gated by silu(z))

with ``c_j`` the running sum of dt and ``T = c_w``. Into an fp32 (or fp16) checkpoint the
matmul is fp32-accurate: with bf16/fp16 activations the ring's B is exact in TF32 and two
TF32 passes suffice (:func:`~trtllm_replayssm.ops.common.split_tf32_dot`), else tf32x3.
Into a bf16 checkpoint, whose store rounds more than one TF32 pass does, it is one pass
(:func:`~trtllm_replayssm.ops.common.one_pass_fold`). It needs tiles of at least 16 in
every dimension (masked past P, N and w).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Tuple

import triton
import triton.language as tl

from ..common import (block_flush_ordinals, complete_after_primary, dim_mask, even_rows_and_cols, exact_in_tf32,
                      fold_precision, fold_row_blocks, load_slot, one_pass_fold, row_in_block, row_of_ordinal,
                      small_matmul, step_flush_rows)
from ..launch import LaunchConfig, clamp_loop_blocks, fold_row_programs, launch_kernel, pdl_options
from ._common import finish_output, load_dt


def product_constexprs(one_pass: bool, exact_b: bool) -> dict:
    """``EXACT_B``, ``DOT_PRECISION`` and ``ONE_PASS_PRECISION`` of the fold's product: one
    TF32 pass, or fp32-accurate (the split pass where the ring's B is exact in TF32,
    ``exact_b``, else tf32x3); :func:`~trtllm_replayssm.ops.common.fold_precision`."""
    return dict(EXACT_B=exact_b and not one_pass, DOT_PRECISION=fold_precision(one_pass),
                ONE_PASS_PRECISION=fold_precision(True))


# Pipeline stages of the loop over a head's blocks of rows (None: Triton's default, which
# stages only the loads that feed the matmul; 2-3: every load, the next block's state
# in flight while this one folds). H200, fp32 state, batch 128 / 512, flush step in us
# (``benchmarks/results/loop_stages.json``): Super 454 / 1759 -> 423 / 1670 with 3
# stages, Nano 417 / 1633 -> 383 / 1495; 2 stages no gain; 4 stages 2-4% slower than 3
# (commit 0ac52d0, same file).
LOOP_STAGES = 3


@triton.jit
def fold_ring_weights(A, w, dt, B, dtc_base, Bc_base, stride_Bc_l, offs_l, offs_n, mask_n):
    """A head's side of its fold, shared by all its rows: the ring's B rows ``[L, N]`` with
    the step's own ``B`` as entry ``w``, the weights ``coef_j = dt_j exp(A (T - c_j))``
    ``[L]`` and the checkpoint's decay ``exp(A T)``."""
    in_ring = offs_l < w
    at_w = offs_l == w  # this step's token is entry w
    dt_ring = tl.where(at_w, dt, tl.load(dtc_base + offs_l, mask=in_ring, other=0.0))
    Bm = tl.load(Bc_base + offs_l[:, None] * stride_Bc_l + offs_n[None, :],
                 mask=in_ring[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
    Bm = tl.where(at_w[:, None], B[None, :], Bm)
    total = tl.sum(dt_ring, axis=0)
    after = total - tl.cumsum(dt_ring, axis=0)  # dt summed over the entries after j
    coef = dt_ring * tl.exp(tl.minimum(A * after, 0.0))
    decay = tl.exp(tl.minimum(A * total, 0.0))
    return Bm, coef, decay


@triton.jit
def fold_rows(S0, x, w, Bm, coef, decay, xc_base, stride_xc_l, offs_p, offs_l, mask_p, EXACT_B: tl.constexpr,
              DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr):
    """A block of rows' new checkpoint ``exp(A T) S_0 + (X * coef) @ B_ring`` ``[P, N]`` (fp32
    ``S0``, ``x``), X ``[P, L]`` the ring's x with the step's own ``x`` as entry ``w``."""
    X = tl.load(xc_base + offs_l[None, :] * stride_xc_l + offs_p[:, None],
                mask=mask_p[:, None] & (offs_l < w)[None, :], other=0.0).to(tl.float32)
    X = tl.where((offs_l == w)[None, :], x[:, None], X)
    return S0 * decay + small_matmul(X * coef[None, :], Bm, True, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)


@triton.jit
def fold_row_heads(pid_b, pid_hg, offs_p0, offs_n, offs_l, mask_n,
                   state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, slot_idx_ptr,
                   x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr,
                   num_slots, nheads, headdim, heads_per_group, pad_slot_id,
                   stride_state_slot, stride_state_h, stride_state_p, stride_xc_slot, stride_xc_h, stride_xc_l,
                   stride_dtc_slot, stride_dtc_h, stride_Bc_slot, stride_Bc_g, stride_Bc_l,
                   stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
                   stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
                   stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
                   HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
                   DT_SOFTPLUS: tl.constexpr, BLOCK_P: tl.constexpr, EVEN_ROWS: tl.constexpr, EXACT_B: tl.constexpr,
                   DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr, HEADS_PER_PROG: tl.constexpr,
                   CHUNKS: tl.constexpr, EVEN_HEADS: tl.constexpr, LOOP_STAGES: tl.constexpr):
    """Batch row ``pid_b``'s flush step (fold, store, output) on a fold program's heads
    (group ``pid_hg``) and run of blocks of rows (from ``offs_p0``)."""
    # The row's slot and cursor again, as scalars (the program's vector load of the batch's
    # cursors left them in cache).
    slot, _, _ = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    w = tl.load(write_pos_ptr + slot)
    # A fold program may loop over several heads and rows so that the launch is a few
    # programs that return at once on the many steps where no row flushes; and over
    # several blocks of a head's rows (CHUNKS), the head's ring scalars and B tile
    # loaded once for all.
    for hh in range(0, HEADS_PER_PROG):
        pid_h = pid_hg * HEADS_PER_PROG + hh
        if EVEN_HEADS or (pid_h < nheads):  # EVEN_HEADS: no branch (nheads % HEADS_PER_PROG == 0)
            g = pid_h // heads_per_group
            A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
            dtc_base = dt_cache_ptr + slot * stride_dtc_slot + pid_h * stride_dtc_h
            xc_base = x_cache_ptr + slot * stride_xc_slot + pid_h * stride_xc_h
            Bc_base = B_cache_ptr + slot * stride_Bc_slot + g * stride_Bc_g
            B = tl.load(B_ptr + pid_b * stride_B_b + g * stride_B_g + offs_n, mask=mask_n,
                        other=0.0).to(tl.float32)
            dt = load_dt(dt_ptr, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h,
                         HAS_DT_BIAS, DT_SOFTPLUS)
            Bm, coef, decay = fold_ring_weights(A, w, dt, B, dtc_base, Bc_base, stride_Bc_l, offs_l, offs_n,
                                                mask_n)
            C = tl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_n, mask=mask_n,
                        other=0.0).to(tl.float32)
            for c in tl.range(0, CHUNKS, num_stages=LOOP_STAGES):
                offs_p = offs_p0 + c * BLOCK_P
                mask_p = dim_mask(offs_p, headdim, EVEN_ROWS)
                mask_pn = mask_p[:, None] & mask_n[None, :]
                x = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p,
                            other=0.0).to(tl.float32)
                state_ptrs = (state_ptr + slot * stride_state_slot + pid_h * stride_state_h
                              + offs_p[:, None] * stride_state_p + offs_n[None, :])
                S0 = tl.load(state_ptrs, mask=mask_pn, other=0.0).to(tl.float32)
                S = fold_rows(S0, x, w, Bm, coef, decay, xc_base, stride_xc_l, offs_p, offs_l, mask_p,
                              EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
                tl.store(state_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_pn)
                y = tl.sum(S * C[None, :], axis=1)
                finish_output(y, x, offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, out_ptr, stride_D_h,
                              stride_D_p, stride_z_b, stride_z_h, stride_out_b, stride_out_h, HAS_D, HAS_Z)


@triton.jit(do_not_specialize=["num_slots", "batch"])
def _replay_fold_kernel(
    state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, force_flush_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, batch, nheads, headdim, dstate, heads_per_group, buffer_len, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p,
    stride_xc_slot, stride_xc_h, stride_xc_l,
    stride_dtc_slot, stride_dtc_h,
    stride_Bc_slot, stride_Bc_g, stride_Bc_l,
    stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
    stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
    stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    HAS_SLOT_IDX: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr,
    EVEN_ROWS: tl.constexpr, EVEN_COLS: tl.constexpr, EXACT_B: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ONE_PASS_PRECISION: tl.constexpr, HEADS_PER_PROG: tl.constexpr, CHUNKS: tl.constexpr, EVEN_HEADS: tl.constexpr,
    ROW_BLOCK: tl.constexpr = 1, ROW_PROGS: tl.constexpr = 0, LOOP_STAGES: tl.constexpr = None, WAIT_PRIMARY: tl.constexpr = False,
):
    """Programs ``(runs of CHUNKS headdim blocks, groups of HEADS_PER_PROG heads, blocks of
    ROW_BLOCK batch rows, or ROW_PROGS programs that share the batch's flushing rows)``
    (:func:`~..common.fold_row_blocks`).

    Rows that flush at this step (``w == L - 1`` or force-flushed) take their step here
    (fold, store, output); other rows are skipped, their step is the non-flush launch's.
    Invalid rows are skipped too: the launch that takes their step reports them.
    """
    pid_p = tl.program_id(0)
    pid_hg = tl.program_id(1)
    offs_p0 = pid_p * (BLOCK_P * CHUNKS) + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    offs_l = tl.arange(0, BLOCK_L)
    mask_n = dim_mask(offs_n, dstate, EVEN_COLS)
    if ROW_PROGS == 0:
        # A block of rows: one vector load of its cursors, and on the many steps where none
        # of them flush the program returns at once. No loop around the fold here: the
        # shared rows' scan below, run for one block, held its state across the fold (sm_90,
        # 32 rows on 8 warps, batch 8: 75 -> 94 registers a thread, 3 -> 2 programs an SM,
        # Nano-4B fp32 15.6 -> 16.5 us a step).
        selected = step_flush_rows(slot_idx_ptr, write_pos_ptr, force_flush_ptr, tl.program_id(2), batch, num_slots,
                                   buffer_len, pad_slot_id, HAS_SLOT_IDX, HAS_FORCE_FLUSH, ROW_BLOCK)
        if tl.max(selected, axis=0) == 0:
            complete_after_primary(WAIT_PRIMARY)
            return
        for i in range(0, ROW_BLOCK):
            if row_in_block(selected, i, ROW_BLOCK):
                fold_row_heads(tl.program_id(2) * ROW_BLOCK + i, pid_hg, offs_p0, offs_n, offs_l, mask_n,
                               state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, slot_idx_ptr,
                               x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr,
                               num_slots, nheads, headdim, heads_per_group, pad_slot_id,
                               stride_state_slot, stride_state_h, stride_state_p, stride_xc_slot, stride_xc_h,
                               stride_xc_l, stride_dtc_slot, stride_dtc_h, stride_Bc_slot, stride_Bc_g, stride_Bc_l,
                               stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
                               stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
                               stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
                               HAS_D, HAS_Z, HAS_DT_BIAS, HAS_SLOT_IDX, DT_SOFTPLUS, BLOCK_P, EVEN_ROWS, EXACT_B,
                               DOT_PRECISION, ONE_PASS_PRECISION, HEADS_PER_PROG, CHUNKS, EVEN_HEADS, LOOP_STAGES)
    else:
        block, end_block, place = fold_row_blocks(batch, ROW_BLOCK, ROW_PROGS)
        before = 0
        # (while, not a for over a runtime range: the interpreter takes no runtime range bound)
        while block < end_block:
            # One vector load of the block's cursors: on the many steps where none of its
            # rows flush, a program costs one chain of memory round trips, not one a row.
            selected, ordinal, first, mine, before = block_flush_ordinals(
                slot_idx_ptr, write_pos_ptr, force_flush_ptr, block, before, place, batch, num_slots, buffer_len,
                pad_slot_id, HAS_SLOT_IDX, HAS_FORCE_FLUSH, ROW_BLOCK, ROW_PROGS)
            for k in range(0, (ROW_BLOCK + ROW_PROGS - 1) // ROW_PROGS):  # the share's most in a block
                if k < mine:
                    pid_b = row_of_ordinal(selected, ordinal, first + k * ROW_PROGS, block, ROW_BLOCK)
                    fold_row_heads(pid_b, pid_hg, offs_p0, offs_n, offs_l, mask_n,
                                   state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, slot_idx_ptr,
                                   x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr,
                                   num_slots, nheads, headdim, heads_per_group, pad_slot_id,
                                   stride_state_slot, stride_state_h, stride_state_p, stride_xc_slot, stride_xc_h,
                                   stride_xc_l, stride_dtc_slot, stride_dtc_h, stride_Bc_slot, stride_Bc_g, stride_Bc_l,
                                   stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
                                   stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
                                   stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
                                   HAS_D, HAS_Z, HAS_DT_BIAS, HAS_SLOT_IDX, DT_SOFTPLUS, BLOCK_P, EVEN_ROWS, EXACT_B,
                                   DOT_PRECISION, ONE_PASS_PRECISION, HEADS_PER_PROG, CHUNKS, EVEN_HEADS, LOOP_STAGES)
            block += 1
    complete_after_primary(WAIT_PRIMARY)


def fold_launch_plan(args: dict, step, cfg: LaunchConfig, block_n: int, block_l: int) -> Tuple[tuple, dict]:
    """``(programs over headdim and heads, constexprs and warps)`` of a fold launch over
    ``step`` with the replay step's pointer/stride ``args``, the batch axis left to the
    caller. The matmul needs tiles of at least 16, so ``block_p`` is raised to 16 where the
    config asks for less."""
    cfg = clamp_loop_blocks(replace(cfg, block_p=max(16, cfg.block_p)), step.headdim)
    block_n = max(16, block_n)
    hpp = cfg.heads_per_prog
    programs = (triton.cdiv(step.headdim, cfg.block_p * cfg.loop_blocks), triton.cdiv(step.nheads, hpp))
    return programs, dict(
        BLOCK_P=cfg.block_p, BLOCK_N=block_n, BLOCK_L=max(16, block_l),
        **even_rows_and_cols(step.headdim, cfg.block_p * cfg.loop_blocks, step.dstate, block_n),
        **product_constexprs(one_pass_fold(args["state_ptr"].dtype), exact_in_tf32(args["B_cache_ptr"].dtype)),
        HEADS_PER_PROG=hpp, CHUNKS=cfg.loop_blocks, EVEN_HEADS=step.nheads % hpp == 0, LOOP_STAGES=LOOP_STAGES,
        num_warps=cfg.num_warps)


def launch_fold(args: dict, step, cfg: LaunchConfig, block_n: int, block_l: int, pdl: bool = False) -> None:
    """Launch the fold over ``step``'s batch with the replay step's pointer/stride ``args``
    (:func:`~.replay.selective_state_update_replayssm` builds them; :func:`fold_launch_plan`).
    ``pdl``: as a programmatic dependent launch of the non-flush launch (``ops.launch.FOLD_PDL``)."""
    programs, constexprs = fold_launch_plan(args, step, cfg, block_n, block_l)
    launch_kernel(_replay_fold_kernel, (*programs, fold_row_programs(step.batch, cfg)), **args, batch=step.batch,
                  ROW_BLOCK=cfg.row_block, ROW_PROGS=cfg.row_progs, **constexprs, **pdl_options(pdl, primary=False))
