"""Blocks of the hybrid decoder over ``T`` tokens per row (``h: (B, T, hidden)``; T = 1 in
autoregressive decode, 1 + drafts in a speculative verify).

Mixers do the real per-token work of a decode step: input projections, the causal conv
update, the SSM step (standard kernel, or ReplaySSM on the checkpoint + ring), the gated
RMSNorm and the output projection. Caches live in :class:`~.model.DecodeCaches`; a block
gets its own slice (``index``: its position among the blocks of its kind). In a verify,
nothing that depends on acceptance is final until :meth:`~.model.HybridDecoder.commit`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..cache import GDNGeometry, Mamba2Geometry
from ..ops.gdn import fused_recurrent_gated_delta_rule_replayssm, fused_sigmoid_gating_delta_rule_update
from ..ops.gdn.spec import gdn_replayssm_spec_decode
from ..ops.gdn.spec_standard import gdn_spec_standard
from ..ops.mamba2 import selective_state_update, selective_state_update_replayssm
from ..ops.mamba2.spec import selective_state_update_replayssm_spec
from ..ops.mamba2.spec_standard import selective_state_update_spec_standard
from .kernels import causal_conv_update, decode_attention, gated_rms_norm, mlp_activation


def causal_conv(caches, index: int, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Causal depthwise conv + SiLU of ``x (B, T, C)`` over the layer's last ``K - 1``
    inputs and these. Autoregressive decode moves the conv state on in place; a verify
    keeps its window ``(B, C, K-1+T)`` in ``caches.conv_window`` and the conv state moves on
    at commit, by the accepted count."""
    if x.shape[1] == 1:
        return causal_conv_update(caches.conv[index], x, weight, bias)
    return causal_conv_update(caches.conv[index], x, weight, bias, caches.conv_window[index])


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
        return F.linear(mlp_activation(F.linear(h, self.up), self.act), self.down)


class Attention(nn.Module):
    """GQA over a static KV cache ``(B, max_len, kv_heads, head_dim)`` at per-row
    positions held on the device, reading each row's keys up to its last token
    (:func:`~.kernels.decode_attention`; no RoPE: it does not change the cost that matters
    here)."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, index: int, dtype, device=None):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim, self.index = heads, kv_heads, head_dim, index
        self.qkv = _param((heads + 2 * kv_heads) * head_dim, hidden, dtype=dtype, device=device)
        self.o = _param(hidden, heads * head_dim, dtype=dtype, device=device)

    def forward(self, h: torch.Tensor, caches, ctx) -> torch.Tensor:
        (B, T, _), D = h.shape, self.head_dim
        q, k, v = F.linear(h, self.qkv).split([self.heads * D, self.kv_heads * D, self.kv_heads * D], dim=-1)
        kc, vc = caches.k[self.index], caches.v[self.index]
        rows = torch.arange(B, device=h.device)[:, None].expand(B, T)
        at = caches.pos[:, None] + torch.arange(T, device=h.device)[None, :]  # (B, T) positions of the new tokens
        kc.index_put_((rows, at), k.view(B, T, self.kv_heads, D))
        vc.index_put_((rows, at), v.view(B, T, self.kv_heads, D))
        o = decode_attention(q.view(B, T, self.heads, D), kc, vc, caches.pos)
        return F.linear(o.reshape(B, T, self.heads * D), self.o)


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
        g, (B, T, _) = self.geom, h.shape
        H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
        z, xBC, dt = F.linear(h, self.in_proj).split([self.d_inner, self.d_conv, H], dim=-1)
        xBC = causal_conv(caches, self.index, xBC, self.conv_w, self.conv_b)
        x, Bm, Cm = xBC.split([self.d_inner, G * N, G * N], dim=-1)
        args = (x.reshape(B, T, H, P), dt.contiguous(), self.A, Bm.reshape(B, T, G, N), Cm.reshape(B, T, G, N))
        kw = dict(D=self.D, dt_bias=self.dt_bias, dt_softplus=True, state_batch_indices=ctx.slots)
        state, ssm = caches.ssm.ssm_state[self.index], caches.ssm
        if ctx.num_tokens > 1 and ctx.replay:
            y = selective_state_update_replayssm_spec(state, *args, **kw, x_ring=ssm.x_cache[self.index],
                                                      dt_ring=ssm.dt_cache[self.index], B_ring=ssm.B_cache[self.index],
                                                      **caches.spec_cursors())
        elif ctx.num_tokens > 1:
            y = selective_state_update_spec_standard(state, *args, **kw, intermediate_states=caches.inter[self.index])
        else:  # autoregressive: the token axis goes (A is per head, not per token)
            one = tuple(t if t is self.A else t[:, 0] for t in args)
            if ctx.replay:
                y = selective_state_update_replayssm(state, *one, **kw, route=ctx.route, force_flush=ctx.force_flush,
                                                     **ssm.ring_kwargs(self.index))
            else:
                y = selective_state_update(state, *one, **kw)
        # Gated RMSNorm per group (Mamba2's norm_before_gate=False).
        y = gated_rms_norm(y.reshape(B, T, self.d_inner), z, self.norm_w, self.d_inner // G, out_dtype=h.dtype)
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
        g, (B, T, _) = self.geom, h.shape
        H, HV, K, V = g.num_k_heads, g.num_v_heads, g.head_k_dim, g.head_v_dim
        qkv, z, b, a = F.linear(h, self.in_proj).split([self.d_conv, self.d_v, HV, HV], dim=-1)
        qkv = causal_conv(caches, self.index, qkv, self.conv_w, self.conv_b)
        q, k, v = qkv.split([H * K, H * K, HV * V], dim=-1)
        args = (q.reshape(B, T, H, K), k.reshape(B, T, H, K), v.reshape(B, T, HV, V), a.contiguous(), b.contiguous())
        state, ssm = caches.ssm.ssm_state[self.index], caches.ssm
        if ctx.num_tokens > 1 and ctx.replay:
            o = gdn_replayssm_spec_decode(state, *args, self.A_log, self.dt_bias, initial_state_indices=ctx.slots,
                                          d_ring=ssm.d_cache[self.index], k_ring=ssm.k_cache[self.index],
                                          g_ring=ssm.g_cache[self.index], **caches.spec_cursors())
        elif ctx.num_tokens > 1:
            o = gdn_spec_standard(state, *args, self.A_log, self.dt_bias, initial_state_indices=ctx.slots,
                                  intermediate_states=caches.inter[self.index])
        else:  # autoregressive: the token axis goes
            one = tuple(t[:, 0] for t in args)
            if ctx.replay:
                o = fused_recurrent_gated_delta_rule_replayssm(state, *one, self.A_log, self.dt_bias,
                                                               initial_state_indices=ctx.slots, route=ctx.route,
                                                               force_flush=ctx.force_flush,
                                                               **ssm.ring_kwargs(self.index))
            else:
                o = fused_sigmoid_gating_delta_rule_update(state, *one, self.A_log, self.dt_bias,
                                                           initial_state_indices=ctx.slots)
        # RMSNorm per head, then the gate (norm_before_gate=True).
        o = gated_rms_norm(o.reshape(B, T, self.d_v), z, self.norm_w, V, norm_before_gate=True, out_dtype=h.dtype)
        return F.linear(o, self.out_proj)
