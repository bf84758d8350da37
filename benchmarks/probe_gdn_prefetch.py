#!/usr/bin/env python3
"""The GDN non-flush launch's loop over blocks of value rows: staged by Triton's pipeliner
(``LOOP_STAGES``: cp.async into shared memory, read back in the ring tile's layout) or
with the next block's tiles loaded into registers one block ahead (config ``prefetch``).

Nsight Compute on the staged launch (Qwen3.5-122B, batch 128, fp32 state): 89% of the
L1/shared-memory throughput, 30 M of its 33 M wavefronts shared memory, mio_throttle the
main stall; DRAM at 62%. This times each non-flush launch config of the tuning sweep
under each loop form (the tuned fold launch beside it): the non-flush step alone and the
whole cycle (same method as ``bench_gdn_ar.py``).

    python benchmarks/probe_gdn_prefetch.py        # -> benchmarks/results/gdn_nonflush_prefetch.json
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch

from trtllm_replayssm.benchmarking.gdn_ar import GDNCase, candidate_configs, make_gdn_rig
from trtllm_replayssm.benchmarking.records import REPO, ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.models import model
from trtllm_replayssm.ops.gdn import replay
from trtllm_replayssm.ops.launch import LaunchConfig, device_table_tag, select_config

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
FORMS = {"staged": (0, 2), "plain": (0, None), "prefetch": (1, None)}  # (config prefetch, LOOP_STAGES)


def set_form(form: str, cfg: LaunchConfig) -> LaunchConfig:
    """``cfg`` in loop form ``form`` (sets the module's stages)."""
    prefetch, replay.LOOP_STAGES[replay.NONFLUSH.value] = FORMS[form]
    return replace(cfg, prefetch=prefetch)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", nargs="+", default=["qwen3.5-122b", "qwen3.5-4b"])
    ap.add_argument("--cases", nargs="+", default=["fp32:128", "fp32:512", "bf16:512"],
                    help="state_dtype:batch")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--max-warps", type=int, default=2, help="non-flush configs of at most this many warps")
    ap.add_argument("--configs", nargs="+", default=None,
                    help="non-flush configs block_p,num_warps,loop_blocks (default: the sweep's)")
    ap.add_argument("--out", default=str(REPO / "benchmarks/results/gdn_nonflush_prefetch.json"))
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name in args.models:
        geom = model(name).geom
        for spec in args.cases:
            sd, batch = spec.split(":")
            rig = make_gdn_rig(GDNCase(name, geom, int(batch), 16, DTYPES[sd]))
            std = rig.time_cycle_us(Launch("standard"), args.replays)
            tuned = select_config("output_only", device_table_tag(rig.cache.ssm_state.device), DTYPES[sd],
                                  torch.bfloat16, geom.head_v_dim, geom.head_k_dim, int(batch), family="gdn",
                                  nheads=geom.num_v_heads)
            configs = ([LaunchConfig(*map(int, c.split(",")[:2]), loop_blocks=int(c.split(",")[2])) for c in args.configs]
                       if args.configs else [c for c in candidate_configs("output_only", geom.head_v_dim)
                                             if c.num_warps <= args.max_warps and not c.prefetch])
            for label, cfg in [("tuned", tuned)] + [(None, c) for c in configs]:
                for form in FORMS:
                    lc = Launch("output_only", set_form(form, cfg))
                    try:
                        us, nonflush = rig.time_cycle_us(lc, args.replays), rig.time_step_us(lc, 8, args.replays)
                    except Exception as e:  # a config the compiler rejects (resources)
                        print(name, spec, cfg, form, type(e).__name__, flush=True)
                        continue
                    finally:
                        set_form("staged", cfg)
                    log.add(model=name, state_dtype=sd, batch=int(batch), L=16, form=form,
                            config=label or lc.config.to_dict(), us_per_step=round(us, 2),
                            standard_us_per_step=round(std, 2), speedup=round(std / us, 3),
                            nonflush_us=round(nonflush, 1))
            del rig
            torch.cuda.empty_cache()
    log.print_table()


if __name__ == "__main__":
    main()
