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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nemotron-3-super")
    ap.add_argument("--batch", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--out", default=None)
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
        for name, v in VARIANTS.items():
            for bp, nw in [(16, 1), (16, 2), (16, 4), (32, 4)]:
                if v == 4 and nw > 2:
                    continue

                def run(bp=bp, nw=nw, v=v):
                    _probe_kernel[(geom.headdim // bp, geom.nheads, batch)](
                        state, xc, Bc, dtc, geom.nheads, geom.nheads // geom.ngroups, 15,
                        state.stride(0), state.stride(1), xc.stride(0), xc.stride(1), Bc.stride(0), Bc.stride(1),
                        VARIANT=v, BLOCK_P=bp, BLOCK_N=128, BLOCK_L=16, num_warps=nw)
                res[f"{name} ({bp}, {nw})"] = time_graph_ms(capture(run)) * 1e3
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
