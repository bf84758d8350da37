"""Standard vs ReplaySSM decode of one hybrid decoder, side by side in one process."""

from __future__ import annotations

from typing import Dict

import torch

from .model import HybridDecoder
from .runner import DecodeRunner


def _runner(model: HybridDecoder, batch: int, replay: bool, **runner_kw) -> DecodeRunner:
    """A runner, captured in a CUDA graph where there is a GPU."""
    r = DecodeRunner(model, batch, replay, **runner_kw)
    if torch.cuda.is_available():
        r.capture()
    return r


def compare_paths(model: HybridDecoder, batch: int, warmup_steps: int, num_steps: int, **runner_kw) -> Dict:
    """ms/step of the standard and the ReplaySSM path (one CUDA graph each on a GPU) and
    the relative L2 error of their last logits after the warm-up, where the ReplaySSM path
    was fed the standard path's tokens (random weights make greedy near-ties common). The
    warm-up runs eagerly (with ``staggered``, it spreads the ReplaySSM path's cursors:
    :class:`DecodeRunner`), then each path is captured and timed; ``num_steps`` 0: no timing
    (the ms entries are None)."""
    ms, logits, fed = {}, {}, None
    for replay in (False, True):
        r = DecodeRunner(model, batch, replay, **runner_kw)
        chosen = r.run(warmup_steps, feed=fed)
        fed = fed or chosen
        logits[replay] = r.logits.float().clone()
        if num_steps and torch.cuda.is_available():
            r.capture()
        ms[replay] = r.time_ms_per_step(num_steps) if num_steps else None
        del r
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    err = ((logits[True] - logits[False]).norm() / logits[False].norm()).item()
    return {"standard_ms": ms[False], "replay_ms": ms[True], "logits_rel_err": err}


def step_shares(model: HybridDecoder, batch: int, num_steps: int, **runner_kw) -> Dict[str, float]:
    """Share of the standard path's step time spent in each block kind: the step timed
    whole and with the blocks of one kind left out (``model.skip``)."""
    def ms(skip: set) -> float:
        model.skip = skip
        try:
            r = _runner(model, batch, False, **runner_kw)
            r.run(2)
            return r.time_ms_per_step(num_steps)
        finally:
            model.skip = set()

    full = ms(set())
    return {f"{kind}_share": round(max(0.0, 1 - ms({kind}) / full), 3) for kind in ("attention", "mlp", "ssm")}
