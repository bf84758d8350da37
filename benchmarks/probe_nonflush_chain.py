#!/usr/bin/env python3
"""Where a Mamba2 non-flush step's time goes beyond its bytes (the batch-32 item of the
open performance work in ``benchmarks/README.md``).

At batch 32 the non-flush step costs ~15 us more than its checkpoint bytes at copy
bandwidth, against ~3 us for the standard kernel. This times one step with every cursor
at ``w`` (so the ring holds ``w`` entries: ``w = 0`` reads no ring), the package's tuned
configs, same method as the benchmarks (CUDA graph, cold L2, median), in three forms:

- ``package``: the non-flush launch and the fold launch, as a step runs them;
- ``alone``: the fold launch skipped (the non-flush launch's own time);
- ``alone_no_slot_idx``: that, with the slot indices dropped (``HAS_SLOT_IDX`` off: the
  row's slot is its batch index, one dependent load less before the cursor).

Beside them the standard kernel's step; ``moved_gbps``: the state bytes a step moves (the
checkpoint read; the standard step's read and write) over its time.
The time's growth with ``w`` is the ring walk's; what ``w = 0`` costs beyond the bytes is
the program's fixed chain (slot, cursor, tile) and the launch.

    python benchmarks/probe_nonflush_chain.py    # -> benchmarks/results/nonflush_chain.json
    python benchmarks/probe_nonflush_chain.py --forms alone --configs table 32,1,4,0 32,1,2,1   # prefetch: eab4a76

``--configs``: the non-flush launch's configs to time (``table``: the tuned one;
``block_p,num_warps,fold_chunk,prefetch`` otherwise; the Mamba2 kernel has taken no
``prefetch`` since 530ac5c, the chunked-tile form of eab4a76 having lost).
"""

from __future__ import annotations

import argparse
import itertools

from trtllm_replayssm.benchmarking.probes import SkipLaunches, add_case_args, case_rigs, is_fold_launch, is_nonflush_launch
from trtllm_replayssm.benchmarking.records import ProbeLog
from trtllm_replayssm.benchmarking.rig import Launch
from trtllm_replayssm.ops.launch import LaunchConfig, launcher_in_front

FORMS = ("package", "alone", "alone_no_slot_idx")


def drop_slot_indices(kernel, grid, kwargs) -> bool:
    """A launcher in front that turns the non-flush launch's slot indices off (the rig's
    slots are the batch rows in order, so the same state rows are read) and lets it run."""
    if is_nonflush_launch(kernel, kwargs):
        kwargs["HAS_SLOT_IDX"] = False
    return False


def front(form: str):
    if form == "package":
        return None
    skip_fold = SkipLaunches(is_fold_launch)
    if form == "alone":
        return skip_fold
    return lambda kernel, grid, kwargs: skip_fold(kernel, grid, kwargs) or drop_slot_indices(kernel, grid, kwargs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_case_args(ap, ["nemotron-3-nano-4b", "nemotron-3-super"], [8, 32, 128], "nonflush_chain.json")
    ap.add_argument("--cursors", nargs="+", type=int, default=[0, 1, 4, 8, 14])
    ap.add_argument("--forms", nargs="+", default=list(FORMS), choices=FORMS)
    ap.add_argument("--configs", nargs="+", default=["table"])
    ap.set_defaults(state_dtypes=["fp32"])
    args = ap.parse_args()
    log = ProbeLog(args.out)
    for name, dtype, batch, rig in case_rigs(args):
        gb = rig.case.state_bytes / 1e9
        std = rig.time_step_us(Launch("standard"), 0, args.replays)
        log.add(model=name, state_dtype=dtype, batch=batch, form="standard", w=None, us=round(std, 2),
                moved_gbps=round(2 * gb / std * 1e6, 1))
        for form, config in itertools.product(args.forms, args.configs):
            cfg = None if config == "table" else LaunchConfig(*map(int, config.split(",")[:3]),
                                                              prefetch=int(config.split(",")[3]))
            with launcher_in_front(front(form)):
                for w in args.cursors:
                    us = rig.time_step_us(Launch("output_only", cfg), w, args.replays)
                    log.add(model=name, state_dtype=dtype, batch=batch, form=form, config=config, w=w,
                            us=round(us, 2), moved_gbps=round(gb / us * 1e6, 1))
        del rig
    log.print_table()


if __name__ == "__main__":
    main()
