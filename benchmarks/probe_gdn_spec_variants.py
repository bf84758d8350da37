#!/usr/bin/env python3
"""GDN speculative verify on tl.dot: launch configs and the precision of its small products.

Times one verify + commit step (the fold-only launch included) of the package's kernel
per launch config (rows of V, warps, value heads a program, key columns a chunk) and per
``SMALL_DOT_PRECISION`` (the products that are not with the state: fp32 FMAs, "ieee", or
tf32x3 on the tensor cores), with all drafts accepted, on the speculative rig of
``bench_spec.py`` (CUDA graphs, cold L2, median).

    python benchmarks/probe_gdn_spec_variants.py          # -> benchmarks/results/gdn_spec_dot_variants.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

import trtllm_replayssm.ops.gdn.spec as gdn_spec
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig

# (rows of V, warps, value heads a program, key columns a chunk; 0: the whole tile)
CONFIGS = [(32, 2, 4, 0), (32, 2, 4, 64), (64, 2, 4, 64), (64, 4, 4, 0), (64, 4, 4, 64), (64, 4, 4, 32),
           (16, 1, 4, 64), (128, 2, 4, 32), (128, 4, 4, 0), (128, 4, 4, 64), (128, 4, 4, 32), (128, 4, 2, 64),
           (128, 4, 1, 64), (128, 8, 4, 64)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3.5-122b")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tokens", nargs="+", type=int, default=[4, 6], help="T = 1 + drafts")
    ap.add_argument("--history-len", type=int, default=16)
    ap.add_argument("--precisions", nargs="+", default=["ieee", "tf32x3"], choices=["ieee", "tf32x3"])
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_spec_dot_variants.json"))
    args = ap.parse_args()
    records = []
    for T in args.tokens:
        rig = make_spec_rig(SpecCase(args.model, model(args.model).geom, args.batch, T, args.history_len, T))
        for prec in args.precisions:
            gdn_spec.SMALL_DOT_PRECISION = prec
            for b, w, h, c in CONFIGS:
                rig.config = LaunchConfig(b, w, heads_per_prog=h, split_fold=1, key_chunk=c)
                try:
                    us = round(rig.time_us(rig.replay_fn(args.steps), args.steps, args.replays), 1)
                except Exception as e:  # a config the compiler or the GPU rejects
                    us = type(e).__name__
                records.append(dict(gpu=torch.cuda.get_device_name(), model=args.model, batch=args.batch, T=T,
                                    acceptance=T, small_dot_precision=prec, block_p=b, num_warps=w, heads_per_prog=h,
                                    key_chunk=c, us_per_step=us, commit=git_commit()))
                print(records[-1], flush=True)
        del rig
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate(records, headers="keys"))


if __name__ == "__main__":
    main()
