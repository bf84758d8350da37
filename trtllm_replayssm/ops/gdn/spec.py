"""ReplaySSM Gated DeltaNet speculative verify on a circular ring (``replayssm.md`` s. 2-3).

Ring per slot: corrected values ``d``, normalised keys and log-decays of the committed
history, at physical ``(origin + i) & (buf - 1)``; cursors as for Mamba2, moved by
:func:`commit_gdn_replayssm_spec` / :func:`reset_gdn_replayssm_spec_cursors` (Mamba2's
cursor ops under GDN's argument names).

With ``S_h`` the state after the committed history (never formed: ``S_h x`` comes from
``S_0 x`` and the ring) and ``A_t`` the drafts' log-decay summed up to ``t``, the drafts'
corrected values solve a unit lower-triangular system, all T at once:

    d_t + sum_{s<t} beta_t exp(A_t - A_s) (k_s . k_t) d_s = beta_t (v_t - exp(A_t) S_h k_t)
    o_t = exp(A_t) S_h q_t + sum_{s<=t} exp(A_t - A_s) (k_s . q_t) d_s

``(I + M)^-1`` is formed as ``(I - M)(I + M^2)(I + M^4)`` (``M`` is nilpotent, T <= 8).
On a flush step the committed history is first folded into the checkpoint and stored.

This module holds the entry point, the launch decision and its constants; the kernels:
- ``spec_dot.py``: :func:`_gdn_spec_verify_dot_kernel`, the verify wherever the tiles
  allow tl.dot (>= 16 rows of V and key columns: every real model), all products on the
  16 columns of the drafts' keys and queries. The flush rows fold before it, in a launch
  of the chunked kernel (``split_fold`` 1), or fold on the way through in a launch of
  their own (``split_fold`` 2 and 3: their state read once), the other rows in one
  compiled without the fold (2: the default up to batch 32) or in the two launches of
  split_fold 3 (above; :func:`gdn_spec_plan`).
  Under split_fold 1-2, :func:`_gdn_spec_solve_kernel` forms the solve ahead of the
  verify (:data:`SOLVE_APART`).
- ``spec_state_apart.py``: split_fold 3's :func:`_gdn_spec_ring_part_kernel` (the
  drafts' solve and everything but the state's product, to a workspace) and
  :func:`_gdn_spec_state_product_kernel` (``(S_0 X) W + bias``, streaming the checkpoint).
- ``spec_chunked.py``: :func:`_gdn_spec_verify_kernel` streams the checkpoint in chunks
  of key columns, every product with the drafts an fp32 FMA reduction: the fold-only
  launch, and the whole verify on tiles too small for tl.dot (or with
  :data:`VERIFY_ON_DOT` off).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import torch
import triton

from ..._validation import (FLOAT_DTYPES, INDEX_DTYPES, check_last_dim_contiguous, check_slot_major, check_tensor,
                           check_vector)
from ..common import DOT_PRECISION, ONE_PASS_PRECISION, even_tile, exact_in_tf32
from ..launch import LaunchConfig, launch_kernel, maxnreg_option, nearest_batch_point, programmatic_launch_allowed
from ..mamba2.spec import (AFTER_FOLD, BOTH, FLUSH_ROWS, FOLD_ONLY, MAX_T, NONFLUSH_ROWS, STATE_APART,
                           _check_cursors, check_spec_sizes, check_split_fold, commit_replayssm_spec, history_tile,
                           reset_replayssm_spec_cursors, ring_capacity, spec_workspace)
from .spec_chunked import _gdn_spec_verify_kernel, fma_key_chunk
from .spec_dot import _gdn_spec_solve_kernel, _gdn_spec_verify_dot_kernel
from .spec_state_apart import _gdn_spec_ring_part_kernel, _gdn_spec_state_product_kernel
from .step_inputs import parse_gdn_step

RING_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
# The state's product in a launch of its own (split_fold 3; see GDN_STATE_PRODUCT_ROWS):
# the solve and the ring's part first, then the flush rows' whole step (on 64 rows of V
# and 2 warps, the state in chunks of 32 key columns), then ``(S_0 X) W + bias`` for the
# other rows. H200, Qwen3.5-122B, T = 4, all accepted, us a verify step at batch 128 / 512
# (``benchmarks/results/gdn_state_apart.json``): 340 / 1300. Before, split_fold 2 (the
# flush rows' whole step apart, the other rows' verify fused: 64 rows on 2 warps, 4 value
# heads a program, the solve apart) 359 / 1391; 128 rows on 4 warps 386 / 1492
# (``gdn_solve_apart.json``); split_fold 1 (a fold-only launch first) 399 / 1539.
GDN_SPEC_CONFIG = LaunchConfig(block_p=64, num_warps=2, split_fold=3, key_chunk=32)
# The fold-only launch before the tl.dot verify: 64 rows of V on 4 warps (the chunked
# kernel's fold at 126 registers a thread; at the verify's 128 rows, 220).
GDN_SPEC_FOLD_CONFIG = LaunchConfig(block_p=64, num_warps=4)
# Whether the verify runs on tl.dot (:func:`_gdn_spec_verify_dot_kernel`, after a fold-only
# launch) where the tiles allow (>= 16 rows of V and key columns); False keeps the chunked
# FMA kernel for every phase (a benchmark's comparison).
VERIFY_ON_DOT = True
# The dot verify's products that are not with the state (the solve's [16, 16] matrices,
# the history's and the solve's [V, 16] x [16, 16]): fp32 FMAs ("ieee") rather than
# tf32x3 on the tensor cores (H200, Qwen3.5-122B, T = 4, batch 128, 128 rows on 4 warps:
# 448 against 524 us; on 2 warps tf32x3 was ahead, 484 against 551).
SMALL_DOT_PRECISION = "ieee"
# Whether the drafts' solve (``Z`` [16, 16] a row and value head: the Gram, the gates and
# the chain of small products of (I + M)^-1) runs in a launch of its own ahead of the tl.dot
# verify (``_gdn_spec_solve_kernel``, a program a row and value head on one warp, through a
# workspace of 1 KB each) rather than in every verify program's loop over heads. It won
# for every config tried: 3-9% at batch 128, 3-10% at 512 (Qwen3.5-122B, T = 4,
# ``python benchmarks/probe_gdn_solve_apart.py``, ``benchmarks/results/gdn_solve_apart.json``);
# the verify on 128 rows and 4 warps fell from 255 registers (8 B spilled) to 250.
SOLVE_APART = True
SOLVE_WARPS = 1
# split_fold 3: the state's product in a launch of its own. Every output and every draft's
# corrected value is affine in ``P = S_0 X`` (the raw drafts' tile): ``F = P W + bias``
# on the 16 columns (``D`` on the key columns, ``O`` on the query columns), with
# ``W [16, 16]`` from the drafts' gates, the solve and the history's total decay, and
# ``bias [V, 16]`` from the history and the drafts' values. A launch before forms both
# (the ring's part, with the solve); the state's product launch then streams the
# checkpoint with nothing else in its registers. Its launch config: rows of V a program,
# key columns a step of its loop, warps, pipeline stages; the ring part's: rows of V a
# step of its loop over the head's, warps, value heads of a key head a program.
# H200, Qwen3.5-122B, T = 4, all accepted, us a verify step at batch 128 / 512
# (``python benchmarks/probe_gdn_state_apart.py``, ``benchmarks/results/gdn_state_apart.json``):
# split_fold 2 359 / 1391; split_fold 3 with these 340 / 1300. The state's product on 32
# rows and one warp 388 / 1493 (64 rows, 2 warps: 384 / 1477; chunks of 64 columns lost
# 2-8%); the ring part a value head a program 412 / 1595, 2 a program 398 / 1541, on 2-4
# warps or 64-128 rows 400-433 / 1567-1643 (all with fp32 FMA products).
# With the register caps below (commit e85a713, 3 accepted, ``gdn_spec_tiles.json``): 64
# rows on 2 warps 277 / 1045-1059 against 128 rows on 4 warps 282 / 1057; 32 rows on one
# warp 285 / 1096, 64 rows on 4 warps 293 / 1110, 128 on 8 warps 315 / 1198, 4 stages
# 288-294 / 1078-1113, chunks of 16 columns 290 / 1084.
# The flush rows take their step in the fused verify's flush rows' launch. In a launch of
# the state's product compiled with the fold (the ring part's W and bias of an empty
# history, then the fold on the way through, 244 registers a thread) they lost: 330 / 1266
# against 308 / 1182 us (commit abf4739, ``gdn_flush_in_state_product.json``).
# A value head a program of the state's product: one loop over 2-4 heads' chunks (the
# row's cursors read once, a head's epilogue beside the next head's loads) lost, 331-335
# against 308 us at batch 128 (commit 3476c36).
GDN_STATE_PRODUCT_ROWS, GDN_STATE_PRODUCT_COLS, GDN_STATE_PRODUCT_WARPS, GDN_STATE_PRODUCT_STAGES = 64, 32, 2, 3
GDN_RING_PART_ROWS, GDN_RING_PART_WARPS, GDN_RING_PART_HEADS = 32, 1, 4
# Key columns a step of the ring part's loop over the drafts' tile and the history's keys.
GDN_RING_PART_COLS = 32
# Caps on split_fold 3's launches' registers a thread (ptxas's maxnreg; None: ptxas's
# choice), so that more programs share an SM: the ring part's one-warp programs are
# latency-bound (at ptxas's 248 registers an SM holds 8), and the flush rows' and the state
# product's hold 4 and 3 programs an SM. H200, Qwen3.5-122B, T = 4, 3 accepted, us a
# verify step at batch 128 / 512 (``benchmarks/results/gdn_spec_maxnreg.json``, commits
# f796638 and e85a713; ring part, flush rows, state product): none 300 / 1151; 128, -, -
# 293 / 1110 (112: 297 / 1120, 96: 302 / 1147); 128, 168, - 289 / 1090 (128, 128, -:
# 296 / 1119); 128, -, 128 286 / 1074; 128, 168, 128 283 / 1063 (the flush rows at 152
# or 184: 283-287 / 1080-1082; the state product at 112 or 96: 291-335 / 1119-1283).
GDN_RING_PART_MAXNREG, GDN_FLUSH_ROWS_MAXNREG, GDN_STATE_PRODUCT_MAXNREG = 128, 168, 128
# Whether split_fold 3's state product is a programmatic dependent launch of the ring part
# (:func:`programmatic_launch`): launched right after it, before the flush rows' launch, it
# streams the state while the ring part's last programs run and waits for them
# (griddepcontrol.wait) only before it reads W and bias, and before it exits, so that its
# completion implies the ring part's. The ring part lets it launch as its programs start.
# Its data needs nothing else of the ring part (the ring part reads the history's d and
# writes keys and gates; the state product writes the drafts' d and the outputs).
# It applies up to GDN_SPEC_PDL_MAX_HEAD_ROWS (batch x value heads): beyond, the state
# product's programs that launch early hold the SMs the ring part's later waves need.
# H200, T = 4, 3 accepted, us a verify step plain / programmatic (commit 9768456,
# ``python benchmarks/probe_gdn_state_apart.py --settings 2 --pdl --accepted 3``,
# ``benchmarks/results/gdn_spec_pdl.json``): Qwen3.5-122B (64 value heads) at batch 64
# 152.6 / 149.0, 128 278.4 / 272.8, 256 535.5 / 532.0, 320 680.0 / 671.5, 384 796.5 / 833.8,
# 512 1064.0 / 1103.1; Qwen3.5-4B (32) at 128 155.2 / 150.6, 512 559.7 / 556.3.
GDN_SPEC_PDL = True
GDN_SPEC_PDL_MAX_HEAD_ROWS = 320 * 64


def programmatic_launch(device: torch.device, head_rows: int) -> bool:
    """Whether split_fold 3's state product is launched as a programmatic dependent of the
    ring part here (:data:`GDN_SPEC_PDL`, up to :data:`GDN_SPEC_PDL_MAX_HEAD_ROWS` (batch
    rows x value heads), on a GPU of sm_90 or later; Triton's JIT and the AOT library alike)."""
    return programmatic_launch_allowed(device, head_rows, GDN_SPEC_PDL, GDN_SPEC_PDL_MAX_HEAD_ROWS)


@dataclass(frozen=True)
class GDNSpecPlan:
    """The verify's default at a batch point: its launch config, and whether split_fold
    3's launches take their register caps (``GDN_*_MAXNREG``)."""
    config: LaunchConfig
    register_caps: bool


# The verify's default by batch: each plan serves the batches nearest its batch point in
# log scale (a tie: the smaller point), the rule by which the AOT library, which records
# a case at every point, picks one. H200, T = 4, 3 accepted, us a verify step (commit
# 43f2c4b, ``python benchmarks/probe_spec_small_batch.py``,
# ``benchmarks/results/gdn_spec_small_batch.json``):
# - small batches: split_fold 2 on a value head a program (fewer, shorter launches: the
#   ring part's solve is latency-bound) against split_fold 3 with its programmatic
#   launch: Qwen3.5-122B at batch 1 14.7 / 33.1, 8 32.2 / 49.9, 16 51.6 / 65.4, 32 89.9 /
#   92.3, 48 129.8 / 121.7; Qwen3.5-4B at 1 14.4 / 21.7, 16 32.8 / 38.7, 32 52.5 / 55.1,
#   48 71.1 / 71.0 (4 heads a program: 50.5 and 31.0 at 16, 27.5 and 19.1 at 1);
# - the register caps cost at batch 32 (94 against 101.5 us, commit b78db8d,
#   ``gdn_spec_maxnreg.json``), where the launches' programs fit an SM's warps without
#   them, and win from batch 128 on (see GDN_RING_PART_MAXNREG).
GDN_SPEC_PLANS = {
    16: GDNSpecPlan(LaunchConfig(block_p=64, num_warps=2, heads_per_prog=1, split_fold=2, key_chunk=32), False),
    64: GDNSpecPlan(GDN_SPEC_CONFIG, False),
    128: GDNSpecPlan(GDN_SPEC_CONFIG, True),
}


def gdn_spec_plan(batch: int) -> GDNSpecPlan:
    """The plan of the batch point nearest ``batch`` in log scale (:data:`GDN_SPEC_PLANS`)."""
    return GDN_SPEC_PLANS[nearest_batch_point(tuple(GDN_SPEC_PLANS), batch)]


def gdn_spec_batches() -> tuple:
    """Batch points at which the AOT build records the verify (:data:`GDN_SPEC_PLANS`)."""
    return tuple(GDN_SPEC_PLANS)


# The precision of the two launches' small products (the solve, the history's and the
# drafts' [V, 16] x [16, 16], ``(S_0 X) W``): tf32x3 on the tensor cores, not the fused
# verify's fp32 FMAs (:data:`SMALL_DOT_PRECISION`): 340 against 381 us (both launches
# FMAs), 350 (the ring part's alone on the tensor cores), 372 (the state product's).
GDN_RING_PART_PRECISION, GDN_STATE_PRODUCT_PRECISION = DOT_PRECISION, DOT_PRECISION


def dot_heads_per_program(cfg: LaunchConfig, v_heads_per_k_head: int, phase) -> int:
    """Value heads one program of the tl.dot verify runs in ``phase``: ``cfg.heads_per_prog``
    cut to a divisor of a key head's, except in the flush rows' own launch, whose fold's
    chunk tiles leave room for one (252 registers; 4 spilled 184 B at 128 rows on 4 warps)."""
    return 1 if phase is FLUSH_ROWS else math.gcd(cfg.heads_per_prog, v_heads_per_k_head)


def commit_gdn_replayssm_spec(write_pos, origin, is_flush, accepted, num_tokens: int, history_len: int,
                              initial_state_indices: Optional[torch.Tensor] = None, pad_slot_id: int = -1) -> None:
    """After a verify's acceptance: ``accepted (B,)`` tokens a row, bonus token included,
    with the verify's ``initial_state_indices``; rows with ``accepted <= 0`` (padding)
    change nothing. On device, no host sync. (The ring's cursors follow Mamba2's rule:
    :func:`commit_replayssm_spec`.)"""
    commit_replayssm_spec(write_pos, origin, is_flush, accepted, num_tokens, history_len, initial_state_indices,
                          pad_slot_id)


def reset_gdn_replayssm_spec_cursors(write_pos, origin, is_flush, slots: torch.Tensor, num_tokens: int,
                                     history_len: int, pad_slot_id: int = -1) -> None:
    """Slots entering decode: an empty history (:func:`reset_replayssm_spec_cursors`)."""
    reset_replayssm_spec_cursors(write_pos, origin, is_flush, slots, num_tokens, history_len, pad_slot_id)


def gdn_spec_workspace_numel(batch: int, num_tokens: int, num_v_heads: int, head_v_dim: int) -> int:
    """fp32 elements of a verify's workspace: the drafts' solve ``[batch, HV, 16, 16]``
    (:data:`SOLVE_APART`; split_fold 3: ``W`` for the rows that do not flush), then the
    ring part's ``bias [batch, HV, 2T, V]`` (split_fold 3)."""
    return batch * num_v_heads * ((2 * MAX_T) ** 2 + 2 * num_tokens * head_v_dim)


def gdn_replayssm_spec_decode(
    state, q, k, v, a, b, A_log, dt_bias, scale=None, use_qk_l2norm=True, initial_state_indices=None,
    pad_slot_id=-1, out=None, softplus_beta=1.0, softplus_threshold=20.0, *, d_ring, k_ring, g_ring,
    write_pos, origin, is_flush, history_len: int, config: Optional[LaunchConfig] = None,
    workspace: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """One GDN speculative verify step: ``q, k (B, T, H, K)``, ``v (B, T, HV, V)``,
    ``a, b (B, T, HV)``; returns ``out (B, T, HV, V)``. Ring of this layer:
    ``d_ring (slots, HV, buf, V)``, ``k_ring (slots, H, buf, K)``, ``g_ring (slots, HV, buf)``
    fp32, ``buf = ring_capacity(T, history_len)``; cursors as for Mamba2, moved by
    :func:`commit_gdn_replayssm_spec`. ``config`` (default: the batch's, :func:`gdn_spec_plan`):
    rows of V a program (``block_p``), warps, value heads of a key head a program
    (``heads_per_prog``) and key columns a chunk (``key_chunk``) of the tl.dot verify; the chunked FMA kernel
    (tiles below 16) takes ``block_p``, the warps and ``split_fold``; under split_fold 3
    (the state's product apart) ``block_p``, the warps and ``key_chunk`` set the flush
    rows' launch, the module's ``GDN_STATE_PRODUCT_*`` and ``GDN_RING_PART_*`` the others.
    ``workspace``: scratch for the solve and the ring's part, fp32, contiguous, at least
    :func:`gdn_spec_workspace_numel` elements (allocated per call if not given)."""
    if not isinstance(q, torch.Tensor) or q.dim() != 4:
        raise ValueError("q must have shape (batch, T, num_k_heads, head_k_dim)")
    Bsz, T = q.shape[0], q.shape[1]
    capacity = check_spec_sizes(T, history_len)
    for name, t in (("k", k), ("v", v), ("a", a), ("b", b)):
        if t.dim() < 2 or tuple(t.shape[:2]) != (Bsz, T):
            raise ValueError(f"{name} must start with the dimensions (batch, T) = {(Bsz, T)}, got {tuple(t.shape)}")
    if out is None:
        out = torch.empty(v.shape, dtype=q.dtype, device=q.device)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out)):
        if t is not None:  # the kernel reads these with their own strides, not the flattened copies'
            check_last_dim_contiguous(name, t)
    step = parse_gdn_step(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), a.flatten(0, 1), b.flatten(0, 1), A_log,
                          dt_bias, scale, use_qk_l2norm, None, pad_slot_id, out.flatten(0, 1), softplus_beta,
                          softplus_threshold)
    H, HV, K, V = step.num_k_heads, step.num_v_heads, step.head_k_dim, step.head_v_dim
    check_tensor("state", state, (None, HV, V, K), FLOAT_DTYPES, q.device)
    check_slot_major("state", state)
    slots, buf = state.shape[0], ring_capacity(T, history_len)
    if initial_state_indices is not None:
        check_vector("initial_state_indices", initial_state_indices, Bsz, INDEX_DTYPES, q.device)
    elif slots < Bsz:
        raise ValueError(f"state has {slots} slots but the batch has {Bsz} rows and no initial_state_indices")
    check_tensor("d_ring", d_ring, (slots, HV, buf, V), RING_DTYPES, q.device)
    check_tensor("k_ring", k_ring, (slots, H, buf, K), RING_DTYPES, q.device)
    check_tensor("g_ring", g_ring, (slots, HV, buf), (torch.float32,), q.device)
    for name, t in (("d_ring", d_ring), ("k_ring", k_ring), ("g_ring", g_ring)):
        check_slot_major(name, t)
    _check_cursors(write_pos, origin, is_flush, slots, q.device)
    if Bsz == 0:
        return out
    plan = gdn_spec_plan(Bsz)
    cfg = config or plan.config
    block_v, block_k = min(cfg.block_p, triton.next_power_of_2(V)), triton.next_power_of_2(K)
    use_dot = min(block_v, block_k) >= 16
    # The kernels' arguments in groups (each launch takes the groups its kernel reads).
    slot_idx = initial_state_indices if initial_state_indices is not None else write_pos
    state_strides = state.stride()[:3]
    d_ring_strides = d_ring.stride()[:3]
    ring_strides = (*d_ring_strides, *k_ring.stride()[:3], *g_ring.stride()[:2])
    qk_strides = (*q.stride()[:3], *k.stride()[:3])
    v_strides, ab_strides, out_strides = v.stride()[:3], (*a.stride()[:3], *b.stride()[:3]), out.stride()[:3]
    gate_scalars = (step.scale, step.softplus_beta, step.softplus_threshold)
    args = (state, d_ring, k_ring, g_ring, write_pos, origin, is_flush, q, k, v, a, b, A_log, dt_bias, out, slot_idx,
            slots, T, K, V, HV // H, capacity, pad_slot_id, *state_strides, *ring_strides, *qk_strides, *v_strides,
            *ab_strides, *out_strides, *gate_scalars)
    shared = dict(USE_QK_L2NORM=step.use_qk_l2norm, HAS_SLOT_IDX=initial_state_indices is not None,
                  BLOCK_K=block_k, BUF=buf, BLOCK_L=history_tile(history_len), DOT_PRECISION=DOT_PRECISION,
                  ONE_PASS_PRECISION=ONE_PASS_PRECISION)

    def launch_chunked(phase, rows: int, num_warps: int) -> None:
        rows = min(rows, triton.next_power_of_2(V))
        launch_kernel(_gdn_spec_verify_kernel, (triton.cdiv(V, rows), HV, Bsz), *args, PHASE=phase.value,
                      BLOCK_V=rows, BLOCK_T=max(2, triton.next_power_of_2(T)), USE_DOT=min(rows, block_k) >= 16,
                      EXACT_B=exact_in_tf32(k_ring.dtype), K_CHUNK=fma_key_chunk(block_k),
                      EVEN_TILE=even_tile(V, rows, K, block_k), num_warps=num_warps, **shared)

    check_split_fold(cfg, supported=(0, 1, 2, STATE_APART))
    if use_dot and VERIFY_ON_DOT:
        state_apart = cfg.split_fold == STATE_APART
        caps = plan.register_caps
        solve_numel = Bsz * HV * (2 * MAX_T) ** 2
        ws = (spec_workspace(workspace, gdn_spec_workspace_numel(Bsz, T, HV, V), q.device) if SOLVE_APART or state_apart
              else out)  # (a placeholder for a verify that solves in place)
        solve, bias = ws[:solve_numel], ws[solve_numel:]
        exact_x = exact_in_tf32(q.dtype) and exact_in_tf32(k.dtype)
        pdl = state_apart and programmatic_launch(q.device, Bsz * HV)

        def launch_state_product():
            rows = min(GDN_STATE_PRODUCT_ROWS, triton.next_power_of_2(V))
            chunk = min(GDN_STATE_PRODUCT_COLS, block_k)
            launch_kernel(_gdn_spec_state_product_kernel, (triton.cdiv(V, rows), HV, Bsz), state, d_ring,
                          write_pos, origin, is_flush, q, k, out, slot_idx, solve, bias, slots, K, V, HV, HV // H,
                          capacity, pad_slot_id, *state_strides, *d_ring_strides, *qk_strides, *out_strides,
                          HAS_SLOT_IDX=initial_state_indices is not None, BLOCK_V=rows, BLOCK_K=block_k,
                          KEY_CHUNK=chunk, BUF=buf, EXACT_X=exact_x, DOT_PRECISION=DOT_PRECISION,
                          ONE_PASS_PRECISION=ONE_PASS_PRECISION, NUM_TOKENS=T,
                          SMALL_PRECISION=GDN_STATE_PRODUCT_PRECISION, EVEN_TILE=even_tile(V, rows, K, chunk),
                          STAGES=GDN_STATE_PRODUCT_STAGES, WAIT_RING_PART=pdl, num_warps=GDN_STATE_PRODUCT_WARPS,
                          **maxnreg_option(caps and GDN_STATE_PRODUCT_MAXNREG), **({"launch_pdl": True} if pdl else {}))

        if state_apart:
            # The solve and the ring's part, then the flush rows' whole step, then the
            # other rows' state product (under programmatic dependent launch, the state
            # product first: it streams the state while the ring part's programs finish).
            ring_rows = min(GDN_RING_PART_ROWS, triton.next_power_of_2(V))
            ring_heads = math.gcd(GDN_RING_PART_HEADS, HV // H)
            launch_kernel(_gdn_spec_ring_part_kernel, (1, HV // ring_heads, Bsz), d_ring, k_ring, g_ring, write_pos,
                          origin, is_flush, q, k, v, a, b, A_log, dt_bias, slot_idx, solve, bias, slots, K, V, HV,
                          HV // H, capacity, pad_slot_id, *ring_strides, *qk_strides, *v_strides, *ab_strides,
                          *gate_scalars,
                          BLOCK_V=ring_rows, V_BLOCKS=triton.cdiv(V, ring_rows), EXACT_X=exact_x, NUM_TOKENS=T,
                          SMALL_PRECISION=GDN_RING_PART_PRECISION, EVEN_TILE=block_k == K,
                          HEADS_PER_PROG=ring_heads, KEY_CHUNK=min(GDN_RING_PART_COLS, block_k),
                          LAUNCH_DEPENDENTS=pdl, num_warps=GDN_RING_PART_WARPS, **shared,
                          **maxnreg_option(caps and GDN_RING_PART_MAXNREG))
            if pdl:
                launch_state_product()
        elif SOLVE_APART:
            launch_kernel(_gdn_spec_solve_kernel, (1, HV, Bsz), q, k, a, b, A_log, dt_bias, solve, write_pos, origin,
                          is_flush, slot_idx, slots, K, HV, HV // H, capacity, pad_slot_id, *qk_strides, *ab_strides,
                          *gate_scalars,
                          USE_QK_L2NORM=step.use_qk_l2norm, HAS_SLOT_IDX=initial_state_indices is not None,
                          BLOCK_K=block_k, BUF=buf, EXACT_X=exact_x, DOT_PRECISION=DOT_PRECISION,
                          ONE_PASS_PRECISION=ONE_PASS_PRECISION, NUM_TOKENS=T, SMALL_PRECISION=SMALL_DOT_PRECISION,
                          EVEN_TILE=block_k == K, BLOCK_V=triton.next_power_of_2(V), num_warps=SOLVE_WARPS)
        if state_apart:
            row_launches = (FLUSH_ROWS,)
        elif cfg.split_fold == 2:
            # The flush rows fold and verify in a launch of their own (their state read
            # once), the other rows in one compiled without the fold.
            row_launches = (FLUSH_ROWS, NONFLUSH_ROWS)
        else:
            # The flush rows fold first (the chunked kernel's fold-only phase, on a launch
            # config of its own); the verify on tl.dot then reads their new checkpoint with
            # an empty history.
            launch_chunked(FOLD_ONLY, GDN_SPEC_FOLD_CONFIG.block_p, GDN_SPEC_FOLD_CONFIG.num_warps)
            row_launches = (AFTER_FOLD,)
        for phase in row_launches:
            hpp = dot_heads_per_program(cfg, HV // H, phase)
            launch_kernel(_gdn_spec_verify_dot_kernel, (triton.cdiv(V, block_v), HV // hpp, Bsz), *args,
                          BLOCK_V=block_v, EXACT_X=exact_x, solve_ptr=solve, num_v_heads=HV,
                          HEADS_PER_PROG=hpp, KEY_CHUNK=min(cfg.key_chunk or block_k, block_k), NUM_TOKENS=T,
                          SMALL_PRECISION=SMALL_DOT_PRECISION, EVEN_TILE=even_tile(V, block_v, K, block_k),
                          PHASE=phase.value, SOLVE_APART=SOLVE_APART or state_apart, num_warps=cfg.num_warps,
                          **shared, **maxnreg_option(state_apart and caps and GDN_FLUSH_ROWS_MAXNREG))
        if state_apart and not pdl:
            launch_state_product()
    else:  # (split_fold 2 and 3 fold apart here, as 1 does: their flush rows' launch is the tl.dot verify's)
        for phase in ((FOLD_ONLY, AFTER_FOLD) if cfg.split_fold else (BOTH,)):
            launch_chunked(phase, cfg.block_p, cfg.num_warps)
    return out
