"""GDN speculative verify with the state's product in a launch of its own (``split_fold`` 3;
``ops/gdn/spec.py`` launches it and holds its launch constants). Every output and every
draft's corrected value is affine in ``P = S_0 X``: the ring part forms ``W`` and ``bias``,
the state's product streams the checkpoint and computes ``P W + bias``."""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import (dim_mask, let_dependents_launch, load_spec_row, native_dot, ring_positions, small_matmul,
                      store_nan_tokens, wait_for_primary)

from .spec_dot import (DRAFT_COLS, _draft_column_ids, _draft_tile, _head_solve, _history_decays, _history_values,
                       _solve_offsets)


@triton.jit
def _bias_offsets(pid_b, hv, num_v_heads, head_v_dim, offs_v, tok, is_key, NUM_TOKENS: tl.constexpr):
    """Offsets of a (row, value head)'s ``bias`` rows ``offs_v`` on the 16 columns in the
    workspace's ``bias [B, HV, 2T, V]`` (key t at t, query t at T + t; V contiguous)."""
    col = tl.where(is_key, tok, NUM_TOKENS + tok)
    return ((pid_b.to(tl.int64) * num_v_heads + hv) * (2 * NUM_TOKENS) + col[None, :]) * head_v_dim + offs_v[:, None]


@triton.jit
def _draft_columns_and_history(k_ptr, q_ptr, kr_base, stride_kr_l, pid_b, h, stride_k_b, stride_k_t, stride_k_h,
                               stride_q_b, stride_q_t, stride_q_h, phys_l, mask_l, head_k_dim, tok, is_key, mask_u,
                               scale, USE_QK_L2NORM: tl.constexpr, EXACT_X: tl.constexpr,
                               DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr,
                               BLOCK_K: tl.constexpr, KEY_CHUNK: tl.constexpr, EVEN_TILE: tl.constexpr):
    """:func:`_draft_columns` and :func:`_history_keys_x` over chunks of key columns: the
    columns' scales, the scaled Gram ``[16, 16]`` and ``(K_hist X) c`` ``[L, 16]``. On one
    warp the whole tiles (``X`` in two dtypes, ``K_hist``) held ~160 registers a thread
    at K = 128, and the launch's occupancy with them."""
    k_base = k_ptr + pid_b * stride_k_b + h * stride_k_h
    q_base = q_ptr + pid_b * stride_q_b + h * stride_q_h
    Gram = tl.zeros((2 * DRAFT_COLS, 2 * DRAFT_COLS), tl.float32)
    HX = tl.zeros((phys_l.shape[0], 2 * DRAFT_COLS), tl.float32)
    sum_sq = tl.zeros((2 * DRAFT_COLS,), tl.float32)
    for c in tl.range(0, BLOCK_K // KEY_CHUNK):
        offs_c = c * KEY_CHUNK + tl.arange(0, KEY_CHUNK)
        mask_c = dim_mask(offs_c, head_k_dim, EVEN_TILE)
        Xc = _draft_tile(k_base, q_base, stride_k_t, stride_q_t, offs_c, mask_c, tok, is_key, mask_u)
        Xcf = Xc.to(tl.float32)
        sum_sq += tl.sum(Xcf * Xcf, axis=0)
        Gram += native_dot(tl.trans(Xc), Xc, True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
        K_hist = tl.load(kr_base + phys_l[:, None] * stride_kr_l + offs_c[None, :],
                         mask=mask_l[:, None] & mask_c[None, :], other=0.0).to(tl.float32)
        HX += small_matmul(K_hist, Xcf, True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
    col_scale = tl.where(is_key, 1.0, scale)
    if USE_QK_L2NORM:
        col_scale = col_scale * tl.rsqrt(sum_sq + 1e-6)
    return col_scale, Gram * col_scale[:, None] * col_scale[None, :], HX * col_scale[None, :]


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
    KEY_CHUNK: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr = False,
):
    """split_fold 3's first launch, a program a row and ``HEADS_PER_PROG`` value heads of a
    key head (their drafts' tile and history products shared), grid ``(1, HV / heads, B)``:
    the drafts' solve ``Z`` and, for a row that does not flush, everything of its verify
    but the state's product. To the workspace: ``W [16, 16]`` in ``Z``'s place (a flush
    row keeps ``Z``, for its own launch) and ``bias [2T, V]``; to the
    ring: the drafts' keys and gates (their corrected values need ``S_0`` and come with
    the state's product).

    With ``P = S_0 X`` (raw columns), ``c`` the columns' scales, ``G`` the history's total
    log-decay and ``H = D_w (K_hist X) c`` the history's share of ``S_h X``:
    ``S_h X = e^G P c + H``, and the dot kernel's ``R Z + [query] e^A S_h X`` becomes
    ``P W + bias`` with ``W[s, u] = e^{A_s + G} c_s ([query s] delta_su - [key s] beta_s Z[s, u])``
    and ``bias = ([key] beta (V - e^A H)) Z + [query] e^A H``."""
    let_dependents_launch(LAUNCH_DEPENDENTS)  # the state product's programmatic launch
    hv0 = tl.program_id(1) * HEADS_PER_PROG
    pid_b = tl.program_id(2)
    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, NUM_TOKENS, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad | is_bad:  # (the state's product launch reports a bad row)
        return
    h = hv0 // v_heads_per_k_head
    offs_u, tok, is_key, mask_u = _draft_column_ids(NUM_TOKENS)
    # The history's ring positions (a flush row's history is its own launch's) and its
    # keys against every column, [L, 16], with the Gram (shared by the key head's value heads).
    kr_base = k_ring_ptr + slot * stride_kr_slot + h * stride_kr_h
    offs_l, phys_l = ring_positions(origin, BUF, BLOCK_L)
    mask_l = offs_l < tl.where(is_flush, 0, wp)
    col_scale, Gram, HX = _draft_columns_and_history(
        k_ptr, q_ptr, kr_base, stride_kr_l, pid_b, h, stride_k_b, stride_k_t, stride_k_h, stride_q_b, stride_q_t,
        stride_q_h, phys_l, mask_l, head_k_dim, tok, is_key, mask_u, scale, USE_QK_L2NORM, EXACT_X, DOT_PRECISION,
        ONE_PASS_PRECISION, BLOCK_K, KEY_CHUNK, EVEN_TILE)
    if is_flush:  # the flush rows' own launch takes its whole step with Z
        for hh in range(0, HEADS_PER_PROG):
            g_u, beta, A_u, Z = _head_solve(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv0 + hh, stride_a_b,
                                            stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h,
                                            softplus_beta, softplus_threshold, Gram, offs_u, tok, is_key, mask_u,
                                            NUM_TOKENS, SMALL_PRECISION, ONE_PASS_PRECISION)
            tl.store(solve_ptr + _solve_offsets(pid_b, hv0 + hh, num_v_heads, offs_u), Z)
        return

    # The drafts' keys appended, normalised (reads stop at wp).
    phys_u = (origin + wp + tok) & (BUF - 1)
    if hv0 % v_heads_per_k_head == 0:
        for c in tl.range(0, BLOCK_K // KEY_CHUNK):
            offs_c = c * KEY_CHUNK + tl.arange(0, KEY_CHUNK)
            mask_key = dim_mask(offs_c, head_k_dim, EVEN_TILE)[:, None] & (mask_u & is_key)[None, :]
            keys = tl.load(k_ptr + pid_b * stride_k_b + h * stride_k_h + tok[None, :] * stride_k_t + offs_c[:, None],
                           mask=mask_key, other=0.0).to(tl.float32)
            tl.store(kr_base + phys_u[None, :] * stride_kr_l + offs_c[:, None],
                     (keys * col_scale[None, :]).to(k_ring_ptr.dtype.element_ty), mask=mask_key)
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
            D_w = _history_values(dr_base, stride_dr_l, phys_l, mask_l, offs_v, mask_v, decay_l)
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
    state_ptr, d_ring_ptr, wp_ptr, origin_ptr, flush_ptr, q_ptr, k_ptr, out_ptr, slot_idx_ptr,
    solve_ptr, bias_ptr, num_slots, head_k_dim, head_v_dim, num_v_heads, v_heads_per_k_head, capacity, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_v, stride_dr_slot, stride_dr_h, stride_dr_l,
    stride_q_b, stride_q_t, stride_q_h, stride_k_b, stride_k_t, stride_k_h, stride_out_b, stride_out_t, stride_out_h,
    HAS_SLOT_IDX: tl.constexpr, BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr, KEY_CHUNK: tl.constexpr,
    BUF: tl.constexpr, EXACT_X: tl.constexpr, DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr,
    NUM_TOKENS: tl.constexpr, SMALL_PRECISION: tl.constexpr, EVEN_TILE: tl.constexpr, STAGES: tl.constexpr,
    WAIT_RING_PART: tl.constexpr = False,
):
    """split_fold 3's last launch, for the rows that do not flush: ``F = (S_0 X) W + bias``
    (:func:`_gdn_spec_ring_part_kernel`) for a block of a value head's rows of V, the state
    streamed in chunks of key columns through a pipelined loop; the key columns' ``F`` are
    the drafts' corrected values (to the ring), the query columns' the outputs. Reports a
    bad row (NaN outputs). With ``WAIT_RING_PART`` (a programmatic dependent launch of the
    ring part) every program waits for the ring part's launch before it reads ``W`` and
    the bias, and before it exits."""
    pid_v = tl.program_id(0)
    hv = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    mask_v = dim_mask(offs_v, head_v_dim, EVEN_TILE)
    slot, wp, origin, is_flush, is_pad, is_bad = load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b,
                                                               num_slots, NUM_TOKENS, capacity, pad_slot_id,
                                                               HAS_SLOT_IDX, BUF)
    if is_pad:
        wait_for_primary(WAIT_RING_PART)
        return
    if is_bad:  # (a bad row may carry the flush flag too)
        store_nan_tokens(out_ptr, offs_v, mask_v, pid_b, hv, stride_out_b, stride_out_t, stride_out_h,
                         NUM_TOKENS, DRAFT_COLS)
        wait_for_primary(WAIT_RING_PART)
        return
    if is_flush:
        wait_for_primary(WAIT_RING_PART)
        return
    offs_u, tok, is_key, mask_u = _draft_column_ids(NUM_TOKENS)
    h = hv // v_heads_per_k_head
    k_base = k_ptr + pid_b * stride_k_b + h * stride_k_h
    q_base = q_ptr + pid_b * stride_q_b + h * stride_q_h
    state_rows = state_ptr + slot * stride_state_slot + hv * stride_state_h + offs_v[:, None] * stride_state_v
    P = tl.zeros((BLOCK_V, 2 * DRAFT_COLS), tl.float32)
    for c in tl.range(0, BLOCK_K // KEY_CHUNK, num_stages=STAGES):
        offs_c = c * KEY_CHUNK + tl.arange(0, KEY_CHUNK)
        mask_c = dim_mask(offs_c, head_k_dim, EVEN_TILE)
        S0 = tl.load(state_rows + offs_c[None, :], mask=mask_v[:, None] & mask_c[None, :], other=0.0).to(tl.float32)
        Xc = _draft_tile(k_base, q_base, stride_k_t, stride_q_t, offs_c, mask_c, tok, is_key, mask_u)
        P += small_matmul(S0, Xc.to(tl.float32), True, EXACT_X, DOT_PRECISION, ONE_PASS_PRECISION)
    wait_for_primary(WAIT_RING_PART)
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
