"""A multi-cycle Mamba2 decode scenario, checked step by step against the fp64 recurrence.

The batch has staggered cursors per row (each slot starts with a partly filled ring whose
entries are consistent with its checkpoint), a padding row and unused pool slots. At every
step the outputs of the real rows are compared with the reference, the padding row's
output and the unused slots (checkpoint, ring, cursor) must stay bit-identical, and after
each flush the checkpoint must equal the reference state.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional

import torch

import trtllm_replayssm as rs
from trtllm_replayssm.ops.cursors import FLUSH_EVERY_STEP
from trtllm_replayssm.cache import Mamba2Geometry, Mamba2ReplayCache
from trtllm_replayssm.ops.mamba2.naive import mamba2_step_ref, process_dt

DEVICE = rs._runtime.default_device()
PAD = -1
# Row -> slot; slot 1, 3 and 5 are never used, row 1 is padding.
SLOTS = [2, PAD, 0, 4]
NUM_SLOTS = 6


def tolerance(state_dtype: torch.dtype, act_dtype: torch.dtype) -> float:
    """Relative error bound (norm over a step's outputs) for this dtype pair."""
    eps = max(torch.finfo(state_dtype).eps, torch.finfo(act_dtype).eps)
    return max(3 * eps, 2e-5)


def rel_err(a: torch.Tensor, ref: torch.Tensor) -> float:
    return ((a.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.detach().clone()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


@dataclass
class Scenario:
    geom: Mamba2Geometry
    buffer_len: int
    state_dtype: torch.dtype = torch.float32
    act_dtype: torch.dtype = torch.float32
    has_d: bool = True
    has_z: bool = True
    tied_params: bool = False  # pass A/D/dt_bias/dt expanded with stride 0, as TensorRT-LLM does
    seed: int = 0
    params: Dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self):
        g = torch.Generator().manual_seed(self.seed)
        H = self.geom.nheads
        self.gen = g
        self.params = dict(
            A=-(torch.rand(H, generator=g) * 0.8 + 0.2),
            dt_bias=torch.randn(H, generator=g) * 0.5 - 1.0,
            D=torch.randn(H, generator=g) if self.has_d else None,
        )

    def step_inputs(self, batch: int) -> Dict[str, torch.Tensor]:
        H, P, N, G = self.geom.nheads, self.geom.headdim, self.geom.dstate, self.geom.ngroups
        g, a = self.gen, self.act_dtype
        return dict(
            x=torch.randn(batch, H, P, generator=g).to(a),
            dt=torch.randn(batch, H, generator=g).to(a),
            B=torch.randn(batch, G, N, generator=g).to(a),
            C=torch.randn(batch, G, N, generator=g).to(a),
            z=torch.randn(batch, H, P, generator=g).to(a) if self.has_z else None,
        )

    def kernel_kwargs(self, inp: Dict[str, torch.Tensor]) -> dict:
        """Step arguments on the device, in the layout the kernels are called with."""
        H, P, N = self.geom.nheads, self.geom.headdim, self.geom.dstate
        p = {k: (v.to(DEVICE) if v is not None else None) for k, v in self.params.items()}
        kw = {k: (v.to(DEVICE) if v is not None else None) for k, v in inp.items()}
        if self.tied_params:
            p["A"] = p["A"][:, None, None].expand(H, P, N)
            p["dt_bias"] = p["dt_bias"][:, None].expand(H, P)
            if p["D"] is not None:
                p["D"] = p["D"][:, None].expand(H, P)
            kw["dt"] = kw["dt"][:, :, None].expand(-1, H, P)
        return dict(**kw, **p, dt_softplus=True)

    def ref_step(self, state64: torch.Tensor, inp: Dict[str, torch.Tensor]):
        return mamba2_step_ref(state64, inp["x"], inp["dt"], self.params["A"], inp["B"], inp["C"],
                               D=self.params["D"], z=inp["z"], dt_bias=self.params["dt_bias"], dt_softplus=True)


@dataclass
class RunResult:
    max_err: float
    flushes_per_row: List[int]


def run_replay(sc: Scenario, steps: int, route="output_only",
               corrupt: Optional[Callable[[int, Mamba2ReplayCache], None]] = None,
               force_flush_at: Optional[Dict[int, List[int]]] = None, **launch_configs) -> RunResult:
    """Decode ``steps`` steps with the replay kernel; assert against the reference.

    ``corrupt(step, cache)`` may tamper with the cache before a step (to prove the checks
    catch it). ``force_flush_at[step]`` lists batch rows force-flushed at that step.
    ``launch_configs``: ``config`` / ``fold_config`` passed to the kernel wrapper.
    """
    L = sc.buffer_len
    batch = len(SLOTS)
    cache = Mamba2ReplayCache(sc.geom, 1, NUM_SLOTS, L, sc.state_dtype, sc.act_dtype, DEVICE)
    g = sc.gen
    # Random checkpoints and ring contents everywhere, so untouched slots are not zeros.
    cache.ssm_state.copy_(torch.randn(cache.ssm_state.shape, generator=g).to(sc.state_dtype))
    cache.x_cache.copy_(torch.randn(cache.x_cache.shape, generator=g).to(sc.act_dtype))
    cache.B_cache.copy_(torch.randn(cache.B_cache.shape, generator=g).to(sc.act_dtype))
    cache.dt_cache.copy_(process_dt(torch.randn(cache.dt_cache.shape[:-1] + (L,), generator=g),
                                    sc.params["dt_bias"][None, :, None], True))
    # Staggered cursors: rows start at different fill levels; slot 0 flushes at once.
    start = {2: min(1, L - 1), 0: L - 1, 4: L // 2}
    wp = torch.randint(0, L, (NUM_SLOTS,), generator=g, dtype=torch.int32)
    for s, w in start.items():
        wp[s] = w
    cache.write_pos.copy_(wp)

    # Reference state of each used slot = checkpoint folded with its cached entries.
    ref_state = {}
    for s, w in start.items():
        st = cache.ssm_state[0, s].double().cpu()[None]
        for j in range(w):
            dt_j = cache.dt_cache[0, s, :, j].cpu().double()[None]
            x_j = cache.x_cache[0, s, :, j].cpu()[None]
            B_j = cache.B_cache[0, s, :, j].cpu()[None]
            st, _ = mamba2_step_ref(st, x_j, dt_j, sc.params["A"], B_j, torch.zeros_like(B_j))
        ref_state[s] = st

    slot_idx = torch.tensor(SLOTS, dtype=torch.int32, device=DEVICE)
    unused = [s for s in range(NUM_SLOTS) if s not in SLOTS]
    frozen = {name: bits(getattr(cache, name)[:, unused]) for name in ("ssm_state", "x_cache", "dt_cache", "B_cache")}
    frozen_wp = bits(cache.write_pos[unused])
    sentinel = torch.full((batch, sc.geom.nheads, sc.geom.headdim), 7.25, dtype=sc.act_dtype, device=DEVICE)
    out = sentinel.clone()
    tol = tolerance(sc.state_dtype, sc.act_dtype)
    route_at = route if callable(route) else (lambda t: route)  # a route per step, or one for all
    if any(route_at(t) in FLUSH_EVERY_STEP for t in range(steps)) and sc.state_dtype != torch.float32:
        tol *= 4  # it rounds the state every step, as the standard kernel does
    flushes = [0] * batch
    max_err = 0.0

    for t in range(steps):
        if corrupt is not None:
            corrupt(t, cache)
        inp = sc.step_inputs(batch)
        rows_ff = (force_flush_at or {}).get(t, [])
        ff = torch.zeros(batch, dtype=torch.int8)
        ff[rows_ff] = 1
        wp_before = cache.write_pos.cpu().clone()
        route_t = route_at(t)
        rs.selective_state_update_replayssm(
            cache.ssm_state[0], **sc.kernel_kwargs(inp), state_batch_indices=slot_idx, pad_slot_id=PAD, out=out,
            force_flush=ff.to(DEVICE) if force_flush_at is not None else None, route=route_t, **cache.ring_kwargs(0),
            **launch_configs)
        cache.advance(slot_idx, ff.to(DEVICE) if force_flush_at is not None else None, route=route_t, pad_slot_id=PAD)

        for r, s in enumerate(SLOTS):
            if s == PAD:
                assert same_bits(out[r], sentinel[r]), f"step {t}: padding row {r} output was written"
                continue
            sel = slice(r, r + 1)
            new_state, y = sc.ref_step(ref_state[s], {k: (v[sel] if v is not None else None) for k, v in inp.items()})
            ref_state[s] = new_state
            err = rel_err(out[r].cpu(), y[0])
            max_err = max(max_err, err)
            assert err <= tol, f"step {t} row {r} (slot {s}): output error {err:.3g} > {tol:.3g}"
            flushed = route_t in FLUSH_EVERY_STEP or int(wp_before[s]) == L - 1 or r in rows_ff
            expect_wp = 0 if flushed else int(wp_before[s]) + 1
            assert int(cache.write_pos[s]) == expect_wp, f"step {t} slot {s}: write_pos {int(cache.write_pos[s])} != {expect_wp}"
            if flushed:
                flushes[r] += 1
                st_err = rel_err(cache.ssm_state[0, s].cpu(), new_state[0])
                assert st_err <= tol, f"step {t} slot {s}: checkpoint error after flush {st_err:.3g} > {tol:.3g}"
        for name, before in frozen.items():
            assert same_bits(getattr(cache, name)[:, unused], before), f"step {t}: unused slots' {name} changed"
        assert same_bits(cache.write_pos[unused], frozen_wp), f"step {t}: unused slots' write_pos changed"
    return RunResult(max_err=max_err, flushes_per_row=flushes)


def run_standard(sc: Scenario, steps: int, config=None) -> RunResult:
    """The same scenario (padding row, unused slots) with the standard kernel (``config``:
    its launch config, by default the table's)."""
    batch = len(SLOTS)
    H, P, N = sc.geom.nheads, sc.geom.headdim, sc.geom.dstate
    state = torch.randn(NUM_SLOTS, H, P, N, generator=sc.gen).to(sc.state_dtype).to(DEVICE)
    ref_state = {s: state[s].double().cpu()[None] for s in SLOTS if s != PAD}
    unused = [s for s in range(NUM_SLOTS) if s not in SLOTS]
    frozen = bits(state[unused])
    slot_idx = torch.tensor(SLOTS, dtype=torch.int64, device=DEVICE)
    sentinel = torch.full((batch, H, P), -3.5, dtype=sc.act_dtype, device=DEVICE)
    out = sentinel.clone()
    # The standard kernel rounds the state every step: allow for that with a bf16/fp16 state.
    tol = tolerance(sc.state_dtype, sc.act_dtype) * (4 if sc.state_dtype != torch.float32 else 1)
    max_err = 0.0
    for t in range(steps):
        inp = sc.step_inputs(batch)
        rs.selective_state_update(state, **sc.kernel_kwargs(inp), state_batch_indices=slot_idx, pad_slot_id=PAD, out=out,
                                  config=config)
        for r, s in enumerate(SLOTS):
            if s == PAD:
                assert same_bits(out[r], sentinel[r]), f"step {t}: padding row {r} output was written"
                continue
            sel = slice(r, r + 1)
            ref_state[s], y = sc.ref_step(ref_state[s], {k: (v[sel] if v is not None else None) for k, v in inp.items()})
            err = rel_err(out[r].cpu(), y[0])
            max_err = max(max_err, err)
            assert err <= tol, f"step {t} row {r}: output error {err:.3g} > {tol:.3g}"
            st_err = rel_err(state[s].cpu(), ref_state[s][0])
            assert st_err <= tol, f"step {t} slot {s}: state error {st_err:.3g} > {tol:.3g}"
        assert same_bits(state[unused], frozen), f"step {t}: unused slots changed"
    return RunResult(max_err=max_err, flushes_per_row=[0] * batch)
