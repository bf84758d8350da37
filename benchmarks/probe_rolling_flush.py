#!/usr/bin/env python3
"""Mamba2 with a rolling flush: every step folds 1/L of the state, no flush step, no fold launch.

Where the cycle's time goes (benchmarks/README.md, "Open performance work"): the
``output_only`` route's non-flush step reads the checkpoint at ~0.52-0.55 of a standard
step, but its flush step takes 1.5-1.7x one (H200, fp32, batch >= 128): the fold is a
launch of its own, sized to cost nothing on the 15 steps where no row flushes, and its
programs are latency-bound loops. The bytes allow ~1.05x.

A Mamba2 state's rows are independent recurrences (``S[p, :]`` sees only ``x[p]``, ``dt``
and ``B``), and so are its heads, so parts of a slot's state may keep checkpoints at
different positions. Here a part folds when ``(write_pos + phase) % L == L - 1``, so at
every step 1/L of every slot's state folds; the ring is circular (``write_pos`` advances
mod L and the step's token is always appended, at ``write_pos``), and a part's window is
its last ``min((write_pos + phase) % L, fill)`` ring entries plus this token, ``fill`` the
tokens cached since the slot's reset or last forced flush (at most L - 1). The cache is
the package's (checkpoint, x / dt / B rings) plus that cursor. Each step reads the
checkpoint once and writes 1/L of it:

    y = exp(A T) (S_0 C) + sum_{j in window} coef_j (B_j . C) x_j + dt (B . C) x
    a folding part: S_0 <- exp(A T) S_0 + sum_{j in window} coef_j x_j B_j^T + dt x B^T

with ``coef_j = dt_j exp(A (dt of the tokens after j, this one included))`` and ``T`` the
dt summed over the window. Two forms:
- ``rows``: the phase of state row ``p`` is ``p`` (a program's tile holds rows of every
  window; its folding rows, one in L, are a few vectors summed on the ring's walk);
- ``heads``: the phase of head ``h`` is ``h`` (a program's rows share one window; a
  folding program rebuilds its tile a few rows at a time with the ``state_and_output``
  walk, the others take the ``output_only`` one).
A forced flush folds all of a slot's state and empties its windows.

This probe holds that step (one launch a layer-step) and its cursor advance, checks them
against an fp64 recurrence over several cycles (``--check``; on the CPU in the
interpreter), and times whole cycles beside the dispatcher table's standard kernel and
``output_only`` route (in phase and staggered), on the GPU:

    python benchmarks/probe_rolling_flush.py --check              # numerics, tiny shapes
    python benchmarks/probe_rolling_flush.py --out benchmarks/results/rolling_flush.json

Measured on an H100 (``rolling_flush_h100.json``; benchmarks/README.md, "Open performance
work"): both forms lose to the package's route (fp32, batch 128: 1.44-1.53x against
1.71-1.73x). The heads form's folds cost its step 43-52 us, where the package's fold launch
costs a staggered step 27-28 us.
"""

from __future__ import annotations

import argparse
import itertools
from typing import Dict, Optional

import torch
import triton
import triton.language as tl

from trtllm_replayssm.ops.common import dim_mask, even_rows_and_cols, load_slot, store_nan_output
from trtllm_replayssm.ops.mamba2._common import load_dt, load_output_terms, ring_args, store_output
from trtllm_replayssm.ops.mamba2.naive import mamba2_step_ref
from trtllm_replayssm.ops.mamba2.replay import _step_loads
from trtllm_replayssm.ops.mamba2.step_inputs import check_state_pool, parse_mamba2_step


@triton.jit
def _window_entry(j, age, w, carry, A, dtc_base, xc_base, Bc_base, stride_xc_l, stride_Bc_l, offs_p, offs_n, mask_p,
                  mask_n, L: tl.constexpr):
    """Entry ``j`` of a window walked newest first (zeros past its ``age`` entries): its dt,
    weight ``coef_j = dt_j exp(A carry)``, x rows ``offs_p`` and B; ``carry`` (returned
    with ``dt_j`` added) is the dt of the tokens newer than ``j``, this one included."""
    m = j < age
    idx = (w - 1 - j + 2 * L) % L  # entry j is j + 1 steps old
    dt_j = tl.load(dtc_base + idx, mask=m, other=0.0)
    coef = dt_j * tl.exp(tl.minimum(A * carry, 0.0))
    B_j = tl.load(Bc_base + idx * stride_Bc_l + offs_n, mask=mask_n & m, other=0.0).to(tl.float32)
    x_j = tl.load(xc_base + idx * stride_xc_l + offs_p, mask=mask_p & m, other=0.0).to(tl.float32)
    return carry + dt_j, dt_j, coef, x_j, B_j


@triton.jit
def _fold_row(state_row, xc_row, dtc_base, Bc_base, stride_xc_l, stride_Bc_l, w, age, A, dt, x_p, Bf, offs_n, mask_n,
              L: tl.constexpr, BLOCK_L: tl.constexpr, CHUNK: tl.constexpr):
    """Fold one state row ``[N]``: its ``age`` newest ring entries and this token, onto its
    checkpoint row, stored in place (the ring walked as :func:`_window_entry` walks it)."""
    carry = dt
    acc = (dt * x_p) * Bf
    for c in range(0, BLOCK_L // CHUNK):
        if c * CHUNK < age:
            for i in tl.static_range(CHUNK):
                carry, dt_j, coef, x_j, B_j = _window_entry(c * CHUNK + i, age, w, carry, A, dtc_base, xc_row, Bc_base,
                                                            stride_xc_l, stride_Bc_l, 0, offs_n, True, mask_n, L)
                acc += (coef * x_j) * B_j
    s0 = tl.load(state_row + offs_n, mask=mask_n, other=0.0).to(tl.float32)
    tl.store(state_row + offs_n, (tl.exp(tl.minimum(A * carry, 0.0)) * s0 + acc).to(state_row.dtype.element_ty),
             mask=mask_n)


@triton.jit(do_not_specialize=["num_slots"])
def _rolling_step_kernel(
    state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, fill_ptr, force_flush_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, headdim, dstate, heads_per_group, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p,
    stride_xc_slot, stride_xc_h, stride_xc_l, stride_dtc_slot, stride_dtc_h, stride_Bc_slot, stride_Bc_g, stride_Bc_l,
    stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h, stride_B_b, stride_B_g, stride_C_b, stride_C_g,
    stride_D_h, stride_D_p, stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr, L: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr, CHUNK: tl.constexpr,
    FOLDS: tl.constexpr, EVEN_ROWS: tl.constexpr, EVEN_COLS: tl.constexpr, BY_HEAD: tl.constexpr = False,
    FOLD_ROWS: tl.constexpr = 8, FOLDING: tl.constexpr = True,
):
    """One rolling-flush step; ``BY_HEAD`` picks the form.

    ``rows``: state row ``p`` folds when ``(write_pos + p) % L == L - 1``; a program's rows
    have their own windows, and its folding rows (FOLDS at most) are summed on the ring's
    walk. ``heads``: head ``h`` folds when ``(write_pos + h) % L == L - 1``; a program's rows
    share one window, and a folding program rebuilds its tile FOLD_ROWS rows at a time (the
    ``state_and_output`` walk: fp32 FMAs, one rank-1 update an entry) and stores it, the
    others take the ``output_only`` walk. ``FOLDING`` off (heads): no head folds, a timing of
    the reading programs alone (the states are then wrong)."""
    pid_p = tl.program_id(0)
    pid_h = tl.program_id(1)
    pid_b = tl.program_id(2)
    p0 = pid_p * BLOCK_P
    offs_p = p0 + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p = dim_mask(offs_p, headdim, EVEN_ROWS)  # constant masks keep the state's loads 16-byte vectors
    mask_n = dim_mask(offs_n, dstate, EVEN_COLS)
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    if is_pad:
        return
    w = tl.load(write_pos_ptr + slot)
    fill = tl.load(fill_ptr + slot)
    if is_bad | (w < 0) | (w >= L) | (fill < 0) | (fill >= L):
        store_nan_output(out_ptr, offs_p, mask_p, pid_b, pid_h, stride_out_b, stride_out_h)
        return
    force = False
    if HAS_FORCE_FLUSH:
        force = tl.load(force_flush_ptr + pid_b) != 0

    if BY_HEAD:
        phase = (w + pid_h) % L
        fold = ((phase == L - 1) & FOLDING) | force
        age = tl.minimum(phase, fill)  # ring entries in the head's window

        g = pid_h // heads_per_group
        head_state = state_ptr + slot * stride_state_slot + pid_h * stride_state_h
        C = tl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_n, mask=mask_n, other=0.0).to(tl.float32)
        x = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p, other=0.0)
        dt = load_dt(dt_ptr, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h, HAS_DT_BIAS,
                     DT_SOFTPLUS)
        A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
        B = tl.load(B_ptr + pid_b * stride_B_b + g * stride_B_g + offs_n, mask=mask_n, other=0.0)
        Bf = B.to(tl.float32)
        dtc_base = dt_cache_ptr + slot * stride_dtc_slot + pid_h * stride_dtc_h
        xc_base = x_cache_ptr + slot * stride_xc_slot + pid_h * stride_xc_h
        Bc_base = B_cache_ptr + slot * stride_Bc_slot + g * stride_Bc_g
        # The window's decay from its dt first, so the walk adds onto exp(A T) S_0 (one tile live).
        offs_l = tl.arange(0, BLOCK_L)
        T = dt + tl.sum(tl.load(dtc_base + (w - 1 - offs_l + 2 * L) % L, mask=offs_l < age, other=0.0), axis=0)
        decay = tl.exp(tl.minimum(A * T, 0.0))
        if fold:
            # FOLD_ROWS rows at a time: a whole tile rebuilt by rank-1 updates would set the
            # launch's registers (255 at 32 rows on one warp) for the 15 programs in 16 that only
            # read.
            for sub in range(0, BLOCK_P // FOLD_ROWS):
                offs_q = p0 + sub * FOLD_ROWS + tl.arange(0, FOLD_ROWS)
                mask_q = dim_mask(offs_q, headdim, EVEN_ROWS)
                ptrs = head_state + offs_q[:, None] * stride_state_p + offs_n[None, :]
                x_q = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_q, mask=mask_q, other=0.0)
                x_qf = x_q.to(tl.float32)
                S = (decay * tl.load(ptrs, mask=mask_q[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
                     + (dt * x_qf)[:, None] * Bf[None, :])
                carry = dt  # dt of the tokens newer than the next entry, this one included
                for c in range(0, BLOCK_L // CHUNK):
                    if c * CHUNK < age:
                        for i in tl.static_range(CHUNK):
                            carry, dt_j, coef, x_j, B_j = _window_entry(
                                c * CHUNK + i, age, w, carry, A, dtc_base, xc_base, Bc_base, stride_xc_l, stride_Bc_l,
                                offs_q, offs_n, mask_q, mask_n, L)
                            S += (coef * x_j)[:, None] * B_j[None, :]
                tl.store(ptrs, S.to(state_ptr.dtype.element_ty), mask=mask_q[:, None] & mask_n[None, :])
                D_q, z_q = load_output_terms(offs_q, mask_q, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p,
                                             stride_z_b, stride_z_h, HAS_D, HAS_Z)
                store_output(tl.sum(S * C[None, :], axis=1), x_qf, D_q, z_q, offs_q, mask_q, pid_b, pid_h, out_ptr,
                             stride_out_b, stride_out_h, HAS_D, HAS_Z)
        else:
            S0 = tl.load(head_state + offs_p[:, None] * stride_state_p + offs_n[None, :],
                         mask=mask_p[:, None] & mask_n[None, :], other=0.0).to(tl.float32)
            D, z = load_output_terms(offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr, stride_D_h, stride_D_p, stride_z_b,
                                     stride_z_h, HAS_D, HAS_Z)
            xf = x.to(tl.float32)
            y = decay * tl.sum(S0 * C[None, :], axis=1) + (dt * tl.sum(Bf * C, axis=0)) * xf
            carry = dt
            for c in range(0, BLOCK_L // CHUNK):
                if c * CHUNK < age:
                    for i in tl.static_range(CHUNK):
                        carry, dt_j, coef, x_j, B_j = _window_entry(c * CHUNK + i, age, w, carry, A, dtc_base, xc_base,
                                                                    Bc_base, stride_xc_l, stride_Bc_l, offs_p, offs_n,
                                                                    mask_p, mask_n, L)
                        y += (coef * tl.sum(B_j * C, axis=0)) * x_j
            store_output(y, xf, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b, stride_out_h, HAS_D, HAS_Z)

    else:
        head_state = state_ptr + slot * stride_state_slot + pid_h * stride_state_h
        g, _, _, S0, C, x, xf, dt, A, B, Bf, D, z = _step_loads(
            state_ptr, slot, pid_b, pid_h, heads_per_group, mask_p, mask_n, offs_p, offs_n, x_ptr, dt_ptr, A_ptr,
            B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, stride_state_slot, stride_state_h, stride_state_p, stride_x_b,
            stride_x_h, stride_dt_b, stride_dt_h, stride_A_h, stride_B_b, stride_B_g, stride_C_b, stride_C_g,
            stride_D_h, stride_D_p, stride_z_b, stride_z_h, stride_dtb_h, HAS_D, HAS_Z, HAS_DT_BIAS, DT_SOFTPLUS)

        # The ring newest first: entry l is l + 1 steps old, at (w - 1 - l) mod L; walked in
        # chunks of CHUNK entries (a chunk's loads issue together; the tiles stay small), with
        # the block's folding rows (``(w + p) % L == L - 1``, FOLDS of them at most) summed on the
        # way: their window is the whole ring.
        dtc_base = dt_cache_ptr + slot * stride_dtc_slot + pid_h * stride_dtc_h
        xc_base = x_cache_ptr + slot * stride_xc_slot + pid_h * stride_xc_h
        Bc_base = B_cache_ptr + slot * stride_Bc_slot + g * stride_Bc_g
        age = tl.minimum((w + offs_p) % L, fill)  # ring entries in each row's window
        fold_r = (2 * L - 1 - w - p0 % L) % L + tl.arange(0, FOLDS) * L  # the folding rows, in the block
        fold_ok = (fold_r < BLOCK_P) & (p0 + fold_r < headdim) & (not force)
        # S_0 C first, decayed entry by entry over each row's window during the walk: a row sum
        # left for after the walk keeps the checkpoint tile in registers across it, and a
        # [P, L] tile of the windows' dt sums doubles the launch's registers.
        s0c = tl.exp(tl.minimum(A * dt, 0.0)) * tl.sum(S0 * C[None, :], axis=1)
        y = (dt * tl.sum(Bf * C, axis=0)) * xf
        carry = dt  # dt of the tokens newer than the next chunk, this one included
        acc = tl.zeros([FOLDS, BLOCK_N], tl.float32)
        for c in range(0, BLOCK_L // CHUNK):
            if c * CHUNK < fill:
                for i in tl.static_range(CHUNK):  # entry by entry: vectors in y's layout, no [P, L] tiles
                    j = c * CHUNK + i
                    carry, dt_j, coef, x_j, B_j = _window_entry(j, fill, w, carry, A, dtc_base, xc_base, Bc_base,
                                                                stride_xc_l, stride_Bc_l, offs_p, offs_n, mask_p,
                                                                mask_n, L)
                    in_window = j < age
                    s0c = tl.where(in_window, s0c * tl.exp(tl.minimum(A * dt_j, 0.0)), s0c)
                    y += tl.where(in_window, (coef * tl.sum(B_j * C, axis=0)) * x_j, 0.0)
                    x_fold = tl.load(xc_base + ((w - 1 - j + 2 * L) % L) * stride_xc_l + p0 + fold_r,
                                     mask=fold_ok & (j < fill), other=0.0).to(tl.float32)
                    acc += (coef * x_fold)[:, None] * B_j[None, :]
        y += s0c

        # Every thread's checkpoint loads are done before a folding row is stored over them.
        tl.debug_barrier()
        if force:
            for r in range(0, BLOCK_P):
                if p0 + r < headdim:
                    _fold_row(head_state + (p0 + r) * stride_state_p, xc_base + p0 + r, dtc_base, Bc_base,
                              stride_xc_l, stride_Bc_l, w, tl.minimum((w + p0 + r) % L, fill), A, dt,
                              tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + p0 + r).to(tl.float32), Bf,
                              offs_n, mask_n, L, BLOCK_L, CHUNK)
        else:
            fold_ptrs = head_state + (p0 + fold_r)[:, None] * stride_state_p + offs_n[None, :]
            fold_mask = fold_ok[:, None] & mask_n[None, :]
            x_f = tl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + p0 + fold_r, mask=fold_ok,
                          other=0.0).to(tl.float32)
            s0 = tl.load(fold_ptrs, mask=fold_mask, other=0.0).to(tl.float32)
            s_new = tl.exp(tl.minimum(A * carry, 0.0)) * s0 + acc + (dt * x_f)[:, None] * Bf[None, :]
            tl.store(fold_ptrs, s_new.to(state_ptr.dtype.element_ty), mask=fold_mask)

    # The token goes into the ring at w (every step: the ring is circular); no row's window
    # reaches entry w, which is L steps old.
    tl.store(xc_base + w * stride_xc_l + offs_p, x.to(x_cache_ptr.dtype.element_ty), mask=mask_p)
    if pid_p == 0:
        tl.store(dtc_base + w, dt)
        if pid_h % heads_per_group == 0:
            tl.store(Bc_base + w * stride_Bc_l + offs_n, B.to(B_cache_ptr.dtype.element_ty), mask=mask_n)
    if not BY_HEAD:  # (the heads form stores its outputs in its branches)
        store_output(y, xf, D, z, offs_p, mask_p, pid_b, pid_h, out_ptr, stride_out_b, stride_out_h, HAS_D, HAS_Z)


def rolling_step(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None,
                 pad_slot_id=-1, out=None, *, x_cache, dt_cache, B_cache, write_pos, fill, force_flush=None,
                 block_p: int = 32, num_warps: int = 1, chunk: int = 4, by_head: bool = False,
                 fold_rows: Optional[int] = None, folding: bool = True) -> torch.Tensor:
    """One rolling-flush Mamba2 step for a batch (one layer); the package's step arguments
    and ring; ``fill (slots,)`` int32 in ``[0, L)``. Cursors are advanced once a step, after
    every layer: :func:`advance_rolling`."""
    step = parse_mamba2_step(x, dt, A, B, C, D, z, dt_bias, dt_softplus, state_batch_indices, pad_slot_id, out)
    check_state_pool("state", state, step)
    L = x_cache.shape[2]
    block_l = max(2, triton.next_power_of_2(L))
    _rolling_step_kernel[(triton.cdiv(step.headdim, block_p), step.nheads, step.batch)](
        state, x_cache, dt_cache, B_cache, write_pos, fill, force_flush if force_flush is not None else write_pos,
        num_slots=state.shape[0], headdim=step.headdim, dstate=step.dstate, heads_per_group=step.nheads // step.ngroups,
        stride_state_slot=state.stride(0), stride_state_h=state.stride(1), stride_state_p=state.stride(2),
        **{k: v for k, v in ring_args(x_cache, dt_cache, B_cache).items() if k.startswith("stride_")},
        **step.kernel_args(),
        HAS_FORCE_FLUSH=force_flush is not None, L=L, BLOCK_P=block_p,
        BLOCK_N=triton.next_power_of_2(step.dstate), BLOCK_L=block_l, CHUNK=min(chunk, block_l),
        FOLDS=max(2, triton.next_power_of_2(triton.cdiv(block_p, L))), BY_HEAD=by_head,
        FOLD_ROWS=min(fold_rows or (8 if num_warps > 1 else 4), block_p), FOLDING=folding,
        **even_rows_and_cols(step.headdim, block_p, step.dstate, triton.next_power_of_2(step.dstate)),
        num_warps=num_warps)
    return step.out


@triton.jit
def _advance_kernel(write_pos_ptr, fill_ptr, slot_idx_ptr, force_flush_ptr, batch, pad_slot_id, L: tl.constexpr,
                    HAS_FORCE_FLUSH: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    slot = tl.load(slot_idx_ptr + rows, mask=rows < batch, other=pad_slot_id).to(tl.int64)
    ok = (rows < batch) & (slot != pad_slot_id)
    w = tl.load(write_pos_ptr + slot, mask=ok, other=0)
    n = tl.minimum(tl.load(fill_ptr + slot, mask=ok, other=0) + 1, L - 1)
    if HAS_FORCE_FLUSH:
        n = tl.where(tl.load(force_flush_ptr + rows, mask=ok, other=0) != 0, 0, n)
    tl.store(write_pos_ptr + slot, (w + 1) % L, mask=ok)
    tl.store(fill_ptr + slot, n, mask=ok)


def advance_rolling(write_pos: torch.Tensor, fill: torch.Tensor, state_batch_indices: torch.Tensor, buffer_len: int,
                    force_flush: Optional[torch.Tensor] = None, pad_slot_id: int = -1) -> None:
    """After a step (every layer ran), for the batch's rows but padding: ``write_pos`` one on
    (mod L), ``fill`` one more (at most L - 1) or 0 where the row was force-flushed. One
    launch, as the package's cursor advance (capturable)."""
    batch, block = state_batch_indices.numel(), 128
    _advance_kernel[(triton.cdiv(batch, block),)](write_pos, fill, state_batch_indices,
                                                  force_flush if force_flush is not None else write_pos, batch,
                                                  pad_slot_id, L=buffer_len, HAS_FORCE_FLUSH=force_flush is not None,
                                                  BLOCK=block)


# ---- numerics: against an fp64 recurrence ------------------------------------------------------

def check(headdim: int = 16, buffer_len: int = 4, block_p: int = 8, cycles: int = 3, state_dtype=torch.float32,
          corrupt: bool = False, device: str = "cpu", seed: int = 0, by_head: bool = False) -> Dict[str, float]:
    """Run ``cycles`` cycles (plus a forced flush of one batch row mid-way and of every row at
    the end) on a small pool with staggered cursors, a padding row and unused slots; returns
    the largest output and final-state errors against an fp64 recurrence, and whether the
    slots the batch does not use stayed bit-identical. ``corrupt``: after the first cycle,
    one slot's cached x of the last token is changed in every head, inside the window of
    every part that has not folded it yet (the errors must then show it)."""
    g = torch.Generator().manual_seed(seed)
    H, P, N, G, L, slots_n = 4, headdim, 16, 2, buffer_len, 6
    act = torch.float32

    def rnd(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g) * scale).to(device)

    slot_idx = torch.tensor([3, -1, 0, 5], dtype=torch.int32, device=device)
    real = slot_idx[slot_idx >= 0].long()
    Bsz = slot_idx.numel()
    state = rnd(slots_n, H, P, N).to(state_dtype)
    x_cache = rnd(slots_n, H, L, P).to(act)
    dt_cache = rnd(slots_n, H, L).abs().float()
    B_cache = rnd(slots_n, G, L, N).to(act)
    write_pos = torch.tensor([1, 2, 0, 3, 1, 2], dtype=torch.int32, device=device) % L  # staggered
    fill = torch.zeros(slots_n, dtype=torch.int32, device=device)  # every slot just reset
    untouched = {k: t.clone() for k, t in dict(state=state, x=x_cache, dt=dt_cache, B=B_cache).items()}
    ref = state.double().clone()
    A, D, dt_bias = -(torch.rand(H, generator=g) + 0.5).to(device), rnd(H), rnd(H, scale=0.5)
    err_y = 0.0
    steps = cycles * L + 1
    for t in range(steps):
        x, dt, B, C, z = rnd(Bsz, H, P), rnd(Bsz, H), rnd(Bsz, G, N), rnd(Bsz, G, N), rnd(Bsz, H, P)
        force = torch.zeros(Bsz, dtype=torch.int8, device=device)
        if t == L + 1:
            force[2] = 1
        if t == steps - 1:
            force.fill_(1)
        out = torch.empty(Bsz, H, P, device=device, dtype=act)
        rolling_step(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=True, state_batch_indices=slot_idx,
                     out=out, x_cache=x_cache, dt_cache=dt_cache, B_cache=B_cache, write_pos=write_pos, fill=fill,
                     force_flush=force, block_p=block_p, by_head=by_head)
        rows = (slot_idx >= 0).nonzero().flatten()
        new, y = mamba2_step_ref(ref[real], x[rows].double(), dt[rows].double(), A, B[rows], C[rows], D=D, z=z[rows],
                                 dt_bias=dt_bias, dt_softplus=True)
        ref[real] = new
        err_y = max(err_y, (out[rows].double() - y).abs().max().item())
        advance_rolling(write_pos, fill, slot_idx, L, force)
        if corrupt and t == L:
            # The last token's entry, in the window of every row (head) that did not fold it.
            x_cache[real[0], :, (int(write_pos[real[0]]) - 1) % L] += 1.0
    unused = torch.ones(slots_n, dtype=torch.bool, device=device)
    unused[real] = False
    same = all(torch.equal(t[unused], untouched[k][unused]) for k, t in
               dict(state=state, x=x_cache, dt=dt_cache, B=B_cache).items())
    return dict(output_error=err_y, state_error=(state[real].double() - ref[real]).abs().max().item(),
                unused_slots_unchanged=same)


# ---- timing on the GPU ------------------------------------------------------------------------

# (block_p, num_warps) timed for each form: the rows form holds 124-166 registers a thread
# (ptxas, sm_90, fp32) where the package's non-flush launch holds 64-96, so only two.
CANDIDATES = {"rows": [(16, 1), (32, 4)], "heads": [(16, 1), (32, 1), (32, 2), (32, 4), (64, 4)]}


def time_rolling_cycle_us(rig, block_p: int, num_warps: int, fill: torch.Tensor, replays: int,
                          by_head: bool = False, folding: bool = True) -> float:
    """Median us a layer-step over whole cycles of the rolling step (cursors staggered, as in
    a steady state: every slot's ring full). ``folding`` off (heads form): no head folds,
    what the reading programs cost alone (the states are then wrong)."""
    from trtllm_replayssm.benchmarking.rig import even_phases
    from trtllm_replayssm.benchmarking.timing import capture, time_graph_ms

    L, cache = rig.case.buffer_len, rig.cache

    def cycle():
        for _ in range(L):
            for layer in range(rig.n_layers):
                rolling_step(cache.ssm_state[layer], **rig.step, **cache.ring_kwargs(layer) | dict(fill=fill),
                             block_p=block_p, num_warps=num_warps, by_head=by_head, folding=folding)
            advance_rolling(cache.write_pos, fill, rig.slot_idx, L)

    saved = cache.write_pos.clone()
    cache.write_pos.copy_(even_phases(cache.write_pos.numel(), L, seed=0).to(cache.write_pos.dtype))
    fill.fill_(L - 1)
    ms = time_graph_ms(capture(cycle), replays)
    cache.write_pos.copy_(saved)
    return ms * 1e3 / (L * rig.n_layers)


def rolling_label(form: str, block_p: int, num_warps: int) -> str:
    """A rolling config's name in the records: ``rolling heads 32x1``."""
    return f"rolling {form} {block_p}x{num_warps}"


def main() -> None:
    from trtllm_replayssm.benchmarking.probes import SkipLaunches, add_case_args, case_rigs, is_fold_launch
    from trtllm_replayssm.benchmarking.records import ProbeLog
    from trtllm_replayssm.benchmarking.rig import Launch, median_of_rounds, time_flush_and_nonflush_steps
    from trtllm_replayssm.ops.launch import device_table_tag, launcher_in_front

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-nano-4b", "nemotron-3-super"], [8, 32, 128, 512], "rolling_flush.json")
    ap.add_argument("--check", action="store_true", help="numerics against fp64 on small shapes, then exit")
    args = ap.parse_args()
    if args.check:
        device = "cuda" if torch.cuda.is_available() else "cpu"
        for (hd, L, bp), by_head in itertools.product([(16, 4, 8), (12, 8, 4), (16, 4, 16)], (False, True)):
            print(dict(headdim=hd, L=L, block_p=bp, by_head=by_head), check(hd, L, bp, device=device, by_head=by_head))
        return
    log = ProbeLog(args.out)
    arch = device_table_tag(torch.device("cuda"))
    for name, dtype, batch, rig in case_rigs(args):
        table = rig.table_configs(arch)
        fill = torch.zeros_like(rig.cache.write_pos)
        timers = {("standard", "aligned"): lambda: rig.time_cycle_us(Launch("standard", table["standard"]["config"]),
                                                                      args.replays)}
        package = Launch("output_only", table["output_only"]["config"], table["fold"]["config"])
        for phase in ("aligned", "staggered"):
            timers[("output_only", phase)] = (lambda s=phase == "staggered":
                                              rig.time_cycle_us(package, args.replays, s))
        rolling = [(form, bp, nw) for form, configs in CANDIDATES.items() for bp, nw in configs
                   if bp <= triton.next_power_of_2(rig.case.geom.headdim)]
        for form, bp, nw in rolling:
            timers[(form, bp, nw)] = (lambda bp=bp, nw=nw, by_head=form == "heads":
                                      time_rolling_cycle_us(rig, bp, nw, fill, args.replays, by_head))
        us = median_of_rounds(timers, args.rounds)
        base = us[("standard", "aligned")]
        best = min(rolling, key=us.__getitem__)
        # Where the time goes: the package's flush and non-flush steps (as the benchmarks time
        # them: the non-flush step with every window half full), and the best heads config's
        # reading programs with no fold.
        _, hbp, hnw = min((k for k in rolling if k[0] == "heads"), key=us.__getitem__)
        flush, nonflush = time_flush_and_nonflush_steps(rig, package, args.replays)
        reading = time_rolling_cycle_us(rig, hbp, hnw, fill, args.replays, True, folding=False)
        # The package's staggered cycle with its fold launch dropped: the non-flush launch on
        # the 15 rows in 16 that do not flush, so the difference is what the fold costs there.
        with launcher_in_front(SkipLaunches(is_fold_launch)):
            no_fold = rig.time_cycle_us(package, args.replays, staggered=True)
        log.add(model=name, state_dtype=dtype, batch=batch, L=rig.case.buffer_len, standard_us=round(base, 2),
                output_only_us=round(us[("output_only", "aligned")], 2),
                output_only_staggered_us=round(us[("output_only", "staggered")], 2),
                output_only_speedup=round(base / max(us[("output_only", "aligned")],
                                                     us[("output_only", "staggered")]), 3),
                output_only_nonflush_us=round(nonflush, 2), output_only_flush_us=round(flush, 2),
                output_only_staggered_no_fold_us=round(no_fold, 2),
                rolling_best=rolling_label(*best), rolling_us=round(us[best], 2),
                rolling_speedup=round(base / us[best], 3), rolling_heads_reading_only_us=round(reading, 2),
                rolling_all={rolling_label(*k): round(us[k], 2) for k in rolling})
        del timers
    log.print_table()


if __name__ == "__main__":
    main()
