"""Timing on the GPU: whole cycles captured in CUDA graphs, cold L2, medians.

Method (``replayssm.md`` section 6): capture the work in a CUDA graph, replay it many
times timed with CUDA events, take the median; rotate over enough distinct layer
states that the L2 never holds them; measure copy bandwidth in the same process.

Without a CUDA device the same calls run the work eagerly (Triton's interpreter) and time
it with the host clock: meaningless as figures, but it lets CI run the benchmark scripts
end to end on a tiny geometry (``--dry-run``) so they cannot rot between GPU sessions.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable, List, Union

import torch


class EagerGraph:
    """Stand-in for a captured graph where there is no CUDA device: replays ``fn`` eagerly."""

    def __init__(self, fn: Callable[[], None]):
        self.replay = fn

L2_BYTES_H200 = 60 * 2**20


def layers_for_cold_l2(bytes_per_layer: int, min_layers: int = 2, l2_bytes: int = L2_BYTES_H200) -> int:
    """How many distinct layer states to rotate over so each step misses the L2."""
    need = -(-4 * l2_bytes // max(bytes_per_layer, 1))
    return max(min_layers, need)


def capture(fn: Callable[[], None], warmup: int = 1) -> Union[torch.cuda.CUDAGraph, EagerGraph]:
    """Capture ``fn`` in a graph after ``warmup`` eager runs on a side stream."""
    if not torch.cuda.is_available():
        return EagerGraph(fn)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    torch.cuda.synchronize()
    return g


def time_graph_ms(g: torch.cuda.CUDAGraph, replays: int = 20, warmup: int = 3) -> float:
    """Median milliseconds of one replay."""
    if isinstance(g, EagerGraph):
        times = []
        for _ in range(min(replays, 2)):
            t0 = time.perf_counter()
            g.replay()
            times.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(times)
    for _ in range(warmup):
        g.replay()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(replays)]
    for s, e in zip(starts, ends):
        s.record()
        g.replay()
        e.record()
    torch.cuda.synchronize()
    times: List[float] = [s.elapsed_time(e) for s, e in zip(starts, ends)]
    return statistics.median(times)


def copy_bandwidth_gbps(sizes=(256 * 2**20, 1 * 2**30), copies: int = 8, replays: int = 20) -> float:
    """Device-to-device copy bandwidth, bytes read plus bytes written, in GB/s: the best
    over a few buffer sizes (each well past the L2), copies rotating over buffers."""
    if not torch.cuda.is_available():
        return float("nan")
    best = 0.0
    for nbytes in sizes:
        bufs = [torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_() for _ in range(2)]

        def run(src=bufs[0], dst=bufs[1]):
            for i in range(copies):
                (dst, src)[i % 2].copy_((src, dst)[i % 2])

        ms = time_graph_ms(capture(run), replays)
        best = max(best, 2 * nbytes * copies / (ms * 1e-3) / 1e9)
    return best
