"""Speculative decode, kernel level: replay verify + commit vs the standard spec step.

A run is ``steps`` verify steps over every rotated layer with a fixed acceptance pattern
(tokens accepted per step, bonus included), the cursors reset at its start so every graph
replay sees the same flushes. The standard path verifies writing T intermediate states per
layer and promotes the accepted one. Results are per layer-step and per accepted token;
``ar_fn`` times one token of standard autoregressive decode for the comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Union

import torch

from .._runtime import default_device
from ..ops.launch import LaunchConfig
from ..cache import GDNGeometry, Mamba2Geometry
from ..ops.gdn import fused_sigmoid_gating_delta_rule_update
from ..ops.gdn.spec import gdn_replayssm_spec_decode, gdn_spec_plan
from ..ops.gdn.spec_standard import gdn_spec_standard
from ..ops.mamba2 import selective_state_update
from ..ops.mamba2.spec import (
    commit_replayssm_spec,
    reset_replayssm_spec_cursors,
    ring_capacity,
    selective_state_update_replayssm_spec,
    spec_config,
)
from ..ops.mamba2.spec_standard import promote_spec_state, selective_state_update_spec_standard
from .records import git_commit
from .rig import best_config, even_phases
from .timing import capture, layers_for_cold_l2, time_graph_ms


# Verify-kernel launch configs tried per case: rows of headdim / of V per program, warps,
# whether flush rows fold in a launch of their own (the verify launch then needs fewer
# registers: ``benchmarks/kernel_registers.py --family spec``) and, for Mamba2, how many
# heads of a group one program loops over (the group's B.C products are then computed
# once). Mamba2's verify runs its products on tl.dot, whose operands each warp holds
# whole, so its candidates keep 16 rows a warp (H200, Super, T = 4, batch 128, us a step:
# (16, 1) 418-474, (32, 4) 739; a group's 16 heads in one program with the fold apart
# 370; the earlier per-token loop's best 654). GDN's shape (the state streamed in chunks
# of dstate columns, 64 rows on 4 warps) lost: 403-485 (``mamba2_spec_variants.json``).
# split_fold 2 (flush rows fold and verify in a launch of their own, the state read once:
# the way past the 3.33x bound of split_fold 1 at T = 4) lost: 380-419 against 375 (its
# flush rows' launch spills; commit 2866a0e, before the flush launches took row blocks).
# split_fold 3 (the state's product in a lean launch of its own; the candidates set the
# launch of the rest, the ring's part) comes first: H200, Super, T = 4, batch 128, us a
# verify step (``spec_state_apart.json``): rows, warps, heads (64, 1, 16) 286; (64, 1, 8)
# 290; (32, 1, 16) 310; (64, 2, 16) 312; (16, 1, 16) 341; (32, 2, 8) 356. 128 rows serve
# Nano's headdim 80 in one tile.
MAMBA2_SPEC_CANDIDATES = [LaunchConfig(b, w, heads_per_prog=h, split_fold=3)
                          for b, w, h in [(64, 1, 16), (128, 1, 16), (128, 2, 16), (64, 1, 8), (32, 1, 16)]] + \
    [LaunchConfig(b, w) for b, w in [(16, 1), (32, 2), (64, 4)]] + \
    [LaunchConfig(b, w, split_fold=1) for b, w in [(16, 1), (32, 2)]] + \
    [LaunchConfig(b, w, heads_per_prog=h, split_fold=s)
     for s in (1, 2) for b, w, h in [(16, 1, 4), (16, 1, 8), (16, 1, 16), (32, 2, 8), (32, 2, 16)]]
# GDN's verify runs on tl.dot; ``heads_per_prog`` value heads of one key head share the
# drafts' tile and history products; ``key_chunk`` streams the state through the matmul in
# chunks of key columns. The state's product in a launch of its own (``split_fold`` 3:
# the candidate sets the flush rows' launch) comes first: H200, Qwen3.5-122B, T = 4,
# batch 128, us a verify step (``gdn_state_apart.json``): 340. Then the flush rows' whole
# step in a launch of its own with the rest fused (``split_fold`` 2), the drafts' solve
# apart (``gdn_solve_apart.json``): rows, warps, heads (64, 2, 4) 359-362; (128, 4, 4)
# 386; split_fold 1 399; 1-2 heads a program 402-410. Before the solve moved out
# (``gdn_spec_dot_variants.json``): 128 rows on 4 warps, 4 heads, chunks of 32: 419; of
# 64: 448; whole tile 1044 (spilled); one head a program 607-924. 64 rows on 8 warps
# faulted (an illegal memory access, Triton 3.6). Folding a flush row inside the verify
# for every row ran 555-1164, and 2 pipeline stages in the chunk loop instead of 3-4 lost
# 36 (``gdn_spec_fold_in_verify.json``, commit b8e31c5).
GDN_SPEC_CANDIDATES = [LaunchConfig(b, w, split_fold=3, key_chunk=32) for b, w in [(64, 2), (128, 4)]] + \
    [LaunchConfig(b, w, heads_per_prog=h, split_fold=2, key_chunk=c)
                       for b, w, h, c in [(64, 2, 4, 32), (128, 4, 4, 32), (64, 2, 4, 64), (32, 1, 4, 32),
                                          (64, 2, 1, 32), (128, 4, 1, 32)]] + \
    [LaunchConfig(b, w, heads_per_prog=h, split_fold=1, key_chunk=c)  # a fold-only launch first
     for b, w, h, c in [(128, 4, 4, 32), (128, 4, 4, 64), (64, 2, 4, 64), (64, 4, 4, 0), (32, 2, 4, 0)]]


def spec_candidates(geom: Union[Mamba2Geometry, GDNGeometry]) -> list:
    """The verify-kernel launch configs the tuner tries for this family."""
    return GDN_SPEC_CANDIDATES if isinstance(geom, GDNGeometry) else MAMBA2_SPEC_CANDIDATES


def default_verify_config(geom: Union[Mamba2Geometry, GDNGeometry], batch: int) -> LaunchConfig:
    """The verify's launch config when the caller gives none (it changes with the batch)."""
    return gdn_spec_plan(batch).config if isinstance(geom, GDNGeometry) else spec_config(batch)


def state_shape(geom: Union[Mamba2Geometry, GDNGeometry]) -> tuple:
    if isinstance(geom, GDNGeometry):
        return (geom.num_v_heads, geom.head_v_dim, geom.head_k_dim)
    return (geom.nheads, geom.headdim, geom.dstate)


@dataclass(frozen=True)
class SpecCase:
    model: str
    geom: Union[Mamba2Geometry, GDNGeometry]
    batch: int
    num_tokens: int  # T = 1 + drafts
    history_len: int  # Bh
    accepted: int  # tokens accepted per step, bonus included (1..T)
    state_dtype: torch.dtype = torch.float32
    act_dtype: torch.dtype = torch.bfloat16

    @property
    def state_bytes(self) -> int:
        n = 1
        for s in state_shape(self.geom):
            n *= s
        return self.batch * n * torch.empty((), dtype=self.state_dtype).element_size()


def flush_period(num_tokens: int, history_len: int, accepted: int) -> int:
    """Verify steps between two flushes of a row that accepts ``accepted`` tokens at every
    step: the period of :func:`~trtllm_replayssm.ops.mamba2.spec.commit_replayssm_spec`'s
    cursor rule (a flush step restarts ``write_pos`` at the accepted count; a step flushes
    when ``write_pos + 2T`` passes the capacity ``Bh + T``)."""
    capacity, seen = history_len + num_tokens, {}
    wp, flush = 0, 2 * num_tokens > capacity
    for step in range(4 * capacity + 4):
        if (wp, flush) in seen:
            return step - seen[(wp, flush)]
        seen[(wp, flush)] = step
        wp = accepted if flush else wp + accepted
        flush = wp + 2 * num_tokens > capacity
    raise AssertionError("the cursor rule has no period")  # it cannot: wp is bounded


class SpecRig:
    """Layers, cursors and timing shared by the families; subclasses allocate the rings and
    step inputs and implement the three per-layer launches."""

    def __init__(self, case: SpecCase, n_layers: int, device: Optional[str] = None, seed: int = 0):
        self.dev = dev = device or default_device()
        torch.manual_seed(seed)
        Bz, T = case.batch, case.num_tokens
        self.case, self.n_layers, self.buf = case, n_layers, ring_capacity(T, case.history_len)
        self.state = torch.randn(n_layers, Bz, *state_shape(case.geom), device=dev).to(case.state_dtype)
        self.inter = torch.empty(n_layers, Bz, T, *state_shape(case.geom), device=dev, dtype=case.state_dtype)
        self.wp = torch.zeros(Bz, dtype=torch.int32, device=dev)
        self.origin = torch.zeros_like(self.wp)
        self.flush = torch.zeros(Bz, dtype=torch.int8, device=dev)
        self.slots = torch.arange(Bz, dtype=torch.int32, device=dev)
        self.accepted = torch.full((Bz,), case.accepted, dtype=torch.int32, device=dev)
        self.config: Optional[LaunchConfig] = None  # the verify kernel's launch config (None: its default)
        self._staggered: Optional[tuple] = None

    def cursors(self) -> dict:
        return dict(write_pos=self.wp, origin=self.origin, is_flush=self.flush, history_len=self.case.history_len)

    def replay_layer(self, i: int) -> None:
        raise NotImplementedError

    def standard_layer(self, i: int) -> None:
        raise NotImplementedError

    def ar_layer(self, i: int) -> None:
        raise NotImplementedError

    def staggered_start(self) -> tuple:
        """Cursors ``(write_pos, origin, is_flush)`` with the rows spread over their flush
        period (a server's requests, which entered decode at different steps, flush at
        different steps): from reset cursors row r commits ``n_r`` steps ahead (seeded at
        random, evenly over the period, so 1/period of the rows flush at every step), the
        ring left as it is (its values do not change the timing). Computed once."""
        if self._staggered is None:
            c = self.case
            period = flush_period(c.num_tokens, c.history_len, c.accepted)
            # 1..period steps ahead: the reset state itself lies outside the period (its first
            # step cannot flush), the states 1..period steps on from it make the period up.
            ahead = (even_phases(c.batch, period, seed=1) + 1).to(self.dev)
            reset_replayssm_spec_cursors(self.wp, self.origin, self.flush, self.slots, c.num_tokens, c.history_len)
            for k in range(period):  # rows with accepted 0 change nothing
                commit_replayssm_spec(self.wp, self.origin, self.flush, self.accepted * (ahead > k).int(),
                                      c.num_tokens, c.history_len, self.slots)
            self._staggered = (self.wp.clone(), self.origin.clone(), self.flush.clone())
        return self._staggered

    def replay_fn(self, steps: int, staggered: bool = False) -> Callable[[], None]:
        """``steps`` verify + commit steps from reset cursors (every row flushes at the same
        steps), or from :meth:`staggered_start`."""
        c = self.case
        start = self.staggered_start() if staggered else None

        def run():
            if start is None:
                reset_replayssm_spec_cursors(self.wp, self.origin, self.flush, self.slots, c.num_tokens,
                                             c.history_len)
            else:
                for cursor, at_start in zip((self.wp, self.origin, self.flush), start):
                    cursor.copy_(at_start)
            for _ in range(steps):
                for i in range(self.n_layers):
                    self.replay_layer(i)
                commit_replayssm_spec(self.wp, self.origin, self.flush, self.accepted, c.num_tokens, c.history_len,
                                      self.slots)
        return run

    def standard_fn(self, steps: int) -> Callable[[], None]:
        def run():
            for _ in range(steps):
                for i in range(self.n_layers):
                    self.standard_layer(i)
                    promote_spec_state(self.state[i], self.inter[i], self.accepted, self.slots)
        return run

    def ar_fn(self, steps: int) -> Callable[[], None]:
        def run():
            for _ in range(steps):
                for i in range(self.n_layers):
                    self.ar_layer(i)
        return run

    def time_us(self, fn: Callable[[], None], steps: int, replays: int = 20) -> float:
        """Median microseconds per layer-step."""
        return time_graph_ms(capture(fn), replays) * 1e3 / (steps * self.n_layers)


class Mamba2SpecRig(SpecRig):
    def __init__(self, case: SpecCase, n_layers: int, device: Optional[str] = None, seed: int = 0):
        super().__init__(case, n_layers, device, seed)
        g, Bz, T, a, dev, buf = case.geom, case.batch, case.num_tokens, case.act_dtype, self.dev, self.buf
        H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
        self.x_ring = torch.randn(n_layers, Bz, H, buf, P, device=dev).to(a)
        self.dt_ring = torch.rand(n_layers, Bz, H, buf, device=dev) * 0.1
        self.B_ring = torch.randn(n_layers, Bz, G, buf, N, device=dev).to(a)
        self.step = dict(x=torch.randn(Bz, T, H, P, device=dev, dtype=a), dt=torch.randn(Bz, T, H, device=dev, dtype=a),
                         A=-torch.rand(H, device=dev) - 0.5, B=torch.randn(Bz, T, G, N, device=dev, dtype=a),
                         C=torch.randn(Bz, T, G, N, device=dev, dtype=a), D=torch.randn(H, device=dev),
                         z=torch.randn(Bz, T, H, P, device=dev, dtype=a), dt_bias=torch.randn(H, device=dev),
                         dt_softplus=True, state_batch_indices=self.slots,
                         out=torch.empty(Bz, T, H, P, device=dev, dtype=a))
        self.ar_step = {k: (v[:, 0] if k in ("x", "dt", "B", "C", "z", "out") else v) for k, v in self.step.items()}

    def replay_layer(self, i: int) -> None:
        selective_state_update_replayssm_spec(self.state[i], **self.step, x_ring=self.x_ring[i],
                                              dt_ring=self.dt_ring[i], B_ring=self.B_ring[i], **self.cursors(), config=self.config)

    def standard_layer(self, i: int) -> None:
        selective_state_update_spec_standard(self.state[i], **self.step, intermediate_states=self.inter[i])

    def ar_layer(self, i: int) -> None:
        selective_state_update(self.state[i], **self.ar_step)


class GDNSpecRig(SpecRig):
    def __init__(self, case: SpecCase, n_layers: int, device: Optional[str] = None, seed: int = 0):
        super().__init__(case, n_layers, device, seed)
        g, Bz, T, a, dev, buf = case.geom, case.batch, case.num_tokens, case.act_dtype, self.dev, self.buf
        H, HV, K, V = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
        self.state.mul_(0.1)
        self.d_ring = torch.randn(n_layers, Bz, HV, buf, V, device=dev)
        self.k_ring = torch.randn(n_layers, Bz, H, buf, K, device=dev) * K ** -0.5
        self.g_ring = -torch.rand(n_layers, Bz, HV, buf, device=dev) * 0.1
        self.step = dict(q=torch.randn(Bz, T, H, K, device=dev, dtype=a), k=torch.randn(Bz, T, H, K, device=dev, dtype=a),
                         v=torch.randn(Bz, T, HV, V, device=dev, dtype=a), a=torch.randn(Bz, T, HV, device=dev, dtype=a),
                         b=torch.randn(Bz, T, HV, device=dev, dtype=a), A_log=torch.rand(HV, device=dev).log(),
                         dt_bias=torch.randn(HV, device=dev), initial_state_indices=self.slots,
                         out=torch.empty(Bz, T, HV, V, device=dev, dtype=a))
        self.ar_step = {k: (v[:, 0] if k in ("q", "k", "v", "a", "b", "out") else v) for k, v in self.step.items()}

    def replay_layer(self, i: int) -> None:
        gdn_replayssm_spec_decode(self.state[i], **self.step, d_ring=self.d_ring[i], k_ring=self.k_ring[i],
                                  g_ring=self.g_ring[i], **self.cursors(), config=self.config)

    def standard_layer(self, i: int) -> None:
        gdn_spec_standard(self.state[i], **self.step, intermediate_states=self.inter[i])

    def ar_layer(self, i: int) -> None:
        fused_sigmoid_gating_delta_rule_update(self.state[i], **self.ar_step)


def make_spec_rig(case: SpecCase) -> SpecRig:
    # The intermediate states make the standard path's footprint (T + 1) x the state.
    per_layer = case.state_bytes * (case.num_tokens + 1)
    n_layers = layers_for_cold_l2(per_layer) if torch.cuda.is_available() else 2
    return (GDNSpecRig if isinstance(case.geom, GDNGeometry) else Mamba2SpecRig)(case, n_layers)


def probe_record(rig: SpecRig, cfg: LaunchConfig, steps: int, replays: int, **setting) -> dict:
    """A probe's record: a run of ``steps`` verify + commit steps on ``rig`` with verify
    config ``cfg`` (the probe has set the module-level ``setting`` it names), printed."""
    rig.config = cfg
    us = rig.time_us(rig.replay_fn(steps), steps, replays)
    c = rig.case
    rec = dict(gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else "none", model=c.model,
               batch=c.batch, T=c.num_tokens, acceptance=c.accepted, config=cfg.to_dict(), **setting,
               us_per_step=round(us, 1), commit=git_commit())
    print(rec, flush=True)
    return rec


def tune_verify_config(case: SpecCase, steps: int, replays: int = 20, limit: Optional[int] = None) -> dict:
    """The fastest verify-kernel config for ``case`` (``best_config``'s dict)."""
    rig = make_spec_rig(case)

    def time_config(cfg: LaunchConfig) -> float:
        rig.config = cfg
        return rig.time_us(rig.replay_fn(steps), steps, replays)

    return best_config(time_config, spec_candidates(case.geom)[:limit])
