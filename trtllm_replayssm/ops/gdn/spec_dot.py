"""GDN speculative verify on tl.dot (``ops/gdn/spec.py`` launches it): the drafts' keys and
queries as the 16 columns of one tile, the helpers every dot-form kernel shares (the
drafts' columns, gates and solve, the history's decays and keys), the solve's own launch
and the fused verify (``split_fold`` 1-2, and split_fold 3's flush rows)."""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import (dim_mask, load_spec_row, native_dot, ring_positions, small_matmul, store_nan_tokens,
                      tile_masks)
from ..mamba2.spec import AFTER_FOLD, FLUSH_ROWS, MAX_T, leaves_row


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
def _history_values(dr_base, stride_dr_l, phys_l, mask_l, offs_v, mask_v, decay_l):
    """A value head's committed history's corrected values, rows ``offs_v``, weighted by
    their decays (:func:`_history_decays`): ``D_w [V, L]`` in fp32."""
    return tl.load(dr_base + phys_l[None, :] * stride_dr_l + offs_v[:, None], mask=mask_v[:, None] & mask_l[None, :],
                   other=0.0).to(tl.float32) * decay_l[None, :]


@triton.jit
def _fold_chunk(S0, state_chunk_ptrs, mask_vc, G, D_w, kr_base, stride_kr_l, phys_l, mask_l, offs_c, mask_c,
                DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr):
    """Fold the committed history into a chunk of key columns of the checkpoint,
    ``S_h = e^G S_0 + D_w K_hist`` (``S0`` fp32, as loaded from ``state_chunk_ptrs``), store
    it there, and return it (fp32) for the outputs' product."""
    K_hist_c = tl.load(kr_base + phys_l[:, None] * stride_kr_l + offs_c[None, :],
                       mask=mask_l[:, None] & mask_c[None, :], other=0.0).to(tl.float32)
    S_h = tl.exp(G) * S0 + small_matmul(D_w, K_hist_c, True, False, DOT_PRECISION, ONE_PASS_PRECISION)
    tl.store(state_chunk_ptrs, S_h.to(state_chunk_ptrs.dtype.element_ty), mask=mask_vc)
    return S_h


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
    mask_v, mask_k = tile_masks(offs_v, offs_k, head_v_dim, head_k_dim, EVEN_TILE, EVEN_TILE)

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
        D_w = _history_values(dr_base, stride_dr_l, phys_l, mask_l, offs_v, mask_v, decay_l)
        # S_0 X: the whole state tile against the drafts' tile, or the state streamed in
        # chunks of KEY_CHUNK key columns (the drafts' tile chunk is then read again from
        # L1, as the whole tile held across the heads would cost the registers saved). A
        # chunk narrower than a dot's K of 16 takes the broadcast product (small_matmul).
        state_rows = state_ptr + slot * stride_state_slot + hv * stride_state_h + offs_v[:, None] * stride_state_v
        if PHASE == FLUSH_ROWS:
            # Fold on the way: S_h = exp(G) S_0 + D_w K_hist chunk by chunk, stored, and S_h X.
            SX = tl.zeros((BLOCK_V, 2 * DRAFT_COLS), tl.float32)
            for c in tl.range(0, BLOCK_K // KEY_CHUNK):
                offs_c = c * KEY_CHUNK + tl.arange(0, KEY_CHUNK)
                mask_c = dim_mask(offs_c, head_k_dim, EVEN_TILE)
                mask_vc = mask_v[:, None] & mask_c[None, :]
                S_h = _fold_chunk(tl.load(state_rows + offs_c[None, :], mask=mask_vc, other=0.0).to(tl.float32),
                                  state_rows + offs_c[None, :], mask_vc, G, D_w, kr_base, stride_kr_l, phys_l, mask_l,
                                  offs_c, mask_c, DOT_PRECISION, ONE_PASS_PRECISION)
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
