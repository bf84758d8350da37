#!/usr/bin/env python3
"""The Mamba2 non-flush launch with a bf16 state, its dot products on the tensor cores
(Gluon), in place of the package's non-flush launch, against the package's own (H200).

Why: with a bf16 state the package's non-flush launch reads the checkpoint at 69-81% of
copy bandwidth and runs into its instruction count (ncu: issue on 69% of cycles; static
SASS about 1215 instructions a program of 32 rows on one warp, of which ~220 unpack bf16
and ~200 are the row reductions' shuffles and adds; benchmarks/README, "Open performance
work"). Here the two dot products of a step are ``mma.sync`` (bf16 in, fp32 accumulate,
so every product is exact and the sums are fp32 as in the FMA form):
- ``S_0 C``: the checkpoint tile ``[BLOCK_P, N]`` is the A operand, loaded from global
  memory straight into the operand layout with 8 consecutive values a thread (16-byte
  loads; the operands' K order is permuted alike, which a dot product does not see), and
  ``C`` is column 0 of the B operand ``[N, 8]``: no unpacking, no shuffles over the row;
- ``B_j . C`` for the whole ring at once: the ring's B tile ``[L, N]`` (with this token's
  B as entry ``w``) as the A operand against the same ``C``.
The ring's term ``sum_j coef_j (B_j . C) x_j`` is then a [L, P] tile with a thread's
column in its registers (no shuffles), and the output's epilogue runs in that layout.
(The Triton form of ``S_0 C`` on the tensor cores, measured before, converted the tile to
the operand layout through shared memory and lost: 106-133 against 87 us.)

bf16 state with bf16 activations only (both MMA operands bf16). The script checks the
package's multi-cycle scenarios with this launch in place (fp64 recurrence, staggered
cursors, a padding row, force-flushed rows, masked tiles), then times the cycle, the flush
step and a non-flush step (the benchmarks' method) with the package's non-flush launch
and with each Gluon config. Gluon has no interpreter: a GPU only, or ``--compile-only``
(sm_90 registers and instruction counts, no GPU).

    python benchmarks/probe_gluon_nonflush.py   # -> benchmarks/results/gluon_nonflush.json
"""

from __future__ import annotations

import argparse
import sys

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.ampere import mma_v2

from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, time_cycle_and_steps
from trtllm_replayssm.benchmarking.rigs import make_model_rig
from trtllm_replayssm.ops.launch import launcher_in_front
from trtllm_replayssm.ops.mamba2 import replay

sys.path.insert(0, str(REPO / "benchmarks"))
from probe_gluon_folds import GluonFold  # noqa: E402


@gluon.jit
def _add(a, b):
    return a + b


@gluon.jit
def _gluon_nonflush_kernel(
    state_ptr, x_cache_ptr, dt_cache_ptr, B_cache_ptr, write_pos_ptr, force_flush_ptr,
    x_ptr, dt_ptr, A_ptr, B_ptr, C_ptr, D_ptr, z_ptr, dt_bias_ptr, out_ptr, slot_idx_ptr,
    num_slots, nheads, headdim, dstate, heads_per_group, buffer_len, pad_slot_id,
    stride_state_slot, stride_state_h, stride_state_p,
    stride_xc_slot, stride_xc_h, stride_xc_l,
    stride_dtc_slot, stride_dtc_h,
    stride_Bc_slot, stride_Bc_g, stride_Bc_l,
    stride_x_b, stride_x_h, stride_dt_b, stride_dt_h, stride_A_h,
    stride_B_b, stride_B_g, stride_C_b, stride_C_g, stride_D_h, stride_D_p,
    stride_z_b, stride_z_h, stride_dtb_h, stride_out_b, stride_out_h,
    HAS_D: gl.constexpr, HAS_Z: gl.constexpr, HAS_DT_BIAS: gl.constexpr,
    HAS_SLOT_IDX: gl.constexpr, DT_SOFTPLUS: gl.constexpr, HAS_FORCE_FLUSH: gl.constexpr,
    BLOCK_P: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_L: gl.constexpr, NUM_WARPS: gl.constexpr,
    EVEN_ROWS: gl.constexpr,
):
    """Programs (headdim blocks of BLOCK_P rows, heads, batch rows), as the package's
    non-flush launch: a row that does not flush gets ``y`` and appends its inputs at ``w``;
    rows that flush are the fold launch's. ``BLOCK_L >= 16 NUM_WARPS`` (an MMA tile's rows
    a warp); ``BLOCK_N`` is dstate (whole columns)."""
    mma: gl.constexpr = gl.NVMMADistributedLayout(version=[2, 0], warps_per_cta=[NUM_WARPS, 1],
                                                  instr_shape=[16, 8])
    a_op: gl.constexpr = gl.DotOperandLayout(operand_index=0, parent=mma, k_width=8)
    b_op: gl.constexpr = gl.DotOperandLayout(operand_index=1, parent=mma, k_width=8)
    # [BLOCK_L, BLOCK_P] x ring: a thread holds a column (all ring entries of one p).
    ring: gl.constexpr = gl.BlockedLayout([BLOCK_L, 1], [1, 32], [1, NUM_WARPS], [1, 0])
    ring_l: gl.constexpr = gl.SliceLayout(1, ring)  # [BLOCK_L], every entry in every thread
    p_l: gl.constexpr = gl.SliceLayout(0, ring)  # [BLOCK_P] output rows
    flat: gl.constexpr = gl.BlockedLayout([8], [32], [NUM_WARPS], [0])  # [BLOCK_N] B append
    vec_l: gl.constexpr = gl.BlockedLayout([1], [32], [NUM_WARPS], [0])  # [BLOCK_L] ring scalars (scanned)

    pid_p = gl.program_id(0)
    pid_h = gl.program_id(1)
    pid_b = gl.program_id(2)
    offs_p = pid_p * BLOCK_P + gl.arange(0, BLOCK_P, layout=p_l)
    mask_p = offs_p < headdim
    out_row = out_ptr + pid_b * stride_out_b + pid_h * stride_out_h

    if HAS_SLOT_IDX:
        slot = gl.load(slot_idx_ptr + pid_b).to(gl.int64)
    else:
        slot = pid_b.to(gl.int64)
    if slot == pad_slot_id:
        return
    if (slot < 0) | (slot >= num_slots):
        gl.store(out_row + offs_p, gl.full([BLOCK_P], float("nan"), gl.float32, p_l).to(out_ptr.dtype.element_ty),
                 mask=mask_p)
        return
    w = gl.load(write_pos_ptr + slot)
    if (w < 0) | (w >= buffer_len):
        gl.store(out_row + offs_p, gl.full([BLOCK_P], float("nan"), gl.float32, p_l).to(out_ptr.dtype.element_ty),
                 mask=mask_p)
        return
    is_flush = w == buffer_len - 1
    if HAS_FORCE_FLUSH:
        is_flush = is_flush | (gl.load(force_flush_ptr + pid_b) != 0)
    if is_flush:
        return

    g = pid_h // heads_per_group
    # S_0 C: the checkpoint tile in the MMA's A operand layout, C as the B operand's column 0.
    offs_pa = pid_p * BLOCK_P + gl.arange(0, BLOCK_P, layout=gl.SliceLayout(1, a_op))
    offs_na = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, a_op))
    head = state_ptr + slot * stride_state_slot + pid_h * stride_state_h
    s_ptrs = head + offs_pa[:, None] * stride_state_p + offs_na[None, :]
    if EVEN_ROWS:
        S0 = gl.load(s_ptrs)
    else:
        S0 = gl.load(s_ptrs, mask=(offs_pa < headdim)[:, None], other=0.0)
    offs_nb = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(1, b_op))
    col_b = gl.arange(0, 8, layout=gl.SliceLayout(0, b_op))
    C_op = gl.load(C_ptr + pid_b * stride_C_b + g * stride_C_g + offs_nb[:, None] + col_b[None, :] * 0,
                   mask=(col_b == 0)[None, :], other=0.0)
    # The ring's B tile with this token's B as entry w; rows past w are zeros.
    offs_la = gl.arange(0, BLOCK_L, layout=gl.SliceLayout(1, a_op))
    Bc = B_cache_ptr + slot * stride_Bc_slot + g * stride_Bc_g
    B_now = B_ptr + pid_b * stride_B_b + g * stride_B_g
    b_rows = gl.where(offs_la == w, B_now, Bc + offs_la * stride_Bc_l)
    B_ring = gl.load(b_rows[:, None] + offs_na[None, :], mask=(offs_la <= w)[:, None], other=0.0)

    # This step's scalars and the ring's weights, coef_j = dt_j exp(A (T - c_j)) (entry w: dt).
    dt = gl.load(dt_ptr + pid_b * stride_dt_b + pid_h * stride_dt_h).to(gl.float32)
    if HAS_DT_BIAS:
        dt += gl.load(dt_bias_ptr + pid_h * stride_dtb_h).to(gl.float32)
    if DT_SOFTPLUS:
        dt = gl.where(dt <= 20.0, gl.log(1.0 + gl.exp(dt)), dt)
    A = gl.load(A_ptr + pid_h * stride_A_h).to(gl.float32)
    offs_lv = gl.arange(0, BLOCK_L, layout=vec_l)
    dtc = dt_cache_ptr + slot * stride_dtc_slot + pid_h * stride_dtc_h
    dt_ring = gl.where(offs_lv == w, dt, gl.load(dtc + offs_lv, mask=offs_lv < w, other=0.0))
    total = gl.sum(dt_ring, axis=0)
    coef = dt_ring * gl.exp(gl.minimum(A * (total - gl.associative_scan(dt_ring, 0, _add)), 0.0))
    offs_l = gl.arange(0, BLOCK_L, layout=ring_l)
    decay0 = gl.exp(gl.minimum(A * total, 0.0))
    xc = x_cache_ptr + slot * stride_xc_slot + pid_h * stride_xc_h
    x_now = gl.load(x_ptr + pid_b * stride_x_b + pid_h * stride_x_h + offs_p, mask=mask_p, other=0.0)
    X = gl.load(xc + offs_l[:, None] * stride_xc_l + offs_p[None, :], mask=(offs_l < w)[:, None] & mask_p[None, :],
                other=0.0)
    X = gl.where((offs_l == w)[:, None], x_now[None, :], X).to(gl.float32)
    D = gl.zeros([BLOCK_P], gl.float32, p_l)
    z = gl.zeros([BLOCK_P], gl.float32, p_l)
    if HAS_D:
        D = gl.load(D_ptr + pid_h * stride_D_h + offs_p * stride_D_p, mask=mask_p, other=0.0).to(gl.float32)
    if HAS_Z:
        z = gl.load(z_ptr + pid_b * stride_z_b + pid_h * stride_z_h + offs_p, mask=mask_p, other=0.0).to(gl.float32)

    zeros_p = gl.zeros([BLOCK_P, 8], gl.float32, mma)
    s0c = gl.sum(mma_v2(S0, C_op, zeros_p), axis=1)
    dots = gl.sum(mma_v2(B_ring, C_op, gl.zeros([BLOCK_L, 8], gl.float32, mma)), axis=1)
    v = gl.convert_layout(coef, ring_l) * gl.convert_layout(dots, ring_l)
    y = decay0 * gl.convert_layout(s0c, p_l) + gl.sum(X * v[:, None], axis=0)

    gl.store(xc + w * stride_xc_l + offs_p, x_now, mask=mask_p)
    if pid_p == 0:
        gl.store(dtc + w, dt)
        if pid_h % heads_per_group == 0:  # one head per group appends the shared B
            offs_n = gl.arange(0, BLOCK_N, layout=flat)
            gl.store(Bc + w * stride_Bc_l + offs_n, gl.load(B_now + offs_n))
    xf = x_now.to(gl.float32)
    if HAS_D:
        y += xf * D
    if HAS_Z:
        y *= z / (1.0 + gl.exp(-z))
    gl.store(out_row + offs_p, y.to(out_ptr.dtype.element_ty), mask=mask_p)


class GluonNonflush(GluonFold):
    """A launcher that runs the Gluon non-flush kernel in place of the package's Mamba2
    non-flush launch (bf16 state and activations; other launches pass on). The fold
    probe's launcher, on another launch."""

    def __init__(self, rows=32, num_warps=1):
        self.rows, self.num_warps = rows, num_warps
        self.launches = 0

    def label(self) -> str:
        return f"gluon non-flush ({self.rows}, {self.num_warps})"

    def takes(self, kernel, kwargs) -> bool:
        # K >= 32: 8 operand values a thread along K (the committed check ran dstate 16 too,
        # and it was wrong there).
        return (kernel is replay._replay_step_kernel and kwargs["MODE"] == replay.NONFLUSH.value
                and kwargs["state_ptr"].dtype == torch.bfloat16 and kwargs["C_ptr"].dtype == torch.bfloat16
                and kwargs["BLOCK_N"] == kwargs["dstate"] >= 32)

    def launch(self, kwargs: dict) -> tuple:
        P, H, B = kwargs["headdim"], kwargs["nheads"], kwargs["x_ptr"].shape[0]
        fn = _gluon_nonflush_kernel
        args = {n: kwargs[n] for n in fn.arg_names if n in kwargs}
        args.update(BLOCK_P=self.rows, BLOCK_L=max(16 * self.num_warps, kwargs["BLOCK_L"]), NUM_WARPS=self.num_warps,
                    EVEN_ROWS=P % self.rows == 0, num_warps=self.num_warps)
        return fn, (triton.cdiv(P, self.rows), H, B), args


def check(launcher: GluonNonflush) -> str:
    """The package's multi-cycle Mamba2 scenarios (bf16 state and activations) with the
    Gluon non-flush launch in place."""
    sys.path.insert(0, str(REPO / "tests"))
    from mamba2_harness import Scenario, run_replay  # noqa: E402

    from trtllm_replayssm.cache import Mamba2Geometry

    verdicts = []
    with launcher_in_front(launcher):
        for geom, L in [(Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2), 4),
                        (Mamba2Geometry(nheads=4, headdim=16, dstate=32, ngroups=2), 4),
                        (Mamba2Geometry(nheads=2, headdim=80, dstate=128, ngroups=1), 16),  # masked rows
                        (Mamba2Geometry(nheads=4, headdim=64, dstate=128, ngroups=2), 16),
                        (Mamba2Geometry(nheads=4, headdim=64, dstate=128, ngroups=2), 8)]:
            try:
                res = run_replay(Scenario(geom, L, state_dtype=torch.bfloat16, act_dtype=torch.bfloat16, seed=31),
                                 3 * L + 2, force_flush_at={1: [2], 6: [0, 3]})
                assert min(f for f in res.flushes_per_row if f) >= 3
                verdicts.append(f"P{geom.headdim} N{geom.dstate} L{L}: ok")
            except AssertionError as e:
                verdicts.append(f"P{geom.headdim} N{geom.dstate} L{L}: FAILED {str(e)[:120]}")
    assert launcher.launches > 0
    return "; ".join(verdicts)


VARIANTS = [(32, 1), (16, 1), (64, 1), (32, 2), (64, 2), (64, 4)]


def compile_for_sm90(rows: int, num_warps: int, headdim: int = 64) -> str:
    """ptxas's registers for sm_90 and the PTX's instruction mix (no GPU)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    import kernel_registers  # noqa: E402

    cx = dict(HAS_D=True, HAS_Z=True, HAS_DT_BIAS=True, HAS_SLOT_IDX=True, DT_SOFTPLUS=True, HAS_FORCE_FLUSH=False,
              BLOCK_P=rows, BLOCK_N=128, BLOCK_L=max(16, 16 * num_warps), NUM_WARPS=num_warps,
              EVEN_ROWS=headdim % rows == 0)
    return kernel_registers.registers(_gluon_nonflush_kernel, cx, num_warps, "bf16")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["nemotron-3-super", "nemotron-3-nano-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[32, 128, 512])
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gluon_nonflush.json"))
    ap.add_argument("--compile-only", action="store_true", help="no GPU: each variant compiled for sm_90")
    ap.add_argument("--check-only", action="store_true", help="the correctness scenarios alone, each variant")
    args = ap.parse_args()
    if args.compile_only:
        for rows, nw in VARIANTS:
            for P in (64, 80):
                print(f"({rows}, {nw}) headdim {P}:", compile_for_sm90(rows, nw, P), flush=True)
        return
    log = ProbeLog(args.out)
    for v in VARIANTS if args.check_only else VARIANTS[:1]:
        try:  # a failure is reported, and the variants still timed (a wrong kernel's time is a bound)
            verdict = check(GluonNonflush(*v))
        except Exception as e:  # noqa: BLE001 (compile errors)
            verdict = f"FAILED: {type(e).__name__}: {str(e)[:300]}"
        log.add(variant=GluonNonflush(*v).label(), correctness=verdict)
    if args.check_only:
        return
    for name in args.models:
        for batch in args.batches:
            rig = make_model_rig(name, batch, 16, torch.bfloat16)
            base = rig.time_cycle_us(rig.baseline_launch(), args.replays)
            for v in [None] + VARIANTS:
                launcher = GluonNonflush(*v) if v else None
                label = launcher.label() if launcher else "package non-flush (tuned)"
                try:
                    with launcher_in_front(launcher):
                        us, flush, nonflush = time_cycle_and_steps(rig, Launch("output_only"), args.replays)
                except Exception as e:  # a variant the compiler rejects
                    print(name, batch, label, type(e).__name__, str(e)[:300], flush=True)
                    continue
                print(name, batch, label, f"{us:.1f} us ({base / us:.3f}x) flush {flush:.1f} nonflush {nonflush:.1f}",
                      flush=True)
                log.add(model=name, state_dtype="bf16", batch=batch, L=16, variant=label, us_per_step=round(us, 2),
                        baseline_us_per_step=round(base, 2), speedup=round(base / us, 3), flush_us=round(flush, 1),
                        nonflush_us=round(nonflush, 1))
            del rig
            torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
