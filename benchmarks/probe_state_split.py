#!/usr/bin/env python3
"""Speculative verify: the fp32 state's product with the bf16 drafts (Mamba2 ``S_0 C^T``, GDN
``S_0 X``) in three bf16 pieces (``STATE_SPLIT_BF16``, three bf16 passes of k = 16) against
two TF32 pieces (two TF32 passes of k = 8). Per family and launch config: us a verify step
(T = 4, batch 128, all accepted; ``bench_spec.py``'s rig), and the largest relative
difference of one verify's outputs between the two forms.

    python benchmarks/probe_state_split.py   # H200 -> benchmarks/results/spec_state_split.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import trtllm_replayssm.ops.gdn.spec as gdn_spec
import trtllm_replayssm.ops.mamba2.spec as m2_spec
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig

CASES = {
    "nemotron-3-super": (m2_spec, [LaunchConfig(16, 1, heads_per_prog=16, split_fold=1),
                                   LaunchConfig(32, 2, heads_per_prog=16, split_fold=1),
                                   LaunchConfig(16, 1, heads_per_prog=4, split_fold=1),
                                   LaunchConfig(32, 2, heads_per_prog=4, split_fold=1)]),
    "qwen3.5-122b": (gdn_spec, [LaunchConfig(128, 4, heads_per_prog=4, split_fold=2, key_chunk=32),
                                LaunchConfig(64, 2, heads_per_prog=4, split_fold=2, key_chunk=32),
                                LaunchConfig(128, 4, heads_per_prog=4, split_fold=2, key_chunk=64)]),
}


def one_verify(rig) -> torch.Tensor:
    """The outputs of one verify of layer 0 from fixed cursors (no flush)."""
    rig.wp.fill_(8)
    rig.flush.zero_()
    rig.replay_layer(0)
    return rig.step["out"].float().clone()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=list(CASES))
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--replays", type=int, default=10)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/spec_state_split.json"))
    args = ap.parse_args()
    records = []
    for name in args.models:
        module, configs = CASES[name]
        rig = make_spec_rig(SpecCase(name, model(name).geom, 128, 4, 16, 4))
        for cfg in configs:
            rig.config = cfg
            outs = {}
            for split in (False, True):
                module.STATE_SPLIT_BF16 = split
                outs[split] = one_verify(rig)
                us = rig.time_us(rig.replay_fn(args.steps), args.steps, args.replays)
                records.append(dict(gpu=torch.cuda.get_device_name(), model=name, batch=128, T=4, acceptance=4,
                                    state_split="bf16x3" if split else "tf32x2", config=cfg.to_dict(),
                                    us_per_step=round(us, 1), commit=git_commit()))
                print(records[-1], flush=True)
            diff = ((outs[True] - outs[False]).abs().max() / outs[False].abs().max()).item()
            records[-1]["max_rel_diff_vs_tf32x2"] = diff
            print("max relative difference", diff, flush=True)
            Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
        module.STATE_SPLIT_BF16 = False
        del rig
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
