"""Bad input raises before any kernel runs, naming the argument; nothing is modified."""

import pytest
import torch

import trtllm_replayssm as rs
from mamba2_harness import DEVICE
from trtllm_replayssm.cache import Mamba2Geometry, Mamba2ReplayCache

GEOM = Mamba2Geometry(nheads=4, headdim=8, dstate=16, ngroups=2)
BATCH, SLOTS, L = 3, 5, 4


def valid_call():
    """(state, step kwargs, ring kwargs) of a valid replay call."""
    H, P, N, G = GEOM.nheads, GEOM.headdim, GEOM.dstate, GEOM.ngroups
    cache = Mamba2ReplayCache(GEOM, 1, SLOTS, L, torch.float32, torch.float32, DEVICE)
    cache.ssm_state.normal_()
    step = dict(
        x=torch.randn(BATCH, H, P, device=DEVICE), dt=torch.randn(BATCH, H, device=DEVICE),
        A=-torch.rand(H, device=DEVICE), B=torch.randn(BATCH, G, N, device=DEVICE),
        C=torch.randn(BATCH, G, N, device=DEVICE), D=torch.randn(H, device=DEVICE),
        z=torch.randn(BATCH, H, P, device=DEVICE), dt_bias=torch.randn(H, device=DEVICE), dt_softplus=True,
        state_batch_indices=torch.tensor([0, 2, 4], dtype=torch.int32, device=DEVICE),
    )
    return cache, step


def _noncontig(t):
    return t.transpose(-1, -2).contiguous().transpose(-1, -2)


# (description, mutation of (step, ring) in place, exception, words the message must name)
CASES = [
    ("x rank", lambda s, r: s.update(x=s["x"][0]), ValueError, "x must have shape"),
    ("x dtype", lambda s, r: s.update(x=s["x"].to(torch.int32)), TypeError, "x must have dtype"),
    ("x strides", lambda s, r: s.update(x=_noncontig(s["x"])), ValueError, "x must have stride 1"),
    ("B batch", lambda s, r: s.update(B=s["B"][:2]), ValueError, "B must have shape"),
    ("C shape", lambda s, r: s.update(C=s["C"][:, :, :8]), ValueError, "C must have shape"),
    ("B dtype vs x", lambda s, r: s.update(B=s["B"].half()), TypeError, "B must have the dtype of x"),
    ("ngroups", lambda s, r: s.update(B=torch.randn(BATCH, 3, 16, device=DEVICE),
                                      C=torch.randn(BATCH, 3, 16, device=DEVICE)), ValueError, "ngroups"),
    ("dt shape", lambda s, r: s.update(dt=s["dt"][:, :2]), ValueError, "dt must have shape"),
    ("dt not tied", lambda s, r: s.update(dt=torch.randn(BATCH, 4, 8, device=DEVICE)), ValueError, "dt must not vary"),
    ("A not per head", lambda s, r: s.update(A=torch.randn(4, 8, 16, device=DEVICE)), ValueError, "A must not vary"),
    ("dt_bias shape", lambda s, r: s.update(dt_bias=torch.randn(5, device=DEVICE)), ValueError, "dt_bias must have shape"),
    ("D shape", lambda s, r: s.update(D=torch.randn(4, 3, device=DEVICE)), ValueError, "D must have shape"),
    ("z shape", lambda s, r: s.update(z=s["z"][:, :2]), ValueError, "z must have shape"),
    ("out dtype", lambda s, r: s.update(out=torch.empty(BATCH, 4, 8, device=DEVICE, dtype=torch.float16)),
     TypeError, "out must have the dtype of x"),
    ("indices dtype", lambda s, r: s.update(state_batch_indices=s["state_batch_indices"].float()), TypeError,
     "state_batch_indices must have dtype"),
    ("indices size", lambda s, r: s.update(state_batch_indices=s["state_batch_indices"][:2]), ValueError,
     "state_batch_indices must have shape"),
    # a slice with a stride: read as packed, row 1 would take the slot between two rows' slots
    ("indices strided", lambda s, r: s.update(state_batch_indices=torch.tensor(
        [0, 1, 2, 3, 4, 3], dtype=torch.int32, device=DEVICE)[::2]), ValueError,
     "state_batch_indices must have unit stride"),
    ("x_cache dtype", lambda s, r: r.update(x_cache=r["x_cache"].half()), TypeError, "x_cache must have dtype"),
    ("x_cache not slot-major", lambda s, r: r.update(x_cache=_noncontig(r["x_cache"])), ValueError,
     "x_cache must hold each slot's block packed"),
    ("x_cache slots overlap", lambda s, r: r.update(x_cache=r["x_cache"].as_strided(
        r["x_cache"].shape, (1, *r["x_cache"].stride()[1:]))), ValueError, "slots at least a block apart"),
    ("L = 0", lambda s, r: r.update(x_cache=r["x_cache"][:, :, :0]), ValueError, "buffer length L"),
    ("L = 65", lambda s, r: r.update(x_cache=torch.zeros(SLOTS, 4, 65, 8, device=DEVICE)), ValueError,
     "buffer length L"),
    ("dt_cache dtype", lambda s, r: r.update(dt_cache=r["dt_cache"].half()), TypeError, "dt_cache must have dtype"),
    ("dt_cache length", lambda s, r: r.update(dt_cache=r["dt_cache"][:, :, :2]), ValueError,
     "dt_cache must have shape"),
    ("B_cache groups", lambda s, r: r.update(B_cache=torch.zeros(SLOTS, 4, L, 16, device=DEVICE)), ValueError,
     "B_cache must have shape"),
    ("write_pos dtype", lambda s, r: r.update(write_pos=r["write_pos"].long()), TypeError, "write_pos must have dtype"),
    ("write_pos size", lambda s, r: r.update(write_pos=r["write_pos"][:3]), ValueError, "write_pos must have shape"),
    ("force_flush size", lambda s, r: r.update(force_flush=torch.zeros(2, dtype=torch.int8, device=DEVICE)),
     ValueError, "force_flush must have shape"),
    ("force_flush strided", lambda s, r: r.update(force_flush=torch.zeros(2 * BATCH, dtype=torch.int8,
                                                                            device=DEVICE)[::2]),
     ValueError, "force_flush must have unit stride"),
    ("route", lambda s, r: r.update(route="fast"), ValueError, "route must be one of"),
]


@pytest.mark.parametrize("desc,mutate,exc,words", CASES, ids=[c[0] for c in CASES])
def test_replay_rejects(desc, mutate, exc, words):
    cache, step = valid_call()
    ring = cache.ring_kwargs(0)
    mutate(step, ring)
    before = cache.ssm_state.clone()
    with pytest.raises(exc, match=words):
        rs.selective_state_update_replayssm(cache.ssm_state[0], **step, **ring)
    assert torch.equal(cache.ssm_state, before)


def test_state_pool_checks():
    cache, step = valid_call()
    ring = cache.ring_kwargs(0)
    with pytest.raises(ValueError, match="state must hold each slot's block packed"):
        rs.selective_state_update(_noncontig(cache.ssm_state[0]), **step)
    with pytest.raises(ValueError, match="state must have shape"):
        rs.selective_state_update(cache.ssm_state[0, :, :, :4], **step)
    with pytest.raises(TypeError, match="state must have dtype"):
        rs.selective_state_update(cache.ssm_state[0].double(), **step)
    step.pop("state_batch_indices")
    with pytest.raises(ValueError, match="no state_batch_indices"):
        rs.selective_state_update(cache.ssm_state[0, :2], **step)
    with pytest.raises(ValueError, match="x_cache must have shape"):  # ring sized for another pool
        rs.selective_state_update_replayssm(cache.ssm_state[0, :4], **step, **ring)


def test_geometry_rejects_groups():
    with pytest.raises(ValueError, match="ngroups"):
        Mamba2Geometry(nheads=6, headdim=8, dstate=16, ngroups=4)


def test_cursor_ops_reject():
    wp = torch.zeros(4, dtype=torch.int32, device=DEVICE)
    with pytest.raises(ValueError, match="buffer length"):
        rs.advance_write_pos(wp, 0)
    with pytest.raises(TypeError, match="write_pos must have dtype"):
        rs.advance_write_pos(wp.long(), 4)
    with pytest.raises(TypeError, match="slots must have dtype"):
        rs.reset_write_pos(wp, torch.zeros(2, device=DEVICE))
    with pytest.raises(ValueError, match="force_flush must have shape"):
        rs.advance_write_pos(wp, 4, torch.arange(3, dtype=torch.int32, device=DEVICE),
                             force_flush=torch.zeros(4, dtype=torch.int8, device=DEVICE))
    # Strided index and flag vectors: the cursor kernels read them packed.
    rows = torch.arange(6, dtype=torch.int32, device=DEVICE) % 4
    with pytest.raises(ValueError, match="slots must have unit stride"):
        rs.reset_write_pos(wp, rows[::2])
    with pytest.raises(ValueError, match="state_batch_indices must have unit stride"):
        rs.advance_write_pos(wp, 4, rows[::2])
    with pytest.raises(ValueError, match="force_flush must have unit stride"):
        rs.advance_write_pos(wp, 4, rows[:3], force_flush=torch.zeros(6, dtype=torch.int8, device=DEVICE)[::2])
    assert not wp.any()
