"""Cache helper: shapes, zero initialisation, exact bytes per slot."""

import torch

from trtllm_replayssm.cache import Mamba2ReplayCache, mamba2_bytes_per_slot
from trtllm_replayssm.models import MAMBA2_MODELS, TINY_MAMBA2  # noqa: F401


def test_layout_and_zero_init():
    g = TINY_MAMBA2.geom
    c = Mamba2ReplayCache(g, num_layers=2, num_slots=3, buffer_len=5, device="cpu")
    assert c.ssm_state.shape == (2, 3, g.nheads, g.headdim, g.dstate)
    assert c.x_cache.shape == (2, 3, g.nheads, 5, g.headdim)
    assert c.dt_cache.shape == (2, 3, g.nheads, 5) and c.dt_cache.dtype == torch.float32
    assert c.B_cache.shape == (2, 3, g.ngroups, 5, g.dstate)
    assert c.write_pos.shape == (3,) and c.write_pos.dtype == torch.int32
    assert all(int(t.abs().sum()) == 0 for t in (c.ssm_state, c.x_cache, c.dt_cache, c.B_cache, c.write_pos))
    layer = c.layer(1)
    assert layer.ssm_state.data_ptr() == c.ssm_state[1].data_ptr() and layer.write_pos is c.write_pos


def test_bytes_per_slot_matches_allocation():
    g = TINY_MAMBA2.geom
    c = Mamba2ReplayCache(g, num_layers=2, num_slots=3, buffer_len=5, state_dtype=torch.bfloat16, device="cpu")
    nbytes = lambda t: t.numel() * t.element_size() // 3  # noqa: E731  (per slot)
    b = c.bytes_per_slot()
    assert b["checkpoint"] == nbytes(c.ssm_state)
    assert b["ring"] == nbytes(c.x_cache) + nbytes(c.dt_cache) + nbytes(c.B_cache)
    assert b["total"] == b["checkpoint"] + b["ring"] + 4


def test_nano_4b_numbers():
    """Nano-4B, one layer, fp32 state, bf16 ring, L = 16: 3.75 MiB state + 276 KiB ring."""
    b = mamba2_bytes_per_slot(MAMBA2_MODELS["nemotron-3-nano-4b"].geom, 16)
    assert b["checkpoint"] == 96 * 80 * 128 * 4 == int(3.75 * 2**20)
    assert b["ring"] == 96 * 16 * 80 * 2 + 96 * 16 * 4 + 8 * 16 * 128 * 2
