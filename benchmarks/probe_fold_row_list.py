#!/usr/bin/env python3
"""A Mamba2 fold launch that follows a list of the rows that flush, against the package's
fold, with the rows in phase and with staggered cursors (``CycleRig.start_cursors``).

The package's fold programs each look through a block of batch rows (``row_block``) and
fold the ones that flush, over ``heads_per_prog`` heads: a config has to be cheap on the
steps where no row flushes, fill the GPU when every row flushes (rows in phase) and
spread the work when 1/L of them do (staggered), and the tuned ones trade the last two
(``benchmarks/README.md``, "Staggered cursors"). Here a small launch, once a step for all
layers, writes the list of the batch rows that flush at this step and its length; each
layer's fold then runs ``row_progs`` programs for each group of heads, program ``z``
taking list entries ``z, z + row_progs, ...``: on a step where no row flushes every program
reads the length and returns; with every row flushing each takes ``batch / row_progs``
rows; staggered, ``batch / (L row_progs)``. The fold's arithmetic is the package's
(``replay_fold``'s helpers); the non-flush launch is the package's, on the table's config.
The package's fold takes the same share of the rows with ``row_progs`` (each program
scanning the batch's cursors itself, a layer at a time: no list to carry), timed here as
"row share" beside the list. Where the package launches its fold as a programmatic
dependent launch (``FOLD_PDL``: up to 4096 batch rows x heads, e.g. Super at batch 32) the
list fold runs as a plain launch.

    python benchmarks/probe_fold_row_list.py --out benchmarks/results/fold_row_list.json
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
from dataclasses import replace

import torch
import triton
import triton.language as tl

from trtllm_replayssm.benchmarking.mamba2_ar import Mamba2Rig
from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import PHASES, Launch, median_of_rounds
from trtllm_replayssm.ops.common import dim_mask, row_cursors
from trtllm_replayssm.ops.launch import LaunchConfig, device_table_tag, launch_kernel
from trtllm_replayssm.ops.mamba2 import replay as replay_module
from trtllm_replayssm.ops.mamba2.replay_fold import fold_launch_plan, fold_row_heads


@triton.jit
def _flush_list_kernel(slot_idx_ptr, write_pos_ptr, force_flush_ptr, rows_ptr, count_ptr, batch, num_slots,
                       buffer_len, pad_slot_id, HAS_SLOT_IDX: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr,
                       BLOCK: tl.constexpr):
    """One program: the batch rows that flush at this step, in order, and how many."""
    rows = tl.arange(0, BLOCK)
    _, _, valid, flush = row_cursors(slot_idx_ptr, write_pos_ptr, force_flush_ptr, rows, batch, num_slots,
                                     buffer_len, pad_slot_id, HAS_SLOT_IDX, HAS_FORCE_FLUSH)
    selected = (valid & flush).to(tl.int32)
    tl.store(rows_ptr + tl.cumsum(selected, axis=0) - selected, rows, mask=selected != 0)
    tl.store(count_ptr, tl.sum(selected, axis=0))


@triton.jit(do_not_specialize=["num_slots", "batch"])
def _list_fold_kernel(
    state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, force_flush_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, batch, nheads, headdim, dstate, heads_per_group, buffer_len, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p,
    stride_xc_slot, stride_xc_h, stride_xc_l,
    stride_dtc_slot, stride_dtc_h,
    stride_Bc_slot, stride_Bc_g, stride_Bc_l,
    stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
    stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
    stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
    rows_ptr, count_ptr,
    HAS_D: tl.constexpr, HAS_Z: tl.constexpr, HAS_DT_BIAS: tl.constexpr,
    HAS_SLOT_IDX: tl.constexpr, DT_SOFTPLUS: tl.constexpr, HAS_FORCE_FLUSH: tl.constexpr,
    BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_L: tl.constexpr,
    EVEN_ROWS: tl.constexpr, EVEN_COLS: tl.constexpr, EXACT_B: tl.constexpr, DOT_PRECISION: tl.constexpr,
    ONE_PASS_PRECISION: tl.constexpr,
    HEADS_PER_PROG: tl.constexpr, CHUNKS: tl.constexpr, EVEN_HEADS: tl.constexpr, ROW_PROGS: tl.constexpr,
    ROWS_PER_PROG: tl.constexpr, LOOP_STAGES: tl.constexpr = None,
):
    """Programs ``(runs of CHUNKS headdim blocks, groups of HEADS_PER_PROG heads, ROW_PROGS)``;
    program ``z`` of the last axis folds list entries ``z, z + ROW_PROGS, ...`` (a constant
    trip count, ``ROWS_PER_PROG``, with a uniform branch past the list's length: the
    interpreter cannot loop to a loaded bound or to a scalar argument)."""
    pid_p = tl.program_id(0)
    pid_hg = tl.program_id(1)
    n = tl.load(count_ptr)
    offs_p0 = pid_p * (BLOCK_P * CHUNKS) + tl.arange(0, BLOCK_P)
    offs_n = tl.arange(0, BLOCK_N)
    offs_l = tl.arange(0, BLOCK_L)
    mask_n = dim_mask(offs_n, dstate, EVEN_COLS)
    for k in range(0, ROWS_PER_PROG):
        i = tl.program_id(2) + k * ROW_PROGS
        if i < n:
            pid_b = tl.load(rows_ptr + i)
            fold_row_heads(pid_b, pid_hg, offs_p0, offs_n, offs_l, mask_n,
                           state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, slot_idx_ptr,
                           x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr,
                           num_slots, nheads, headdim, heads_per_group, pad_slot_id,
                           stride_state_slot, stride_state_h, stride_state_p, stride_xc_slot, stride_xc_h,
                           stride_xc_l, stride_dtc_slot, stride_dtc_h, stride_Bc_slot, stride_Bc_g, stride_Bc_l,
                           stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
                           stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
                           stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
                           HAS_D, HAS_Z, HAS_DT_BIAS, HAS_SLOT_IDX, DT_SOFTPLUS, BLOCK_P, EVEN_ROWS, EXACT_B,
                           DOT_PRECISION, ONE_PASS_PRECISION, HEADS_PER_PROG, CHUNKS, EVEN_HEADS, LOOP_STAGES)


class RowListFold:
    """The list (``plan``, once a step) and the fold launch that follows it (``launch``:
    ``replay_fold.launch_fold``'s signature, so the replay step can call it in its place)."""

    def __init__(self, batch: int, row_progs: int, device):
        self.rows = torch.zeros(batch, dtype=torch.int32, device=device)
        self.count = torch.zeros(1, dtype=torch.int32, device=device)
        self.row_progs = row_progs

    def plan(self, rig: Mamba2Rig) -> None:
        c = rig.case
        launch_kernel(_flush_list_kernel, (1,), rig.slot_idx, rig.cache.write_pos, rig.cache.write_pos, self.rows,
                      self.count, c.batch, rig.cache.write_pos.shape[0], c.buffer_len, -1, HAS_SLOT_IDX=True,
                      HAS_FORCE_FLUSH=False, BLOCK=max(16, triton.next_power_of_2(c.batch)))

    def launch(self, args: dict, step, cfg: LaunchConfig, block_n: int, block_l: int, pdl: bool = False) -> None:
        programs, constexprs = fold_launch_plan(args, step, cfg, block_n, block_l)
        row_progs = min(self.row_progs, step.batch)
        launch_kernel(_list_fold_kernel, (*programs, row_progs), **args, batch=step.batch, rows_ptr=self.rows,
                      count_ptr=self.count, ROW_PROGS=row_progs, ROWS_PER_PROG=triton.cdiv(step.batch, row_progs),
                      **constexprs)


@contextlib.contextmanager
def folding_by_list(rig: Mamba2Rig, fold: RowListFold):
    """The rig's ``output_only`` steps with ``fold`` in place of the package's fold launch,
    the list written once a step before the layers (the cycle as ``CycleRig.cycle_fn``)."""
    kept_launch, kept_cycle = replay_module.launch_fold, rig.cycle_fn

    def cycle_fn(launch: Launch):
        def run():
            for _ in range(rig.case.buffer_len):
                fold.plan(rig)
                for layer in range(rig.n_layers):
                    rig.layer_step(launch, layer)
                rig.cache.advance(rig.slot_idx, route=launch.kernel)
        return run

    replay_module.launch_fold, rig.cycle_fn = fold.launch, cycle_fn
    try:
        yield
    finally:
        replay_module.launch_fold, rig.cycle_fn = kept_launch, kept_cycle


def time_list_cycle(rig: Mamba2Rig, launch: Launch, row_progs: int, replays: int, staggered: bool) -> float:
    fold = RowListFold(rig.case.batch, row_progs, rig.cache.write_pos.device)
    with folding_by_list(rig, fold):
        return rig.time_cycle_us(launch, replays, staggered)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-super", "nemotron-3-nano-4b"], [32, 128, 512], "fold_row_list.json")
    ap.add_argument("--heads", nargs="+", type=int, default=[1, 2], help="heads_per_prog of the list fold")
    ap.add_argument("--row-progs", nargs="+", type=int, default=[4, 8, 16, 32],
                    help="programs a group of heads runs over the list")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    arch = device_table_tag(torch.device("cuda"))
    for name, dtype, batch, rig in case_rigs(args):
        table = rig.table_configs(arch)
        nonflush, fold = table["output_only"]["config"], table["fold"]["config"]
        timers = {("standard", None, None, "aligned"):
                  lambda rig=rig: rig.time_cycle_us(Launch("standard", table["standard"]["config"]), args.replays)}
        for phase in PHASES:
            s = phase == "staggered"
            timers[("table fold", fold, None, phase)] = (
                lambda rig=rig, s=s: rig.time_cycle_us(Launch("output_only", nonflush, fold), args.replays, s))
            for heads, progs in itertools.product(args.heads, args.row_progs):
                cfg = LaunchConfig(16, 2, 1, 1, heads_per_prog=heads, loop_blocks=8)
                timers[("row list", cfg, progs, phase)] = (
                    lambda rig=rig, cfg=cfg, progs=progs, s=s:
                    time_list_cycle(rig, Launch("output_only", nonflush, cfg), progs, args.replays, s))
                # The package's fold in the same share, each program scanning the cursors itself.
                shared = replace(cfg, row_block=128, row_progs=progs)
                timers[("row share", shared, progs, phase)] = (
                    lambda rig=rig, shared=shared, s=s:
                    rig.time_cycle_us(Launch("output_only", nonflush, shared), args.replays, s))
        us = median_of_rounds(timers, args.rounds)
        base = us[("standard", None, None, "aligned")]
        for (variant, cfg, progs, phase), t in us.items():
            log.add(model=name, state_dtype=dtype, batch=batch, L=16, variant=variant, phases=phase,
                    fold=cfg.to_dict() if cfg else None, row_progs=progs, us_per_step=round(t, 3),
                    speedup=round(base / t, 3))
        del rig, timers
    log.print_table()


if __name__ == "__main__":
    main()
