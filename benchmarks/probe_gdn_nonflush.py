#!/usr/bin/env python3
"""Where the GDN non-flush step's time goes: one probe kernel built up piece by piece,
timed against the tuned standard step on the same state (CUDA graph, median, one layer
whose state is far larger than the L2), next to the package's own launches timed alone.

Variants of the probe (each adds to the previous):
  read        S_0 k and S_0 q from the checkpoint tile, o stored   (the state read alone)
  norm        + q/k L2 normalisation, gates, v                     (the step's inputs)
  ring        + the ring's g, k, d tiles and their coefficients    (ring reads)
  append      + d, k, g appended to the ring                       (= a full non-flush step)
Each runs with a program per (block of BLOCK_V value rows, value head, row), or, where
``chunks`` > 1, with a program looping over ``chunks`` blocks, so the per-key-head work
(normalisation, k_j . k and k_j . q over the ring) is done once for all of them.

With ``--fold``: the package's fold launch on a step where every row flushes, per launch
config, its matmul over the ring in tf32x3 (what it runs with an fp32 k ring) and in one
TF32 pass (not accurate enough: what a ring exact in TF32 would cost, about).

    python benchmarks/probe_gdn_nonflush.py --model qwen3.5-122b --batch 128 512
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl
from tabulate import tabulate

from trtllm_replayssm.benchmarking.gdn_ar import GDNCase, GDNRig, Launch
from trtllm_replayssm.benchmarking.timing import capture, time_graph_ms
from trtllm_replayssm.models import model as find_model
from trtllm_replayssm.ops.launch import LaunchConfig, launcher_in_front

VARIANTS = {"read": 0, "norm": 1, "ring": 2, "append": 3}


@triton.jit
def _probe_kernel(state_ptr, dc_ptr, kc_ptr, gc_ptr, q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, out_ptr,
                  H, HV, w, VARIANT: tl.constexpr, BLOCK_V: tl.constexpr, CHUNKS: tl.constexpr,
                  K: tl.constexpr, V: tl.constexpr, L: tl.constexpr):
    pid_v, hv, row = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    row = row.to(tl.int64)
    h = hv // (HV // H)
    offs_k = tl.arange(0, K)
    offs_l = tl.arange(0, L)
    q = tl.load(q_ptr + (row * H + h) * K + offs_k).to(tl.float32)
    k = tl.load(k_ptr + (row * H + h) * K + offs_k).to(tl.float32)
    alpha, beta = 0.99, 0.5
    if VARIANT >= 1:
        q = q * tl.rsqrt(tl.sum(q * q, 0) + 1e-6) * 0.088
        k = k * tl.rsqrt(tl.sum(k * k, 0) + 1e-6)
        alpha = tl.exp(-tl.exp(tl.load(a_ptr + row * HV + hv).to(tl.float32)))
        beta = tl.sigmoid(tl.load(b_ptr + row * HV + hv).to(tl.float32))
    kq = tl.sum(k * q, 0)
    eG = 1.0
    ck = tl.zeros([L], tl.float32)
    cq = tl.zeros([L], tl.float32)
    in_ring = offs_l < w
    if VARIANT >= 2:
        g_hist = tl.load(gc_ptr + (row * HV + hv) * L + offs_l, mask=in_ring, other=0.0)
        G = tl.sum(g_hist, 0)
        decay = tl.where(in_ring, tl.exp(tl.minimum(G - tl.cumsum(g_hist, 0), 0.0)), 0.0)
        K_hist = tl.load(kc_ptr + (row * H + h) * L * K + offs_l[:, None] * K + offs_k[None, :],
                         mask=in_ring[:, None], other=0.0).to(tl.float32)
        ck = decay * tl.sum(K_hist * k[None, :], 1)
        cq = decay * tl.sum(K_hist * q[None, :], 1)
        eG = tl.exp(G)
    for c in range(0, CHUNKS):
        offs_v = (pid_v * CHUNKS + c) * BLOCK_V + tl.arange(0, BLOCK_V)
        S0 = tl.load(state_ptr + ((row * HV + hv) * V + offs_v[:, None]) * K + offs_k[None, :])
        Sk = tl.sum(S0 * k[None, :], 1)
        Sq = tl.sum(S0 * q[None, :], 1)
        if VARIANT >= 2:
            D = tl.load(dc_ptr + (row * HV + hv) * L * V + offs_l[None, :] * V + offs_v[:, None],
                        mask=in_ring[None, :], other=0.0).to(tl.float32)
            Sk = eG * Sk + tl.sum(D * ck[None, :], 1)
            Sq = eG * Sq + tl.sum(D * cq[None, :], 1)
        if VARIANT >= 1:
            vv = tl.load(v_ptr + (row * HV + hv) * V + offs_v).to(tl.float32)
        else:
            vv = Sk * 0.0
        d = beta * (vv - alpha * Sk)
        tl.store(out_ptr + (row * HV + hv) * V + offs_v, (alpha * Sq + kq * d).to(out_ptr.dtype.element_ty))
        if VARIANT >= 3:
            tl.store(dc_ptr + (row * HV + hv) * L * V + w * V + offs_v, d.to(dc_ptr.dtype.element_ty))
    if VARIANT >= 3:
        if pid_v == 0:
            tl.store(gc_ptr + (row * HV + hv) * L + w, tl.log(alpha))
            if hv % (HV // H) == 0:
                tl.store(kc_ptr + (row * H + h) * L * K + w * K + offs_k, k.to(kc_ptr.dtype.element_ty))


FOLD_CONFIGS = [LaunchConfig(16, 2, 1, 1, 8), LaunchConfig(16, 2, 1, 1, loop_blocks=8),
                LaunchConfig(16, 4, 1, 1, loop_blocks=8), LaunchConfig(32, 4, 1, 1, loop_blocks=4),
                LaunchConfig(16, 2, 1, 1, 2, loop_blocks=8), LaunchConfig(32, 4, 1, 1), LaunchConfig(16, 2, 4, 0, loop_blocks=8)]


def short(cfg: LaunchConfig) -> str:
    extra = [f"{k} {v}" for k, v in (("chunk", cfg.fold_chunk), ("hpp", cfg.heads_per_prog), ("loop", cfg.loop_blocks))
             if v > 1]
    return f"({', '.join([str(cfg.block_p), str(cfg.num_warps)] + extra)})"


def time_folds(rig: GDNRig) -> dict:
    """The fold launch alone with every row flushing, per config and matmul precision."""
    rig.cache.write_pos.fill_(15)
    res = {}
    for fold_cfg in FOLD_CONFIGS:
        kernel, grid, kw = package_launches(rig, LaunchConfig(8, 1, loop_blocks=16), fold_cfg)[1]
        for prec in (("tf32x3", "tf32") if fold_cfg.fold_dot else ("fp32 FMA",)):
            kw2 = dict(kw, DOT_PRECISION=prec) if fold_cfg.fold_dot else kw
            res[f"fold {prec} {short(fold_cfg)}"] = time_graph_ms(capture(lambda: kernel[grid](**kw2))) * 1e3
    return res


def package_launches(rig: GDNRig, cfg: LaunchConfig, fold_cfg: LaunchConfig) -> list:
    """The package's output_only step recorded launch by launch (kernel, grid, kwargs)."""
    seen = []

    def record(kernel, grid, kwargs):
        seen.append((kernel, grid, dict(kwargs)))
        return False
    with launcher_in_front(record):
        rig.layer_step(Launch("output_only", cfg, fold_cfg), 0)
    return seen


PROBE_TILES = [(4, 1, 1), (8, 1, 1), (16, 2, 1), (32, 4, 1), (64, 8, 1), (128, 8, 1),
               (16, 2, 8), (16, 4, 8), (32, 4, 4), (32, 8, 4), (16, 2, 4), (32, 4, 2), (8, 1, 16), (8, 2, 16)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", nargs="+", default=["qwen3.5-122b"])
    ap.add_argument("--batch", type=int, nargs="+", default=[128, 512])
    ap.add_argument("--out", default=None)
    ap.add_argument("--fold", action="store_true", help="time the fold launch (instead of the non-flush variants)")
    args = ap.parse_args()
    records = []
    for model in args.model:
        geom = find_model(model).geom
        H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
        for batch in args.batch:
            rig = GDNRig(GDNCase(model, geom, batch, 16, torch.float32), 1)
            c, s = rig.cache, rig.step
            c.write_pos.fill_(8)  # a non-flush step with half the ring full
            state, dc, kc, gc = c.ssm_state[0], c.d_cache[0], c.k_cache[0], c.g_cache[0]
            res = {"standard (4, 1)": time_graph_ms(capture(lambda: rig.layer_step(
                Launch("standard", LaunchConfig(4, 1)), 0))) * 1e3}
            if rig.fla is not None:
                res["fla-core fused_recurrent"] = time_graph_ms(capture(lambda: rig.layer_step(Launch("fla"), 0))) * 1e3
            if args.fold:
                res.update(time_folds(rig))
            for cfg in (() if args.fold else (LaunchConfig(8, 1), LaunchConfig(32, 4), LaunchConfig(8, 1, loop_blocks=16))):
                fold_cfg = LaunchConfig(16, 2, 1, 1, 8)
                for i, (kernel, grid, kw) in enumerate(package_launches(rig, cfg, fold_cfg)):
                    name = "non-flush launch" if i == 0 else "fold launch, no row flushing"
                    res[f"package {name} ({cfg.block_p}, {cfg.num_warps})" if i == 0 else
                        f"package {name} (16, 2, hpp 8)"] = time_graph_ms(capture(
                            lambda kernel=kernel, grid=grid, kw=kw: kernel[grid](**kw))) * 1e3
            for name, var in ({} if args.fold else VARIANTS).items():
                for bv, nw, chunks in [t for t in PROBE_TILES if t[0] * t[2] <= V]:
                    def run(bv=bv, nw=nw, chunks=chunks, var=var):
                        _probe_kernel[(V // (bv * chunks), HV, batch)](
                            state, dc, kc, gc, s["q"], s["k"], s["v"], s["a"], s["b"], s["out"], H, HV, 8,
                            VARIANT=var, BLOCK_V=bv, CHUNKS=chunks, K=K, V=V, L=16, num_warps=nw)
                    res[f"{name} ({bv}, {nw}) x {chunks}"] = time_graph_ms(capture(run)) * 1e3
            std = res["standard (4, 1)"]
            read_gb = state.numel() * 4 / 1e9
            rows = []
            for k_, us in res.items():
                rows.append([model, batch, k_, f"{us:.1f}", f"{us / std:.2f}", f"{read_gb / (us * 1e-6):.0f}"])
                records.append(dict(model=model, batch=batch, variant=k_, us=round(us, 1), vs_standard=round(us / std, 3)))
            print(tabulate(rows, headers=["model", "batch", "variant", "us", "x standard", "GB/s (state read)"]),
                  flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(records, f, indent=1)


if __name__ == "__main__":
    main()
