#!/usr/bin/env python3
"""The Mamba2 fold launch written in Gluon (Triton's layout-explicit dialect), substituted
for the package's fold kernel, against the package's own (H200).

Why: Nsight Compute on the tuned fold launch (Nano fp32, batch 512, every row flushing)
showed 255 registers and 4 programs an SM, DRAM at 50% and 197 M of 223 M L1 wavefronts in
shared memory. Triton's TTGIR shows where they go: the state tile is loaded in a
coalesced layout and converted to the MMA layout through shared memory, the ring's B
operand is read back from shared memory for each of the two TF32 passes, and the new
state is converted back for the store. Here the layouts are chosen by hand: the state
tile is loaded and stored in the MMA accumulator layout itself (each thread's two
adjacent fp32 columns: whole 32-byte sectors), the ring's B tile is converted to its
operand layout once per head and stays in registers across the head's blocks, and only
the small [rows, ring] tile goes through shared memory.

The Gluon kernel takes the package's fold launch (a launcher in front of Triton's JIT
intercepts ``_replay_fold_kernel``, see :func:`trtllm_replayssm.ops.launch.push_launcher`),
so the whole output_only step runs as the package runs it. Checks, then times:
1. correctness: the package's multi-cycle Mamba2 scenarios (``tests/mamba2_harness.py``:
   fp64 recurrence, staggered cursors, padding row, force-flushed rows) with the Gluon
   fold in place;
2. the cycle, the flush step and a non-flush step (same method as ``bench_mamba2_ar.py``)
   with the package's fold and with the Gluon one, per Gluon config.

Gluon has no interpreter: this runs on a GPU only. Compiled for sm_90 without a GPU
(ptxas), the state tiles unmasked: 64 registers a thread at 16 rows on 8 warps, one
head a program (128 with a loop over 4 heads), against the tuned Triton fold's 255 at 2
warps; 8 KB of shared memory against 34 KB.

    python benchmarks/probe_gluon_fold.py       # -> benchmarks/results/mamba2_gluon_fold.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
from tabulate import tabulate
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from trtllm_replayssm.benchmarking.mamba2_ar import Mamba2Case, make_rig
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.models import mamba2_model
from trtllm_replayssm.ops import launch as launch_mod
from trtllm_replayssm.ops.mamba2 import replay_fold


@gluon.jit
def _add(a, b):
    return a + b


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
    EVEN: gl.constexpr,
):
    """Programs (runs of CHUNKS blocks of BLOCK_P rows, groups of HEADS_PER_PROG heads, batch
    rows). A row that flushes folds ``S = exp(A T) S_0 + (X coef) @ B_ring`` (two TF32
    passes where B holds bf16/fp16 values, ``EXACT_B``, else three) and stores it; others
    return at once."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NUM_WARPS],
                                                  instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    rows_l: gl.constexpr = gl.SliceLayout(1, mma)  # [BLOCK_P] vectors of the state tile
    cols_l: gl.constexpr = gl.SliceLayout(0, mma)  # [BLOCK_N] vectors of the state tile
    ring: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [NUM_WARPS, 1], [1, 0])  # [L, N] B tile
    xring: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, NUM_WARPS], [0, 1])  # [P, L] x tile
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])  # [BLOCK_L] ring scalars (scanned)

    pid_b = gl.program_id(2)
    if HAS_SLOT_IDX:
        slot = gl.load(slot_idx_ptr + pid_b).to(gl.int32)
    else:
        slot = pid_b
    if (slot == pad_slot_id) | (slot < 0) | (slot >= num_slots):
        return
    w = gl.load(write_pos_ptr + slot)
    is_flush = w == buffer_len - 1
    if HAS_FORCE_FLUSH:
        is_flush = is_flush | (gl.load(force_flush_ptr + pid_b) != 0)
    if (w < 0) | (w >= buffer_len) | (not is_flush):
        return

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
            B_hi = (Bm.to(gl.uint32, bitcast=True) & 0xFFFFE000).to(gl.float32, bitcast=True)
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
                X_hi = (X.to(gl.uint32, bitcast=True) & 0xFFFFE000).to(gl.float32, bitcast=True)
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


class GluonFold:
    """A launcher that runs the Gluon kernel in place of the package's fold launch."""

    def __init__(self, block_p=16, num_warps=8, heads_per_prog=1, chunks=None, prefetch=True):
        self.block_p, self.num_warps, self.hpp, self.chunks, self.prefetch = (block_p, num_warps, heads_per_prog,
                                                                              chunks, prefetch)
        self.launches = 0

    def __call__(self, kernel, grid, kwargs) -> bool:
        if kernel is not replay_fold._replay_fold_kernel:
            return False
        P, H = kwargs["headdim"], kwargs["nheads"]
        chunks = self.chunks or triton.cdiv(P, self.block_p)
        args = {k: kwargs[k] for k in _gluon_fold_kernel.arg_names if k in kwargs}
        args.update(BLOCK_P=self.block_p, BLOCK_L=max(16, kwargs["BLOCK_L"]), CHUNKS=chunks,
                    HEADS_PER_PROG=self.hpp, NUM_WARPS=self.num_warps, PREFETCH=self.prefetch,
                    EXACT_B=kwargs["EXACT_B"],
                    EVEN=P % (self.block_p * chunks) == 0 and kwargs["dstate"] == kwargs["BLOCK_N"])
        programs = (triton.cdiv(P, self.block_p * chunks), triton.cdiv(H, self.hpp), kwargs["batch"])
        # Warps split the state's columns, 8 a warp at least (an MMA tile's width).
        nw = max(1, min(self.num_warps, kwargs["BLOCK_N"] // 8))
        args["NUM_WARPS"] = nw
        _gluon_fold_kernel[programs](**args, num_warps=nw)
        self.launches += 1
        return True


def check(fold: GluonFold) -> str:
    """The package's multi-cycle scenarios with the Gluon fold in place."""
    sys.path.insert(0, str(REPO / "tests"))
    from mamba2_harness import Scenario, run_replay  # noqa: E402

    from trtllm_replayssm.cache import Mamba2Geometry

    launch_mod.push_launcher(fold)
    try:
        for geom, L in [(Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2), 4),
                        (Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=1), 16),
                        (Mamba2Geometry(nheads=2, headdim=40, dstate=16, ngroups=1), 16),  # masked tiles
                        (Mamba2Geometry(nheads=4, headdim=64, dstate=128, ngroups=2), 16)]:
            for sd, act in ((torch.float32, torch.float32), (torch.bfloat16, torch.float32),
                            (torch.float32, torch.bfloat16)):
                res = run_replay(Scenario(geom, L, state_dtype=sd, act_dtype=act, seed=31), 3 * L + 2,
                                 force_flush_at={1: [2], 6: [0, 3]})
                assert min(f for f in res.flushes_per_row if f) >= 3
    finally:
        launch_mod.pop_launcher(fold)
    assert fold.launches > 0
    return "ok"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-nano-4b", "nemotron-3-super"])
    ap.add_argument("--cases", nargs="+", default=["fp32:128", "fp32:512", "bf16:512"], help="state_dtype:batch")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/mamba2_gluon_fold.json"))
    args = ap.parse_args()
    variants = {f"gluon ({bp}, {nw}) heads {hpp} prefetch {int(pf)}": GluonFold(bp, nw, hpp, None, pf)
                for bp, nw, hpp, pf in [(16, 8, 1, True), (16, 8, 1, False), (16, 4, 1, True), (16, 8, 2, True),
                                        (16, 8, 4, True), (16, 8, 16, True), (16, 2, 1, True)]}
    for fold in (GluonFold(16, 8, 1, None, True), GluonFold(16, 4, 4, None, False)):
        print("correctness", vars(fold), check(fold), flush=True)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    records, commit, gpu = [], git_commit(), torch.cuda.get_device_name()
    for name in args.models:
        for spec in args.cases:
            sd, batch = spec.split(":")
            rig = make_rig(Mamba2Case(name, mamba2_model(name).geom, int(batch), 16, dtypes[sd]))
            std = rig.time_cycle_us(Launch("standard"), args.replays)
            lc = Launch("output_only")
            for label, fold in [("package fold (tuned)", None)] + list(variants.items()):
                if fold is not None:
                    launch_mod.push_launcher(fold)
                try:
                    us = rig.time_cycle_us(lc, args.replays)
                    flush, nonflush = rig.time_step_us(lc, 15, args.replays), rig.time_step_us(lc, 8, args.replays)
                except Exception as e:  # a variant the compiler rejects
                    print(name, spec, label, type(e).__name__, e, flush=True)
                    continue
                finally:
                    if fold is not None:
                        launch_mod.pop_launcher(fold)
                records.append(dict(gpu=gpu, model=name, state_dtype=sd, batch=int(batch), L=16, variant=label,
                                    us_per_step=round(us, 2), standard_us_per_step=round(std, 2),
                                    speedup=round(std / us, 3), flush_us=round(flush, 1),
                                    nonflush_us=round(nonflush, 1), commit=commit))
                print({k: v for k, v in records[-1].items() if k not in ("gpu", "commit")}, flush=True)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
            del rig
            torch.cuda.empty_cache()
    print(tabulate([{k: v for k, v in r.items() if k not in ("gpu", "commit")} for r in records], headers="keys"))


if __name__ == "__main__":
    main()
