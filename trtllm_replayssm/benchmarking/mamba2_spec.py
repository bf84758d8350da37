"""Mamba2 speculative decode, kernel level: replay verify + commit vs the standard spec step.

A run is ``steps`` verify steps over every rotated layer with a fixed acceptance pattern
(tokens accepted per step, bonus included), the cursors reset at its start so every graph
replay sees the same flushes. The standard path verifies writing T intermediate states per
layer and promotes the accepted one. Results are per layer-step and per accepted token.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from .._runtime import default_device
from ..cache import Mamba2Geometry
from ..ops.mamba2 import selective_state_update
from ..ops.mamba2.spec import (
    commit_replayssm_spec,
    reset_replayssm_spec_cursors,
    ring_capacity,
    selective_state_update_replayssm_spec,
)
from ..ops.mamba2.spec_standard import promote_spec_state, selective_state_update_spec_standard
from .timing import capture, layers_for_cold_l2, time_graph_ms


@dataclass(frozen=True)
class SpecCase:
    model: str
    geom: Mamba2Geometry
    batch: int
    num_tokens: int  # T = 1 + drafts
    history_len: int  # Bh
    accepted: int  # tokens accepted per step, bonus included (1..T)
    state_dtype: torch.dtype = torch.float32
    act_dtype: torch.dtype = torch.bfloat16

    @property
    def state_bytes(self) -> int:
        g = self.geom
        return self.batch * g.nheads * g.headdim * g.dstate * torch.empty((), dtype=self.state_dtype).element_size()


class SpecRig:
    """``n_layers`` distinct layers with a replay ring, standard intermediate states and the
    step inputs of one case."""

    def __init__(self, case: SpecCase, n_layers: int, device: Optional[str] = None, seed: int = 0):
        dev = device or default_device()
        torch.manual_seed(seed)
        g, Bz, T, a = case.geom, case.batch, case.num_tokens, case.act_dtype
        H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
        buf = ring_capacity(T, case.history_len)
        self.case, self.n_layers = case, n_layers
        self.state = torch.randn(n_layers, Bz, H, P, N, device=dev).to(case.state_dtype)
        self.inter = torch.empty(n_layers, Bz, T, H, P, N, device=dev, dtype=case.state_dtype)
        self.x_ring = torch.randn(n_layers, Bz, H, buf, P, device=dev).to(a)
        self.dt_ring = torch.rand(n_layers, Bz, H, buf, device=dev) * 0.1
        self.B_ring = torch.randn(n_layers, Bz, G, buf, N, device=dev).to(a)
        self.wp = torch.zeros(Bz, dtype=torch.int32, device=dev)
        self.origin = torch.zeros_like(self.wp)
        self.flush = torch.zeros(Bz, dtype=torch.int8, device=dev)
        self.slots = torch.arange(Bz, dtype=torch.int32, device=dev)
        self.accepted = torch.full((Bz,), case.accepted, dtype=torch.int32, device=dev)
        A = -torch.rand(H, device=dev) - 0.5
        self.step = dict(x=torch.randn(Bz, T, H, P, device=dev, dtype=a), dt=torch.randn(Bz, T, H, device=dev, dtype=a),
                         A=A, B=torch.randn(Bz, T, G, N, device=dev, dtype=a),
                         C=torch.randn(Bz, T, G, N, device=dev, dtype=a), D=torch.randn(H, device=dev),
                         z=torch.randn(Bz, T, H, P, device=dev, dtype=a), dt_bias=torch.randn(H, device=dev),
                         dt_softplus=True, state_batch_indices=self.slots,
                         out=torch.empty(Bz, T, H, P, device=dev, dtype=a))
        # One token of autoregressive decode, for the per-token comparison.
        self.ar_step = {k: (v[:, 0] if k in ("x", "dt", "B", "C", "z", "out") else v) for k, v in self.step.items()}

    def replay_fn(self, steps: int) -> Callable[[], None]:
        c = self.case

        def run():
            reset_replayssm_spec_cursors(self.wp, self.origin, self.flush, self.slots, c.num_tokens, c.history_len)
            for _ in range(steps):
                for i in range(self.n_layers):
                    selective_state_update_replayssm_spec(
                        self.state[i], **self.step, x_ring=self.x_ring[i], dt_ring=self.dt_ring[i],
                        B_ring=self.B_ring[i], write_pos=self.wp, origin=self.origin, is_flush=self.flush,
                        history_len=c.history_len)
                commit_replayssm_spec(self.wp, self.origin, self.flush, self.accepted, c.num_tokens, c.history_len,
                                      self.slots)
        return run

    def standard_fn(self, steps: int) -> Callable[[], None]:
        def run():
            for _ in range(steps):
                for i in range(self.n_layers):
                    selective_state_update_spec_standard(self.state[i], **self.step, intermediate_states=self.inter[i])
                    promote_spec_state(self.state[i], self.inter[i], self.accepted, self.slots)
        return run

    def ar_fn(self, steps: int) -> Callable[[], None]:
        def run():
            for _ in range(steps):
                for i in range(self.n_layers):
                    selective_state_update(self.state[i], **self.ar_step)
        return run

    def time_us(self, fn: Callable[[], None], steps: int, replays: int = 20) -> float:
        """Median microseconds per layer-step."""
        return time_graph_ms(capture(fn), replays) * 1e3 / (steps * self.n_layers)


def make_spec_rig(case: SpecCase) -> SpecRig:
    # The intermediate states make the standard path's footprint (T + 1) x the state.
    per_layer = case.state_bytes * (case.num_tokens + 1)
    return SpecRig(case, layers_for_cold_l2(per_layer) if torch.cuda.is_available() else 2)
