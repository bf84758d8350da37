"""What the model-level probes in ``benchmarks/`` share: their case arguments and the loop
over one cycle rig a case (``rigs.make_model_rig``)."""

from __future__ import annotations

import argparse
import itertools
from typing import Callable, Iterator, Sequence, Tuple

import torch

from ..ops.gdn import replay as gdn_replay
from ..ops.mamba2 import replay as mamba2_replay
from ..ops.mamba2 import replay_fold
from .records import REPO
from .rig import CycleRig
from .rigs import make_model_rig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}  # (records and reports name dtypes so)


def add_case_args(ap: argparse.ArgumentParser, models: Sequence[str], batches: Sequence[int], out: str) -> None:
    """``--models``, ``--batches``, ``--state-dtypes``, ``--replays``, ``--rounds`` and ``--out``
    (a file name under ``benchmarks/results/``)."""
    ap.add_argument("--models", nargs="+", default=list(models))
    ap.add_argument("--batches", nargs="+", type=int, default=list(batches))
    ap.add_argument("--state-dtypes", nargs="+", default=["fp32", "bf16"], choices=sorted(DTYPES))
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=str(REPO / "benchmarks/results" / out))


def case_rigs(args: argparse.Namespace, buffer_len: int = 16) -> Iterator[Tuple[str, str, int, CycleRig]]:
    """``(model, state dtype, batch, rig)`` for every case of :func:`add_case_args`' arguments;
    each rig's memory goes back to the allocator before the next one is built (drop your
    own references to it, such as timers that hold it, before asking for the next)."""
    for name, dtype, batch in itertools.product(args.models, args.state_dtypes, args.batches):
        yield name, dtype, batch, make_model_rig(name, batch, buffer_len, DTYPES[dtype])
        torch.cuda.empty_cache()


def is_fold_launch(kernel, kwargs) -> bool:
    """Whether a launch is the output_only route's fold launch (either family)."""
    return kernel is replay_fold._replay_fold_kernel or (
        kernel is gdn_replay._gdn_replay_kernel and kwargs.get("MODE") == gdn_replay.FOLD.value)


def is_nonflush_launch(kernel, kwargs) -> bool:
    """Whether a launch is the output_only route's non-flush launch (either family)."""
    return ((kernel is mamba2_replay._replay_step_kernel and kwargs.get("MODE") == mamba2_replay.NONFLUSH.value)
            or (kernel is gdn_replay._gdn_replay_kernel and kwargs.get("MODE") == gdn_replay.NONFLUSH.value))


class SkipLaunches:
    """A launcher (``ops.launch.launcher_in_front``) that drops the launches ``matches``
    picks (:func:`is_fold_launch`, :func:`is_nonflush_launch`): a probe's bound on the rest."""

    def __init__(self, matches: Callable[[object, dict], bool]):
        self.matches = matches

    def __call__(self, kernel, grid, kwargs) -> bool:
        return self.matches(kernel, kwargs)
