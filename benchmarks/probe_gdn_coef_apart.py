#!/usr/bin/env python3
"""The GDN non-flush step with a head's ring coefficients from a launch of their own.

The package's non-flush launch does a head's work that does not depend on the value rows
(q/k normalisation, gates, the ring's ``[L, K]`` k tile and its products with k and q)
once a program, so its tuned programs loop over 8-16 blocks of a head's value rows
(``loop_blocks``): at batch 32 that is 2048 one-warp programs, 16 an SM, and the step
reads the checkpoint at 60-68% of copy bandwidth (``gdn_ar.json``), where the standard
kernel streams the state with a program per 4 rows. Here a small launch (a program a
batch row and value head) writes those coefficients to an fp32 workspace (``2 L + 4``
floats a value head, normalised q and k a key head), appends g and k, and the non-flush
launch streams the checkpoint in programs of a few blocks each, taking the coefficients
from the workspace (a programmatic dependent launch: it loads its first tiles before it
waits). The fold launch is the package's, on the table's config.

Checks the split step against the package's non-flush launch (outputs and the appended
ring entries), then times the non-flush step alone and whole cycles, in phase and
staggered, beside the package's route.

    python benchmarks/probe_gdn_coef_apart.py     # -> benchmarks/results/gdn_coef_apart.json
"""

from __future__ import annotations

import argparse

import torch
import triton
import triton.language as tl

from trtllm_replayssm.benchmarking.gdn_ar import GDNCase, GDNRig
from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.benchmarking.timing import layers_for_cold_l2
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.common import dim_mask, let_dependents_launch, load_slot, wait_for_primary
from trtllm_replayssm.ops.gdn import replay
from trtllm_replayssm.ops.gdn._common import load_gates, load_qk
from trtllm_replayssm.ops.gdn.step_inputs import parse_gdn_step
from trtllm_replayssm.ops.launch import fold_programmatic_launch, launcher_in_front

SCALARS = 4  # exp(G), alpha, beta, k . q


@triton.jit
def _nonflush_row(slot_idx_ptr, write_pos_ptr, pid_b, num_slots, pad_slot_id, buffer_len,
                  HAS_SLOT_IDX: tl.constexpr):
    """Slot and cursor of batch row ``pid_b`` and whether this probe serves it: a valid row
    that does not flush (padding, error rows and flushing rows are left to the package)."""
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    w = tl.load(write_pos_ptr + slot, mask=(not is_pad) & (not is_bad), other=-1)
    return slot, w, (w >= 0) & (w < buffer_len - 1)


@triton.jit(do_not_specialize=["num_slots"])
def _coef_kernel(
    k_cache_ptr, g_cache_ptr, write_pos_ptr, coef_ptr, qk_ptr,
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, num_v_heads, num_k_heads, head_k_dim, v_heads_per_k_head, buffer_len, pad_slot_id,
    stride_kc_slot, stride_kc_h, stride_kc_l, stride_gc_slot, stride_gc_h,
    stride_q_b, stride_q_h, stride_k_b, stride_k_h, stride_v_b, stride_v_h,
    stride_a_b, stride_a_h, stride_b_b, stride_b_h, stride_out_b, stride_out_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    BLOCK_K: tl.constexpr, BLOCK_L: tl.constexpr, EVEN_TILE: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr,
):
    """A non-flush (batch row, value head)'s coefficients: ``coef[b, hv] = [exp(G - G_j)
    (k_j . k) for j < L, the same with q, exp(G), alpha, beta, k . q]``, the key head's
    normalised ``[q, k]`` (written by its first value head), and the appends of g and k."""
    let_dependents_launch(LAUNCH_DEPENDENTS)
    hv = tl.program_id(0)
    pid_b = tl.program_id(1)
    slot, w, serve = _nonflush_row(slot_idx_ptr, write_pos_ptr, pid_b, num_slots, pad_slot_id, buffer_len,
                                   HAS_SLOT_IDX)
    if not serve:
        return
    h = hv // v_heads_per_k_head
    offs_k = tl.arange(0, BLOCK_K)
    mask_k = dim_mask(offs_k, head_k_dim, EVEN_TILE)
    q, k = load_qk(q_ptr, k_ptr, pid_b, h, stride_q_b, stride_q_h, stride_k_b, stride_k_h, offs_k, mask_k, scale,
                   USE_QK_L2NORM)
    g, beta = load_gates(a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, pid_b, hv, stride_a_b, stride_a_h, stride_b_b,
                         stride_b_h, softplus_beta, softplus_threshold)
    kc_base = k_cache_ptr + slot * stride_kc_slot + h * stride_kc_h
    gc_base = g_cache_ptr + slot * stride_gc_slot + hv * stride_gc_h
    offs_l = tl.arange(0, BLOCK_L)
    mask_l = offs_l < w
    g_hist = tl.load(gc_base + offs_l, mask=mask_l, other=0.0)
    G = tl.sum(g_hist, axis=0)
    decay = tl.where(mask_l, tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0), 0.0)), 0.0)
    K_hist = tl.load(kc_base + offs_l[:, None] * stride_kc_l + offs_k[None, :],
                     mask=mask_l[:, None] & mask_k[None, :], other=0.0).to(tl.float32)
    base = coef_ptr + (pid_b * num_v_heads + hv) * (2 * BLOCK_L + 4)
    tl.store(base + offs_l, decay * tl.sum(K_hist * k[None, :], axis=1))
    tl.store(base + BLOCK_L + offs_l, decay * tl.sum(K_hist * q[None, :], axis=1))
    tl.store(base + 2 * BLOCK_L, tl.exp(G))
    tl.store(base + 2 * BLOCK_L + 1, tl.exp(g))
    tl.store(base + 2 * BLOCK_L + 2, beta)
    tl.store(base + 2 * BLOCK_L + 3, tl.sum(k * q, axis=0))
    tl.store(gc_base + w, g)
    if hv % v_heads_per_k_head == 0:
        qk_base = qk_ptr + (pid_b * num_k_heads + h) * (2 * BLOCK_K)
        tl.store(qk_base + offs_k, q)
        tl.store(qk_base + BLOCK_K + offs_k, k)
        tl.store(kc_base + w * stride_kc_l + offs_k, k.to(k_cache_ptr.dtype.element_ty), mask=mask_k)


@triton.jit(do_not_specialize=["num_slots"])
def _stream_kernel(
    state_ptr, d_cache_ptr, write_pos_ptr, coef_ptr, qk_ptr,
    q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, num_v_heads, num_k_heads, head_k_dim, head_v_dim, v_heads_per_k_head, buffer_len, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_row, stride_dc_slot, stride_dc_h, stride_dc_l,
    stride_q_b, stride_q_h, stride_k_b, stride_k_h, stride_v_b, stride_v_h,
    stride_a_b, stride_a_h, stride_b_b, stride_b_h, stride_out_b, stride_out_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    BLOCK_V: tl.constexpr, CHUNKS: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_L: tl.constexpr,
    EVEN_TILE: tl.constexpr, WAIT_PRIMARY: tl.constexpr, LAUNCH_DEPENDENTS: tl.constexpr,
):
    """CHUNKS blocks of BLOCK_V value rows of one non-flush (batch row, value head): the
    package's non-flush rows (:func:`replay._nonflush_rows`) on the workspace's coefficients."""
    let_dependents_launch(LAUNCH_DEPENDENTS)  # the fold's programmatic launch
    pid_v = tl.program_id(0)
    hv = tl.program_id(1)
    pid_b = tl.program_id(2)
    slot, w, serve = _nonflush_row(slot_idx_ptr, write_pos_ptr, pid_b, num_slots, pad_slot_id, buffer_len,
                                   HAS_SLOT_IDX)
    if not serve:
        return
    h = hv // v_heads_per_k_head
    offs_v0 = pid_v * (BLOCK_V * CHUNKS) + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    offs_l = tl.arange(0, BLOCK_L)
    mask_k = dim_mask(offs_k, head_k_dim, EVEN_TILE)
    mask_l = offs_l < w
    state_base = state_ptr + slot * stride_state_slot + hv * stride_state_h
    dc_base = d_cache_ptr + slot * stride_dc_slot + hv * stride_dc_h
    # The first block's tiles are in flight while the coefficient launch completes.
    S0_n, D_n = replay._nonflush_tiles(state_base, dc_base, offs_v0, offs_k, offs_l, mask_k, mask_l, head_v_dim,
                                       stride_state_row, stride_dc_l, True, EVEN_TILE, False)
    wait_for_primary(WAIT_PRIMARY)
    base = coef_ptr + (pid_b * num_v_heads + hv) * (2 * BLOCK_L + 4)
    coef_k = tl.load(base + offs_l)
    coef_q = tl.load(base + BLOCK_L + offs_l)
    eG = tl.load(base + 2 * BLOCK_L)
    alpha = tl.load(base + 2 * BLOCK_L + 1)
    beta = tl.load(base + 2 * BLOCK_L + 2)
    kq = tl.load(base + 2 * BLOCK_L + 3)
    qk_base = qk_ptr + (pid_b * num_k_heads + h) * (2 * BLOCK_K)
    q = tl.load(qk_base + offs_k)
    k = tl.load(qk_base + BLOCK_K + offs_k)
    for c in range(0, CHUNKS):
        S0, D_hist = S0_n, D_n
        offs_v = offs_v0 + c * BLOCK_V
        S0_n, D_n = replay._nonflush_tiles(state_base, dc_base, offs_v + BLOCK_V, offs_k, offs_l, mask_k, mask_l,
                                           head_v_dim, stride_state_row, stride_dc_l, c + 1 < CHUNKS, EVEN_TILE,
                                           False)
        replay._nonflush_rows(S0, D_hist, offs_v, eG, k, q, coef_k, coef_q, alpha, beta, kq, w, pid_b, hv, v_ptr,
                              dc_base, out_ptr, head_v_dim, stride_v_b, stride_v_h, stride_dc_l, stride_out_b,
                              stride_out_h, EVEN_TILE)


class _FoldOnly:
    """A launcher that drops the package's non-flush launch (the fold launch runs)."""

    programmatic_launches = True

    def __call__(self, kernel, grid, kwargs) -> bool:
        return kernel is replay._gdn_replay_kernel and kwargs["MODE"] == replay.NONFLUSH.value


class SplitRig(GDNRig):
    """GDNRig with a ``split`` kernel: the coefficient launch, the streaming launch on
    ``self.stream`` = (block_v, num_warps, chunks), then the package's fold launch."""

    coef_warps = 2
    stream = (8, 1, 4)

    def __init__(self, case: GDNCase, n_layers: int):
        super().__init__(case, n_layers)
        g, B = case.geom, case.batch
        self.block_l = max(16, triton.next_power_of_2(case.buffer_len))
        self.block_k = triton.next_power_of_2(g.head_k_dim)
        dev = self.cache.ssm_state.device
        self.coef = torch.zeros(B, g.num_v_heads, 2 * self.block_l + 4, device=dev)
        self.qk = torch.zeros(B, g.num_k_heads, 2 * self.block_k, device=dev)
        self.fold_only = _FoldOnly()

    def layer_step(self, launch: Launch, layer: int) -> None:
        if launch.kernel != "split":
            return super().layer_step(launch, layer)
        ring = self.cache.ring_kwargs(layer)
        s = self.step
        step = parse_gdn_step(s["q"], s["k"], s["v"], s["a"], s["b"], s["A_log"], s["dt_bias"], None, True,
                              s["initial_state_indices"], -1, s["out"], 1.0, 20.0)
        state = self.cache.ssm_state[layer]
        g = self.case.geom
        args = step.kernel_args()
        common = dict(write_pos_ptr=ring["write_pos"], coef_ptr=self.coef, qk_ptr=self.qk,
                      num_slots=state.shape[0], num_v_heads=g.num_v_heads, num_k_heads=g.num_k_heads,
                      head_k_dim=g.head_k_dim, v_heads_per_k_head=g.num_v_heads // g.num_k_heads,
                      buffer_len=self.case.buffer_len, BLOCK_K=self.block_k, BLOCK_L=self.block_l,
                      EVEN_TILE=True, **args)
        kc, gc, dc = ring["k_cache"], ring["g_cache"], ring["d_cache"]
        pdl = torch.cuda.is_available()
        fold_pdl = fold_programmatic_launch(state.device, step.batch * g.num_v_heads, "gdn")
        _coef_kernel[(g.num_v_heads, step.batch)](
            k_cache_ptr=kc, g_cache_ptr=gc, stride_kc_slot=kc.stride(0), stride_kc_h=kc.stride(1),
            stride_kc_l=kc.stride(2), stride_gc_slot=gc.stride(0), stride_gc_h=gc.stride(1),
            LAUNCH_DEPENDENTS=pdl, num_warps=self.coef_warps, **common)
        block_v, warps, chunks = self.stream
        _stream_kernel[(triton.cdiv(g.head_v_dim, block_v * chunks), g.num_v_heads, step.batch)](
            state_ptr=state, d_cache_ptr=dc, head_v_dim=g.head_v_dim, stride_state_slot=state.stride(0),
            stride_state_h=state.stride(1), stride_state_row=state.stride(2), stride_dc_slot=dc.stride(0),
            stride_dc_h=dc.stride(1), stride_dc_l=dc.stride(2), BLOCK_V=block_v, CHUNKS=chunks,
            WAIT_PRIMARY=pdl, LAUNCH_DEPENDENTS=fold_pdl, num_warps=warps, **common,
            **({"launch_pdl": True} if pdl else {}))
        with launcher_in_front(self.fold_only):
            super().layer_step(Launch("output_only", None, launch.fold_config), layer)


def check_split(rig: SplitRig) -> float:
    """Max abs difference of the split non-flush step from the package's (outputs and ring
    appends of layer 0, the fold's states) with the cursors staggered, flushing rows among
    them; the caches are restored after."""
    wp = rig.cache.write_pos
    L = rig.case.buffer_len
    wp.copy_((L - 1 - 5 * torch.arange(wp.numel(), device=wp.device)) % L)
    ring = {**rig.cache.ring_kwargs(0), "state": rig.cache.ssm_state[0]}
    saved = {k: v.clone() for k, v in ring.items()}
    results = []
    for kernel in ("output_only", "split"):
        for k, v in saved.items():
            ring[k].copy_(v)
        rig.layer_step(Launch(kernel), 0)
        results.append([rig.step["out"].float().clone()] + [ring[k].float().clone() for k in ("d_cache", "k_cache",
                                                                                            "g_cache", "state")])
    for k, v in saved.items():
        ring[k].copy_(v)
    rig.cache.write_pos.zero_()
    return max((a - b).abs().max().item() for a, b in zip(*results))


def timings(rig: SplitRig, launch: Launch, baseline_us: float, replays: int) -> dict:
    """``launch``'s cycle in phase and staggered against ``baseline_us``, and its non-flush
    step (every cursor at 8), microseconds a layer-step."""
    us = [rig.time_cycle_us(launch, replays, staggered) for staggered in (False, True)]
    return dict(baseline_us=round(baseline_us, 2), us_per_step=round(us[0], 2), staggered_us=round(us[1], 2),
                speedup=round(baseline_us / us[0], 3), staggered_speedup=round(baseline_us / us[1], 3),
                nonflush_us=round(rig.time_step_us(launch, 8, replays), 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3.5-4b", "qwen3.5-122b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[8, 32, 128, 512])
    ap.add_argument("--streams", nargs="+", default=["4,1,1", "8,1,1", "8,1,2", "8,1,4", "16,1,1", "16,2,1",
                                                      "16,2,2", "32,4,1"],
                    help="streaming launch configs block_v,num_warps,chunks")
    ap.add_argument("--coef-warps", type=int, default=2)
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--layers", type=int, default=None, help="layers of the rig (default: past the L2)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_coef_apart.json"))
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name in args.models:
        geom = model(name).geom
        for batch in args.batches:
            case = GDNCase(name, geom, batch, 16, torch.float32)
            rig = SplitRig(case, args.layers or (layers_for_cold_l2(case.state_bytes) if torch.cuda.is_available()
                                                 else 2))
            rig.coef_warps = args.coef_warps
            base = rig.baseline_launch()
            std = rig.time_cycle_us(base, args.replays)
            log.add(model=name, batch=batch, kernel="package", baseline=base.kernel,
                    **timings(rig, Launch("output_only"), std, args.replays))
            for spec in args.streams:
                rig.stream = tuple(map(int, spec.split(",")))
                log.add(model=name, batch=batch, kernel="split", stream=spec, max_abs_diff=check_split(rig),
                        **timings(rig, Launch("split"), std, args.replays))
            del rig
            torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
