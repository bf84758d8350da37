"""Fold a slot's ring into its checkpoint without a new token: the exact state, for where
an engine needs one outside a decode step (a mixed prefill + decode batch whose decode
rows go through the chunked kernel, a slot handed over with its state). Plain PyTorch in
fp32, vectorised over the given slots; it runs outside captured graphs (those paths are
not captured), and the caller resets the slots' cursors afterwards.
"""

from __future__ import annotations

import torch


def _hist_mask(write_pos: torch.Tensor, slots: torch.Tensor, L: int) -> torch.Tensor:
    return torch.arange(L, device=slots.device)[None, :] < write_pos[slots].long()[:, None]  # (S, L)


@torch.no_grad()
def fold_mamba2_rings(state: torch.Tensor, x_cache: torch.Tensor, dt_cache: torch.Tensor, B_cache: torch.Tensor,
                      A: torch.Tensor, write_pos: torch.Tensor, slots: torch.Tensor) -> None:
    """One layer: ``state (slots, H, P, N)`` of ``slots`` becomes
    ``exp(A sum dt) S_0 + sum_j dt_j exp(A (dt after j)) x_j B_j^T`` over the cached steps.
    ``A (H,)`` (or tied ``(H, P)`` / ``(H, P, N)``): the layer's negative decay rates."""
    slots = slots.long()
    H, L = x_cache.shape[1], x_cache.shape[2]
    A = (A if A.dim() == 1 else A.flatten(1)[:, 0]).float()
    m = _hist_mask(write_pos, slots, L)  # (S, L)
    dt = dt_cache[slots].float() * m[:, None, :]  # (S, H, L)
    after = dt.sum(-1, keepdim=True) - dt.cumsum(-1)  # dt summed after j
    coef = dt * torch.exp(A[None, :, None] * after)
    B = B_cache[slots].float().repeat_interleave(H // B_cache.shape[1], dim=1)  # (S, H, L, N)
    x = x_cache[slots].float()  # (S, H, L, P)
    S = state[slots].float() * torch.exp(A[None, :] * dt.sum(-1))[..., None, None]
    S += torch.einsum("shl,shlp,shln->shpn", coef, x, B)
    state[slots] = S.to(state.dtype)


@torch.no_grad()
def fold_gdn_rings(state: torch.Tensor, d_cache: torch.Tensor, k_cache: torch.Tensor, g_cache: torch.Tensor,
                   write_pos: torch.Tensor, slots: torch.Tensor) -> None:
    """One layer: ``state (slots, HV, V, K)`` of ``slots`` becomes
    ``exp(G) S_0 + sum_j exp(G - G_j) d_j k_j^T`` over the cached steps."""
    slots = slots.long()
    HV, L = d_cache.shape[1], d_cache.shape[2]
    m = _hist_mask(write_pos, slots, L)
    g = g_cache[slots].float() * m[:, None, :]  # (S, HV, L)
    decay = torch.exp(g.sum(-1, keepdim=True) - g.cumsum(-1)) * m[:, None, :]
    k = k_cache[slots].float().repeat_interleave(HV // k_cache.shape[1], dim=1)  # (S, HV, L, K)
    S = state[slots].float() * torch.exp(g.sum(-1))[..., None, None]
    S += torch.einsum("shl,shlv,shlk->shvk", decay, d_cache[slots].float(), k)
    state[slots] = S.to(state.dtype)
