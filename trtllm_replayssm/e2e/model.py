"""The hybrid decoder and its decode caches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..cache import GDNReplayCache, Mamba2ReplayCache
from .config import HybridConfig
from .layers import MLP, Attention, GDNMixer, Mamba2Mixer, rms_norm


class DecodeCaches:
    """Per-row decode state of one batch (row ``i`` owns slot ``i``): the SSM checkpoint
    pool with its rings and cursors, the conv windows, the static KV cache and positions."""

    def __init__(self, cfg: HybridConfig, batch: int, max_len: int, buffer_len: int, state_dtype: torch.dtype,
                 dtype: torch.dtype, device):
        n_ssm, n_attn = cfg.num_ssm_layers, cfg.pattern.count("*")
        if cfg.family == "gdn":
            self.ssm = GDNReplayCache(cfg.ssm, n_ssm, batch, buffer_len, state_dtype, device=device)
            g = cfg.ssm
            d_conv = 2 * g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim
        else:
            self.ssm = Mamba2ReplayCache(cfg.ssm, n_ssm, batch, buffer_len, state_dtype, dtype, device=device)
            g = cfg.ssm
            d_conv = g.nheads * g.headdim + 2 * g.ngroups * g.dstate
        self.conv = torch.zeros(n_ssm, batch, d_conv, cfg.conv_kernel - 1, dtype=dtype, device=device)
        self.k = torch.zeros(n_attn, batch, max_len, cfg.kv_heads, cfg.head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)
        self.max_len = max_len


@dataclass
class StepContext:
    slots: torch.Tensor  # (B,) int32 slot of each row
    replay: bool  # SSM step on checkpoint + ring (ReplaySSM) instead of the standard kernel
    route: str = "output_only"


class HybridDecoder(nn.Module):
    """Embedding, the pattern's pre-norm residual blocks, final norm, LM head; random
    weights (``seed``), no hub download."""

    def __init__(self, cfg: HybridConfig, dtype: torch.dtype = torch.bfloat16, device=None, seed: int = 0):
        super().__init__()
        torch.manual_seed(seed)
        self.cfg = cfg
        self.embed = nn.Parameter(torch.randn(cfg.vocab, cfg.hidden, device=device).to(dtype), requires_grad=False)
        blocks, counts = [], {"ssm": 0, "attn": 0}
        for c in cfg.pattern:
            if c in "MG":
                mixer = GDNMixer if c == "G" else Mamba2Mixer
                blocks.append(mixer(cfg.hidden, cfg.ssm, cfg.conv_kernel, counts["ssm"], dtype, device))
                counts["ssm"] += 1
            elif c == "*":
                blocks.append(Attention(cfg.hidden, cfg.attn_heads, cfg.kv_heads, cfg.head_dim, counts["attn"], dtype,
                                        device))
                counts["attn"] += 1
            else:
                blocks.append(MLP(cfg.hidden, cfg.mlp_hidden, cfg.mlp_act, dtype, device))
        self.blocks = nn.ModuleList(blocks)
        self.norms = nn.Parameter(torch.ones(len(blocks) + 1, cfg.hidden, device=device, dtype=dtype),
                                  requires_grad=False)
        self.lm_head = nn.Parameter(torch.randn(cfg.vocab, cfg.hidden, device=device).mul_(cfg.hidden ** -0.5)
                                    .to(dtype), requires_grad=False)

    def make_caches(self, batch: int, max_len: int, buffer_len: int = 16,
                    state_dtype: torch.dtype = torch.float32) -> DecodeCaches:
        return DecodeCaches(self.cfg, batch, max_len, buffer_len, state_dtype, self.embed.dtype, self.embed.device)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, caches: DecodeCaches, ctx: StepContext) -> torch.Tensor:
        """One decode token per row: ``tokens (B,)`` -> logits ``(B, vocab)`` fp32. Advances
        positions and (ReplaySSM) the ring cursors on the device, so it can be captured."""
        h = self.embed[tokens]
        for i, block in enumerate(self.blocks):
            h = h + block(rms_norm(h, self.norms[i]), caches, ctx)
        logits = torch.nn.functional.linear(rms_norm(h, self.norms[-1]), self.lm_head).float()
        caches.pos += 1
        if ctx.replay:
            caches.ssm.advance(ctx.slots, route=ctx.route)
        return logits

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, caches: DecodeCaches, slots: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``prompt (B, S)`` through the standard path one token at a time (simple and exact:
        its speed is not measured); the final states become the replay checkpoints and the
        rings start empty. Returns the last logits."""
        slots = slots if slots is not None else torch.arange(prompt.shape[0], dtype=torch.int32,
                                                             device=prompt.device)
        ctx = StepContext(slots, replay=False)
        for t in range(prompt.shape[1]):
            logits = self.step(prompt[:, t], caches, ctx)
        caches.ssm.reset(slots)
        return logits
