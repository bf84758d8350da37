"""Plain PyTorch Gated DeltaNet recurrence: the reference the GDN kernels are tested against."""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F

L2NORM_EPS = 1e-6


def l2norm(x: torch.Tensor, eps: float = L2NORM_EPS) -> torch.Tensor:
    """``x / sqrt(sum(x^2) + eps)`` along the last dimension (the kernels' normalisation)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def gdn_gates(a: torch.Tensor, b: torch.Tensor, A_log: torch.Tensor, dt_bias: torch.Tensor,
              softplus_beta: float = 1.0, softplus_threshold: float = 20.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``a, b (B, HV)`` -> log-decay ``g = -exp(A_log) softplus(a + dt_bias)`` and ``beta = sigmoid(b)``."""
    g = -torch.exp(A_log) * F.softplus(a + dt_bias, beta=softplus_beta, threshold=softplus_threshold)
    return g, torch.sigmoid(b)


def model_gate_params(num_v_heads: int, generator: torch.Generator) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(A_log, dt_bias)``, each ``(HV,)`` on the CPU, drawn as the models initialise them:
    ``A ~ U(0, 16)`` and ``dt = softplus(dt_bias)`` log-uniform in ``[1e-3, 0.1]`` (the drift
    studies' gates)."""
    A_log = torch.log(torch.rand(num_v_heads, generator=generator) * 16 + 1e-3)
    dt = torch.exp(torch.rand(num_v_heads, generator=generator) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
    return A_log, torch.log(torch.expm1(dt))


def gdn_step_ref(
    state: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    A_log: torch.Tensor,
    dt_bias: torch.Tensor,
    scale: Optional[float] = None,
    use_qk_l2norm: bool = True,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One step in the dtype of ``state`` (use fp64 for references).

    Shapes: state ``(B, HV, V, K)``, q/k ``(B, H, K)``, v ``(B, HV, V)``, a/b ``(B, HV)``,
    A_log/dt_bias ``(HV,)``. Returns ``(new_state, o)`` with o ``(B, HV, V)``.
    """
    f = state.dtype
    HV, H, K = v.shape[1], q.shape[1], q.shape[2]
    q, k = q.to(f), k.to(f)
    if use_qk_l2norm:
        q, k = l2norm(q), l2norm(k)
    q = q * (K ** -0.5 if scale is None else scale)
    q, k = q.repeat_interleave(HV // H, dim=1), k.repeat_interleave(HV // H, dim=1)  # (B, HV, K)
    g, beta = gdn_gates(a.to(f), b.to(f), A_log.to(f), dt_bias.to(f))
    alpha = torch.exp(g)[..., None, None]
    decayed = alpha * state
    d = beta[..., None] * (v.to(f) - torch.einsum("bhvk,bhk->bhv", decayed, k))
    new_state = decayed + d[..., :, None] * k[..., None, :]
    return new_state, torch.einsum("bhvk,bhk->bhv", new_state, q)
