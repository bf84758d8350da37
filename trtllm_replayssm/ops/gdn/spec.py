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
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ..._validation import FLOAT_DTYPES, INDEX_DTYPES, check_last_dim_contiguous, check_slot_major, check_tensor
from ..common import (DOT_PRECISION, ONE_PASS_PRECISION, even_tile, exact_in_tf32, load_ring_history,
                      load_spec_row, small_matmul, store_nan_tokens, tile_masks)
from ..launch import LaunchConfig, launch_kernel
from ..mamba2.spec import AFTER_FOLD, BOTH, FOLD_ONLY, _check_cursors, _check_spec_sizes, ring_capacity
from .step_inputs import parse_gdn_step

RING_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
GDN_SPEC_CONFIG = LaunchConfig(block_p=32, num_warps=4)


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
    PHASE: tl.constexpr, EVEN_TILE: tl.constexpr,
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
    h = hv // v_heads_per_k_head

    # Drafts: normalised q (scaled) and k [T, K], v [V, T], gates [T].
    mask_tk = mask_t[:, None] & mask_k[None, :]
    Q = tl.load(q_ptr + pid_b * stride_q_b + offs_t[:, None] * stride_q_t + h * stride_q_h + offs_k[None, :],
                mask=mask_tk, other=0.0).to(tl.float32)
    Kd = tl.load(k_ptr + pid_b * stride_k_b + offs_t[:, None] * stride_k_t + h * stride_k_h + offs_k[None, :],
                 mask=mask_tk, other=0.0).to(tl.float32)
    if USE_QK_L2NORM:
        Q = Q * tl.rsqrt(tl.sum(Q * Q, axis=1) + 1e-6)[:, None]
        Kd = Kd * tl.rsqrt(tl.sum(Kd * Kd, axis=1) + 1e-6)[:, None]
    Q = Q * scale
    Vd = tl.load(v_ptr + pid_b * stride_v_b + offs_t[None, :] * stride_v_t + hv * stride_v_h + offs_v[:, None],
                 mask=mask_v[:, None] & mask_t[None, :], other=0.0).to(tl.float32)  # [V, T]
    xg = (tl.load(a_ptr + pid_b * stride_a_b + offs_t * stride_a_t + hv * stride_a_h, mask=mask_t, other=0.0)
          .to(tl.float32) + tl.load(dt_bias_ptr + hv).to(tl.float32))
    sp = tl.where(softplus_beta * xg <= softplus_threshold, tl.log(1.0 + tl.exp(softplus_beta * xg)) / softplus_beta, xg)
    g_dr = tl.where(mask_t, -tl.exp(tl.load(A_log_ptr + hv).to(tl.float32)) * sp, 0.0)
    beta = tl.where(mask_t, tl.sigmoid(tl.load(b_ptr + pid_b * stride_b_b + offs_t * stride_b_t + hv * stride_b_h,
                                               mask=mask_t, other=0.0).to(tl.float32)), 0.0)
    A_t = tl.cumsum(g_dr, axis=0)

    dr_base = d_ring_ptr + slot * stride_dr_slot + hv * stride_dr_h
    kr_base = k_ring_ptr + slot * stride_kr_slot + h * stride_kr_h
    gr_base = g_ring_ptr + slot * stride_gr_slot + hv * stride_gr_h
    # The committed history as whole tiles gathered through the circular index (all loads
    # independent, issued together), and the checkpoint.
    mask_l, g_hist, D_hist, K_hist = load_ring_history(gr_base, dr_base, stride_dr_l, offs_v, mask_v, kr_base,
                                                       stride_kr_l, offs_k, mask_k, origin, n_hist, BUF, BLOCK_L)  # [V|L|K]
    state_ptrs = (state_ptr + slot * stride_state_slot + hv * stride_state_h
                  + offs_v[:, None] * stride_state_v + offs_k[None, :])
    mask_vk = mask_v[:, None] & mask_k[None, :]
    S0 = tl.load(state_ptrs, mask=mask_vk, other=0.0).to(tl.float32)
    G = tl.sum(g_hist, axis=0)
    decay = tl.where(mask_l, tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0), 0.0)), 0.0)  # exp(G - G_j)
    if PHASE != AFTER_FOLD:
        if is_flush:
            # Fold the committed history into the checkpoint and store it; the drafts then
            # stand on it alone.
            S0 = tl.exp(G) * S0 + small_matmul(D_hist * decay[None, :], K_hist, USE_DOT, EXACT_B, DOT_PRECISION,
                                                  ONE_PASS_PRECISION)
            tl.store(state_ptrs, S0.to(state_ptr.dtype.element_ty), mask=mask_vk)
            G = G * 0.0
            decay = decay * 0.0
    if PHASE != FOLD_ONLY:
        # S_h k_t and S_h q_t for every draft position: [V, T] each.
        SK = tl.zeros((BLOCK_V, BLOCK_T), tl.float32)
        SQ = tl.zeros((BLOCK_V, BLOCK_T), tl.float32)
        for t in tl.static_range(BLOCK_T):
            sel = offs_t[:, None] == t
            k_t = tl.sum(tl.where(sel, Kd, 0.0), axis=0)
            q_t = tl.sum(tl.where(sel, Q, 0.0), axis=0)
            col = offs_t[None, :] == t
            sk = tl.exp(G) * tl.sum(S0 * k_t[None, :], axis=1) \
                + tl.sum(D_hist * (decay * tl.sum(K_hist * k_t[None, :], axis=1))[None, :], axis=1)
            sq = tl.exp(G) * tl.sum(S0 * q_t[None, :], axis=1) \
                + tl.sum(D_hist * (decay * tl.sum(K_hist * q_t[None, :], axis=1))[None, :], axis=1)
            SK += tl.where(col, sk[:, None], 0.0)
            SQ += tl.where(col, sq[:, None], 0.0)

        # (I + M) d = r, M[t, s] = beta_t exp(A_t - A_s) (k_s . k_t) for s < t.
        KK = tl.sum(Kd[:, None, :] * Kd[None, :, :], axis=2)  # [t, s] = k_t . k_s
        QK = tl.sum(Q[:, None, :] * Kd[None, :, :], axis=2)  # [t, s] = q_t . k_s
        diff = A_t[:, None] - A_t[None, :]
        lower = offs_t[None, :] < offs_t[:, None]
        M = tl.where(lower, beta[:, None] * tl.exp(tl.minimum(diff, 0.0)) * KK, 0.0)
        eye = tl.where(offs_t[:, None] == offs_t[None, :], 1.0, 0.0)
        M2 = _matmul_tt(M, M)
        M4 = _matmul_tt(M2, M2)
        Inv = _matmul_tt(_matmul_tt(eye - M, eye + M2), eye + M4)
        R = beta[None, :] * (Vd - tl.exp(A_t)[None, :] * SK)  # [V, T]
        Dd = tl.sum(R[:, None, :] * Inv[None, :, :], axis=2)  # d[:, t] = sum_s Inv[t, s] r[:, s]
        W = tl.where(offs_t[None, :] <= offs_t[:, None], tl.exp(tl.minimum(diff, 0.0)) * QK, 0.0)  # [t, s], s <= t
        O = tl.exp(A_t)[None, :] * SQ + tl.sum(Dd[:, None, :] * W[None, :, :], axis=2)  # [V, T]

        # Append the drafts (logical wp + t) for later steps.
        for t in tl.static_range(BLOCK_T):
            if t < num_tokens:
                phys = (origin + wp + t) & (BUF - 1)
                d_t = tl.sum(tl.where(offs_t[None, :] == t, Dd, 0.0), axis=1)
                tl.store(dr_base + phys * stride_dr_l + offs_v, d_t.to(d_ring_ptr.dtype.element_ty), mask=mask_v)
                if pid_v == 0:
                    tl.store(gr_base + phys, tl.sum(tl.where(offs_t == t, g_dr, 0.0), axis=0))
                    if hv % v_heads_per_k_head == 0:
                        k_t = tl.sum(tl.where(offs_t[:, None] == t, Kd, 0.0), axis=0)
                        tl.store(kr_base + phys * stride_kr_l + offs_k, k_t.to(k_ring_ptr.dtype.element_ty),
                                 mask=mask_k)
        tl.store(out_ptr + pid_b * stride_out_b + offs_t[None, :] * stride_out_t + hv * stride_out_h + offs_v[:, None],
                 O.to(out_ptr.dtype.element_ty), mask=mask_v[:, None] & mask_t[None, :])


def gdn_replayssm_spec_decode(
    state, q, k, v, a, b, A_log, dt_bias, scale=None, use_qk_l2norm=True, initial_state_indices=None,
    pad_slot_id=-1, out=None, softplus_beta=1.0, softplus_threshold=20.0, *, d_ring, k_ring, g_ring,
    write_pos, origin, is_flush, history_len: int, config: Optional[LaunchConfig] = None,
) -> torch.Tensor:
    """One GDN speculative verify step: ``q, k (B, T, H, K)``, ``v (B, T, HV, V)``,
    ``a, b (B, T, HV)``; returns ``out (B, T, HV, V)``. Ring of this layer:
    ``d_ring (slots, HV, buf, V)``, ``k_ring (slots, H, buf, K)``, ``g_ring (slots, HV, buf)``
    fp32, ``buf = ring_capacity(T, history_len)``; cursors as for Mamba2, moved by
    :func:`commit_replayssm_spec`. ``config``: rows of V per program (``block_p``) and warps
    (default :data:`GDN_SPEC_CONFIG`)."""
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
    for phase in ((FOLD_ONLY, AFTER_FOLD) if cfg.split_fold else (BOTH,)):
        launch_kernel(_gdn_spec_verify_kernel, (triton.cdiv(V, block_v), HV, Bsz),
            state, d_ring, k_ring, g_ring, write_pos, origin, is_flush, q, k, v, a, b, A_log, dt_bias, out,
            initial_state_indices if initial_state_indices is not None else write_pos,
            slots, T, K, V, HV // H, capacity, pad_slot_id,
            state.stride(0), state.stride(1), state.stride(2),
            d_ring.stride(0), d_ring.stride(1), d_ring.stride(2), k_ring.stride(0), k_ring.stride(1), k_ring.stride(2),
            g_ring.stride(0), g_ring.stride(1),
            q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
            v.stride(2), a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
            out.stride(0), out.stride(1), out.stride(2), step.scale, step.softplus_beta, step.softplus_threshold,
            USE_QK_L2NORM=step.use_qk_l2norm, HAS_SLOT_IDX=initial_state_indices is not None, BLOCK_V=block_v,
            BLOCK_K=block_k, BLOCK_T=max(2, triton.next_power_of_2(T)), BUF=buf, BLOCK_L=max(16, buf),
            USE_DOT=min(block_v, block_k) >= 16, EXACT_B=exact_in_tf32(k_ring.dtype),
            DOT_PRECISION=DOT_PRECISION, ONE_PASS_PRECISION=ONE_PASS_PRECISION, PHASE=phase.value,
            EVEN_TILE=even_tile(V, block_v, K, block_k), num_warps=cfg.num_warps,
        )
    return out
