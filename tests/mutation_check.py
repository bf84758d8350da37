"""Mutation check: do the tests fail when a guard, formula or routing rule is wrong?

Each mutant below changes one expression of the package (a bound, an index, a weight, an
append, a routing condition of the engine glue). For each, this script applies it in place,
runs the tests it names, restores the file and reports whether the tests caught it. A
mutant the tests pass is a gap in them (or an equivalent change: then drop it, saying why).
It takes 5-80 s a mutant in the interpreter (about 45 minutes for all on 2 cores), so it is
run by hand when tests or guarded code change, not by CI:

    TRITON_INTERPRET=1 python tests/mutation_check.py [--only NAME ...] [--list]

A mutant whose text is no longer in its file is reported as stale: update it with the code.
It refuses to touch a file with uncommitted changes, so ``git checkout`` restores any file
a killed run leaves mutated.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

REPO = Path(__file__).resolve().parents[1]
OPS, INTEGRATION = "trtllm_replayssm/ops", "trtllm_replayssm/integration"


@dataclass(frozen=True)
class Mutant:
    name: str
    path: str  # relative to the repository
    old: str
    new: str
    tests: Tuple[str, ...]
    nth: Optional[int] = None  # the occurrence of ``old`` to change (None: it must be unique)


CURSORS = ("tests/ops/test_cursors.py",)
GDN = ("tests/ops/test_gdn.py",)
MAMBA2 = ("tests/ops/test_mamba2_replay.py", "tests/ops/test_fold.py")
MAMBA2_SPEC, GDN_SPEC = ("tests/ops/test_mamba2_spec.py",), ("tests/ops/test_gdn_spec.py",)
SPEC = MAMBA2_SPEC + GDN_SPEC
LIFECYCLE = ("tests/integration/test_lifecycle.py",)
VALIDATION = ("tests/ops/test_mamba2_bad_input.py", "tests/ops/test_gdn.py", "tests/ops/test_slot_strided_pools.py")
ERA_MAIN = ("tests/integration/test_era_main.py",)
TORCH_FOLD = ("tests/ops/test_fold.py", "tests/integration/test_lifecycle.py")
LAUNCH = ("tests/ops/test_launch.py",)
HOOKS = ("tests/integration/test_hooks.py", "tests/integration/test_era_main.py")
# The C launcher's argument checks, as the CPU sees them (the library is rebuilt with the mutant).
C_LAUNCHER = "plugins/replayssm_kernels/replayssm_kernels.c"
C_ABI = tuple(f"tests/aot/test_aot_build.py::test_c_abi_{t}" for t in (
    "rejects_bad_calls_with_codes", "gdn_checks", "cursor_checks", "speculative_ops_check_their_arguments"))
ROW_RANGE = "rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)"

MUTANTS = (
    # Slot and cursor guards: a bad one lets a row read and write outside its slot or ring.
    Mutant("gdn_replay_cursor_upper", f"{OPS}/gdn/replay.py", "if (w < 0) | (w >= buffer_len):",
           "if (w < 0) | (w > buffer_len):", CURSORS),
    Mutant("gdn_replay_cursor_lower", f"{OPS}/gdn/replay.py", "if (w < 0) | (w >= buffer_len):",
           "if (w >= buffer_len):", CURSORS),
    Mutant("mamba2_replay_cursor_upper", f"{OPS}/mamba2/replay.py", "if (w < 0) | (w >= buffer_len):",
           "if (w < 0) | (w > buffer_len):", CURSORS),
    Mutant("standard_cursor_upper", f"{OPS}/common.py", "bad = (w < 0) | (w >= buffer_len)",
           "bad = (w < 0) | (w > buffer_len)", CURSORS),
    Mutant("standard_cursor_lower", f"{OPS}/common.py", "bad = (w < 0) | (w >= buffer_len)",
           "bad = (w >= buffer_len)", CURSORS),
    Mutant("row_cursor_upper", f"{OPS}/common.py", "valid = valid & (w >= 0) & (w < buffer_len)",
           "valid = valid & (w >= 0) & (w <= buffer_len)", CURSORS),
    Mutant("row_cursor_lower", f"{OPS}/common.py", "valid = valid & (w >= 0) & (w < buffer_len)",
           "valid = valid & (w < buffer_len)", CURSORS),
    Mutant("slot_upper", f"{OPS}/common.py", "(slot >= num_slots))", "(slot > num_slots))", CURSORS),
    Mutant("slot_lower", f"{OPS}/common.py", "is_bad = (not is_pad) & ((slot < 0) | (slot >= num_slots))",
           "is_bad = (not is_pad) & ((slot >= num_slots))", CURSORS),
    Mutant("row_slot_upper", f"{OPS}/common.py", "(slot >= 0) & (slot < num_slots)",
           "(slot >= 0) & (slot <= num_slots)", CURSORS, nth=0),
    Mutant("row_slot_lower", f"{OPS}/common.py", "(slot >= 0) & (slot < num_slots)", "(slot < num_slots)",
           CURSORS, nth=0),
    Mutant("standard_store_ignores_bad_cursor", f"{OPS}/gdn/standard.py", "mask=mask_vk & ~bad_cursor)",
           "mask=mask_vk)", GDN),
    # Cursor ops.
    Mutant("advance_flush_all_skips_0", f"{OPS}/cursors.py", "flush = w >= 0", "flush = w > 0", CURSORS),
    Mutant("advance_one_program", f"{OPS}/cursors.py", ROW_RANGE, "rows = tl.arange(0, BLOCK)", CURSORS, nth=0),
    Mutant("reset_one_program", f"{OPS}/cursors.py", ROW_RANGE, "rows = tl.arange(0, BLOCK)", CURSORS, nth=1),
    # GDN replay: ring weights, appends, flush selection, the fold.
    Mutant("gdn_decay_exclusive", f"{OPS}/gdn/replay.py", "tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0), 0.0))",
           "tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0) + g_hist, 0.0))", GDN),
    Mutant("gdn_nonflush_d_without_alpha", f"{OPS}/gdn/replay.py", "d = beta * (v - alpha * Sk)",
           "d = beta * (v - Sk)", GDN),
    Mutant("gdn_fma_fold_weight_order", f"{OPS}/gdn/replay.py",
           "seen += tl.load(gc_base + j, mask=m, other=0.0)\n"
           "                                    coef = tl.exp(tl.minimum(G - seen, 0.0))",
           "coef = tl.exp(tl.minimum(G - seen, 0.0))\n"
           "                                    seen += tl.load(gc_base + j, mask=m, other=0.0)", GDN),
    Mutant("gdn_dot_fold_without_decay", f"{OPS}/gdn/replay.py", "S += tl.dot(D_hist * decay[None, :], K_hist",
           "S += tl.dot(D_hist, K_hist", GDN),
    Mutant("gdn_flush_position", f"{OPS}/gdn/replay.py", "is_flush = w == buffer_len - 1",
           "is_flush = w == buffer_len - 2", GDN),
    Mutant("gdn_force_flush_ignored", f"{OPS}/gdn/replay.py",
           "is_flush = is_flush | (tl.load(force_flush_ptr + pid_b) != 0)", "is_flush = is_flush", GDN),
    Mutant("gdn_g_append", f"{OPS}/gdn/replay.py", "tl.store(gc_base + w, g)", "tl.store(gc_base + w, g * 0.999)",
           GDN),
    Mutant("gdn_prefetch_stops_early", f"{OPS}/gdn/replay.py", "c + 1 < CHUNKS, EVEN_TILE, V_INNER)",
           "c + 1 < CHUNKS - 1, EVEN_TILE, V_INNER)", GDN),
    Mutant("gdn_drain_decay_order", f"{OPS}/gdn/standard.py",
           "S = S * tl.exp(tl.load(gc_base + j)) + d_j[:, None] * k_j[None, :]",
           "S = (S + d_j[:, None] * k_j[None, :]) * tl.exp(tl.load(gc_base + j))", GDN),
    Mutant("gdn_l2norm_eps", f"{OPS}/gdn/_common.py", "k = k * tl.rsqrt(tl.sum(k * k, axis=0) + 1e-6)",
           "k = k * tl.rsqrt(tl.sum(k * k, axis=0) + 1e-2)", GDN),
    # Mamba2 replay: both non-flush paths (row blocks, then the main one) and the fold.
    *(Mutant(f"mamba2_{path}_{what}", f"{OPS}/mamba2/replay.py", old, new, MAMBA2, nth=nth)
      for nth, path in enumerate(("row_blocks", "main"))
      for what, old, new in (
          ("coef_exclusive", "A * (total - tl.cumsum(dt_ring, axis=0))",
           "A * (total - tl.cumsum(dt_ring, axis=0) + dt_ring)"),
          ("decay_without_dt", "decay0 = tl.exp(tl.minimum(A * total, 0.0))",
           "decay0 = tl.exp(tl.minimum(A * (total - dt), 0.0))"),
          ("dt_append", "tl.store(dtc_base + w, dt)", "tl.store(dtc_base + w, dt * 0.999)"))),
    Mutant("mamba2_fold_weight_exclusive", f"{OPS}/mamba2/replay_fold.py", "after = total - tl.cumsum(dt_ring, axis=0)",
           "after = total - tl.cumsum(dt_ring, axis=0) + dt_ring", MAMBA2),
    Mutant("mamba2_ring_entry_weight", f"{OPS}/mamba2/replay.py",
           "coef_j = dt_j * tl.exp(tl.minimum(A * (total - seen), 0.0))",
           "coef_j = dt_j * tl.exp(tl.minimum(A * (total - seen + dt_j), 0.0))", MAMBA2),
    # The engine's exact state outside a step (make_exact): the rings folded in PyTorch.
    Mutant("torch_fold_takes_entry_at_cursor", f"{OPS}/fold.py", "[None, :] < write_pos[slots].long()[:, None]",
           "[None, :] <= write_pos[slots].long()[:, None]", TORCH_FOLD),
    Mutant("torch_fold_mamba2_weight_inclusive", f"{OPS}/fold.py", "after = dt.sum(-1, keepdim=True) - dt.cumsum(-1)",
           "after = dt.sum(-1, keepdim=True) - dt.cumsum(-1) + dt", TORCH_FOLD),
    Mutant("torch_fold_mamba2_groups_cycled", f"{OPS}/fold.py",
           "B_cache[slots].float().repeat_interleave(H // B_cache.shape[1], dim=1)",
           "B_cache[slots].float().repeat(1, H // B_cache.shape[1], 1, 1)", TORCH_FOLD),
    Mutant("torch_fold_gdn_stale_entries", f"{OPS}/fold.py", "g.cumsum(-1)) * m[:, None, :]", "g.cumsum(-1))",
           TORCH_FOLD),
    Mutant("torch_fold_gdn_key_heads_cycled", f"{OPS}/fold.py",
           "k_cache[slots].float().repeat_interleave(HV // k_cache.shape[1], dim=1)",
           "k_cache[slots].float().repeat(1, HV // k_cache.shape[1], 1, 1)", TORCH_FOLD),
    # Which B group a Mamba2 head reads.
    *(Mutant(f"mamba2_{name}_first_group", f"{OPS}/mamba2/{module}", old, "g = 0", tests, nth=nth)
      for name, module, old, nth, tests in (
          ("replay_row_blocks", "replay.py", "g = pid_h // heads_per_group", 0, MAMBA2),
          ("replay_main", "replay.py", "g = pid_h // heads_per_group", 1, MAMBA2),
          ("fold", "replay_fold.py", "g = pid_h // heads_per_group", None, MAMBA2),
          ("standard", "standard.py", "g = pid_h // heads_per_group", None, ("tests/ops/test_mamba2_standard.py",)),
          ("verify", "spec.py", "g = h0 // heads_per_group", None, MAMBA2_SPEC),
          ("verify_state_product", "spec.py", "g = pid_h // heads_per_group", None, MAMBA2_SPEC))),
    # Speculative verify: cursor ranges, commit and reset.
    Mutant("spec_drafts_past_capacity", f"{OPS}/common.py", "(wp + num_tokens > capacity)",
           "(wp + num_tokens > capacity + 1)", SPEC),
    Mutant("spec_origin_upper", f"{OPS}/common.py", "(origin >= BUF)", "(origin > BUF)", SPEC),
    Mutant("spec_write_pos_lower", f"{OPS}/common.py", "return (wp < 0) | (wp + num_tokens",
           "return (wp + num_tokens", SPEC),
    Mutant("spec_origin_lower", f"{OPS}/common.py", "| (origin < 0) | (origin >= BUF)", "| (origin >= BUF)", SPEC),
    Mutant("commit_accepted_upper", f"{OPS}/mamba2/spec.py", "(c <= num_tokens)", "(c <= num_tokens + 1)", SPEC),
    Mutant("commit_accepted_zero", f"{OPS}/mamba2/spec.py", "valid & (c > 0) &", "valid & (c >= 0) &", SPEC),
    Mutant("commit_flush_threshold", f"{OPS}/mamba2/spec.py", "(new_wp + 2 * num_tokens > capacity)",
           "(new_wp + 2 * num_tokens >= capacity)", SPEC),
    Mutant("reset_flush_threshold", f"{OPS}/mamba2/spec.py", "(zero + 2 * num_tokens > capacity)",
           "(zero + 2 * num_tokens >= capacity)", SPEC),
    Mutant("commit_one_program", f"{OPS}/mamba2/spec.py", ROW_RANGE, "rows = tl.arange(0, BLOCK)", SPEC, nth=0),
    # GDN verify: the drafts' gates and solve, the history's weights, the fold, the appends
    # (spec_dot.py: every tl.dot path; spec_state_apart.py: split_fold 3; spec_chunked.py:
    # the FMA kernel).
    Mutant("gdn_spec_decay_exclusive", f"{OPS}/gdn/spec_dot.py",
           "is_key[None, :] & (offs_u[None, :] <= tok[:, None]), g_u[None, :]",
           "is_key[None, :] & (offs_u[None, :] < tok[:, None]), g_u[None, :]", GDN_SPEC),
    Mutant("gdn_spec_solve_takes_diagonal", f"{OPS}/gdn/spec_dot.py", "key_block & (offs_u[None, :] < offs_u[:, None])",
           "key_block & (offs_u[None, :] <= offs_u[:, None])", GDN_SPEC),
    Mutant("gdn_spec_query_skips_own_draft", f"{OPS}/gdn/spec_dot.py",
           "is_key[None, :] & (offs_u[None, :] <= tok[:, None]) & mask_u[None, :]",
           "is_key[None, :] & (offs_u[None, :] < tok[:, None]) & mask_u[None, :]", GDN_SPEC),
    Mutant("gdn_spec_solve_short_series", f"{OPS}/gdn/spec_dot.py", "if NUM_TOKENS > 4:", "if NUM_TOKENS > 8:",
           GDN_SPEC),
    Mutant("gdn_spec_history_decay_exclusive", f"{OPS}/gdn/spec_dot.py",
           "tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0), 0.0))",
           "tl.exp(tl.minimum(G - tl.cumsum(g_hist, axis=0) + g_hist, 0.0))", GDN_SPEC),
    Mutant("gdn_spec_fold_without_decay", f"{OPS}/gdn/spec_dot.py", "S_h = tl.exp(G) * S0 +", "S_h = S0 +", GDN_SPEC),
    Mutant("gdn_spec_dot_residual_without_decay", f"{OPS}/gdn/spec_dot.py", "(Vd - tl.exp(A_u)[None, :] * SX)",
           "(Vd - SX)", GDN_SPEC),
    Mutant("gdn_spec_dot_keys_unnormalised", f"{OPS}/gdn/spec_dot.py",
           "(Xf * col_scale[None, :]).to(k_ring_ptr.dtype.element_ty)", "Xf.to(k_ring_ptr.dtype.element_ty)",
           GDN_SPEC),
    Mutant("gdn_spec_ring_part_without_history_decay", f"{OPS}/gdn/spec_state_apart.py",
           "(decay_A * tl.exp(G) * col_scale)", "(decay_A * col_scale)", GDN_SPEC),
    Mutant("gdn_spec_ring_part_residual_without_decay", f"{OPS}/gdn/spec_state_apart.py",
           "(Vd - decay_A[None, :] * Hs)", "(Vd - Hs)", GDN_SPEC),
    *(Mutant(f"gdn_spec_{launch}_append_position", f"{OPS}/gdn/spec_state_apart.py",
             "phys_u = (origin + wp + tok) & (BUF - 1)", "phys_u = (origin + wp + tok + 1) & (BUF - 1)", GDN_SPEC,
             nth=nth) for nth, launch in enumerate(("ring_part", "state_product"))),
    Mutant("gdn_spec_chunked_solve_without_beta", f"{OPS}/gdn/spec_chunked.py",
           "M = tl.where(lower, beta[:, None] * tl.exp(", "M = tl.where(lower, tl.exp(", GDN_SPEC),
    Mutant("gdn_spec_chunked_query_skips_own_draft", f"{OPS}/gdn/spec_chunked.py",
           "W = tl.where(offs_t[None, :] <= offs_t[:, None]", "W = tl.where(offs_t[None, :] < offs_t[:, None]",
           GDN_SPEC),
    Mutant("gdn_spec_chunked_query_without_scale", f"{OPS}/gdn/spec_chunked.py", "inv_q = inv_q * tl.rsqrt(",
           "inv_q = tl.rsqrt(", GDN_SPEC),
    Mutant("gdn_spec_chunked_decay_exclusive", f"{OPS}/gdn/spec_chunked.py", "A_t = tl.cumsum(g_dr, axis=0)",
           "A_t = tl.cumsum(g_dr, axis=0) - g_dr", GDN_SPEC),
    Mutant("gdn_spec_chunked_keys_unnormalised", f"{OPS}/gdn/spec_chunked.py", "(Kc * inv_k[:, None]).to(",
           "Kc.to(", GDN_SPEC),
    # Which key head a value head reads (one key head would hide it).
    *(Mutant(f"gdn_spec_{name}_first_key_head", f"{OPS}/gdn/{module}", old, "h = 0", GDN_SPEC)
      for name, module, old in (("dot", "spec_dot.py", "h = hv0 // v_heads_per_k_head"),
                                ("chunked", "spec_chunked.py", "h = hv // v_heads_per_k_head"),
                                ("ring_part", "spec_state_apart.py", "h = hv0 // v_heads_per_k_head"),
                                ("state_product", "spec_state_apart.py", "h = hv // v_heads_per_k_head"))),
    # Mamba2 verify.
    Mutant("mamba2_spec_skips_own_token", f"{OPS}/mamba2/spec.py", "causal = offs_t[:, None] <= offs_t[None, :]",
           "causal = offs_t[:, None] < offs_t[None, :]", MAMBA2_SPEC),
    Mutant("mamba2_spec_history_coef_exclusive", f"{OPS}/mamba2/spec.py", "A * (H - tl.cumsum(dt_hist, axis=0))",
           "A * (H - tl.cumsum(dt_hist, axis=0) + dt_hist)", MAMBA2_SPEC),
    Mutant("mamba2_spec_fold_without_decay", f"{OPS}/mamba2/spec.py",
           "S0 = S0 * tl.exp(tl.minimum(A * H, 0.0)) + small_matmul(", "S0 = S0 + small_matmul(", MAMBA2_SPEC),
    Mutant("mamba2_spec_state_decay_without_history", f"{OPS}/mamba2/spec.py",
           "state_decay = tl.exp(tl.minimum(A * (H + D_cum), 0.0))",
           "state_decay = tl.exp(tl.minimum(A * D_cum, 0.0))", MAMBA2_SPEC),
    Mutant("mamba2_spec_draft_decay_reversed", f"{OPS}/mamba2/spec.py", "A * (D_cum[None, :] - D_cum[:, None])",
           "A * (D_cum[:, None] - D_cum[None, :])", MAMBA2_SPEC),
    Mutant("mamba2_spec_dt_append", f"{OPS}/mamba2/spec.py", "tl.store(dtr_base + phys_t, dt_dr, mask=mask_t)",
           "tl.store(dtr_base + phys_t, dt_dr * 0.999, mask=mask_t)", MAMBA2_SPEC),
    Mutant("mamba2_spec_state_product_without_decay", f"{OPS}/mamba2/spec.py",
           "store_gated_output(Y * decay[None, :] + part", "store_gated_output(Y + part", MAMBA2_SPEC),
    # Argument checks: a layout the kernels would misread must raise.
    Mutant("vector_stride_unchecked", "trtllm_replayssm/_validation.py", "if t.shape[0] > 1 and t.stride(0) != 1:",
           "if t.shape[0] > 1 and t.stride(0) < 1:", VALIDATION),
    Mutant("last_dim_stride_unchecked", "trtllm_replayssm/_validation.py", "if t.shape[-1] > 1 and t.stride(-1) != 1:",
           "if t.shape[-1] > 1 and t.stride(-1) < 1:", VALIDATION),
    Mutant("slot_block_gaps_allowed", "trtllm_replayssm/_validation.py", "if size != 1 and stride != packed:",
           "if size != 1 and stride < packed:", VALIDATION),
    Mutant("slots_may_overlap", "trtllm_replayssm/_validation.py", "t.shape[0] <= 1 or t.stride(0) >= packed",
           "t.shape[0] <= 1 or t.stride(0) >= 1", VALIDATION),
    Mutant("broadcast_dims_unchecked", "trtllm_replayssm/_validation.py", "if t.shape[d] > 1 and t.stride(d) != 0:",
           "if t.shape[d] > 1 and t.stride(d) < 0:", VALIDATION),
    Mutant("buffer_len_past_max", "trtllm_replayssm/_validation.py", "if not 1 <= buffer_len <= max_len:",
           "if not 1 <= buffer_len <= max_len + 1:", VALIDATION + ("tests/test_cache.py",)),
    # The dispatcher: which measured row, which route's config; the cursors after a flush route.
    Mutant("dispatch_linear_distance", f"{OPS}/launch.py", "abs(math.log2(p) - math.log2(max(batch, 1)))",
           "abs(p - batch)", LAUNCH),
    Mutant("dispatch_ignores_heads", f"{OPS}/launch.py", "size, of = batch * nheads,", "size, of = batch,", LAUNCH),
    Mutant("dispatch_nearest_batch_at_work", f"{OPS}/launch.py",
           "return next(r for r in at_point if r[\"batch\"] == nearest)", "return at_point[-1]", LAUNCH),
    Mutant("standard_step_takes_its_own_config", f"{OPS}/launch.py",
           'return "standard" if route == "standard_step" else route', "return route", LAUNCH),
    Mutant("flush_route_keeps_cursors", "trtllm_replayssm/cache.py", "flush_all=route in FLUSH_EVERY_STEP",
           "flush_all=False", LIFECYCLE + ("tests/test_cache.py",)),
    # The engine glue: slot lifecycle, the hooks' call routing, the memory estimate.
    Mutant("lifecycle_auto_keeps_standard_step", f"{INTEGRATION}/lifecycle.py",
           'self._step_route = "always_flush" if route == "standard_step" else route', "self._step_route = route",
           LIFECYCLE),
    Mutant("lifecycle_make_exact_folds_padding", f"{INTEGRATION}/lifecycle.py",
           "slots = slots[slots != self.pad_slot_id]", "slots = slots", LIFECYCLE),
    Mutant("lifecycle_restore_reads_one_column", f"{INTEGRATION}/lifecycle.py",
           "cursor[idx] = self.cursor_mirror[idx, column]", "cursor[idx] = self.cursor_mirror[idx, 0]", LIFECYCLE),
    Mutant("hooks_step_ends_on_first_layer", f"{INTEGRATION}/hooks.py", "i == len(layers) - 1", "i == 0", HOOKS),
    Mutant("hooks_gdn_takes_multi_token_packed", f"{INTEGRATION}/hooks.py",
           "== q.shape[1] + 1 == initial_state_indices.shape[0] + 1", "== q.shape[1] + 1", HOOKS),
    Mutant("hooks_mamba2_takes_intermediate_states", f"{INTEGRATION}/hooks.py",
           "or disable_state_update or intermediate_states_buffer is not None", "or disable_state_update", HOOKS),
    Mutant("era_main_pages_unaligned", f"{INTEGRATION}/era_main.py",
           "return -(-block_bytes(block, dtype) // PAGE_ALIGN) * PAGE_ALIGN", "return block_bytes(block, dtype)",
           ERA_MAIN),
    Mutant("era_main_verify_without_bonus", f"{INTEGRATION}/era_main.py", "T = draft + 1", "T = draft", ERA_MAIN),
    Mutant("era_main_budget_below_tokens", f"{INTEGRATION}/era_main.py", "or not T <= opts.buffer_len:",
           "or not T <= opts.buffer_len + 1:", ERA_MAIN),
    Mutant("era_main_takes_draft_trees", f"{INTEGRATION}/era_main.py", "or total != draft or", "or", ERA_MAIN),
    Mutant("era_main_gdn_order_ignored", f"{INTEGRATION}/era_main.py",
           'V, K = (b, c) if gdn_order == "HV,V,K" else (c, b)', "V, K = (b, c)", ERA_MAIN),
    Mutant("memory_spec_cursor_bytes", f"{INTEGRATION}/memory.py", "more = 4 + 1", "more = 4",
           ("tests/integration/test_memory.py",)),
    # The C launcher: what it refuses before it launches anything.
    Mutant("c_mamba2_ring_len_upper", C_LAUNCHER, "(a->buffer_len < 1 || a->buffer_len > 64)",
           "(a->buffer_len < 1 || a->buffer_len > 65)", C_ABI, nth=0),
    Mutant("c_mamba2_ring_len_lower", C_LAUNCHER, "(a->buffer_len < 1 || a->buffer_len > 64)",
           "(a->buffer_len > 64)", C_ABI, nth=0),
    Mutant("c_gdn_ring_len_upper", C_LAUNCHER, "(a->buffer_len < 1 || a->buffer_len > 64)",
           "(a->buffer_len < 1 || a->buffer_len > 65)", C_ABI, nth=1),
    Mutant("c_mamba2_cursor_pointer", C_LAUNCHER, "!a->B_cache || !a->write_pos))", "!a->B_cache))", C_ABI),
    Mutant("c_mamba2_standard_takes_rings", C_LAUNCHER, "if (!standard && (!a->x_cache", "if ((!a->x_cache", C_ABI),
    Mutant("c_gdn_ring_pointer", C_LAUNCHER, "!a->g_cache || !a->write_pos))", "!a->write_pos))", C_ABI),
    Mutant("c_gdn_standard_takes_rings", C_LAUNCHER, "if (!standard && (!a->d_cache", "if ((!a->d_cache", C_ABI),
    Mutant("c_gdn_ring_dtype", C_LAUNCHER, "if (!sd || !ad || !rd || !route)", "if (!sd || !ad || !route)", C_ABI),
    Mutant("c_mamba2_groups_divide", C_LAUNCHER, "a->ngroups < 1 ||\n      a->nheads % a->ngroups != 0)",
           "a->ngroups < 1)", C_ABI),
    Mutant("c_gdn_heads_divide", C_LAUNCHER, "a->num_v_heads % a->num_k_heads != 0 ||", "", C_ABI, nth=0),
    Mutant("c_gdn_state_rows_packed", C_LAUNCHER, "a->stride_state[2] != a->head_k_dim ||", "", C_ABI),
    Mutant("c_gdn_state_heads_packed", C_LAUNCHER, "a->stride_state[1] != a->head_v_dim * a->head_k_dim ||", "",
           C_ABI),
    Mutant("c_gdn_state_slots_overlap", C_LAUNCHER,
           "a->stride_state[0] < a->num_v_heads * a->head_v_dim * a->head_k_dim)",
           "a->stride_state[0] < a->head_v_dim * a->head_k_dim)", C_ABI),
    Mutant("c_gdn_state_slots_touch", C_LAUNCHER,
           "a->stride_state[0] < a->num_v_heads * a->head_v_dim * a->head_k_dim)",
           "a->stride_state[0] != a->num_v_heads * a->head_v_dim * a->head_k_dim)", C_ABI),
    Mutant("c_advance_ring_len_upper", C_LAUNCHER, "buffer_len < 1 || buffer_len > 64)",
           "buffer_len < 1 || buffer_len > 65)", C_ABI),
    Mutant("c_advance_without_slots", C_LAUNCHER, "if (num_slots < 1 || batch < 0 || buffer_len",
           "if (batch < 0 || buffer_len", C_ABI),
    Mutant("c_spec_tokens_upper", C_LAUNCHER, "if (T < 1 || T > 8)", "if (T < 1 || T > 9)", C_ABI),
    Mutant("c_spec_history_below_tokens", C_LAUNCHER, "if (history < T || history > 64)", "if (history > 64)",
           C_ABI),
    Mutant("c_spec_history_upper", C_LAUNCHER, "if (history < T || history > 64)",
           "if (history < T || history > 65)", C_ABI),
    Mutant("c_gdn_spec_workspace", C_LAUNCHER, "if (!a->workspace)", "if (0)", C_ABI, nth=1),
    Mutant("c_mamba2_spec_workspace_decay", C_LAUNCHER, "+ 4 * batch * num_tokens * nheads; /* part, decay */",
           "; /* part, decay */", C_ABI),
)


def mutated(src: str, m: Mutant) -> Optional[str]:
    """``src`` with the mutant applied, or None where its text is not (uniquely) there."""
    count = src.count(m.old)
    if m.nth is None:
        return src.replace(m.old, m.new) if count == 1 else None
    if count <= m.nth:
        return None
    at = -1
    for _ in range(m.nth + 1):
        at = src.index(m.old, at + 1)
    return src[:at] + m.new + src[at + len(m.old):]


def stale(mutants) -> list:
    """Names of the ``mutants`` whose text is no longer (uniquely) in their file."""
    return [m.name for m in mutants if mutated((REPO / m.path).read_text(), m) is None]


def run(m: Mutant) -> str:
    """'caught', 'SURVIVED' or 'stale'."""
    path = REPO / m.path
    src = path.read_text()
    changed = mutated(src, m)
    if changed is None:
        return "stale"
    path.write_text(changed)
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-x", "-p", "no:cacheprovider",
                                 *m.tests], cwd=REPO, capture_output=True, text=True,
                                env={**os.environ, "TRITON_INTERPRET": "1"})
    finally:
        path.write_text(src)
    return "caught" if result.returncode != 0 else "SURVIVED"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run these mutants only")
    ap.add_argument("--list", action="store_true", help="list the mutants (and any stale one) and exit")
    args = ap.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.list:
        out_of_date = stale(chosen)
        for m in chosen:
            print(f"{m.name:44s} {m.path}" + ("  (stale)" if m.name in out_of_date else ""))
        return 1 if out_of_date else 0
    dirty = subprocess.run(["git", "diff", "--name-only", "--", *sorted({m.path for m in chosen})], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout.split()
    if dirty:
        sys.exit(f"uncommitted changes in {', '.join(dirty)}: commit or stash them first")
    verdicts = {}
    for m in chosen:
        verdicts[m.name] = run(m)
        print(f"{m.name:44s} {verdicts[m.name]}", flush=True)
    bad = [name for name, v in verdicts.items() if v != "caught"]
    print(f"{len(verdicts) - len(bad)} of {len(verdicts)} caught" + (f"; not: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
