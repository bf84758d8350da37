"""Blocks of the hybrid decoder, one decode token per row (``h: (B, hidden)``).

Mixers do the real per-token work of a decode step: input projections, the causal conv
update, the SSM step (standard kernel, or ReplaySSM on the checkpoint + ring), the gated
RMSNorm and the output projection. Caches live in :class:`~.model.DecodeCaches`; a block
gets its own slice (``index``: its position among the blocks of its kind).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..cache import GDNGeometry, Mamba2Geometry
from ..ops.gdn import fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update
from ..ops.mamba2 import selective_state_update, selective_state_update_replayssm


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()).to(x.dtype)


def conv_update(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Causal depthwise conv over the last ``K`` inputs, SiLU; ``conv_state (B, C, K-1)``
    is shifted in place. ``x (B, C)``, ``weight (C, K)``."""
    window = torch.cat([conv_state, x[:, :, None]], dim=-1)
    conv_state.copy_(window[:, :, 1:])
    return F.silu((window.float() * weight.float()).sum(-1) + bias.float()).to(x.dtype)


def _param(*shape, dtype, std=0.02, device=None) -> nn.Parameter:
    return nn.Parameter(torch.randn(*shape, device=device).mul_(std).to(dtype), requires_grad=False)


class MLP(nn.Module):
    def __init__(self, hidden: int, inner: int, act: str, dtype, device=None):
        super().__init__()
        self.act = act
        n_up = 2 if act == "swiglu" else 1
        self.up = _param(n_up * inner, hidden, dtype=dtype, device=device)
        self.down = _param(hidden, inner, dtype=dtype, device=device)

    def forward(self, h: torch.Tensor, caches, ctx) -> torch.Tensor:
        u = F.linear(h, self.up)
        if self.act == "swiglu":
            gate, up = u.chunk(2, dim=-1)
            u = F.silu(gate) * up
        else:
            u = torch.relu(u).square()
        return F.linear(u, self.down)


class Attention(nn.Module):
    """GQA over a static KV cache ``(B, max_len, kv_heads, head_dim)`` at per-row
    positions held on the device (no RoPE: it does not change the cost that matters here)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, index: int, dtype, device=None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.index = heads, kv_heads, head_dim, index
        self.qkv = _param((heads + 2 * kv_heads) * head_dim, hidden, dtype=dtype, device=device)
        self.o = _param(hidden, heads * head_dim, dtype=dtype, device=device)

    def forward(self, h: torch.Tensor, caches, ctx) -> torch.Tensor:
        B, D = h.shape[0], self.head_dim
        q, k, v = F.linear(h, self.qkv).split([self.heads * D, self.kv_heads * D, self.kv_heads * D], dim=-1)
        kc, vc = caches.k[self.index], caches.v[self.index]
        rows = torch.arange(B, device=h.device)
        kc.index_put_((rows, caches.pos), k.view(B, self.kv_heads, D))
        vc.index_put_((rows, caches.pos), v.view(B, self.kv_heads, D))
        visible = torch.arange(kc.shape[1], device=h.device)[None, :] <= caches.pos[:, None]  # (B, max_len)
        o = F.scaled_dot_product_attention(q.view(B, self.heads, 1, D), kc.transpose(1, 2), vc.transpose(1, 2),
                                           attn_mask=visible[:, None, None, :], enable_gqa=True)
        return F.linear(o.reshape(B, self.heads * D), self.o)


class Mamba2Mixer(nn.Module):
    """Nemotron-H's Mamba2 mixer: ``in_proj -> [z | xBC | dt]``, conv over ``[x | B | C]``,
    the SSM step (D skip, softplus dt; the gate goes through the grouped RMSNorm)."""

    def __init__(self, hidden: int, geom: Mamba2Geometry, conv_kernel: int, index: int, dtype, device=None):
        super().__init__()
        H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
        self.geom, self.index = geom, index
        self.d_inner, self.d_conv = H * P, H * P + 2 * G * N
        self.in_proj = _param(self.d_inner + self.d_conv + H, hidden, dtype=dtype, device=device)
        self.conv_w = _param(self.d_conv, conv_kernel, dtype=dtype, std=0.5, device=device)
        self.conv_b = _param(self.d_conv, dtype=dtype, device=device)
        self.A = nn.Parameter(-torch.rand(H, device=device).mul_(0.9).add_(0.1), requires_grad=False)
        self.D = nn.Parameter(torch.ones(H, device=device), requires_grad=False)
        self.dt_bias = nn.Parameter(torch.rand(H, device=device).mul_(2).sub_(3), requires_grad=False)
        self.norm_w = nn.Parameter(torch.ones(self.d_inner, device=device, dtype=dtype), requires_grad=False)
        self.out_proj = _param(hidden, self.d_inner, dtype=dtype, device=device)

    def forward(self, h: torch.Tensor, caches, ctx) -> torch.Tensor:
        g, B = self.geom, h.shape[0]
        H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
        z, xBC, dt = F.linear(h, self.in_proj).split([self.d_inner, self.d_conv, H], dim=-1)
        xBC = conv_update(caches.conv[self.index], xBC, self.conv_w, self.conv_b)
        x, Bm, Cm = xBC.split([self.d_inner, G * N, G * N], dim=-1)
        args = (x.reshape(B, H, P), dt.contiguous(), self.A, Bm.reshape(B, G, N), Cm.reshape(B, G, N))
        kw = dict(D=self.D, dt_bias=self.dt_bias, dt_softplus=True, state_batch_indices=ctx.slots)
        state = caches.ssm.ssm_state[self.index]
        if ctx.replay:
            y = selective_state_update_replayssm(state, *args, **kw, route=ctx.route,
                                                 **caches.ssm.ring_kwargs(self.index))
        else:
            y = selective_state_update(state, *args, **kw)
        # Gated RMSNorm per group (Mamba2's norm_before_gate=False).
        y = (y.reshape(B, self.d_inner).float() * F.silu(z.float())).view(B, G, -1)
        y = rms_norm(y, self.norm_w.view(G, -1)).view(B, self.d_inner).to(h.dtype)
        return F.linear(y, self.out_proj)


class GDNMixer(nn.Module):
    """Qwen3-Next's Gated DeltaNet mixer: ``in_proj -> [q | k | v | z]`` and ``[b | a]``,
    conv over ``[q | k | v]``, the delta-rule step (q/k L2 norm in the kernel), per-head
    RMSNorm gated by ``z``."""

    def __init__(self, hidden: int, geom: GDNGeometry, conv_kernel: int, index: int, dtype, device=None):
        super().__init__()
        H, HV, K, V = geom.num_k_heads, geom.num_v_heads, geom.head_k_dim, geom.head_v_dim
        self.geom, self.index = geom, index
        self.d_conv, self.d_v = 2 * H * K + HV * V, HV * V
        self.in_proj = _param(self.d_conv + self.d_v + 2 * HV, hidden, dtype=dtype, device=device)
        self.conv_w = _param(self.d_conv, conv_kernel, dtype=dtype, std=0.5, device=device)
        self.conv_b = _param(self.d_conv, dtype=dtype, device=device)
        self.A_log = nn.Parameter(torch.rand(HV, device=device).mul_(2).sub_(1), requires_grad=False)
        self.dt_bias = nn.Parameter(torch.rand(HV, device=device).mul_(2).sub_(3), requires_grad=False)
        self.norm_w = nn.Parameter(torch.ones(V, device=device, dtype=dtype), requires_grad=False)
        self.out_proj = _param(hidden, self.d_v, dtype=dtype, device=device)

    def forward(self, h: torch.Tensor, caches, ctx) -> torch.Tensor:
        g, B = self.geom, h.shape[0]
        H, HV, K, V = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
        qkv, z, b, a = F.linear(h, self.in_proj).split([self.d_conv, self.d_v, HV, HV], dim=-1)
        qkv = conv_update(caches.conv[self.index], qkv, self.conv_w, self.conv_b)
        q, k, v = qkv.split([H * K, H * K, HV * V], dim=-1)
        args = (q.reshape(B, H, K), k.reshape(B, H, K), v.reshape(B, HV, V), a.contiguous(), b.contiguous(),
                self.A_log, self.dt_bias)
        state = caches.ssm.ssm_state[self.index]
        if ctx.replay:
            o = fused_recurrent_gated_delta_rule_replayssm(state, *args, initial_state_indices=ctx.slots,
                                                           route=ctx.route, **caches.ssm.ring_kwargs(self.index))
        else:
            o = fused_sigmoid_gating_delta_rule_update(state, *args, initial_state_indices=ctx.slots)
        o = rms_norm(o, self.norm_w).float() * F.silu(z.float().view(B, HV, V))
        return F.linear(o.reshape(B, self.d_v).to(h.dtype), self.out_proj)
