"""Launch decisions for the decode kernels, kept apart from the launches.

A launch is a grid plus a :class:`LaunchConfig`; the config comes from a table measured
on the GPU (``tuned/<family>_<arch>.json``, written by the benchmarks, e.g.
``benchmarks/bench_mamba2_ar.py``; a GPU measured apart from its architecture's reference
GPU has ``tuned/<family>_<arch>_<gpu>.json``: :func:`table_tag`) keyed by kernel, state
dtype, activation dtype, the two inner state sizes (Mamba2: headdim P, dstate N; GDN: V,
K) and batch. Nothing here touches device memory, so the same decisions serve JIT
launches, CUDA-graph capture and the ahead-of-time build.
"""

from __future__ import annotations

import json
import math
import os
import re
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import torch
import triton

from .._runtime import device_arch


@dataclass(frozen=True)
class LaunchConfig:
    """Compile-time choices of one launch: rows of headdim per program, warps, and for
    the replay kernel how many ring entries are loaded together (``fold_chunk``; 0 on
    the Mamba2 output_only step: the whole ring as tiles),
    whether a fold uses one matmul over the ring instead (``fold_dot``; GDN only: the
    Mamba2 fold kernel always does), how many heads one program of the fold launch (or
    of the Mamba2 speculative verify, heads of one group) loops over
    (``heads_per_prog``), whether a
    speculative verify folds its flush rows in a launch of their own (``split_fold``), so
    the verify launch is compiled without the fold, and how many blocks of ``block_p``
    rows one program runs one after another (``loop_blocks``; the GDN replay step, the
    Mamba2 fold and the Mamba2 output_only step's non-flush launch, which then walks the
    ring as whole tiles: the work of a head that does not depend on the rows is then done
    once for all of them), and how many batch rows one program of a fold launch
    looks through with one vector load of their cursors (``row_block``), or whether
    ``row_progs`` programs share the flushing rows of the whole batch instead (scanning
    its cursors ``row_block`` rows at a time), and whether the
    GDN non-flush launch's loop over those blocks loads the next block's tiles into
    registers one block ahead (``prefetch``) instead of Triton's staging, whether the
    Mamba2 standard kernel loads ``D`` and ``z`` with the step's inputs (``early_terms``;
    early they overlap the state's load, late they hold no registers over the step),
    whether the Mamba2 replay step's launch loads the checkpoint tile before the cursor
    (``early_state``: it then waits on the slot alone; a non-flush launch's flush rows read
    their tile for nothing; in the GDN standard kernel, its routes ``standard_step`` and
    ``always_flush`` included, the state tile's loads issue before the step's other loads,
    held there by a barrier), and the register cap ptxas compiles the standard kernels and
    the GDN replay launches under (``maxnreg``; 0: none)."""

    block_p: int
    num_warps: int
    fold_chunk: int = 1
    fold_dot: int = 0
    heads_per_prog: int = 1
    split_fold: int = 0  # speculative verify: flush rows fold in a launch of their own (Mamba2 2: take their whole step)
    loop_blocks: int = 1  # headdim blocks one program runs one after another
    key_chunk: int = 0  # speculative verify: state columns (keys, dstate) a step of its loop takes (0: all)
    row_block: int = 1  # fold launches: batch rows one program looks through, folding those that flush
    prefetch: int = 0  # GDN non-flush launch: the next block's tiles loaded one block ahead
    early_terms: int = 0  # Mamba2 standard kernel: D and z loaded with the step's inputs
    early_state: int = 0  # Mamba2 replay step: the checkpoint loaded before the cursor (one round trip less);
    # GDN standard kernel: the state tile's loads issued first, before the q / k norms
    # Standard kernels: ptxas's register cap (0: none). Any cap changes the schedule: on one
    # warp, uncapped, ptxas holds a GDN program with a bf16 state to 64 registers and issues
    # the tile's last load only after the q/k norms; capped it takes 80 and issues it earlier.
    maxnreg: int = 0
    row_progs: int = 0  # fold launches: programs (a group of heads) sharing the batch's flushing rows (0: row blocks)

    def __post_init__(self):
        # A chunk size that does not divide its tile would skip entries (a ring walked in
        # BLOCK_L // fold_chunk chunks), and a tile that is not a power of two does not
        # compile: both are refused here, before any kernel runs.
        for name in ("block_p", "num_warps", "row_block"):
            _check_field(name, getattr(self, name), "a power of two", lambda v: v >= 1 and v & (v - 1) == 0)
        for name in ("fold_chunk", "key_chunk"):
            _check_field(name, getattr(self, name), "0 or a power of two", lambda v: v >= 0 and v & (v - 1) == 0)
        for name in ("loop_blocks", "heads_per_prog"):
            _check_field(name, getattr(self, name), ">= 1", lambda v: v >= 1)
        for name in ("fold_dot", "split_fold", "prefetch", "early_terms", "early_state", "maxnreg", "row_progs"):
            _check_field(name, getattr(self, name), ">= 0", lambda v: v >= 0)

    def to_dict(self) -> dict:
        return asdict(self)


def _check_field(name: str, value, expected: str, ok: Callable[[int], bool]) -> None:
    if not isinstance(value, int) or not ok(value):
        raise ValueError(f"LaunchConfig.{name} must be an int, {expected}; got {value!r}")


CONFIG_FIELDS = tuple(f.name for f in fields(LaunchConfig))  # a table row's config keys


def grid(batch: int, nheads: int, headdim: int, cfg: LaunchConfig) -> tuple:
    """Programs: (headdim blocks (or runs of ``loop_blocks`` of them), heads (or groups of
    heads), batch rows). Heads of one slot run adjacently, which keeps a group's ring
    entries in L2 for the heads that share them."""
    return (triton.cdiv(headdim, cfg.block_p * cfg.loop_blocks), nheads, batch)


def fold_row_programs(batch: int, cfg: LaunchConfig) -> int:
    """A fold launch's programs along the batch (``common.fold_row_blocks``): ``row_progs``
    sharing the flushing rows, or a program a block of ``row_block`` rows."""
    return cfg.row_progs or triton.cdiv(batch, cfg.row_block)


def clamp_loop_blocks(cfg: LaunchConfig, headdim: int) -> LaunchConfig:
    """``cfg`` with ``loop_blocks`` cut to the blocks a head has: blocks past the head
    would only be masked work in every program."""
    return replace(cfg, loop_blocks=min(cfg.loop_blocks, triton.cdiv(headdim, cfg.block_p)))


def _dtype_key(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


# A folder of tables to read instead of the package's (a tuning run on another GPU, or
# the benchmarks' --table-dir, whose dispatcher is timed on the table they just wrote).
TUNED_DIR_ENV = "REPLAYSSM_TUNED_DIR"

# The GPU each architecture's tables (``<family>_<arch>.json``) were measured on. Another
# GPU of the architecture reads its own (``<family>_<arch>_<gpu>.json``) where one was
# measured, else the architecture's: an H100 has 70% of an H200's bandwidth on the same
# SMs, so the routes' crossovers and the best tiles move (on an H100, the H200's GDN
# table left the dispatcher at 0.89-0.95x at batch 1-8: ``gdn_ar_sm90_table_h100.json``).
REFERENCE_GPUS = {"sm90": "h200"}


def gpu_slug(name: str) -> str:
    """A GPU's product name as a table name's part: ``NVIDIA H100 80GB HBM3`` -> ``h100_80gb_hbm3``."""
    words = re.findall(r"[a-z0-9]+", name.lower())
    return "_".join(w for w in words if w not in ("nvidia", "tesla"))


def table_tag(arch: str, gpu_name: str = "") -> str:
    """The name a GPU's tables go by: its architecture (``sm90``), with the GPU's
    :func:`gpu_slug` unless it is the architecture's reference GPU (``sm90_h100_80gb_hbm3``)."""
    slug = gpu_slug(gpu_name)
    return arch if not slug or REFERENCE_GPUS.get(arch) == slug else f"{arch}_{slug}"


def tag_arch(tag: str) -> str:
    """The architecture of a :func:`table_tag` (``sm90_h100_80gb_hbm3`` -> ``sm90``)."""
    return tag.split("_", 1)[0]


def tags_read(tag: str) -> tuple:
    """The tags whose tables serve ``tag``, in the order they are looked for: a GPU's own,
    then its architecture's."""
    return (tag,) if tag == tag_arch(tag) else (tag, tag_arch(tag))


def _device_name(index: int) -> str:
    return torch.cuda.get_device_name(index)


@lru_cache(maxsize=None)
def _gpu_table_tag(arch: str, index: int) -> str:
    # (once a device: the dispatcher asks at every launch)
    return table_tag(arch, _device_name(index))


def device_table_tag(device: torch.device) -> str:
    """The :func:`table_tag` of the tables the dispatcher reads for ``device`` (``cpu``
    for the interpreter): the GPU's, or those of the launcher in front that serves the
    kernels of given tables (``tables_for(arch)``: the AOT library, built from one GPU's
    tables or from the architecture's)."""
    arch = device_arch(device)
    if device.type != "cuda":
        return arch
    for fn in reversed(_launchers):
        if hasattr(fn, "tables_for"):
            return fn.tables_for(arch)
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _gpu_table_tag(arch, index)


def table_file_name(tag: str, family: str) -> str:
    """The name of a family's tuned table for a :func:`table_tag`, in the package and in a
    ``TUNED_DIR_ENV`` folder."""
    return f"{family}_{tag}.json"


def package_table_file(tag: str, family: str):
    """The package's tuned table of ``family`` for ``tag`` (a ``Traversable``; it may not exist)."""
    return resources.files("trtllm_replayssm").joinpath(f"tuned/{table_file_name(tag, family)}")


def _read_table(tag: str, family: str) -> Optional[str]:
    try:
        if os.environ.get(TUNED_DIR_ENV):
            return Path(os.environ[TUNED_DIR_ENV], table_file_name(tag, family)).read_text()
        return package_table_file(tag, family).read_text()
    except (FileNotFoundError, ModuleNotFoundError):
        return None


@lru_cache(maxsize=None)
def _load_table(tag: str, family: str = "mamba2") -> dict:
    """The table of a :func:`table_tag`: the GPU's own, else its architecture's, else empty."""
    for each in tags_read(tag):
        text = _read_table(each, family)
        if text is not None:
            return json.loads(text)
    return {}


def table_key(kernel: str, state_dtype: torch.dtype, act_dtype: torch.dtype, headdim: int, dstate: int) -> str:
    return f"{kernel}|{_dtype_key(state_dtype)}|{_dtype_key(act_dtype)}|P{headdim}|N{dstate}"


# The batch sizes the tuned tables hold rows at (the benchmarks' default cases) and the
# AOT library builds a case for; any other batch takes the nearest (below).
BATCH_POINTS = (1, 2, 4, 6, 8, 32, 128, 256, 512)


def nearest_batch_point(points: Sequence[int], batch: int) -> int:
    """The point of ``points`` nearest ``batch`` in log scale, the first on a tie: the rule
    by which a measured entry, a default plan by batch, and the AOT library's case are
    picked (``replayssm_kernels.c``: ``find_case``)."""
    return min(points, key=lambda p: abs(math.log2(p) - math.log2(max(batch, 1))))


def _lookup(arch: str, key: str, batch: int, family: str = "mamba2", nheads: Optional[int] = None) -> Optional[dict]:
    """Entry measured nearest (in log scale) to this work. Rows carry ``head_rows``, the
    (batch row, head) pairs a step runs, which the grid and the bytes scale with: models
    of one head shape but other head counts (Qwen3.5-4B and -122B) share a key, and a
    batch size alone would give one model's routes to the other. The same work can come
    at two batch sizes (Qwen3.5-4B at 256 and -122B at 128: 8192 head rows), whose configs
    differ (a fold's row blocks run over batch rows): of the rows at the nearest work, the
    one measured at the nearest batch size. Without ``nheads`` (or for rows measured
    before ``head_rows`` was kept) the batch size is matched."""
    rows = _load_table(arch, family).get(key)
    if not rows:
        return None
    if nheads is not None and all("head_rows" in r for r in rows):
        size, of = batch * nheads, (lambda r: r["head_rows"])
    else:
        size, of = batch, (lambda r: r["batch"])
    point = nearest_batch_point([of(r) for r in rows], size)
    at_point = [r for r in rows if of(r) == point]
    nearest = nearest_batch_point([r["batch"] for r in at_point], batch)
    return next(r for r in at_point if r["batch"] == nearest)


def config_kernel(route: str) -> str:
    """The table's kernel whose launch config a route's main launch takes: the route's
    own, but ``standard_step`` (the standard kernel with the cursor check) runs on the
    standard kernel's tile, while ``always_flush`` (the same kernel with the drain) is
    tuned on its own route."""
    return "standard" if route == "standard_step" else route


def drain_rows(block_p: int) -> int:
    """Rows of the tiles in which an ``always_flush`` launch drains a non-empty ring (both
    families' standard kernels): a quarter of the launch's tile, which keeps the drain's
    registers at the common path's (ptxas, sm_90, Mamba2 with a bf16 state: 94 -> 64 a
    thread at 16 rows on 2 warps, 95 -> 64 at 8 rows on one warp)."""
    return max(1, block_p // 4)


def maxnreg_option(cap: int) -> dict:
    """A launch's ``maxnreg`` option where ``cap`` is set (the AOT build compiles it in)."""
    return {"maxnreg": cap} if cap else {}


def default_config(kernel: str, headdim: int, batch: int) -> LaunchConfig:
    """Used where no measured entry exists (new GPU, CPU interpreter)."""
    return LaunchConfig(block_p=min(16, triton.next_power_of_2(headdim)), num_warps=4)


def select_config(kernel: str, arch: str, state_dtype: torch.dtype, act_dtype: torch.dtype,
                  headdim: int, dstate: int, batch: int, family: str = "mamba2",
                  nheads: Optional[int] = None) -> LaunchConfig:
    """Config for ``kernel`` in {standard, output_only (its non-flush launch), fold,
    state_and_output, always_flush} of a kernel ``family`` (mamba2, gdn) from the tables
    of ``arch``, a :func:`table_tag` (:func:`device_table_tag`); ``nheads``: the step's
    (value) heads, see :func:`_lookup`."""
    row = _lookup(arch, table_key(kernel, state_dtype, act_dtype, headdim, dstate), batch, family, nheads)
    if row is None:
        return default_config(kernel, headdim, batch)
    return LaunchConfig(**{k: row[k] for k in CONFIG_FIELDS if k in row})


def select_route(arch: str, state_dtype: torch.dtype, act_dtype: torch.dtype,
                 headdim: int, dstate: int, batch: int, family: str = "mamba2", nheads: Optional[int] = None) -> str:
    """Fastest replay route measured at this batch size: ``output_only``,
    ``state_and_output``, or ``always_flush`` where replay would not beat the standard
    kernel (small batches, where a launch costs more than the state transfer)."""
    row = _lookup(arch, table_key("route", state_dtype, act_dtype, headdim, dstate), batch, family, nheads)
    if row is None:
        return "output_only"
    return row["route"]


# -- the launch itself ------------------------------------------------------------------
# Every kernel launch of the package goes through :func:`launch_kernel`, so the decision
# above (grid, constexprs, warps) is made once and can be served by Triton's JIT, by the
# ahead-of-time library (:mod:`trtllm_replayssm.aot.backend`), or recorded without running
# anything (:mod:`trtllm_replayssm.aot.specs` enumerates what the AOT build compiles).
Launcher = Callable[[object, Sequence[int], dict], bool]
_launchers: List[Launcher] = []


def push_launcher(fn: Launcher) -> None:
    """Put ``fn(kernel, grid, kwargs) -> handled`` in front of Triton's JIT; it returns
    False to pass a launch on."""
    _launchers.append(fn)


def pop_launcher(fn: Launcher) -> None:
    _launchers.remove(fn)


@contextmanager
def launcher_in_front(fn: Optional[Launcher]):
    """:func:`push_launcher` ``fn`` for the block (``None``: Triton's JIT as it is)."""
    if fn is None:
        yield
        return
    push_launcher(fn)
    try:
        yield
    finally:
        pop_launcher(fn)


class _ArchitectureTables:
    """A launcher that passes every launch on (to Triton's JIT, which launches as it would)
    and has the dispatcher read the architectures' tables."""

    programmatic_launches = True

    def tables_for(self, arch: str) -> str:
        return arch

    def __call__(self, kernel, grid, kwargs) -> bool:
        return False


@contextmanager
def architecture_tables():
    """Within the block the dispatcher reads the architectures' tables, never a GPU's own:
    Triton's JIT then makes the launches an AOT library built from those makes."""
    with launcher_in_front(_ArchitectureTables()):
        yield


def _launchers_take_programmatic() -> bool:
    """Whether the launchers in front (if any) carry a programmatic dependent launch: the
    AOT backend and the AOT build's recorder do (``programmatic_launches = True``), since
    the C library launches such a kernel with the same attribute Triton's JIT sets."""
    return all(getattr(fn, "programmatic_launches", False) for fn in _launchers)


# The compute capability the AOT build records launches for (on ``meta`` tensors, which
# have none): see :func:`recording_for_arch`.
_recording_arch: Optional[int] = None


@contextmanager
def recording_for_arch(arch: int):
    """Within the block, a launch on ``meta`` tensors decides as on a GPU of compute
    capability ``arch`` (e.g. 90) where the decision depends on the GPU (programmatic
    dependent launch: sm_90+). The AOT build records each architecture's cases so."""
    global _recording_arch
    previous, _recording_arch = _recording_arch, arch
    try:
        yield
    finally:
        _recording_arch = previous


def _major_capability(device: torch.device) -> Optional[int]:
    if device.type == "cuda":
        return torch.cuda.get_device_capability(device)[0]
    if device.type == "meta" and _recording_arch is not None:
        return _recording_arch // 10
    return None


def programmatic_launch_allowed(device: torch.device, head_rows: int, enabled: bool, max_head_rows: int) -> bool:
    """Whether a launch is made as a programmatic dependent launch (PDL) of the launch before
    it: where ``enabled``, up to ``max_head_rows`` (batch rows x heads), on a GPU of sm_90 or
    later (griddepcontrol, which sm_80 lacks), launched by Triton's JIT or by the AOT
    library (whose build records the same decision per architecture)."""
    if not (enabled and head_rows <= max_head_rows and _launchers_take_programmatic()):
        return False
    major = _major_capability(device)
    return major is not None and major >= 9


# The output_only route's fold launch (both families) as a programmatic dependent launch of
# its non-flush launch: every non-flush program lets it launch as it starts, so the fold's
# programs (on most steps they only find that no row of theirs flushes) run in the SMs the
# non-flush launch's last wave leaves idle, not after it; the fold's first program waits
# for the non-flush launch before it exits, so that the fold completes only after it. The
# two launches serve disjoint rows. Up to FOLD_PDL_MAX_HEAD_ROWS[family] (batch rows x
# heads): beyond, the fold's early programs take SMs that the non-flush launch's later
# waves need, and its flush step slows (Qwen3.5-4B at batch 512: 808 -> 1003 us). H200,
# fp32 state, L = 16, cycle speedup plain -> PDL (``python benchmarks/probe_fold_launch.py``;
# ``benchmarks/results/fold_launch_pdl_first.json``, commit 8f961f9, and
# ``fold_launch_package.json``, 52257e7):
# - Nemotron-3-Super at batch 8 / 32 / 128 / 512: 1.19 -> 1.28x, 1.34 -> 1.42x,
#   1.64 -> 1.64x, 1.69 -> 1.68x; Nano-4B: 1.06 -> 1.16x, 1.33 -> 1.39x, 1.58 -> 1.59x,
#   1.67 -> 1.66x (PDL at every batch size in that run);
# - Qwen3.5-122B at 8 / 32 / 64 / 128 / 512: 1.20 -> 1.29x, 1.36 -> 1.44x, 1.43 -> 1.44x,
#   1.49 -> 1.50x, 1.54 -> 1.56x; Qwen3.5-4B: 0.87 -> 0.96x, 1.27 -> 1.36x, 1.35 -> 1.43x,
#   1.42 -> 1.44x, 1.51 -> 1.47x.
# GDN's limit went from 8192 to 2048 head rows (Qwen3.5-4B at batch 128-256 and -122B at
# 128 on the side stream; the fold re-tuned there): cycle speedups, in phase / staggered,
# fp32 4B b128 1.44 / 1.40x -> 1.48 / 1.44x, b256 1.52 / 1.50x -> 1.52 / 1.52x, 122B b128
# 1.54 / 1.52x -> 1.55 / 1.55x; bf16 4B b128 1.15 / 1.11x -> 1.17 / 1.16x, b256 1.20 /
# 1.16x -> 1.25 / 1.23x, 122B b128 1.25 / 1.17x -> 1.25 / 1.24x; at 122B batch 64 (4096
# head rows, no table row of its own) fp32 1.42 / 1.39x -> 1.47 / 1.34x, bf16 1.16 /
# 1.10x -> 1.19 / 1.16x (``benchmarks/results/gdn_fold_side_stream_limit.json``). The
# non-flush steps moved by -2 to +4 us; the flush steps took 7-22% less, except 122B
# bf16 at batch 128 (14% more), where the staggered phase gains the most.
FOLD_PDL = True
FOLD_PDL_MAX_HEAD_ROWS = {"mamba2": 4096, "gdn": 2048}

# Beyond FOLD_PDL_MAX_HEAD_ROWS the fold launch goes on a second stream, forked from the
# caller's before the non-flush launch and joined after it (:mod:`.streams`): the two
# serve disjoint rows and only read the cursors, and side by side the fold's programs
# (where no row of theirs flushes, a cursor check; with staggered cursors, chains of
# loads over 1/L of the state) run among the non-flush launch's instead of after it.
# H200, L = 16, cycle speedups plain -> side stream at batch 128 / 512, in phase and
# staggered (``python benchmarks/probe_fold_side_stream.py``,
# ``benchmarks/results/fold_side_stream.json``, 731fb4e): Super fp32 1.64 / 1.69x ->
# 1.68 / 1.71x, staggered 1.59 / 1.68x -> 1.63 / 1.71x; Nano-4B fp32 1.60 / 1.66x ->
# 1.64 / 1.69x, staggered 1.54 / 1.65x -> 1.61 / 1.68x; Qwen3.5-122B bf16 at 512 1.35x
# -> 1.37x, staggered 1.33x -> 1.40x. Below the threshold the programmatic launch is
# the faster form (at batch 32 the side stream lost 5-15% on GDN).
FOLD_SIDE_STREAM = True


def fold_side_stream(device: torch.device, head_rows: int, family: str) -> bool:
    """Whether this step's fold launch goes on a side stream (:data:`FOLD_SIDE_STREAM`):
    on a GPU (or when the AOT build records for one), beyond the programmatic launch's
    ``FOLD_PDL_MAX_HEAD_ROWS``; never on the CPU interpreter."""
    if not FOLD_SIDE_STREAM or head_rows <= FOLD_PDL_MAX_HEAD_ROWS[family]:
        return False
    return device.type == "cuda" or (device.type == "meta" and _recording_arch is not None)


def fold_programmatic_launch(device: torch.device, head_rows: int, family: str) -> bool:
    """Whether this step's fold launch is a programmatic dependent launch (:data:`FOLD_PDL`)."""
    return programmatic_launch_allowed(device, head_rows, FOLD_PDL, FOLD_PDL_MAX_HEAD_ROWS[family])


def pdl_options(pdl: bool, primary: bool) -> dict:
    """A launch's PDL constexprs and option: the non-flush launch (``primary``) lets its
    dependent launch start; the fold launch is made with ``launch_pdl`` (the AOT build
    records it as the kernel's ``programmatic`` flag) and completes after it. Nothing where
    ``pdl`` is off."""
    if not pdl:
        return {}
    return {"LAUNCH_DEPENDENTS": True} if primary else {"WAIT_PRIMARY": True, "launch_pdl": True}


def launch_kernel(kernel, grid: Sequence[int], *args, **kwargs) -> None:
    """Launch ``kernel`` over ``grid`` with its arguments and constexprs (positional ones
    bound to their names) and launch options (``num_warps``)."""
    if args:
        kwargs = {**dict(zip(kernel.arg_names, args)), **kwargs}
    for fn in reversed(_launchers):
        if fn(kernel, tuple(grid), kwargs):
            return
    kernel[tuple(grid)](**kwargs)
