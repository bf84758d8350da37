#!/usr/bin/env python3
"""Speculative verify on tl.dot: launch configs and how its small products run, per family.

Times one verify + commit step (the fold-only launch included) of the package's kernel
per launch config and per setting of the kernel's small-product switch, with all drafts
accepted, on the speculative rig of ``bench_spec.py`` (CUDA graphs, cold L2, median).
- GDN (``--model qwen3.5-122b``): configs are (rows of V, warps, value heads a program,
  key columns a chunk); the switch is ``SMALL_DOT_PRECISION`` (the products that are not
  with the state: fp32 FMAs "ieee", or tf32x3 on the tensor cores).
- Mamba2 (``--model nemotron-3-super``): configs are (rows of headdim, warps, heads of a
  group a program, dstate columns a chunk) plus the fold-only launch's (rows, warps);
  the switch is ``SMALL_ON_FMA`` (the x tiles' products as fp32 FMAs or two TF32 passes).

    python benchmarks/probe_spec_variants.py          # -> benchmarks/results/gdn_spec_dot_variants.json
    python benchmarks/probe_spec_variants.py --model nemotron-3-super --tokens 4 \\
        --out benchmarks/results/mamba2_spec_variants.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

import trtllm_replayssm.ops.gdn.spec as gdn_spec
import trtllm_replayssm.ops.mamba2.spec as m2_spec
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig
from trtllm_replayssm.models import GDNGeometry, model
from trtllm_replayssm.ops.launch import LaunchConfig

# (rows, warps, heads a program, state columns a chunk (0: the whole tile)[, fold rows, fold warps])
GDN_CONFIGS = [(32, 2, 4, 0), (32, 2, 4, 64), (64, 2, 4, 64), (64, 4, 4, 0), (64, 4, 4, 64), (64, 4, 4, 32),
               (16, 1, 4, 64), (128, 2, 4, 32), (128, 4, 4, 0), (128, 4, 4, 64), (128, 4, 4, 32), (128, 4, 2, 64),
               (128, 4, 1, 64), (128, 8, 4, 64)]
MAMBA2_CONFIGS = [(16, 1, 16, 0), (16, 1, 16, 64), (16, 1, 16, 32), (32, 2, 16, 0), (32, 2, 16, 32),
                  (32, 2, 16, 64), (64, 4, 16, 0), (64, 4, 16, 32), (64, 4, 16, 64), (64, 4, 8, 32),
                  (64, 4, 16, 32, 32, 2), (64, 4, 16, 32, 64, 4), (32, 2, 16, 32, 16, 1), (64, 4, 16, 64, 16, 1)]
# Per family: the module and its switch, the values the probe sets, and the configs.
FAMILIES = {
    "gdn": (gdn_spec, "SMALL_DOT_PRECISION", ["ieee", "tf32x3"], GDN_CONFIGS),
    "mamba2": (m2_spec, "SMALL_ON_FMA", [False, True], MAMBA2_CONFIGS),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3.5-122b")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tokens", nargs="+", type=int, default=[4, 6], help="T = 1 + drafts")
    ap.add_argument("--history-len", type=int, default=16)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_spec_dot_variants.json"))
    args = ap.parse_args()
    geom = model(args.model).geom
    module, switch, settings, configs = FAMILIES["gdn" if isinstance(geom, GDNGeometry) else "mamba2"]
    records = []
    for T in args.tokens:
        rig = make_spec_rig(SpecCase(args.model, geom, args.batch, T, args.history_len, T))
        for setting in settings:
            setattr(module, switch, setting)
            for b, w, h, c, *fold in configs:
                rig.config = LaunchConfig(b, w, heads_per_prog=h, split_fold=1, key_chunk=c)
                if module is m2_spec:
                    m2_spec.SPEC_FOLD_CONFIG = LaunchConfig(*fold) if fold else None
                try:
                    us = round(rig.time_us(rig.replay_fn(args.steps), args.steps, args.replays), 1)
                except Exception as e:  # a config the compiler or the GPU rejects
                    us = type(e).__name__
                records.append(dict(gpu=torch.cuda.get_device_name(), model=args.model, batch=args.batch, T=T,
                                    acceptance=T, **{switch.lower(): setting}, block_p=b, num_warps=w,
                                    heads_per_prog=h, key_chunk=c, fold_config=list(fold) or None,
                                    us_per_step=us, commit=git_commit()))
                print(records[-1], flush=True)
        del rig
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate(records, headers="keys"))


if __name__ == "__main__":
    main()
