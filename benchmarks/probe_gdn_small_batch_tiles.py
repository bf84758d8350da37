#!/usr/bin/env python3
"""GDN launch shapes the tuner does not try, tuned beside the ones it does (batch 8-32).

At batch 8 the GDN non-flush launch is under half a wave and its fold's flush step costs
2x a standard step, both latency-bound (benchmarks/README.md, GDN section, "Small
batches"). These sets of shapes were left out of ``benchmarking.gdn_ar.CANDIDATES``
without a measurement; this adds the ones named to the candidate lists and runs
``bench_gdn_ar.py`` (its arguments pass through) with them:

- ``nonflush``: prefetching tiles with more bytes in flight a program (16 or 32 rows a
  block on one or two warps, 4 rows over 16-32 blocks, 8 rows over 2);
- ``fold``: folds on fp32 FMAs (``fold_dot`` 0: rank-1 updates, ``fold_chunk`` ring
  entries loaded together) on small tiles, 64-168 registers a thread where the dot folds
  take 145-233 (``kernel_registers.py --family gdn``);
- ``fold_caps``: the table's one-block dot folds under a register cap of 96;
- ``fold_warps``: one-block dot folds on more warps a row (fewer registers a thread).

``--only-added`` keeps, of the existing list, the non-flush tiles that prefetch or run 8
rows on one warp / the folds without row blocks: they hold the table's picks at batch 8 and
32.

    python benchmarks/probe_gdn_small_batch_tiles.py nonflush --only-added --tune nonflush \
        --state-dtypes fp32 --batches 8 32 --rounds 2 --tried-out T.json --out O.json --table-dir D
    python benchmarks/probe_gdn_small_batch_tiles.py fold --only-added --tune fold ...   # the same for the fold

An **H100** (fp32, side by side in one tuning run a set: the non-flush tiles at cf73e18,
``results/gdn_nonflush_added_tiles_tried_h100.json``; the folds at e12aa75, the same sets
from a scratch form of this script, ``results/gdn_fold_fma_tried_h100.json``): no added
shape won. At all four points the non-flush tuner kept the sm_90 table's tile (8 rows on
one warp), the best added shape 7-11% behind (Qwen3.5-122B batch 8: 19.03 us a cycle
against 20.47, 8 rows over 2 prefetched blocks; batch 32: 61.32 against 67.38, 4 rows over
16). The FMA folds came 1.3-3.1% behind the dot folds at every point (Qwen3.5-122B batch 8:
19.22 against 18.98 us; batch 32: 63.21 against 61.31).

Register caps on the one-block folds (``fold_caps``, 485db3b, the caps of 128 and 96 then
both in the set; ``results/gdn_fold_caps_tried_h100.json``, batch 4, 8 and 32): 128 took
Qwen3.5-122B's batch-8 cycle from 18.96-19.01 to 18.69 us (the flush step 40.6 -> 37.5 in
the side-by-side) and was 0.1-0.3% ahead or behind at four other points, 1.8% behind at
Qwen3.5-4B's batch 8, so it joined the candidates for the tuner to pick where it wins; 96,
which spills, was never ahead. More warps a row (``fold_warps``, 3864fa2,
``results/gdn_fold_warps_tried_h100.json``) did not help: 16 rows on 4 warps within 0.3% of
the best at four points and 1.2% behind at Qwen3.5-122B's batch 8, 32 on 8 0.8-4.7% behind.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

from trtllm_replayssm.benchmarking import gdn_ar
from trtllm_replayssm.ops.launch import LaunchConfig

ADDED = {
    "nonflush": [LaunchConfig(rows, warps, loop_blocks=blocks, prefetch=1)
                 for rows, warps, blocks in [(16, 1, 4), (16, 1, 8), (16, 1, 2), (16, 2, 4), (4, 1, 16), (4, 1, 32),
                                             (32, 2, 2), (32, 2, 4), (8, 1, 2)]],
    "fold": [LaunchConfig(rows, warps, fold_chunk=chunk, fold_dot=0, loop_blocks=blocks)
             for rows, warps, blocks in [(8, 1, 1), (16, 1, 1), (16, 2, 1), (4, 1, 1), (8, 1, 2)] for chunk in (4, 16)],
    # the table's one-block folds under a register cap of 96 (163 / 145 registers a thread;
    # 96-112 bytes spilled), 12 / 14 -> 20 warps an SM (the cap of 128 is a candidate)
    "fold_caps": [LaunchConfig(rows, warps, 1, 1, maxnreg=96) for rows, warps in [(32, 4), (16, 2)]],
    # one-block dot folds on more warps a row: 16 rows on 4 warps (80 registers a thread, 24
    # warps an SM) and 32 on 8 (95, 16), against the table's 32 on 4 (163, 12) and 16 on 2 (145, 14)
    "fold_warps": [LaunchConfig(16, 4, 1, 1), LaunchConfig(32, 8, 1, 1), LaunchConfig(16, 4, 1, 1, loop_blocks=2)],
}
# The gdn_ar.CANDIDATES key each set joins.
CANDIDATE_LIST = {"nonflush": "output_only", "fold": "fold", "fold_caps": "fold", "fold_warps": "fold"}
# ``--only-added``: what a candidate list keeps of its own configs (the table's batch 8-32
# picks among them).
KEPT = {"output_only": lambda c: c.prefetch or (c.block_p, c.num_warps) == (8, 1),
        "fold": lambda c: c.row_block == 1}


def add_candidates(names, only_added: bool) -> None:
    """The sets ``names`` appended to the candidate lists they join (after what each list
    keeps of its own, with ``only_added``)."""
    for key in dict.fromkeys(CANDIDATE_LIST[name] for name in names):
        existing = [c for c in gdn_ar.CANDIDATES[key] if not only_added or KEPT[key](c)]
        gdn_ar.CANDIDATES[key] = existing + [c for name in names if CANDIDATE_LIST[name] == key for c in ADDED[name]]


def main() -> None:
    argv = sys.argv[1:]
    names = []
    while argv and argv[0] in ADDED:
        names.append(argv.pop(0))
    if not names or "-h" in argv[:1]:
        sys.exit(__doc__ + f"\nusage: {Path(sys.argv[0]).name} {{{','.join(ADDED)}}}... [--only-added] "
                 "[bench_gdn_ar.py's arguments]")
    only_added = "--only-added" in argv
    if only_added:
        argv.remove("--only-added")
    add_candidates(names, only_added)
    sys.argv = [str(Path(__file__).with_name("bench_gdn_ar.py"))] + argv
    runpy.run_path(sys.argv[0], run_name="__main__")


if __name__ == "__main__":
    main()
