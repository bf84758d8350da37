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


# The non-flush launch's own config, and one whose programs run blocks of rows one after
# another (the second run partly past headdim 8): the NaN rows must cover every block.
CONFIGS = [None, LaunchConfig(2, 1, 0, loop_blocks=3)]
L = 4
# Cursors just outside [0, L): the first past the ring's end (a check of w > L would take it
# and append past the ring), one below 0, and one well past.
BAD_CURSORS = [L, -1, 7]
MAMBA2_ROUTES = ("output_only", "state_and_output", "standard_step", "always_flush")
GDN_ROUTES = ("output_only", "standard_step", "always_flush")
GDN_GEOM = GDNGeometry(num_k_heads=1, num_v_heads=2, head_k_dim=16, head_v_dim=16)


def _filled(cache, names):
    """The cache with every state and ring entry random (a changed byte shows), cursors 0."""
    for name in names:
        getattr(cache, name).normal_()
    return {name: getattr(cache, name).clone() for name in names + ("write_pos",)}


def _force_flush(on: bool):
    """Both rows force-flushed (their step then falls to the fold launch), or no flags."""
    return dict(force_flush=torch.ones(2, dtype=torch.int8, device=DEVICE)) if on else {}


def _mamba2_step(write_pos_value=None, slot_value=None, config=None, route="output_only", force_flush=False):
    """One step of rows on slots 0 and 1 (or ``slot_value``); slot 1's cursor set to
    ``write_pos_value``. Returns the cache, its tensors before, and the outputs."""
    geom = Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1)
    cache = Mamba2ReplayCache(geom, 1, 3, L, torch.float32, torch.float32, DEVICE)
    before = _filled(cache, ("ssm_state", "x_cache", "dt_cache", "B_cache"))
    if write_pos_value is not None:
        cache.write_pos[1] = before["write_pos"][1] = write_pos_value
    idx = torch.tensor([0, 1 if slot_value is None else slot_value], **I32)
    out = rs.selective_state_update_replayssm(
        cache.ssm_state[0], torch.randn(2, 2, 8, device=DEVICE), torch.randn(2, 2, device=DEVICE),
        -torch.rand(2, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE),
        state_batch_indices=idx, route=route, config=config, **_force_flush(force_flush), **cache.ring_kwargs(0))
    return cache, before, out


def _gdn_step(write_pos_value=None, slot_value=None, route="output_only", force_flush=False):
    """As :func:`_mamba2_step`, for GDN."""
    H, HV, K, V = GDN_GEOM.num_k_heads, GDN_GEOM.num_v_heads, GDN_GEOM.head_k_dim, GDN_GEOM.head_v_dim
    cache = GDNReplayCache(GDN_GEOM, 1, 3, L, device=DEVICE)
    before = _filled(cache, ("ssm_state", "d_cache", "k_cache", "g_cache"))
    if write_pos_value is not None:
        cache.write_pos[1] = before["write_pos"][1] = write_pos_value
    idx = torch.tensor([0, 1 if slot_value is None else slot_value], **I32)
    rand = lambda *shape: torch.randn(*shape, device=DEVICE)  # noqa: E731
    out = rs.fused_recurrent_gated_delta_rule_replayssm(
        cache.ssm_state[0], rand(2, H, K), rand(2, H, K), rand(2, HV, V), rand(2, HV), rand(2, HV), rand(HV),
        rand(HV), initial_state_indices=idx, route=route, **_force_flush(force_flush), **cache.ring_kwargs(0))
    return cache, before, out


def _assert_refused_row(cache, before, out, kept_slots):
    """Row 1 gets NaN outputs; the state and ring entries of ``kept_slots`` and every cursor
    keep their bits; row 0 (slot 0, an empty ring on every route) is served."""
    assert torch.isnan(out[1]).all() and not torch.isnan(out[0]).any()
    for name, was in before.items():
        now = getattr(cache, name)
        if name == "write_pos":
            assert torch.equal(now, was), "write_pos"
        else:
            assert torch.equal(now[:, kept_slots], was[:, kept_slots]), name


@pytest.mark.parametrize("force_flush", [False, True], ids=["no_flags", "force_flushed"])
@pytest.mark.parametrize("config", CONFIGS, ids=["table", "row_block_runs"])
@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_out_of_range_cursor_gives_nan_and_changes_nothing(cursor, config, force_flush):
    """Force-flushed, the row's step falls to the fold launch, which must skip it too."""
    _assert_refused_row(*_mamba2_step(write_pos_value=cursor, config=config, force_flush=force_flush), [1])


@pytest.mark.parametrize("route", MAMBA2_ROUTES[1:])
@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_out_of_range_cursor_on_the_other_routes(cursor, route):
    _assert_refused_row(*_mamba2_step(write_pos_value=cursor, route=route), [1])


@pytest.mark.parametrize("route, force_flush", [(r, False) for r in GDN_ROUTES] + [("output_only", True)])
@pytest.mark.parametrize("cursor", BAD_CURSORS)
def test_gdn_out_of_range_cursor_gives_nan_and_changes_nothing(cursor, route, force_flush):
    _assert_refused_row(*_gdn_step(write_pos_value=cursor, route=route, force_flush=force_flush), [1])


# Slot 3, the first past the pool's slots 0..2: slots 1 and 2 must keep every bit.
@pytest.mark.parametrize("config", CONFIGS, ids=["table", "row_block_runs"])
def test_out_of_range_slot_gives_nan_and_changes_nothing(config):
    _assert_refused_row(*_mamba2_step(slot_value=3, config=config), [1, 2])


@pytest.mark.parametrize("route", GDN_ROUTES)
def test_gdn_out_of_range_slot_gives_nan_and_changes_nothing(route):
    _assert_refused_row(*_gdn_step(slot_value=3, route=route), [1, 2])
