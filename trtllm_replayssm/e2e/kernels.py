"""Fused kernels for the decoder's non-SSM per-token work, each next to its plain PyTorch
reference: the causal conv update, the MLP activation, RMSNorm (plain and gated) and the
decode attention.

TensorRT-LLM runs these as single fused kernels (``causal_conv1d_update``, its RMSNorm,
gated-RMSNorm and activation kernels, a decode attention kernel that reads each request's
keys up to its length). As chains of PyTorch ops (casts, unfold, pow, mean, rsqrt, silu:
~35 launches a Mamba2 layer) and SDPA over the whole static cache under a mask, they took
a third of the rig's decode step at batch 512: time neither a real engine nor the SSM
kernels spend, which shrank the measured share of the SSM step on both paths. Both the
standard and the ReplaySSM path use them. Everything is computed in fp32 and stored once
in the output dtype.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from ..ops.common import DOT_PRECISION, ONE_PASS_PRECISION, exact_in_tf32, native_dot

# -- causal conv update ----------------------------------------------------------------
# In place (T = 1) on contiguous rows of kept inputs, the flat form: 17-21% faster than the
# tile form (H200, Nemotron-3-Nano and Qwen3.5-4B widths, batch 128 / 512: 47-56% of copy
# bandwidth against 38-45%; benchmarks/results/conv_update_forms.json). Off: the tile form.
FLAT_CONV_UPDATE = True


@triton.jit
def _conv_update_kernel(conv_ptr, x_ptr, w_ptr, bias_ptr, window_ptr, out_ptr, channels,
                        stride_conv_b, stride_conv_c, stride_x_b, stride_x_t, stride_win_b, stride_win_c,
                        stride_out_b, stride_out_t, K: tl.constexpr, T: tl.constexpr, IN_PLACE: tl.constexpr,
                        BLOCK_C: tl.constexpr, BLOCK_W: tl.constexpr):
    """Program ``(block of channels, batch row)``. The row's window ``[BLOCK_C, BLOCK_W]``
    (the kept ``K - 1`` inputs, then the T new ones) is loaded as one tile; each output is
    the tile times the weights shifted to its token."""
    pid_b = tl.program_id(1)
    offs_c = tl.program_id(0) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask_c = offs_c < channels
    cols = tl.arange(0, BLOCK_W)
    kept = mask_c[:, None] & (cols < K - 1)[None, :]
    new = mask_c[:, None] & ((cols >= K - 1) & (cols < K - 1 + T))[None, :]
    win = tl.load(conv_ptr + pid_b * stride_conv_b + offs_c[:, None] * stride_conv_c + cols[None, :], mask=kept,
                  other=0.0)
    win = tl.where(new, tl.load(x_ptr + pid_b * stride_x_b + (cols - (K - 1))[None, :] * stride_x_t + offs_c[:, None],
                                mask=new, other=0.0), win)
    if IN_PLACE:  # T = 1: the row's kept inputs move on by one here (no window, no commit copy)
        tl.store(conv_ptr + pid_b * stride_conv_b + offs_c[:, None] * stride_conv_c + (cols - 1)[None, :], win,
                 mask=mask_c[:, None] & ((cols >= 1) & (cols < K))[None, :])
    else:
        tl.store(window_ptr + pid_b * stride_win_b + offs_c[:, None] * stride_win_c + cols[None, :], win,
                 mask=mask_c[:, None] & (cols < K - 1 + T)[None, :])
    winf = win.to(tl.float32)
    bias = tl.load(bias_ptr + offs_c, mask=mask_c, other=0.0).to(tl.float32)
    for t in tl.static_range(T):
        tap = cols - t  # weight tap of window column j for token t
        w = tl.load(w_ptr + offs_c[:, None] * K + tap[None, :], mask=mask_c[:, None] & ((tap >= 0) & (tap < K))[None, :],
                    other=0.0).to(tl.float32)
        acc = tl.sum(winf * w, axis=1) + bias
        acc = acc * tl.sigmoid(acc)  # SiLU
        tl.store(out_ptr + pid_b * stride_out_b + t * stride_out_t + offs_c, acc.to(out_ptr.dtype.element_ty),
                 mask=mask_c)


@triton.jit
def _conv_update_flat_kernel(conv_ptr, x_ptr, w_ptr, bias_ptr, out_ptr, channels, stride_conv_b, stride_x_b,
                             stride_out_b, K: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_F: tl.constexpr):
    """In place, one token a row, a row's kept inputs contiguous (``K - 1`` a channel).
    Program ``(block of channels, batch row)``. The move of the kept inputs is done on the
    row as a flat array (``new[i] = old[i + 1]``, or this token at a channel's last
    position), so its loads and stores are whole vectors; a channel's ``K - 1`` inputs
    lie 2(K - 1) bytes apart, which the tile form reads and writes two bytes at a time."""
    KM1: tl.constexpr = K - 1
    pid_b = tl.program_id(1)
    c0 = tl.program_id(0) * BLOCK_C
    row = conv_ptr + pid_b * stride_conv_b
    offs_c = c0 + tl.arange(0, BLOCK_C)
    mask_c = offs_c < channels
    x = tl.load(x_ptr + pid_b * stride_x_b + offs_c, mask=mask_c, other=0.0)
    acc = tl.load(bias_ptr + offs_c, mask=mask_c, other=0.0).to(tl.float32)
    acc += tl.load(w_ptr + offs_c * K + KM1, mask=mask_c, other=0.0).to(tl.float32) * x.to(tl.float32)
    for j in tl.static_range(KM1):
        acc += (tl.load(w_ptr + offs_c * K + j, mask=mask_c, other=0.0).to(tl.float32)
                * tl.load(row + offs_c * KM1 + j, mask=mask_c, other=0.0).to(tl.float32))
    acc = acc * tl.sigmoid(acc)  # SiLU
    tl.store(out_ptr + pid_b * stride_out_b + offs_c, acc.to(out_ptr.dtype.element_ty), mask=mask_c)
    # The program's channels as one flat range of the row.
    offs_f = c0 * KM1 + tl.arange(0, BLOCK_F)
    in_range = (offs_f < (c0 + BLOCK_C) * KM1) & (offs_f < channels * KM1)
    last = (offs_f % KM1) == KM1 - 1
    nxt = tl.load(row + offs_f + 1, mask=in_range & ~last, other=0.0)
    new = tl.where(last, tl.load(x_ptr + pid_b * stride_x_b + offs_f // KM1, mask=in_range & last, other=0.0), nxt)
    tl.debug_barrier()  # every thread's reads of the old inputs before any write
    tl.store(row + offs_f, new.to(conv_ptr.dtype.element_ty), mask=in_range)


def causal_conv_update(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                       window: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Depthwise causal conv + SiLU of ``x (B, T, C)`` (unit stride along C) over the row's
    kept inputs ``conv_state (B, C, K-1)``. With a ``window (B, C, K-1+T)`` (unit stride
    along it) the whole window is written there, for a commit that knows how many tokens
    stay; without one (T = 1) ``conv_state`` moves on by the token in place.
    ``weight (C, K)``, ``bias (C,)``. Returns ``(B, T, C)`` contiguous, in x's dtype."""
    B, T, C = x.shape
    K = weight.shape[1]
    if window is None and T != 1:
        raise ValueError(f"an in-place conv update takes one token a row, got T = {T}")
    assert x.stride(2) == 1 and conv_state.stride(2) == 1 and weight.is_contiguous()
    assert window is None or window.stride(2) == 1
    out = torch.empty(B, T, C, dtype=x.dtype, device=x.device)
    block = min(128, triton.next_power_of_2(C))
    if window is None and FLAT_CONV_UPDATE and conv_state.stride(1) == K - 1:
        _conv_update_flat_kernel[(triton.cdiv(C, block), B)](
            conv_state, x, weight, bias, out, C, conv_state.stride(0), x.stride(0), out.stride(0), K=K, BLOCK_C=block,
            BLOCK_F=triton.next_power_of_2(block * (K - 1)))
        return out
    win = window if window is not None else conv_state  # (unused in place)
    _conv_update_kernel[(triton.cdiv(C, block), B)](
        conv_state, x, weight, bias, win, out, C, conv_state.stride(0), conv_state.stride(1), x.stride(0),
        x.stride(1), win.stride(0), win.stride(1), out.stride(0), out.stride(1), K=K, T=T, IN_PLACE=window is None,
        BLOCK_C=block, BLOCK_W=triton.next_power_of_2(K - 1 + T))
    return out


def causal_conv_update_ref(conv_state: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor,
                           window: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`causal_conv_update` in PyTorch ops."""
    K, T = weight.shape[1], x.shape[1]
    win = torch.cat([conv_state, x.transpose(1, 2)], dim=-1)
    if window is not None:
        window.copy_(win)
    else:
        conv_state.copy_(win[..., T:])
    out = (win.unfold(-1, K, 1).float() * weight.float()[:, None, :]).sum(-1) + bias.float()[:, None]
    return F.silu(out).transpose(1, 2).to(x.dtype).contiguous()


# -- MLP activation ---------------------------------------------------------------------


@triton.jit
def _mlp_act_kernel(u_ptr, out_ptr, inner, stride_u, stride_out, SWIGLU: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(1)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < inner
    a = tl.load(u_ptr + row * stride_u + offs, mask=mask, other=0.0).to(tl.float32)
    if SWIGLU:  # silu(gate) * up, the two halves of the up projection
        up = tl.load(u_ptr + row * stride_u + inner + offs, mask=mask, other=0.0).to(tl.float32)
        y = a * tl.sigmoid(a) * up
    else:  # relu^2
        y = tl.maximum(a, 0.0)
        y = y * y
    tl.store(out_ptr + row * stride_out + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


def mlp_activation(u: torch.Tensor, act: str) -> torch.Tensor:
    """The MLP's activation of its up projection ``u (..., n)``: ``swiglu`` (``n = 2 *
    inner``: ``silu(u[:inner]) * u[inner:]``) or ``relu2`` (``relu(u)^2``)."""
    swiglu = act == "swiglu"
    inner = u.shape[-1] // 2 if swiglu else u.shape[-1]
    ur = _rows(u)
    out = torch.empty(ur.shape[0], inner, dtype=u.dtype, device=u.device)
    block = min(1024, triton.next_power_of_2(inner))
    _mlp_act_kernel[(triton.cdiv(inner, block), ur.shape[0])](ur, out, inner, ur.stride(0), out.stride(0),
                                                              SWIGLU=swiglu, BLOCK=block, num_warps=4)
    return out.view(*u.shape[:-1], inner)


def mlp_activation_ref(u: torch.Tensor, act: str) -> torch.Tensor:
    """:func:`mlp_activation` in PyTorch ops."""
    if act == "swiglu":
        gate, up = u.float().chunk(2, dim=-1)
        return (F.silu(gate) * up).to(u.dtype)
    return torch.relu(u.float()).square().to(u.dtype)


# -- RMSNorm, plain and gated ----------------------------------------------------------


@triton.jit
def _rms_norm_kernel(x_ptr, z_ptr, w_ptr, out_ptr, size, stride_x, stride_z, stride_out, stride_w_group, eps,
                     GATE: tl.constexpr, NORM_BEFORE_GATE: tl.constexpr, BLOCK: tl.constexpr):
    """Program ``(row, group)``: RMSNorm over a group of ``size`` features with the group's
    weight (``stride_w_group`` 0: one weight for all groups); with ``GATE``, times
    ``silu(z)`` after the norm (``NORM_BEFORE_GATE``) or before it."""
    row, grp = tl.program_id(0), tl.program_id(1)
    offs = tl.arange(0, BLOCK)
    mask = offs < size
    col = grp * size + offs
    x = tl.load(x_ptr + row * stride_x + col, mask=mask, other=0.0).to(tl.float32)
    if GATE:
        z = tl.load(z_ptr + row * stride_z + col, mask=mask, other=0.0).to(tl.float32)
        gate = z * tl.sigmoid(z)
        if not NORM_BEFORE_GATE:
            x = x * gate
    w = tl.load(w_ptr + grp * stride_w_group + offs, mask=mask, other=0.0).to(tl.float32)
    y = x * tl.rsqrt(tl.sum(x * x, axis=0) / size + eps) * w
    if GATE:
        if NORM_BEFORE_GATE:
            y = y * gate
    tl.store(out_ptr + row * stride_out + col, y.to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    """``t (..., D)`` as ``(rows, D)`` without a copy where its rows are evenly strided."""
    assert t.stride(-1) == 1
    return t.reshape(-1, t.shape[-1])


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm of ``x (..., D)`` with ``weight (D,)``, in x's dtype."""
    return gated_rms_norm(x, None, weight, x.shape[-1], eps=eps, out_dtype=x.dtype)


def gated_rms_norm(x: torch.Tensor, z, weight: torch.Tensor, group_size: int, norm_before_gate: bool = False,
                   eps: float = 1e-6, out_dtype: torch.dtype = None) -> torch.Tensor:
    """RMSNorm of ``x (..., D)`` over groups of ``group_size`` features with ``weight (D,)``
    (or ``(group_size,)``, shared by the groups), gated by ``silu(z)`` (``z`` like ``x``, or
    None): Mamba2's norm gates first (``norm_before_gate=False``), GDN's after. Returns
    ``out_dtype`` (default x's)."""
    D = x.shape[-1]
    assert D % group_size == 0 and weight.is_contiguous() and weight.numel() in (D, group_size)
    xr = _rows(x)
    zr = _rows(z) if z is not None else xr
    out = torch.empty(xr.shape, dtype=out_dtype or x.dtype, device=x.device)
    block = triton.next_power_of_2(group_size)
    _rms_norm_kernel[(xr.shape[0], D // group_size)](
        xr, zr, weight, out, group_size, xr.stride(0), zr.stride(0), out.stride(0),
        group_size if weight.numel() == D else 0, eps, GATE=z is not None,
        NORM_BEFORE_GATE=norm_before_gate, BLOCK=block, num_warps=min(8, max(1, block // 256)))
    return out.view(x.shape)


def rms_norm_ref(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """:func:`rms_norm` in PyTorch ops."""
    return gated_rms_norm_ref(x, None, weight, x.shape[-1], eps=eps)


def gated_rms_norm_ref(x: torch.Tensor, z, weight: torch.Tensor, group_size: int, norm_before_gate: bool = False,
                       eps: float = 1e-6, out_dtype: torch.dtype = None) -> torch.Tensor:
    """:func:`gated_rms_norm` in PyTorch ops (fp32 throughout)."""
    shape = x.shape
    xf = x.float()
    gate = F.silu(z.float()) if z is not None else None
    if gate is not None and not norm_before_gate:
        xf = xf * gate
    g = xf.reshape(*shape[:-1], -1, group_size)
    y = (g * torch.rsqrt(g.pow(2).mean(-1, keepdim=True) + eps)).reshape(shape)
    y = y * weight.float().repeat(shape[-1] // weight.numel())
    if gate is not None and norm_before_gate:
        y = y * gate
    return y.to(out_dtype or x.dtype)


# -- decode attention -------------------------------------------------------------------


@triton.jit
def _decode_attention_kernel(q_ptr, k_ptr, v_ptr, pos_ptr, out_ptr, scale,
                             stride_q_b, stride_q_t, stride_kv_b, stride_kv_s, stride_out_b, stride_out_t,
                             MAX_LEN: tl.constexpr, T: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EXACT: tl.constexpr,
                             DOT_PRECISION: tl.constexpr, ONE_PASS_PRECISION: tl.constexpr):
    """Program ``(batch row, KV head)``: the T new tokens of the row on the GROUP query
    heads that share the KV head (rows ``t * GROUP + g`` of a ``[BLOCK_M, D]`` tile), over
    the cached keys up to each token's own position, with an online softmax. Key blocks
    past the row's last token are skipped (a uniform branch: the loop's trip count is the
    cache's length, a constant, as the interpreter needs). The products go through
    :func:`~trtllm_replayssm.ops.common.native_dot`: one tensor-core pass on bf16/fp16
    (``EXACT``), fp32-accurate on fp32 and in the interpreter."""
    b, kvh = tl.program_id(0), tl.program_id(1)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    t_of = offs_m // GROUP
    head = kvh * GROUP + offs_m % GROUP
    valid_m = offs_m < T * GROUP
    pos = tl.load(pos_ptr + b)  # position of the row's first new token
    q = tl.load(q_ptr + b * stride_q_b + t_of[:, None] * stride_q_t + head[:, None] * D + offs_d[None, :],
                mask=valid_m[:, None], other=0.0)
    m_i = tl.full((BLOCK_M,), -1e30, tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    kv_base = b * stride_kv_b + kvh * D
    for n0 in range(0, MAX_LEN, BLOCK_N):
        if n0 < pos + T:
            offs_n = n0 + tl.arange(0, BLOCK_N)
            in_cache = offs_n < MAX_LEN
            kv_off = kv_base + offs_n[:, None] * stride_kv_s + offs_d[None, :]
            k = tl.load(k_ptr + kv_off, mask=in_cache[:, None], other=0.0)
            v = tl.load(v_ptr + kv_off, mask=in_cache[:, None], other=0.0)
            s = native_dot(q, tl.trans(k), True, EXACT, DOT_PRECISION, ONE_PASS_PRECISION) * scale
            visible = (offs_n[None, :] <= pos + t_of[:, None]) & in_cache[None, :]
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, axis=1))
            p = tl.exp(s - m_new[:, None])
            alpha = tl.exp(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, axis=1)
            if EXACT:  # the probabilities in the cache's dtype, for one pass in it
                pv = native_dot(p.to(v.dtype), v, True, EXACT, DOT_PRECISION, ONE_PASS_PRECISION)
            else:
                pv = native_dot(p, v, True, EXACT, DOT_PRECISION, ONE_PASS_PRECISION)
            acc = acc * alpha[:, None] + pv
            m_i = m_new
    o = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]
    tl.store(out_ptr + b * stride_out_b + t_of[:, None] * stride_out_t + head[:, None] * D + offs_d[None, :],
             o.to(out_ptr.dtype.element_ty), mask=valid_m[:, None])


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Attention of the ``T`` new tokens of each row, ``q (B, T, Hq, D)`` (unit stride in
    the last two dimensions), over a static cache ``(B, max_len, Hkv, D)`` that already
    holds them at ``pos .. pos + T - 1`` (``pos (B,)`` on the device): token t sees the
    keys up to ``pos + t``; GQA (``Hq`` a multiple of ``Hkv``), scale ``D ** -0.5``.
    Returns ``(B, T, Hq, D)`` in q's dtype. As a decode kernel of an engine, it reads only
    the keys up to the row's last token."""
    B, T, Hq, D = q.shape
    Hkv, max_len = k_cache.shape[2], k_cache.shape[1]
    assert q.stride(3) == 1 and q.stride(2) == D and k_cache.is_contiguous() and v_cache.is_contiguous()
    assert Hq % Hkv == 0 and D == triton.next_power_of_2(D) and D >= 16
    group = Hq // Hkv
    out = torch.empty(B, T, Hq, D, dtype=q.dtype, device=q.device)
    _decode_attention_kernel[(B, Hkv)](
        q, k_cache, v_cache, pos, out, D ** -0.5, q.stride(0), q.stride(1), k_cache.stride(0),
        k_cache.stride(1), out.stride(0), out.stride(1), MAX_LEN=max_len, T=T, GROUP=group, D=D,
        BLOCK_M=max(16, triton.next_power_of_2(T * group)), BLOCK_N=32 if D > 128 else 64,
        EXACT=exact_in_tf32(q.dtype), DOT_PRECISION=DOT_PRECISION, ONE_PASS_PRECISION=ONE_PASS_PRECISION,
        num_warps=4)
    return out


def decode_attention_ref(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                         pos: torch.Tensor) -> torch.Tensor:
    """:func:`decode_attention` with PyTorch's SDPA over the whole cache and a mask."""
    B, T, Hq, D = q.shape
    at = pos[:, None] + torch.arange(T, device=q.device)[None, :]  # (B, T) positions of the new tokens
    visible = torch.arange(k_cache.shape[1], device=q.device)[None, None, :] <= at[:, :, None]
    o = F.scaled_dot_product_attention(q.transpose(1, 2), k_cache.transpose(1, 2), v_cache.transpose(1, 2),
                                       attn_mask=visible[:, None], enable_gqa=True)
    return o.transpose(1, 2)
