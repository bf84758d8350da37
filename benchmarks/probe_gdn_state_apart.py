#!/usr/bin/env python3
"""GDN speculative verify with the state's product in a launch of its own (``split_fold``
3, ``ops/gdn/spec.py``: the solve and the ring's part, then the flush rows' own launch,
then ``(S_0 X) W + bias`` for the other rows) against the default, per launch config of
the two new launches.

Times a run of verify + commit steps on the speculative rig of ``bench_spec.py`` (CUDA
graphs, cold L2, median; T = 4, history 16, all drafts accepted, the rows flushing
together every 5th step), every setting side by side in one process.

    python benchmarks/probe_gdn_state_apart.py    # H200 -> benchmarks/results/gdn_state_apart.json
    python benchmarks/probe_gdn_state_apart.py --settings 2 --out /tmp/sp.json --profile
    python benchmarks/probe_gdn_state_apart.py --settings 2 --pdl --accepted 3 --out /tmp/pdl.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from tabulate import tabulate

import trtllm_replayssm.ops.gdn.spec as gdn_spec
from trtllm_replayssm.benchmarking.records import REPO
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig, probe_record
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.common import DOT_PRECISION
from trtllm_replayssm.ops.launch import LaunchConfig

SPLIT_FOLD_2 = LaunchConfig(64, 2, heads_per_prog=4, split_fold=2, key_chunk=32)
SPLIT_FOLD_3 = LaunchConfig(64, 2, split_fold=3, key_chunk=32)
IEEE, TF32X3 = "ieee", DOT_PRECISION
# (the verify config, whose rows and warps the flush rows' launch takes; the state's
# product: rows, key columns, warps, stages, small products' precision; the ring part:
# rows, warps, value heads, small products' precision). The first split_fold 3 setting is
# the default (the launches' register caps are ``ops/gdn/spec.py``'s). (``gdn_state_apart.json``
# holds the list of commit 6c88394: every setting is in its records.)
DEFAULT_SP, DEFAULT_RP = (64, 32, 2, 3, TF32X3), (32, 1, 4, TF32X3)
SETTINGS = [(SPLIT_FOLD_2, None, None), (SPLIT_FOLD_3, DEFAULT_SP, DEFAULT_RP)] + \
    [(SPLIT_FOLD_3, sp, DEFAULT_RP) for sp in [(128, 16, 4, 4, TF32X3), (128, 32, 4, 3, TF32X3),
                                               (128, 32, 8, 3, TF32X3), (128, 32, 4, 2, TF32X3)]] + \
    [(SPLIT_FOLD_3, DEFAULT_SP, rp) for rp in [(16, 1, 4, TF32X3), (32, 1, 2, TF32X3), (32, 2, 4, TF32X3)]]


def apply_setting(sp, rp) -> None:
    """Set the state product's and the ring part's launch constants of ``ops/gdn/spec.py``."""
    (gdn_spec.GDN_STATE_PRODUCT_ROWS, gdn_spec.GDN_STATE_PRODUCT_COLS, gdn_spec.GDN_STATE_PRODUCT_WARPS,
     gdn_spec.GDN_STATE_PRODUCT_STAGES, gdn_spec.GDN_STATE_PRODUCT_PRECISION) = sp
    (gdn_spec.GDN_RING_PART_ROWS, gdn_spec.GDN_RING_PART_WARPS, gdn_spec.GDN_RING_PART_HEADS,
     gdn_spec.GDN_RING_PART_PRECISION) = rp


def profile_launches(rig, setting, steps: int) -> None:
    """Each kernel's CUDA time per call over one eager run (the launches of a verify step)."""
    cfg, sp, rp = setting
    apply_setting(sp, rp)
    rig.config = cfg
    run = rig.replay_fn(steps)
    run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    print(f"batch {rig.case.batch}:")
    print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen3.5-122b")
    ap.add_argument("--batches", nargs="+", type=int, default=[128, 512])
    ap.add_argument("--tokens", type=int, default=4, help="T = 1 + drafts")
    ap.add_argument("--accepted", type=int, default=None, help="tokens accepted a step (default: T)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_state_apart.json"))
    ap.add_argument("--settings", type=int, default=len(SETTINGS),
                    help="time only the first N settings (1: split_fold 2; 2: and the default)")
    ap.add_argument("--pdl", action="store_true",
                    help="time each split_fold 3 setting with and without the state product as a programmatic "
                         "dependent launch of the ring part (ops/gdn/spec.py: GDN_SPEC_PDL; default: the module's)")
    ap.add_argument("--profile", action="store_true",
                    help="then print each launch's time per call (torch.profiler) under the first split_fold 3 setting")
    args = ap.parse_args()
    records, default_pdl = [], gdn_spec.GDN_SPEC_PDL
    for batch in args.batches:
        rig = make_spec_rig(SpecCase(args.model, model(args.model).geom, batch, args.tokens, 16,
                                     args.accepted or args.tokens))
        for cfg, sp, rp in SETTINGS[:args.settings]:
            if sp is not None:
                apply_setting(sp, rp)
            for pdl in ((False, True) if args.pdl and sp is not None else (default_pdl,)):
                gdn_spec.GDN_SPEC_PDL = pdl
                records.append(probe_record(rig, cfg, args.steps, args.replays, state_product=sp, ring_part=rp,
                                            pdl=pdl and sp is not None and gdn_spec.programmatic_launch(
                                                torch.device("cuda"), batch * rig.case.geom.num_v_heads)))
            gdn_spec.GDN_SPEC_PDL = default_pdl
        if args.profile:
            profile_launches(rig, SETTINGS[1], args.steps)
        rig = None  # (frees the layers before the next batch)
        torch.cuda.empty_cache()
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(tabulate([[r["batch"], r["acceptance"], r["config"]["split_fold"], r["config"]["block_p"],
                     r["config"]["num_warps"], r["state_product"], r["ring_part"], r["pdl"], r["us_per_step"]]
                    for r in records],
                   headers=["batch", "accepted", "split_fold", "rows", "warps", "state product (rows, cols, warps, "
                            "stages, precision)", "ring part (rows, warps, heads, precision)", "PDL",
                            "us / verify step"]))


if __name__ == "__main__":
    main()
