#!/usr/bin/env python3
"""Mamba2 speculative verify: S_0 C^T as fp32 FMAs over the T tokens (``STATE_ON_FMA``, in
chunks of dstate columns) against two TF32 passes on the tensor cores over a token axis
padded to 16. Super, T = 4, batch 128, all accepted; ``bench_spec.py``'s rig.

    python benchmarks/probe_spec_state_fma.py   # H200 -> benchmarks/results/mamba2_spec_state_fma.json
"""

import json

import torch

import trtllm_replayssm.ops.mamba2.spec as m2
from trtllm_replayssm.benchmarking.records import REPO, git_commit
from trtllm_replayssm.benchmarking.spec import SpecCase, make_spec_rig
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.launch import LaunchConfig

STEPS, REPLAYS, T = 24, 10, 4
rig = make_spec_rig(SpecCase("nemotron-3-super", model("nemotron-3-super").geom, 128, T, 16, T))
runs = [(False, LaunchConfig(16, 1, heads_per_prog=16, split_fold=1))]
runs += [(True, LaunchConfig(b, w, heads_per_prog=h, split_fold=1, key_chunk=c))
         for b, w, h in [(16, 1, 16), (32, 2, 16), (16, 1, 8), (64, 4, 16)] for c in (16, 32, 64)]
records = []
for fma, cfg in runs:
    m2.STATE_ON_FMA = fma
    rig.config = cfg
    us = round(rig.time_us(rig.replay_fn(STEPS), STEPS, REPLAYS), 1)
    records.append(dict(gpu=torch.cuda.get_device_name(), model="nemotron-3-super", batch=128, T=T, acceptance=T,
                        state_on_fma=fma, config=cfg.to_dict(), us_per_step=us, commit=git_commit()))
    print(records[-1], flush=True)
(REPO / "benchmarks/results/mamba2_spec_state_fma.json").write_text(json.dumps(records, indent=1) + "\n")
