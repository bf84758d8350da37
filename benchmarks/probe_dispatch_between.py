#!/usr/bin/env python3
"""The dispatcher at batch sizes between the tuned table's points, against baselines tuned there.

The table holds rows at its batch points (``ops.launch.BATCH_POINTS``); at any other
batch size the dispatcher takes the route and configs of the row nearest in work
(``ops.launch._lookup``), and the AOT library its nearest batch point. This checks the
issues' "the dispatcher's choice >= 0.97x of the standard kernel at every batch size"
where no row was measured: for each case the standard kernel and the flush-every-step
launches are tuned at that batch size (as ``bench_*_ar.py`` tunes them; fla-core too
where importable), then timed side by side with the committed table's route (``auto``)
in both phases (``replayssm.md`` section 6). Nothing is written to the table. Each record
keeps the config of the launch the dispatcher ran (``auto_config``), the standard kernel's
config tuned at this batch size (``standard_config``), and the standard kernel's table configs
at the batch points either side, each with its time here (``neighbour_configs``): which
neighbour's config, if either, a batch size between them should take.

    python benchmarks/probe_dispatch_between.py   # -> benchmarks/results/dispatch_between.json

The committed file holds four runs (its ``table`` field): ``--batches 4 16 64 192`` on
00d7c63's table, whose points were 1, 8, 32, 128, 256 and 512; ``--batches 4`` on the
table with the batch-4 rows that run led to; ``--models nemotron-3-super
nemotron-3-nano-4b --batches 2 6 16`` after the always_flush drain change (db2240d); and
``--models nemotron-3-super --state-dtypes bf16 --batches 6 16`` with ``--models
qwen3.5-122b --state-dtypes bf16 --batches 2`` on ef969b3's table.
"""

from __future__ import annotations

import argparse
import dataclasses

from trtllm_replayssm.benchmarking.gdn_ar import GDNRig, tune_gdn_case
from trtllm_replayssm.benchmarking.mamba2_ar import tune_case
from trtllm_replayssm.benchmarking.probes import add_case_args, case_rigs
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch, fastest_baseline, launches_on, time_phases_side_by_side
from trtllm_replayssm.ops.launch import BATCH_POINTS, LaunchConfig, config_kernel, device_table_tag, select_config

MODELS = ["nemotron-3-super", "nemotron-3-nano-4b", "qwen3.5-4b", "qwen3.5-122b"]


def tune_baselines(rig) -> dict:
    """The standard kernel and ``always_flush`` tuned at this case's batch size, as
    ``bench_*_ar.py`` tunes them (``{kernel: {"config", "us", "tried"}}``)."""
    tune = tune_gdn_case if isinstance(rig, GDNRig) else tune_case
    return tune(rig, kernels=("standard", "always_flush"))


def baseline_launches(rig, best: dict) -> dict:
    """The baselines of ``bench_*_ar.py`` on the configs of :func:`tune_baselines`."""
    launches = launches_on(best, ("standard", "standard_step", "always_flush"))
    if getattr(rig, "fla", None) is not None:
        launches["fla"] = Launch("fla")
    return launches


def short(cfg: LaunchConfig) -> dict:
    """A config's fields that differ from their defaults (``block_p`` and ``num_warps``
    always): what a record needs to tell configs apart."""
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)
            if f.default is dataclasses.MISSING or getattr(cfg, f.name) != f.default}


def neighbour_configs(rig, arch: str, tuned: dict) -> dict:
    """The standard kernel's table config at the batch points below and above this case's
    batch size, each with its time at this batch size from the tuner's tries (None where
    it was not a candidate): ``{point: {"config": ..., "us": ...}}``."""
    c, batch = rig.case, rig.case.batch
    points = [max((p for p in BATCH_POINTS if p < batch), default=None),
              min((p for p in BATCH_POINTS if p > batch), default=None)]
    out = {}
    for p in (p for p in points if p is not None):
        cfg = select_config("standard", arch, c.state_dtype, c.act_dtype, batch=p, **rig.table_shape())
        full = cfg.to_dict()
        us = next((t["us"] for t in tuned["tried"] if "us" in t and {k: t[k] for k in full} == full), None)
        out[p] = {"config": short(cfg), "us": None if us is None else round(us, 2)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, MODELS, [2, 6, 16, 64, 192], "dispatch_between.json")
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, sd, batch, rig in case_rigs(args):
        arch = device_table_tag(rig.cache.write_pos.device)
        route = rig.table_route(arch)
        best = tune_baselines(rig)
        launches = {**baseline_launches(rig, best), "auto": Launch(route)}
        by_phase = time_phases_side_by_side(rig, launches, args.replays, args.rounds)
        aligned, staggered = by_phase["aligned"], by_phase["staggered"]
        base = fastest_baseline(aligned)
        log.add(model=name, state_dtype=sd, batch=batch, L=16, route=route, baseline=base,
                baseline_us_per_step=round(aligned[base], 2),
                standard_us_per_step=round(aligned["standard"], 2),
                auto_us_per_step=round(aligned["auto"], 2),
                auto_staggered_us_per_step=round(staggered["auto"], 2),
                speedup=round(aligned[base] / aligned["auto"], 3),
                staggered_speedup=round(aligned[base] / staggered["auto"], 3),
                auto_config=short(rig.table_configs(arch)[config_kernel(route)]["config"]),
                standard_config=short(best["standard"]["config"]),
                neighbour_configs=neighbour_configs(rig, arch, best["standard"]))
        del rig
    log.print_table()

if __name__ == "__main__":
    main()
