"""A multi-cycle GDN decode scenario checked step by step against the fp64 recurrence
(same structure as ``mamba2_harness``: staggered cursors, a padding row, unused slots)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import torch

import trtllm_replayssm as rs
from trtllm_replayssm.ops.cursors import FLUSH_EVERY_STEP
from mamba2_harness import DEVICE, NUM_SLOTS, PAD, SLOTS, RunResult, bits, rel_err, same_bits, tolerance
from trtllm_replayssm.cache import GDNGeometry, GDNReplayCache
from trtllm_replayssm.ops.gdn.naive import gdn_step_ref


@dataclass
class GDNScenario:
    geom: GDNGeometry
    buffer_len: int
    state_dtype: torch.dtype = torch.float32
    act_dtype: torch.dtype = torch.float32
    ring_dtype: torch.dtype = torch.float32
    packed: bool = False  # pass q/k/v as views of one packed [q | k | v] row
    seed: int = 0

    def __post_init__(self):
        g = self.gen = torch.Generator().manual_seed(self.seed)
        HV = self.geom.num_v_heads
        self.A_log = torch.randn(HV, generator=g) * 0.5 - 0.5
        self.dt_bias = torch.randn(HV, generator=g) * 0.5

    def step_inputs(self, batch: int) -> Dict[str, torch.Tensor]:
        G, g, a = self.geom, self.gen, self.act_dtype
        return dict(q=torch.randn(batch, G.num_k_heads, G.head_k_dim, generator=g).to(a),
                    k=torch.randn(batch, G.num_k_heads, G.head_k_dim, generator=g).to(a),
                    v=torch.randn(batch, G.num_v_heads, G.head_v_dim, generator=g).to(a),
                    a=torch.randn(batch, G.num_v_heads, generator=g).to(a),
                    b=torch.randn(batch, G.num_v_heads, generator=g).to(a))

    def kernel_kwargs(self, inp: Dict[str, torch.Tensor]) -> dict:
        kw = {k: v.to(DEVICE) for k, v in inp.items()}
        if self.packed:
            G = self.geom
            qkv = torch.cat([kw["q"].flatten(1), kw["k"].flatten(1), kw["v"].flatten(1)], dim=1)
            kw["q"], kw["k"], kw["v"] = rs.split_packed_qkv(qkv, G.num_k_heads, G.num_v_heads, G.head_k_dim,
                                                             G.head_v_dim)
        return dict(**kw, A_log=self.A_log.to(DEVICE), dt_bias=self.dt_bias.to(DEVICE))

    def ref_step(self, state64, inp):
        return gdn_step_ref(state64, inp["q"], inp["k"], inp["v"], inp["a"], inp["b"], self.A_log, self.dt_bias)


def run_gdn_replay(sc: GDNScenario, steps: int, route="output_only",
                   corrupt: Optional[Callable[[int, GDNReplayCache], None]] = None,
                   force_flush_at: Optional[Dict[int, List[int]]] = None, **launch_configs) -> RunResult:
    L, batch, G = sc.buffer_len, len(SLOTS), sc.geom
    cache = GDNReplayCache(G, 1, NUM_SLOTS, L, sc.state_dtype, sc.ring_dtype, DEVICE)
    g = sc.gen
    cache.ssm_state.copy_(torch.randn(cache.ssm_state.shape, generator=g).to(sc.state_dtype))
    cache.d_cache.copy_(torch.randn(cache.d_cache.shape, generator=g).to(sc.ring_dtype))
    cache.k_cache.copy_(rs.ops.gdn.l2norm(torch.randn(cache.k_cache.shape, generator=g)).to(sc.ring_dtype))
    cache.g_cache.copy_(-torch.rand(cache.g_cache.shape, generator=g))
    start = {2: min(1, L - 1), 0: L - 1, 4: L // 2}
    wp = torch.randint(0, L, (NUM_SLOTS,), generator=g, dtype=torch.int32)
    for s, w in start.items():
        wp[s] = w
    cache.write_pos.copy_(wp)
    rep = G.num_v_heads // G.num_k_heads
    ref_state = {}
    for s, w in start.items():  # checkpoint folded with the cached entries
        st = cache.ssm_state[0, s].double().cpu()
        for j in range(w):
            k_j = cache.k_cache[0, s, :, j].double().cpu().repeat_interleave(rep, 0)  # (HV, K)
            d_j = cache.d_cache[0, s, :, j].double().cpu()  # (HV, V)
            st = torch.exp(cache.g_cache[0, s, :, j].double().cpu())[:, None, None] * st + d_j[:, :, None] * k_j[:, None, :]
        ref_state[s] = st[None]

    slot_idx = torch.tensor(SLOTS, dtype=torch.int32, device=DEVICE)
    unused = [s for s in range(NUM_SLOTS) if s not in SLOTS]
    names = ("ssm_state", "d_cache", "k_cache", "g_cache")
    frozen = {n: bits(getattr(cache, n)[:, unused]) for n in names}
    frozen_wp = bits(cache.write_pos[unused])
    sentinel = torch.full((batch, G.num_v_heads, G.head_v_dim), 7.25, dtype=sc.act_dtype, device=DEVICE)
    out = sentinel.clone()
    tol = tolerance(sc.state_dtype, max(sc.act_dtype, sc.ring_dtype, key=lambda d: torch.finfo(d).eps))
    route_at = route if callable(route) else (lambda t: route)  # a route per step, or one for all
    if any(route_at(t) in FLUSH_EVERY_STEP for t in range(steps)) and sc.state_dtype != torch.float32:
        tol *= 4  # it rounds the state every step, as the standard kernel does
    flushes, max_err = [0] * batch, 0.0
    for t in range(steps):
        if corrupt is not None:
            corrupt(t, cache)
        inp = sc.step_inputs(batch)
        rows_ff = (force_flush_at or {}).get(t, [])
        ff = torch.zeros(batch, dtype=torch.int8)
        ff[rows_ff] = 1
        ff_dev = ff.to(DEVICE) if force_flush_at is not None else None
        wp_before = cache.write_pos.cpu().clone()
        route_t = route_at(t)
        rs.fused_recurrent_gated_delta_rule_replayssm(
            cache.ssm_state[0], **sc.kernel_kwargs(inp), initial_state_indices=slot_idx, pad_slot_id=PAD, out=out,
            force_flush=ff_dev, route=route_t, **cache.ring_kwargs(0), **launch_configs)
        cache.advance(slot_idx, ff_dev, route=route_t, pad_slot_id=PAD)
        for r, s in enumerate(SLOTS):
            if s == PAD:
                assert same_bits(out[r], sentinel[r]), f"step {t}: padding row {r} output was written"
                continue
            new_state, y = sc.ref_step(ref_state[s], {k: v[r:r + 1] for k, v in inp.items()})
            ref_state[s] = new_state
            err = rel_err(out[r].cpu(), y[0])
            max_err = max(max_err, err)
            assert err <= tol, f"step {t} row {r} (slot {s}): output error {err:.3g} > {tol:.3g}"
            flushed = route_t in FLUSH_EVERY_STEP or int(wp_before[s]) == L - 1 or r in rows_ff
            assert int(cache.write_pos[s]) == (0 if flushed else int(wp_before[s]) + 1), f"step {t} slot {s}: cursor"
            if flushed:
                flushes[r] += 1
                st_err = rel_err(cache.ssm_state[0, s].cpu(), new_state[0])
                assert st_err <= tol, f"step {t} slot {s}: checkpoint error after flush {st_err:.3g} > {tol:.3g}"
        for n, before in frozen.items():
            assert same_bits(getattr(cache, n)[:, unused], before), f"step {t}: unused slots' {n} changed"
        assert same_bits(cache.write_pos[unused], frozen_wp), f"step {t}: unused slots' write_pos changed"
    return RunResult(max_err=max_err, flushes_per_row=flushes)


def run_gdn_standard(sc: GDNScenario, steps: int, config=None) -> RunResult:
    batch, G = len(SLOTS), sc.geom
    state = torch.randn(NUM_SLOTS, G.num_v_heads, G.head_v_dim, G.head_k_dim, generator=sc.gen).to(sc.state_dtype)
    state = state.to(DEVICE)
    ref_state = {s: state[s].double().cpu()[None] for s in SLOTS if s != PAD}
    unused = [s for s in range(NUM_SLOTS) if s not in SLOTS]
    frozen = bits(state[unused])
    slot_idx = torch.tensor(SLOTS, dtype=torch.int64, device=DEVICE)
    sentinel = torch.full((batch, G.num_v_heads, G.head_v_dim), -3.5, dtype=sc.act_dtype, device=DEVICE)
    out = sentinel.clone()
    tol = tolerance(sc.state_dtype, sc.act_dtype) * (4 if sc.state_dtype != torch.float32 else 1)
    max_err = 0.0
    for t in range(steps):
        inp = sc.step_inputs(batch)
        rs.fused_sigmoid_gating_delta_rule_update(state, **sc.kernel_kwargs(inp), initial_state_indices=slot_idx,
                                                  pad_slot_id=PAD, out=out, config=config)
        for r, s in enumerate(SLOTS):
            if s == PAD:
                assert same_bits(out[r], sentinel[r]), f"step {t}: padding row {r} output was written"
                continue
            ref_state[s], y = sc.ref_step(ref_state[s], {k: v[r:r + 1] for k, v in inp.items()})
            err = rel_err(out[r].cpu(), y[0])
            max_err = max(max_err, err)
            assert err <= tol, f"step {t} row {r}: output error {err:.3g} > {tol:.3g}"
            assert rel_err(state[s].cpu(), ref_state[s][0]) <= tol, f"step {t} slot {s}: state error"
        assert same_bits(state[unused], frozen), f"step {t}: unused slots changed"
    return RunResult(max_err=max_err, flushes_per_row=[0] * batch)
