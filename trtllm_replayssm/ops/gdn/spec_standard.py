"""Standard speculative verify for GDN (the baseline replay is measured against): step the
state through the T drafted tokens writing every intermediate state; the accepted one is
copied back by :func:`promote_spec_state` (shared with Mamba2: it copies whole slots)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from ..launch import launch_kernel

from ..._validation import (FLOAT_DTYPES, INDEX_DTYPES, check_contiguous, check_last_dim_contiguous, check_tensor,
                           check_vector)
from ..common import load_slot
from ..mamba2.spec_standard import promote_spec_state
from ._common import delta_rule_step, load_gates, load_qk
from .step_inputs import parse_gdn_step

__all__ = ["gdn_spec_standard", "promote_spec_state"]  # the promote copy is shared with Mamba2

# The verify's launch config: 4 value rows a program on one warp. H200, T = 4, batch
# 128-512, Qwen3.5-4B and -122B (``benchmarks/probe_spec_standard_configs.py``,
# ``spec_standard_configs.json``): the step with the promote copy at 92-94% of copy
# bandwidth, 22-29% faster than 16 rows on 4 warps (71-73%), the default before.
STANDARD_SPEC_BLOCK_V = 4
STANDARD_SPEC_WARPS = 1


@triton.jit(do_not_specialize=["num_slots"])
def _gdn_spec_standard_kernel(
    state_ptr, inter_ptr, q_ptr, k_ptr, v_ptr, a_ptr, b_ptr, A_log_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, head_k_dim, head_v_dim, v_heads_per_k_head, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_v, stride_inter_slot, stride_inter_t,
    stride_q_b, stride_q_t, stride_q_h, stride_k_b, stride_k_t, stride_k_h, stride_v_b, stride_v_t, stride_v_h,
    stride_a_b, stride_a_t, stride_a_h, stride_b_b, stride_b_t, stride_b_h, stride_out_b, stride_out_t, stride_out_h,
    scale, softplus_beta, softplus_threshold,
    USE_QK_L2NORM: tl.constexpr, HAS_SLOT_IDX: tl.constexpr, T: tl.constexpr,
    BLOCK_V: tl.constexpr, BLOCK_K: tl.constexpr,
):
    pid_v = tl.program_id(0)
    hv = tl.program_id(1)
    pid_b = tl.program_id(2)
    offs_v = pid_v * BLOCK_V + tl.arange(0, BLOCK_V)
    offs_k = tl.arange(0, BLOCK_K)
    mask_v = offs_v < head_v_dim
    mask_k = offs_k < head_k_dim
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    if is_pad | is_bad:
        return
    tile = hv * stride_state_h + offs_v[:, None] * stride_state_v + offs_k[None, :]
    mask_vk = mask_v[:, None] & mask_k[None, :]
    S = tl.load(state_ptr + slot * stride_state_slot + tile, mask=mask_vk, other=0.0).to(tl.float32)
    for t in tl.static_range(T):
        q, k = load_qk(q_ptr + t * stride_q_t, k_ptr + t * stride_k_t, pid_b, hv // v_heads_per_k_head, stride_q_b,
                       stride_q_h, stride_k_b, stride_k_h, offs_k, mask_k, scale, USE_QK_L2NORM)
        v = tl.load(v_ptr + pid_b * stride_v_b + t * stride_v_t + hv * stride_v_h + offs_v, mask=mask_v,
                    other=0.0).to(tl.float32)
        g, beta = load_gates(a_ptr + t * stride_a_t, b_ptr + t * stride_b_t, A_log_ptr, dt_bias_ptr, pid_b, hv,
                             stride_a_b, stride_a_h, stride_b_b, stride_b_h, softplus_beta, softplus_threshold)
        S, o = delta_rule_step(S, q, k, v, tl.exp(g), beta)
        tl.store(inter_ptr + slot * stride_inter_slot + t * stride_inter_t + tile, S.to(inter_ptr.dtype.element_ty),
                 mask=mask_vk)
        tl.store(out_ptr + pid_b * stride_out_b + t * stride_out_t + hv * stride_out_h + offs_v,
                 o.to(out_ptr.dtype.element_ty), mask=mask_v)


def gdn_spec_standard(state, q, k, v, a, b, A_log, dt_bias, scale=None, use_qk_l2norm=True,
                      initial_state_indices=None, pad_slot_id=-1, out=None, softplus_beta=1.0,
                      softplus_threshold=20.0, *, intermediate_states: torch.Tensor,
                      block_v: int = STANDARD_SPEC_BLOCK_V, num_warps: int = STANDARD_SPEC_WARPS) -> torch.Tensor:
    """Verify T tokens (shapes as :func:`gdn_replayssm_spec_decode`) without replay: ``state``
    is read and left unchanged; ``intermediate_states (slots, T, HV, V, K)`` gets every
    intermediate state."""
    Bsz, T = q.shape[0], q.shape[1]
    if out is None:
        out = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t is not None:  # the kernel reads these with their own strides, not the flattened copies'
            check_last_dim_contiguous(name, t)
    step = parse_gdn_step(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), a.flatten(0, 1), b.flatten(0, 1), A_log,
                          dt_bias, scale, use_qk_l2norm, None, pad_slot_id, out.flatten(0, 1), softplus_beta,
                          softplus_threshold)
    HV, V, K = step.num_v_heads, step.head_v_dim, step.head_k_dim
    check_tensor("state", state, (None, HV, V, K), FLOAT_DTYPES, q.device)
    check_contiguous("state", state)
    check_tensor("intermediate_states", intermediate_states, (state.shape[0], T, HV, V, K), (state.dtype,), q.device)
    check_contiguous("intermediate_states", intermediate_states)
    if initial_state_indices is not None:
        check_vector("initial_state_indices", initial_state_indices, Bsz, INDEX_DTYPES, q.device)
    if Bsz == 0:
        return out
    launch_kernel(_gdn_spec_standard_kernel, (triton.cdiv(V, block_v), HV, Bsz),
        state, intermediate_states, q, k, v, a, b, A_log, dt_bias, out,
        initial_state_indices if initial_state_indices is not None else A_log,
        state.shape[0], K, V, HV // step.num_k_heads, pad_slot_id,
        state.stride(0), state.stride(1), state.stride(2), intermediate_states.stride(0), intermediate_states.stride(1),
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1),
        v.stride(2), a.stride(0), a.stride(1), a.stride(2), b.stride(0), b.stride(1), b.stride(2),
        out.stride(0), out.stride(1), out.stride(2), step.scale, step.softplus_beta, step.softplus_threshold,
        USE_QK_L2NORM=step.use_qk_l2norm, HAS_SLOT_IDX=initial_state_indices is not None, T=T, BLOCK_V=block_v,
        BLOCK_K=triton.next_power_of_2(K), num_warps=num_warps,
    )
    return out
