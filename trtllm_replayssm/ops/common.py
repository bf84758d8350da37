"""Triton pieces shared by every decode kernel: slot look-up and error rows."""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

from .._runtime import INTERPRETED

# Folds done as one matmul stay fp32-accurate on the GPU (tf32x3); the interpreter has ieee.
DOT_PRECISION = "ieee" if INTERPRETED else "tf32x3"
# One TF32 pass, for products whose operands are exact in TF32 (see :func:`split_tf32_dot`).
ONE_PASS_PRECISION = "ieee" if INTERPRETED else "tf32"
# tl.dot on bf16/fp16 operands (:func:`native_dot`). The interpreter (Triton 3.6) returns
# garbage for them (relative error ~1e9 on a 16x16 bf16 product), so there the operands go
# to fp32 first.
NATIVE_DOT = tl.constexpr(not INTERPRETED)


def exact_in_tf32(dtype: torch.dtype) -> bool:
    """Whether TF32 holds every value of ``dtype`` (the ``EXACT_B`` of :func:`small_matmul`)."""
    return dtype in (torch.bfloat16, torch.float16)


def one_pass_fold(state_dtype: torch.dtype) -> bool:
    """Whether a fold's product (both families) goes into a ``state_dtype`` checkpoint after
    one TF32 pass instead of the fp32-accurate product (Mamba2: the split pass of
    :func:`split_tf32_dot` over its exact B ring; GDN: tf32x3). A bf16 checkpoint keeps 8
    significant bits: its store rounds every fold by up to 2^-9 relative, and one TF32 pass
    (operands cut to 11 bits, fp32 sums) adds at most ~2^-11 a product term, a quarter of
    that, for a half (Mamba2) or a third (GDN) of the tensor-core work. fp32 and fp16
    checkpoints (11 significant bits, as TF32) keep the fp32-accurate product: plain TF32
    drifts ~1e-2 over chained flushes (``replayssm.md`` section 4).

    Measured (bf16 state, each form side by side in one run, ``python
    benchmarks/probe_one_pass_fold.py``):
    - Mamba2, H100, the tuned table's configs (``benchmarks/results/one_pass_fold.json``):
      the flush step 11-18% faster at batch 8-32 and 3-4% at 128-512 (Super: 91.9 -> 74.9
      us at batch 32, 1144 -> 1103 at 512), the cycle +1.9-4.0% at batch 8-32 and
      +0.5-0.7% at 128-512 in phase, -0.1 to +4.1% staggered (Super and Nano-4B).
    - GDN, each form on the fold config tuned under it (``--tune-fold``; Qwen3.5-4B and
      -122B, batch 128 and 512): on an H200 the flush step 33-43% faster, the cycle
      +2.8-6.3% in phase and +1.7-3.1% staggered
      (``benchmarks/results/one_pass_fold_tuned_gdn_h200.json``); on an H100 25-36%,
      +0.6-2.7% and +0.8-2.2% (``one_pass_fold_tuned_gdn_h100.json``). On tf32x3's tuned
      config instead, one pass had lost 0.6-2% of the staggered cycle: its best fold config
      differs (a program per row, where tf32x3 takes blocks of 128 rows)."""
    return state_dtype == torch.bfloat16


def fold_precision(one_pass: bool) -> str:
    """``input_precision`` of a fold's product (both families): one TF32 pass where
    :func:`one_pass_fold` says so, else the fp32-accurate tf32x3 (the interpreter has only
    ieee). Mamba2's fold over its exact B ring takes its own split pass instead of tf32x3
    (``replay_fold.product_constexprs``)."""
    return ONE_PASS_PRECISION if one_pass else DOT_PRECISION


def even_rows_and_cols(rows: int, block_rows: int, cols: int, block_cols: int) -> dict:
    """``EVEN_ROWS`` and ``EVEN_COLS`` of :func:`tile_masks`: whether each size fills its
    tiles, apart. Where only the rows run past the size (Nano-4B's headdim 80 in blocks of
    32), the columns stay unmasked, and a mask that is constant along the contiguous axis
    keeps the state's loads 16-byte vectors: with both masked, the non-flush launch's
    [32, 128] fp32 tile took 128 predicated 4-byte loads a thread against 32 (sm_90 SASS;
    1688 against 1424 instructions)."""
    return dict(EVEN_ROWS=rows % block_rows == 0, EVEN_COLS=cols == block_cols)


def even_tile(rows: int, block_rows: int, cols: int, block_cols: int) -> bool:
    """``EVEN_TILE`` of :func:`dim_mask` for kernels that drop both masks together: both
    sizes fill their tiles (:func:`even_rows_and_cols`)."""
    return all(even_rows_and_cols(rows, block_rows, cols, block_cols).values())


@triton.jit
def split_tf32_dot(a, b, ONE_PASS_PRECISION: tl.constexpr):
    """``a @ b`` to ~2^-20 relative for fp32 ``a`` and a ``b`` that TF32 holds exactly (bf16
    or fp16 values): ``a`` is split into its TF32 head (the top 10 mantissa bits, which is
    what the tensor core reads) and the fp32 remainder, and each goes through one TF32
    pass. Two matmuls where tf32x3 needs three plus the split of ``b``: on a fold that
    streams the state, tf32x3 cost ~1.45x a standard step and this ~1.1x (H200)."""
    a_hi = tf32_head(a)
    return tl.dot(a_hi, b, input_precision=ONE_PASS_PRECISION) + tl.dot(a - a_hi, b, input_precision=ONE_PASS_PRECISION)


@triton.jit
def tf32_head(x):
    """``x`` (fp32) cut to the bits a TF32 tensor-core pass reads (sign, exponent, top 10
    mantissa bits); ``x - tf32_head(x)`` is exact in fp32."""
    return (x.to(tl.uint32, bitcast=True) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def let_dependents_launch(ON: tl.constexpr):
    """Let a programmatic dependent launch of the next kernel start once every program of
    this one has started (griddepcontrol.launch_dependents; a plain launch after it is
    unaffected, and the interpreter has no such instruction)."""
    if ON:
        gdc_launch_dependents()


@triton.jit
def wait_for_primary(WAIT: tl.constexpr):
    """Under a programmatic dependent launch, wait until the launch before this one has
    completed and its writes are visible (griddepcontrol.wait)."""
    if WAIT:
        gdc_wait()


@triton.jit
def complete_after_primary(WAIT: tl.constexpr):
    """Called before a program exits: under a programmatic dependent launch, the first
    program waits for the launch before this one (:func:`wait_for_primary`), so that this
    launch completes only after it; the others exit at once and free their SM."""
    if WAIT:
        if (tl.program_id(0) == 0) & (tl.program_id(1) == 0) & (tl.program_id(2) == 0):
            gdc_wait()


@triton.jit
def tile_masks(offs_p, offs_n, headdim, dstate, EVEN_ROWS: tl.constexpr, EVEN_COLS: tl.constexpr):
    """Masks of a (headdim block, dstate) tile; each constant true where its size fills the
    tile (:func:`even_rows_and_cols`), so the compiler drops it: a [32, 128] mask costs ~40
    registers a thread, which is occupancy a state-streaming kernel needs."""
    return dim_mask(offs_p, headdim, EVEN_ROWS), dim_mask(offs_n, dstate, EVEN_COLS)


@triton.jit
def dim_mask(offs, size, EVEN_TILE: tl.constexpr):
    """``offs < size``, or constant true under ``EVEN_TILE`` (see :func:`tile_masks`)."""
    if EVEN_TILE:
        return tl.full(offs.shape, True, tl.int1)
    else:
        return offs < size


@triton.jit
def load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX: tl.constexpr):
    """Cache slot of batch row ``pid_b`` (int64) and whether the row is padding."""
    if HAS_SLOT_IDX:
        slot = tl.load(slot_idx_ptr + pid_b).to(tl.int64)
    else:
        slot = pid_b.to(tl.int64)
    is_pad = slot == pad_slot_id
    # An index outside the pool would write someone else's memory: treat it as an
    # error row (the caller writes NaN to its output) rather than trusting it.
    is_bad = (not is_pad) & ((slot < 0) | (slot >= num_slots))
    return slot, is_pad, is_bad


@triton.jit
def load_row_slots(slot_idx_ptr, rows, batch, num_slots, pad_slot_id, HAS_SLOT_IDX: tl.constexpr):
    """Cache slots (int64) of a vector of batch ``rows`` and which of them to serve: rows in
    the batch whose slot is no padding and lies in the pool (the cursor kernels' rows)."""
    in_batch = rows < batch
    if HAS_SLOT_IDX:
        slot = tl.load(slot_idx_ptr + rows, mask=in_batch, other=pad_slot_id).to(tl.int64)
    else:
        slot = rows.to(tl.int64)
    return slot, in_batch & (slot != pad_slot_id) & (slot >= 0) & (slot < num_slots)


@triton.jit
def row_cursors(slot_idx_ptr, write_pos_ptr, force_flush_ptr, rows, batch, num_slots, buffer_len, pad_slot_id,
                HAS_SLOT_IDX: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr):
    """Autoregressive cursors of a vector of batch ``rows``: ``(slot, w, valid, flush)``, with
    ``valid`` the rows to serve (in the batch, no padding, slot and cursor in range) and
    ``flush`` the rows whose cursor is at ``L - 1`` or that are force-flushed (of any
    row: combine it with ``valid``)."""
    slot, valid = load_row_slots(slot_idx_ptr, rows, batch, num_slots, pad_slot_id, HAS_SLOT_IDX)
    w = tl.load(write_pos_ptr + slot, mask=valid, other=0)
    valid = valid & (w >= 0) & (w < buffer_len)
    flush = w == buffer_len - 1
    if HAS_FORCE_FLUSH:
        flush = flush | (tl.load(force_flush_ptr + rows, mask=rows < batch, other=0) != 0)
    return slot, w, valid, flush


@triton.jit
def step_flush_rows(slot_idx_ptr, write_pos_ptr, force_flush_ptr, block, batch, num_slots, buffer_len,
                    pad_slot_id, HAS_SLOT_IDX: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr,
                    ROW_BLOCK: tl.constexpr):
    """Which of the batch rows ``block * ROW_BLOCK ..`` flush at this autoregressive step
    (int32 0/1 ``[ROW_BLOCK]``): valid rows whose cursor is at ``L - 1`` or that are
    force-flushed. One vector load of the block's cursors, so a program none of whose rows
    flush costs one chain of memory round trips, not one a row."""
    _, _, valid, flush = row_cursors(slot_idx_ptr, write_pos_ptr, force_flush_ptr,
                                     block * ROW_BLOCK + tl.arange(0, ROW_BLOCK), batch, num_slots, buffer_len,
                                     pad_slot_id, HAS_SLOT_IDX, HAS_FORCE_FLUSH)
    return (valid & flush).to(tl.int32)


@triton.jit
def fold_row_blocks(batch, ROW_BLOCK: tl.constexpr, ROW_PROGS: tl.constexpr):
    """``(first block, end block, program's place in the share)`` of a fold program's scan
    over the batch in blocks of ``ROW_BLOCK`` rows. ``ROW_PROGS`` 0: the program's own block
    (``tl.program_id(2)``), every row of it that flushes. Otherwise the ``ROW_PROGS``
    programs of a group of heads share the batch's flushing rows, program ``z`` taking
    those of flush ordinal ``z, z + ROW_PROGS, ...`` (the share: ``ROW_PROGS``): with every
    row flushing each takes ``batch / ROW_PROGS`` of them, with 1/L of them (staggered
    cursors) ``batch / (L ROW_PROGS)``, where a block of rows would hold anywhere from none
    to several."""
    if ROW_PROGS == 0:
        return tl.program_id(2), tl.program_id(2) + 1, 0
    else:
        return 0, tl.cdiv(batch, ROW_BLOCK), tl.program_id(2)


@triton.jit
def block_flush_ordinals(slot_idx_ptr, write_pos_ptr, force_flush_ptr, block, before, place, batch, num_slots,
                         buffer_len, pad_slot_id, HAS_SLOT_IDX: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr,
                         ROW_BLOCK: tl.constexpr, SHARE: tl.constexpr):
    """Of batch rows ``block * ROW_BLOCK ..``, with ``before`` flushing rows in the blocks
    before: ``(selected, ordinal, first, mine, after)``: which flush
    (:func:`step_flush_rows`), each row's flush ordinal in the batch, the first ordinal of
    the program's share (those ``= place`` modulo ``SHARE``) at or past ``before``, how many
    of the block's rows are in the share (at most ``cdiv(ROW_BLOCK, SHARE)``), and the flush
    count through this block. The program folds the rows of ordinals ``first + k SHARE``
    for ``k < mine`` (:func:`row_of_ordinal`)."""
    selected = step_flush_rows(slot_idx_ptr, write_pos_ptr, force_flush_ptr, block, batch, num_slots, buffer_len,
                               pad_slot_id, HAS_SLOT_IDX, HAS_FORCE_FLUSH, ROW_BLOCK)
    ordinal = before + tl.cumsum(selected, axis=0) - selected
    first = before + (place - before % SHARE + SHARE) % SHARE
    mine = tl.sum(selected * (ordinal % SHARE == place).to(tl.int32), axis=0)
    return selected, ordinal, first, mine, before + tl.sum(selected, axis=0)


@triton.jit
def row_of_ordinal(selected, ordinal, t, block, ROW_BLOCK: tl.constexpr):
    """The batch row of flush ordinal ``t`` in block ``block`` (:func:`block_flush_ordinals`)."""
    rows = tl.arange(0, ROW_BLOCK)
    return block * ROW_BLOCK + tl.sum(tl.where((selected != 0) & (ordinal == t), rows, 0), axis=0)


@triton.jit
def row_in_block(selected, i, ROW_BLOCK: tl.constexpr):
    """Entry ``i`` of a block of rows' selection (int32 0/1 ``[ROW_BLOCK]``, e.g. which of
    them flush), as a scalar condition."""
    return tl.sum(tl.where(tl.arange(0, ROW_BLOCK) == i, selected, 0), axis=0) != 0


@triton.jit
def load_cursor(write_pos_ptr, slot, buffer_len, HAS_CURSOR: tl.constexpr):
    """``(w, bad)``: with a cursor pool (a standard kernel serving the replay kernels'
    ``standard_step`` / ``always_flush`` routes) the slot's cursor, and whether it lies
    outside ``[0, buffer_len)``, which makes the row an error row; without one, 0 and
    False. The standard kernels do not branch on ``bad``: they issue this load beside the
    state's and mask their stores with it, so the check adds no round trip to memory (at
    batch 1 that round trip was ~4% of the step)."""
    if HAS_CURSOR:
        w = tl.load(write_pos_ptr + slot)
        bad = (w < 0) | (w >= buffer_len)
    else:
        w = (slot * 0).to(tl.int32)
        bad = slot != slot
    return w, bad


@triton.jit
def store_nan_output(out_ptr, offs_p, mask_p, pid_b, pid_h, stride_out_b, stride_out_h):
    """Mark a row whose slot or cursor was invalid; nothing else is written."""
    out_ptrs = out_ptr + pid_b * stride_out_b + pid_h * stride_out_h + offs_p
    tl.store(out_ptrs, tl.full(offs_p.shape, float("nan"), tl.float32).to(out_ptr.dtype.element_ty), mask=mask_p)


@triton.jit
def store_nan_heads(out_ptr, offs_p, mask_p, pid_b, pid_hg, nheads, stride_out_b, stride_out_h,
                     HEADS_PER_PROG: tl.constexpr):
    """NaN outputs for the heads ``pid_hg * HEADS_PER_PROG ..`` of an invalid row."""
    for hh in range(0, HEADS_PER_PROG):
        pid_h = pid_hg * HEADS_PER_PROG + hh
        if pid_h < nheads:
            store_nan_output(out_ptr, offs_p, mask_p, pid_b, pid_h, stride_out_b, stride_out_h)


@triton.jit
def load_spec_row(slot_idx_ptr, wp_ptr, origin_ptr, flush_ptr, pid_b, num_slots, num_tokens, capacity,
                  pad_slot_id, HAS_SLOT_IDX: tl.constexpr, BUF: tl.constexpr):
    """Slot and circular-ring cursors of batch row ``pid_b`` for a speculative verify:
    ``(slot, wp, origin, is_flush, is_pad, is_bad)``; ``is_bad`` covers a slot out of the
    pool and cursors that would put the T drafts outside the ring."""
    slot, is_pad, is_bad = load_slot(slot_idx_ptr, pid_b, num_slots, pad_slot_id, HAS_SLOT_IDX)
    ok = (slot >= 0) & (slot < num_slots)
    wp = tl.load(wp_ptr + slot, mask=ok, other=0)
    origin = tl.load(origin_ptr + slot, mask=ok, other=0)
    is_flush = tl.load(flush_ptr + slot, mask=ok, other=0) != 0
    return slot, wp, origin, is_flush, is_pad, is_bad | spec_cursors_bad(wp, origin, num_tokens, capacity, BUF)


@triton.jit
def spec_cursors_bad(wp, origin, num_tokens, capacity, BUF: tl.constexpr):
    """Whether a slot's cursors would put its T drafts outside the ring (elementwise)."""
    return (wp < 0) | (wp + num_tokens > capacity) | (origin < 0) | (origin >= BUF)


@triton.jit
def store_nan_tokens(out_ptr, offs, mask, pid_b, pid_h, stride_out_b, stride_out_t, stride_out_h, num_tokens,
                     BLOCK_T: tl.constexpr):
    """NaN outputs for the T tokens of an invalid row of a speculative verify."""
    for t in tl.static_range(BLOCK_T):
        if t < num_tokens:
            store_nan_output(out_ptr + t * stride_out_t, offs, mask, pid_b, pid_h, stride_out_b, stride_out_h)


@triton.jit
def exact_matmul(a, b):
    """``a [M, J] @ b [J, N]`` as a broadcast product summed over J: exact fp32 on tiles of
    any size, a dot's K of 16 or not."""
    # J innermost: Triton's combine pass rewrites sum(a[:, :, None] * b[None, :, :], axis=1)
    # into a one-pass TF32 dot where M and N are >= 16 (triton 3.6, sm_90), and an fp32
    # caller would get TF32's error; this form it leaves alone.
    return tl.sum(a[:, None, :] * tl.trans(b)[None, :, :], axis=2)


@triton.jit
def small_matmul(a, b, USE_DOT: tl.constexpr, EXACT_B: tl.constexpr, DOT_PRECISION: tl.constexpr,
                 ONE_PASS_PRECISION: tl.constexpr):
    """``a [M, J] @ b [J, N]`` in fp32: a matmul where every side is >= 16 (the callers
    pass ``USE_DOT``; two TF32 passes where ``b`` holds bf16/fp16 values, ``EXACT_B``, see
    :func:`split_tf32_dot`, else tf32x3), else a broadcast product summed over J, exact in
    fp32: tiny tiles (e.g. in the interpreter on small shapes), and any J under 16, which
    a dot cannot take (a verify's state in narrow chunks of columns)."""
    if USE_DOT and a.shape[1] >= 16:
        if EXACT_B:
            return split_tf32_dot(a, b, ONE_PASS_PRECISION)
        else:
            return tl.dot(a, b, input_precision=DOT_PRECISION)
    else:
        return exact_matmul(a, b)


@triton.jit
def native_dot(a, b, USE_DOT: tl.constexpr, EXACT: tl.constexpr, DOT_PRECISION: tl.constexpr,
               ONE_PASS_PRECISION: tl.constexpr):
    """``a @ b`` in fp32 for two tiles in their own dtype. Where both hold bf16/fp16 values
    (``EXACT``) every product is exact in fp32: one tensor-core pass in that dtype, with
    half the registers of fp32 operands; else (and in the interpreter, see ``NATIVE_DOT``)
    :func:`small_matmul` on fp32 copies."""
    if USE_DOT and EXACT and NATIVE_DOT:
        return tl.dot(a, b, out_dtype=tl.float32)
    else:
        return small_matmul(a.to(tl.float32), b.to(tl.float32), USE_DOT, False, DOT_PRECISION, ONE_PASS_PRECISION)


@triton.jit
def exact_lhs_matmul(a, b, USE_DOT: tl.constexpr, EXACT_A: tl.constexpr, DOT_PRECISION: tl.constexpr,
                     ONE_PASS_PRECISION: tl.constexpr):
    """:func:`small_matmul` with the roles swapped: ``a`` holds values TF32 holds exactly
    (``EXACT_A``), so ``b`` takes the split into a TF32 head and remainder."""
    if USE_DOT and EXACT_A:
        b_hi = tf32_head(b)
        return tl.dot(a, b_hi, input_precision=ONE_PASS_PRECISION) + tl.dot(a, b - b_hi,
                                                                            input_precision=ONE_PASS_PRECISION)
    else:
        return small_matmul(a, b, USE_DOT, False, DOT_PRECISION, ONE_PASS_PRECISION)


@triton.jit
def ring_positions(origin, BUF: tl.constexpr, BLOCK_L: tl.constexpr):
    """Logical ring positions ``0..BLOCK_L-1`` and their physical indices on a circular
    ring of ``BUF`` entries. ``BLOCK_L`` covers the history, which callers mask (it may be
    shorter than the ring, or pad a small ring's tiles to 16: positions past ``BUF`` are
    past the history): tiles of 4 or 8 along the ring gave wrong folds on the GPU (H200,
    Triton 3.6; right in the interpreter), and 16 keeps the fold on tl.dot."""
    offs_l = tl.arange(0, BLOCK_L)
    return offs_l, (origin + offs_l) & (BUF - 1)


@triton.jit
def load_ring_history(scalar_base, rows_base, stride_rows_l, offs_r, mask_r, cols_base, stride_cols_l, offs_c,
                      mask_c, origin, n_hist, BUF: tl.constexpr, BLOCK_L: tl.constexpr):
    """A slot's committed history on a circular ring, as whole tiles in fp32 (all loads
    independent, so they issue together): the per-entry scalars ``[BLOCK_L]``, a
    ``[R, BLOCK_L]`` tile of one per-head vector and a ``[BLOCK_L, C]`` tile of another;
    entries at logical positions ``>= n_hist`` read as 0 (see :func:`ring_positions`).
    Returns ``(mask_l, scalars, rows_tile, cols_tile)``."""
    offs_l, phys_l = ring_positions(origin, BUF, BLOCK_L)
    mask_l = offs_l < n_hist
    scalars = tl.load(scalar_base + phys_l, mask=mask_l, other=0.0)
    rows = tl.load(rows_base + phys_l[None, :] * stride_rows_l + offs_r[:, None],
                   mask=mask_r[:, None] & mask_l[None, :], other=0.0).to(tl.float32)
    cols = tl.load(cols_base + phys_l[:, None] * stride_cols_l + offs_c[None, :],
                   mask=mask_l[:, None] & mask_c[None, :], other=0.0).to(tl.float32)
    return mask_l, scalars, rows, cols
