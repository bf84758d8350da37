"""GDN speculative verify, the chunked FMA kernel (``ops/gdn/spec.py`` launches it): the
checkpoint streamed in chunks of key columns, every product with the drafts an fp32 FMA
reduction. It serves the fold-only launch of ``split_fold`` 1 and the whole verify on
tiles too small for tl.dot."""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import (dim_mask, exact_matmul, load_spec_row, ring_positions, small_matmul, store_nan_tokens,
                      tile_masks)
from ..mamba2.spec import AFTER_FOLD, FOLD_ONLY
from .spec_dot import _history_decays, _history_values


def fma_key_chunk(block_k: int) -> int:
    """Key columns of the state the chunked FMA kernel (:func:`_gdn_spec_verify_kernel`)
    takes per step of its loop; the tl.dot verify's come from ``LaunchConfig.key_chunk``."""
    return min(32, block_k)


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
    mask_v, mask_k = tile_masks(offs_v, offs_k, head_v_dim, head_k_dim, EVEN_TILE, EVEN_TILE)
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
    D_w = _history_values(dr_base, stride_dr_l, phys_l, mask_l, offs_v, mask_v, decay)

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
        M2 = exact_matmul(M, M)
        M4 = exact_matmul(M2, M2)
        Inv = exact_matmul(exact_matmul(eye - M, eye + M2), eye + M4)
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
