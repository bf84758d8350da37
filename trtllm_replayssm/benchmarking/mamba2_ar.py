"""Mamba2 autoregressive decode, kernel level: standard vs ReplaySSM over whole cycles.

A *cycle* is L decode steps with the cursors advancing 0..L-1, so it holds exactly one
flush per slot; each step runs every rotated layer and then advances the cursors once, as
a model would. Results are per layer-step: cycle time / (L x layers).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional

import torch

from ..cache import Mamba2Geometry, Mamba2ReplayCache
from ..ops.mamba2 import selective_state_update, selective_state_update_replayssm
from ..ops.mamba2.launch import LaunchConfig
from .timing import capture, layers_for_cold_l2, time_graph_ms

KERNELS = ("standard", "output_only", "state_and_output", "always_flush")


@dataclass(frozen=True)
class Mamba2Case:
    model: str
    geom: Mamba2Geometry
    batch: int
    buffer_len: int
    state_dtype: torch.dtype
    act_dtype: torch.dtype = torch.bfloat16

    @property
    def state_bytes(self) -> int:
        g = self.geom
        return self.batch * g.nheads * g.headdim * g.dstate * torch.empty((), dtype=self.state_dtype).element_size()

    def moved_bytes_per_cycle(self, kernel: str) -> int:
        """State bytes a cycle must move: read+write every step (standard, always_flush),
        or read every step and write once (replay)."""
        L = self.buffer_len
        return 2 * L * self.state_bytes if kernel in ("standard", "always_flush") else (L + 1) * self.state_bytes


def candidate_configs(kernel: str, headdim: int) -> List[LaunchConfig]:
    """The launch configs a tuning sweep tries for ``kernel`` at this headdim."""
    cap = 1 << (headdim - 1).bit_length()
    blocks = (4, 8, 16, 32) if kernel == "standard" else (8, 16, 32, 64)
    return [LaunchConfig(b, w) for b, w in itertools.product(blocks, (1, 2, 4, 8)) if b <= cap]


class Mamba2Rig:
    """``n_layers`` distinct layers (checkpoints, rings, step inputs) of one case on the GPU,
    with the step inputs in TensorRT-LLM's tied layout."""

    def __init__(self, case: Mamba2Case, n_layers: int, device: str = "cuda", seed: int = 0):
        torch.manual_seed(seed)
        g, B, a = case.geom, case.batch, case.act_dtype
        H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
        self.case, self.n_layers = case, n_layers
        self.cache = Mamba2ReplayCache(g, n_layers, B, case.buffer_len, case.state_dtype, a, device)
        self.cache.ssm_state.normal_()
        self.cache.x_cache.normal_()
        self.cache.B_cache.normal_()
        self.cache.dt_cache.uniform_(0.01, 0.1)
        self.slot_idx = torch.arange(B, dtype=torch.int32, device=device)
        A = -torch.rand(H, device=device) - 0.5
        self.step = dict(
            x=torch.randn(B, H, P, device=device, dtype=a),
            dt=torch.randn(B, H, device=device, dtype=a)[:, :, None].expand(B, H, P),
            A=A[:, None, None].expand(H, P, N),
            B=torch.randn(B, G, N, device=device, dtype=a),
            C=torch.randn(B, G, N, device=device, dtype=a),
            D=torch.randn(H, device=device)[:, None].expand(H, P),
            z=torch.randn(B, H, P, device=device, dtype=a),
            dt_bias=torch.randn(H, device=device)[:, None].expand(H, P),
            dt_softplus=True,
            state_batch_indices=self.slot_idx,
            out=torch.empty(B, H, P, device=device, dtype=a),
        )

    def layer_step(self, kernel: str, layer: int, config: Optional[LaunchConfig]) -> None:
        if kernel == "standard":
            selective_state_update(self.cache.ssm_state[layer], **self.step, config=config)
        else:
            selective_state_update_replayssm(self.cache.ssm_state[layer], **self.step, route=kernel,
                                             config=config, **self.cache.ring_kwargs(layer))

    def cycle_fn(self, kernel: str, config: Optional[LaunchConfig]) -> Callable[[], None]:
        """L steps x all layers (+ one cursor advance per step for replay routes)."""
        def run():
            for _ in range(self.case.buffer_len):
                for layer in range(self.n_layers):
                    self.layer_step(kernel, layer, config)
                if kernel != "standard":
                    self.cache.advance(self.slot_idx, route=kernel)
        return run

    def nonflush_fn(self, kernel: str, config: Optional[LaunchConfig]) -> Callable[[], None]:
        """One non-flush step over all layers, cursors parked mid-ring (not advanced)."""
        def run():
            for layer in range(self.n_layers):
                self.layer_step(kernel, layer, config)
        return run

    def time_cycle_us(self, kernel: str, config: Optional[LaunchConfig], replays: int = 20) -> float:
        """Median microseconds per layer-step over whole cycles."""
        self.cache.write_pos.zero_()
        g = capture(self.cycle_fn(kernel, config))
        ms = time_graph_ms(g, replays)
        del g
        return ms * 1e3 / (self.case.buffer_len * self.n_layers)

    def time_nonflush_us(self, kernel: str, config: Optional[LaunchConfig], replays: int = 20) -> float:
        self.cache.write_pos.fill_(self.case.buffer_len // 2)
        g = capture(self.nonflush_fn(kernel, config))
        ms = time_graph_ms(g, replays)
        del g
        self.cache.write_pos.zero_()
        return ms * 1e3 / self.n_layers


def make_rig(case: Mamba2Case) -> Mamba2Rig:
    return Mamba2Rig(case, layers_for_cold_l2(case.state_bytes))


def tune(rig: Mamba2Rig, kernel: str, configs: Iterable[LaunchConfig], replays: int = 5) -> Dict:
    """Fastest config for ``kernel`` on this rig: ``{"config", "us", "tried"}``."""
    best, tried = None, []
    for cfg in configs:
        try:
            us = rig.time_cycle_us(kernel, cfg, replays)
        except Exception as e:  # a config the compiler rejects (resources) is skipped
            tried.append({**cfg.to_dict(), "error": type(e).__name__})
            continue
        tried.append({**cfg.to_dict(), "us": us})
        if best is None or us < best[1]:
            best = (cfg, us)
    if best is None:
        raise RuntimeError(f"no launch config of {kernel} ran: {tried}")
    return {"config": best[0], "us": best[1], "tried": tried}
