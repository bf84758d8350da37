"""A rig of distinct layers that times whole decode cycles (``replayssm.md`` section 6).

Family-specific rigs (:mod:`.mamba2_ar`, :mod:`.gdn_ar`) allocate the layers and say how
one layer-step is launched; timing, cursor handling and the config sweep live here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ..ops.cursors import FLUSH_EVERY_STEP
from ..ops.launch import LaunchConfig, config_kernel, device_table_tag, select_config, select_route
from .timing import capture, time_graph_ms


def even_phases(count: int, period: int, seed: int) -> torch.Tensor:
    """``count`` phases in ``[0, period)``, as even a spread as ``count`` allows, in a seeded
    random order (CPU int64): where staggered cursors start."""
    return torch.randperm(count, generator=torch.Generator().manual_seed(seed)) % period


# Fold launch candidates both families share: a program looks through a block of batch rows
# (one vector load of their cursors) and folds the ones that flush, over heads_per_prog
# heads and all of a head's blocks of state rows. Many heads over few rows are cheap when
# every row flushes; one or two heads over 8-16 rows suit staggered cursors, where ~1 row
# in 16 flushes at a step, so such a program folds about one row and the fold spreads
# over many programs.
ROW_BLOCK_FOLDS = [LaunchConfig(16, 2, 1, 1, heads_per_prog=heads, loop_blocks=8, row_block=rows)
                   for heads, rows in [(4, 4), (8, 2), (4, 8), (8, 4), (16, 2), (32, 1), (8, 8), (16, 4),
                                       (1, 8), (2, 8), (1, 16), (2, 16), (4, 16)]] + [
    # ``row_progs`` programs a group of heads share the flushing rows of the whole batch
    # (scanning its cursors 128 rows at a time), so the fold spreads evenly over them
    # whether every row flushes or 1 in 16 does (``benchmarks/probe_fold_row_list.py``).
    LaunchConfig(16, 2, 1, 1, heads_per_prog=heads, loop_blocks=blocks, row_block=128, row_progs=progs)
    for heads, progs, blocks in [(1, 8, 8), (2, 8, 8), (1, 16, 8), (2, 16, 8), (1, 32, 8), (2, 32, 8),
                                 # a head's rows over 2-4 programs: staggered, 1 row in 16 flushes, and
                                 # a head's 8 blocks one after another in one program are its fold's latency
                                 (1, 16, 2), (1, 32, 2), (1, 16, 4)]]


@dataclass(frozen=True)
class Launch:
    """A kernel (or replay route) with its launch configs (``None``: the tuned table)."""

    kernel: str
    config: Optional[LaunchConfig] = None
    fold_config: Optional[LaunchConfig] = None


class CycleRig:
    """Subclasses set ``case`` (with ``buffer_len``), ``n_layers``, ``cache`` (with
    ``write_pos`` and ``advance``), ``slot_idx`` and implement :meth:`layer_step` and
    :meth:`table_shape`. Kernels whose name is in ``STATELESS`` keep no ring, so cycles do
    not advance cursors; ``TABLE_KERNELS`` are the launches the family's tuned table holds."""

    STATELESS = ("standard",)
    TABLE_KERNELS: tuple = ()

    def layer_step(self, launch: Launch, layer: int) -> None:
        raise NotImplementedError

    def table_shape(self) -> dict:
        """The dispatcher table's look-up keys of this case: ``headdim``, ``dstate``,
        ``nheads`` and ``family`` as :func:`~trtllm_replayssm.ops.launch.select_config` takes them."""
        raise NotImplementedError

    def table_configs(self, arch: str) -> Dict[str, Dict]:
        """The dispatcher table's configs for this case, in the tuners' form (without
        times): a benchmark can measure a committed table without tuning again."""
        c, shape = self.case, self.table_shape()
        return {k: {"config": select_config(k, arch, c.state_dtype, c.act_dtype, batch=c.batch, **shape)}
                for k in self.TABLE_KERNELS}

    def table_route(self, arch: str) -> str:
        """The route the dispatcher's table picks for this case (what ``route="auto"`` runs)."""
        c = self.case
        return select_route(arch, c.state_dtype, c.act_dtype, batch=c.batch, **self.table_shape())

    def baseline_launch(self) -> Launch:
        """The faster standard baseline this rig has (a family may have more than the
        in-tree standard kernel)."""
        return Launch("standard")

    def cycle_fn(self, launch: Launch) -> Callable[[], None]:
        """L steps x all layers (+ one cursor advance per step for replay routes)."""
        def run():
            for _ in range(self.case.buffer_len):
                for layer in range(self.n_layers):
                    self.layer_step(launch, layer)
                if launch.kernel not in self.STATELESS:
                    self.cache.advance(self.slot_idx, route=launch.kernel)
        return run

    def step_fn(self, launch: Launch) -> Callable[[], None]:
        """One step over all layers, cursors not advanced (parked where the caller put them)."""
        def run():
            for layer in range(self.n_layers):
                self.layer_step(launch, layer)
        return run

    def start_cursors(self, launch: Launch, staggered: bool = False) -> None:
        """Cursors at a cycle's start: every slot at 0, the rows in phase (all flush at the
        cycle's last step); or, ``staggered``, the slots spread over the L phases at random
        (seeded) with 1/L of them at each, so that 1/L of the rows flush at every step, as
        in a server whose requests entered decode at different steps. Routes that flush
        every step keep their rings empty, and start at 0 either way."""
        wp = self.cache.write_pos
        if not staggered or not self.keeps_ring(launch):
            wp.zero_()
            return
        wp.copy_(even_phases(wp.numel(), self.case.buffer_len, seed=0).to(wp.dtype))

    def time_cycle_us(self, launch: Launch, replays: int = 20, staggered: bool = False) -> float:
        """Median microseconds per layer-step over whole cycles (a cycle of L steps brings
        every cursor back to where it started: :meth:`start_cursors`)."""
        self.start_cursors(launch, staggered)
        ms = time_graph_ms(capture(self.cycle_fn(launch)), replays)
        self.cache.write_pos.zero_()
        return ms * 1e3 / (self.case.buffer_len * self.n_layers)

    def keeps_ring(self, launch: Launch) -> bool:
        """Whether ``launch``'s cycles depend on where the cursors start (a route with a ring)."""
        return launch.kernel not in self.STATELESS + FLUSH_EVERY_STEP

    def time_worst_phase_us(self, launch: Launch, replays: int = 20) -> float:
        """The slower of ``launch``'s cycles in phase and staggered (:meth:`start_cursors`):
        what the tuners minimise, so that a config that wins with the rows in phase cannot
        lose a server's steady state (one timing for a launch with no ring)."""
        if not self.keeps_ring(launch):
            return self.time_cycle_us(launch, replays)
        return max(self.time_cycle_us(launch, replays), self.time_cycle_us(launch, replays, staggered=True))

    def time_step_us(self, launch: Launch, write_pos: int, replays: int = 20) -> float:
        """Median microseconds per layer of one step with every cursor at ``write_pos``
        (``L - 1``: a flush step; less: a non-flush step)."""
        self.cache.write_pos.fill_(write_pos)
        ms = time_graph_ms(capture(self.step_fn(launch)), replays)
        self.cache.write_pos.zero_()
        return ms * 1e3 / self.n_layers


# Launches that write the state every step: the standard kernels (the in-tree one, fla-core's)
# and the replay kernels' flush-every-step routes, which with every ring empty (as in their
# cycles) take a standard step. A speedup is against the fastest of them measured: with a
# bf16 GDN state the always_flush route's compile (the standard kernel with the cursor check
# and the drain) measured up to 4% faster than the plain one on the same tile.
BASELINES = ("standard", "fla", "standard_step", "always_flush")


def fastest_baseline(cycle_us: Dict[str, float]) -> str:
    """Name of the fastest of :data:`BASELINES` among the measured launches ``cycle_us``."""
    return min((k for k in BASELINES if k in cycle_us), key=cycle_us.__getitem__)


def median_of_rounds(timers: Dict[str, Callable[[], float]], rounds: int = 1) -> Dict[str, float]:
    """Each timer's median over ``rounds`` rounds in which the timers take turns. A timer
    captures a fresh graph each call: at large batches a replay route's cycle moves by up
    to ~6% from one capture to the next while the standard kernel's holds within 0.1%
    (H200, Nano-4B fp32 at batch 512: 581-620 us over six captures of one config;
    ``benchmarks/probe_capture_spread.py``), so one capture each compares noise."""
    times: Dict[str, list] = {k: [] for k in timers}
    for _ in range(rounds):
        for k, timer in timers.items():
            times[k].append(timer())
    return {k: statistics.median(v) for k, v in times.items()}


PHASES = ("aligned", "staggered")


def time_phases_side_by_side(rig: CycleRig, launches: Dict[str, Launch], replays: int = 20,
                             rounds: int = 1) -> Dict[str, Dict[str, float]]:
    """``{phase: {launch: us}}`` for :data:`PHASES`: each launch's cycle with the rows in
    phase and with staggered cursors (:meth:`CycleRig.start_cursors`), all timings taking
    turns over ``rounds`` (:func:`median_of_rounds`); a launch with no ring is timed once
    and reported under both."""
    timers = {(k, phase): (lambda launch=launch, s=phase == "staggered": rig.time_cycle_us(launch, replays, s))
              for k, launch in launches.items() for phase in PHASES
              if phase == "aligned" or rig.keeps_ring(launch)}
    us = median_of_rounds(timers, rounds)
    return {phase: {k: us.get((k, phase), us[(k, "aligned")]) for k in launches} for phase in PHASES}


def worst_phase(by_phase: Dict[str, Dict[str, float]]) -> Dict[str, float]:
    """Each launch's slower phase of :func:`time_phases_side_by_side`'s timings."""
    return {k: max(t[k] for t in by_phase.values()) for k in by_phase["aligned"]}


def time_flush_and_nonflush_steps(rig: CycleRig, launch: Launch, replays: int = 20,
                                  rounds: int = 1) -> Tuple[float, float]:
    """``(flush step, non-flush step)``, microseconds a layer: every cursor at ``L - 1``,
    then every cursor at ``L // 2``; each the median of ``rounds`` rounds in which the two
    take turns (:func:`median_of_rounds`: a replay step moves between captures as its
    cycle does)."""
    L = rig.case.buffer_len
    us = median_of_rounds({"flush": lambda: rig.time_step_us(launch, L - 1, replays),
                           "nonflush": lambda: rig.time_step_us(launch, L // 2, replays)}, rounds)
    return us["flush"], us["nonflush"]


def time_cycle_and_steps(rig: CycleRig, launch: Launch, replays: int = 20) -> tuple:
    """``(cycle, flush step, non-flush step)``, microseconds a layer: the cycle as
    :meth:`CycleRig.time_cycle_us`, the steps as :func:`time_flush_and_nonflush_steps`."""
    return (rig.time_cycle_us(launch, replays), *time_flush_and_nonflush_steps(rig, launch, replays))


def tune_table_kernels(rig: CycleRig, candidates: Callable[[str], List[LaunchConfig]], kernels: Sequence[str],
                       nonflush0: LaunchConfig, replays: int = 5) -> Dict[str, Dict]:
    """Fastest launch configs (:func:`best_config`) of ``kernels``, each on whole cycles of
    its own route, in the slower of the two phases (:meth:`CycleRig.time_worst_phase_us`);
    ``"replay"`` stands for the ``output_only`` route's two launches: its fold launch is
    tuned first (with the non-flush launch on ``nonflush0``), then its non-flush launch with
    that fold; ``"fold"`` tunes the fold alone, with the table's non-flush launch, and
    ``"nonflush"`` the non-flush launch alone, with the table's fold.
    ``candidates(kernel)``: the configs to try."""
    best = {k: best_config(lambda c, k=k: rig.time_worst_phase_us(Launch(k, c), replays), candidates(k))
            for k in kernels if k not in ("replay", "fold", "nonflush")}
    if "replay" not in kernels and ("fold" in kernels or "nonflush" in kernels):
        table = rig.table_configs(device_table_tag(rig.cache.write_pos.device))
        nonflush0 = table["output_only"]["config"]
    if "replay" in kernels or "fold" in kernels:
        best["fold"] = best_config(lambda c: rig.time_worst_phase_us(Launch("output_only", nonflush0, c), replays),
                                   candidates("fold"))
    if "replay" in kernels or "nonflush" in kernels:
        fold = best["fold"]["config"] if "fold" in best else table["fold"]["config"]
        best["output_only"] = best_config(lambda c: rig.time_worst_phase_us(Launch("output_only", c, fold), replays),
                                          candidates("output_only"))
    return best


def launches_on(best: Dict[str, Dict], kernels: Sequence[str]) -> Dict[str, Launch]:
    """``kernels`` (the standard kernel or replay routes) as launches on the configs of
    ``best`` (a tuner's or the table's ``{kernel: {"config": ...}}``): ``output_only``
    with its fold, ``standard_step`` on the standard kernel's config (``config_kernel``)."""
    def launch(kernel: str) -> Launch:
        fold = best["fold"]["config"] if kernel == "output_only" else None
        return Launch(kernel, best[config_kernel(kernel)]["config"], fold)
    return {k: launch(k) for k in kernels}


def best_config(time_fn: Callable[[LaunchConfig], float], configs: Iterable[LaunchConfig]) -> Dict:
    """Time every config; ``{"config", "us", "tried"}`` of the fastest."""
    best, tried = None, []
    for cfg in configs:
        try:
            us = time_fn(cfg)
        except Exception as e:  # a config the compiler rejects (resources) is skipped
            tried.append({**cfg.to_dict(), "error": type(e).__name__})
            continue
        tried.append({**cfg.to_dict(), "us": us})
        if best is None or us < best[1]:
            best = (cfg, us)
    if best is None:
        raise RuntimeError(f"no launch config ran: {tried}")
    return {"config": best[0], "us": best[1], "tried": tried}
