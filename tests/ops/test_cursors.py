"""Cursor ops on device, and how the decode step treats out-of-range slots and cursors."""

import pytest
import torch

import trtllm_replayssm as rs
from mamba2_harness import DEVICE
from trtllm_replayssm.cache import Mamba2Geometry, Mamba2ReplayCache
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


def _one_step(write_pos_value=None, slot_value=None, config=None):
    geom = Mamba2Geometry(nheads=2, headdim=8, dstate=16, ngroups=1)
    cache = Mamba2ReplayCache(geom, 1, 3, 4, torch.float32, torch.float32, DEVICE)
    cache.ssm_state.normal_()
    cache.x_cache.normal_()
    if write_pos_value is not None:
        cache.write_pos[1] = write_pos_value
    before = {k: getattr(cache, k).clone() for k in ("ssm_state", "x_cache", "dt_cache", "B_cache", "write_pos")}
    idx = torch.tensor([0, 1 if slot_value is None else slot_value], **I32)
    out = rs.selective_state_update_replayssm(
        cache.ssm_state[0], torch.randn(2, 2, 8, device=DEVICE), torch.randn(2, 2, device=DEVICE),
        -torch.rand(2, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE), torch.randn(2, 1, 16, device=DEVICE),
        state_batch_indices=idx, route="output_only", config=config, **cache.ring_kwargs(0))
    return cache, before, out


@pytest.mark.parametrize("config", CONFIGS, ids=["table", "row_block_runs"])
def test_out_of_range_cursor_gives_nan_and_changes_nothing(config):
    cache, before, out = _one_step(write_pos_value=7, config=config)
    assert torch.isnan(out[1]).all() and not torch.isnan(out[0]).any()
    assert torch.equal(cache.ssm_state[0, 1], before["ssm_state"][0, 1])
    assert torch.equal(cache.x_cache[0, 1], before["x_cache"][0, 1])
    assert torch.equal(cache.write_pos, before["write_pos"])


@pytest.mark.parametrize("config", CONFIGS, ids=["table", "row_block_runs"])
def test_out_of_range_slot_gives_nan_and_changes_nothing(config):
    cache, before, out = _one_step(slot_value=3, config=config)  # the pool has slots 0..2
    assert torch.isnan(out[1]).all()
    assert torch.equal(cache.ssm_state[:, 1:], before["ssm_state"][:, 1:])
