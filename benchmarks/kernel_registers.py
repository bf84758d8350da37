#!/usr/bin/env python3
"""Registers, spills and shared memory of every tuning candidate, without a GPU.

Compiles each kernel variant ahead of time for sm_90 with ``triton.compile`` and runs the
ptxas bundled with Triton on it. A tile that needs far more registers than the standard
kernel loses occupancy, so this prunes tuning candidates before device time is spent.

    python benchmarks/kernel_registers.py                    # Mamba2 and GDN, fp32 state
    python benchmarks/kernel_registers.py --state-dtype bf16 --family gdn
    python benchmarks/kernel_registers.py --family mamba2 --headdim 80   # Nano-4B's tiles
    python benchmarks/kernel_registers.py --family mamba2 --kernels output_only --tuned   # what runs
    python benchmarks/kernel_registers.py --family mamba2 --kernels output_only --sass    # + SASS sizes

``--tuned`` compiles the configs the package's Mamba2 table (``tuned/mamba2_sm90.json``)
holds instead of the candidates: a kernel change that costs the launches in use registers
shows there (CI checks the non-flush launch's, ``tests/test_benchmark_scripts.py``).
``--sass`` adds each compile's static SASS instruction count (NOPs left out) and its shared
memory: how a kernel change that is meant to leave a launch as it was can be checked
without a GPU (the same count, or ``cuobjdump -sass`` of both compiles compared), and what
a variant costs in instructions.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from types import SimpleNamespace
from typing import Optional

os.environ["TRITON_INTERPRET"] = "0"  # compile for the GPU even on a machine without one

import torch  # noqa: E402
import triton  # noqa: E402
from tabulate import tabulate  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402

from trtllm_replayssm.aot.build import source_type  # noqa: E402
from trtllm_replayssm.benchmarking import gdn_ar, mamba2_ar  # noqa: E402
from trtllm_replayssm.benchmarking.probes import DTYPE_NAMES, DTYPES  # noqa: E402
from trtllm_replayssm.benchmarking.spec import GDN_SPEC_CANDIDATES, MAMBA2_SPEC_CANDIDATES  # noqa: E402
from trtllm_replayssm.cache import gdn_ring_dtype  # noqa: E402
from trtllm_replayssm.ops import launch  # noqa: E402
from trtllm_replayssm.ops.common import even_tile, fold_precision, one_pass_fold  # noqa: E402
from trtllm_replayssm.ops.launch import clamp_loop_blocks, maxnreg_option  # noqa: E402
from trtllm_replayssm.ops.gdn import replay as gdn_replay, spec as gdn_spec, standard as gdn_standard  # noqa: E402
from trtllm_replayssm.ops.mamba2 import replay as m2_replay, replay_fold as m2_replay_fold  # noqa: E402
from trtllm_replayssm.ops.mamba2 import spec as m2_spec, standard as m2_standard  # noqa: E402

PTXAS = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
CUOBJDUMP = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/cuobjdump")
SASS = False  # --sass: each line also gives the compile's SASS size and shared memory
ACT_PTRS = {"x_ptr", "dt_ptr", "B_ptr", "C_ptr", "z_ptr", "out_ptr", "x_cache_ptr", "B_cache_ptr",
            "q_ptr", "k_ptr", "v_ptr", "a_ptr", "b_ptr", "x_ring_ptr", "B_ring_ptr"}
GDN_RING_PTRS = {"d_cache_ptr", "k_cache_ptr"}  # the autoregressive replay kernel's d/k ring
FLOAT_SCALARS = {"scale", "softplus_beta", "softplus_threshold"}
DIV16_SIZES = {"headdim", "dstate", "head_k_dim", "head_v_dim", "buffer_len"}
NOT_ALIGNED = {"stride_A_h", "stride_dtb_h", "stride_D_h", "stride_D_p", "stride_dt_h", "stride_a_h", "stride_b_h"}


def registers(fn, constexprs: dict, num_warps: int, state_dtype: str, maxnreg=None, ring_dtype: str = "fp32") -> str:
    """ptxas's resource line for ``fn`` specialised like a real launch (16-byte aligned
    pointers and strides divisible by 16, the launch's register cap), bf16 activations;
    ``ring_dtype``: GDN's ``d``/``k`` ring (other pointers not named here are fp32)."""
    sig, attrs = {}, {}
    for i, name in enumerate(fn.arg_names):
        if name in constexprs or fn.params[i].is_constexpr:  # a constexpr left out takes its default
            sig[name] = "constexpr"
            continue
        if name == "state_ptr":
            sig[name] = "*" + state_dtype
        elif name in GDN_RING_PTRS:
            sig[name] = "*" + ring_dtype
        elif name in ACT_PTRS:
            sig[name] = "*bf16"
        elif name in ("slot_idx_ptr", "write_pos_ptr", "wp_ptr", "origin_ptr"):
            sig[name] = "*i32"
        elif name in ("force_flush_ptr", "flush_ptr"):
            sig[name] = "*i8"
        elif name.endswith("_ptr"):
            sig[name] = "*fp32"
        else:
            sig[name] = "fp32" if name in FLOAT_SCALARS else "i32"
        if name.endswith("_ptr") or (name.startswith("stride") and name not in NOT_ALIGNED) or name in DIV16_SIZES:
            attrs[(i,)] = [["tt.divisibility", 16]]
    k = triton.compile(source_type(fn)(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs),
                       target=GPUTarget("cuda", 90, 32), options={"num_warps": num_warps, **maxnreg_option(maxnreg)})
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(k.asm["ptx"])
        f.flush()
        out = subprocess.run([PTXAS, "-arch=sm_90a", "-v", f.name, "-o", os.devnull], capture_output=True,
                             text=True).stderr
    regs = re.search(r"Used (\d+) registers", out).group(1)
    spill = re.search(r"(\d+) bytes spill stores", out)
    line = f"{regs} regs" + (f", {spill.group(1)} B spilled" if spill and spill.group(1) != "0" else "")
    return line + (f", {sass_summary(k)}" if SASS else "")


def sass_summary(kernel) -> str:
    """Static SASS instructions of a compiled kernel (NOPs, the padding, left out) and its
    shared memory."""
    with tempfile.NamedTemporaryFile("wb", suffix=".cubin") as f:
        f.write(kernel.asm["cubin"])
        f.flush()
        sass = subprocess.run([CUOBJDUMP, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    count = sum(1 for line in sass.splitlines() if re.match(r"\s+/\*[0-9a-f]{4}\*/\s+\S", line) and "NOP" not in line)
    return f"{count} SASS, {kernel.metadata.shared} B shared"


def tuned_mamba2_configs(kernel: str, state_dtype: str, headdim: int, dstate: int = 128) -> list:
    """The distinct launch configs of ``kernel`` in the package's sm_90 Mamba2 table (bf16
    activations), in the table's order."""
    key = launch.table_key(kernel, DTYPES[state_dtype], torch.bfloat16, headdim, dstate)
    configs = [launch.LaunchConfig(**{k: row[k] for k in launch.CONFIG_FIELDS if k in row})
               for row in launch._load_table("sm90", "mamba2").get(key, [])]
    return list(dict.fromkeys(configs))


def mamba2_rows(state_dtype: str, headdim: int = 64, dstate: int = 128, L: int = 16, kernels=None, tuned=False):
    common = dict(HAS_D=True, HAS_Z=True, HAS_DT_BIAS=True, HAS_SLOT_IDX=True, DT_SOFTPLUS=True)
    modes = {"output_only": 1, "state_and_output": 3}
    for kernel in kernels or mamba2_ar.CANDIDATES:
        configs = (tuned_mamba2_configs(kernel, state_dtype, headdim, dstate) if tuned
                   else mamba2_ar.candidate_configs(kernel, headdim))
        for cfg in configs:
            if kernel in ("standard", "always_flush"):  # always_flush: the standard kernel, draining in-kernel
                fn, c = m2_standard._selective_state_update_kernel, dict(common, BLOCK_P=cfg.block_p, BLOCK_N=dstate,
                                                                        HAS_CURSOR=kernel == "always_flush",
                                                                        DRAIN=kernel == "always_flush", BLOCK_L=L,
                                                                        EARLY_TERMS=bool(cfg.early_terms),
                                                                        DRAIN_ROWS=launch.drain_rows(cfg.block_p))
            elif kernel == "fold":  # the constexprs the launch plan gives (bf16 B ring, heads even)
                _, plan = m2_replay_fold.fold_launch_plan({"B_cache_ptr": torch.empty(0, dtype=torch.bfloat16),
                                                           "state_ptr": torch.empty(0, dtype=DTYPES[state_dtype])},
                                                          SimpleNamespace(headdim=headdim, dstate=dstate, nheads=128),
                                                          cfg, dstate, L)
                plan.pop("num_warps")
                fn, c = m2_replay_fold._replay_fold_kernel, dict(common, HAS_FORCE_FLUSH=False, ROW_BLOCK=cfg.row_block,
                                                                 ROW_PROGS=cfg.row_progs, **plan)
            else:  # the non-flush launch may run a program over a run of row blocks (as the wrapper clamps it)
                chunks = clamp_loop_blocks(cfg, headdim).loop_blocks if kernel == "output_only" else 1
                fn, c = m2_replay._replay_step_kernel, dict(
                    common, HAS_FORCE_FLUSH=False, MODE=modes[kernel], BLOCK_P=cfg.block_p, BLOCK_N=dstate,
                    BLOCK_L=L, FOLD_CHUNK=cfg.fold_chunk, EVEN_ROWS=headdim % (cfg.block_p * chunks) == 0,
                    EVEN_COLS=True, EARLY_STATE=bool(cfg.early_state), CHUNKS=chunks)
            yield ["mamba2", kernel, str(cfg), registers(fn, c, cfg.num_warps, state_dtype)]


def gdn_rows(state_dtype: str, head_dim: int = 128, L: int = 16, ring_dtype: Optional[str] = None):
    """``ring_dtype``: the ``d``/``k`` ring's, by default the package's for the state dtype
    (``cache.gdn_ring_dtype``: bf16 beside a bf16 state)."""
    ring_dtype = ring_dtype or DTYPE_NAMES[gdn_ring_dtype(DTYPES[state_dtype])]
    common = dict(USE_QK_L2NORM=True, HAS_SLOT_IDX=True, BLOCK_K=head_dim, V_INNER=False)
    modes = {"output_only": 1, "fold": 2}
    for kernel in gdn_ar.CANDIDATES:
        for cfg in gdn_ar.candidate_configs(kernel, head_dim):
            if kernel in ("standard", "always_flush"):  # always_flush: the standard kernel, draining in-kernel
                fn, c = gdn_standard._gdn_update_kernel, dict(common, BLOCK_V=cfg.block_p,
                                                              HAS_CURSOR=kernel == "always_flush",
                                                              DRAIN=kernel == "always_flush", BLOCK_L=L,
                                                              DRAIN_ROWS=launch.drain_rows(cfg.block_p),
                                                              EARLY_STATE=bool(cfg.early_state),
                                                              STATE_ROW_STRIDE=head_dim,
                                                              EVEN_TILE=even_tile(head_dim, cfg.block_p, head_dim,
                                                                                  head_dim))
            else:
                chunks = clamp_loop_blocks(cfg, head_dim).loop_blocks
                fn, c = gdn_replay._gdn_replay_kernel, dict(
                    common, HAS_FORCE_FLUSH=False, MODE=modes[kernel],
                    BLOCK_V=cfg.block_p, CHUNKS=chunks, BLOCK_L=L,
                    FOLD_CHUNK=cfg.fold_chunk, FOLD_DOT=bool(cfg.fold_dot) and kernel == "fold",
                    DOT_PRECISION=fold_precision(kernel == "fold" and one_pass_fold(DTYPES[state_dtype])),
                    HEADS_PER_PROG=cfg.heads_per_prog if kernel == "fold" else 1,
                    EVEN_TILE=even_tile(head_dim, cfg.block_p * chunks, head_dim, head_dim),
                    LOOP_STAGES=gdn_replay.LOOP_STAGES[modes[kernel]] if state_dtype == "fp32" else None,
                    ROW_BLOCK=cfg.row_block if kernel == "fold" else 1,
                    ROW_PROGS=cfg.row_progs if kernel == "fold" else 0,
                    PREFETCH=bool(cfg.prefetch) and kernel == "output_only",
                    EARLY_TILES=kernel == "output_only" and gdn_replay.early_tiles(cfg, DTYPES[state_dtype]))
            yield ["gdn", kernel, str(cfg), registers(fn, c, cfg.num_warps, state_dtype, cfg.maxnreg, ring_dtype)]


def spec_rows(state_dtype: str, T: int = 4, history_len: int = 16):
    """Speculative verify kernels, Super (P 64, N 128, 16 heads a group) and Qwen3.5-122B (K = V = 128, 4 value heads
    a key head) tiles; a ``split_fold`` config is two launches (the fold of flush rows, then the verify), or for
    split_fold 3 three (the fold, the ring's part, the state's product)."""
    buf = m2_spec.ring_capacity(T, history_len)
    common = dict(HAS_SLOT_IDX=True, BUF=buf, BLOCK_L=m2_spec.history_tile(history_len), DOT_PRECISION="tf32x3", ONE_PASS_PRECISION="tf32")
    even_mamba2 = dict(EVEN_ROWS=True, EVEN_COLS=True)  # Super's headdim 64 fills these tiles

    def flush_rows(phase):  # a launch of the flush rows alone looks through blocks of rows (at batch >= 128)
        return m2_spec.FLUSH_ROW_BLOCK if m2_spec.serves_flush_rows_alone(phase) else 1

    def mamba2_phase(cfg, phase):  # -> (kernel, constexprs, warps); phase: one of m2_spec.PHASES
        launch_cfg = m2_spec.phase_config(cfg, phase)
        return m2_spec._spec_verify_kernel, dict(
            common, **even_mamba2, HAS_D=True, HAS_Z=True, HAS_DT_BIAS=True, DT_SOFTPLUS=True, NUM_TOKENS=T,
            PHASE=phase.value,
            USE_DOT=True, BLOCK_T=m2_spec.token_tile(T, use_dot=True), BLOCK_P=min(launch_cfg.block_p, 64), BLOCK_N=128,
            EXACT_B=True,  # B ring in bf16
            HEADS_PER_PROG=m2_spec.heads_per_program(launch_cfg, 16, fold_only=phase is m2_spec.FOLD_ONLY),
            STATE_CHUNK=(cfg.key_chunk or 128) if phase in (m2_spec.AFTER_FOLD, m2_spec.NONFLUSH_ROWS) else 128,
            SMALL_ON_FMA=m2_spec.SMALL_ON_FMA, ROW_BLOCK=flush_rows(phase)), launch_cfg.num_warps

    def mamba2_state_product():  # split_fold 3's last launch, on its module-level tile
        rows = min(m2_spec.STATE_PRODUCT_ROWS, 64)
        return m2_spec._spec_state_product_kernel, dict(
            HAS_Z=True, HAS_SLOT_IDX=True, NUM_TOKENS=T, BLOCK_P=rows, BLOCK_K=m2_spec.STATE_PRODUCT_COLS, BLOCK_N=128,
            BLOCK_T=m2_spec.token_tile(T, use_dot=True), BUF=buf, USE_DOT=True, EXACT_B=True, DOT_PRECISION="tf32x3",
            ONE_PASS_PRECISION="tf32", **even_mamba2, STAGES=m2_spec.STATE_PRODUCT_STAGES), m2_spec.STATE_PRODUCT_WARPS

    def gdn_phase(cfg, phase):  # the chunked kernel's fold-only launch (a config of its own), then the tl.dot verify
        shape = dict(common, USE_QK_L2NORM=True, BLOCK_K=128, EVEN_TILE=True)
        if phase is m2_spec.FOLD_ONLY:  # k ring in fp32 (the default)
            fold = gdn_spec.GDN_SPEC_FOLD_CONFIG
            return gdn_spec._gdn_spec_verify_kernel, dict(shape, PHASE=phase.value, USE_DOT=True, BLOCK_V=fold.block_p,
                                                          BLOCK_T=triton.next_power_of_2(T),
                                                          K_CHUNK=gdn_spec.fma_key_chunk(128), EXACT_B=False), fold.num_warps
        dot = dict(shape, BLOCK_V=cfg.block_p, EXACT_X=True, KEY_CHUNK=cfg.key_chunk or 128, NUM_TOKENS=T,
                   SMALL_PRECISION=gdn_spec.SMALL_DOT_PRECISION, PHASE=phase.value, SOLVE_APART=gdn_spec.SOLVE_APART,
                   HEADS_PER_PROG=gdn_spec.dot_heads_per_program(cfg, 4, phase))
        return gdn_spec._gdn_spec_verify_dot_kernel, dot, cfg.num_warps

    def gdn_solve():  # the drafts' solve in a launch of its own (SOLVE_APART)
        return gdn_spec._gdn_spec_solve_kernel, dict(
            USE_QK_L2NORM=True, HAS_SLOT_IDX=True, BLOCK_K=128, BUF=buf, EXACT_X=True, DOT_PRECISION="tf32x3",
            ONE_PASS_PRECISION="tf32", NUM_TOKENS=T, SMALL_PRECISION=gdn_spec.SMALL_DOT_PRECISION, EVEN_TILE=True,
            BLOCK_V=128), gdn_spec.SOLVE_WARPS

    def gdn_ring_part():  # split_fold 3's first launch, on its module-level config
        return gdn_spec._gdn_spec_ring_part_kernel, dict(
            USE_QK_L2NORM=True, HAS_SLOT_IDX=True, BLOCK_K=128, BUF=buf, BLOCK_L=m2_spec.history_tile(history_len),
            BLOCK_V=gdn_spec.GDN_RING_PART_ROWS, V_BLOCKS=128 // gdn_spec.GDN_RING_PART_ROWS, EXACT_X=True,
            DOT_PRECISION="tf32x3", ONE_PASS_PRECISION="tf32", NUM_TOKENS=T, SMALL_PRECISION="tf32x3",
            EVEN_TILE=True, HEADS_PER_PROG=gdn_spec.GDN_RING_PART_HEADS, KEY_CHUNK=gdn_spec.GDN_RING_PART_COLS), \
            gdn_spec.GDN_RING_PART_WARPS

    def gdn_state_product():  # split_fold 3's last launch, on its module-level tile
        return gdn_spec._gdn_spec_state_product_kernel, dict(
            HAS_SLOT_IDX=True, BLOCK_V=gdn_spec.GDN_STATE_PRODUCT_ROWS, BLOCK_K=128,
            KEY_CHUNK=gdn_spec.GDN_STATE_PRODUCT_COLS, BUF=buf, EXACT_X=True, DOT_PRECISION="tf32x3",
            ONE_PASS_PRECISION="tf32", NUM_TOKENS=T, SMALL_PRECISION="tf32x3", EVEN_TILE=True,
            STAGES=gdn_spec.GDN_STATE_PRODUCT_STAGES), gdn_spec.GDN_STATE_PRODUCT_WARPS

    for family, phase_kernel, candidates in (("mamba2", mamba2_phase, MAMBA2_SPEC_CANDIDATES),
                                             ("gdn", gdn_phase, GDN_SPEC_CANDIDATES)):
        for cfg in candidates:
            if family == "gdn" and cfg.split_fold == m2_spec.STATE_APART:
                regs = (f"ring part {registers(*gdn_ring_part(), state_dtype, gdn_spec.GDN_RING_PART_MAXNREG)}, "
                        f"flush rows {registers(*phase_kernel(cfg, m2_spec.FLUSH_ROWS), state_dtype, gdn_spec.GDN_FLUSH_ROWS_MAXNREG)}, "
                        f"state product {registers(*gdn_state_product(), state_dtype, gdn_spec.GDN_STATE_PRODUCT_MAXNREG)}")
                yield [family, f"spec T={T}", str(cfg), regs]
                continue
            names = {0: ["verify+fold"], 1: ["fold", "verify"], 2: ["flush rows", "other rows"],
                     3: ["fold", "ring part"]}[cfg.split_fold]
            regs = ", ".join(f"{name} {registers(*phase_kernel(cfg, p), state_dtype)}"
                             for name, p in zip(names, m2_spec.PHASES[cfg.split_fold]))
            if family == "mamba2" and cfg.split_fold == m2_spec.STATE_APART:
                regs += f", state product {registers(*mamba2_state_product(), state_dtype)}"
            if family == "gdn" and gdn_spec.SOLVE_APART:
                regs = f"solve {registers(*gdn_solve(), state_dtype)}, " + regs
            yield [family, f"spec T={T}", str(cfg), regs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--family", choices=["mamba2", "gdn", "spec", "all"], default="all")
    ap.add_argument("--state-dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--headdim", type=int, default=64, help="Mamba2 headdim (Super 64, Nano-4B 80)")
    ap.add_argument("--kernels", nargs="+", choices=list(mamba2_ar.CANDIDATES), help="Mamba2 kernels (default: all)")
    ap.add_argument("--tuned", action="store_true", help="Mamba2: the tuned table's configs, not the candidates")
    ap.add_argument("--sass", action="store_true", help="also each compile's SASS instructions and shared memory")
    ap.add_argument("--ring-dtype", choices=list(DTYPES),
                    help="GDN's d/k ring (default: the state dtype's, cache.gdn_ring_dtype)")
    args = ap.parse_args()
    global SASS
    SASS = args.sass
    if (args.kernels or args.tuned) and args.family != "mamba2":
        ap.error("--kernels and --tuned take --family mamba2")
    rows = []
    if args.family in ("mamba2", "all"):
        rows += list(mamba2_rows(args.state_dtype, args.headdim, kernels=args.kernels, tuned=args.tuned))
    if args.family in ("gdn", "all"):
        rows += list(gdn_rows(args.state_dtype, ring_dtype=args.ring_dtype))
    if args.family in ("spec", "all"):
        rows += list(spec_rows(args.state_dtype))
    print(tabulate(rows, headers=["family", "kernel", "launch config", f"sm_90, {args.state_dtype} state"]))


if __name__ == "__main__":
    main()
