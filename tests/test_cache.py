"""Cache helper: shapes, zero initialisation, exact bytes per slot."""

import pytest
import torch

from trtllm_replayssm.cache import (GDNGeometry, GDNReplayCache, Mamba2Geometry, Mamba2ReplayCache, gdn_bytes_per_slot,
                                    gdn_ring_dtype, mamba2_bytes_per_slot)
from trtllm_replayssm.models import GDN_MODELS, MAMBA2_MODELS, TINY_MAMBA2  # noqa: F401

M2, G2 = Mamba2Geometry(nheads=4, headdim=8, dstate=16, ngroups=2), GDNGeometry(2, 4, 16, 16)


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


@pytest.mark.parametrize("state_dtype, ring_dtype", [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16),
                                                     (torch.float16, torch.float32)])
def test_gdn_rings_take_the_drift_studys_dtype(state_dtype, ring_dtype):
    """The d and k rings are bf16 beside a bf16 state and fp32 otherwise (README, "GDN ring
    dtype"); g stays fp32; a speculative verify's rings stay fp32; a ring dtype passed wins."""
    g = GDN_MODELS["qwen3.5-4b"].geom
    assert gdn_ring_dtype(state_dtype) == ring_dtype and gdn_ring_dtype(state_dtype, speculative=True) == torch.float32
    c = GDNReplayCache(g, 1, 2, 16, state_dtype, device="meta")
    assert (c.d_cache.dtype, c.k_cache.dtype, c.g_cache.dtype) == (ring_dtype, ring_dtype, torch.float32)
    assert c.ring_dtype == ring_dtype and c.bytes_per_slot() == gdn_bytes_per_slot(g, 16, 1, state_dtype, ring_dtype)
    assert GDNReplayCache(g, 1, 2, 16, state_dtype, torch.float32, device="meta").d_cache.dtype == torch.float32


def test_qwen35_4b_gdn_ring_bytes():
    """Qwen3.5-4B, one layer, L = 16: a value head's entry is 772 bytes on an fp32 ring and
    388 on a bf16 one (d: V values, half a key head's k: K / 2, g: 4 bytes)."""
    g = GDN_MODELS["qwen3.5-4b"].geom
    fp32, bf16 = (gdn_bytes_per_slot(g, 16, 1, sd)["ring"] for sd in (torch.float32, torch.bfloat16))
    assert (fp32, bf16) == (32 * 16 * 772, 32 * 16 * 388)


@pytest.mark.parametrize("make,exc,words", [
    (lambda: Mamba2Geometry(nheads=0, headdim=8, dstate=16, ngroups=1), ValueError, "nheads must be >= 1"),
    (lambda: Mamba2Geometry(nheads=4, headdim=-8, dstate=16, ngroups=1), ValueError, "headdim must be >= 1"),
    (lambda: Mamba2Geometry(nheads=4, headdim=8, dstate=16.0, ngroups=1), TypeError, "dstate must be an int"),
    (lambda: GDNGeometry(2, 4, 0, 16), ValueError, "head_k_dim must be >= 1"),
    (lambda: Mamba2ReplayCache(M2, 1, 0, 4, device="cpu"), ValueError, "num_slots must be >= 1"),
    (lambda: Mamba2ReplayCache(M2, -1, 2, 4, device="cpu"), ValueError, "num_layers must be >= 1"),
    (lambda: Mamba2ReplayCache(M2, 1, 2, 4.0, device="cpu"), TypeError, "L must be an int"),
    (lambda: Mamba2ReplayCache(M2, 1, 2, 4, torch.float64, device="cpu"), TypeError, "state_dtype must be in"),
    (lambda: Mamba2ReplayCache(M2, 1, 2, 4, act_dtype=torch.int8, device="cpu"), TypeError, "act_dtype must be in"),
    (lambda: GDNReplayCache(G2, 1, 2, 4, ring_dtype=torch.int8, device="cpu"), TypeError, "ring_dtype must be in"),
    (lambda: mamba2_bytes_per_slot(M2, 0), ValueError, "buffer_len must be >= 1"),
    (lambda: gdn_bytes_per_slot(G2, -16), ValueError, "buffer_len must be >= 1"),
], ids=["nheads", "headdim", "dstate-float", "gdn-K", "slots", "layers", "L-float", "state-dtype", "act-dtype",
        "ring-dtype", "m2-bytes-L", "gdn-bytes-L"])
def test_bad_sizes_and_dtypes_raise(make, exc, words):
    """A geometry or cache that no kernel could serve raises at construction, naming the
    argument (not later, at the first decode step, or as a torch allocation error)."""
    with pytest.raises(exc, match=words):
        make()
