"""The decode ops as torch custom ops under ``replayssm::``, for torch.compile and CUDA graphs.

Each op writes its outputs in place and returns nothing; the mutated arguments are
declared (``mutates_args``), and a fake implementation lets torch.compile trace through
without running a kernel. They call the same Python entry points, so they launch on the
JIT or the AOT backend (:mod:`trtllm_replayssm.aot.backend`) as those do.

    torch.ops.replayssm.mamba2_step(state, x, dt, A, B, C, D, z, dt_bias, out, slot_idx,
                                    x_cache, dt_cache, B_cache, write_pos, force_flush,
                                    dt_softplus, pad_slot_id, route)
    torch.ops.replayssm.gdn_step(state, q, k, v, a, b, A_log, dt_bias, out, slot_idx,
                                 d_cache, k_cache, g_cache, write_pos, force_flush,
                                 scale, pad_slot_id, route)
    torch.ops.replayssm.advance_write_pos(write_pos, buffer_len, slot_idx, force_flush,
                                          flush_all, pad_slot_id)
    torch.ops.replayssm.reset_write_pos(write_pos, slots, pad_slot_id)

``route``: ``output_only``, ``standard_step``, ``always_flush`` or ``auto`` (the dispatcher).
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from .ops.cursors import advance_write_pos, reset_write_pos
from .ops.gdn import fused_recurrent_gated_delta_rule_replayssm
from .ops.mamba2 import selective_state_update_replayssm

_MAMBA2_MUTATES = ("state", "out", "x_cache", "dt_cache", "B_cache")
_GDN_MUTATES = ("state", "out", "d_cache", "k_cache", "g_cache")


@torch.library.custom_op("replayssm::mamba2_step", mutates_args=_MAMBA2_MUTATES)
def mamba2_step(state: Tensor, x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Optional[Tensor],
                z: Optional[Tensor], dt_bias: Optional[Tensor], out: Tensor, slot_idx: Optional[Tensor],
                x_cache: Tensor, dt_cache: Tensor, B_cache: Tensor, write_pos: Tensor, force_flush: Optional[Tensor],
                dt_softplus: bool, pad_slot_id: int, route: str) -> None:
    """One ReplaySSM Mamba2 decode step (see :func:`selective_state_update_replayssm`);
    the cursors do not move here (:func:`advance_write_pos_op` after all layers)."""
    selective_state_update_replayssm(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                                     state_batch_indices=slot_idx, pad_slot_id=pad_slot_id, out=out,
                                     x_cache=x_cache, dt_cache=dt_cache, B_cache=B_cache, write_pos=write_pos,
                                     force_flush=force_flush, route=route)


@mamba2_step.register_fake
def _(state, x, dt, A, B, C, D, z, dt_bias, out, slot_idx, x_cache, dt_cache, B_cache, write_pos, force_flush,
      dt_softplus, pad_slot_id, route) -> None:
    return None


@torch.library.custom_op("replayssm::gdn_step", mutates_args=_GDN_MUTATES)
def gdn_step(state: Tensor, q: Tensor, k: Tensor, v: Tensor, a: Tensor, b: Tensor, A_log: Tensor, dt_bias: Tensor,
             out: Tensor, slot_idx: Optional[Tensor], d_cache: Tensor, k_cache: Tensor, g_cache: Tensor,
             write_pos: Tensor, force_flush: Optional[Tensor], scale: Optional[float], pad_slot_id: int,
             route: str) -> None:
    """One ReplaySSM GDN decode step (see :func:`fused_recurrent_gated_delta_rule_replayssm`)."""
    fused_recurrent_gated_delta_rule_replayssm(state, q, k, v, a, b, A_log, dt_bias, scale=scale,
                                               initial_state_indices=slot_idx, pad_slot_id=pad_slot_id, out=out,
                                               d_cache=d_cache, k_cache=k_cache, g_cache=g_cache,
                                               write_pos=write_pos, force_flush=force_flush, route=route)


@gdn_step.register_fake
def _(state, q, k, v, a, b, A_log, dt_bias, out, slot_idx, d_cache, k_cache, g_cache, write_pos, force_flush, scale,
      pad_slot_id, route) -> None:
    return None


@torch.library.custom_op("replayssm::advance_write_pos", mutates_args=("write_pos",))
def advance_write_pos_op(write_pos: Tensor, buffer_len: int, slot_idx: Optional[Tensor],
                         force_flush: Optional[Tensor], flush_all: bool, pad_slot_id: int) -> None:
    """Once per decode step, after every layer: cursors move on the device."""
    advance_write_pos(write_pos, buffer_len, slot_idx, force_flush, flush_all=flush_all, pad_slot_id=pad_slot_id)


@advance_write_pos_op.register_fake
def _(write_pos, buffer_len, slot_idx, force_flush, flush_all, pad_slot_id) -> None:
    return None


@torch.library.custom_op("replayssm::reset_write_pos", mutates_args=("write_pos",))
def reset_write_pos_op(write_pos: Tensor, slots: Tensor, pad_slot_id: int) -> None:
    """Slots entering decode: empty their rings."""
    reset_write_pos(write_pos, slots, pad_slot_id)


@reset_write_pos_op.register_fake
def _(write_pos, slots, pad_slot_id) -> None:
    return None
