"""The fold launch on a side stream beside the non-flush launch (``launch.FOLD_SIDE_STREAM``).

The output_only route's two launches serve disjoint rows and only read the cursors, so
the fold may run on a second stream: forked from the caller's stream (an event) before
the non-flush launch, joined back (an event) after it. Under CUDA-graph capture the fork
and the join become edges of the graph, with no host synchronisation; every tensor the
fold touches belongs to the caller, whose stream waits for the fold before it goes on.
The AOT build records such a launch on ``meta`` tensors: there it only marks the launch
(:func:`launching_on_side_stream`), and the C library makes the same fork and join.
"""

from __future__ import annotations

from typing import Callable, Dict

import torch

_side_streams: Dict[int, torch.cuda.Stream] = {}
_marking_side = False


def launching_on_side_stream() -> bool:
    """Whether the launch being made goes on the side stream (what a launcher that records
    launches, such as the AOT build's, stores with it)."""
    return _marking_side


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """This process's side stream for ``device`` (made once)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _side_streams:
        _side_streams[index] = torch.cuda.Stream(device=index)
    return _side_streams[index]


def launch_fold_beside(fold: Callable[[], None], nonflush: Callable[[], None], device: torch.device,
                       beside: bool) -> None:
    """Make a step's non-flush launch ``nonflush()`` and fold launch ``fold()``: one after
    the other on the current stream, or (``beside``) the fold first on the side stream and
    the non-flush launch on the current one, which then waits for the fold."""
    global _marking_side
    if not beside:
        nonflush()
        fold()
        return
    if device.type != "cuda":  # recorded, not run (the AOT build on meta tensors)
        _marking_side = True
        try:
            fold()
        finally:
            _marking_side = False
        nonflush()
        return
    main = torch.cuda.current_stream(device)
    side = side_stream(device)
    side.wait_stream(main)
    with torch.cuda.stream(side):
        fold()
    nonflush()
    main.wait_stream(side)
