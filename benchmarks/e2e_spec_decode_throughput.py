#!/usr/bin/env python3
"""Model-level speculative decode: the standard speculative path vs ReplaySSM-spec.

Each step verifies ``1 + --num-spec`` tokens per row and accepts ``--acceptance`` of them
(bonus included) on every row: a synthetic, fixed pattern with made-up drafts, so this
measures throughput, not draft quality. The standard path writes T intermediate SSM states
per layer and promotes the accepted one (as TensorRT-LLM does); the ReplaySSM path writes
the drafts into the circular ring and commits cursors. The standard step is also timed
with each block kind left out, which gives the SSM / attention / MLP shares of its time. One CUDA graph per path; conv
states and KV positions roll back / move by the accepted count on the device.

    python benchmarks/e2e_spec_decode_throughput.py --model nemotron-3-nano-4b --batch-size 256
    python benchmarks/e2e_spec_decode_throughput.py --dry-run     # CPU: tiny model, flow only
"""

from __future__ import annotations

import argparse
import sys

import torch
from tabulate import tabulate
from tqdm import tqdm

from trtllm_replayssm.benchmarking.records import DRY_RUN_DIR, RESULTS, ResultsFile, committed_or_scratch, git_commit
from trtllm_replayssm.e2e import HybridDecoder, hybrid_config
from trtllm_replayssm.e2e.bench import compare_paths, step_shares

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="default: nemotron-3-nano-4b (GPU), tiny-hybrid (--dry-run)")
    ap.add_argument("--batch-size", nargs="+", type=int, default=[256])
    ap.add_argument("--num-spec", type=int, default=3, help="drafts per step (T = 1 + num-spec)")
    ap.add_argument("--buffer-len", type=int, default=16, help="history budget Bh of the ring")
    ap.add_argument("--acceptance", type=int, default=3, help="tokens accepted per step, bonus included")
    ap.add_argument("--num-steps", type=int, default=32)
    ap.add_argument("--warmup-steps", type=int, default=8)
    ap.add_argument("--state-dtype", choices=list(DTYPES), default="fp32")
    ap.add_argument("--out", default=None, help=f"default: {RESULTS.name}/e2e.json (a dry run's: under {DRY_RUN_DIR})")
    ap.add_argument("--staggered", action="store_true",
                    help="spread the rows over their flush period during the warm-up (each row held to one accepted "
                         "token a step for a while, on both paths) instead of starting them together")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: tiny model in the interpreter, nothing measured")
    args = ap.parse_args()
    args.out = committed_or_scratch(args.out, RESULTS / "e2e.json", args.dry_run)
    T = 1 + args.num_spec
    if not 1 <= args.acceptance <= T:
        sys.exit(f"--acceptance must be in [1, {T}]")
    gpu = torch.cuda.is_available()
    if not gpu and not args.dry_run:
        sys.exit("this benchmark needs a CUDA GPU (or --dry-run)")
    gpu_name = torch.cuda.get_device_name() if gpu else "none (dry run)"
    results = ResultsFile(args.out, gpu_name, merge=not args.dry_run)
    print(f"synthetic acceptance: {args.acceptance} of {T} tokens on every row and step "
          "(throughput, not draft quality)")
    cfg = hybrid_config(args.model or ("tiny-hybrid" if args.dry_run else "nemotron-3-nano-4b"))
    model = HybridDecoder(cfg, dtype=torch.bfloat16, device="cuda" if gpu else "cpu")
    records, rows = [], []
    for batch in tqdm(args.batch_size, desc="batch sizes"):
        res = compare_paths(model, batch, args.warmup_steps, args.num_steps,
                            max_len=4 + (args.warmup_steps + args.num_steps + 2) * args.acceptance + T,
                            buffer_len=args.buffer_len, state_dtype=DTYPES[args.state_dtype], num_tokens=T,
                            accepted=args.acceptance, staggered=args.staggered)
        std, rep = res["standard_ms"], res["replay_ms"]
        # Where the standard speculative step's time goes (its blocks of one kind left out).
        shares = step_shares(model, batch, args.num_steps, max_len=4 + (2 + args.num_steps + 2) * args.acceptance + T,
                             buffer_len=args.buffer_len, state_dtype=DTYPES[args.state_dtype], num_tokens=T,
                             accepted=args.acceptance)
        tok = lambda ms: batch * args.acceptance / ms * 1e3  # noqa: E731
        for route, ms in (("standard_spec", std), ("replay_spec", rep)):
            records.append(dict(gpu=gpu_name, model=cfg.name,
                                batch=batch, T=T, acceptance=args.acceptance, state_dtype=args.state_dtype,
                                L=args.buffer_len, route=route, ms_per_step=round(ms, 4), tokens_per_s=round(tok(ms), 1),
                                baseline_tokens_per_s=round(tok(std), 1), speedup=round(std / ms, 3),
                                logits_rel_err=round(res["logits_rel_err"], 6), commit=git_commit(),
                                **({"phases": "staggered"} if args.staggered else {}),
                                **(shares if route == "standard_spec" else {})))
        rows.append([cfg.name, batch, T, args.acceptance, f"{std:.3f}", f"{rep:.3f}", f"{tok(rep):.0f}",
                     f"{std / rep:.2f}x", " / ".join(f"{shares[k + '_share']:.0%}" for k in ("ssm", "attention", "mlp")),
                     f"{res['logits_rel_err']:.1e}"])
    results.write(records)
    print(tabulate(rows, headers=["model", "batch", "T", "accepted", "standard spec ms/step", "ReplaySSM ms/step",
                                  "ReplaySSM tok/s", "speedup", "standard step: SSM / attention / MLP",
                                  "logits rel. err (teacher-forced)"]))


if __name__ == "__main__":
    main()
