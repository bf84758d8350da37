#!/usr/bin/env python3
"""The GDN fold launch (the flush rows of the output_only route) written in Gluon,
substituted for the package's, against the package's own (H200).

Same idea as ``probe_gluon_fold.py`` for Mamba2: the checkpoint tile ``[V rows, K]`` is
loaded, updated and stored in the MMA accumulator layout itself, the ring's key tile (the
matmul's B operand, its TF32 head and remainder) is converted to its operand layout once
per head and stays in registers over the head's blocks of value rows, and only the small
``[V, L]`` tile of ring values goes through shared memory. The step on a block of value
rows: ``S = exp(G) S_0 + (D * decay) @ K_ring`` (three TF32 passes: the rings are fp32),
then this token's delta rule (``S = alpha S``, ``d = beta (v - S k)``, ``S += d k^T``,
``o = S q``), store ``S`` and ``o``.

The Gluon kernel takes the launches of ``_gdn_replay_kernel`` in its fold mode (a
launcher in front of Triton's JIT); the non-flush launch stays the package's. Checks on
the package's multi-cycle GDN scenarios (``tests/gdn_harness.py``), then times the cycle,
the flush step and a non-flush step against the package's fold (same method as
``bench_gdn_ar.py``). K-innermost state pools only. GPU only (Gluon has no interpreter).

    python benchmarks/probe_gluon_gdn_fold.py   # -> benchmarks/results/gdn_gluon_fold.json
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

from trtllm_replayssm.benchmarking.gdn_ar import GDNCase, make_gdn_rig
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.models import model
from trtllm_replayssm.ops import launch as launch_mod
from trtllm_replayssm.ops.gdn import replay as gdn_replay


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _tf32_head(x):
    return (x.to(gl.uint32, bitcast=True) & 0xFFFFE000).to(gl.float32, bitcast=True)


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
):
    """Programs (runs of CHUNKS blocks of BLOCK_V value rows, groups of HEADS_PER_PROG value
    heads, batch rows); rows that do not flush return at once."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[1, NUM_WARPS],
                                                  instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=2)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=2)
    rows_l: gl.constexpr = gl.SliceLayout(1, mma)  # [BLOCK_V]
    cols_l: gl.constexpr = gl.SliceLayout(0, mma)  # [BLOCK_K]
    ring: gl.constexpr = gl.BlockedLayout([1, 4], [4, 8], [NUM_WARPS, 1], [1, 0])  # [L, K] key tile
    dring: gl.constexpr = gl.BlockedLayout([4, 1], [4, 8], [1, NUM_WARPS], [0, 1])  # [V, L] value tile
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


class GluonGDNFold:
    """A launcher that runs the Gluon kernel in place of the package's GDN fold launch."""

    def __init__(self, block_v=16, num_warps=8, heads_per_prog=1):
        self.block_v, self.num_warps, self.hpp = block_v, num_warps, heads_per_prog
        self.launches = 0

    def __call__(self, kernel, grid, kwargs) -> bool:
        if kernel is not gdn_replay._gdn_replay_kernel or kwargs["MODE"] != gdn_replay.FOLD.value:
            return False
        assert not kwargs["V_INNER"], "K-innermost state pools only"
        V, HV, K = kwargs["head_v_dim"], kwargs["num_v_heads"], kwargs["head_k_dim"]
        chunks = triton.cdiv(V, self.block_v)
        args = {n: kwargs[n] for n in _gluon_gdn_fold_kernel.arg_names if n in kwargs}
        args.update(BLOCK_V=self.block_v, BLOCK_K=max(16, kwargs["BLOCK_K"]), BLOCK_L=max(16, kwargs["BLOCK_L"]),
                    CHUNKS=chunks, HEADS_PER_PROG=self.hpp, NUM_WARPS=self.num_warps,
                    EXACT_K=kwargs["k_cache_ptr"].dtype in (torch.bfloat16, torch.float16),
                    EVEN=V % self.block_v == 0 and K == max(16, kwargs["BLOCK_K"]))
        programs = (triton.cdiv(V, self.block_v * chunks), triton.cdiv(HV, self.hpp), kwargs["batch"])
        # Warps split the state's columns, 8 a warp at least (an MMA tile's width).
        nw = max(1, min(self.num_warps, args["BLOCK_K"] // 8))
        args["NUM_WARPS"] = nw
        _gluon_gdn_fold_kernel[programs](**args, num_warps=nw)
        self.launches += 1
        return True


def check(fold: GluonGDNFold) -> str:
    """The package's multi-cycle GDN scenarios with the Gluon fold in place."""
    sys.path.insert(0, str(REPO / "tests"))
    from gdn_harness import GDNScenario, run_gdn_replay  # noqa: E402

    from trtllm_replayssm.cache import GDNGeometry

    launch_mod.push_launcher(fold)
    try:
        for geom, L in [(GDNGeometry(num_k_heads=2, num_v_heads=4, head_k_dim=16, head_v_dim=16), 4),
                        (GDNGeometry(1, 3, 24, 40), 16),  # masked tiles
                        (GDNGeometry(2, 8, 128, 128), 16)]:
            for sd, act, ring in ((torch.float32, torch.float32, torch.float32),
                                  (torch.bfloat16, torch.bfloat16, torch.float32),
                                  (torch.float32, torch.float32, torch.bfloat16)):
                res = run_gdn_replay(GDNScenario(geom, L, state_dtype=sd, act_dtype=act, ring_dtype=ring, seed=33),
                                     3 * L + 2, force_flush_at={1: [2], 6: [0, 3]})
                assert min(f for f in res.flushes_per_row if f) >= 3
    finally:
        launch_mod.pop_launcher(fold)
    assert fold.launches > 0
    return "ok"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3.5-122b", "qwen3.5-4b"])
    ap.add_argument("--cases", nargs="+", default=["fp32:128", "fp32:512", "bf16:512"], help="state_dtype:batch")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_gluon_fold.json"))
    args = ap.parse_args()
    variants = {f"gluon ({bv}, {nw}) heads {hpp}": GluonGDNFold(bv, nw, hpp)
                for bv, nw, hpp in [(16, 8, 1), (16, 4, 1), (16, 8, 2), (16, 8, 4), (16, 8, 16), (32, 8, 1)]}
    for fold in (GluonGDNFold(16, 8, 1), GluonGDNFold(16, 4, 4)):
        print("correctness", vars(fold), check(fold), flush=True)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16}
    records, commit, gpu = [], git_commit(), torch.cuda.get_device_name()
    for name in args.models:
        for spec in args.cases:
            sd, batch = spec.split(":")
            rig = make_gdn_rig(GDNCase(name, model(name).geom, int(batch), 16, dtypes[sd]))
            base = rig.time_cycle_us(Launch("fla" if rig.fla is not None else "standard"), args.replays)
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
                                    us_per_step=round(us, 2), baseline_us_per_step=round(base, 2),
                                    speedup=round(base / us, 3), flush_us=round(flush, 1),
                                    nonflush_us=round(nonflush, 1), commit=commit))
                print({k: v for k, v in records[-1].items() if k not in ("gpu", "commit")}, flush=True)
                Path(args.out).parent.mkdir(parents=True, exist_ok=True)
                Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
            del rig
            torch.cuda.empty_cache()
    print(tabulate([{k: v for k, v in r.items() if k not in ("gpu", "commit")} for r in records], headers="keys"))


if __name__ == "__main__":
    main()
