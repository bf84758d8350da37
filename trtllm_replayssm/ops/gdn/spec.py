"""ReplaySSM Gated DeltaNet speculative verify on a circular ring (``replayssm.md`` s. 2-3).

Ring per slot: corrected values ``d``, normalised keys and log-decays of the committed
history, at physical ``(origin + i) & (buf - 1)``; cursors as for Mamba2 (and the same
:func:`commit_replayssm_spec` / :func:`reset_replayssm_spec_cursors` move them).

With ``S_h`` the state after the committed history (never formed: ``S_h x`` comes from
``S_0 x`` and the ring) and ``A_t`` the drafts' log-decay summed up to ``t``, the drafts'
corrected values solve a unit lower-triangular system, all T at once:

    d_t + sum_{s<t} beta_t exp(A_t - A_s) (k_s . k_t) d_s = beta_t (v_t - exp(A_t) S_h k_t)
    o_t = exp(A_t) S_h q_t + sum_{s<=t} exp(A_t - A_s) (k_s . q_t) d_s

``(I + M)^-1`` is formed as ``(I - M)(I + M^2)(I + M^4)`` (``M`` is nilpotent, T <= 8).
On a flush step the committed history is first folded into the checkpoint and stored.

The kernels:
- :func:`_gdn_spec_verify_dot_kernel`, the verify wherever the tiles allow tl.dot (>= 16
  rows of V and key columns: every real model). All products on the 16 columns of the
  drafts' keys and queries. The flush rows fold before it, in a launch of the chunked
  kernel (``split_fold`` 1), or fold on the way through in a launch of their own
  (``split_fold`` 2 and 3: their state read once), the other rows in one compiled without
  the fold (2) or in the two launches of split_fold 3 (the default):
  :func:`_gdn_spec_ring_part_kernel` (the drafts' solve and everything but the state's
  product, to a workspace) and :func:`_gdn_spec_state_product_kernel` (``(S_0 X) W + bias``,
  streaming the checkpoint). Under split_fold 1-2, :func:`_gdn_spec_solve_kernel` forms
  the solve ahead of the verify (:data:`SOLVE_APART`).
- :func:`_gdn_spec_verify_kernel` streams the checkpoint in chunks of key columns, every
  product with the drafts an fp32 FMA reduction: the fold-only launch, and the whole
  verify on tiles too small for tl.dot (or with :data:`VERIFY_ON_DOT` off).
"""

from __future__ import annotations

import math
from typing import Optional

import torch
import triton
import triton.language as tl

from ..._validation import FLOAT_DTYPES, INDEX_DTYPES, check_last_dim_contiguous, check_slot_major, check_tensor
from ..common import (DOT_PRECISION, ONE_PASS_PRECISION, dim_mask, even_tile, exact_in_tf32, load_spec_row,
                      native_dot, ring_positions, small_matmul, store_nan_tokens, tile_masks)
from ..launch import LaunchConfig, launch_kernel
from ..mamba2.spec import (AFTER_FOLD, BOTH, FLUSH_ROWS, FOLD_ONLY, MAX_T, NONFLUSH_ROWS, STATE_APART,
                           _check_cursors, _check_spec_sizes, check_split_fold, history_tile, leaves_row, ring_capacity,
                           spec_workspace)
from .step_inputs import parse_gdn_step

RING_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The state's product in a launch of its own (split_fold 3; see GDN_STATE_PRODUCT_ROWS):
# the solve and the ring's part first, then the flush rows' whole step (on 64 rows of V
# and 2 warps, the state in chunks of 32 key columns), then ``(S_0 X) W + bias`` for the
# other rows. H200, Qwen3.5-122B, T = 4, all accepted, us a verify step at batch 128 / 512
# (``benchmarks/results/gdn_state_apart.json``): 340 / 1300. Before, split_fold 2 (the
# flush rows' whole step apart, the other rows' verify fused: 64 rows on 2 warps, 4 value
# heads a program, the solve apart) 359 / 1391; 128 rows on 4 warps 386 / 1492
# (``gdn_solve_apart.json``); split_fold 1 (a fold-only launch first) 399 / 1539.
GDN_SPEC_CONFIG = LaunchConfig(block_p=64, num_warps=2, split_fold=3, key_chunk=32)
# The fold-only launch before the tl.dot verify: 64 rows of V on 4 warps (the chunked
# kernel's fold at 126 registers a thread; at the verify's 128 rows, 220).
GDN_SPEC_FOLD_CONFIG = LaunchConfig(block_p=64, num_warps=4)
# Whether the verify runs on tl.dot (:func:`_gdn_spec_verify_dot_kernel`, after a fold-only
# launch) where the tiles allow (>= 16 rows of V and key columns); False keeps the chunked
# FMA kernel for every phase (a benchmark's comparison).
VERIFY_ON_DOT = True
# The dot verify's products that are not with the state (the solve's [16, 16] matrices,
# the history's and the solve's [V, 16] x [16, 16]): fp32 FMAs ("ieee") rather than
# tf32x3 on the tensor cores (H200, Qwen3.5-122B, T = 4, batch 128, 128 rows on 4 warps:
# 448 against 524 us; on 2 warps tf32x3 was ahead, 484 against 551).
SMALL_DOT_PRECISION = "ieee"
# Whether the drafts' solve (``Z`` [16, 16] a row and value head: the Gram, the gates and
# the chain of small products of (I + M)^-1) runs in a launch of its own ahead of the tl.dot
# verify (``_gdn_spec_solve_kernel``, a program a row and value head on one warp, through a
# workspace of 1 KB each) rather than in every verify program's loop over heads. It won
# for every config tried: 3-9% at batch 128, 3-10% at 512 (Qwen3.5-122B, T = 4,
# ``python benchmarks/probe_gdn_solve_apart.py``, ``benchmarks/results/gdn_solve_apart.json``);
# the verify on 128 rows and 4 warps fell from 255 registers (8 B spilled) to 250.
SOLVE_APART = True
SOLVE_WARPS = 1


def dot_heads_per_program(cfg: LaunchConfig, v_heads_per_k_head: int, phase) -> int:
    """Value heads one program of the tl.dot verify runs in ``phase``: ``cfg.heads_per_prog``
    cut to a divisor of a key head's, except in the flush rows' own launch, whose fold's
    chunk tiles leave room for one (252 registers; 4 spilled 184 B at 128 rows on 4 warps)."""
    return 1 if phase is FLUSH_ROWS else math.gcd(cfg.heads_per_prog, v_heads_per_k_head)


def fma_key_chunk(block_k: int) -> int:
    """Key columns of the state the chunked FMA kernel (:func:`_gdn_spec_verify_kernel`)
    takes per step of its loop; the tl.dot verify's come from ``LaunchConfig.key_chunk``."""
    return min(32, block_k)


@triton.jit
def _matmul_tt(X, Y):
    """``X @ Y`` of two small [T, T] tiles, without tl.dot (T can be below 16)."""
    return tl.sum(X[:, :, None] * Y[None, :, :], axis=1)


@triton.jit(do_not_specialize=["num_slots"])
def _gdn_spec_verify_kernel(
    state_ptr, d_ring_ptr, k_ring_ptr, g_ring_ptr, wp_ptr, origin_ptr, flush_ptr,
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, num_tokens, head_k_dim, head_v_dim, v_heads_per_k_head, capacity, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_v,
    stride_dr_slot, stride_dr_h, stride_dr_l, stride_kr_slot, stride_kr_h, stride_kr_l, stride_gr_slot, stride_gr_h,
    stride_q_b, stride_q_t, stride_q_h, stride_k_b, stride_k_t, stride_k_h, stride_v_b, stride_v_t, stride_v_h,
    stride_a_b, stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h, stride_out_b, stride_out_t, stride_out_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_T: tl.constexpr, BUF: tl.constexpr, BLOCK_L: tl.constexpr,
    USE_DOT: tl.constexpr, EXACT_B: tl.constexpr, DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr,
    PHASE: tl.constexpr, EVEN_TILE: tl.constexpr, K_CHUNK: tl.constexpr,
):
    pid_v = tl.program_id(0)
    hv = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    offs_t = tl.arange(0, BLOCK_T)
    mask_v, mask_k = tile_masks(offs_v, offs_k, head_v_dim, head_k_dim, EVEN_TILE)
    mask_t = offs_t < num_tokens

    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, num_tokens, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad:
        return
    if is_bad:
        if PHASE != FOLD_ONLY:  # the verify launch reports
            store_nan_tokens(out_ptr, offs_v, mask_v, pid_b, hv, stride_out_b, stride_out_t, stride_out_h,
                             num_tokens, BLOCK_T)
        return
    if PHASE == FOLD_ONLY:
        if not is_flush:
            return
    n_hist = wp
    if PHASE == AFTER_FOLD:  # the flush rows' history is in the checkpoint already
        n_hist = tl.where(is_flush, 0, wp)
    fold = False
    if PHASE != AFTER_FOLD:
        fold = is_flush
    h = hv // v_heads_per_k_head

    dr_base = d_ring_ptr + slot * stride_dr_slot + hv * stride_dr_h
    kr_base = k_ring_ptr + slot * stride_kr_slot + h * stride_kr_h
    gr_base = g_ring_ptr + slot * stride_gr_slot + hv * stride_gr_h
    offs_l, phys_l = ring_positions(origin, BUF, BLOCK_L)
    mask_l = offs_l < n_hist
    # The committed history's decays and corrected values [V, L], weighted by exp(G - G_j).
    G, decay = _history_decays(gr_base, phys_l, mask_l)
    D_w = tl.load(dr_base + phys_l[None, :] * stride_dr_l + offs_v[:, None], mask=mask_v[:, None] & mask_l[None, :],
                  other=0.0).to(tl.float32) * decay[None, :]

    # The drafts' inverse L2 norms [T] (whole rows of k and q); the products below are
    # taken with the raw rows and scaled by these at the end.
    mask_tk = mask_t[:, None] & mask_k[None, :]
    k_base = k_ptr + pid_b * stride_k_b + h * stride_k_h  # draft t's key at + t * stride_k_t
    q_base = q_ptr + pid_b * stride_q_b + h * stride_q_h
    k_rows = k_base + offs_t[:, None] * stride_k_t  # [T, 1]
    q_rows = q_base + offs_t[:, None] * stride_q_t
    inv_k = tl.zeros((BLOCK_T,), tl.float32) + 1.0
    inv_q = tl.zeros((BLOCK_T,), tl.float32) + scale
    if PHASE != FOLD_ONLY:  # a fold-only launch takes no draft
        if USE_QK_L2NORM:
            Kf = tl.load(k_rows + offs_k[None, :], mask=mask_tk, other=0.0).to(tl.float32)
            Qf = tl.load(q_rows + offs_k[None, :], mask=mask_tk, other=0.0).to(tl.float32)
            inv_k = tl.rsqrt(tl.sum(Kf * Kf, axis=1) + 1e-6)
            inv_q = inv_q * tl.rsqrt(tl.sum(Qf * Qf, axis=1) + 1e-6)

    # The state streams through in chunks of K_CHUNK key columns; per chunk and draft t, on
    # fp32 FMAs in the chunk's own layout: S_0 k_t, S_0 q_t [V], the history's keys
    # against k_t and q_t [L], and the drafts' k_s . k_t, q_s . k_t [T]. (On tl.dot in
    # fp32-accurate tf32x3 the operands' trips through shared memory bound the kernel at
    # ~10% of copy bandwidth.) A flush row also folds the chunk, exp(G) S_0 + D_w K_hist,
    # and stores it. Then, with S_h the state after the committed history,
    # S_h k_t = exp(G) S_0 k_t + D_w (K_hist k_t), and the same for q_t.
    SK = tl.zeros((BLOCK_V, BLOCK_T), tl.float32)  # [v, t] = (S_0 k_t)_v
    SQ = tl.zeros((BLOCK_V, BLOCK_T), tl.float32)  # [v, t] = (S_0 q_t)_v
    HK = tl.zeros((BLOCK_L, BLOCK_T), tl.float32)  # [j, t] = k_j . k_t over the history
    HQ = tl.zeros((BLOCK_L, BLOCK_T), tl.float32)  # [j, t] = k_j . q_t
    KK = tl.zeros((BLOCK_T, BLOCK_T), tl.float32)  # [t, s] = k_t . k_s
    QK = tl.zeros((BLOCK_T, BLOCK_T), tl.float32)  # [t, s] = q_t . k_s
    state_base = state_ptr + slot * stride_state_slot + hv * stride_state_h + offs_v[:, None] * stride_state_v
    for c in tl.range(0, BLOCK_K // K_CHUNK):
        offs_c = c * K_CHUNK + tl.arange(0, K_CHUNK)
        mask_c = dim_mask(offs_c, head_k_dim, EVEN_TILE)
        mask_vc = mask_v[:, None] & mask_c[None, :]
        mask_tc = mask_t[:, None] & mask_c[None, :]
        S = tl.load(state_base + offs_c[None, :], mask=mask_vc, other=0.0).to(tl.float32)
        K_hist = tl.load(kr_base + phys_l[:, None] * stride_kr_l + offs_c[None, :],
                         mask=mask_l[:, None] & mask_c[None, :], other=0.0).to(tl.float32)  # [L, K_CHUNK]
        if fold:
            S_h = tl.exp(G) * S + small_matmul(D_w, K_hist, USE_DOT, EXACT_B, DOT_PRECISION, ONE_PASS_PRECISION)
            tl.store(state_base + offs_c[None, :], S_h.to(state_ptr.dtype.element_ty), mask=mask_vc)
        if PHASE != FOLD_ONLY:
            Kc = tl.load(k_rows + offs_c[None, :], mask=mask_tc, other=0.0).to(tl.float32)  # [T, K_CHUNK], raw
            Qc = tl.load(q_rows + offs_c[None, :], mask=mask_tc, other=0.0).to(tl.float32)
            for t in tl.static_range(BLOCK_T):
                # Draft t's raw k and q chunks [K_CHUNK], loaded again as vectors (cache
                # hits) rather than cut out of the tiles across threads.
                m_t = mask_c & (t < num_tokens)
                k_t = tl.load(k_base + t * stride_k_t + offs_c, mask=m_t, other=0.0).to(tl.float32)
                q_t = tl.load(q_base + t * stride_q_t + offs_c, mask=m_t, other=0.0).to(tl.float32)
                col = offs_t[None, :] == t
                SK += tl.where(col, tl.sum(S * k_t[None, :], axis=1)[:, None], 0.0)
                SQ += tl.where(col, tl.sum(S * q_t[None, :], axis=1)[:, None], 0.0)
                HK += tl.where(col, tl.sum(K_hist * k_t[None, :], axis=1)[:, None], 0.0)
                HQ += tl.where(col, tl.sum(K_hist * q_t[None, :], axis=1)[:, None], 0.0)
                KK += tl.where(col, tl.sum(Kc * k_t[None, :], axis=1)[:, None], 0.0)  # column t: k_. . k_t
                QK += tl.where(col, tl.sum(Qc * k_t[None, :], axis=1)[:, None], 0.0)  # column t: q_. . k_t
            if pid_v == 0:
                if hv % v_heads_per_k_head == 0:  # one value head per key head appends the shared k
                    phys_t = (origin + wp + offs_t) & (BUF - 1)
                    tl.store(kr_base + phys_t[:, None] * stride_kr_l + offs_c[None, :],
                             (Kc * inv_k[:, None]).to(k_ring_ptr.dtype.element_ty), mask=mask_tc)

    if PHASE != FOLD_ONLY:
        # Normalise, and add the history's part through its weighted corrected values.
        HK = HK * inv_k[None, :]
        HQ = HQ * inv_q[None, :]
        SK = tl.exp(G) * SK * inv_k[None, :]
        SQ = tl.exp(G) * SQ * inv_q[None, :]
        for t in tl.static_range(BLOCK_T):
            col = offs_t[None, :] == t
            hk_t = tl.sum(tl.where(col, HK, 0.0), axis=1)  # [L]
            hq_t = tl.sum(tl.where(col, HQ, 0.0), axis=1)
            SK += tl.where(col, tl.sum(D_w * hk_t[None, :], axis=1)[:, None], 0.0)
            SQ += tl.where(col, tl.sum(D_w * hq_t[None, :], axis=1)[:, None], 0.0)
        KK = KK * inv_k[:, None] * inv_k[None, :]
        QK = QK * inv_q[:, None] * inv_k[None, :]

        # Drafts' values [V, T] and gates [T].
        mask_vt = mask_v[:, None] & mask_t[None, :]
        Vd = tl.load(v_ptr + pid_b * stride_v_b + offs_t[None, :] * stride_v_t + hv * stride_v_h + offs_v[:, None],
                     mask=mask_vt, other=0.0).to(tl.float32)
        xg = (tl.load(a_ptr + pid_b * stride_a_b + offs_t * stride_a_t + hv * stride_a_h, mask=mask_t, other=0.0)
              .to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32))
        sp = tl.where(softplus_beta * xg <= softplus_threshold,
                      tl.log(1.0 + tl.exp(softplus_beta * xg)) / softplus_beta, xg)
        g_dr = tl.where(mask_t, -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32)) * sp, 0.0)
        beta = tl.where(mask_t, tl.sigmoid(tl.load(b_ptr + pid_b * stride_b_b + offs_t * stride_b_t
                                                   + hv * stride_b_h, mask=mask_t, other=0.0).to(tl.float32)), 0.0)
        A_t = tl.cumsum(g_dr, axis=0)

        # (I + M) d = r with M[t, s] = beta_t exp(A_t - A_s) (k_s . k_t) for s < t, and
        # r_t = beta_t (v_t - exp(A_t) S_h k_t). M is nilpotent (T <= 8), so
        # (I + M)^-1 = (I - M)(I + M^2)(I + M^4).
        diff = A_t[:, None] - A_t[None, :]
        lower = offs_t[None, :] < offs_t[:, None]
        M = tl.where(lower, beta[:, None] * tl.exp(tl.minimum(diff, 0.0)) * KK, 0.0)
        eye = tl.where(offs_t[:, None] == offs_t[None, :], 1.0, 0.0)
        M2 = _matmul_tt(M, M)
        M4 = _matmul_tt(M2, M2)
        Inv = _matmul_tt(_matmul_tt(eye - M, eye + M2), eye + M4)
        R = beta[None, :] * (Vd - tl.exp(A_t)[None, :] * SK)  # [V, T]
        Dd = tl.sum(R[:, None, :] * Inv[None, :, :], axis=2)  # d[:, t] = sum_s Inv[t, s] r[:, s]
        # o_t = exp(A_t) S_h q_t + sum_{s <= t} exp(A_t - A_s) (q_t . k_s) d_s
        W = tl.where(offs_t[None, :] <= offs_t[:, None], tl.exp(tl.minimum(diff, 0.0)) * QK, 0.0)  # [t, s]
        O = tl.exp(A_t)[None, :] * SQ + tl.sum(Dd[:, None, :] * W[None, :, :], axis=2)  # [V, T]

        # Append the drafts' corrected values and gates (logical wp + t; the keys went in
        # with the chunks); reads stop at wp, so they never meet these writes.
        phys_t = (origin + wp + offs_t) & (BUF - 1)
        tl.store(dr_base + phys_t[None, :] * stride_dr_l + offs_v[:, None], Dd.to(d_ring_ptr.dtype.element_ty),
                 mask=mask_vt)
        if pid_v == 0:
            tl.store(gr_base + phys_t, g_dr, mask=mask_t)
        tl.store(out_ptr + pid_b * stride_out_b + offs_t[None, :] * stride_out_t + hv * stride_out_h + offs_v[:, None],
                 O.to(out_ptr.dtype.element_ty), mask=mask_vt)


# Columns of the dot form's draft tile: draft t's key at column t, its query at DRAFT_COLS + t.
DRAFT_COLS = tl.constexpr(MAX_T)


@triton.jit
def _draft_column_ids(NUM_TOKENS: tl.constexpr):
    """The 16 columns of the dot form's tiles: ``offs_u``, the draft each belongs to
    (``tok``), whether it is a key column (else a query's) and whether its draft exists."""
    offs_u = tl.arange(0, 2 * DRAFT_COLS)
    tok = offs_u % DRAFT_COLS
    return offs_u, tok, offs_u < DRAFT_COLS, tok < NUM_TOKENS


@triton.jit
def _draft_tile(k_base, q_base, stride_k_t, stride_q_t, offs_k, mask_k, tok, is_key, mask_u):
    """The drafts' raw keys and queries as the columns of one tile ``[len(offs_k), 16]``
    in the activations' dtype: key t at column t, query t at ``DRAFT_COLS + t``."""
    mask = mask_k[:, None] & mask_u[None, :]
    X_key = tl.load(k_base + tok[None, :] * stride_k_t + offs_k[:, None], mask=mask & is_key[None, :], other=0.0)
    X_query = tl.load(q_base + tok[None, :] * stride_q_t + offs_k[:, None], mask=mask & ~is_key[None, :], other=0.0)
    return tl.where(is_key[None, :], X_key, X_query)


@triton.jit
def _draft_gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_t, stride_a_h, stride_b_b,
                 stride_b_t, stride_b_h, softplus_beta, softplus_threshold, offs_u, tok, is_key, mask_u):
    """A value head's drafts' gates per column of the draft tile (both halves carry their
    draft's): the log-decay ``g``, ``beta``, ``A_u`` (g summed over drafts 0..tok(u)) and
    the decays between columns ``exp(A_u - A_s)`` [16, 16]."""
    xg = (tl.load(a_ptr + pid_b * stride_a_b + tok * stride_a_t + hv * stride_a_h, mask=mask_u, other=0.0)
          .to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32))
    sp = tl.where(softplus_beta * xg <= softplus_threshold,
                  tl.log(1.0 + tl.exp(softplus_beta * xg)) / softplus_beta, xg)
    g_u = tl.where(mask_u, -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32)) * sp, 0.0)
    beta = tl.where(mask_u, tl.sigmoid(tl.load(b_ptr + pid_b * stride_b_b + tok * stride_b_t + hv * stride_b_h,
                                               mask=mask_u, other=0.0).to(tl.float32)), 0.0)
    A_u = tl.sum(tl.where(is_key[None, :] & (offs_u[None, :] <= tok[:, None]), g_u[None, :], 0.0), axis=1)
    decay_us = tl.exp(tl.minimum(A_u[:, None] - A_u[None, :], 0.0))  # [u, s]
    return g_u, beta, A_u, decay_us


@triton.jit
def _solve_weights(Gram, beta, decay_us, offs_u, tok, is_key, mask_u, NUM_TOKENS: tl.constexpr,
                   SMALL_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr):
    """``Z`` [16, 16] of a value head: ``R Z`` gives the drafts' corrected values on the key
    columns and their share of the outputs on the query columns (see the dot kernel)."""
    eye = tl.where(offs_u[:, None] == offs_u[None, :], 1.0, 0.0)
    key_block = is_key[:, None] & is_key[None, :]
    strictly_lower = key_block & (offs_u[None, :] < offs_u[:, None])  # [u, s]: s < u, both keys
    # [u, s]: query u on key s <= tok(u)
    causal_qk = (~is_key)[:, None] & is_key[None, :] & (offs_u[None, :] <= tok[:, None]) & mask_u[None, :]
    # (I + M) D = R on the key columns: M[u, s] = beta_u exp(A_u - A_s) (k_s . k_u)
    # for s < u, R[:, u] = beta_u (v_u - exp(A_u) S_h k_u); M^T = 0, so
    # (I + M)^-1 = (I - M)(I + M^2)(I + M^4), the factors past T dropped.
    M = tl.where(strictly_lower, beta[:, None] * decay_us * Gram, 0.0)
    Inv = eye - M  # enough for T <= 2 (M^2 = 0)
    if NUM_TOKENS > 2:
        M2 = small_matmul(M, M, True, False, SMALL_PRECISION, ONE_PASS_PRECISION)
        Inv = small_matmul(Inv, eye + M2, True, False, SMALL_PRECISION, ONE_PASS_PRECISION)
        if NUM_TOKENS > 4:
            M4 = small_matmul(M2, M2, True, False, SMALL_PRECISION, ONE_PASS_PRECISION)
            Inv = small_matmul(Inv, eye + M4, True, False, SMALL_PRECISION, ONE_PASS_PRECISION)
    # O[:, u] on the query columns: exp(A_u) S_h q_u + sum_{s <= tok(u)} exp(A_u - A_s) (q_u . k_s) d_s,
    # i.e. D W^T with W[u, s] = exp(A_u - A_s) (q_u . k_s): one product, R Z with
    # Z = Inv^T (I + W^T), gives D on the key columns and D W^T on the query columns.
    W = tl.where(causal_qk, decay_us * Gram, 0.0)
    return small_matmul(tl.trans(Inv), eye + tl.trans(W), True, False, SMALL_PRECISION, ONE_PASS_PRECISION)


@triton.jit
def _head_solve(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_t, stride_a_h, stride_b_b,
                stride_b_t, stride_b_h, softplus_beta, softplus_threshold, Gram, offs_u, tok, is_key, mask_u,
                NUM_TOKENS: tl.constexpr, SMALL_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr):
    """A value head's drafts' gates (:func:`_draft_gates`: ``g``, ``beta``, ``A``) and its
    solve ``Z`` (:func:`_solve_weights`) from its key head's scaled Gram."""
    g_u, beta, A_u, decay_us = _draft_gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_t,
                                            stride_a_h, stride_b_b, stride_b_t, stride_b_h, softplus_beta,
                                            softplus_threshold, offs_u, tok, is_key, mask_u)
    Z = _solve_weights(Gram, beta, decay_us, offs_u, tok, is_key, mask_u, NUM_TOKENS, SMALL_PRECISION,
                       ONE_PASS_PRECISION)
    return g_u, beta, A_u, Z


@triton.jit
def _draft_columns(k_ptr, q_ptr, pid_b, h, stride_k_b, stride_k_t, stride_k_h, stride_q_b, stride_q_t, stride_q_h,
                   offs_k, mask_k, tok, is_key, mask_u, scale, USE_QK_L2NORM: tl.constexpr, EXACT_X: tl.constexpr,
                   DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr):
    """The drafts' tile ``X [K, 16]`` of key head ``h`` (in the activations' dtype), the
    columns' scales (inverse L2 norms; the queries' also take the attention scale) and the
    scaled Gram ``[16, 16]`` (keys . keys, queries . keys)."""
    X = _draft_tile(k_ptr + pid_b * stride_k_b + h * stride_k_h, q_ptr + pid_b * stride_q_b + h * stride_q_h,
                    stride_k_t, stride_q_t, offs_k, mask_k, tok, is_key, mask_u)
    Xf = X.to(tl.float32)
    col_scale = tl.where(is_key, 1.0, scale)
    if USE_QK_L2NORM:
        col_scale = col_scale * tl.rsqrt(tl.sum(Xf * Xf, axis=0) + 1e-6)
    Gram = native_dot(tl.trans(X), X, True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION) \
        * col_scale[:, None] * col_scale[None, :]
    return X, Xf, col_scale, Gram


@triton.jit
def _history_decays(gr_base, phys_l, mask_l):
    """A value head's committed history's total log-decay ``G`` and its entries' weights
    ``exp(G - G_j)`` (``G_j`` the log-decay summed up to entry j; 0 past the history)."""
    g_hist = tl.load(gr_base + phys_l, mask=mask_l, other=0.0)
    G = tl.sum(g_hist, axis=0)
    return G, tl.where(mask_l, tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0), 0.0)), 0.0)


@triton.jit
def _history_keys_x(kr_base, stride_kr_l, origin, n_hist, offs_k, mask_k, Xf, col_scale, BUF: tl.constexpr,
                    BLOCK_L: tl.constexpr, EXACT_X: tl.constexpr, DOT_PRECISION: tl.constexpr,
                    ONE_PASS_PRECISION: tl.constexpr):
    """The committed history's ring positions (logical, physical, mask) and its keys
    (normalised, in the ring at ``kr_base``) against every column of the drafts' tile:
    ``(K_hist X) c`` [L, 16]."""
    offs_l, phys_l = ring_positions(origin, BUF, BLOCK_L)
    mask_l = offs_l < n_hist
    K_hist = tl.load(kr_base + phys_l[:, None] * stride_kr_l + offs_k[None, :],
                     mask=mask_l[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
    HX = small_matmul(K_hist, Xf, True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION) * col_scale[None, :]
    return offs_l, phys_l, mask_l, HX


@triton.jit
def _solve_offsets(pid_b, hv, num_v_heads, offs_u):
    """Offsets of a (row, value head)'s ``Z [16, 16]`` in the solve's workspace ``[B, HV, 16, 16]``."""
    return ((pid_b.to(tl.int64) * num_v_heads + hv) * (2 * DRAFT_COLS) + offs_u[:, None]) * (2 * DRAFT_COLS) \
        + offs_u[None, :]


@triton.jit(do_not_specialize=["num_slots"])
def _gdn_spec_solve_kernel(
    q_ptr, k_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, solve_ptr, wp_ptr, origin_ptr, flush_ptr, slot_idx_ptr,
    num_slots, head_k_dim, num_v_heads, v_heads_per_k_head, capacity, pad_slot_id,
    stride_q_b, stride_q_t, stride_q_h, stride_k_b, stride_k_t, stride_k_h,
    stride_a_b, stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr, BLOCK_K: tl.constexpr, BUF: tl.constexpr,
    EXACT_X: tl.constexpr, DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr,
    NUM_TOKENS: tl.constexpr, SMALL_PRECISION: tl.constexpr, EVEN_TILE: tl.constexpr, BLOCK_V: tl.constexpr,
):
    """The drafts' solve of one (row, value head), ``Z [16, 16]`` (:func:`_solve_weights`),
    to the workspace ``solve [B, HV, 16, 16]``, ahead of the verify (``SOLVE_APART``): it
    depends on the drafts alone, and as a chain of small products in every program of the
    verify's loop over heads it was latency the verify waited on. Grid ``(1, HV, B)``:
    ``BLOCK_V`` is the head's whole V (the C launcher's grid is (V / BLOCK_V, heads, rows))."""
    hv = tl.program_id(1)
    pid_b = tl.program_id(2)
    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, NUM_TOKENS, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad | is_bad:  # (the verify reports a bad row)
        return
    offs_k = tl.arange(0, BLOCK_K)
    mask_k = dim_mask(offs_k, head_k_dim, EVEN_TILE)
    offs_u, tok, is_key, mask_u = _draft_column_ids(NUM_TOKENS)
    X, Xf, col_scale, Gram = _draft_columns(k_ptr, q_ptr, pid_b, hv // v_heads_per_k_head, stride_k_b, stride_k_t,
                                            stride_k_h, stride_q_b, stride_q_t, stride_q_h, offs_k, mask_k, tok,
                                            is_key, mask_u, scale, USE_QK_L2NORM, EXACT_X, DOT_PRECISION,
                                            ONE_PASS_PRECISION)
    Z = _head_solve(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_t, stride_a_h, stride_b_b,
                    stride_b_t, stride_b_h, softplus_beta, softplus_threshold, Gram, offs_u, tok, is_key, mask_u,
                    NUM_TOKENS, SMALL_PRECISION, ONE_PASS_PRECISION)[3]
    tl.store(solve_ptr + _solve_offsets(pid_b, hv, num_v_heads, offs_u), Z)


@triton.jit(do_not_specialize=["num_slots"])
def _gdn_spec_verify_dot_kernel(
    state_ptr, d_ring_ptr, k_ring_ptr, g_ring_ptr, wp_ptr, origin_ptr, flush_ptr,
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, num_tokens, head_k_dim, head_v_dim, v_heads_per_k_head, capacity, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_v,
    stride_dr_slot, stride_dr_h, stride_dr_l, stride_kr_slot, stride_kr_h, stride_kr_l, stride_gr_slot, stride_gr_h,
    stride_q_b, stride_q_t, stride_q_h, stride_k_b, stride_k_t, stride_k_h, stride_v_b, stride_v_t, stride_v_h,
    stride_a_b, stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h, stride_out_b, stride_out_t, stride_out_h,
    scale, softplus_beta, softplus_threshold, solve_ptr, num_v_heads,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, BUF: tl.constexpr, BLOCK_L: tl.constexpr,
    EXACT_X: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ONE_PASS_PRECISION: tl.constexpr, EVEN_TILE: tl.constexpr, HEADS_PER_PROG: tl.constexpr,
    KEY_CHUNK: tl.constexpr, NUM_TOKENS: tl.constexpr, SMALL_PRECISION: tl.constexpr, PHASE: tl.constexpr,
    SOLVE_APART: tl.constexpr,
):
    """The verify with every product on tl.dot (the Mamba2 verify's phases): of every row
    after the flush rows' fold launch (``PHASE`` = ``AFTER_FOLD``), or of the flush rows
    alone, folding their history on the way through (``FLUSH_ROWS``: a state chunk is read
    once, folded, stored and multiplied), or of the other rows alone (``NONFLUSH_ROWS``,
    compiled without the fold).

    The drafts' raw keys and queries are the columns of one tile ``X [K, 16]`` (key t at
    column t, query t at ``DRAFT_COLS + t``), so the checkpoint meets all 2T vectors in
    one matmul, ``S_0 X``, and the norms scale the columns after. Raw bf16/fp16
    activations are exact in TF32 (``EXACT_X``): the state takes the two-pass split of
    :func:`split_tf32_dot`, fp32-accurate at two tensor-core passes. Everything else
    lives on the same 16 columns: the history's ``K_hist X``, the Gram ``X^T X`` (keys
    against keys, queries against keys), the solve's ``[16, 16]`` matrices (zero outside
    the keys' block) and ``R``, ``D``, ``O`` ``[V, 16]`` (``D`` on the key columns, ``O``
    on the query columns). A program runs ``HEADS_PER_PROG`` value heads of one key head:
    their drafts' tile, Gram and history products are shared."""
    pid_v = tl.program_id(0)
    hv0 = tl.program_id(1) * HEADS_PER_PROG
    pid_b = tl.program_id(2)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    offs_u, tok, is_key, mask_u = _draft_column_ids(NUM_TOKENS)
    mask_v, mask_k = tile_masks(offs_v, offs_k, head_v_dim, head_k_dim, EVEN_TILE)

    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, NUM_TOKENS, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad:
        return
    if is_bad:
        if PHASE != FLUSH_ROWS:  # the launch that verifies every other row reports
            for hh in range(0, HEADS_PER_PROG):
                store_nan_tokens(out_ptr, offs_v, mask_v, pid_b, hv0 + hh, stride_out_b, stride_out_t, stride_out_h,
                                 NUM_TOKENS, DRAFT_COLS)
        return
    if leaves_row(is_flush, PHASE):
        return
    n_hist = wp
    if PHASE == AFTER_FOLD:
        n_hist = tl.where(is_flush, 0, wp)  # a flush row's history is in its checkpoint already
    h = hv0 // v_heads_per_k_head
    phys_u = (origin + wp + tok) & (BUF - 1)  # where draft tok(u) goes (logical wp + t)

    # The drafts' tile X [K, 16] in the activations' dtype, the columns' scales and the
    # scaled Gram [16, 16] (unused where the solve ran apart).
    mask_ku = mask_k[:, None] & mask_u[None, :]
    k_base = k_ptr + pid_b * stride_k_b + h * stride_k_h
    q_base = q_ptr + pid_b * stride_q_b + h * stride_q_h
    X, Xf, col_scale, Gram = _draft_columns(k_ptr, q_ptr, pid_b, h, stride_k_b, stride_k_t, stride_k_h, stride_q_b,
                                            stride_q_t, stride_q_h, offs_k, mask_k, tok, is_key, mask_u, scale,
                                            USE_QK_L2NORM, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
    # The history's keys (normalised, in the ring) against every column: [L, 16].
    kr_base = k_ring_ptr + slot * stride_kr_slot + h * stride_kr_h
    offs_l, phys_l, mask_l, HX = _history_keys_x(kr_base, stride_kr_l, origin, n_hist, offs_k, mask_k, Xf, col_scale,
                                                 BUF, BLOCK_L, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
    if pid_v == 0:
        if hv0 % v_heads_per_k_head == 0:  # one program per key head appends the shared keys
            tl.store(kr_base + phys_u[None, :] * stride_kr_l + offs_k[:, None],
                     (Xf * col_scale[None, :]).to(k_ring_ptr.dtype.element_ty), mask=mask_ku & is_key[None, :])

    mask_vu = mask_v[:, None] & mask_u[None, :]
    for hh in range(0, HEADS_PER_PROG):
        hv = hv0 + hh
        g_u, beta, A_u, decay_us = _draft_gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b,
                                                stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h,
                                                softplus_beta, softplus_threshold, offs_u, tok, is_key, mask_u)

        # The committed history's weighted corrected values [V, L], and S_h X [V, 16]
        # = exp(G) S_0 X + D_w (K_hist X).
        dr_base = d_ring_ptr + slot * stride_dr_slot + hv * stride_dr_h
        gr_base = g_ring_ptr + slot * stride_gr_slot + hv * stride_gr_h
        G, decay_l = _history_decays(gr_base, phys_l, mask_l)
        D_w = tl.load(dr_base + phys_l[None, :] * stride_dr_l + offs_v[:, None],
                      mask=mask_v[:, None] & mask_l[None, :], other=0.0).to(tl.float32) * decay_l[None, :]
        # S_0 X: the whole state tile against the drafts' tile, or the state streamed in
        # chunks of KEY_CHUNK key columns (the drafts' tile chunk is then read again from
        # L1, as the whole tile held across the heads would cost the registers saved).
        state_rows = state_ptr + slot * stride_state_slot + hv * stride_state_h + offs_v[:, None] * stride_state_v
        if PHASE == FLUSH_ROWS:
            # Fold on the way: S_h = exp(G) S_0 + D_w K_hist chunk by chunk, stored, and S_h X.
            SX = tl.zeros((BLOCK_V, 2 * DRAFT_COLS), tl.float32)
            for c in tl.range(0, BLOCK_K // KEY_CHUNK):
                offs_c = c * KEY_CHUNK + tl.arange(0, KEY_CHUNK)
                mask_c = dim_mask(offs_c, head_k_dim, EVEN_TILE)
                mask_vc = mask_v[:, None] & mask_c[None, :]
                K_hist_c = tl.load(kr_base + phys_l[:, None] * stride_kr_l + offs_c[None, :],
                                   mask=mask_l[:, None] & mask_c[None, :], other=0.0).to(tl.float32)
                S_h = tl.exp(G) * tl.load(state_rows + offs_c[None, :], mask=mask_vc, other=0.0).to(tl.float32) \
                    + small_matmul(D_w, K_hist_c, True, False, DOT_PRECISION, ONE_PASS_PRECISION)
                tl.store(state_rows + offs_c[None, :], S_h.to(state_ptr.dtype.element_ty), mask=mask_vc)
                Xc = _draft_tile(k_base, q_base, stride_k_t, stride_q_t, offs_c, mask_c, tok, is_key, mask_u)
                SX += small_matmul(S_h, Xc.to(tl.float32), True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
            SX = SX * col_scale[None, :]
        else:
            if KEY_CHUNK == BLOCK_K:
                S0 = tl.load(state_rows + offs_k[None, :], mask=mask_v[:, None] & mask_k[None, :], other=0.0)
                SX = small_matmul(S0.to(tl.float32), Xf, True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
            else:
                SX = tl.zeros((BLOCK_V, 2 * DRAFT_COLS), tl.float32)
                for c in tl.range(0, BLOCK_K // KEY_CHUNK):
                    offs_c = c * KEY_CHUNK + tl.arange(0, KEY_CHUNK)
                    mask_c = dim_mask(offs_c, head_k_dim, EVEN_TILE)
                    S0 = tl.load(state_rows + offs_c[None, :], mask=mask_v[:, None] & mask_c[None, :], other=0.0)
                    Xc = _draft_tile(k_base, q_base, stride_k_t, stride_q_t, offs_c, mask_c, tok, is_key, mask_u)
                    SX += small_matmul(S0.to(tl.float32), Xc.to(tl.float32), True, EXACT_X, DOT_PRECISION,
                                       ONE_PASS_PRECISION)
            SX = tl.exp(G) * SX * col_scale[None, :]
            SX += small_matmul(D_w, HX, True, False, SMALL_PRECISION, ONE_PASS_PRECISION)

        # The drafts' solve, Z [16, 16] (:func:`_solve_weights`): from the solve launch, or here.
        if SOLVE_APART:
            Z = tl.load(solve_ptr + _solve_offsets(pid_b, hv, num_v_heads, offs_u))
        else:
            Z = _solve_weights(Gram, beta, decay_us, offs_u, tok, is_key, mask_u, NUM_TOKENS, SMALL_PRECISION,
                               ONE_PASS_PRECISION)
        Vd = tl.load(v_ptr + pid_b * stride_v_b + tok[None, :] * stride_v_t + hv * stride_v_h + offs_v[:, None],
                     mask=mask_vu & is_key[None, :], other=0.0).to(tl.float32)
        R = tl.where(is_key[None, :], beta[None, :] * (Vd - tl.exp(A_u)[None, :] * SX), 0.0)
        RZ = small_matmul(R, Z, True, False, SMALL_PRECISION, ONE_PASS_PRECISION)  # [V, 16]: D | D W^T
        O = tl.exp(A_u)[None, :] * SX + RZ

        # Append the drafts' corrected values and gates (reads stop at wp: they never meet
        # these writes), and write the outputs.
        tl.store(dr_base + phys_u[None, :] * stride_dr_l + offs_v[:, None], RZ.to(d_ring_ptr.dtype.element_ty),
                 mask=mask_vu & is_key[None, :])
        if pid_v == 0:
            tl.store(gr_base + phys_u, g_u, mask=mask_u & is_key)
        tl.store(out_ptr + pid_b * stride_out_b + tok[None, :] * stride_out_t + hv * stride_out_h + offs_v[:, None],
                 O.to(out_ptr.dtype.element_ty), mask=mask_vu & ~is_key[None, :])


# split_fold 3: the state's product in a launch of its own. Every output and every draft's
# corrected value is affine in ``P = S_0 X`` (the raw drafts' tile): ``F = P W + bias``
# on the 16 columns (``D`` on the key columns, ``O`` on the query columns), with
# ``W [16, 16]`` from the drafts' gates, the solve and the history's total decay, and
# ``bias [V, 16]`` from the history and the drafts' values. A launch before forms both
# (the ring's part, with the solve); the state's product launch then streams the
# checkpoint with nothing else in its registers. Its launch config: rows of V a program,
# key columns a step of its loop, warps, pipeline stages; the ring part's: rows of V a
# step of its loop over the head's, warps, value heads of a key head a program.
# H200, Qwen3.5-122B, T = 4, all accepted, us a verify step at batch 128 / 512
# (``python benchmarks/probe_gdn_state_apart.py``, ``benchmarks/results/gdn_state_apart.json``):
# split_fold 2 359 / 1391; split_fold 3 with these 340 / 1300. The state's product on 32
# rows and one warp 388 / 1493 (64 rows, 2 warps: 384 / 1477; chunks of 64 columns lost
# 2-8%); the ring part a value head a program 412 / 1595, 2 a program 398 / 1541, on 2-4
# warps or 64-128 rows 400-433 / 1567-1643 (all with fp32 FMA products).
GDN_STATE_PRODUCT_ROWS, GDN_STATE_PRODUCT_COLS, GDN_STATE_PRODUCT_WARPS, GDN_STATE_PRODUCT_STAGES = 128, 32, 4, 3
GDN_RING_PART_ROWS, GDN_RING_PART_WARPS, GDN_RING_PART_HEADS = 32, 1, 4
# The precision of the two launches' small products (the solve, the history's and the
# drafts' [V, 16] x [16, 16], ``(S_0 X) W``): tf32x3 on the tensor cores, not the fused
# verify's fp32 FMAs (:data:`SMALL_DOT_PRECISION`): 340 against 381 us (both launches
# FMAs), 350 (the ring part's alone on the tensor cores), 372 (the state product's).
GDN_RING_PART_PRECISION, GDN_STATE_PRODUCT_PRECISION = DOT_PRECISION, DOT_PRECISION
# Whether split_fold 3's flush rows take their step in a launch of the state's product
# compiled with the fold (``FOLD``: the ring part's W and bias, of an empty history, then
# the fold on the way through), rather than in the fused verify's flush rows' launch
# (``_gdn_spec_verify_dot_kernel``, FLUSH_ROWS: it forms the solve's products and the
# history's again, and holds 213 registers a thread). Not yet measured: off.
GDN_FLUSH_IN_STATE_PRODUCT = False


@triton.jit
def _bias_offsets(pid_b, hv, num_v_heads, head_v_dim, offs_v, tok, is_key, NUM_TOKENS: tl.constexpr):
    """Offsets of a (row, value head)'s ``bias`` rows ``offs_v`` on the 16 columns in the
    workspace's ``bias [B, HV, 2T, V]`` (key t at t, query t at T + t; V contiguous)."""
    col = tl.where(is_key, tok, NUM_TOKENS + tok)
    return ((pid_b.to(tl.int64) * num_v_heads + hv) * (2 * NUM_TOKENS) + col[None, :]) * head_v_dim + offs_v[:, None]


@triton.jit(do_not_specialize=["num_slots"])
def _gdn_spec_ring_part_kernel(
    d_ring_ptr, k_ring_ptr, g_ring_ptr, wp_ptr, origin_ptr, flush_ptr,
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, slot_idx_ptr, solve_ptr, bias_ptr,
    num_slots, head_k_dim, head_v_dim, num_v_heads, v_heads_per_k_head, capacity, pad_slot_id,
    stride_dr_slot, stride_dr_h, stride_dr_l, stride_kr_slot, stride_kr_h, stride_kr_l, stride_gr_slot, stride_gr_h,
    stride_q_b, stride_q_t, stride_q_h, stride_k_b, stride_k_t, stride_k_h, stride_v_b, stride_v_t, stride_v_h,
    stride_a_b, stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr, BLOCK_K: tl.constexpr, BUF: tl.constexpr,
    BLOCK_L: tl.constexpr, BLOCK_V: tl.constexpr, V_BLOCKS: tl.constexpr, EXACT_X: tl.constexpr,
    DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr, NUM_TOKENS: tl.constexpr,
    SMALL_PRECISION: tl.constexpr, EVEN_TILE: tl.constexpr, HEADS_PER_PROG: tl.constexpr,
    FLUSH_ROWS_TOO: tl.constexpr,
):
    """split_fold 3's first launch, a program a row and ``HEADS_PER_PROG`` value heads of a
    key head (their drafts' tile and history products shared), grid ``(1, HV / heads, B)``:
    the drafts' solve ``Z`` and, for a row that does not flush, everything of its verify
    but the state's product. To the workspace: ``W [16, 16]`` in ``Z``'s place (a flush
    row keeps ``Z``, for its own launch; with ``FLUSH_ROWS_TOO`` it gets ``W`` and ``bias``
    of an empty history, as its state product folds first) and ``bias [2T, V]``; to the
    ring: the drafts' keys and gates (their corrected values need ``S_0`` and come with
    the state's product).

    With ``P = S_0 X`` (raw columns), ``c`` the columns' scales, ``G`` the history's total
    log-decay and ``H = D_w (K_hist X) c`` the history's share of ``S_h X``:
    ``S_h X = e^G P c + H``, and the dot kernel's ``R Z + [query] e^A S_h X`` becomes
    ``P W + bias`` with ``W[s, u] = e^{A_s + G} c_s ([query s] delta_su - [key s] beta_s Z[s, u])``
    and ``bias = ([key] beta (V - e^A H)) Z + [query] e^A H``."""
    hv0 = tl.program_id(1) * HEADS_PER_PROG
    pid_b = tl.program_id(2)
    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, NUM_TOKENS, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad | is_bad:  # (the state's product launch reports a bad row)
        return
    h = hv0 // v_heads_per_k_head
    offs_k = tl.arange(0, BLOCK_K)
    mask_k = dim_mask(offs_k, head_k_dim, EVEN_TILE)
    offs_u, tok, is_key, mask_u = _draft_column_ids(NUM_TOKENS)
    X, Xf, col_scale, Gram = _draft_columns(k_ptr, q_ptr, pid_b, h, stride_k_b, stride_k_t, stride_k_h, stride_q_b,
                                            stride_q_t, stride_q_h, offs_k, mask_k, tok, is_key, mask_u, scale,
                                            USE_QK_L2NORM, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
    n_hist = wp
    if FLUSH_ROWS_TOO:  # a flush row's state product folds its history first: W and bias without it
        n_hist = tl.where(is_flush, 0, wp)
    else:
        if is_flush:  # the flush rows' own launch takes its whole step with Z
            for hh in range(0, HEADS_PER_PROG):
                g_u, beta, A_u, Z = _head_solve(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv0 + hh, stride_a_b,
                                                stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h,
                                                softplus_beta, softplus_threshold, Gram, offs_u, tok, is_key, mask_u,
                                                NUM_TOKENS, SMALL_PRECISION, ONE_PASS_PRECISION)
                tl.store(solve_ptr + _solve_offsets(pid_b, hv0 + hh, num_v_heads, offs_u), Z)
            return

    # The history's keys against every column, [L, 16] (shared by the key head's value
    # heads); the drafts' keys appended (reads stop at wp).
    kr_base = k_ring_ptr + slot * stride_kr_slot + h * stride_kr_h
    offs_l, phys_l, mask_l, HX = _history_keys_x(kr_base, stride_kr_l, origin, n_hist, offs_k, mask_k, Xf, col_scale,
                                                 BUF, BLOCK_L, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
    phys_u = (origin + wp + tok) & (BUF - 1)
    if hv0 % v_heads_per_k_head == 0:
        tl.store(kr_base + phys_u[None, :] * stride_kr_l + offs_k[:, None],
                 (Xf * col_scale[None, :]).to(k_ring_ptr.dtype.element_ty),
                 mask=mask_k[:, None] & (mask_u & is_key)[None, :])
    eye = offs_u[:, None] == offs_u[None, :]
    for hh in range(0, HEADS_PER_PROG):
        hv = hv0 + hh
        g_u, beta, A_u, Z = _head_solve(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_t,
                                        stride_a_h, stride_b_b, stride_b_t, stride_b_h, softplus_beta,
                                        softplus_threshold, Gram, offs_u, tok, is_key, mask_u, NUM_TOKENS,
                                        SMALL_PRECISION, ONE_PASS_PRECISION)
        gr_base = g_ring_ptr + slot * stride_gr_slot + hv * stride_gr_h
        G, decay_l = _history_decays(gr_base, phys_l, mask_l)
        decay_A = tl.exp(A_u)
        W = (decay_A * tl.exp(G) * col_scale)[:, None] \
            * tl.where(is_key[:, None], -beta[:, None] * Z, tl.where(eye, 1.0, 0.0))
        tl.store(solve_ptr + _solve_offsets(pid_b, hv, num_v_heads, offs_u), W)
        tl.store(gr_base + phys_u, g_u, mask=mask_u & is_key)

        dr_base = d_ring_ptr + slot * stride_dr_slot + hv * stride_dr_h
        for c in tl.range(0, V_BLOCKS):
            offs_v = c * BLOCK_V + tl.arange(0, BLOCK_V)
            mask_v = offs_v < head_v_dim
            D_w = tl.load(dr_base + phys_l[None, :] * stride_dr_l + offs_v[:, None],
                          mask=mask_v[:, None] & mask_l[None, :], other=0.0).to(tl.float32) * decay_l[None, :]
            Hs = small_matmul(D_w, HX, True, False, SMALL_PRECISION, ONE_PASS_PRECISION)  # [V, 16]
            mask_vu = mask_v[:, None] & mask_u[None, :]
            Vd = tl.load(v_ptr + pid_b * stride_v_b + tok[None, :] * stride_v_t + hv * stride_v_h + offs_v[:, None],
                         mask=mask_vu & is_key[None, :], other=0.0).to(tl.float32)
            R = tl.where(is_key[None, :], beta[None, :] * (Vd - decay_A[None, :] * Hs), 0.0)
            bias = small_matmul(R, Z, True, False, SMALL_PRECISION, ONE_PASS_PRECISION) \
                + tl.where(is_key[None, :], 0.0, decay_A[None, :] * Hs)
            tl.store(bias_ptr + _bias_offsets(pid_b, hv, num_v_heads, head_v_dim, offs_v, tok, is_key, NUM_TOKENS),
                     bias, mask=mask_vu)


@triton.jit(do_not_specialize=["num_slots"])
def _gdn_spec_state_product_kernel(
    state_ptr, d_ring_ptr, k_ring_ptr, g_ring_ptr, wp_ptr, origin_ptr, flush_ptr, q_ptr, k_ptr, out_ptr, slot_idx_ptr,
    solve_ptr, bias_ptr, num_slots, head_k_dim, head_v_dim, num_v_heads, v_heads_per_k_head, capacity, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_v, stride_dr_slot, stride_dr_h, stride_dr_l,
    stride_kr_slot, stride_kr_h, stride_kr_l, stride_gr_slot, stride_gr_h,
    stride_q_b, stride_q_t, stride_q_h, stride_k_b, stride_k_t, stride_k_h, stride_out_b, stride_out_t, stride_out_h,
    HAS_SLOT_IDX: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, KEY_CHUNK: tl.constexpr,
    BUF: tl.constexpr, BLOCK_L: tl.constexpr, EXACT_X: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ONE_PASS_PRECISION: tl.constexpr, NUM_TOKENS: tl.constexpr, SMALL_PRECISION: tl.constexpr,
    EVEN_TILE: tl.constexpr, STAGES: tl.constexpr, FOLD: tl.constexpr,
):
    """split_fold 3's last launch, for the rows that do not flush: ``F = (S_0 X) W + bias``
    (:func:`_gdn_spec_ring_part_kernel`) for a block of a value head's rows of V, the state
    streamed in chunks of key columns through a pipelined loop; the key columns' ``F`` are
    the drafts' corrected values (to the ring), the query columns' the outputs. Reports a
    bad row (NaN outputs) unless ``FOLD``: compiled with it, the launch serves the flush
    rows alone and folds on the way through (``S_h = e^G S_0 + D_w K_hist`` chunk by chunk,
    stored, and ``S_h X``), with the ring part's ``W`` and ``bias`` of an empty history."""
    pid_v = tl.program_id(0)
    hv = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_v = dim_mask(offs_v, head_v_dim, EVEN_TILE)
    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, NUM_TOKENS, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad:
        return
    if FOLD:
        if is_bad | (is_flush == 0):  # (the other rows' launch reports a bad row)
            return
    else:
        if is_bad:
            store_nan_tokens(out_ptr, offs_v, mask_v, pid_b, hv, stride_out_b, stride_out_t, stride_out_h,
                             NUM_TOKENS, DRAFT_COLS)
            return
        if is_flush:
            return
    offs_u, tok, is_key, mask_u = _draft_column_ids(NUM_TOKENS)
    h = hv // v_heads_per_k_head
    k_base = k_ptr + pid_b * stride_k_b + h * stride_k_h
    q_base = q_ptr + pid_b * stride_q_b + h * stride_q_h
    state_rows = state_ptr + slot * stride_state_slot + hv * stride_state_h + offs_v[:, None] * stride_state_v
    if FOLD:  # the history's weighted corrected values [V, L] and keys' ring, for the fold
        offs_l, phys_l = ring_positions(origin, BUF, BLOCK_L)
        mask_l = offs_l < wp
        G, decay_l = _history_decays(g_ring_ptr + slot * stride_gr_slot + hv * stride_gr_h, phys_l, mask_l)
        D_w = tl.load(d_ring_ptr + slot * stride_dr_slot + hv * stride_dr_h + phys_l[None, :] * stride_dr_l
                      + offs_v[:, None], mask=mask_v[:, None] & mask_l[None, :], other=0.0).to(tl.float32) \
            * decay_l[None, :]
        kr_base = k_ring_ptr + slot * stride_kr_slot + h * stride_kr_h
    P = tl.zeros((BLOCK_V, 2 * DRAFT_COLS), tl.float32)
    for c in tl.range(0, BLOCK_K // KEY_CHUNK, num_stages=STAGES):
        offs_c = c * KEY_CHUNK + tl.arange(0, KEY_CHUNK)
        mask_c = dim_mask(offs_c, head_k_dim, EVEN_TILE)
        mask_vc = mask_v[:, None] & mask_c[None, :]
        S0 = tl.load(state_rows + offs_c[None, :], mask=mask_vc, other=0.0).to(tl.float32)
        if FOLD:
            K_hist_c = tl.load(kr_base + phys_l[:, None] * stride_kr_l + offs_c[None, :],
                               mask=mask_l[:, None] & mask_c[None, :], other=0.0).to(tl.float32)
            S0 = tl.exp(G) * S0 + small_matmul(D_w, K_hist_c, True, False, DOT_PRECISION, ONE_PASS_PRECISION)
            tl.store(state_rows + offs_c[None, :], S0.to(state_ptr.dtype.element_ty), mask=mask_vc)
        Xc = _draft_tile(k_base, q_base, stride_k_t, stride_q_t, offs_c, mask_c, tok, is_key, mask_u)
        P += small_matmul(S0, Xc.to(tl.float32), True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
    W = tl.load(solve_ptr + _solve_offsets(pid_b, hv, num_v_heads, offs_u))
    mask_vu = mask_v[:, None] & mask_u[None, :]
    F = small_matmul(P, W, True, False, SMALL_PRECISION, ONE_PASS_PRECISION) \
        + tl.load(bias_ptr + _bias_offsets(pid_b, hv, num_v_heads, head_v_dim, offs_v, tok, is_key, NUM_TOKENS),
                  mask=mask_vu, other=0.0)
    phys_u = (origin + wp + tok) & (BUF - 1)
    tl.store(d_ring_ptr + slot * stride_dr_slot + hv * stride_dr_h + phys_u[None, :] * stride_dr_l + offs_v[:, None],
             F.to(d_ring_ptr.dtype.element_ty), mask=mask_vu & is_key[None, :])
    tl.store(out_ptr + pid_b * stride_out_b + tok[None, :] * stride_out_t + hv * stride_out_h + offs_v[:, None],
             F.to(out_ptr.dtype.element_ty), mask=mask_vu & ~is_key[None, :])


def gdn_spec_workspace_numel(batch: int, num_tokens: int, num_v_heads: int, head_v_dim: int) -> int:
    """fp32 elements of a verify's workspace: the drafts' solve ``[batch, HV, 16, 16]``
    (:data:`SOLVE_APART`; split_fold 3: ``W`` for the rows that do not flush), then the
    ring part's ``bias [batch, HV, 2T, V]`` (split_fold 3)."""
    return batch * num_v_heads * ((2 * MAX_T) ** 2 + 2 * num_tokens * head_v_dim)


def gdn_replayssm_spec_decode(
    state, q, k, v, a, b, A_log, dt_bias, scale=None, use_qk_l2norm=True, initial_state_indices=None,
    pad_slot_id=-1, out=None, softplus_beta=1.0, softplus_threshold=20.0, *, d_ring, k_ring, g_ring,
    write_pos, origin, is_flush, history_len: int, config: Optional[LaunchConfig] = None,
    workspace: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One GDN speculative verify step: ``q, k (B, T, H, K)``, ``v (B, T, HV, V)``,
    ``a, b (B, T, HV)``; returns ``out (B, T, HV, V)``. Ring of this layer:
    ``d_ring (slots, HV, buf, V)``, ``k_ring (slots, H, buf, K)``, ``g_ring (slots, HV, buf)``
    fp32, ``buf = ring_capacity(T, history_len)``; cursors as for Mamba2, moved by
    :func:`commit_replayssm_spec`. ``config`` (default :data:`GDN_SPEC_CONFIG`): rows of V
    a program (``block_p``), warps, value heads of a key head a program (``heads_per_prog``)
    and key columns a chunk (``key_chunk``) of the tl.dot verify; the chunked FMA kernel
    (tiles below 16) takes ``block_p``, the warps and ``split_fold``; under split_fold 3
    (the state's product apart) ``block_p``, the warps and ``key_chunk`` set the flush
    rows' launch, the module's ``GDN_STATE_PRODUCT_*`` and ``GDN_RING_PART_*`` the others.
    ``workspace``: scratch for the solve and the ring's part, fp32, contiguous, at least
    :func:`gdn_spec_workspace_numel` elements (allocated per call if not given)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError("q must have shape (batch, T, num_k_heads, head_k_dim)")
    Bsz, T = q.shape[0], q.shape[1]
    capacity = _check_spec_sizes(T, history_len)
    for name, t in (("k", k), ("v", v), ("a", a), ("b", b)):
        if t.dim() < 2 or tuple(t.shape[:2]) != (Bsz, T):
            raise ValueError(f"{name} must start with the dimensions (batch, T) = {(Bsz, T)}, got {tuple(t.shape)}")
    if out is None:
        out = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t is not None:  # the kernel reads these with their own strides, not the flattened copies'
            check_last_dim_contiguous(name, t)
    step = parse_gdn_step(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), a.flatten(0, 1), b.flatten(0, 1), A_log,
                          dt_bias, scale, use_qk_l2norm, None, pad_slot_id, out.flatten(0, 1), softplus_beta,
                          softplus_threshold)
    H, HV, K, V = step.num_k_heads, step.num_v_heads, step.head_k_dim, step.head_v_dim
    check_tensor("state", state, (None, HV, V, K), FLOAT_DTYPES, q.device)
    check_slot_major("state", state)
    slots, buf = state.shape[0], ring_capacity(T, history_len)
    if initial_state_indices is not None:
        check_tensor("initial_state_indices", initial_state_indices, (Bsz,), INDEX_DTYPES, q.device)
    elif slots < Bsz:
        raise ValueError(f"state has {slots} slots but the batch has {Bsz} rows and no initial_state_indices")
    check_tensor("d_ring", d_ring, (slots, HV, buf, V), RING_DTYPES, q.device)
    check_tensor("k_ring", k_ring, (slots, H, buf, K), RING_DTYPES, q.device)
    check_tensor("g_ring", g_ring, (slots, HV, buf), (torch.float32,), q.device)
    for name, t in (("d_ring", d_ring), ("k_ring", k_ring), ("g_ring", g_ring)):
        check_slot_major(name, t)
    _check_cursors(write_pos, origin, is_flush, slots, q.device)
    if Bsz == 0:
        return out
    cfg = config or GDN_SPEC_CONFIG
    block_v, block_k = min(cfg.block_p, triton.next_power_of_2(V)), triton.next_power_of_2(K)
    use_dot = min(block_v, block_k) >= 16
    args = (state, d_ring, k_ring, g_ring, write_pos, origin, is_flush, q, k, v, a, b, A_log, dt_bias, out,
            initial_state_indices if initial_state_indices is not None else write_pos,
            slots, T, K, V, HV // H, capacity, pad_slot_id,
            state.stride(0), state.stride(1), state.stride(2),
            d_ring.stride(0), d_ring.stride(1), d_ring.stride(2), k_ring.stride(0), k_ring.stride(1), k_ring.stride(2),
            g_ring.stride(0), g_ring.stride(1),
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
            v.stride(2), a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
            out.stride(0), out.stride(1), out.stride(2), step.scale, step.softplus_beta, step.softplus_threshold)
    shared = dict(USE_QK_L2NORM=step.use_qk_l2norm, HAS_SLOT_IDX=initial_state_indices is not None,
                  BLOCK_K=block_k, BUF=buf, BLOCK_L=history_tile(history_len), DOT_PRECISION=DOT_PRECISION,
                  ONE_PASS_PRECISION=ONE_PASS_PRECISION)

    def launch_chunked(phase, rows: int, num_warps: int) -> None:
        rows = min(rows, triton.next_power_of_2(V))
        launch_kernel(_gdn_spec_verify_kernel, (triton.cdiv(V, rows), HV, Bsz), *args, PHASE=phase.value,
                      BLOCK_V=rows, BLOCK_T=max(2, triton.next_power_of_2(T)), USE_DOT=min(rows, block_k) >= 16,
                      EXACT_B=exact_in_tf32(k_ring.dtype), K_CHUNK=fma_key_chunk(block_k),
                      EVEN_TILE=even_tile(V, rows, K, block_k), num_warps=num_warps, **shared)

    check_split_fold(cfg, supported=(0, 1, 2, STATE_APART))
    if use_dot and VERIFY_ON_DOT:
        state_apart = cfg.split_fold == STATE_APART
        solve_numel = Bsz * HV * (2 * MAX_T) ** 2
        ws = (spec_workspace(workspace, gdn_spec_workspace_numel(Bsz, T, HV, V), q.device) if SOLVE_APART or state_apart
              else out)  # (a placeholder for a verify that solves in place)
        solve, bias = ws[:solve_numel], ws[solve_numel:]
        exact_x = exact_in_tf32(q.dtype) and exact_in_tf32(k.dtype)
        draft_args = (q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2))
        gate_args = (a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2), step.scale,
                     step.softplus_beta, step.softplus_threshold)
        slot_idx = initial_state_indices if initial_state_indices is not None else write_pos
        ring_strides = (d_ring.stride(0), d_ring.stride(1), d_ring.stride(2), k_ring.stride(0), k_ring.stride(1),
                        k_ring.stride(2), g_ring.stride(0), g_ring.stride(1))
        if state_apart:
            # The solve and the ring's part, then the flush rows' whole step, then the
            # other rows' state product.
            ring_rows = min(GDN_RING_PART_ROWS, triton.next_power_of_2(V))
            ring_heads = math.gcd(GDN_RING_PART_HEADS, HV // H)
            launch_kernel(_gdn_spec_ring_part_kernel, (1, HV // ring_heads, Bsz), d_ring, k_ring, g_ring, write_pos, origin, is_flush,
                          q, k, v, a, b, A_log, dt_bias, slot_idx, solve, bias, slots, K, V, HV, HV // H, capacity,
                          pad_slot_id, *ring_strides, *draft_args, v.stride(0), v.stride(1), v.stride(2), *gate_args,
                          BLOCK_V=ring_rows, V_BLOCKS=triton.cdiv(V, ring_rows), EXACT_X=exact_x, NUM_TOKENS=T,
                          SMALL_PRECISION=GDN_RING_PART_PRECISION, EVEN_TILE=block_k == K,
                          HEADS_PER_PROG=ring_heads, FLUSH_ROWS_TOO=GDN_FLUSH_IN_STATE_PRODUCT,
                          num_warps=GDN_RING_PART_WARPS, **shared)
        elif SOLVE_APART:
            launch_kernel(_gdn_spec_solve_kernel, (1, HV, Bsz), q, k, a, b, A_log, dt_bias, solve, write_pos, origin,
                          is_flush, slot_idx, slots, K, HV, HV // H, capacity, pad_slot_id, *draft_args, *gate_args,
                          USE_QK_L2NORM=step.use_qk_l2norm, HAS_SLOT_IDX=initial_state_indices is not None,
                          BLOCK_K=block_k, BUF=buf, EXACT_X=exact_x, DOT_PRECISION=DOT_PRECISION,
                          ONE_PASS_PRECISION=ONE_PASS_PRECISION, NUM_TOKENS=T, SMALL_PRECISION=SMALL_DOT_PRECISION,
                          EVEN_TILE=block_k == K, BLOCK_V=triton.next_power_of_2(V), num_warps=SOLVE_WARPS)
        if state_apart:
            row_launches = () if GDN_FLUSH_IN_STATE_PRODUCT else (FLUSH_ROWS,)
        elif cfg.split_fold == 2:
            # The flush rows fold and verify in a launch of their own (their state read
            # once), the other rows in one compiled without the fold.
            row_launches = (FLUSH_ROWS, NONFLUSH_ROWS)
        else:
            # The flush rows fold first (the chunked kernel's fold-only phase, on a launch
            # config of its own); the verify on tl.dot then reads their new checkpoint with
            # an empty history.
            launch_chunked(FOLD_ONLY, GDN_SPEC_FOLD_CONFIG.block_p, GDN_SPEC_FOLD_CONFIG.num_warps)
            row_launches = (AFTER_FOLD,)
        for phase in row_launches:
            hpp = dot_heads_per_program(cfg, HV // H, phase)
            launch_kernel(_gdn_spec_verify_dot_kernel, (triton.cdiv(V, block_v), HV // hpp, Bsz), *args,
                          BLOCK_V=block_v, EXACT_X=exact_x, solve_ptr=solve, num_v_heads=HV,
                          HEADS_PER_PROG=hpp, KEY_CHUNK=min(cfg.key_chunk or block_k, block_k), NUM_TOKENS=T,
                          SMALL_PRECISION=SMALL_DOT_PRECISION, EVEN_TILE=even_tile(V, block_v, K, block_k),
                          PHASE=phase.value, SOLVE_APART=SOLVE_APART or state_apart, num_warps=cfg.num_warps,
                          **shared)
        if state_apart:
            rows = min(GDN_STATE_PRODUCT_ROWS, triton.next_power_of_2(V))
            chunk = min(GDN_STATE_PRODUCT_COLS, block_k)
            for fold in ((True, False) if GDN_FLUSH_IN_STATE_PRODUCT else (False,)):
                launch_kernel(_gdn_spec_state_product_kernel, (triton.cdiv(V, rows), HV, Bsz), state, d_ring, k_ring,
                              g_ring, write_pos, origin, is_flush, q, k, out, slot_idx, solve, bias, slots, K, V, HV,
                              HV // H, capacity, pad_slot_id, state.stride(0), state.stride(1), state.stride(2),
                              *ring_strides, *draft_args, out.stride(0), out.stride(1), out.stride(2),
                              HAS_SLOT_IDX=initial_state_indices is not None, BLOCK_V=rows, BLOCK_K=block_k,
                              KEY_CHUNK=chunk, BUF=buf, BLOCK_L=shared["BLOCK_L"], EXACT_X=exact_x,
                              DOT_PRECISION=DOT_PRECISION, ONE_PASS_PRECISION=ONE_PASS_PRECISION, NUM_TOKENS=T,
                              SMALL_PRECISION=GDN_STATE_PRODUCT_PRECISION, EVEN_TILE=even_tile(V, rows, K, chunk),
                              STAGES=GDN_STATE_PRODUCT_STAGES, FOLD=fold, num_warps=GDN_STATE_PRODUCT_WARPS)
    else:  # (split_fold 2 and 3 fold apart here, as 1 does: their flush rows' launch is the tl.dot verify's)
        for phase in ((FOLD_ONLY, AFTER_FOLD) if cfg.split_fold else (BOTH,)):
            launch_chunked(phase, cfg.block_p, cfg.num_warps)
    return out
