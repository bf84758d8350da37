"""ReplaySSM Mamba2 speculative verify on a circular ring (``replayssm.md`` section 3).

Per slot: a checkpoint ``S_0`` and a ring of ``buf = next_pow2(Bh + T)`` step inputs at
physical index ``(origin + i) & (buf - 1)``; cursors ``wp`` (committed history length),
``origin`` and ``is_flush``. One verify step takes ``T = 1 + drafts`` tokens per row:

1. writes the T draft inputs at logical ``wp .. wp+T-1``;
2. non-flush: computes the T outputs causally from checkpoint + history + drafts, all
   positions together, writing no state;
3. flush: folds only the committed history into the checkpoint and stores it, then the T
   outputs on top of it (drafts are never folded: acceptance is not known yet).

With ``H`` the dt summed over the history on top of the checkpoint and ``D_t`` over the
drafts up to ``t``, output ``t`` is

    y_t = exp(A (H + D_t)) S_0 C_t + exp(A D_t) sum_{j < h} dt_j exp(A (H - c_j)) (B_j . C_t) x_j
          + sum_{d <= t} dt_d exp(A (D_t - D_d)) (B_d . C_t) x_d          (+ D x_t, gate)

By default (``split_fold`` 3) a step is three launches: the flush rows fold; every row's
outputs but the first term (and its decay ``exp(A (H + D_t))``) go to a workspace; then a
lean launch streams the checkpoint through ``S_0 C_t``, adds the rest and gates. The
first term is the only one that reads the state, and alone it runs at copy bandwidth.

:func:`commit_replayssm_spec` then moves the cursors by the accepted count (no copies) and
:func:`reset_replayssm_spec_cursors` starts slots that enter decode.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Optional

import torch
import triton
import triton.language as tl

from ..._validation import (FLOAT_DTYPES, INDEX_DTYPES, check_contiguous, check_count, check_last_dim_contiguous,
                           check_slot_major, check_tensor, check_vector)
from ..common import (DOT_PRECISION, ONE_PASS_PRECISION, dim_mask, even_rows_and_cols, exact_in_tf32, exact_lhs_matmul,
                      load_row_slots, load_spec_row, native_dot, ring_positions, small_matmul, spec_cursors_bad,
                      row_in_block, store_nan_tokens, tile_masks)
from ..launch import LaunchConfig, launch_kernel, nearest_batch_point
from .step_inputs import parse_mamba2_step

MAX_T = 8
MAX_HISTORY = 64
# Verify phases: one launch does everything (BOTH); or the flush rows fold first in a
# launch of their own (FOLD_ONLY) and the verify launch (AFTER_FOLD) is compiled without
# the fold (split_fold 1: a flush row's state is read twice); or the flush rows take the
# whole step, fold and verify, in a launch of their own (FLUSH_ROWS) and the other rows
# in one compiled without the fold (NONFLUSH_ROWS) (split_fold 2: the state read once); or,
# after a FOLD_ONLY launch, every row's outputs in two parts (split_fold 3): a launch that
# forms all but the state's product (RING_PART: the history's and drafts' terms, D x and
# the state's decay per token, to a workspace) and a lean launch of the state's product
# S_0 C^T alone, which adds the rest and gates (``_spec_state_product_kernel``).
BOTH, FOLD_ONLY, AFTER_FOLD = tl.constexpr(0), tl.constexpr(1), tl.constexpr(2)
FLUSH_ROWS, NONFLUSH_ROWS, RING_PART = tl.constexpr(3), tl.constexpr(4), tl.constexpr(5)
# The launches of each split_fold setting of ``_spec_verify_kernel``, in order (split_fold
# 3 then launches the state's product).
PHASES = {0: (BOTH,), 1: (FOLD_ONLY, AFTER_FOLD), 2: (FLUSH_ROWS, NONFLUSH_ROWS), 3: (FOLD_ONLY, RING_PART)}
STATE_APART = 3  # the split_fold whose outputs take a launch of the state's product
# The state's product in a launch of its own (split_fold 3), after the flush rows' fold;
# the launch of the rest (the ring's part) takes a whole head's rows on one warp and all
# the heads of a group (its B.C products computed once). H200, Super, T = 4, all
# accepted, us a verify step at batch 128 / 512 (``benchmarks/results/spec_state_apart.json``):
# split_fold 1 with 16 rows on one warp 365 / 1384 (its non-flush step 300: 255 registers,
# 12.5% occupancy, latency-bound); split_fold 3, 16 rows 341 / 1272, 32 rows 310 / 1178,
# 64 rows 286 / 1087 (a non-flush step 219: the state's product 146, 88% of copy
# bandwidth, the ring's part 68). 128 rows (cut to a head's, next_pow2(headdim)) take Nano's headdim
# 80 in one tile: the tuner's pick there too (``benchmarks/results/spec.json``).
SPEC_CONFIG = LaunchConfig(block_p=128, num_warps=1, heads_per_prog=16, split_fold=3)
# The verify's default config by batch: each serves the batches nearest its batch point in
# log scale (a tie: the smaller point; :func:`spec_config`). Small batches: the flush
# rows' whole step in a launch of their own and the rest fused (split_fold 2, 4 heads a
# program; fewer launches: the ring part's chain is latency-bound); up to batch 64, the
# ring part on 8 heads a program (twice the programs). H200, T = 4, 3 accepted, us a
# verify step (commit 15c36a3, ``python benchmarks/probe_spec_small_batch.py``,
# ``benchmarks/results/mamba2_spec_small_batch.json``; rows, warps, heads, split_fold):
# (16, 1, 4, 2) / (64, 1, 8, 3) / (64, 1, 16, 3), Super's headdim 64 taking 128 rows as
# 64: Super at batch 1 15.3 / 25.3 / 38.5, 8 30.3 / 41.8 / 56.9, 16 56.8 / 56.5 / 72.0,
# 24 80.1 / 70.5 / 85.7, 32 102.0 / 83.1 / 98.0, 64 188.6 / 135.9 / 148.1, 96 273.8 /
# 206.3 / 202.9; Nano-4B (12 heads a group: 8 and 16 a program both take 4) at 1 15.2 /
# 18.3 / 18.3, 8 29.1 / 33.0 / 33.0, 16 54.2 / 50.0 / 49.9.
SPEC_PLANS = {
    4: LaunchConfig(block_p=16, num_warps=1, heads_per_prog=4, split_fold=2),
    32: LaunchConfig(block_p=128, num_warps=1, heads_per_prog=8, split_fold=3),
    128: SPEC_CONFIG,
}


def spec_config(batch: int) -> LaunchConfig:
    """The verify's default config at ``batch`` (:data:`SPEC_PLANS`)."""
    return SPEC_PLANS[nearest_batch_point(tuple(SPEC_PLANS), batch)]


# The state's product launch (split_fold 3): rows of headdim a program, dstate columns a
# step of its loop, warps, pipeline stages of the loop. H200, Super, T = 4, us a launch
# at batch 128 / 512 (reading the checkpoint at copy bandwidth: 128 / 510): 32 rows, 32
# columns, one warp, 3 stages 146 / 557; 32 x 64, 2 stages 148 / 570; 64 x 32 on 2
# warps 150 / 570; 16 x 64 165 / 646; a whole row of 128 columns a step (no pipelining)
# 176-191 / 688-744 (``benchmarks/results/spec_state_apart.json``).
STATE_PRODUCT_ROWS, STATE_PRODUCT_COLS, STATE_PRODUCT_WARPS, STATE_PRODUCT_STAGES = 32, 32, 1, 3
# Rows and warps of the launch of the flush rows alone (the fold-only launch of split_fold 1
# and 3; the flush rows' whole step of split_fold 2), one head a program; None: the
# verify's rows and warps. The fold holds the whole state tile (255 registers and 52 B
# spilled at 16 rows on one warp); with the verify on 16 rows a warp, a fold launch on 32
# or 64 rows lost (444-479 against 375 us); with the ring's part on 32 rows a warp, the
# fold on the verify's rows cost 32 us a verify step more (Super, batch 128).
SPEC_FOLD_CONFIG: Optional[LaunchConfig] = LaunchConfig(16, 1)
# Whether the outputs' small products (the x tiles against their weights, [P, L] x [L, T]
# and [P, T] x [T, T]) run as fp32 FMAs rather than two TF32 passes over a split weight.
# Off: on GDN's verify the FMAs won (448 against 524 us), on this one they lost (H200,
# Super, T = 4, batch 128: 418-537 against 375-479, ``mamba2_spec_variants.json``).
SMALL_ON_FMA = False
# (The state's product S_0 C^T as fp32 FMAs over the T tokens, chunked along dstate, lost
# further: 460-834 against 366 us, commit d7dd343, ``mamba2_spec_state_fma.json``; so did
# the state in three bf16 pieces instead of two TF32 ones: 377-430 against 367-419, commit
# caa9a54, ``spec_state_split.json``.)
# A launch that serves the flush rows alone (FOLD_ONLY, FLUSH_ROWS) gives each program up
# to FLUSH_ROW_BLOCK batch rows, which it looks through with one vector load and folds
# one after another; fewer where the launch would then have fewer than
# FLUSH_MIN_PROGRAMS programs (a step in which every row flushes must still fill the GPU).
# One program a row cost ~30-45 us a verify step at batch 128 with no row flushing (H200,
# Super, ncu: every program's chain of cursor loads). H200, Super, T = 4, all rows
# flushing together every 7th step, us a verify step, split_fold 1
# (``benchmarks/results/spec_flush_rows.json``): batch 128, 32 rows on 2 warps 375 -> 367,
# 16 rows on 1 warp 395 -> 367; batch 512, 1447 -> 1410. The GDN verify keeps a program a
# row: blocks of 2-16 rows lost 1-4% there (its fold kernel's registers 126 -> 166).
# (Pipeline stages on the verify's loop over heads, 2-3, lost too: 373-397 against 364-366.)
FLUSH_ROW_BLOCK = 16
FLUSH_MIN_PROGRAMS = 4096


def flush_row_block(other_programs: int, batch: int) -> int:
    """Batch rows a program of a flush-rows launch takes, given the programs it has along
    the other grid axes (see :data:`FLUSH_ROW_BLOCK`)."""
    rows = FLUSH_ROW_BLOCK
    while rows > 1 and other_programs * triton.cdiv(batch, rows) < FLUSH_MIN_PROGRAMS:
        rows //= 2
    return rows


def check_split_fold(cfg: LaunchConfig, supported=tuple(PHASES)) -> None:
    """``cfg.split_fold`` names a launch split of :data:`PHASES` that the verify supports
    (GDN's: 0-2)."""
    if cfg.split_fold not in supported:
        raise ValueError(f"config.split_fold must be one of {sorted(supported)}, got {cfg.split_fold}")


def serves_flush_rows_alone(phase) -> bool:
    """Whether a verify launch in ``phase`` serves the flush rows alone (FOLD_ONLY,
    FLUSH_ROWS): such a launch takes :func:`phase_config`'s config and blocks of rows."""
    return phase is FOLD_ONLY or phase is FLUSH_ROWS


def phase_config(cfg: LaunchConfig, phase) -> LaunchConfig:
    """The launch config of ``phase`` under the verify config ``cfg``: a launch of the flush
    rows alone (FOLD_ONLY, FLUSH_ROWS) takes :data:`SPEC_FOLD_CONFIG`, or the verify's rows
    and warps on one head a program; the others ``cfg``."""
    if serves_flush_rows_alone(phase):
        return SPEC_FOLD_CONFIG or replace(cfg, heads_per_prog=1)
    return cfg


@triton.jit
def leaves_row(is_flush, PHASE: tl.constexpr):
    """Whether a verify launch in ``PHASE`` leaves this row to another launch: FOLD_ONLY
    and FLUSH_ROWS serve the flush rows alone, NONFLUSH_ROWS the others (shared by the
    Mamba2 and GDN verify kernels)."""
    if PHASE == FOLD_ONLY or PHASE == FLUSH_ROWS:
        return is_flush == 0
    elif PHASE == NONFLUSH_ROWS:
        return is_flush != 0
    else:
        return is_flush & False


def heads_per_program(cfg: LaunchConfig, heads_per_group: int, fold_only: bool) -> int:
    """Heads one verify program loops over: ``cfg.heads_per_prog`` cut to a divisor of a
    group's heads (a program's heads share the group's B.C products). A fold-only launch
    shares nothing across heads (each folds with its own x), so it keeps one head a program."""
    return 1 if fold_only else math.gcd(cfg.heads_per_prog, heads_per_group)


def token_tile(num_tokens: int, use_dot: bool) -> int:
    """Width of the verify kernels' token axis: 16 where the products over tokens run on
    tl.dot (its smallest side), else the next power of two (>= 2)."""
    return 16 if use_dot else max(2, triton.next_power_of_2(num_tokens))


def ring_capacity(num_tokens: int, history_len: int) -> int:
    """Physical ring length for T tokens and a history budget Bh: ``next_pow2(Bh + T)``."""
    return triton.next_power_of_2(history_len + num_tokens)


def history_tile(history_len: int) -> int:
    """Entries of the verify kernels' history tiles (``BLOCK_L``): a row whose cursors pass
    :func:`spec_cursors_bad` has ``wp + T <= Bh + T``, so at most Bh committed entries,
    whatever the ring's length; at least 16 (see :func:`ring_positions`). Tiles as long as
    the ring (32 at T = 4, Bh = 16) held twice the registers for masked entries."""
    return max(16, triton.next_power_of_2(history_len))


@triton.jit
def flush_rows_of_block(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, block, batch, num_slots, num_tokens, capacity,
                        pad_slot_id, HAS_SLOT_IDX: tl.constexpr, BUF: tl.constexpr, ROW_BLOCK: tl.constexpr):
    """Which of the batch rows ``block * ROW_BLOCK ..`` are valid rows that flush (int32
    0/1 ``[ROW_BLOCK]``), for a launch that serves the flush rows alone. One vector load
    of the block's cursors: a program whose rows do not flush costs one memory round
    trip (one program a row cost a chain of them on every row: ~30-45 us a launch at
    batch 128 with no row flushing, H200, Super)."""
    slot, ok = load_row_slots(slot_idx_ptr, block * ROW_BLOCK + tl.arange(0, ROW_BLOCK), batch, num_slots,
                              pad_slot_id, HAS_SLOT_IDX)
    wp = tl.load(wp_ptr + slot, mask=ok, other=0)
    origin = tl.load(origin_ptr + slot, mask=ok, other=0)
    ok = ok & (tl.load(flush_ptr + slot, mask=ok, other=0) != 0)
    ok = ok & ~spec_cursors_bad(wp, origin, num_tokens, capacity, BUF)
    return ok.to(tl.int32)


@triton.jit
def workspace_offsets(pid_b, pid_h, offs_p, offs_t, nheads, headdim, NUM_TOKENS: tl.constexpr):
    """Offsets into split_fold 3's workspace of a head's ``part [P, T]`` (``[B, T, H, P]``)
    and ``decay [T]`` (``[B, T, H]``, after ``part``'s elements: the caller's pointer)."""
    bt = pid_b.to(tl.int64) * NUM_TOKENS + offs_t  # (row, token)
    return (bt[None, :] * nheads + pid_h) * headdim + offs_p[:, None], bt * nheads + pid_h


@triton.jit
def store_gated_output(Y, z_ptr, out_ptr, pid_b, pid_h, offs_p, offs_t, mask_pt, stride_z_b, stride_z_t, stride_z_h,
                       stride_out_b, stride_out_t, stride_out_h, HAS_Z: tl.constexpr):
    """Store a head's outputs ``Y [P, T]`` (fp32), gated by ``silu(z)`` where given."""
    if HAS_Z:
        Z = tl.load(z_ptr + pid_b * stride_z_b + offs_t[None, :] * stride_z_t + pid_h * stride_z_h + offs_p[:, None],
                    mask=mask_pt, other=0.0).to(tl.float32)
        Y *= Z * tl.sigmoid(Z)
    tl.store(out_ptr + pid_b * stride_out_b + offs_t[None, :] * stride_out_t + pid_h * stride_out_h + offs_p[:, None],
             Y.to(out_ptr.dtype.element_ty), mask=mask_pt)


@triton.jit(do_not_specialize=["batch", "num_slots"])
def _spec_verify_kernel(
    state_ptr, x_ring_ptr, dt_ring_ptr, B_ring_ptr, wp_ptr, origin_ptr, flush_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr, part_ptr, decay_ptr,
    batch, num_slots, nheads, headdim, dstate, heads_per_group, capacity, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p,
    stride_xr_slot, stride_xr_h, stride_xr_l, stride_dtr_slot, stride_dtr_h, stride_Br_slot, stride_Br_g, stride_Br_l,
    stride_x_b, stride_x_t, stride_x_h, stride_dt_b, stride_dt_t, stride_dt_h, stride_A_h,
    stride_B_b, stride_B_t, stride_B_g, stride_C_b, stride_C_t, stride_C_g, stride_D_h, stride_D_p,
    stride_z_b, stride_z_t, stride_z_h, stride_dtb_h, stride_out_b, stride_out_t, stride_out_h,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr, NUM_TOKENS: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
    BLOCK_T: tl.constexpr, BUF: tl.constexpr, BLOCK_L: tl.constexpr, USE_DOT: tl.constexpr, EXACT_B: tl.constexpr,
    DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr, PHASE: tl.constexpr, EVEN_ROWS: tl.constexpr,
    EVEN_COLS: tl.constexpr, HEADS_PER_PROG: tl.constexpr, STATE_CHUNK: tl.constexpr, SMALL_ON_FMA: tl.constexpr,
    ROW_BLOCK: tl.constexpr,
):
    pid_p = tl.program_id(0)
    h0 = tl.program_id(1) * HEADS_PER_PROG  # the program's heads, all of one group
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    offs_t = tl.arange(0, BLOCK_T)
    mask_p, mask_n = tile_masks(offs_p, offs_n, headdim, dstate, EVEN_ROWS, EVEN_COLS)
    mask_t = offs_t < NUM_TOKENS

    if ROW_BLOCK > 1:  # a launch of the flush rows alone: a program takes those of ROW_BLOCK rows
        selected = flush_rows_of_block(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, tl.program_id(2), batch,
                                       num_slots, NUM_TOKENS, capacity, pad_slot_id, HAS_SLOT_IDX, BUF, ROW_BLOCK)
    for i in range(0, ROW_BLOCK):
        pid_b = tl.program_id(2) * ROW_BLOCK + i
        take = True
        if ROW_BLOCK > 1:
            take = row_in_block(selected, i, ROW_BLOCK)
        if take:
            slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr,
                                                                       pid_b, num_slots, NUM_TOKENS, capacity,
                                                                       pad_slot_id, HAS_SLOT_IDX, BUF)
            if is_bad:
                if PHASE != FOLD_ONLY and PHASE != FLUSH_ROWS:  # the launch that verifies every row reports
                    for hh in range(0, HEADS_PER_PROG):
                        store_nan_tokens(out_ptr, offs_p, mask_p, pid_b, h0 + hh, stride_out_b, stride_out_t,
                                         stride_out_h, NUM_TOKENS, BLOCK_T)
            if (not is_pad) & (not is_bad) & (not leaves_row(is_flush, PHASE)):
                # After a FOLD_ONLY launch the flush rows' history is in the checkpoint already.
                n_hist = wp
                if PHASE == AFTER_FOLD or PHASE == RING_PART:
                    n_hist = tl.where(is_flush, 0, wp)
                fold = False
                if PHASE != AFTER_FOLD and PHASE != NONFLUSH_ROWS and PHASE != RING_PART:
                    fold = is_flush
                g = h0 // heads_per_group
                Br_base = B_ring_ptr + slot * stride_Br_slot + g * stride_Br_g
                offs_l, phys_l = ring_positions(origin, BUF, BLOCK_L)
                mask_l = offs_l < n_hist
                mask_ln = mask_l[:, None] & mask_n[None, :]
                mask_tn = mask_t[:, None] & mask_n[None, :]
                mask_pt = mask_p[:, None] & mask_t[None, :]
                mask_pn = mask_p[:, None] & mask_n[None, :]
                phys_t = (origin + wp + offs_t) & (BUF - 1)  # where the drafts go (logical wp + t)

                # The group's products, shared by the program's heads: B_j . C_t over the committed
                # history [L, T] and B_d . C_t over the drafts [T, T], in the activations' own dtype
                # (see native_dot). The outputs are
                #   y_t = exp(A (H + D_t)) (S_0 C_t) + sum_j W_hist[j, t] x_j + sum_d W_dr[d, t] x_d
                # with W_hist[j, t] = coef_j exp(A D_t) (B_j . C_t) and, for d <= t,
                # W_dr[d, t] = dt_d exp(A (D_t - D_d)) (B_d . C_t); BLOCK_T is 16 on the tl.dot path.
                if PHASE != FOLD_ONLY:
                    C_dr = tl.load(C_ptr + pid_b * stride_C_b + offs_t[:, None] * stride_C_t + g * stride_C_g
                                   + offs_n[None, :], mask=mask_tn, other=0.0)  # [T, N]
                    B_dr = tl.load(B_ptr + pid_b * stride_B_b + offs_t[:, None] * stride_B_t + g * stride_B_g
                                   + offs_n[None, :], mask=mask_tn, other=0.0)  # [T, N]
                    CT = tl.trans(C_dr)
                    BC_dr = native_dot(B_dr, CT, USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
                    BC_hist = tl.zeros((BLOCK_L, BLOCK_T), tl.float32)
                    if not fold:  # a flush row's history is folded below: its outputs stand on the new checkpoint alone
                        B_hist = tl.load(Br_base + phys_l[:, None] * stride_Br_l + offs_n[None, :], mask=mask_ln,
                                         other=0.0)
                        BC_hist = native_dot(B_hist, CT, USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
                    if pid_p == 0:
                        if h0 % heads_per_group == 0:  # one program per group appends the shared B (reads stop at wp)
                            tl.store(Br_base + phys_t[:, None] * stride_Br_l + offs_n[None, :],
                                     B_dr.to(B_ring_ptr.dtype.element_ty), mask=mask_tn)
                    causal = offs_t[:, None] <= offs_t[None, :]

                for hh in range(0, HEADS_PER_PROG):
                    pid_h = h0 + hh
                    A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
                    xr_base = x_ring_ptr + slot * stride_xr_slot + pid_h * stride_xr_h
                    dtr_base = dt_ring_ptr + slot * stride_dtr_slot + pid_h * stride_dtr_h
                    # The head's history (gathered through the circular index), drafts and checkpoint.
                    dt_hist = tl.load(dtr_base + phys_l, mask=mask_l, other=0.0)
                    X_hist = tl.load(xr_base + phys_l[None, :] * stride_xr_l + offs_p[:, None],
                                     mask=mask_p[:, None] & mask_l[None, :], other=0.0).to(tl.float32)  # [P, L]
                    X_dr = tl.load(x_ptr + pid_b * stride_x_b + offs_t[None, :] * stride_x_t + pid_h * stride_x_h
                                   + offs_p[:, None], mask=mask_pt, other=0.0).to(tl.float32)  # [P, T]
                    dt_dr = tl.load(dt_ptr + pid_b * stride_dt_b + offs_t * stride_dt_t + pid_h * stride_dt_h,
                                    mask=mask_t, other=0.0).to(tl.float32)
                    state_rows = (state_ptr + slot * stride_state_slot + pid_h * stride_state_h
                                  + offs_p[:, None] * stride_state_p)
                    state_ptrs = state_rows + offs_n[None, :]
                    if STATE_CHUNK == BLOCK_N and PHASE != RING_PART:  # the whole tile, for the fold and the outputs
                        S0 = tl.load(state_ptrs, mask=mask_pn, other=0.0).to(tl.float32)

                    if HAS_DT_BIAS:
                        dt_dr += tl.load(dt_bias_ptr + pid_h * stride_dtb_h).to(tl.float32)
                    if DT_SOFTPLUS:
                        dt_dr = tl.where(dt_dr <= 20.0, tl.log(1.0 + tl.exp(dt_dr)), dt_dr)
                    dt_dr = tl.where(mask_t, dt_dr, 0.0)
                    D_cum = tl.cumsum(dt_dr, axis=0)  # draft dt summed up to t
                    H = tl.sum(dt_hist, axis=0)  # dt summed over the committed history
                    # coef_j = dt_j exp(A (dt summed after j)): history entry j's weight on top of S_0.
                    coef = tl.where(mask_l, dt_hist * tl.exp(tl.minimum(A * (H - tl.cumsum(dt_hist, axis=0)), 0.0)),
                                    0.0)
                    if PHASE != AFTER_FOLD and PHASE != NONFLUSH_ROWS and PHASE != RING_PART:  # (may fold: said statically)
                        if fold:
                            # Fold only the committed history (never the drafts) and store the new
                            # checkpoint; the outputs then stand on it alone. (Flush rows only: the
                            # group's B history is read again here rather than held across the loop.)
                            B_fold = tl.load(Br_base + phys_l[:, None] * stride_Br_l + offs_n[None, :], mask=mask_ln,
                                             other=0.0).to(tl.float32)
                            S0 = S0 * tl.exp(tl.minimum(A * H, 0.0)) + small_matmul(
                                X_hist * coef[None, :], B_fold, USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
                            tl.store(state_ptrs, S0.to(state_ptr.dtype.element_ty), mask=mask_pn)
                            H = H * 0.0
                            coef = coef * 0.0
                    if PHASE != FOLD_ONLY:
                        state_decay = tl.exp(tl.minimum(A * (H + D_cum), 0.0))  # [T]: exp(A (H + D_t))
                        if PHASE == RING_PART:  # the state's product is the next launch's
                            Y = tl.zeros((BLOCK_P, BLOCK_T), tl.float32)
                            part_offs, decay_offs = workspace_offsets(pid_b, pid_h, offs_p, offs_t, nheads, headdim,
                                                                      NUM_TOKENS)
                            if pid_p == 0:
                                tl.store(decay_ptr + decay_offs, state_decay, mask=mask_t)
                        elif STATE_CHUNK < BLOCK_N:
                            # S_0 C^T with the state streamed in chunks of STATE_CHUNK dstate columns
                            # (the C^T chunk read again: it is small and in L1). A chunk narrower than
                            # a dot's K of 16 takes the broadcast product (small_matmul).
                            Y = tl.zeros((BLOCK_P, BLOCK_T), tl.float32)
                            for c in tl.range(0, BLOCK_N // STATE_CHUNK):
                                offs_c = c * STATE_CHUNK + tl.arange(0, STATE_CHUNK)
                                mask_c = dim_mask(offs_c, dstate, EVEN_COLS)
                                S0 = tl.load(state_rows + offs_c[None, :], mask=mask_p[:, None] & mask_c[None, :],
                                             other=0.0).to(tl.float32)
                                CT_c = tl.load(C_ptr + pid_b * stride_C_b + offs_t[None, :] * stride_C_t
                                               + g * stride_C_g + offs_c[:, None],
                                               mask=mask_c[:, None] & mask_t[None, :], other=0.0)
                                Y += small_matmul(S0, CT_c.to(tl.float32), USE_DOT, EXACT_B, DOT_PRECISION,
                                                  ONE_PASS_PRECISION)
                        else:
                            Y = small_matmul(S0, CT.to(tl.float32), USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
                        if PHASE != RING_PART:
                            Y *= state_decay[None, :]  # [P, T]
                        W_hist = coef[:, None] * BC_hist * tl.exp(tl.minimum(A * D_cum, 0.0))[None, :]  # [L, T]
                        decay_dr = tl.exp(tl.minimum(A * (D_cum[None, :] - D_cum[:, None]), 0.0))
                        W_dr = tl.where(causal, dt_dr[:, None] * decay_dr, 0.0) * BC_dr  # [T(d), T(t)]
                        if SMALL_ON_FMA:  # fp32 FMAs, off the tensor cores (what GDN's verify gained by)
                            hist_part = tl.dot(X_hist, W_hist, input_precision="ieee")
                            Y += hist_part + tl.dot(X_dr, W_dr, input_precision="ieee")
                        else:
                            # The x tiles hold activation values (exact in TF32 where bf16/fp16): the
                            # weights take the split.
                            Y += exact_lhs_matmul(X_hist, W_hist, USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION) \
                                + exact_lhs_matmul(X_dr, W_dr, USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
                        if HAS_D:
                            Y += X_dr * tl.load(D_ptr + pid_h * stride_D_h + offs_p * stride_D_p, mask=mask_p,
                                                other=0.0).to(tl.float32)[:, None]
                        if PHASE == RING_PART:  # (ungated: the gate takes the sum)
                            tl.store(part_ptr + part_offs, Y, mask=mask_pt)
                        else:
                            store_gated_output(Y, z_ptr, out_ptr, pid_b, pid_h, offs_p, offs_t, mask_pt, stride_z_b,
                                               stride_z_t, stride_z_h, stride_out_b, stride_out_t, stride_out_h, HAS_Z)
                        # Append the drafts' x and dt for later steps.
                        tl.store(xr_base + phys_t[None, :] * stride_xr_l + offs_p[:, None],
                                 X_dr.to(x_ring_ptr.dtype.element_ty), mask=mask_pt)
                        if pid_p == 0:
                            tl.store(dtr_base + phys_t, dt_dr, mask=mask_t)


@triton.jit(do_not_specialize=["num_slots"])
def _spec_state_product_kernel(
    state_ptr, C_ptr, z_ptr, out_ptr, part_ptr, decay_ptr, wp_ptr, origin_ptr, flush_ptr, slot_idx_ptr,
    num_slots, nheads, headdim, dstate, heads_per_group, capacity, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p, stride_C_b, stride_C_t, stride_C_g,
    stride_z_b, stride_z_t, stride_z_h, stride_out_b, stride_out_t, stride_out_h,
    HAS_Z: tl.constexpr, HAS_SLOT_IDX: tl.constexpr, NUM_TOKENS: tl.constexpr, BLOCK_P: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_T: tl.constexpr, BUF: tl.constexpr, USE_DOT: tl.constexpr,
    EXACT_B: tl.constexpr, DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr, EVEN_ROWS: tl.constexpr,
    EVEN_COLS: tl.constexpr, STAGES: tl.constexpr,
):
    """split_fold 3's last launch: ``out_t = gate(decay_t (S_0 C_t) + part_t)`` for a block
    of a head's rows, with ``part`` and ``decay`` from the RING_PART launch. It holds
    nothing but a chunk of the checkpoint and of C at a time, so it streams the state at
    copy bandwidth where the verify with everything in it was latency-bound."""
    pid_p = tl.program_id(0)
    pid_h = tl.program_id(1)
    pid_b = tl.program_id(2)
    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, NUM_TOKENS, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad | is_bad:  # (the RING_PART launch reported a bad row)
        return
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_t = tl.arange(0, BLOCK_T)
    mask_p = dim_mask(offs_p, headdim, EVEN_ROWS)
    mask_t = offs_t < NUM_TOKENS
    g = pid_h // heads_per_group
    state_rows = state_ptr + slot * stride_state_slot + pid_h * stride_state_h + offs_p[:, None] * stride_state_p
    C_cols = C_ptr + pid_b * stride_C_b + offs_t[None, :] * stride_C_t + g * stride_C_g
    Y = tl.zeros((BLOCK_P, BLOCK_T), tl.float32)
    for c in tl.range(0, BLOCK_N // BLOCK_K, num_stages=STAGES):
        offs_k = c * BLOCK_K + tl.arange(0, BLOCK_K)
        mask_k = dim_mask(offs_k, dstate, EVEN_COLS)
        S0 = tl.load(state_rows + offs_k[None, :], mask=mask_p[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
        CT = tl.load(C_cols + offs_k[:, None], mask=mask_k[:, None] & mask_t[None, :], other=0.0)
        Y += small_matmul(S0, CT.to(tl.float32), USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
    mask_pt = mask_p[:, None] & mask_t[None, :]
    part_offs, decay_offs = workspace_offsets(pid_b, pid_h, offs_p, offs_t, nheads, headdim, NUM_TOKENS)
    decay = tl.load(decay_ptr + decay_offs, mask=mask_t, other=0.0)
    part = tl.load(part_ptr + part_offs, mask=mask_pt, other=0.0)
    store_gated_output(Y * decay[None, :] + part, z_ptr, out_ptr, pid_b, pid_h, offs_p, offs_t, mask_pt, stride_z_b,
                       stride_z_t, stride_z_h, stride_out_b, stride_out_t, stride_out_h, HAS_Z)


@triton.jit(do_not_specialize=["batch", "num_slots"])
def _spec_commit_kernel(wp_ptr, origin_ptr, flush_ptr, accepted_ptr, slot_idx_ptr, batch, num_slots, num_tokens,
                        capacity, pad_slot_id, HAS_SLOT_IDX: tl.constexpr, BUF: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    slot, valid = load_row_slots(slot_idx_ptr, rows, batch, num_slots, pad_slot_id, HAS_SLOT_IDX)
    c = tl.load(accepted_ptr + rows, mask=rows < batch, other=0).to(tl.int32)
    valid = valid & (c > 0) & (c <= num_tokens)
    wp = tl.load(wp_ptr + slot, mask=valid, other=0)
    origin = tl.load(origin_ptr + slot, mask=valid, other=0)
    flushed = tl.load(flush_ptr + slot, mask=valid, other=0) != 0
    new_origin = tl.where(flushed, (origin + wp) & (BUF - 1), origin)
    new_wp = tl.where(flushed, c, wp + c)
    tl.store(origin_ptr + slot, new_origin, mask=valid)
    tl.store(wp_ptr + slot, new_wp, mask=valid)
    tl.store(flush_ptr + slot, (new_wp + 2 * num_tokens > capacity).to(tl.int8), mask=valid)


@triton.jit(do_not_specialize=["n", "num_slots"])
def _spec_reset_kernel(wp_ptr, origin_ptr, flush_ptr, slots_ptr, n, num_slots, num_tokens, capacity, pad_slot_id,
                       BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    slot, valid = load_row_slots(slots_ptr, rows, n, num_slots, pad_slot_id, True)
    zero = tl.zeros_like(slot).to(tl.int32)
    tl.store(wp_ptr + slot, zero, mask=valid)
    tl.store(origin_ptr + slot, zero, mask=valid)
    tl.store(flush_ptr + slot, (zero + 2 * num_tokens > capacity).to(tl.int8), mask=valid)


def _check_cursors(wp, origin, flush, slots, dev):
    check_tensor("write_pos", wp, (slots,), (torch.int32,), dev)
    check_tensor("origin", origin, (slots,), (torch.int32,), dev)
    check_tensor("is_flush", flush, (slots,), (torch.int8,), dev)
    for name, t in (("write_pos", wp), ("origin", origin), ("is_flush", flush)):
        check_contiguous(name, t)


def check_spec_sizes(num_tokens: int, history_len: int) -> int:
    """T and the history budget Bh of a speculative ring, checked; returns ``Bh + T``."""
    check_count("T (tokens per verify step)", num_tokens)
    check_count("history budget Bh", history_len)
    if not 1 <= num_tokens <= MAX_T:
        raise ValueError(f"T (tokens per verify step) must be in [1, {MAX_T}], got {num_tokens}")
    if not num_tokens <= history_len <= MAX_HISTORY:
        raise ValueError(f"history budget Bh must be in [T={num_tokens}, {MAX_HISTORY}], got {history_len}")
    return history_len + num_tokens


def spec_workspace_numel(batch: int, num_tokens: int, nheads: int, headdim: int) -> int:
    """fp32 elements of a verify's workspace (split_fold 3): the outputs' part without the
    state's product ``[batch, T, H, P]`` and the state's decay per token ``[batch, T, H]``."""
    return batch * num_tokens * nheads * (headdim + 1)


def spec_workspace(workspace: Optional[torch.Tensor], need: int, device) -> torch.Tensor:
    """A verify's workspace (split_fold 3): the first ``need`` elements of the caller's,
    checked (fp32, contiguous, large enough), or a new one."""
    if workspace is None:
        return torch.empty(need, dtype=torch.float32, device=device)
    check_tensor("workspace", workspace, (None,), (torch.float32,), device)
    check_contiguous("workspace", workspace)
    if workspace.numel() < need:
        raise ValueError(f"workspace must hold at least {need} fp32 elements, got {workspace.numel()}")
    return workspace[:need]


def selective_state_update_replayssm_spec(
    state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None,
    pad_slot_id=-1, out=None, *, x_ring, dt_ring, B_ring, write_pos, origin, is_flush, history_len: int,
    config: Optional[LaunchConfig] = None, workspace: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One speculative verify step: ``x (B, T, H, P)``, ``dt (B, T, H)`` (or tied
    ``(B, T, H, P)``), ``B/C (B, T, G, N)``, ``z (B, T, H, P)``; returns ``out (B, T, H, P)``.

    Ring of this layer: ``x_ring (slots, H, buf, P)``, ``dt_ring (slots, H, buf)`` fp32,
    ``B_ring (slots, G, buf, N)`` with ``buf = ring_capacity(T, history_len)``; cursors
    ``write_pos``/``origin`` int32 and ``is_flush`` int8, ``(slots,)``, shared by all
    layers. Padding rows change nothing; a bad slot or cursor gives NaN outputs.
    ``config``: rows of headdim per program, warps, heads of a group per program
    (``heads_per_prog``, cut to a divisor of the heads a group has) and whether flush rows
    fold in a launch of their own (``split_fold`` 1) or take their whole step, fold and
    verify, in one (2), or every row's outputs form in two launches, the state's product
    in the second (3; see :data:`PHASES`); default :func:`spec_config`'s. ``workspace``:
    split_fold 3's scratch, fp32, contiguous, at least :func:`spec_workspace_numel`
    elements (allocated per call if not given).
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError("x must have shape (batch, T, nheads, headdim)")
    Bsz, T = x.shape[0], x.shape[1]
    capacity = check_spec_sizes(T, history_len)
    flat = lambda t: None if t is None else t.flatten(0, 1)  # noqa: E731  (checks reuse the AR parser)
    if out is None:
        out = torch.empty_like(x)
    for name, t in (("dt", dt), ("B", B), ("C", C), ("z", z), ("out", out)):
        if t is not None and (t.dim() < 2 or tuple(t.shape[:2]) != (Bsz, T)):
            raise ValueError(f"{name} must start with the dimensions (batch, T) = {(Bsz, T)}, got {tuple(t.shape)}")
    for name, t in (("x", x), ("B", B), ("C", C), ("z", z), ("out", out)):
        if t is not None:  # the kernel reads these with their own strides, not the flattened copies'
            check_last_dim_contiguous(name, t)
    step = parse_mamba2_step(flat(x), flat(dt), A, flat(B), flat(C), D, flat(z), dt_bias, dt_softplus, None,
                             pad_slot_id, flat(out))
    if state_batch_indices is not None:
        check_vector("state_batch_indices", state_batch_indices, Bsz, INDEX_DTYPES, x.device)
    check_tensor("state", state, (None, step.nheads, step.headdim, step.dstate), FLOAT_DTYPES, x.device)
    check_slot_major("state", state)
    if state_batch_indices is None and state.shape[0] < Bsz:
        raise ValueError(f"state has {state.shape[0]} slots but the batch has {Bsz} rows and no state_batch_indices")
    slots, H, P, N, G = state.shape[0], step.nheads, step.headdim, step.dstate, step.ngroups
    buf = ring_capacity(T, history_len)
    check_tensor("x_ring", x_ring, (slots, H, buf, P), (x.dtype,), x.device)
    check_tensor("dt_ring", dt_ring, (slots, H, buf), (torch.float32,), x.device)
    check_tensor("B_ring", B_ring, (slots, G, buf, N), (B.dtype,), x.device)
    for name, t in (("x_ring", x_ring), ("dt_ring", dt_ring), ("B_ring", B_ring)):
        check_slot_major(name, t)
    _check_cursors(write_pos, origin, is_flush, slots, x.device)
    if Bsz == 0:
        return out
    dt4 = dt if dt.dim() == 3 else dt[..., 0]
    Dt = step.D
    cfg = config or spec_config(Bsz)
    block_n = triton.next_power_of_2(N)
    check_split_fold(cfg)
    part = decay = out  # (placeholders for launches that take no workspace)
    if cfg.split_fold == STATE_APART:
        workspace = spec_workspace(workspace, spec_workspace_numel(Bsz, T, H, P), x.device)
        part, decay = workspace[:Bsz * T * H * P], workspace[Bsz * T * H * P:]
    for phase in PHASES[cfg.split_fold]:
        phase_cfg = phase_config(cfg, phase)
        block_p = min(phase_cfg.block_p, triton.next_power_of_2(P))
        use_dot = min(block_p, block_n) >= 16
        hpp = heads_per_program(phase_cfg, H // G, fold_only=phase is FOLD_ONLY)
        grid_ph = (triton.cdiv(P, block_p), H // hpp)
        row_block = flush_row_block(grid_ph[0] * grid_ph[1], Bsz) if serves_flush_rows_alone(phase) else 1
        launch_kernel(_spec_verify_kernel, (*grid_ph, triton.cdiv(Bsz, row_block)),
            state, x_ring, dt_ring, B_ring, write_pos, origin, is_flush,
            x, dt4, step.A, B, C, Dt if Dt is not None else x, z if z is not None else x,
            step.dt_bias if step.dt_bias is not None else step.A, out,
            state_batch_indices if state_batch_indices is not None else write_pos, part, decay,
            Bsz, slots, H, P, N, H // G, capacity, pad_slot_id,
            state.stride(0), state.stride(1), state.stride(2),
            x_ring.stride(0), x_ring.stride(1), x_ring.stride(2), dt_ring.stride(0), dt_ring.stride(1),
            B_ring.stride(0), B_ring.stride(1), B_ring.stride(2),
            x.stride(0), x.stride(1), x.stride(2), dt4.stride(0), dt4.stride(1), dt4.stride(2), step.A.stride(0),
            B.stride(0), B.stride(1), B.stride(2), C.stride(0), C.stride(1), C.stride(2),
            Dt.stride(0) if Dt is not None else 0, Dt.stride(1) if Dt is not None else 0,
            *(z.stride()[:3] if z is not None else (0, 0, 0)),
            step.dt_bias.stride(0) if step.dt_bias is not None else 0, out.stride(0), out.stride(1), out.stride(2),
            HAS_D=Dt is not None, HAS_Z=z is not None, HAS_DT_BIAS=step.dt_bias is not None,
            HAS_SLOT_IDX=state_batch_indices is not None, DT_SOFTPLUS=bool(dt_softplus), NUM_TOKENS=T,
            BLOCK_P=block_p, BLOCK_N=block_n, BLOCK_T=token_tile(T, use_dot), BUF=buf,
            BLOCK_L=history_tile(history_len), USE_DOT=use_dot, EXACT_B=exact_in_tf32(B_ring.dtype),
            DOT_PRECISION=DOT_PRECISION, ONE_PASS_PRECISION=ONE_PASS_PRECISION, PHASE=phase.value,
            **even_rows_and_cols(P, block_p, N, block_n), HEADS_PER_PROG=hpp,
            # dstate columns a step of the outputs' matmul takes: a verify launch compiled
            # without the fold (split_fold) can stream the state, the fold needs the whole tile.
            STATE_CHUNK=(min(cfg.key_chunk or block_n, block_n) if phase is AFTER_FOLD or phase is NONFLUSH_ROWS
                         else block_n),
            SMALL_ON_FMA=SMALL_ON_FMA and use_dot,
            ROW_BLOCK=row_block,
            num_warps=phase_cfg.num_warps,
        )
    if cfg.split_fold == STATE_APART:
        block_p = min(STATE_PRODUCT_ROWS, triton.next_power_of_2(P))
        block_k = min(STATE_PRODUCT_COLS, block_n)
        use_dot = min(block_p, block_k) >= 16
        launch_kernel(_spec_state_product_kernel, (triton.cdiv(P, block_p), H, Bsz),
            state, C, z if z is not None else x, out, part, decay, write_pos, origin, is_flush,
            state_batch_indices if state_batch_indices is not None else write_pos,
            slots, H, P, N, H // G, capacity, pad_slot_id,
            state.stride(0), state.stride(1), state.stride(2), C.stride(0), C.stride(1), C.stride(2),
            *(z.stride()[:3] if z is not None else (0, 0, 0)), out.stride(0), out.stride(1), out.stride(2),
            HAS_Z=z is not None, HAS_SLOT_IDX=state_batch_indices is not None, NUM_TOKENS=T, BLOCK_P=block_p,
            BLOCK_K=block_k, BLOCK_N=block_n, BLOCK_T=token_tile(T, use_dot), BUF=buf, USE_DOT=use_dot,
            EXACT_B=exact_in_tf32(C.dtype), DOT_PRECISION=DOT_PRECISION, ONE_PASS_PRECISION=ONE_PASS_PRECISION,
            **even_rows_and_cols(P, block_p, N, block_n),
            STAGES=STATE_PRODUCT_STAGES, num_warps=STATE_PRODUCT_WARPS)
    return out


def commit_replayssm_spec(write_pos, origin, is_flush, accepted, num_tokens: int, history_len: int,
                          state_batch_indices: Optional[torch.Tensor] = None, pad_slot_id: int = -1) -> None:
    """After acceptance: ``accepted (B,)`` tokens per row, bonus token included. Rows with
    ``accepted <= 0`` (padding) change nothing. On device, no host sync."""
    capacity = check_spec_sizes(num_tokens, history_len)
    _check_cursors(write_pos, origin, is_flush, write_pos.shape[0], write_pos.device)
    batch = accepted.shape[0]
    check_vector("accepted", accepted, batch, INDEX_DTYPES, write_pos.device)
    if state_batch_indices is not None:
        check_vector("state_batch_indices", state_batch_indices, batch, INDEX_DTYPES, write_pos.device)
    if batch == 0:
        return
    launch_kernel(_spec_commit_kernel, (triton.cdiv(batch, 128),),
        write_pos, origin, is_flush, accepted, state_batch_indices if state_batch_indices is not None else accepted,
        batch, write_pos.shape[0], num_tokens, capacity, pad_slot_id, HAS_SLOT_IDX=state_batch_indices is not None,
        BUF=ring_capacity(num_tokens, history_len), BLOCK=128)


def reset_replayssm_spec_cursors(write_pos, origin, is_flush, slots: torch.Tensor, num_tokens: int,
                                 history_len: int, pad_slot_id: int = -1) -> None:
    """Slots entering decode: ``wp = origin = 0``, ``is_flush = (2T > Bh + T)``."""
    capacity = check_spec_sizes(num_tokens, history_len)
    _check_cursors(write_pos, origin, is_flush, write_pos.shape[0], write_pos.device)
    check_vector("slots", slots, None, INDEX_DTYPES, write_pos.device)
    if slots.shape[0] == 0:
        return
    launch_kernel(_spec_reset_kernel, (triton.cdiv(slots.shape[0], 128),),
        write_pos, origin, is_flush, slots, slots.shape[0], write_pos.shape[0], num_tokens, capacity, pad_slot_id,
        BLOCK=128)
