"""The per-step inputs of a Mamba2 decode step, checked and reduced to pointers and strides.

TensorRT-LLM's Mamba2 mixer calls ``selective_state_update`` with either per-head
parameters (``A (H,)``, ``D (H,)``, ``dt_bias (H,)``, ``dt (B, H)``) or the "tied" layout
that ``post_load_weights`` builds: ``A (H, P, N)``, ``D/dt_bias (H, P)``, ``dt (B, H, P)``
expanded with stride 0. Both reduce to one scalar per head (``D`` may vary along headdim).
Both the standard kernel and the replay kernels take their inputs from here, so the two
accept exactly the same calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..._validation import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_broadcast_dims,
    check_last_dim_contiguous,
    check_same_dtype,
    check_slot_major,
    check_tensor,
    check_vector,
)


@dataclass(frozen=True)
class Mamba2Step:
    """Checked step inputs. Sizes: batch ``B``, heads ``H``, headdim ``P``, dstate ``N``, groups ``G``."""

    x: torch.Tensor  # (B, H, P)
    dt: torch.Tensor  # (B, H) raw dt (a view; tied layouts are reduced to it)
    A: torch.Tensor  # (H,)
    B: torch.Tensor  # (B, G, N)
    C: torch.Tensor  # (B, G, N)
    D: Optional[torch.Tensor]  # (H, P), stride 0 along P when per head
    z: Optional[torch.Tensor]  # (B, H, P)
    dt_bias: Optional[torch.Tensor]  # (H,)
    out: torch.Tensor  # (B, H, P)
    slot_idx: Optional[torch.Tensor]  # (B,) int32/int64; None: row b uses slot b
    dt_softplus: bool
    pad_slot_id: int

    @property
    def batch(self) -> int:
        return self.x.shape[0]

    @property
    def nheads(self) -> int:
        return self.x.shape[1]

    @property
    def headdim(self) -> int:
        return self.x.shape[2]

    @property
    def ngroups(self) -> int:
        return self.B.shape[1]

    @property
    def dstate(self) -> int:
        return self.B.shape[2]

    def kernel_args(self) -> dict:
        """Pointers and strides in the order the kernels declare them."""
        D = self.D if self.D is not None else self.x  # placeholder pointer when HAS_D is off
        z = self.z if self.z is not None else self.x
        dt_bias = self.dt_bias if self.dt_bias is not None else self.A
        slot_idx = self.slot_idx if self.slot_idx is not None else self.A
        return dict(
            x_ptr=self.x, dt_ptr=self.dt, A_ptr=self.A, B_ptr=self.B, C_ptr=self.C, D_ptr=D,
            z_ptr=z, dt_bias_ptr=dt_bias, out_ptr=self.out, slot_idx_ptr=slot_idx,
            stride_x_b=self.x.stride(0), stride_x_h=self.x.stride(1),
            stride_dt_b=self.dt.stride(0), stride_dt_h=self.dt.stride(1),
            stride_A_h=self.A.stride(0),
            stride_B_b=self.B.stride(0), stride_B_g=self.B.stride(1),
            stride_C_b=self.C.stride(0), stride_C_g=self.C.stride(1),
            stride_D_h=D.stride(0) if self.D is not None else 0,
            stride_D_p=D.stride(1) if self.D is not None else 0,
            stride_z_b=z.stride(0), stride_z_h=z.stride(1),
            stride_dtb_h=dt_bias.stride(0) if self.dt_bias is not None else 0,
            stride_out_b=self.out.stride(0), stride_out_h=self.out.stride(1),
            pad_slot_id=self.pad_slot_id,
            HAS_D=self.D is not None, HAS_Z=self.z is not None,
            HAS_DT_BIAS=self.dt_bias is not None, HAS_SLOT_IDX=self.slot_idx is not None,
            DT_SOFTPLUS=self.dt_softplus,
        )


def _per_head(name: str, t: torch.Tensor, nheads: int, trailing: tuple) -> torch.Tensor:
    """Reduce ``(H,)`` or a tied ``(H, *trailing)`` parameter to an ``(H,)`` view."""
    if t.dim() == 1:
        check_tensor(name, t, (nheads,), FLOAT_DTYPES)
        return t
    check_tensor(name, t, (nheads, *trailing), FLOAT_DTYPES)
    check_broadcast_dims(name, t, range(1, t.dim()), "Mamba2 has one value per head; pass it per head or expanded with stride 0")
    return t[(slice(None),) + (0,) * len(trailing)]


def parse_mamba2_step(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: Optional[torch.Tensor] = None,
    z: Optional[torch.Tensor] = None,
    dt_bias: Optional[torch.Tensor] = None,
    dt_softplus: bool = False,
    state_batch_indices: Optional[torch.Tensor] = None,
    pad_slot_id: int = -1,
    out: Optional[torch.Tensor] = None,
) -> Mamba2Step:
    """Check the step inputs of TensorRT-LLM's ``selective_state_update`` call."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(f"x must have shape (batch, nheads, headdim), got {tuple(x.shape)}")
    batch, nheads, headdim = x.shape
    check_tensor("x", x, (batch, nheads, headdim), FLOAT_DTYPES)
    device = x.device
    check_last_dim_contiguous("x", x)

    check_tensor("B", B, (batch, None, None), FLOAT_DTYPES, device)
    ngroups, dstate = B.shape[1], B.shape[2]
    check_tensor("C", C, (batch, ngroups, dstate), FLOAT_DTYPES, device)
    if ngroups < 1 or nheads % ngroups != 0:
        raise ValueError(f"ngroups ({ngroups}, from B.shape[1]) must divide nheads ({nheads})")
    check_same_dtype("B", B, "x", x)
    check_same_dtype("C", C, "x", x)
    check_last_dim_contiguous("B", B)
    check_last_dim_contiguous("C", C)

    if dt.dim() == 3:
        check_tensor("dt", dt, (batch, nheads, headdim), FLOAT_DTYPES, device)
        check_broadcast_dims("dt", dt, (2,), "Mamba2 has one dt per head; expand it with stride 0")
        dt = dt[:, :, 0]
    else:
        check_tensor("dt", dt, (batch, nheads), FLOAT_DTYPES, device)

    A = _per_head("A", A, nheads, (headdim, dstate))
    if dt_bias is not None:
        dt_bias = _per_head("dt_bias", dt_bias, nheads, (headdim,))
    if D is not None:
        if D.dim() == 1:
            check_tensor("D", D, (nheads,), FLOAT_DTYPES, device)
            D = D[:, None].expand(nheads, headdim)
        else:
            check_tensor("D", D, (nheads, headdim), FLOAT_DTYPES, device)
    if z is not None:
        check_tensor("z", z, (batch, nheads, headdim), FLOAT_DTYPES, device)
        check_same_dtype("z", z, "x", x)
        check_last_dim_contiguous("z", z)
    if out is None:
        out = torch.empty_like(x)
    else:
        check_tensor("out", out, (batch, nheads, headdim), FLOAT_DTYPES, device)
        check_same_dtype("out", out, "x", x)
        check_last_dim_contiguous("out", out)
    if state_batch_indices is not None:
        check_vector("state_batch_indices", state_batch_indices, batch, INDEX_DTYPES, device)
    for name, t in (("A", A), ("dt_bias", dt_bias), ("D", D)):
        if t is not None and t.device != device:
            raise ValueError(f"{name} must be on {device}, got {t.device}")
    return Mamba2Step(
        x=x, dt=dt, A=A, B=B, C=C, D=D, z=z, dt_bias=dt_bias, out=out,
        slot_idx=state_batch_indices, dt_softplus=bool(dt_softplus), pad_slot_id=int(pad_slot_id),
    )


def check_state_pool(name: str, state: torch.Tensor, step: Mamba2Step) -> None:
    """``state (slots, H, P, N)``, slot-major (:func:`is_slot_major`); with no indices
    there is one slot per row."""
    check_tensor(name, state, (None, step.nheads, step.headdim, step.dstate), FLOAT_DTYPES, step.x.device)
    check_slot_major(name, state)
    if step.slot_idx is None and state.shape[0] < step.batch:
        raise ValueError(f"{name} has {state.shape[0]} slots but the batch has {step.batch} rows and no state_batch_indices")
