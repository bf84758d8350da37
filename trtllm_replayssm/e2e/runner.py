"""Greedy decode loops over the hybrid decoder, eager or captured in one CUDA graph per
batch size (cursors and positions move on the device inside the graph)."""

from __future__ import annotations

from typing import List, Optional

import time

import torch

from ..benchmarking.rig import even_phases
from ..benchmarking.spec import flush_period
from ..benchmarking.timing import capture
from ..ops.cursors import FLUSH_EVERY_STEP
from ..ops.launch import device_table_tag, select_route
from .model import DecodeCaches, HybridDecoder, StepContext


def resolve_route(cfg, batch: int, state_dtype: torch.dtype, act_dtype: torch.dtype, device) -> str:
    """The dispatcher's route for this model's SSM layers at this batch size."""
    g = cfg.ssm
    inner = (g.head_v_dim, g.head_k_dim) if cfg.family == "gdn" else (g.headdim, g.dstate)
    nheads = g.num_v_heads if cfg.family == "gdn" else g.nheads
    return select_route(device_table_tag(torch.device(device)), state_dtype, act_dtype, *inner, batch,
                        family=cfg.family, nheads=nheads)


class DecodeRunner:
    """One batch of ``batch`` requests decoding greedily from a random prompt.

    ``num_tokens = T > 1``: speculative decode. Each step verifies the last chosen token
    plus ``T - 1`` synthetic drafts and accepts ``accepted`` tokens per row (bonus
    included), a fixed pattern: it measures throughput, not draft quality. ``buffer_len``
    is then the history budget Bh.

    ``staggered``: the requests' cursors are spread over their flush period, as in a
    server whose requests entered decode at different steps, instead of all starting
    together after the prefill. The first steps, which run eagerly (before
    :meth:`capture`), do it:
    - autoregressive ReplaySSM on a ring route: over the first L steps each row's ring is
      force-flushed once, at the step that leaves it at its phase (seeded at random, 1/L
      of the rows at each); the standard path has no phase;
    - speculative (both paths, so that they keep choosing the same tokens): row r accepts
      one token a step for its first ``n_r`` steps, then ``accepted``, which puts it
      ``n_r (accepted - 1)`` tokens behind, ``n_r`` spread over one flush period's worth."""

    def __init__(self, model: HybridDecoder, batch: int, replay: bool, max_len: int, buffer_len: int = 16,
                 state_dtype: torch.dtype = torch.float32, route: str = "output_only", prompt_len: int = 4,
                 seed: int = 0, num_tokens: int = 1, accepted: Optional[int] = None, staggered: bool = False):
        self.model, self.batch = model, batch
        dev = model.embed.device
        self.caches: DecodeCaches = model.make_caches(batch, max_len, buffer_len, state_dtype, num_tokens, replay)
        if route == "auto":  # resolved once here: the kernels and the cursor advance must agree
            route = resolve_route(model.cfg, batch, state_dtype, model.embed.dtype, dev)
        acc = torch.full((batch,), accepted or num_tokens, dtype=torch.int32, device=dev)
        self.ctx = StepContext(torch.arange(batch, dtype=torch.int32, device=dev), replay, route, num_tokens, acc)
        g = torch.Generator(device="cpu").manual_seed(seed)
        prompt = torch.randint(0, model.cfg.vocab, (batch, prompt_len), generator=g).to(dev)
        first = model.prefill(prompt, self.caches).argmax(-1)
        self.tokens = torch.empty(batch, num_tokens, dtype=torch.long, device=dev)  # the graph's static input
        self._set_tokens(first)
        self.logits: Optional[torch.Tensor] = None  # (B, T, vocab) of the last step
        self.graph = None
        self._stagger_flags = self._staggering(staggered, buffer_len, seed) if replay and num_tokens == 1 else []
        self._accepted = accepted or num_tokens
        self._accept_schedule = (self._spec_staggering(staggered, buffer_len, seed) if num_tokens > 1 else [])

    def _staggering(self, staggered: bool, L: int, seed: int) -> List[torch.Tensor]:
        """Force-flush flags of the first L steps: row r at step ``L - 1 - phase_r``, so that
        after L steps its cursor is at ``phase_r`` (a flush leaves it at 0)."""
        if not staggered or self.ctx.route in FLUSH_EVERY_STEP:
            return []
        phases = even_phases(self.batch, L, seed + 1).to(self.ctx.slots.device)
        return [(phases == L - 1 - k).to(torch.int8) for k in range(L)]

    def _spec_staggering(self, staggered: bool, history_len: int, seed: int) -> List[torch.Tensor]:
        """Tokens accepted per row over the first steps (one while a row is held back)."""
        a, T = self._accepted, self.tokens.shape[1]
        if not staggered or a < 2:
            return []
        steps = -(-flush_period(T, history_len, a) * a // (a - 1))  # steps that hold a row back a period
        held = even_phases(self.batch, steps, seed + 1).to(self.ctx.slots.device)
        return [torch.where(held > k, 1, a).to(torch.int32) for k in range(steps)]

    def _set_tokens(self, first: torch.Tensor) -> None:
        """Next verify input: the chosen token, then synthetic drafts."""
        T = self.tokens.shape[1]
        drafts = (first[:, None] + 1 + torch.arange(T - 1, device=first.device)[None, :]) % self.model.cfg.vocab
        self.tokens.copy_(torch.cat([first[:, None], drafts], dim=1))

    def _step(self) -> None:
        self.logits = self.model.forward_tokens(self.tokens, self.caches, self.ctx)
        self.model.commit(self.caches, self.ctx)
        # The token after the last accepted one: greedy choices of all positions, then the one row's.
        last = (self.ctx.accepted.long() - 1)[:, None]
        self._set_tokens(self.logits.argmax(-1).gather(1, last)[:, 0])

    def _advance(self) -> None:
        """One step: the captured graph where there is one, else eagerly (with the next
        staggering flags while there are any)."""
        if self.graph is not None:
            self.graph.replay()
            return
        self.ctx.force_flush = self._stagger_flags.pop(0) if self._stagger_flags else None
        held_back = bool(self._accept_schedule)
        if held_back:
            self.ctx.accepted.copy_(self._accept_schedule.pop(0))
        self._step()
        self.ctx.force_flush = None
        if held_back:
            self.ctx.accepted.fill_(self._accepted)

    def capture(self) -> None:
        """Record one decode step in a CUDA graph (after a warm-up step outside it)."""
        left = len(self._stagger_flags) + len(self._accept_schedule)
        if left:
            raise RuntimeError(f"capture after the staggering steps ({left} left to run)")
        self.graph = capture(self._step)

    def run(self, steps: int, feed: Optional[List[torch.Tensor]] = None) -> List[torch.Tensor]:
        """``steps`` greedy steps; returns the token chosen at each. With ``feed`` (another
        run's chosen tokens), step ``i + 1`` reads ``feed[i]`` instead of this run's own
        choice (teacher forcing): two paths then see the same inputs even where a near-tie
        in the logits would make free-running greedy decodes part."""
        out = []
        for i in range(steps):
            self._advance()
            out.append(self.tokens[:, 0].clone())
            if feed is not None:
                self._set_tokens(feed[i])
        return out

    def time_ms_per_step(self, steps: int) -> float:
        """Mean milliseconds per decode step over ``steps`` consecutive steps (graph
        replays on a GPU), so ring cycles and their flushes are averaged in."""
        if not torch.cuda.is_available():
            t0 = time.perf_counter()
            self.run(steps)
            return (time.perf_counter() - t0) * 1e3 / steps
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            self._advance()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / steps
