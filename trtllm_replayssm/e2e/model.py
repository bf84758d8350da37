"""The hybrid decoder and its decode caches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..cache import GDNReplayCache, Mamba2ReplayCache, gdn_ring_dtype
from ..ops.mamba2.spec import commit_replayssm_spec, reset_replayssm_spec_cursors, ring_capacity
from ..ops.mamba2.spec_standard import promote_spec_state
from .config import HybridConfig
from .kernels import rms_norm
from .layers import MLP, Attention, GDNMixer, Mamba2Mixer


class DecodeCaches:
    """Per-row decode state of one batch (row ``i`` owns slot ``i``): the SSM checkpoint
    pool with its rings and cursors, the conv windows, the static KV cache and positions.

    Speculative decode (``num_tokens = T > 1``): the rings hold ``ring_capacity(T, Bh)``
    entries with the circular cursors ``write_pos / origin / is_flush``, and the standard
    path gets T intermediate states per layer (``inter``), as TensorRT-LLM keeps them."""

    def __init__(self, cfg: HybridConfig, batch: int, max_len: int, buffer_len: int, state_dtype: torch.dtype,
                 dtype: torch.dtype, device, num_tokens: int = 1, replay: bool = True):
        n_ssm, n_attn, T = cfg.num_ssm_layers, cfg.pattern.count("*"), num_tokens
        self.num_tokens, self.history_len = T, buffer_len
        ring_len = buffer_len if T == 1 else ring_capacity(T, buffer_len)
        g = cfg.ssm
        if cfg.family == "gdn":
            self.ssm = GDNReplayCache(g, n_ssm, batch, ring_len, state_dtype,
                                      gdn_ring_dtype(state_dtype, speculative=T > 1), device=device)
            d_conv = 2 * g.num_k_heads * g.head_k_dim + g.num_v_heads * g.head_v_dim
            state_shape = (g.num_v_heads, g.head_v_dim, g.head_k_dim)
        else:
            self.ssm = Mamba2ReplayCache(g, n_ssm, batch, ring_len, state_dtype, dtype, device=device)
            d_conv = g.nheads * g.headdim + 2 * g.ngroups * g.dstate
            state_shape = (g.nheads, g.headdim, g.dstate)
        self.conv = torch.zeros(n_ssm, batch, d_conv, cfg.conv_kernel - 1, dtype=dtype, device=device)
        self.conv_window = (torch.zeros(n_ssm, batch, d_conv, cfg.conv_kernel - 1 + T, dtype=dtype, device=device)
                            if T > 1 else None)  # a verify's conv windows, until its commit
        self.k = torch.zeros(n_attn, batch, max_len, cfg.kv_heads, cfg.head_dim, dtype=dtype, device=device)
        self.v = torch.zeros_like(self.k)
        self.pos = torch.zeros(batch, dtype=torch.long, device=device)
        self.max_len = max_len
        self.origin = torch.zeros(batch, dtype=torch.int32, device=device)
        self.is_flush = torch.zeros(batch, dtype=torch.int8, device=device)
        self.inter = (torch.zeros(n_ssm, batch, T, *state_shape, dtype=state_dtype, device=device)
                      if T > 1 and not replay else None)

    def spec_cursors(self) -> dict:
        return dict(write_pos=self.ssm.write_pos, origin=self.origin, is_flush=self.is_flush,
                    history_len=self.history_len)


@dataclass
class StepContext:
    slots: torch.Tensor  # (B,) int32 slot of each row
    replay: bool  # SSM step on checkpoint + ring (ReplaySSM) instead of the standard kernel
    route: str = "output_only"
    num_tokens: int = 1  # T: 1 + drafts per verify (1: autoregressive)
    accepted: Optional[torch.Tensor] = None  # (B,) int32 tokens accepted per verify, bonus included
    force_flush: Optional[torch.Tensor] = None  # (B,) int8 rows whose ring folds at this step (autoregressive)


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
        self.kinds = ["ssm" if c in "MG" else "attention" if c == "*" else "mlp" for c in cfg.pattern]
        self.skip: set = set()  # block kinds left out of the step (to measure each kind's share of it)
        self.norms = nn.Parameter(torch.ones(len(blocks) + 1, cfg.hidden, device=device, dtype=dtype),
                                  requires_grad=False)
        self.lm_head = nn.Parameter(torch.randn(cfg.vocab, cfg.hidden, device=device).mul_(cfg.hidden ** -0.5)
                                    .to(dtype), requires_grad=False)

    def make_caches(self, batch: int, max_len: int, buffer_len: int = 16, state_dtype: torch.dtype = torch.float32,
                    num_tokens: int = 1, replay: bool = True) -> DecodeCaches:
        """``buffer_len``: the ring length L (autoregressive) or the history budget Bh (T > 1)."""
        return DecodeCaches(self.cfg, batch, max_len, buffer_len, state_dtype, self.embed.dtype, self.embed.device,
                            num_tokens, replay)

    @torch.no_grad()
    def forward_tokens(self, tokens: torch.Tensor, caches: DecodeCaches, ctx: StepContext) -> torch.Tensor:
        """``tokens (B, T)`` -> logits ``(B, T, vocab)`` in the model's dtype (greedy
        sampling takes their argmax as they are); nothing that depends on acceptance moves
        (see :meth:`commit`)."""
        h = self.embed[tokens]
        for i, block in enumerate(self.blocks):
            if self.kinds[i] not in self.skip:
                h = h + block(rms_norm(h, self.norms[i]), caches, ctx)
        return torch.nn.functional.linear(rms_norm(h, self.norms[-1]), self.lm_head)

    @torch.no_grad()
    def commit(self, caches: DecodeCaches, ctx: StepContext) -> None:
        """After a step, on the device: conv states, positions and SSM cursors (or, on the
        standard verify path, the accepted intermediate states) move by the accepted count."""
        K1 = caches.conv.shape[-1]
        if ctx.num_tokens == 1:  # (the conv states moved on in the step)
            caches.pos += 1
            if ctx.replay:
                caches.ssm.advance(ctx.slots, force_flush=ctx.force_flush, route=ctx.route)
            return
        a = ctx.accepted
        idx = (a.long()[:, None] + torch.arange(K1, device=a.device)[None, :])[None, :, None, :]
        caches.conv.copy_(torch.gather(caches.conv_window, -1, idx.expand_as(caches.conv)))
        caches.pos += a.long()
        if ctx.replay:
            commit_replayssm_spec(caches.ssm.write_pos, caches.origin, caches.is_flush, a, ctx.num_tokens,
                                  caches.history_len, ctx.slots)
        else:
            for i in range(self.cfg.num_ssm_layers):
                promote_spec_state(caches.ssm.ssm_state[i], caches.inter[i], a, ctx.slots)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, caches: DecodeCaches, ctx: StepContext) -> torch.Tensor:
        """One autoregressive token per row: ``tokens (B,)`` -> logits ``(B, vocab)``; commits."""
        logits = self.forward_tokens(tokens[:, None], caches, ctx)[:, 0]
        self.commit(caches, ctx)
        return logits

    @torch.no_grad()
    def prefill(self, prompt: torch.Tensor, caches: DecodeCaches, slots: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``prompt (B, S)`` through the standard autoregressive path one token at a time
        (simple and exact: its speed is not measured); the final states become the replay
        checkpoints and the rings start empty. Returns the last logits."""
        slots = slots if slots is not None else torch.arange(prompt.shape[0], dtype=torch.int32,
                                                             device=prompt.device)
        ctx = StepContext(slots, replay=False)
        for t in range(prompt.shape[1]):
            logits = self.step(prompt[:, t], caches, ctx)
        caches.ssm.reset(slots)
        if caches.num_tokens > 1:
            reset_replayssm_spec_cursors(caches.ssm.write_pos, caches.origin, caches.is_flush, slots,
                                         caches.num_tokens, caches.history_len)
        return logits
