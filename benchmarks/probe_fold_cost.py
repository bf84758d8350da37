#!/usr/bin/env python3
"""Where the Mamba2 flush step's time goes: the fold of every row of a batch, built up
piece by piece in one probe kernel, timed against the tuned standard step on the same
state (CUDA graph, median; the state is far larger than the L2).

Variants (each adds to or swaps one piece of the previous):
  scale       S = a S_0, store                       (the memory traffic alone)
  ring        + load the ring tiles and scale them   (ring reads, no fold)
  dot_tf32x3  + S += (X coef) @ B_ring, tf32x3       (the product's fold)
  dot_tf32    the same with one TF32 pass
  rank1       S += sum_j coef_j x_j B_j^T as 16 unrolled rank-1 updates (fp32 FMAs)
  full        the package's fold kernel (output included)

With ``--layouts``: the fold launch as the package has it (a program per headdim block,
head and row; rows that do not flush return at once) against a persistent launch (a
few programs per SM that share the tiles of the flushing rows only), with every row,
one row in 16 (staggered cursors) and no row flushing.

    python benchmarks/probe_fold_cost.py --batch 512
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl
from tabulate import tabulate

from trtllm_replayssm.benchmarking.mamba2_ar import Launch, Mamba2Case, Mamba2Rig
from trtllm_replayssm.benchmarking.timing import capture, time_graph_ms
from trtllm_replayssm.models import mamba2_model
from trtllm_replayssm.ops.common import split_tf32_dot
from trtllm_replayssm.ops.launch import LaunchConfig

VARIANTS = {"scale": 0, "ring": 1, "dot_tf32x3": 2, "dot_tf32": 3, "rank1": 4}


@triton.jit
def _probe_kernel(state_ptr, xc_ptr, Bc_ptr, dtc_ptr, nheads, heads_per_group, L,
                  stride_slot, stride_h, stride_xc_slot, stride_xc_h, stride_Bc_slot, stride_Bc_g,
                  VARIANT: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr):
    pid_p, pid_h, pid_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    offs_l = tl.arange(0, BLOCK_L)
    g = pid_h // heads_per_group
    ptrs = state_ptr + pid_b.to(tl.int64) * stride_slot + pid_h * stride_h + offs_p[:, None] * BLOCK_N + offs_n[None, :]
    S = tl.load(ptrs)
    if VARIANT == 0:
        S = S * 0.999
    else:
        in_ring = offs_l < L
        dt = tl.load(dtc_ptr + pid_b.to(tl.int64) * nheads * BLOCK_L + pid_h * BLOCK_L + offs_l, mask=in_ring, other=0.0)
        xc = xc_ptr + pid_b.to(tl.int64) * stride_xc_slot + pid_h * stride_xc_h
        Bc = Bc_ptr + pid_b.to(tl.int64) * stride_Bc_slot + g * stride_Bc_g
        coef = dt * tl.exp(-0.5 * (tl.sum(dt, 0) - tl.cumsum(dt, 0)))
        if VARIANT == 4:
            S = S * 0.999
            for j in tl.static_range(BLOCK_L):
                c_j = tl.sum(tl.where(offs_l == j, coef, 0.0), 0)
                x_j = tl.load(xc + j * 64 + offs_p).to(tl.float32)
                B_j = tl.load(Bc + j * BLOCK_N + offs_n).to(tl.float32)
                S += (c_j * x_j)[:, None] * B_j[None, :]
        else:
            X = tl.load(xc + offs_l[None, :] * 64 + offs_p[:, None], mask=in_ring[None, :], other=0.0).to(tl.float32)
            Bm = tl.load(Bc + offs_l[:, None] * BLOCK_N + offs_n[None, :], mask=in_ring[:, None],
                         other=0.0).to(tl.float32)
            if VARIANT == 1:
                S = S * 0.999 + tl.sum(X * coef[None, :], 1)[:, None] + tl.sum(Bm, 0)[None, :]
            elif VARIANT == 2:
                S = S * 0.999 + tl.dot(X * coef[None, :], Bm, input_precision="tf32x3")
            else:
                S = S * 0.999 + tl.dot(X * coef[None, :], Bm, input_precision="tf32")
    tl.store(ptrs, S)


@triton.jit
def _fold_tile(state_ptr, xc_ptr, Bc_ptr, dtc_ptr, row, pid_h, pid_p, nheads, heads_per_group, L,
               stride_slot, stride_h, stride_xc_slot, stride_xc_h, stride_Bc_slot, stride_Bc_g,
               BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr):
    """One (row, head, headdim block) fold with the split two-pass TF32 matmul."""
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    offs_l = tl.arange(0, BLOCK_L)
    row = row.to(tl.int64)
    g = pid_h // heads_per_group
    ptrs = state_ptr + row * stride_slot + pid_h * stride_h + offs_p[:, None] * BLOCK_N + offs_n[None, :]
    in_ring = offs_l < L
    dt = tl.load(dtc_ptr + row * nheads * BLOCK_L + pid_h * BLOCK_L + offs_l, mask=in_ring, other=0.0)
    xc = xc_ptr + row * stride_xc_slot + pid_h * stride_xc_h
    Bc = Bc_ptr + row * stride_Bc_slot + g * stride_Bc_g
    coef = dt * tl.exp(-0.5 * (tl.sum(dt, 0) - tl.cumsum(dt, 0)))
    X = tl.load(xc + offs_l[None, :] * 64 + offs_p[:, None], mask=in_ring[None, :], other=0.0).to(tl.float32)
    Bm = tl.load(Bc + offs_l[:, None] * BLOCK_N + offs_n[None, :], mask=in_ring[:, None], other=0.0).to(tl.float32)
    S = tl.load(ptrs) * 0.999 + split_tf32_dot(X * coef[None, :], Bm, "tf32")
    tl.store(ptrs, S)


@triton.jit
def _grid_fold_kernel(flags_ptr, state_ptr, xc_ptr, Bc_ptr, dtc_ptr, nheads, heads_per_group, L,
                      stride_slot, stride_h, stride_xc_slot, stride_xc_h, stride_Bc_slot, stride_Bc_g,
                      BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr):
    """The package's shape: a program per (headdim block, head, row); rows not flushing return."""
    pid_p, pid_h, pid_b = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    if tl.load(flags_ptr + pid_b) == 0:
        return
    _fold_tile(state_ptr, xc_ptr, Bc_ptr, dtc_ptr, pid_b, pid_h, pid_p, nheads, heads_per_group, L, stride_slot,
               stride_h, stride_xc_slot, stride_xc_h, stride_Bc_slot, stride_Bc_g, BLOCK_P, BLOCK_N, BLOCK_L)


@triton.jit
def _persistent_fold_kernel(flags_ptr, state_ptr, xc_ptr, Bc_ptr, dtc_ptr, batch, nheads, n_pblocks,
                            heads_per_group, L, max_items_per_prog,
                            stride_slot, stride_h, stride_xc_slot, stride_xc_h, stride_Bc_slot, stride_Bc_g,
                            BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr,
                            BLOCK_B: tl.constexpr):
    """A fixed number of programs share the tiles of the flushing rows only: each finds the
    flushing rows (a prefix sum over the flags) and takes a contiguous run of tiles."""
    pid, nprog = tl.program_id(0), tl.num_programs(0)
    offs_b = tl.arange(0, BLOCK_B)
    f = tl.load(flags_ptr + offs_b, mask=offs_b < batch, other=0).to(tl.int32)
    rank = tl.cumsum(f, 0) - f
    units = nheads * n_pblocks
    total = tl.sum(f, 0) * units
    per = tl.cdiv(total, nprog)
    cur_rank = -1
    cur_row = 0
    for i in range(0, max_items_per_prog):
        item = pid * per + i
        if (i < per) & (item < total):
            r = item // units
            if r != cur_rank:
                cur_row = tl.sum(tl.where((rank == r) & (f != 0), offs_b, 0), 0)
                cur_rank = r
            u = item % units
            _fold_tile(state_ptr, xc_ptr, Bc_ptr, dtc_ptr, cur_row, u // n_pblocks, u % n_pblocks, nheads,
                       heads_per_group, L, stride_slot, stride_h, stride_xc_slot, stride_xc_h, stride_Bc_slot,
                       stride_Bc_g, BLOCK_P, BLOCK_N, BLOCK_L)


def flag_rows(batch: int, share: str, device) -> torch.Tensor:
    """int8 flags: every row, one row in 16 (staggered cursors), or none."""
    f = torch.zeros(batch, dtype=torch.int8, device=device)
    if share == "all":
        f.fill_(1)
    elif share == "1/16":
        f[::16] = 1
    return f


def time_fold_layouts(rig, batch: int, geom) -> dict:
    """Grid fold vs persistent fold over the flushing rows, for every row / 1 in 16 / none."""
    c = rig.cache
    state, xc, Bc, dtc = c.ssm_state[0], c.x_cache[0], c.B_cache[0], c.dt_cache[0]
    strides = (state.stride(0), state.stride(1), xc.stride(0), xc.stride(1), Bc.stride(0), Bc.stride(1))
    hpg = geom.nheads // geom.ngroups
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    res = {}
    for share in ("all", "1/16", "none"):
        flags = flag_rows(batch, share, state.device)
        for bp, nw in [(16, 2), (32, 4)]:
            npb = geom.headdim // bp

            def grid_run(bp=bp, nw=nw, npb=npb):
                _grid_fold_kernel[(npb, geom.nheads, batch)](flags, state, xc, Bc, dtc, geom.nheads, hpg, 15, *strides,
                                                             BLOCK_P=bp, BLOCK_N=128, BLOCK_L=16, num_warps=nw)
            res[f"grid fold ({bp}, {nw}), rows flushing: {share}"] = time_graph_ms(capture(grid_run)) * 1e3
            for per_sm in (4, 8, 16):
                nprog = per_sm * sms
                max_items = -(-batch * geom.nheads * npb // nprog)

                def pers_run(bp=bp, nw=nw, npb=npb, nprog=nprog, max_items=max_items):
                    _persistent_fold_kernel[(nprog,)](flags, state, xc, Bc, dtc, batch, geom.nheads, npb, hpg, 15,
                                                      max_items, *strides, BLOCK_P=bp, BLOCK_N=128, BLOCK_L=16,
                                                      BLOCK_B=1024, num_warps=nw)
                if per_sm == 4 and share == "1/16":  # both launches fold the same tiles
                    before = state.clone()
                    grid_run()
                    by_grid = state.clone()
                    state.copy_(before)
                    pers_run()
                    print(f"batch {batch} ({bp}, {nw}): persistent - grid fold max |diff| "
                          f"{(state - by_grid).abs().max().item():.3g}", flush=True)
                    state.copy_(before)
                    del before, by_grid
                res[f"persistent fold ({bp}, {nw}) x {per_sm}/SM, rows flushing: {share}"] = \
                    time_graph_ms(capture(pers_run)) * 1e3
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nemotron-3-super")
    ap.add_argument("--batch", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--out", default=None)
    ap.add_argument("--layouts", action="store_true", help="time the grid vs the persistent fold launch (instead of the variants)")
    args = ap.parse_args()
    geom = mamba2_model(args.model).geom
    assert geom.headdim == 64 and geom.dstate == 128, "the probe's strides assume P 64, N 128"
    rows, records = [], []
    for batch in args.batch:
        case = Mamba2Case(args.model, geom, batch, 16, torch.float32)
        rig = Mamba2Rig(case, 1)
        c = rig.cache
        state, xc, Bc, dtc = c.ssm_state[0], c.x_cache[0], c.B_cache[0], c.dt_cache[0]
        c.write_pos.fill_(15)  # every row flushes
        std = time_graph_ms(capture(lambda: rig.layer_step(Launch("standard", LaunchConfig(16, 1)), 0))) * 1e3
        full_cfg = LaunchConfig(32, 4, 1, 1)
        full = time_graph_ms(capture(lambda: rig.layer_step(Launch("output_only", LaunchConfig(32, 1, 4), full_cfg), 0)))
        res = {"standard (16, 1)": std, "full output_only flush step (fold 32, 4)": full * 1e3}
        for name, v in ({} if args.layouts else VARIANTS).items():
            for bp, nw in [(16, 1), (16, 2), (16, 4), (32, 4)]:
                if v == 4 and nw > 2:
                    continue

                def run(bp=bp, nw=nw, v=v):
                    _probe_kernel[(geom.headdim // bp, geom.nheads, batch)](
                        state, xc, Bc, dtc, geom.nheads, geom.nheads // geom.ngroups, 15,
                        state.stride(0), state.stride(1), xc.stride(0), xc.stride(1), Bc.stride(0), Bc.stride(1),
                        VARIANT=v, BLOCK_P=bp, BLOCK_N=128, BLOCK_L=16, num_warps=nw)
                res[f"{name} ({bp}, {nw})"] = time_graph_ms(capture(run)) * 1e3
        if args.layouts:
            res.update(time_fold_layouts(rig, batch, geom))
        gb = 2 * state.numel() * 4 / 1e9
        for k, us in res.items():
            rows.append([batch, k, f"{us:.1f}", f"{us / std:.2f}", f"{gb / (us * 1e-6):.0f}"])
            records.append(dict(batch=batch, variant=k, us=round(us, 1), vs_standard=round(us / std, 3)))
        print(tabulate(rows, headers=["batch", "variant", "us", "x standard", "GB/s (state r+w)"]), flush=True)
        rows = []
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
