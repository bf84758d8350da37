"""The per-step inputs of a Gated DeltaNet decode step, checked and reduced to strides.

TensorRT-LLM's GDN module feeds its decode kernel q/k ``(B, H, K)``, v ``(B, HV, V)``
(either separate tensors or views into one packed ``[q | k | v]`` row per token, see
:func:`split_packed_qkv`), the gate inputs ``a``/``b`` ``(B, HV)`` and per-head
``A_log``/``dt_bias``. The standard and the replay kernel both take their inputs from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import torch

from ..._validation import (
    FLOAT_DTYPES,
    INDEX_DTYPES,
    check_last_dim_contiguous,
    check_same_dtype,
    check_tensor,
    check_vector,
    is_slot_major,
)

MAX_HEAD_DIM = 256


@dataclass(frozen=True)
class GDNStep:
    """Checked inputs. Sizes: batch ``B``, key heads ``H``, value heads ``HV``, K, V."""

    q: torch.Tensor  # (B, H, K)
    k: torch.Tensor  # (B, H, K)
    v: torch.Tensor  # (B, HV, V)
    a: torch.Tensor  # (B, HV)
    b: torch.Tensor  # (B, HV)
    A_log: torch.Tensor  # (HV,)
    dt_bias: torch.Tensor  # (HV,)
    out: torch.Tensor  # (B, HV, V)
    slot_idx: Optional[torch.Tensor]
    scale: float
    use_qk_l2norm: bool
    softplus_beta: float
    softplus_threshold: float
    pad_slot_id: int

    @property
    def batch(self) -> int:
        return self.q.shape[0]

    @property
    def num_k_heads(self) -> int:
        return self.q.shape[1]

    @property
    def num_v_heads(self) -> int:
        return self.v.shape[1]

    @property
    def head_k_dim(self) -> int:
        return self.q.shape[2]

    @property
    def head_v_dim(self) -> int:
        return self.v.shape[2]

    def kernel_args(self) -> dict:
        """Pointers, strides and flags in the order the kernels declare them."""
        slot_idx = self.slot_idx if self.slot_idx is not None else self.A_log
        return dict(
            q_ptr=self.q, k_ptr=self.k, v_ptr=self.v, a_ptr=self.a, b_ptr=self.b, A_log_ptr=self.A_log,
            dt_bias_ptr=self.dt_bias, out_ptr=self.out, slot_idx_ptr=slot_idx,
            stride_q_b=self.q.stride(0), stride_q_h=self.q.stride(1),
            stride_k_b=self.k.stride(0), stride_k_h=self.k.stride(1),
            stride_v_b=self.v.stride(0), stride_v_h=self.v.stride(1),
            stride_a_b=self.a.stride(0), stride_a_h=self.a.stride(1),
            stride_b_b=self.b.stride(0), stride_b_h=self.b.stride(1),
            stride_out_b=self.out.stride(0), stride_out_h=self.out.stride(1),
            scale=self.scale, softplus_beta=self.softplus_beta, softplus_threshold=self.softplus_threshold,
            pad_slot_id=self.pad_slot_id,
            USE_QK_L2NORM=self.use_qk_l2norm, HAS_SLOT_IDX=self.slot_idx is not None,
        )


def split_packed_qkv(qkv: torch.Tensor, num_k_heads: int, num_v_heads: int, head_k_dim: int,
                     head_v_dim: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Views ``q, k (B, H, K)`` and ``v (B, HV, V)`` of a packed ``[q | k | v]`` row per token
    (Qwen3-Next's conv channel order); no copy."""
    width = 2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim
    check_tensor("qkv", qkv, (None, width), FLOAT_DTYPES)
    check_last_dim_contiguous("qkv", qkv)
    qk = num_k_heads * head_k_dim
    q = qkv[:, :qk].unflatten(1, (num_k_heads, head_k_dim))
    k = qkv[:, qk:2 * qk].unflatten(1, (num_k_heads, head_k_dim))
    v = qkv[:, 2 * qk:].unflatten(1, (num_v_heads, head_v_dim))
    return q, k, v


def parse_gdn_step(q, k, v, a, b, A_log, dt_bias, scale=None, use_qk_l2norm=True, initial_state_indices=None,
                   pad_slot_id=-1, out=None, softplus_beta=1.0, softplus_threshold=20.0) -> GDNStep:
    """Check the step inputs of a GDN decode step."""
    if not isinstance(q, torch.Tensor) or q.dim() != 3:
        raise ValueError(f"q must have shape (batch, num_k_heads, head_k_dim), got "
                         f"{tuple(q.shape) if isinstance(q, torch.Tensor) else type(q).__name__}")
    B, H, K = q.shape
    dev = q.device
    check_tensor("q", q, (B, H, K), FLOAT_DTYPES)
    check_tensor("k", k, (B, H, K), FLOAT_DTYPES, dev)
    check_tensor("v", v, (B, None, None), FLOAT_DTYPES, dev)
    HV, V = v.shape[1], v.shape[2]
    if HV % H != 0:
        raise ValueError(f"num_k_heads ({H}, from q) must divide num_v_heads ({HV}, from v)")
    for name, size in (("head_k_dim", K), ("head_v_dim", V)):
        if not 1 <= size <= MAX_HEAD_DIM:
            raise ValueError(f"{name} must be in [1, {MAX_HEAD_DIM}], got {size}")
    for name, t in (("k", k), ("v", v)):
        check_same_dtype(name, t, "q", q)
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_last_dim_contiguous(name, t)
    check_tensor("a", a, (B, HV), FLOAT_DTYPES, dev)
    check_tensor("b", b, (B, HV), FLOAT_DTYPES, dev)
    check_vector("A_log", A_log, HV, FLOAT_DTYPES, dev)
    check_vector("dt_bias", dt_bias, HV, FLOAT_DTYPES, dev)
    if out is None:
        out = torch.empty(B, HV, V, dtype=q.dtype, device=dev)
    else:
        check_tensor("out", out, (B, HV, V), FLOAT_DTYPES, dev)
        check_same_dtype("out", out, "q", q)
        check_last_dim_contiguous("out", out)
    if initial_state_indices is not None:
        check_vector("initial_state_indices", initial_state_indices, B, INDEX_DTYPES, dev)
    return GDNStep(q=q, k=k, v=v, a=a, b=b, A_log=A_log, dt_bias=dt_bias, out=out, slot_idx=initial_state_indices,
                   scale=float(K ** -0.5 if scale is None else scale), use_qk_l2norm=bool(use_qk_l2norm),
                   softplus_beta=float(softplus_beta), softplus_threshold=float(softplus_threshold),
                   pad_slot_id=int(pad_slot_id))


def check_gdn_state_pool(name: str, state: torch.Tensor, step: GDNStep) -> "GDNStateLayout":
    """``state (slots, HV, V, K)``: a slot-major pool (K innermost), or the transposed view
    ``pool.transpose(-1, -2)`` of a slot-major ``[slots, HV, K, V]`` pool (V innermost:
    TensorRT-LLM 1.2's GDN order). Slot-major: :func:`is_slot_major`. Returns the layout
    the kernels are launched with."""
    check_tensor(name, state, (None, step.num_v_heads, step.head_v_dim, step.head_k_dim), FLOAT_DTYPES,
                 step.q.device)
    layout = gdn_state_layout(state)
    if layout is None:
        raise ValueError(f"{name} must be a slot-major (slots, HV, V, K) pool or the .transpose(-1, -2) view of a "
                         f"slot-major (slots, HV, K, V) pool (each slot's block packed), got strides {state.stride()}")
    if step.slot_idx is None and state.shape[0] < step.batch:
        raise ValueError(f"{name} has {state.shape[0]} slots but the batch has {step.batch} rows and no "
                         f"initial_state_indices")
    return layout


@dataclass(frozen=True)
class GDNStateLayout:
    """How a head's ``[V, K]`` state lies in the pool: ``v_inner`` (V innermost) and the
    stride between the rows of the outer dimension (v rows, or k rows when ``v_inner``)."""

    v_inner: bool
    stride_row: int


def gdn_state_layout(state: torch.Tensor) -> Optional[GDNStateLayout]:
    """The layout of a ``(slots, HV, V, K)`` state tensor, or None where the kernels cannot
    take it (neither a slot-major pool nor a transposed view of one)."""
    if is_slot_major(state):
        return GDNStateLayout(False, state.stride(2))
    if is_slot_major(state.transpose(-1, -2)):
        return GDNStateLayout(True, state.stride(3))
    return None
