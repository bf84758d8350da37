#!/usr/bin/env python3
"""The replay folds written in Gluon (Triton's layout-explicit dialect), each substituted
for the package's fold launch, against the package's own (H200).

Why: Nsight Compute on the tuned Mamba2 fold launch (Nano fp32, batch 512, every row
flushing) showed 255 registers and 4 programs an SM, DRAM at 50% and 197 M of 223 M L1
wavefronts in shared memory; the GDN fold holds 200-255 registers too. Triton's TTGIR
shows where the shared-memory traffic goes: the state tile is loaded in a coalesced
layout and converted to the MMA layout through shared memory, the ring's B operand is read
back from shared memory for each TF32 pass, and the new state is converted back for the
store. Here the layouts are chosen by hand:
- the state tile is loaded, updated and stored in the MMA accumulator layout itself (each
  thread's two adjacent fp32 columns: whole 32-byte sectors);
- the ring's B operand (Mamba2: the B ring; GDN: the key ring), its TF32 head and
  remainder, is converted to its operand layout once per head and stays in registers
  over the head's blocks of rows;
- only the small [rows, ring] tile (x ring, or the ring's values d) goes through shared
  memory.
Mamba2: ``S = exp(A T) S_0 + (X coef) @ B_ring``, store, ``y = S C`` (+ D, z). GDN:
``S = exp(G) S_0 + (D * decay) @ K_ring``, then this token's delta rule (``S = alpha S``,
``d = beta (v - S k)``, ``S += d k^T``, ``o = S q``), store. Two TF32 passes where the B
operand holds bf16/fp16 values, else three.

Each Gluon kernel takes the package's fold launches (a launcher in front of Triton's JIT,
:func:`trtllm_replayssm.ops.launch.launcher_in_front`), so the whole output_only step runs
as the package runs it. The script checks, then times:
1. correctness: the package's multi-cycle scenarios (``tests/mamba2_harness.py``,
   ``tests/gdn_harness.py``: fp64 recurrence, staggered cursors, a padding row,
   force-flushed rows, masked tiles) with the Gluon fold in place;
2. the cycle, the flush step and a non-flush step (same method as the benchmarks) with the
   package's fold and with the Gluon one, per Gluon config.

Compiled for sm_90 without a GPU (ptxas, ``--compile-only``), unmasked tiles: the Mamba2
fold 64-103 registers a thread at 16 rows on 8 warps with one head a program (5 / 4
blocks a head; 171 over several heads; the tuned Triton fold 255 at 2 warps), 8 KB of
shared memory against 34 KB; the GDN fold 99 registers on 8 warps. Gluon has no interpreter: this runs on a GPU only. K-innermost GDN pools only.

    python benchmarks/probe_gluon_folds.py   # -> benchmarks/results/gluon_folds.json
"""

from __future__ import annotations

import argparse
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, time_cycle_and_steps
from trtllm_replayssm.benchmarking.rigs import make_model_rig
from trtllm_replayssm.ops.gdn import replay as gdn_replay
from trtllm_replayssm.ops.launch import launcher_in_front
from trtllm_replayssm.ops.mamba2 import replay_fold


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _tf32_head(x):
    """``x`` cut to the bits a TF32 pass reads; ``x - _tf32_head(x)`` is exact."""
    return (x.to(gl.uint32, bitcast=True) & 0xFFFFE000).to(gl.float32, bitcast=True)


@gluon.jit
def _flushing_row(slot_idx_ptr, write_pos_ptr, force_flush_ptr, pid_b, batch, num_slots, pad_slot_id, buffer_len,
                  HAS_SLOT_IDX: gl.constexpr, HAS_FORCE_FLUSH: gl.constexpr):
    """``(slot, cursor, flushes)`` of batch row ``pid_b``: whether it is a valid row of the
    batch that folds at this step (its cursor at ``L - 1``, or force-flushed)."""
    in_batch = pid_b < batch
    if HAS_SLOT_IDX:
        slot = gl.load(slot_idx_ptr + pid_b, mask=in_batch, other=pad_slot_id).to(gl.int32)
    else:
        slot = pid_b
    valid = in_batch & (slot != pad_slot_id) & (slot >= 0) & (slot < num_slots)
    w = gl.load(write_pos_ptr + slot, mask=valid, other=-1)
    flushes = w == buffer_len - 1
    if HAS_FORCE_FLUSH:
        flushes = flushes | (gl.load(force_flush_ptr + pid_b, mask=in_batch, other=0) != 0)
    return slot, w, valid & (w >= 0) & (w < buffer_len) & flushes


@gluon.jit
def _state_tile(head, offs_p, offs_n, stride_p, headdim, dstate, EVEN: gl.constexpr):
    """A [BLOCK_P, BLOCK_N] tile of a head's state in the layout of ``offs_p`` / ``offs_n``
    (masked only where the sizes do not fill it: a mask costs a register an element)."""
    ptrs = head + offs_p[:, None] * stride_p + offs_n[None, :]
    if EVEN:
        return gl.load(ptrs)
    else:
        return gl.load(ptrs, mask=(offs_p < headdim)[:, None] & (offs_n < dstate)[None, :], other=0.0)


@gluon.jit
def _gluon_fold_kernel(
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
    HAS_D: gl.constexpr, HAS_Z: gl.constexpr, HAS_DT_BIAS: gl.constexpr, HAS_SLOT_IDX: gl.constexpr,
    DT_SOFTPLUS: gl.constexpr, HAS_FORCE_FLUSH: gl.constexpr,
    BLOCK_P: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_L: gl.constexpr, CHUNKS: gl.constexpr,
    HEADS_PER_PROG: gl.constexpr, NUM_WARPS: gl.constexpr, PREFETCH: gl.constexpr, EXACT_B: gl.constexpr,
    EVEN: gl.constexpr, ROW_BLOCK: gl.constexpr,
):
    """Programs (runs of CHUNKS blocks of BLOCK_P rows, groups of HEADS_PER_PROG heads, blocks
    of ROW_BLOCK batch rows). A row that flushes folds ``S = exp(A T) S_0 + (X coef) @ B_ring`` (two TF32
    passes where B holds bf16/fp16 values, ``EXACT_B``, else three) and stores it; other
    rows are skipped (their step is the non-flush launch's)."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NUM_WARPS],
                                                  instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    rows_l: gl.constexpr = gl.SliceLayout(1, mma)  # [BLOCK_P] vectors of the state tile
    cols_l: gl.constexpr = gl.SliceLayout(0, mma)  # [BLOCK_N] vectors of the state tile
    ring: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [NUM_WARPS, 1], [1, 0])  # [L, N] B tile
    xring: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, NUM_WARPS], [0, 1])  # [P, L] x tile
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])  # [BLOCK_L] ring scalars (scanned)

    # A program looks through ROW_BLOCK batch rows and folds those that flush: fewer
    # programs on the many steps where none does.
    for r in range(ROW_BLOCK):
        pid_b = gl.program_id(2) * ROW_BLOCK + r
        slot, w, flushes = _flushing_row(slot_idx_ptr, write_pos_ptr, force_flush_ptr, pid_b, batch, num_slots,
                                         pad_slot_id, buffer_len, HAS_SLOT_IDX, HAS_FORCE_FLUSH)
        if flushes:
            offs_l = gl.arange(0, BLOCK_L, layout=vec_l)
            offs_l_ring = gl.arange(0, BLOCK_L, layout=gl.SliceLayout(1, ring))
            offs_n_ring = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, ring))
            offs_l_x = gl.arange(0, BLOCK_L, layout=gl.SliceLayout(0, xring))
            offs_n = gl.arange(0, BLOCK_N, layout=cols_l)
            mask_n = offs_n < dstate
            p_first = gl.program_id(0) * (BLOCK_P * CHUNKS)
            for hh in range(HEADS_PER_PROG):
                pid_h = gl.program_id(1) * HEADS_PER_PROG + hh
                if pid_h < nheads:
                    g = pid_h // heads_per_group
                    A = gl.load(A_ptr + pid_h * stride_A_h).to(gl.float32)
                    dt = gl.load(dt_ptr + pid_b * stride_dt_b + pid_h * stride_dt_h).to(gl.float32)
                    if HAS_DT_BIAS:
                        dt += gl.load(dt_bias_ptr + pid_h * stride_dtb_h).to(gl.float32)
                    if DT_SOFTPLUS:
                        dt = gl.where(dt <= 20.0, gl.log(1.0 + gl.exp(dt)), dt)
                    # The head's ring weights: entry w is this step's token.
                    dtc = dt_cache_ptr + slot * stride_dtc_slot + pid_h * stride_dtc_h
                    dt_ring = gl.where(offs_l == w, dt, gl.load(dtc + offs_l, mask=offs_l < w, other=0.0))
                    total = gl.sum(dt_ring, axis=0)
                    coef = dt_ring * gl.exp(gl.minimum(A * (total - gl.associative_scan(dt_ring, 0, _add)), 0.0))
                    decay = gl.exp(gl.minimum(A * total, 0.0))
                    Bc = B_cache_ptr + slot * stride_Bc_slot + g * stride_Bc_g
                    mask_ring = (offs_l_ring < w)[:, None] & (offs_n_ring < dstate)[None, :]
                    Bm = gl.load(Bc + offs_l_ring[:, None] * stride_Bc_l + offs_n_ring[None, :], mask=mask_ring,
                                 other=0.0).to(gl.float32)
                    B_now = gl.load(B_ptr + pid_b * stride_B_b + g * stride_B_g + offs_n_ring,
                                    mask=offs_n_ring < dstate, other=0.0).to(gl.float32)
                    Bm = gl.where((offs_l_ring == w)[:, None], B_now[None, :], Bm)
                    # Once per head; kept in registers over its blocks. B exact in TF32 (bf16/fp16
                    # values): a's head and remainder in one pass each; else B splits too (tf32x3).
                    B_hi = _tf32_head(Bm)
                    B_op = gl.convert_layout(B_hi, b_op)
                    if not EXACT_B:
                        B_lo_op = gl.convert_layout(Bm - B_hi, b_op)
                    coef_x = gl.convert_layout(coef, gl.SliceLayout(0, xring))
                    C = gl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_n, mask=mask_n, other=0.0).to(gl.float32)
                    xc = x_cache_ptr + slot * stride_xc_slot + pid_h * stride_xc_h
                    head = state_ptr + slot * stride_state_slot + pid_h * stride_state_h

                    offs_p = p_first + gl.arange(0, BLOCK_P, layout=rows_l)
                    S0_next = _state_tile(head, offs_p, offs_n, stride_state_p, headdim, dstate, EVEN)
                    for c in range(CHUNKS):
                        p0 = p_first + c * BLOCK_P
                        offs_p = p0 + gl.arange(0, BLOCK_P, layout=rows_l)
                        mask_p = offs_p < headdim
                        ptrs = head + offs_p[:, None] * stride_state_p + offs_n[None, :]
                        if PREFETCH:
                            S0 = S0_next.to(gl.float32)
                            # The next block of the run, or this one again after the last (not used):
                            # no mask, so an even tile needs none at all.
                            p_next = p_first + gl.minimum(c + 1, CHUNKS - 1) * BLOCK_P
                            S0_next = _state_tile(head, p_next + gl.arange(0, BLOCK_P, layout=rows_l), offs_n,
                                                  stride_state_p, headdim, dstate, EVEN)
                        else:
                            S0 = _state_tile(head, offs_p, offs_n, stride_state_p, headdim, dstate, EVEN).to(gl.float32)
                        # X [P, L]: the ring's x with this token as entry w, times the weights.
                        offs_px = p0 + gl.arange(0, BLOCK_P, layout=gl.SliceLayout(1, xring))
                        mask_px = offs_px < headdim
                        X = gl.load(xc + offs_l_x[None, :] * stride_xc_l + offs_px[:, None],
                                    mask=mask_px[:, None] & (offs_l_x < w)[None, :], other=0.0).to(gl.float32)
                        x_now = gl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_px, mask=mask_px,
                                        other=0.0).to(gl.float32)
                        X = gl.where((offs_l_x == w)[None, :], x_now[:, None], X) * coef_x[None, :]
                        X_hi = _tf32_head(X)
                        X_hi_op = gl.convert_layout(X_hi, a_op)
                        acc = mma_v2(X_hi_op, B_op, S0 * decay, input_precision="tf32")
                        acc = mma_v2(gl.convert_layout(X - X_hi, a_op), B_op, acc, input_precision="tf32")
                        if not EXACT_B:
                            acc = mma_v2(X_hi_op, B_lo_op, acc, input_precision="tf32")
                        if EVEN:
                            gl.store(ptrs, acc.to(state_ptr.dtype.element_ty))
                        else:
                            gl.store(ptrs, acc.to(state_ptr.dtype.element_ty), mask=mask_p[:, None] & mask_n[None, :])
                        y = gl.sum(acc * C[None, :], axis=1)
                        xr = gl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p,
                                     other=0.0).to(gl.float32)
                        if HAS_D:
                            y += xr * gl.load(D_ptr + pid_h * stride_D_h + offs_p * stride_D_p, mask=mask_p,
                                              other=0.0).to(gl.float32)
                        if HAS_Z:
                            z = gl.load(z_ptr + pid_b * stride_z_b + pid_h * stride_z_h + offs_p, mask=mask_p,
                                        other=0.0).to(gl.float32)
                            y *= z / (1.0 + gl.exp(-z))
                        gl.store(out_ptr + pid_b * stride_out_b + pid_h * stride_out_h + offs_p,
                                 y.to(out_ptr.dtype.element_ty), mask=mask_p)


@gluon.jit
def _gluon_gdn_fold_kernel(
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
    USE_QK_L2NORM: gl.constexpr, HAS_SLOT_IDX: gl.constexpr, HAS_FORCE_FLUSH: gl.constexpr,
    BLOCK_V: gl.constexpr, BLOCK_K: gl.constexpr, BLOCK_L: gl.constexpr, CHUNKS: gl.constexpr,
    HEADS_PER_PROG: gl.constexpr, NUM_WARPS: gl.constexpr, EXACT_K: gl.constexpr, EVEN: gl.constexpr,
    ROW_BLOCK: gl.constexpr,
):
    """Programs (runs of CHUNKS blocks of BLOCK_V value rows, groups of HEADS_PER_PROG value
    heads, blocks of ROW_BLOCK batch rows); rows that do not flush are skipped."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NUM_WARPS],
                                                  instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    rows_l: gl.constexpr = gl.SliceLayout(1, mma)  # [BLOCK_V]
    cols_l: gl.constexpr = gl.SliceLayout(0, mma)  # [BLOCK_K]
    ring: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [NUM_WARPS, 1], [1, 0])  # [L, K] key tile
    dring: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, NUM_WARPS], [0, 1])  # [V, L] value tile
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])  # [BLOCK_L] ring scalars (scanned)

    # A program looks through ROW_BLOCK batch rows and folds those that flush: fewer
    # programs on the many steps where none does.
    for r in range(ROW_BLOCK):
        pid_b = gl.program_id(2) * ROW_BLOCK + r
        slot, w, flushes = _flushing_row(slot_idx_ptr, write_pos_ptr, force_flush_ptr, pid_b, batch, num_slots,
                                         pad_slot_id, buffer_len, HAS_SLOT_IDX, HAS_FORCE_FLUSH)
        if flushes:
            offs_k = gl.arange(0, BLOCK_K, layout=cols_l)
            mask_k = offs_k < head_k_dim
            offs_l = gl.arange(0, BLOCK_L, layout=vec_l)
            offs_l_ring = gl.arange(0, BLOCK_L, layout=gl.SliceLayout(1, ring))
            offs_k_ring = gl.arange(0, BLOCK_K, layout=gl.SliceLayout(0, ring))
            offs_l_d = gl.arange(0, BLOCK_L, layout=gl.SliceLayout(0, dring))
            v_first = gl.program_id(0) * (BLOCK_V * CHUNKS)
            for hh in range(HEADS_PER_PROG):
                hv = gl.program_id(1) * HEADS_PER_PROG + hh
                if hv < num_v_heads:
                    h = hv // v_heads_per_k_head
                    q = gl.load(q_ptr + pid_b * stride_q_b + h * stride_q_h + offs_k, mask=mask_k, other=0.0).to(gl.float32)
                    k = gl.load(k_ptr + pid_b * stride_k_b + h * stride_k_h + offs_k, mask=mask_k, other=0.0).to(gl.float32)
                    if USE_QK_L2NORM:
                        q = q * gl.rsqrt(gl.sum(q * q, axis=0) + 1e-6)
                        k = k * gl.rsqrt(gl.sum(k * k, axis=0) + 1e-6)
                    q = q * scale
                    x = gl.load(a_ptr + pid_b * stride_a_b + hv * stride_a_h).to(gl.float32) + \
                        gl.load(dt_bias_ptr + hv).to(gl.float32)
                    bx = softplus_beta * x
                    sp = gl.where(bx <= softplus_threshold, gl.log(1.0 + gl.exp(bx)) / softplus_beta, x)
                    alpha = gl.exp(-gl.exp(gl.load(A_log_ptr + hv).to(gl.float32)) * sp)
                    beta = 1.0 / (1.0 + gl.exp(-gl.load(b_ptr + pid_b * stride_b_b + hv * stride_b_h).to(gl.float32)))

                    # The head's ring: exp(G - G_j) over the cached steps, and the key tile as the
                    # matmul's B operand (its TF32 head, and remainder where K is not exact in TF32).
                    gc = g_cache_ptr + slot * stride_gc_slot + hv * stride_gc_h
                    g_hist = gl.load(gc + offs_l, mask=offs_l < w, other=0.0)
                    G = gl.sum(g_hist, axis=0)
                    decay = gl.where(offs_l < w, gl.exp(gl.minimum(G - gl.associative_scan(g_hist, 0, _add), 0.0)), 0.0)
                    decay_d = gl.convert_layout(decay, gl.SliceLayout(0, dring))
                    kc = k_cache_ptr + slot * stride_kc_slot + h * stride_kc_h
                    K_hist = gl.load(kc + offs_l_ring[:, None] * stride_kc_l + offs_k_ring[None, :],
                                     mask=(offs_l_ring < w)[:, None] & (offs_k_ring < head_k_dim)[None, :],
                                     other=0.0).to(gl.float32)
                    K_hi = _tf32_head(K_hist)
                    K_op = gl.convert_layout(K_hi, b_op)
                    if not EXACT_K:
                        K_lo_op = gl.convert_layout(K_hist - K_hi, b_op)
                    eG = gl.exp(G)
                    dc = d_cache_ptr + slot * stride_dc_slot + hv * stride_dc_h
                    head = state_ptr + slot * stride_state_slot + hv * stride_state_h
                    for c in range(CHUNKS):
                        v0 = v_first + c * BLOCK_V
                        offs_v = v0 + gl.arange(0, BLOCK_V, layout=rows_l)
                        mask_v = offs_v < head_v_dim
                        ptrs = head + offs_v[:, None] * stride_state_row + offs_k[None, :]
                        if EVEN:
                            S = gl.load(ptrs).to(gl.float32) * eG
                        else:
                            S = gl.load(ptrs, mask=mask_v[:, None] & mask_k[None, :], other=0.0).to(gl.float32) * eG
                        offs_vd = v0 + gl.arange(0, BLOCK_V, layout=gl.SliceLayout(1, dring))
                        D = gl.load(dc + offs_l_d[None, :] * stride_dc_l + offs_vd[:, None],
                                    mask=(offs_vd < head_v_dim)[:, None] & (offs_l_d < w)[None, :],
                                    other=0.0).to(gl.float32) * decay_d[None, :]
                        D_hi = _tf32_head(D)
                        D_hi_op = gl.convert_layout(D_hi, a_op)
                        S = mma_v2(D_hi_op, K_op, S, input_precision="tf32")
                        S = mma_v2(gl.convert_layout(D - D_hi, a_op), K_op, S, input_precision="tf32")
                        if not EXACT_K:
                            S = mma_v2(D_hi_op, K_lo_op, S, input_precision="tf32")
                        # This token's delta rule on the folded state.
                        v = gl.load(v_ptr + pid_b * stride_v_b + hv * stride_v_h + offs_v, mask=mask_v,
                                    other=0.0).to(gl.float32)
                        S = alpha * S
                        d = beta * (v - gl.sum(S * k[None, :], axis=1))
                        S += d[:, None] * k[None, :]
                        o = gl.sum(S * q[None, :], axis=1)
                        gl.store(out_ptr + pid_b * stride_out_b + hv * stride_out_h + offs_v, o.to(out_ptr.dtype.element_ty),
                                 mask=mask_v)
                        if EVEN:
                            gl.store(ptrs, S.to(state_ptr.dtype.element_ty))
                        else:
                            gl.store(ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_v[:, None] & mask_k[None, :])


class GluonFold:
    """A launcher that runs a family's Gluon fold kernel in place of the package's fold
    launch (the other launches pass on to Triton's JIT). ``rows``: a block of state rows
    (16 or 32); warps split the state's columns."""

    def __init__(self, family: str, rows=16, num_warps=8, heads_per_prog=1, row_block=1, prefetch=True):
        self.family, self.rows, self.num_warps, self.hpp, self.row_block, self.prefetch = (
            family, rows, num_warps, heads_per_prog, row_block, prefetch)
        self.launches = 0

    def label(self) -> str:
        return (f"gluon ({self.rows}, {self.num_warps}) heads {self.hpp} rows {self.row_block}"
                + (f" prefetch {int(self.prefetch)}" if self.family == "mamba2" else ""))

    def takes(self, kernel, kwargs) -> bool:
        """Whether a launch of ``kernel`` is this family's fold launch."""
        if self.family == "mamba2":
            return kernel is replay_fold._replay_fold_kernel
        return kernel is gdn_replay._gdn_replay_kernel and kwargs["MODE"] == gdn_replay.FOLD.value

    def __call__(self, kernel, grid, kwargs) -> bool:
        if not self.takes(kernel, kwargs):
            return False
        fn, programs, args = self.launch(kwargs)
        fn[programs](**args)
        self.launches += 1
        return True

    def launch(self, kwargs: dict) -> tuple:
        """``(kernel, grid, arguments with num_warps)`` of the Gluon launch that takes the
        package fold launch with arguments ``kwargs``."""
        if self.family == "mamba2":
            fn, P, H, N = _gluon_fold_kernel, kwargs["headdim"], kwargs["nheads"], kwargs["BLOCK_N"]
            extra = dict(BLOCK_P=self.rows, PREFETCH=self.prefetch, EXACT_B=kwargs["EXACT_B"],
                         EVEN=P % self.rows == 0 and kwargs["dstate"] == N)
        else:
            assert not kwargs["V_INNER"], "K-innermost state pools only"
            fn, P, H, N = (_gluon_gdn_fold_kernel, kwargs["head_v_dim"], kwargs["num_v_heads"],
                           max(16, kwargs["BLOCK_K"]))
            extra = dict(BLOCK_V=self.rows, BLOCK_K=N,
                         EXACT_K=kwargs["k_cache_ptr"].dtype in (torch.bfloat16, torch.float16),
                         EVEN=P % self.rows == 0 and kwargs["head_k_dim"] == N)
        chunks = triton.cdiv(P, self.rows)
        nw = max(1, min(self.num_warps, N // 8))  # at least an MMA tile's 8 columns a warp
        args = {n: kwargs[n] for n in fn.arg_names if n in kwargs}
        args.update(extra, BLOCK_L=max(16, kwargs["BLOCK_L"]), CHUNKS=chunks, HEADS_PER_PROG=self.hpp,
                    NUM_WARPS=nw, ROW_BLOCK=self.row_block, num_warps=nw)
        return fn, (1, triton.cdiv(H, self.hpp), triton.cdiv(kwargs["batch"], self.row_block)), args


def check_mamba2(fold: GluonFold) -> str:
    """The package's multi-cycle Mamba2 scenarios with the Gluon fold in place."""
    sys.path.insert(0, str(REPO / "tests"))
    from mamba2_harness import Scenario, run_replay  # noqa: E402

    from trtllm_replayssm.cache import Mamba2Geometry

    with launcher_in_front(fold):
        for geom, L in [(Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2), 4),
                        (Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=1), 16),
                        (Mamba2Geometry(nheads=2, headdim=40, dstate=16, ngroups=1), 16),  # masked tiles
                        (Mamba2Geometry(nheads=4, headdim=64, dstate=128, ngroups=2), 16)]:
            for sd, act in ((torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                            (torch.float32, torch.bfloat16)):
                res = run_replay(Scenario(geom, L, state_dtype=sd, act_dtype=act, seed=31), 3 * L + 2,
                                 force_flush_at={1: [2], 6: [0, 3]})
                assert min(f for f in res.flushes_per_row if f) >= 3
    assert fold.launches > 0
    return "ok"


def check_gdn(fold: GluonFold) -> str:
    """The package's multi-cycle GDN scenarios with the Gluon fold in place."""
    sys.path.insert(0, str(REPO / "tests"))
    from gdn_harness import GDNScenario, run_gdn_replay  # noqa: E402

    from trtllm_replayssm.cache import GDNGeometry

    with launcher_in_front(fold):
        for geom, L in [(GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16), 4),
                        (GDNGeometry(1, 3, 24, 40), 16),  # masked tiles
                        (GDNGeometry(2, 8, 128, 128), 16)]:
            for sd, act, ring in ((torch.float32, torch.float32, torch.float32),
                                  (torch.bfloat16, torch.bfloat16, torch.float32),
                                  (torch.float32, torch.float32, torch.bfloat16)):
                res = run_gdn_replay(GDNScenario(geom, L, state_dtype=sd, act_dtype=act, ring_dtype=ring, seed=33),
                                     3 * L + 2, force_flush_at={1: [2], 6: [0, 3]})
                assert min(f for f in res.flushes_per_row if f) >= 3
    assert fold.launches > 0
    return "ok"


FAMILIES = {
    "mamba2": dict(models=["nemotron-3-nano-4b", "nemotron-3-super"], check=check_mamba2,
                   checked=[GluonFold("mamba2"), GluonFold("mamba2", 16, 4, 4, 2, False)],
                   variants=[GluonFold("mamba2", *v) for v in [(16, 8), (16, 4), (16, 2), (16, 2, 1, 1, False),
                                                                (16, 1), (16, 2, 4, 2), (16, 2, 8, 2), (16, 2, 16, 2),
                                                                (16, 2, 4, 4), (16, 2, 4, 8), (16, 4, 4, 2)]]),
    "gdn": dict(models=["qwen3.5-122b", "qwen3.5-4b"], check=check_gdn,
                checked=[GluonFold("gdn"), GluonFold("gdn", 16, 4, 4, 2)],
                variants=[GluonFold("gdn", *v) for v in [(16, 8), (16, 4), (16, 2), (16, 2, 2), (16, 2, 4, 2),
                                                          (16, 2, 8, 2), (16, 4, 2), (16, 4, 4, 2), (32, 8), (32, 4)]]),
}


def compile_for_sm90(family: str, fold) -> str:
    """ptxas's registers and spills of ``fold``'s kernel for sm_90 (no GPU needed;
    ``kernel_registers.registers``: fp32 state and rings, bf16 activations), 128 state
    columns, whole tiles (the Mamba2 B ring exact in TF32)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import kernel_registers  # noqa: E402

    if family == "mamba2":  # Super's heads: 64 rows
        fn, rows, head_rows = _gluon_fold_kernel, fold.rows, 64
        cx = dict(HAS_D=True, HAS_Z=True, HAS_DT_BIAS=True, DT_SOFTPLUS=True, BLOCK_P=rows, BLOCK_N=128,
                  HEADS_PER_PROG=fold.hpp, PREFETCH=fold.prefetch, EXACT_B=True)
    else:  # Qwen3.5's value heads: 128 rows
        fn, rows, head_rows = _gluon_gdn_fold_kernel, fold.rows, 128
        cx = dict(USE_QK_L2NORM=True, BLOCK_V=rows, BLOCK_K=128, HEADS_PER_PROG=fold.hpp, EXACT_K=False)
    cx.update(HAS_SLOT_IDX=True, HAS_FORCE_FLUSH=False, BLOCK_L=16, CHUNKS=head_rows // rows,
              NUM_WARPS=fold.num_warps, EVEN=True, ROW_BLOCK=fold.row_block)
    return kernel_registers.registers(fn, cx, fold.num_warps, "fp32")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", nargs="+", default=list(FAMILIES), choices=list(FAMILIES))
    ap.add_argument("--cases", nargs="+", default=["fp32:128", "fp32:512", "bf16:512"], help="state_dtype:batch")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gluon_folds.json"))
    ap.add_argument("--compile-only", action="store_true", help="no GPU: each variant's kernel compiled for sm_90")
    args = ap.parse_args()
    if args.compile_only:
        for family in args.families:
            for fold in FAMILIES[family]["variants"]:
                print(family, fold.label(), compile_for_sm90(family, fold), flush=True)
        return
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    log = ProbeLog(args.out)
    for family in args.families:
        fam = FAMILIES[family]
        for fold in fam["checked"]:
            try:  # a failure is reported, and the variants still timed (a wrong kernel's time is a bound)
                verdict = fam["check"](fold)
            except Exception as e:  # noqa: BLE001 (wrong results and compile errors alike)
                verdict = f"FAILED: {type(e).__name__}: {str(e)[:300]}"
            print("correctness", family, fold.label(), verdict, flush=True)
            log.add(family=family, variant=fold.label(), correctness=verdict)
        for name in fam["models"]:
            for spec in args.cases:
                sd, batch = spec.split(":")
                rig = make_model_rig(name, int(batch), 16, dtypes[sd])
                base = rig.time_cycle_us(rig.baseline_launch(), args.replays)  # the faster baseline
                for fold in [None] + fam["variants"]:
                    label = fold.label() if fold else "package fold (tuned)"
                    try:
                        with launcher_in_front(fold):
                            us, flush, nonflush = time_cycle_and_steps(rig, Launch("output_only"), args.replays)
                    except Exception as e:  # a variant the compiler rejects
                        print(name, spec, label, type(e).__name__, e, flush=True)
                        continue
                    log.add(family=family, model=name, state_dtype=sd, batch=int(batch), L=16, variant=label,
                            us_per_step=round(us, 2), baseline_us_per_step=round(base, 2), speedup=round(base / us, 3),
                            flush_us=round(flush, 1), nonflush_us=round(nonflush, 1))
                del rig
                torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
