"""ReplaySSM Mamba2 decode step against the fp64 recurrence, on small shapes.

Each scenario runs >= 3 full cycles (several flushes per row) with staggered cursors, a
padding row and unused slots (see ``mamba2_harness``).
"""

import pytest
import torch

import trtllm_replayssm as rs
from mamba2_harness import DEVICE, SLOTS, Scenario, run_replay, tolerance
from trtllm_replayssm.cache import Mamba2Geometry

GEOM = Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def cycles(L: int, n: int = 3) -> int:
    return n * L + 2


@pytest.mark.parametrize("route", ["output_only", "state_and_output"])
@pytest.mark.parametrize("L", [1, 4, 16])
def test_replay_matches_recurrence_over_cycles(route, L):
    res = run_replay(Scenario(GEOM, L), cycles(L), route=route)
    real_rows = [r for r, s in enumerate(SLOTS) if s >= 0]
    assert all(res.flushes_per_row[r] >= 3 for r in real_rows), res.flushes_per_row


def test_longest_ring():
    """L = 64, the largest supported: every row flushes at least once from its staggered start."""
    geom = Mamba2Geometry(nheads=2, headdim=16, dstate=16, ngroups=1)
    res = run_replay(Scenario(geom, 64, seed=14), 64 + 3)
    assert all(res.flushes_per_row[r] >= 1 for r, s in enumerate(SLOTS) if s >= 0), res.flushes_per_row


@pytest.mark.parametrize("act_dtype", DTYPES)
@pytest.mark.parametrize("state_dtype", DTYPES)
def test_replay_dtype_pairs(state_dtype, act_dtype):
    run_replay(Scenario(GEOM, 4, state_dtype, act_dtype, seed=1), cycles(4))


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_state_and_output_route_low_precision_state(state_dtype):
    run_replay(Scenario(GEOM, 4, state_dtype, torch.bfloat16, seed=2), cycles(4), route="state_and_output")


@pytest.mark.parametrize("has_d,has_z", [(False, False), (True, False), (False, True)])
def test_optional_d_and_z(has_d, has_z):
    run_replay(Scenario(GEOM, 4, has_d=has_d, has_z=has_z, seed=3), cycles(4))


def test_headdim_not_power_of_two_and_tied_parameters():
    """Nano-4B's headdim 80, with A/D/dt_bias/dt expanded with stride 0 as TensorRT-LLM passes them."""
    geom = Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=1)
    run_replay(Scenario(geom, 4, tied_params=True, seed=4), cycles(4))


@pytest.mark.parametrize("headdim,dstate", [(80, 16), (16, 12), (80, 12)],
                         ids=["rows_past_P", "cols_past_N", "both_past"])
@pytest.mark.parametrize("route", ["output_only", "state_and_output"])
def test_tiles_whose_rows_or_columns_run_past_the_sizes(route, headdim, dstate):
    """The row and column masks are dropped apart (``EVEN_ROWS`` / ``EVEN_COLS``): a tile
    of 32 rows over headdim 80, a dstate of 12 in a 16-column tile, and both."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    geom = Mamba2Geometry(nheads=2, headdim=headdim, dstate=dstate, ngroups=1)
    run_replay(Scenario(geom, 4, seed=16), cycles(4), route=route, config=LaunchConfig(32, 1, 4),
               fold_config=LaunchConfig(16, 2, 1, 1, loop_blocks=2))


@pytest.mark.parametrize("early_terms", [0, 1], ids=["late_D_z", "early_D_z"])
def test_always_flush_route_equals_recurrence(early_terms):
    """Staggered non-empty rings drained in the standard kernel, with ``D`` and ``z``
    loaded after the state's store or (``early_terms``) with the step's inputs."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    run_replay(Scenario(GEOM, 4, seed=5), 6, route="always_flush", config=LaunchConfig(8, 1, early_terms=early_terms))


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_always_flush_drain_in_row_tiles_past_headdim(state_dtype):
    """The drain takes a tile's rows a quarter at a time (``launch.drain_rows``): with
    headdim 76 in tiles of 32 rows the last tile's quarters of 8 rows lie inside P
    (64-71), partly past it (72-79) and wholly past it (80-95)."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    geom = Mamba2Geometry(nheads=2, headdim=76, dstate=16, ngroups=1)
    run_replay(Scenario(geom, 4, state_dtype, torch.bfloat16, seed=18), 6, route="always_flush",
               config=LaunchConfig(32, 4))


def test_force_flush_rows():
    L = 8
    run_replay(Scenario(GEOM, L, seed=6), cycles(L), force_flush_at={2: [0], 5: [2, 3], 11: [0, 3]})


@pytest.mark.parametrize("route", ["output_only", "always_flush"])
@pytest.mark.parametrize("fold_config", [(8, 1), (16, 2, 1, 1, 3)], ids=["block_p_raised_to_16", "3_heads_per_prog"])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_fold_launch_configs(route, fold_config, state_dtype):
    """The fold kernel under configs it must adapt: a block_p under the matmul's 16 (raised),
    and programs looping over heads where nheads is not a multiple (4 heads, 3 a program)."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    run_replay(Scenario(GEOM, 4, state_dtype, torch.bfloat16, seed=13), cycles(4), route=route,
               fold_config=LaunchConfig(*fold_config))


@pytest.mark.parametrize("fold_config", [(16, 2, 1, 1, 2, 0, 3), (16, 2, 1, 1, 3, 0, 2)],
                         ids=["2_heads_runs_of_3_blocks", "3_heads_uneven_runs_of_2_blocks"])
def test_fold_launch_looping_over_blocks(fold_config):
    """``loop_blocks``: a fold program runs several 16-row blocks of a head (headdim 80: 5
    blocks, so the last run is partly past P), over heads that do or do not divide nheads."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    geom = Mamba2Geometry(nheads=4, headdim=80, dstate=16, ngroups=2)
    run_replay(Scenario(geom, 4, seed=14), cycles(4), fold_config=LaunchConfig(*fold_config))
    run_replay(Scenario(geom, 4, seed=15), 6, route="always_flush", fold_config=LaunchConfig(*fold_config))


@pytest.mark.parametrize("row_block, heads, row_progs", [(2, 2, 0), (8, 2, 0), (16, 1, 0), (2, 2, 1), (2, 1, 3),
                                                          (4, 2, 2), (1, 1, 8)])
def test_fold_launch_row_blocks(row_block, heads, row_progs):
    """``row_block``: a fold program looks through a block of batch rows (one vector load of
    their cursors) and folds the ones that flush, force-flushed rows included; the batch
    has 4 rows (one of them padding), so a block of 8 is partly past it. ``row_progs``: that
    many programs share the batch's flushing rows, scanning it a block at a time (blocks of
    2 carry the flush count from one block to the next; 3 programs do not divide it; 8
    leave programs with no row)."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    cfg = LaunchConfig(16, 2, heads_per_prog=heads, loop_blocks=2, row_block=row_block,
                       row_progs=row_progs)
    geom = Mamba2Geometry(nheads=4, headdim=48, dstate=16, ngroups=2)
    res = run_replay(Scenario(geom, 4, seed=17), cycles(4), force_flush_at={1: [2], 6: [0, 3]}, fold_config=cfg)
    assert min(f for f in res.flushes_per_row if f) >= 3


def test_routes_agree():
    outs = {}
    for route in ("output_only", "state_and_output"):
        sc = Scenario(GEOM, 4, seed=7)
        outs[route] = run_replay(sc, cycles(4), route=route).max_err
    # Both are within tolerance of the same fp64 reference, so within 2x of each other's budget.
    assert max(outs.values()) <= tolerance(torch.float32, torch.float32)


def _corrupt_latest(name):
    """Tamper with the most recent cached entry of row 0's slot at step 3."""
    def corrupt(t, cache):
        if t != 3:
            return
        slot = SLOTS[0]
        w = int(cache.write_pos[slot])
        assert w >= 1, "the scenario must have something cached to corrupt"
        getattr(cache, name)[0, slot, 0, w - 1] += 50.0
    return corrupt


@pytest.mark.parametrize("name", ["x_cache", "dt_cache", "B_cache"])
@pytest.mark.parametrize("route", ["output_only", "state_and_output"])
def test_corrupted_cache_entry_is_detected(name, route):
    with pytest.raises(AssertionError, match="error"):
        run_replay(Scenario(GEOM, 8, seed=8), 12, route=route, corrupt=_corrupt_latest(name))


def test_corrupted_checkpoint_is_detected():
    def corrupt(t, cache):
        if t == 2:
            cache.ssm_state[0, SLOTS[0]] *= 1.5
    with pytest.raises(AssertionError, match="error"):
        run_replay(Scenario(GEOM, 8, seed=9), 6, corrupt=corrupt)


def test_flush_checkpoint_equals_standard_state():
    """Both kernels from the same start: after a flush the checkpoint equals the standard state."""
    import trtllm_replayssm as rs
    from trtllm_replayssm.cache import Mamba2ReplayCache

    L, batch = 4, 3
    sc = Scenario(GEOM, L, seed=10)
    cache = Mamba2ReplayCache(GEOM, 1, batch, L, device=DEVICE, act_dtype=torch.float32)
    cache.ssm_state.normal_()
    std_state = cache.ssm_state[0].clone()
    for t in range(2 * L):
        kw = sc.kernel_kwargs(sc.step_inputs(batch))
        y_rep = rs.selective_state_update_replayssm(cache.ssm_state[0], **kw, **cache.ring_kwargs(0))
        y_std = rs.selective_state_update(std_state, **kw)
        cache.advance(batch=batch)
        torch.testing.assert_close(y_rep, y_std, rtol=1e-4, atol=1e-4)
        if (t + 1) % L == 0:
            assert int(cache.write_pos.max()) == 0
            torch.testing.assert_close(cache.ssm_state[0], std_state, rtol=1e-5, atol=1e-5)


def test_standard_step_route_after_a_drain():
    """``standard_step`` (the dispatcher's route where replay cannot win) on the rings one
    ``always_flush`` step emptied: the recurrence, cursors held at 0, padding untouched."""
    run_replay(Scenario(GEOM, 4, seed=7), 5, route=lambda t: "always_flush" if t == 0 else "standard_step")


def test_standard_step_route_refuses_a_non_empty_ring():
    """A row whose ring is not empty would lose its cached steps: NaN output, its state,
    ring and cursor untouched; the row with an empty ring takes the standard step."""
    from trtllm_replayssm.cache import Mamba2ReplayCache

    H, P, N = GEOM.nheads, GEOM.headdim, GEOM.dstate
    cache = Mamba2ReplayCache(GEOM, 1, 2, 4, act_dtype=torch.float32, device=DEVICE)
    cache.ssm_state.normal_()
    cache.x_cache.normal_()
    cache.write_pos.copy_(torch.tensor([0, 2], dtype=torch.int32))
    before = {k: getattr(cache, k).clone() for k in ("ssm_state", "x_cache", "write_pos")}
    x = torch.randn(2, H, P, device=DEVICE)
    dt, A = torch.rand(2, H, device=DEVICE), -torch.rand(H, device=DEVICE)
    B, C = torch.randn(2, GEOM.ngroups, N, device=DEVICE), torch.randn(2, GEOM.ngroups, N, device=DEVICE)
    slots = torch.tensor([0, 1], dtype=torch.int32, device=DEVICE)
    out = rs.selective_state_update_replayssm(cache.ssm_state[0], x, dt, A, B, C, state_batch_indices=slots,
                                              route="standard_step", **cache.ring_kwargs(0))
    expected = before["ssm_state"][0, 0].clone()[None]
    y_std = rs.selective_state_update(expected, x[:1], dt[:1], A, B[:1], C[:1])
    assert torch.equal(out[0], y_std[0]) and torch.equal(cache.ssm_state[0, 0], expected[0])
    assert out[1].isnan().all()
    assert torch.equal(cache.ssm_state[0, 1], before["ssm_state"][0, 1])
    assert torch.equal(cache.x_cache, before["x_cache"]) and torch.equal(cache.write_pos, before["write_pos"])


@pytest.mark.parametrize("geom,L", [(GEOM, 4), (GEOM, 16), (Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=1), 4)],
                         ids=["L4", "L16", "headdim80"])
def test_non_flush_step_with_the_ring_as_tiles(geom, L):
    """``fold_chunk = 0``: the non-flush launch loads the ring as whole tiles (masked past
    each row's cursor) and takes every B_j . C in one reduction."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    res = run_replay(Scenario(geom, L, seed=22), cycles(L), route="output_only", config=LaunchConfig(16, 1, 0))
    assert all(res.flushes_per_row[r] >= 3 for r, s in enumerate(SLOTS) if s >= 0), res.flushes_per_row


@pytest.mark.parametrize("route", ["output_only", "state_and_output"])
@pytest.mark.parametrize("geom", [GEOM, Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=1)],
                         ids=["headdim16", "headdim80"])
def test_checkpoint_loaded_before_the_cursor(geom, route):
    """``early_state``: the step loads the checkpoint tile and its inputs before the
    cursor (the non-flush launch's flush rows then read a tile they drop): the same
    multi-cycle recurrence, padded rows and unused slots untouched."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    res = run_replay(Scenario(geom, 4, seed=23), cycles(4), route=route,
                     config=LaunchConfig(16, 1, 2, early_state=1))
    assert all(res.flushes_per_row[r] >= 3 for r, s in enumerate(SLOTS) if s >= 0), res.flushes_per_row


def test_fold_with_staged_block_loop(monkeypatch):
    """``LOOP_STAGES`` set: the fold's loop over blocks as a ``tl.range`` with stages (the
    interpreter runs it as a plain loop; the CUDA tests check the pipelined one)."""
    from trtllm_replayssm.ops.launch import LaunchConfig
    from trtllm_replayssm.ops.mamba2 import replay_fold

    monkeypatch.setattr(replay_fold, "LOOP_STAGES", 2)
    geom = Mamba2Geometry(nheads=4, headdim=80, dstate=16, ngroups=2)
    run_replay(Scenario(geom, 4, seed=16), cycles(4), fold_config=LaunchConfig(16, 2, 1, 1, 1, 0, 8))


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("geom,block_p,loop_blocks", [
    (Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=1), 16, 5),  # a head a program, in 5 blocks
    (Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=1), 32, 2),  # the second run partly past headdim
    (GEOM, 4, 2),
], ids=["headdim80_5x16", "headdim80_2x32", "2x4"])
def test_non_flush_launch_over_runs_of_row_blocks(geom, block_p, loop_blocks, state_dtype):
    """``loop_blocks > 1``: a non-flush program runs several row blocks of its head one
    after another, with the ring's weights formed once for all of them."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    cfg = LaunchConfig(block_p, 1, 0, loop_blocks=loop_blocks)
    res = run_replay(Scenario(geom, 4, state_dtype=state_dtype, seed=23), cycles(4), route="output_only", config=cfg)
    assert all(res.flushes_per_row[r] >= 3 for r, s in enumerate(SLOTS) if s >= 0), res.flushes_per_row
