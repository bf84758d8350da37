"""Compile a tuning run's candidate launches in parallel before it times them.

Triton compiles one kernel at a time in a process, and a tuner meets each candidate
first inside its timing loop, so its compiles run one after another (GDN on the H200 at
batch 2, every launch tuned: Qwen3.5-4B's fp32 case, the run's first, took 164 s, and
Qwen3.5-122B's after it, twice the work, 104 s on the warm cache; 4B's bf16 case, first of
its dtype, 275 s). Worker processes that launch every candidate once fill Triton's disk
cache, which the tuning process then reads.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import time
from typing import Callable, Iterable, List, Mapping, Sequence

import torch

from ..ops.launch import LaunchConfig
from .rig import CycleRig, Launch


# The candidate lists (the families' ``CANDIDATES`` keys) that a ``--tune`` name sweeps
# (``TUNABLE``; a name not here sweeps its own list).
_SWEPT = {"replay": ("fold", "output_only"), "nonflush": ("output_only",)}


def swept_kernels(tune: Iterable[str]) -> List[str]:
    """The ``CANDIDATES`` keys whose configs tuning ``tune`` times."""
    return sorted({kernel for name in tune for kernel in _SWEPT.get(name, (name,))})


def launch_each_candidate(rig: CycleRig, candidates: Mapping[str, Sequence[LaunchConfig]]) -> int:
    """One layer-step of ``rig`` on every config of every kernel (a ``fold`` config under
    the table's non-flush launch), then a cursor advance (which compiles too); returns how
    many launched. A config the compiler rejects is skipped, as the tuner skips it."""
    launched = 0
    for kernel, configs in candidates.items():
        for cfg in configs:
            launch = Launch("output_only", None, cfg) if kernel == "fold" else Launch(kernel, cfg)
            try:
                rig.layer_step(launch, 0)
                launched += 1
            except Exception:
                pass
    rig.cache.advance(rig.slot_idx)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return launched


def warm_compile(warm_group: Callable[[tuple], int], groups: Iterable[tuple], workers: int) -> None:
    """Run ``warm_group`` (a module-level function, as a spawned worker imports it) on each
    group in ``workers`` processes and print how many launches compiled and how long it took."""
    groups = sorted(set(groups), key=repr)
    t = time.time()
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn")) as ex:
        launched = sum(ex.map(warm_group, groups))
    print(f"warm compile: {launched} launches in {len(groups)} groups, {time.time() - t:.0f}s", flush=True)
