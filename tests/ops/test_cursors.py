"""Cursor ops on device, and how the decode step treats out-of-range slots and cursors."""

import pytest
import torch

import trtllm_replayssm as rs
from mamba2_harness import DEVICE
from trtllm_replayssm.cache import GDNGeometry, GDNReplayCache, Mamba2Geometry, Mamba2ReplayCache
from trtllm_replayssm.ops.launch import LaunchConfig

I32 = dict(dtype=torch.int32, device=DEVICE)


def test_advance_moves_each_row_once_and_wraps():
    L = 4
    wp = torch.tensor([0, 3, 2, 1, 9, 2], **I32)  # slot 4 holds an out-of-range cursor
    rows = torch.tensor([0, 1, -1, 2, 4], **I32)  # row 2 is padding; slot 3 and 5 unused
    ff = torch.tensor([0, 0, 1, 1, 0], dtype=torch.int8, device=DEVICE)
    rs.advance_write_pos(wp, L, rows, force_flush=ff)
    # slot0 0->1; slot1 L-1 -> 0 (flush); slot2 forced -> 0; slot4 left alone; 3, 5 untouched
    assert wp.tolist() == [1, 0, 0, 1, 9, 2]


def test_advance_flush_all_and_default_rows():
    wp = torch.tensor([0, 2, 3], **I32)
    rs.advance_write_pos(wp, 4, flush_all=True)
    assert wp.tolist() == [0, 0, 0]
    rs.advance_write_pos(wp, 4)
    assert wp.tolist() == [1, 1, 1]
    rs.advance_write_pos(wp, 4, batch=2)
    assert wp.tolist() == [2, 2, 1]


def test_reset_zeroes_only_given_slots():
    wp = torch.tensor([3, 2, 1, 3], **I32)
    rs.reset_write_pos(wp, torch.tensor([1, -1, 3], dtype=torch.int64, device=DEVICE))
    assert wp.tolist() == [3, 0, 1, 0]


def test_cursor_ops_over_several_programs():
    """A batch of 300 rows spans three programs of the cursor kernels (128 rows each): every
    row moves, in any order of slots, against a plain reference."""
    g = torch.Generator().manual_seed(3)
    slots, batch, ring = 320, 300, 16
    wp = torch.randint(0, ring, (slots,), generator=g, dtype=torch.int32)
    rows = torch.randperm(slots, generator=g)[:batch].to(torch.int32)
    ff = (torch.rand(batch, generator=g) < 0.2).to(torch.int8)
    expected = wp.clone()
    flush = (wp[rows.long()] == ring - 1) | (ff != 0)
    expected[rows.long()] = torch.where(flush, 0, wp[rows.long()] + 1)
    wp_dev = wp.to(DEVICE)
    rs.advance_write_pos(wp_dev, ring, rows.to(DEVICE), force_flush=ff.to(DEVICE))
    assert torch.equal(wp_dev.cpu(), expected)
    rs.reset_write_pos(wp_dev, rows.to(DEVICE))
    expected[rows.long()] = 0
    assert torch.equal(wp_dev.cpu(), expected)


# The non-flush launch's own config, and one whose programs run blocks of rows one after
# another (the second run partly past headdim 8): the NaN rows must cover every block.
CONFIGS = [None, LaunchConfig(2, 1, 0, loop_blocks=3)]
L = 4
# Cursors just outside [0, L): the first past the ring's end (a check of w > L would take it
# and append past the ring), one below 0, and one well past.
BAD_CURSORS = [L, -1, 7]
# Slot 3, the first past the pool's slots 0..2, and -2, below it but not the padding id (-1).
BAD_SLOTS = [3, -2]
MAMBA2_ROUTES = ("output_only", "state_and_output", "standard_step", "always_flush")
GDN_ROUTES = ("output_only", "standard_step", "always_flush")
GDN_GEOM = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=16)
# The pool the steps are given is slots 2..4 of a cache of 7. The two slots on each side are
# guards with valid cursors, where an unchecked bad slot (-2, or 3) would read and write:
# every cache slot but row 0's (pool slot 0) must keep its bits.
POOL = slice(2, 5)
KEPT = [0, 1, 3, 4, 5, 6]


def _set_up(cache, names, write_pos_value, slot_value):
    """Random values in the cache's ``names`` (state, rings), so a changed byte shows; pool
    slot 1's cursor set to ``write_pos_value``. Returns the pool's state and ring arguments,
    the cache's tensors and cursors as they stand before the step, and the rows' slots (pool
    slots 0 and 1, or 0 and ``slot_value``)."""
    for name in names:
        getattr(cache, name).normal_()
    if write_pos_value is not None:
        cache.write_pos[POOL][1] = write_pos_value
    state, rings = cache.ssm_state[0, POOL], {name: t[POOL] for name, t in cache.ring_kwargs(0).items()}
    before = {name: getattr(cache, name).clone() for name in names + ("write_pos",)}
    return state, rings, before, torch.tensor([0, 1 if slot_value is None else slot_value], **I32)


def _force_flush(on: bool):
    """Both rows force-flushed (their step then falls to the fold launch), or no flags."""
    return dict(force_flush=torch.ones(2, dtype=torch.int8, device=DEVICE)) if on else {}


def _mamba2_step(write_pos_value=None, slot_value=None, config=None, route="output_only", force_flush=False):
    """One step of rows on pool slots 0 and 1 (or ``slot_value``). Returns the cache, its
    tensors before the step (cursors as set), and the outputs."""
    geom = Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1)
    cache = Mamba2ReplayCache(geom, 1, 7, L, torch.float32, torch.float32, DEVICE)
    state, rings, before, idx = _set_up(cache, ("ssm_state", "x_cache", "dt_cache", "B_cache"),
                                        write_pos_value, slot_value)
    out = rs.selective_state_update_replayssm(
        state, torch.randn(2, 2, 8, device=DEVICE), torch.randn(2, 2, device=DEVICE),
        -torch.rand(2, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE),
        state_batch_indices=idx, route=route, config=config, **_force_flush(force_flush), **rings)
    return cache, before, out


def _gdn_step(write_pos_value=None, slot_value=None, route="output_only", force_flush=False):
    """As :func:`_mamba2_step`, for GDN."""
    H, HV, K, V = GDN_GEOM.num_k_heads, GDN_GEOM.num_v_heads, GDN_GEOM.head_k_dim, GDN_GEOM.head_v_dim
    cache = GDNReplayCache(GDN_GEOM, 1, 7, L, device=DEVICE)
    state, rings, before, idx = _set_up(cache, ("ssm_state", "d_cache", "k_cache", "g_cache"),
                                        write_pos_value, slot_value)
    rand = lambda *shape: torch.randn(*shape, device=DEVICE)  # noqa: E731
    out = rs.fused_recurrent_gated_delta_rule_replayssm(
        state, rand(2, H, K), rand(2, H, K), rand(2, HV, V), rand(2, HV), rand(2, HV), rand(HV), rand(HV),
        initial_state_indices=idx, route=route, **_force_flush(force_flush), **rings)
    return cache, before, out


def _assert_refused_row(cache, before, out):
    """Row 1 gets NaN outputs; every cache slot but row 0's keeps the bits of its state and
    ring entries, and no cursor moves; row 0 (an empty ring on every route) is served."""
    assert torch.isnan(out[1]).all() and not torch.isnan(out[0]).any()
    for name, was in before.items():
        now = getattr(cache, name)
        if name == "write_pos":
            assert torch.equal(now, was), "write_pos"
        else:
            assert torch.equal(now[:, KEPT], was[:, KEPT]), name


@pytest.mark.parametrize("force_flush", [False, True], ids=["no_flags", "force_flushed"])
@pytest.mark.parametrize("config", CONFIGS, ids=["table", "row_block_runs"])
@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_out_of_range_cursor_gives_nan_and_changes_nothing(cursor, config, force_flush):
    """Force-flushed, the row's step falls to the fold launch, which must skip it too."""
    _assert_refused_row(*_mamba2_step(write_pos_value=cursor, config=config, force_flush=force_flush))


@pytest.mark.parametrize("route", MAMBA2_ROUTES[1:])
@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_out_of_range_cursor_on_the_other_routes(cursor, route):
    _assert_refused_row(*_mamba2_step(write_pos_value=cursor, route=route))


@pytest.mark.parametrize("route, force_flush", [(r, False) for r in GDN_ROUTES] + [("output_only", True)])
@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_gdn_out_of_range_cursor_gives_nan_and_changes_nothing(cursor, route, force_flush):
    _assert_refused_row(*_gdn_step(write_pos_value=cursor, route=route, force_flush=force_flush))


@pytest.mark.parametrize("config", CONFIGS, ids=["table", "row_block_runs"])
@pytest.mark.parametrize("slot", BAD_SLOTS)
def test_out_of_range_slot_gives_nan_and_changes_nothing(slot, config):
    _assert_refused_row(*_mamba2_step(slot_value=slot, config=config))


@pytest.mark.parametrize("route", MAMBA2_ROUTES[1:])
@pytest.mark.parametrize("slot", BAD_SLOTS)
def test_out_of_range_slot_on_the_other_routes(slot, route):
    _assert_refused_row(*_mamba2_step(slot_value=slot, route=route))


@pytest.mark.parametrize("route", GDN_ROUTES)
@pytest.mark.parametrize("slot", BAD_SLOTS)
def test_gdn_out_of_range_slot_gives_nan_and_changes_nothing(slot, route):
    _assert_refused_row(*_gdn_step(slot_value=slot, route=route))


def test_cursor_ops_skip_rows_outside_the_pool():
    """advance and reset move no cursor for a slot past the pool or below 0 (the pool is
    slots 2..4 of the cursor vector; the guards on each side hold cursors that each op
    would move: none 0, none at L - 1)."""
    wp = torch.tensor([1, 2, 1, 2, 1, 2, 1], **I32)
    pool, kept = wp[POOL], wp.tolist()
    bad = torch.tensor([3, -2], **I32)
    ops = [lambda: rs.advance_write_pos(pool, L, bad, force_flush=torch.ones(2, dtype=torch.int8, device=DEVICE)),
           lambda: rs.advance_write_pos(pool, L, bad),
           lambda: rs.advance_write_pos(pool, L, bad, flush_all=True),
           lambda: rs.reset_write_pos(pool, bad)]
    for i, op in enumerate(ops):
        op()
        assert wp.tolist() == kept, f"op {i}"
