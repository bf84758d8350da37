"""ReplaySSM Gated DeltaNet decode step (``replayssm.md`` section 2).

The delta rule reads the state (``S_{t-1} k_t``), so the ring caches the *corrected
values* ``d_j = beta_j (v_j - alpha_j S_{j-1} k_j)`` with the normalised keys ``k_j`` and
log-decays ``g_j``; then ``S_j = alpha_j S_{j-1} + d_j k_j^T`` is a diagonal-decay linear
recurrence. With ``G_j`` the running sum of g over the cached steps and ``G = G_{w-1}``:

    S_prev k = exp(G) S_0 k + sum_{j<w} exp(G - G_j) (k_j . k) d_j     (likewise for q)
    d = beta (v - alpha S_prev k) ;  o = alpha S_prev q + (k . q) d

so a non-flush step reads the checkpoint once (``S_0 k`` and ``S_0 q`` together) and never
forms a state; a flush folds the ring and this token into the checkpoint and stores it.

Routes: ``output_only`` (a non-flush launch and a fold launch, each compiled and tuned
for itself, as for Mamba2; at large batches the fold on a side stream beside the
non-flush launch: :mod:`..streams`), ``standard_step`` (the standard kernel on an empty ring: its
cost; a row whose ring is not empty gets NaN) and ``always_flush`` (the same for any ring,
in one launch: the standard kernel replays a non-empty ring on the state first). Cursors
(``write_pos``) and their ops are shared with Mamba2.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

import torch
import triton
import triton.language as tl

from ..._validation import FLAG_DTYPES, check_buffer_len, check_contiguous, check_slot_major, check_tensor, check_vector
from ..common import (block_flush_ordinals, complete_after_primary, dim_mask, even_tile, fold_precision,
                      fold_row_blocks, let_dependents_launch, load_slot, one_pass_fold, row_of_ordinal,
                      store_nan_heads)
from ..cursors import FLUSH_EVERY_STEP
from ..launch import (LaunchConfig, clamp_loop_blocks, config_kernel, device_table_tag, fold_programmatic_launch,
                      fold_row_programs, fold_side_stream, launch_kernel, maxnreg_option, pdl_options, select_config,
                      select_route)
from ..streams import launch_fold_beside
from ._common import delta_rule_step, load_gates, load_qk, ring_args, state_tile_ptrs
from .standard import launch_standard_step
from .step_inputs import GDNStep, check_gdn_state_pool, parse_gdn_step

ROUTES = ("output_only", "standard_step", "always_flush")
RING_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
NONFLUSH = tl.constexpr(1)  # rows that do not flush: output only; append d, k, g
FOLD = tl.constexpr(2)  # rows that flush: fold the ring and this token, store the checkpoint
# Pipeline stages of a program's loop over blocks of value rows, per mode, for the state
# dtypes in LOOP_STAGES_STATES (None: Triton's default, which stages only loads that feed
# a matmul; 2-3: every load, the next block's state in flight while this one is used).
# H200, Qwen3.5-122B, fp32 state, batch 128 / 512 (``benchmarks/results/loop_stages.json``):
# the non-flush step 171 / 620 us -> 167 / 614 with 2 stages; the fold's flush step 382 /
# 1408 -> 394-432 / 1603-1616 with 2-3. The cycle, fp32 (``gdn_ar.json``, commit 597a52a):
# 1.34-1.49x -> 1.38-1.53x over fla-core at batch 128-512. A bf16 state lost 1-11% with
# the 2 stages (``gdn_ar_bf16_staged.json``: 1.04-1.15x -> 0.89-1.09x), so it keeps none.
# A non-flush config with ``prefetch`` instead loads the next block's tiles into registers
# one block ahead: staged, the tiles come back from shared memory in the ring tile's
# layout, and the launch was bound on shared-memory traffic (Nsight Compute, Qwen3.5-122B,
# batch 128: 30 M of 33 M L1 wavefronts; ``benchmarks/probe_gdn_prefetch.py``).
LOOP_STAGES = {NONFLUSH.value: 2, FOLD.value: None}
LOOP_STAGES_STATES = (torch.float32,)
# State dtypes whose prefetching non-flush launch issues its first block's tiles and the
# ring's g / k tiles before the head's other loads (``EARLY_TILES``). Left to ptxas, the
# program's first state bytes waited on the g tile's reductions, and the [L, K] k tile came
# in three loads at a time between the k and q dots: a chain of round trips that a launch of
# under a wave (batch 8: 1024 one-warp programs) pays in full. An H100, fp32, the table's
# configs (``python benchmarks/probe_gdn_early_tiles.py --batches 8 128``,
# ``gdn_early_tiles_h100.json``): the cycle 2.5-2.7% shorter in phase at batch 8 (0.5-2.1%
# staggered) and 0.9-1.3% at Qwen3.5-4B's batch 128; with a bf16 state -0.5% to +2.1%, so
# bf16 keeps ptxas's order (as do the configs that stage their loop: benchmarks/README.md).
EARLY_TILES_STATES = (torch.float32,)


def early_tiles(cfg: LaunchConfig, state_dtype: torch.dtype) -> bool:
    """Whether a non-flush launch on ``cfg`` issues its first loads early (``EARLY_TILES``:
    a prefetching config, a state dtype of :data:`EARLY_TILES_STATES`)."""
    return bool(cfg.prefetch) and state_dtype in EARLY_TILES_STATES


@triton.jit
def _store_nan_rows(out_ptr, offs_v0, pid_b, pid_hg, num_v_heads, head_v_dim, stride_out_b, stride_out_h,
                    HEADS_PER_PROG: tl.constexpr, BLOCK_V: tl.constexpr, CHUNKS: tl.constexpr):
    """NaN outputs for every value row this program covers, of an invalid batch row."""
    for c in range(0, CHUNKS):
        offs_v = offs_v0 + c * BLOCK_V
        store_nan_heads(out_ptr, offs_v, offs_v < head_v_dim, pid_b, pid_hg, num_v_heads, stride_out_b, stride_out_h,
                        HEADS_PER_PROG)


@triton.jit(do_not_specialize=["num_slots", "batch"])
def _gdn_replay_kernel(
    state_ptr, d_cache_ptr, k_cache_ptr, g_cache_ptr, write_pos_ptr, force_flush_ptr,
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, batch, num_v_heads, head_k_dim, head_v_dim, v_heads_per_k_head, buffer_len, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_row,
    stride_dc_slot, stride_dc_h, stride_dc_l,
    stride_kc_slot, stride_kc_h, stride_kc_l,
    stride_gc_slot, stride_gc_h,
    stride_q_b, stride_q_h, stride_k_b, stride_k_h, stride_v_b, stride_v_h,
    stride_a_b, stride_a_h, stride_b_b, stride_b_h, stride_out_b, stride_out_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr, MODE: tl.constexpr,
    BLOCK_V: tl.constexpr, CHUNKS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_L: tl.constexpr,
    FOLD_CHUNK: tl.constexpr, FOLD_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr, HEADS_PER_PROG: tl.constexpr,
    EVEN_TILE: tl.constexpr, V_INNER: tl.constexpr = False, LOOP_STAGES: tl.constexpr = None,
    ROW_BLOCK: tl.constexpr = 1, ROW_PROGS: tl.constexpr = 0, PREFETCH: tl.constexpr = False,
    LAUNCH_DEPENDENTS: tl.constexpr = False, WAIT_PRIMARY: tl.constexpr = False, EARLY_TILES: tl.constexpr = False,
):
    """A program covers CHUNKS blocks of BLOCK_V value rows of HEADS_PER_PROG value heads of
    one batch row (the fold launch: of the rows of a block of ROW_BLOCK that flush, or of
    its share of the batch's flushing rows: :func:`~..common.fold_row_blocks`), one block
    after another. The work of a head that does not depend on the value rows (q/k
    normalisation, gates, the ring's g and k tiles and their products with k and q) is
    done once for all the blocks: done per block, it cost a non-flush step more than the
    checkpoint read (``benchmarks/probe_gdn_nonflush.py``)."""
    pid_v = tl.program_id(0)
    pid_hg = tl.program_id(1)
    offs_v0 = pid_v * (BLOCK_V * CHUNKS) + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    mask_k = dim_mask(offs_k, head_k_dim, EVEN_TILE)
    REPORTS: tl.constexpr = MODE != FOLD  # one launch of a step reports errors
    let_dependents_launch(LAUNCH_DEPENDENTS)  # the fold's programmatic launch

    if (ROW_BLOCK > 1) or (ROW_PROGS > 0):
        # (The fold launch only.) One vector load of a block's cursors: on the many steps
        # where none of its rows flush, a program costs one chain of loads, not one a row.
        block, end_block, place = fold_row_blocks(batch, ROW_BLOCK, ROW_PROGS)
        SHARE: tl.constexpr = ROW_PROGS + (ROW_PROGS == 0)
        before = 0
        # (while, not a for over a runtime range: the interpreter takes no runtime range bound)
        while block < end_block:
            selected, ordinal, first, mine, before = block_flush_ordinals(
                slot_idx_ptr, write_pos_ptr, force_flush_ptr, block, before, place, batch, num_slots,
                buffer_len, pad_slot_id, HAS_SLOT_IDX, HAS_FORCE_FLUSH, ROW_BLOCK, SHARE)
            for k in range(0, (ROW_BLOCK + SHARE - 1) // SHARE):  # the share's most in a block
                if k < mine:
                    pid_b = row_of_ordinal(selected, ordinal, first + k * SHARE, block, ROW_BLOCK)
                    slot, _, _ = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
                    w = tl.load(write_pos_ptr + slot)
                    _gdn_heads(pid_b, slot, w, pid_v, pid_hg, offs_v0, offs_k, mask_k,
                               state_ptr, d_cache_ptr, k_cache_ptr, g_cache_ptr, q_ptr, k_ptr, v_ptr, a_ptr, b_ptr,
                               A_log_ptr, dt_bias_ptr, out_ptr, num_v_heads, head_v_dim, v_heads_per_k_head,
                               stride_state_slot, stride_state_h, stride_state_row, stride_dc_slot, stride_dc_h,
                               stride_dc_l, stride_kc_slot, stride_kc_h, stride_kc_l, stride_gc_slot, stride_gc_h,
                               stride_q_b, stride_q_h, stride_k_b, stride_k_h, stride_v_b, stride_v_h,
                               stride_a_b, stride_a_h, stride_b_b, stride_b_h, stride_out_b, stride_out_h,
                               scale, softplus_beta, softplus_threshold, USE_QK_L2NORM, MODE, BLOCK_V, CHUNKS,
                               BLOCK_L, FOLD_CHUNK, FOLD_DOT, DOT_PRECISION, HEADS_PER_PROG, EVEN_TILE, V_INNER,
                               LOOP_STAGES, PREFETCH, EARLY_TILES)
            block += 1
        complete_after_primary(WAIT_PRIMARY)
        return

    pid_b = tl.program_id(2)
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    if is_pad:
        complete_after_primary(WAIT_PRIMARY)
        return
    if is_bad:
        if REPORTS:
            _store_nan_rows(out_ptr, offs_v0, pid_b, pid_hg, num_v_heads, head_v_dim, stride_out_b, stride_out_h,
                            HEADS_PER_PROG, BLOCK_V, CHUNKS)
        complete_after_primary(WAIT_PRIMARY)
        return
    w = tl.load(write_pos_ptr + slot)
    if (w < 0) | (w >= buffer_len):
        if REPORTS:
            _store_nan_rows(out_ptr, offs_v0, pid_b, pid_hg, num_v_heads, head_v_dim, stride_out_b, stride_out_h,
                            HEADS_PER_PROG, BLOCK_V, CHUNKS)
        complete_after_primary(WAIT_PRIMARY)
        return
    is_flush = w == buffer_len - 1
    if HAS_FORCE_FLUSH:
        is_flush = is_flush | (tl.load(force_flush_ptr + pid_b) != 0)
    if MODE == NONFLUSH:
        if is_flush:
            complete_after_primary(WAIT_PRIMARY)
            return
    if MODE == FOLD:
        if not is_flush:
            complete_after_primary(WAIT_PRIMARY)
            return
    _gdn_heads(pid_b, slot, w, pid_v, pid_hg, offs_v0, offs_k, mask_k,
               state_ptr, d_cache_ptr, k_cache_ptr, g_cache_ptr, q_ptr, k_ptr, v_ptr, a_ptr, b_ptr,
               A_log_ptr, dt_bias_ptr, out_ptr, num_v_heads, head_v_dim, v_heads_per_k_head,
               stride_state_slot, stride_state_h, stride_state_row, stride_dc_slot, stride_dc_h,
               stride_dc_l, stride_kc_slot, stride_kc_h, stride_kc_l, stride_gc_slot, stride_gc_h,
               stride_q_b, stride_q_h, stride_k_b, stride_k_h, stride_v_b, stride_v_h,
               stride_a_b, stride_a_h, stride_b_b, stride_b_h, stride_out_b, stride_out_h,
               scale, softplus_beta, softplus_threshold, USE_QK_L2NORM, MODE, BLOCK_V, CHUNKS,
               BLOCK_L, FOLD_CHUNK, FOLD_DOT, DOT_PRECISION, HEADS_PER_PROG, EVEN_TILE, V_INNER,
               LOOP_STAGES, PREFETCH, EARLY_TILES)
    complete_after_primary(WAIT_PRIMARY)


@triton.jit
def _nonflush_tiles(state_base, dc_base, offs_v, offs_k, offs_l, mask_k, mask_l, head_v_dim, stride_state_row,
                    stride_dc_l, ANY, EVEN_TILE: tl.constexpr, V_INNER: tl.constexpr):
    """A block of value rows' checkpoint tile ``[V, K]`` and ring values ``[V, L]`` (fp32),
    or zeros where ``ANY`` is false (past the program's last block: nothing is read)."""
    mask_v = dim_mask(offs_v, head_v_dim, EVEN_TILE) & ANY
    S0 = tl.load(state_tile_ptrs(state_base, offs_v, offs_k, stride_state_row, V_INNER),
                 mask=mask_v[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
    D_hist = tl.load(dc_base + offs_l[None, :] * stride_dc_l + offs_v[:, None],
                     mask=mask_v[:, None] & mask_l[None, :], other=0.0).to(tl.float32)
    return S0, D_hist


@triton.jit
def _nonflush_rows(S0, D_hist, offs_v, eG, k, q, coef_k, coef_q, alpha, beta, kq, w, pid_b, hv, v_ptr, dc_base,
                   out_ptr, head_v_dim, stride_v_b, stride_v_h, stride_dc_l, stride_out_b, stride_out_h,
                   EVEN_TILE: tl.constexpr):
    """A non-flush row's step on a block of value rows: ``S_prev k`` and ``S_prev q`` from the
    checkpoint tile and the ring, the corrected value ``d`` appended at ``w``, the output."""
    mask_v = dim_mask(offs_v, head_v_dim, EVEN_TILE)
    Sk = eG * tl.sum(S0 * k[None, :], axis=1) + tl.sum(D_hist * coef_k[None, :], axis=1)
    Sq = eG * tl.sum(S0 * q[None, :], axis=1) + tl.sum(D_hist * coef_q[None, :], axis=1)
    v = tl.load(v_ptr + pid_b * stride_v_b + hv * stride_v_h + offs_v, mask=mask_v, other=0.0).to(tl.float32)
    d = beta * (v - alpha * Sk)
    tl.store(dc_base + w * stride_dc_l + offs_v, d.to(dc_base.dtype.element_ty), mask=mask_v)
    tl.store(out_ptr + pid_b * stride_out_b + hv * stride_out_h + offs_v,
             (alpha * Sq + kq * d).to(out_ptr.dtype.element_ty), mask=mask_v)


@triton.jit
def _ring_bases(slot, h, hv, w, d_cache_ptr, k_cache_ptr, g_cache_ptr, stride_dc_slot, stride_dc_h, stride_kc_slot,
                stride_kc_h, stride_gc_slot, stride_gc_h, BLOCK_L: tl.constexpr):
    """Value head ``hv``'s ring of ``d`` and ``g``, its key head's ring of ``k``, and the
    ring positions in use (``offs_l < w``)."""
    dc_base = d_cache_ptr + slot * stride_dc_slot + hv * stride_dc_h
    kc_base = k_cache_ptr + slot * stride_kc_slot + h * stride_kc_h
    gc_base = g_cache_ptr + slot * stride_gc_slot + hv * stride_gc_h
    offs_l = tl.arange(0, BLOCK_L)
    return dc_base, kc_base, gc_base, offs_l, offs_l < w


@triton.jit
def _ring_k_tile(kc_base, offs_l, offs_k, mask_l, mask_k, stride_kc_l):
    """The key head's ring of ``k`` as one ``[L, K]`` tile, in the ring's dtype."""
    return tl.load(kc_base + offs_l[:, None] * stride_kc_l + offs_k[None, :], mask=mask_l[:, None] & mask_k[None, :],
                   other=0.0)


@triton.jit
def _gdn_heads(pid_b, slot, w, pid_v, pid_hg, offs_v0, offs_k, mask_k,
               state_ptr, d_cache_ptr, k_cache_ptr, g_cache_ptr, q_ptr, k_ptr, v_ptr, a_ptr, b_ptr,
               A_log_ptr, dt_bias_ptr, out_ptr, num_v_heads, head_v_dim, v_heads_per_k_head,
               stride_state_slot, stride_state_h, stride_state_row, stride_dc_slot, stride_dc_h,
               stride_dc_l, stride_kc_slot, stride_kc_h, stride_kc_l, stride_gc_slot, stride_gc_h,
               stride_q_b, stride_q_h, stride_k_b, stride_k_h, stride_v_b, stride_v_h,
               stride_a_b, stride_a_h, stride_b_b, stride_b_h, stride_out_b, stride_out_h,
               scale, softplus_beta, softplus_threshold, USE_QK_L2NORM: tl.constexpr, MODE: tl.constexpr,
               BLOCK_V: tl.constexpr, CHUNKS: tl.constexpr, BLOCK_L: tl.constexpr, FOLD_CHUNK: tl.constexpr,
               FOLD_DOT: tl.constexpr, DOT_PRECISION: tl.constexpr, HEADS_PER_PROG: tl.constexpr,
               EVEN_TILE: tl.constexpr, V_INNER: tl.constexpr, LOOP_STAGES: tl.constexpr, PREFETCH: tl.constexpr,
               EARLY_TILES: tl.constexpr):
    """One served batch row's step on the program's heads and value blocks: the output
    (and the ring's append) of a non-flush row, the fold and store of a flushing one.
    ``EARLY_TILES`` (the non-flush launch with ``PREFETCH`` only: :data:`EARLY_TILES_STATES`)."""
    for hh in range(0, HEADS_PER_PROG):
        hv = pid_hg * HEADS_PER_PROG + hh
        if hv < num_v_heads:
            h = hv // v_heads_per_k_head
            state_base = state_ptr + slot * stride_state_slot + hv * stride_state_h
            if EARLY_TILES:
                dc_base, kc_base, gc_base, offs_l, mask_l = _ring_bases(
                    slot, h, hv, w, d_cache_ptr, k_cache_ptr, g_cache_ptr, stride_dc_slot, stride_dc_h,
                    stride_kc_slot, stride_kc_h, stride_gc_slot, stride_gc_h, BLOCK_L)
                # The first block's tiles and the ring's g and k tiles, issued before the head's
                # q / k / gate loads; the barrier keeps ptxas from sinking them below those and
                # the ring's reductions (where it streamed the k tile three loads at a time).
                S0_n, D_n = _nonflush_tiles(state_base, dc_base, offs_v0, offs_k, offs_l, mask_k, mask_l,
                                            head_v_dim, stride_state_row, stride_dc_l, True, EVEN_TILE, V_INNER)
                g_hist = tl.load(gc_base + offs_l, mask=mask_l, other=0.0)
                K_raw = _ring_k_tile(kc_base, offs_l, offs_k, mask_l, mask_k, stride_kc_l)
                tl.debug_barrier()
            q, k = load_qk(q_ptr, k_ptr, pid_b, h, stride_q_b, stride_q_h, stride_k_b, stride_k_h, offs_k, mask_k,
                           scale, USE_QK_L2NORM)
            g, beta = load_gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_h, stride_b_b,
                                 stride_b_h, softplus_beta, softplus_threshold)
            alpha = tl.exp(g)
            kq = tl.sum(k * q, axis=0)

            # The ring as whole tiles: every load independent and issued together.
            if not EARLY_TILES:
                dc_base, kc_base, gc_base, offs_l, mask_l = _ring_bases(
                    slot, h, hv, w, d_cache_ptr, k_cache_ptr, g_cache_ptr, stride_dc_slot, stride_dc_h,
                    stride_kc_slot, stride_kc_h, stride_gc_slot, stride_gc_h, BLOCK_L)
                g_hist = tl.load(gc_base + offs_l, mask=mask_l, other=0.0)
            G = tl.sum(g_hist, axis=0)  # sum of cached g
            decay = tl.where(mask_l, tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0), 0.0)), 0.0)  # exp(G - G_j)
            if not EARLY_TILES:  # after the decays, where it was before EARLY_TILES (the same SASS)
                K_raw = _ring_k_tile(kc_base, offs_l, offs_k, mask_l, mask_k, stride_kc_l)
            K_hist = K_raw.to(tl.float32)  # [L, K]
            if MODE == NONFLUSH:
                coef_k = decay * tl.sum(K_hist * k[None, :], axis=1)  # exp(G - G_j) (k_j . k)
                coef_q = decay * tl.sum(K_hist * q[None, :], axis=1)
                eG = tl.exp(G)
                if PREFETCH:
                    # The next block's tiles are loaded into registers before this block is
                    # used: in flight during its reductions, with no shared-memory staging.
                    if not EARLY_TILES:
                        S0_n, D_n = _nonflush_tiles(state_base, dc_base, offs_v0, offs_k, offs_l, mask_k, mask_l,
                                                    head_v_dim, stride_state_row, stride_dc_l, True, EVEN_TILE,
                                                    V_INNER)
                    for c in range(0, CHUNKS):
                        S0, D_hist = S0_n, D_n
                        offs_v = offs_v0 + c * BLOCK_V
                        S0_n, D_n = _nonflush_tiles(state_base, dc_base, offs_v + BLOCK_V, offs_k, offs_l, mask_k,
                                                    mask_l, head_v_dim, stride_state_row, stride_dc_l,
                                                    c + 1 < CHUNKS, EVEN_TILE, V_INNER)
                        _nonflush_rows(S0, D_hist, offs_v, eG, k, q, coef_k, coef_q, alpha, beta, kq, w, pid_b, hv,
                                       v_ptr, dc_base, out_ptr, head_v_dim, stride_v_b, stride_v_h, stride_dc_l,
                                       stride_out_b, stride_out_h, EVEN_TILE)
                else:
                    for c in tl.range(0, CHUNKS, num_stages=LOOP_STAGES):
                        offs_v = offs_v0 + c * BLOCK_V
                        S0, D_hist = _nonflush_tiles(state_base, dc_base, offs_v, offs_k, offs_l, mask_k, mask_l,
                                                     head_v_dim, stride_state_row, stride_dc_l, True, EVEN_TILE,
                                                     V_INNER)
                        _nonflush_rows(S0, D_hist, offs_v, eG, k, q, coef_k, coef_q, alpha, beta, kq, w, pid_b, hv,
                                       v_ptr, dc_base, out_ptr, head_v_dim, stride_v_b, stride_v_h, stride_dc_l,
                                       stride_out_b, stride_out_h, EVEN_TILE)
                if pid_v == 0:
                    tl.store(gc_base + w, g)
                    if hv % v_heads_per_k_head == 0:  # one value head per key head appends k
                        tl.store(kc_base + w * stride_kc_l + offs_k, k.to(k_cache_ptr.dtype.element_ty), mask=mask_k)
            else:
                for c in tl.range(0, CHUNKS, num_stages=LOOP_STAGES):
                    offs_v = offs_v0 + c * BLOCK_V
                    mask_v = dim_mask(offs_v, head_v_dim, EVEN_TILE)
                    mask_vk = mask_v[:, None] & mask_k[None, :]
                    state_ptrs = state_tile_ptrs(state_base, offs_v, offs_k, stride_state_row, V_INNER)
                    S = tl.exp(G) * tl.load(state_ptrs, mask=mask_vk, other=0.0).to(tl.float32)
                    if FOLD_DOT:
                        # S_prev = exp(G) S_0 + (D * decay) @ K: one matmul over the ring, fp32-accurate
                        # (one TF32 pass into a bf16 checkpoint: common.one_pass_fold).
                        D_hist = tl.load(dc_base + offs_l[None, :] * stride_dc_l + offs_v[:, None],
                                         mask=mask_v[:, None] & mask_l[None, :], other=0.0).to(tl.float32)
                        S += tl.dot(D_hist * decay[None, :], K_hist, input_precision=DOT_PRECISION)
                    else:
                        # w rank-1 updates (fp32 FMAs), in chunks of FOLD_CHUNK entries loaded together;
                        # a chunk past w is skipped by a uniform branch.
                        seen = G * 0.0
                        for f in range(0, BLOCK_L // FOLD_CHUNK):
                            if f * FOLD_CHUNK < w:
                                for i in tl.static_range(FOLD_CHUNK):
                                    j = f * FOLD_CHUNK + i
                                    m = j < w
                                    seen += tl.load(gc_base + j, mask=m, other=0.0)
                                    coef = tl.exp(tl.minimum(G - seen, 0.0))
                                    d_j = tl.load(dc_base + j * stride_dc_l + offs_v, mask=mask_v & m,
                                                  other=0.0).to(tl.float32)
                                    k_j = tl.load(kc_base + j * stride_kc_l + offs_k, mask=mask_k & m,
                                                  other=0.0).to(tl.float32)
                                    S += (coef * d_j)[:, None] * k_j[None, :]
                    v = tl.load(v_ptr + pid_b * stride_v_b + hv * stride_v_h + offs_v, mask=mask_v,
                                other=0.0).to(tl.float32)
                    S, o = delta_rule_step(S, q, k, v, alpha, beta)
                    tl.store(out_ptr + pid_b * stride_out_b + hv * stride_out_h + offs_v,
                             o.to(out_ptr.dtype.element_ty), mask=mask_v)
                    tl.store(state_ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_vk)


def check_gdn_ring(step: GDNStep, state: torch.Tensor, d_cache: torch.Tensor, k_cache: torch.Tensor,
                   g_cache: torch.Tensor, write_pos: torch.Tensor) -> int:
    """Check one layer's ring against the step; returns the buffer length L."""
    slots, H, HV, K, V = state.shape[0], step.num_k_heads, step.num_v_heads, step.head_k_dim, step.head_v_dim
    dev = step.q.device
    check_tensor("d_cache", d_cache, (slots, HV, None, V), RING_DTYPES, dev)
    L = d_cache.shape[2]
    check_buffer_len(L)
    check_tensor("k_cache", k_cache, (slots, H, L, K), RING_DTYPES, dev)
    check_tensor("g_cache", g_cache, (slots, HV, L), (torch.float32,), dev)
    check_tensor("write_pos", write_pos, (slots,), (torch.int32,), dev)
    for name, t in (("d_cache", d_cache), ("k_cache", k_cache), ("g_cache", g_cache)):
        check_slot_major(name, t)
    check_contiguous("write_pos", write_pos)
    return L


def choose_gdn_route(state: torch.Tensor, q: torch.Tensor, v: torch.Tensor) -> str:
    """Route the measured table picks for this batch size and geometry."""
    return select_route(device_table_tag(q.device), state.dtype, q.dtype, v.shape[2], q.shape[2], q.shape[0],
                        family="gdn", nheads=v.shape[1])


def fused_recurrent_gated_delta_rule_replayssm(
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
    *,
    d_cache: torch.Tensor,
    k_cache: torch.Tensor,
    g_cache: torch.Tensor,
    write_pos: torch.Tensor,
    force_flush: Optional[torch.Tensor] = None,
    route: str = "auto",
    config: Optional[LaunchConfig] = None,
    fold_config: Optional[LaunchConfig] = None,
) -> torch.Tensor:
    """One ReplaySSM GDN decode step for a batch (one layer).

    Same step arguments as :func:`fused_sigmoid_gating_delta_rule_update`; ``state`` is the
    checkpoint pool ``(slots, HV, V, K)`` (or the transposed view of a ``(slots, HV, K, V)``
    pool, as that function takes it). Ring of this layer: ``d_cache (slots, HV, L, V)``
    and ``k_cache (slots, H, L, K)`` (normalised keys) in a ring dtype (fp32/bf16/fp16),
    ``g_cache (slots, HV, L)`` fp32; cursors ``write_pos (slots,)`` int32, advanced once per
    step by :func:`advance_write_pos` after every layer ran. ``force_flush (B,)``: rows
    whose ring is folded into the checkpoint at this step.

    A padding row changes nothing; a row whose slot or cursor is out of range gets NaN
    outputs and changes nothing. ``route="auto"`` takes :func:`choose_gdn_route`; pass the
    same route to the cursor advance.
    """
    step = parse_gdn_step(q, k, v, a, b, A_log, dt_bias, scale, use_qk_l2norm, initial_state_indices,
                          pad_slot_id, out, softplus_beta, softplus_threshold)
    layout = check_gdn_state_pool("state", state, step)
    L = check_gdn_ring(step, state, d_cache, k_cache, g_cache, write_pos)
    if force_flush is not None:
        check_vector("force_flush", force_flush, step.batch, FLAG_DTYPES, q.device)
    if route == "auto":
        route = choose_gdn_route(state, q, v)
    if route not in ROUTES:
        raise ValueError(f"route must be one of {ROUTES + ('auto',)}, got {route!r}")
    if step.batch == 0:
        return step.out
    arch = device_table_tag(q.device)

    def pick(kernel: str, given: Optional[LaunchConfig]) -> LaunchConfig:
        return given or select_config(kernel, arch, state.dtype, q.dtype, step.head_v_dim, step.head_k_dim,
                                      step.batch, family="gdn", nheads=step.num_v_heads)

    if route in FLUSH_EVERY_STEP:
        # One launch of the standard kernel: on always_flush a row whose ring is not empty (a
        # route switch) replays it on its state first, and with every ring empty it costs
        # what standard_step costs; standard_step takes only an empty ring.
        cfg = pick(config_kernel(route), config)
        if route == "always_flush":
            launch_standard_step(state, step, cfg, write_pos, L, layout=layout, rings=(d_cache, k_cache, g_cache))
        else:
            launch_standard_step(state, step, cfg, write_pos, 1, layout=layout)
        return step.out
    nonflush_cfg, fold_cfg = pick("output_only", config), pick("fold", fold_config)
    # Ring tiles of at least 16 (masked past w): small tiles along the ring gave wrong
    # results on the GPU in the speculative kernels (see common.ring_positions).
    block_l, block_k = max(16, triton.next_power_of_2(L)), triton.next_power_of_2(step.head_k_dim)
    head_rows = step.batch * step.num_v_heads
    pdl = fold_programmatic_launch(q.device, head_rows, "gdn")

    def launch_mode(mode: int, cfg: LaunchConfig) -> None:
        # Heads and row blocks of a program: the fold launch's (the non-flush launch takes one of each).
        if mode != FOLD.value:
            cfg = replace(cfg, heads_per_prog=1, row_block=1, row_progs=0)
        hpp = cfg.heads_per_prog
        cfg = clamp_loop_blocks(cfg, step.head_v_dim)
        chunks = cfg.loop_blocks
        programs = (triton.cdiv(step.head_v_dim, cfg.block_p * chunks), triton.cdiv(step.num_v_heads, hpp),
                    fold_row_programs(step.batch, cfg))
        launch_kernel(_gdn_replay_kernel, programs,
            state_ptr=state, **ring_args(d_cache, k_cache, g_cache), write_pos_ptr=write_pos,
            force_flush_ptr=force_flush if force_flush is not None else write_pos,
            num_slots=state.shape[0], batch=step.batch, num_v_heads=step.num_v_heads, head_k_dim=step.head_k_dim,
            head_v_dim=step.head_v_dim, v_heads_per_k_head=step.num_v_heads // step.num_k_heads, buffer_len=L,
            stride_state_slot=state.stride(0), stride_state_h=state.stride(1), stride_state_row=layout.stride_row,
            **step.kernel_args(),
            HAS_FORCE_FLUSH=force_flush is not None, MODE=mode,
            BLOCK_V=cfg.block_p, CHUNKS=chunks, BLOCK_K=block_k, BLOCK_L=block_l,
            FOLD_CHUNK=min(cfg.fold_chunk, block_l),
            FOLD_DOT=bool(cfg.fold_dot) and min(cfg.block_p, block_l, block_k) >= 16,
            # one TF32 pass into a bf16 checkpoint (common.one_pass_fold); the non-flush launch
            # has no product and keeps one specialisation for every state dtype
            DOT_PRECISION=fold_precision(mode == FOLD.value and one_pass_fold(state.dtype)),
            HEADS_PER_PROG=hpp, EVEN_TILE=even_tile(step.head_v_dim, cfg.block_p * chunks, step.head_k_dim, block_k),
            V_INNER=layout.v_inner, LOOP_STAGES=LOOP_STAGES[mode] if state.dtype in LOOP_STAGES_STATES else None,
            ROW_BLOCK=cfg.row_block, ROW_PROGS=cfg.row_progs, PREFETCH=bool(cfg.prefetch) and mode == NONFLUSH.value,
            EARLY_TILES=mode == NONFLUSH.value and early_tiles(cfg, state.dtype),
            num_warps=cfg.num_warps, **maxnreg_option(cfg.maxnreg),
            **pdl_options(pdl, primary=mode == NONFLUSH.value),
        )

    launch_fold_beside(lambda: launch_mode(FOLD.value, fold_cfg), lambda: launch_mode(NONFLUSH.value, nonflush_cfg),
                       q.device, fold_side_stream(q.device, head_rows, "gdn"))
    return step.out
