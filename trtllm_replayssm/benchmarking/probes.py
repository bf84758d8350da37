"""What the model-level probes in ``benchmarks/`` share: their case arguments and the loop
over one cycle rig a case (``rigs.make_model_rig``)."""

from __future__ import annotations

import argparse
import itertools
from typing import Iterator, Sequence, Tuple

import torch

from .records import REPO
from .rig import CycleRig
from .rigs import make_model_rig

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


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
