"""Standard speculative verify for Mamba2 (the baseline replay is measured against).

The way an engine verifies T drafted tokens without replay: step the state through the
T tokens, write every intermediate state (T full states per slot) so that any accepted
prefix can be restored, and after acceptance copy the accepted one back (``promote``).
Cost: one state read and T state writes per verify step, plus the promote copy.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from ..launch import launch_kernel

from ..._validation import (FLOAT_DTYPES, INDEX_DTYPES, check_contiguous, check_last_dim_contiguous, check_tensor,
                           check_vector)
from ..common import load_slot
from ._common import finish_output, load_dt
from .step_inputs import parse_mamba2_step


# The verify's launch config: 8 headdim rows a program on one warp. H200, T = 4, batch
# 128-512, Nemotron-3-Nano-4B and -Super (``benchmarks/probe_spec_standard_configs.py``,
# ``spec_standard_configs.json``): the step with the promote copy at 92-93% of copy
# bandwidth, within 1.3% of the best config at every point, 2-4% faster than 16 rows on
# 4 warps (88-89%), the default before.
STANDARD_SPEC_BLOCK_P = 8
STANDARD_SPEC_WARPS = 1


@triton.jit(do_not_specialize=["num_slots"])
def _spec_standard_kernel(
    state_ptr, inter_ptr, x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, headdim, dstate, heads_per_group, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p, stride_inter_slot, stride_inter_t,
    stride_x_b, stride_x_t, stride_x_h, stride_dt_b, stride_dt_t, stride_dt_h, stride_A_h,
    stride_B_b, stride_B_t, stride_B_g, stride_C_b, stride_C_t, stride_C_g, stride_D_h, stride_D_p,
    stride_z_b, stride_z_t, stride_z_h, stride_dtb_h, stride_out_b, stride_out_t, stride_out_h,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr, HAS_SLOT_IDX: tl.constexpr,
    DT_SOFTPLUS: tl.constexpr, T: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr,
):
    pid_p = tl.program_id(0)
    pid_h = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_p = pid_p * BLOCK_P + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    mask_p = offs_p < headdim
    mask_n = offs_n < dstate
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    if is_pad | is_bad:
        return
    g = pid_h // heads_per_group
    tile = pid_h * stride_state_h + offs_p[:, None] * stride_state_p + offs_n[None, :]
    mask_pn = mask_p[:, None] & mask_n[None, :]
    S = tl.load(state_ptr + slot * stride_state_slot + tile, mask=mask_pn, other=0.0).to(tl.float32)
    A = tl.load(A_ptr + pid_h * stride_A_h).to(tl.float32)
    for t in tl.static_range(T):
        x = tl.load(x_ptr + pid_b * stride_x_b + t * stride_x_t + pid_h * stride_x_h + offs_p, mask=mask_p,
                    other=0.0).to(tl.float32)
        dt = load_dt(dt_ptr + t * stride_dt_t, dt_bias_ptr, pid_b, pid_h, stride_dt_b, stride_dt_h, stride_dtb_h,
                     HAS_DT_BIAS, DT_SOFTPLUS)
        Bv = tl.load(B_ptr + pid_b * stride_B_b + t * stride_B_t + g * stride_B_g + offs_n, mask=mask_n,
                     other=0.0).to(tl.float32)
        Cv = tl.load(C_ptr + pid_b * stride_C_b + t * stride_C_t + g * stride_C_g + offs_n, mask=mask_n,
                     other=0.0).to(tl.float32)
        S = S * tl.exp(A * dt) + (dt * x)[:, None] * Bv[None, :]
        tl.store(inter_ptr + slot * stride_inter_slot + t * stride_inter_t + tile, S.to(inter_ptr.dtype.element_ty),
                 mask=mask_pn)
        finish_output(tl.sum(S * Cv[None, :], axis=1), x, offs_p, mask_p, pid_b, pid_h, D_ptr, z_ptr + t * stride_z_t,
                      out_ptr + t * stride_out_t, stride_D_h, stride_D_p, stride_z_b, stride_z_h, stride_out_b,
                      stride_out_h, HAS_D, HAS_Z)


def selective_state_update_spec_standard(
    state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None,
    pad_slot_id=-1, out=None, *, intermediate_states: torch.Tensor, block_p: int = STANDARD_SPEC_BLOCK_P,
    num_warps: int = STANDARD_SPEC_WARPS,
) -> torch.Tensor:
    """Verify ``T`` tokens (``x (B, T, H, P)`` etc., as the replay verify) without replay:
    ``state`` is read and left unchanged, every intermediate state goes to
    ``intermediate_states (slots, T, H, P, N)``; :func:`promote_spec_state` copies the
    accepted one back."""
    Bsz, T = x.shape[0], x.shape[1]
    if out is None:
        out = torch.empty_like(x)
    for name, t in (("x", x), ("B", B), ("C", C), ("z", z), ("out", out)):
        if t is not None:  # the kernel reads these with their own strides, not the flattened copies'
            check_last_dim_contiguous(name, t)
    step = parse_mamba2_step(x.flatten(0, 1), dt.flatten(0, 1), A, B.flatten(0, 1), C.flatten(0, 1), D,
                             None if z is None else z.flatten(0, 1), dt_bias, dt_softplus, None, pad_slot_id,
                             out.flatten(0, 1))
    slots, H, P, N = state.shape[0], step.nheads, step.headdim, step.dstate
    check_tensor("state", state, (None, H, P, N), FLOAT_DTYPES, x.device)
    check_contiguous("state", state)
    check_tensor("intermediate_states", intermediate_states, (slots, T, H, P, N), (state.dtype,), x.device)
    check_contiguous("intermediate_states", intermediate_states)
    if state_batch_indices is not None:
        check_vector("state_batch_indices", state_batch_indices, Bsz, INDEX_DTYPES, x.device)
    if Bsz == 0:
        return out
    dt4 = dt if dt.dim() == 3 else dt[..., 0]
    Dt = step.D
    launch_kernel(_spec_standard_kernel, (triton.cdiv(P, block_p), H, Bsz),
        state, intermediate_states, x, dt4, step.A, B, C, Dt if Dt is not None else x, z if z is not None else x,
        step.dt_bias if step.dt_bias is not None else step.A, out,
        state_batch_indices if state_batch_indices is not None else step.A,
        slots, P, N, H // step.ngroups, pad_slot_id,
        state.stride(0), state.stride(1), state.stride(2), intermediate_states.stride(0), intermediate_states.stride(1),
        x.stride(0), x.stride(1), x.stride(2), dt4.stride(0), dt4.stride(1), dt4.stride(2), step.A.stride(0),
        B.stride(0), B.stride(1), B.stride(2), C.stride(0), C.stride(1), C.stride(2),
        Dt.stride(0) if Dt is not None else 0, Dt.stride(1) if Dt is not None else 0,
        z.stride(0) if z is not None else 0, z.stride(1) if z is not None else 0, z.stride(2) if z is not None else 0,
        step.dt_bias.stride(0) if step.dt_bias is not None else 0, out.stride(0), out.stride(1), out.stride(2),
        HAS_D=Dt is not None, HAS_Z=z is not None, HAS_DT_BIAS=step.dt_bias is not None,
        HAS_SLOT_IDX=state_batch_indices is not None, DT_SOFTPLUS=bool(dt_softplus), T=T, BLOCK_P=block_p,
        BLOCK_N=triton.next_power_of_2(N), num_warps=num_warps,
    )
    return out


@triton.jit(do_not_specialize=["num_slots"])
def _promote_kernel(state_ptr, inter_ptr, accepted_ptr, slot_idx_ptr, num_slots, state_numel, num_tokens,
                    pad_slot_id, stride_state_slot, stride_inter_slot, stride_inter_t,
                    HAS_SLOT_IDX: tl.constexpr, BLOCK: tl.constexpr):
    pid_c = tl.program_id(0)
    pid_b = tl.program_id(1)
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    c = tl.load(accepted_ptr + pid_b).to(tl.int32)
    if is_pad | is_bad | (c <= 0) | (c > num_tokens):
        return
    offs = pid_c * BLOCK + tl.arange(0, BLOCK)
    m = offs < state_numel
    v = tl.load(inter_ptr + slot * stride_inter_slot + (c - 1) * stride_inter_t + offs, mask=m)
    tl.store(state_ptr + slot * stride_state_slot + offs, v, mask=m)


def promote_spec_state(state: torch.Tensor, intermediate_states: torch.Tensor, accepted: torch.Tensor,
                       state_batch_indices: Optional[torch.Tensor] = None, pad_slot_id: int = -1) -> None:
    """``state[slot] = intermediate_states[slot, accepted - 1]`` for rows with ``accepted > 0``."""
    check_vector("accepted", accepted, None, INDEX_DTYPES, state.device)
    Bsz, T = accepted.shape[0], intermediate_states.shape[1]
    if state_batch_indices is not None:
        check_vector("state_batch_indices", state_batch_indices, Bsz, INDEX_DTYPES, state.device)
    numel = state[0].numel()
    if Bsz == 0:
        return
    block = 4096
    launch_kernel(_promote_kernel, (triton.cdiv(numel, block), Bsz),
        state, intermediate_states, accepted, state_batch_indices if state_batch_indices is not None else accepted,
        state.shape[0], numel, T, pad_slot_id, state.stride(0), intermediate_states.stride(0),
        intermediate_states.stride(1), HAS_SLOT_IDX=state_batch_indices is not None, BLOCK=block)
