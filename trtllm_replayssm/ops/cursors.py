"""Cursor ops on device: advance after a decode step, reset slots that enter decode.

``write_pos (slots,)`` int32 is shared by every layer of a request, so it moves once per
decode step, after all layers ran. These are single small launches with no host
synchronisation, capturable in a CUDA graph. Padding rows and rows with an out-of-range
slot or cursor never move a cursor.
"""

from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from .._validation import FLAG_DTYPES, INDEX_DTYPES, check_buffer_len, check_contiguous, check_tensor, check_vector
from .common import load_row_slots, row_cursors
from .launch import launch_kernel

_BLOCK = 128
# Replay routes whose every step flushes (the state is exact; the ring stays empty).
FLUSH_EVERY_STEP = ("always_flush", "standard_step")


@triton.jit(do_not_specialize=["batch", "num_slots"])
def _advance_kernel(write_pos_ptr, slot_idx_ptr, force_flush_ptr, batch, num_slots, buffer_len, pad_slot_id,
                    HAS_SLOT_IDX: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr, FLUSH_ALL: tl.constexpr,
                    BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    slot, w, valid, flush = row_cursors(slot_idx_ptr, write_pos_ptr, force_flush_ptr, rows, batch, num_slots,
                                        buffer_len, pad_slot_id, HAS_SLOT_IDX, HAS_FORCE_FLUSH)
    if FLUSH_ALL:
        flush = w >= 0
    tl.store(write_pos_ptr + slot, tl.where(flush, 0, w + 1), mask=valid)


@triton.jit(do_not_specialize=["n", "num_slots"])
def _reset_kernel(write_pos_ptr, slots_ptr, n, num_slots, pad_slot_id, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    slot, valid = load_row_slots(slots_ptr, rows, n, num_slots, pad_slot_id, True)
    tl.store(write_pos_ptr + slot, tl.zeros_like(slot).to(tl.int32), mask=valid)


def _check_write_pos(write_pos: torch.Tensor) -> None:
    check_tensor("write_pos", write_pos, (None,), (torch.int32,))
    check_contiguous("write_pos", write_pos)


def advance_write_pos(
    write_pos: torch.Tensor,
    buffer_len: int,
    state_batch_indices: Optional[torch.Tensor] = None,
    force_flush: Optional[torch.Tensor] = None,
    flush_all: bool = False,
    pad_slot_id: int = -1,
    batch: Optional[int] = None,
) -> None:
    """Move each row's cursor past the step just decoded: ``w + 1``, or 0 after a flush.

    Args:
        write_pos: ``(slots,)`` int32 cursors.
        buffer_len: ring length L of the caches the step used.
        state_batch_indices: ``(B,)`` slot per row (default: row b is slot b, ``batch`` rows).
        force_flush: ``(B,)`` the same flags the decode step was given.
        flush_all: True when the step ran on a route of :data:`FLUSH_EVERY_STEP`.
    """
    _check_write_pos(write_pos)
    check_buffer_len(buffer_len)
    if state_batch_indices is not None:
        check_vector("state_batch_indices", state_batch_indices, None, INDEX_DTYPES, write_pos.device)
        batch = state_batch_indices.shape[0]
    elif batch is None:
        batch = write_pos.shape[0]
    if force_flush is not None:
        check_vector("force_flush", force_flush, batch, FLAG_DTYPES, write_pos.device)
    if batch == 0:
        return
    launch_kernel(_advance_kernel, (triton.cdiv(batch, _BLOCK),),
        write_pos, state_batch_indices if state_batch_indices is not None else write_pos,
        force_flush if force_flush is not None else write_pos,
        batch, write_pos.shape[0], buffer_len, pad_slot_id,
        HAS_SLOT_IDX=state_batch_indices is not None, HAS_FORCE_FLUSH=force_flush is not None,
        FLUSH_ALL=bool(flush_all), BLOCK=_BLOCK,
    )


def reset_write_pos(write_pos: torch.Tensor, slots: torch.Tensor, pad_slot_id: int = -1) -> None:
    """Empty the rings of ``slots (n,)`` (requests entering decode): their checkpoint is
    the state prefill left. Entries equal to ``pad_slot_id`` are skipped."""
    _check_write_pos(write_pos)
    check_vector("slots", slots, None, INDEX_DTYPES, write_pos.device)
    if slots.shape[0] == 0:
        return
    launch_kernel(_reset_kernel, (triton.cdiv(slots.shape[0], _BLOCK),),
        write_pos, slots, slots.shape[0], write_pos.shape[0], pad_slot_id, BLOCK=_BLOCK)
