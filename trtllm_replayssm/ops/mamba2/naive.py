"""Plain PyTorch Mamba2 recurrence: the reference every kernel is tested against."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F


def process_dt(dt: torch.Tensor, dt_bias: Optional[torch.Tensor], dt_softplus: bool) -> torch.Tensor:
    """``dt (B, H)`` -> ``softplus(dt + dt_bias)`` (identity above 20), in dt's dtype."""
    if dt_bias is not None:
        dt = dt + dt_bias
    return F.softplus(dt, threshold=20.0) if dt_softplus else dt


def mamba2_step_ref(
    state: torch.Tensor,
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """One step of the recurrence in the dtype of ``state`` (use fp64 for references).

    Shapes: state ``(B, H, P, N)``, x ``(B, H, P)``, dt ``(B, H)`` raw, A/dt_bias ``(H,)``,
    B/C ``(B, G, N)``, D ``(H,)`` or ``(H, P)``, z ``(B, H, P)``.
    Returns ``(new_state, y)`` with y ``(B, H, P)``.
    """
    f = state.dtype
    nheads, ngroups = x.shape[1], B.shape[1]
    rep = nheads // ngroups
    Bh = B.to(f).repeat_interleave(rep, dim=1)  # (B, H, N)
    Ch = C.to(f).repeat_interleave(rep, dim=1)
    dt = process_dt(dt.to(f), None if dt_bias is None else dt_bias.to(f), dt_softplus)  # (B, H)
    a = torch.exp(A.to(f)[None, :] * dt)  # (B, H)
    xf = x.to(f)
    new_state = state * a[..., None, None] + (dt[..., None] * xf)[..., None] * Bh[:, :, None, :]
    y = torch.einsum("bhpn,bhn->bhp", new_state, Ch)
    if D is not None:
        Df = D.to(f)
        y = y + xf * (Df[None, :, None] if Df.dim() == 1 else Df[None])
    if z is not None:
        zf = z.to(f)
        y = y * zf * torch.sigmoid(zf)
    return new_state, y
