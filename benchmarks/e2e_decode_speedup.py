#!/usr/bin/env python3
"""Model-level autoregressive decode: standard SSM kernels vs ReplaySSM in one process.

A hybrid decoder at a real model's shapes (random bf16 weights, ``trtllm_replayssm.e2e``)
decodes greedily, one CUDA graph per batch size and path; ms/step is the mean over
``--num-steps`` consecutive steps (ring flushes included) after ``--warmup-steps``. Over
the warm-up the ReplaySSM path is fed the standard path's tokens, and the last logits of
the two are compared (relative L2 error; random weights make greedy near-ties common, so
free-running decodes would part on rounding alone).
Records go to ``benchmarks/results/e2e.json`` (replacing those of the same case).

    python benchmarks/e2e_decode_speedup.py --model nemotron-3-nano-4b --batch-size 128 512
    python benchmarks/e2e_decode_speedup.py --dry-run     # CPU: tiny model, interpreter, flow only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tabulate import tabulate
from tqdm import tqdm

from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.e2e import DecodeRunner, HybridDecoder, hybrid_config

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
KEY = ("model", "batch", "T", "state_dtype", "L", "route")


def merge_records(path: Path, new: list) -> None:
    old = json.loads(path.read_text()) if path.exists() else []
    keys = {tuple(r[k] for k in KEY) for r in new}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([r for r in old if tuple(r.get(k) for k in KEY) not in keys] + new, indent=1) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="nemotron-3-nano-4b")
    ap.add_argument("--batch-size", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--num-steps", type=int, default=64)
    ap.add_argument("--warmup-steps", type=int, default=16)
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--state-dtype", choices=list(DTYPES), default="fp32")
    ap.add_argument("--route", default="output_only", help="ReplaySSM route (output_only, always_flush, auto)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/e2e.json"))
    ap.add_argument("--dry-run", action="store_true", help="no GPU: tiny model in the interpreter, nothing measured")
    args = ap.parse_args()
    if not torch.cuda.is_available() and not args.dry_run:
        sys.exit("this benchmark needs a CUDA GPU (or --dry-run)")
    if args.dry_run and not torch.cuda.is_available():
        args.model = "tiny-hybrid" if args.model == "nemotron-3-nano-4b" else args.model
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    gpu = torch.cuda.get_device_name() if dev == "cuda" else "none (dry run)"
    cfg = hybrid_config(args.model)
    model = HybridDecoder(cfg, dtype=torch.bfloat16, device=dev)
    max_len = 4 + args.warmup_steps + args.num_steps + 4
    records, rows = [], []
    for batch in tqdm(args.batch_size, desc="batch sizes"):
        ms, runners, fed = {}, {}, None
        for replay in (False, True):
            r = DecodeRunner(model, batch, replay, max_len, args.buffer_len, DTYPES[args.state_dtype], args.route)
            if dev == "cuda":
                r.capture()
            # Agreement over the warm-up steps, the replay path fed the standard path's tokens.
            chosen = r.run(args.warmup_steps, feed=fed)
            fed = fed or chosen
            runners[replay] = r.logits.clone()
            ms[replay] = r.time_ms_per_step(args.num_steps)
            del r
        err = ((runners[True] - runners[False]).norm() / runners[False].norm()).item()
        agree = err < 2e-2
        speedup = ms[False] / ms[True]
        for replay in (False, True):
            records.append(dict(gpu=gpu, model=cfg.name, batch=batch, T=0, state_dtype=args.state_dtype,
                                L=args.buffer_len, route=args.route if replay else "standard",
                                ms_per_step=round(ms[replay], 4), tokens_per_s=round(batch / ms[replay] * 1e3, 1),
                                baseline_tokens_per_s=round(batch / ms[False] * 1e3, 1),
                                speedup=round(speedup if replay else 1.0, 3), logits_rel_err=round(err, 6),
                                logits_agree=agree, commit=git_commit()))
        rows.append([cfg.name, batch, f"{ms[False]:.3f}", f"{ms[True]:.3f}", f"{batch / ms[True] * 1e3:.0f}",
                     f"{speedup:.2f}x", f"{err:.1e}"])
    if not args.dry_run:
        merge_records(Path(args.out), records)
    else:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate(rows, headers=["model", "batch", "standard ms/step", "ReplaySSM ms/step", "ReplaySSM tok/s",
                                  "speedup", "logits rel. err (teacher-forced)"]))


if __name__ == "__main__":
    main()
