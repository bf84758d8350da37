#!/usr/bin/env python3
"""The speculative verify's launch configs side by side across batches, small ones first:
the measurements behind the default config by batch (``ops/mamba2/spec.py``:
``SPEC_PLANS``; ``ops/gdn/spec.py``: ``GDN_SPEC_PLANS``, with the state product's
programmatic launch on and off).

Times a run of verify + commit steps on the speculative rig of ``bench_spec.py`` (CUDA
graphs, cold L2, median; T = 4, history 16, the rows flushing together), every config in
one process.

    python benchmarks/probe_spec_small_batch.py --models qwen3.5-122b qwen3.5-4b \\
        --batches 1 4 8 16 32 48 64 96 --out benchmarks/results/gdn_spec_small_batch.json
    python benchmarks/probe_spec_small_batch.py --models nemotron-3-super nemotron-3-nano-4b \\
        --batches 1 8 16 20 24 32 48 64 96 --out benchmarks/results/mamba2_spec_small_batch.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

import trtllm_replayssm.ops.gdn.spec as gdn_spec
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig, probe_record
from trtllm_replayssm.cache import GDNGeometry
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig

L = LaunchConfig
# (name, config, the GDN state product's programmatic launch)
GDN_SETTINGS = [("split_fold 3", gdn_spec.GDN_SPEC_CONFIG, False),
                ("split_fold 3, programmatic", gdn_spec.GDN_SPEC_CONFIG, True)] + \
    [(f"split_fold {s}, {b} rows, {w} warps, {h} heads", L(b, w, heads_per_prog=h, split_fold=s, key_chunk=32), False)
     for s, b, w, h in [(2, 64, 2, 4), (2, 64, 2, 1), (2, 32, 1, 4), (2, 128, 4, 4), (0, 64, 2, 4)]]
MAMBA2_SETTINGS = [(f"split_fold {s}, {b} rows, {w} warps, {h} heads", L(b, w, heads_per_prog=h, split_fold=s), False)
                   for s, b, w, h in [(3, 64, 1, 16), (3, 64, 1, 8), (1, 16, 1, 4), (1, 16, 1, 16), (1, 32, 2, 16),
                                      (2, 16, 1, 4), (2, 16, 1, 8)]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3.5-122b", "qwen3.5-4b"])
    ap.add_argument("--batches", nargs="+", type=int, default=[1, 4, 8, 16, 32, 48, 64, 96])
    ap.add_argument("--tokens", type=int, default=4, help="T = 1 + drafts")
    ap.add_argument("--accepted", type=int, default=3, help="tokens accepted a step")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    records, default_pdl = [], gdn_spec.GDN_SPEC_PDL
    for name in args.models:
        geom = model(name).geom
        settings = GDN_SETTINGS if isinstance(geom, GDNGeometry) else MAMBA2_SETTINGS
        for batch in args.batches:
            rig = make_spec_rig(SpecCase(name, geom, batch, args.tokens, 16, args.accepted))
            for setting, cfg, pdl in settings:
                gdn_spec.GDN_SPEC_PDL = pdl
                records.append(probe_record(rig, cfg, args.steps, args.replays, setting=setting))
            gdn_spec.GDN_SPEC_PDL = default_pdl
            rig = None  # (frees the layers before the next batch)
            torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate([[r["model"], r["batch"], r["setting"], r["us_per_step"]] for r in records],
                   headers=["model", "batch", "verify", "us / verify step"]))


if __name__ == "__main__":
    main()
