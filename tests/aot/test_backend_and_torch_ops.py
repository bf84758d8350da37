"""The backend switch and the torch custom ops (CPU: the interpreter)."""

from __future__ import annotations

import pytest
import torch

import trtllm_replayssm as rs
import trtllm_replayssm.torch_ops  # noqa: F401  (registers torch.ops.replayssm)
from trtllm_replayssm.aot import backend
from trtllm_replayssm.cache import Mamba2Geometry, Mamba2ReplayCache


def test_backend_switch(monkeypatch):
    assert backend.activate("jit") == "jit"
    with pytest.raises(ValueError, match="aot or jit"):
        backend.activate("cuda")
    if not torch.cuda.is_available():
        assert backend.activate("aot") == "aot (unavailable)"
        with pytest.raises(RuntimeError, match="libreplayssm_kernels"):  # at the first launch, clearly
            rs.advance_write_pos(torch.zeros(4, dtype=torch.int32), 4, torch.arange(2, dtype=torch.int32))
        monkeypatch.delenv(backend.ENV, raising=False)
        assert backend.activate() == "jit"  # auto: no GPU here


DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _mamba2_inputs(batch=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    geom = Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2)
    H, P, N, G = geom.nheads, geom.headdim, geom.dstate, geom.ngroups
    cache = Mamba2ReplayCache(geom, 1, batch + 1, 4, act_dtype=torch.float32, device=DEVICE)
    cache.ssm_state.copy_(torch.randn(cache.ssm_state.shape, generator=g))
    step = dict(x=torch.randn(batch, H, P, generator=g), dt=torch.rand(batch, H, generator=g),
                A=-torch.rand(H, generator=g), B=torch.randn(batch, G, N, generator=g),
                C=torch.randn(batch, G, N, generator=g), D=torch.randn(H, generator=g), z=None,
                dt_bias=torch.randn(H, generator=g), out=torch.empty(batch, H, P),
                slot_idx=torch.tensor([2, 0, 1], dtype=torch.int32))
    return cache, {k: v.to(DEVICE) if v is not None else None for k, v in step.items()}


def _run_ops(cache, step, steps=5):
    outs = []
    for _ in range(steps):
        torch.ops.replayssm.mamba2_step(cache.ssm_state[0], step["x"], step["dt"], step["A"], step["B"], step["C"],
                                        step["D"], step["z"], step["dt_bias"], step["out"], step["slot_idx"],
                                        cache.x_cache[0], cache.dt_cache[0], cache.B_cache[0], cache.write_pos, None,
                                        True, -1, "output_only")
        torch.ops.replayssm.advance_write_pos(cache.write_pos, 4, step["slot_idx"], None, False, -1)
        outs.append(step["out"].clone())
    return outs


def test_custom_ops_equal_the_entry_points():
    """replayssm::mamba2_step + replayssm::advance_write_pos over a flush equal the Python calls."""
    cache_a, step_a = _mamba2_inputs()
    cache_b, step_b = _mamba2_inputs()
    outs = _run_ops(cache_a, step_a)
    for t in range(5):
        rs.selective_state_update_replayssm(cache_b.ssm_state[0], step_b["x"], step_b["dt"], step_b["A"], step_b["B"],
                                            step_b["C"], D=step_b["D"], dt_bias=step_b["dt_bias"], dt_softplus=True,
                                            state_batch_indices=step_b["slot_idx"], out=step_b["out"],
                                            route="output_only", **cache_b.ring_kwargs(0))
        cache_b.advance(step_b["slot_idx"])
        assert torch.equal(outs[t], step_b["out"])
    assert torch.equal(cache_a.ssm_state, cache_b.ssm_state) and torch.equal(cache_a.write_pos, cache_b.write_pos)


def test_custom_ops_trace_under_torch_compile():
    """The fake implementations and declared mutations let torch.compile trace the decode
    step (aot_eager: functionalisation with fake tensors, then the real ops)."""
    cache_a, step_a = _mamba2_inputs(seed=1)
    cache_b, step_b = _mamba2_inputs(seed=1)
    expected = _run_ops(cache_a, step_a, steps=2)
    compiled = torch.compile(_run_ops, backend="aot_eager", fullgraph=False)
    got = compiled(cache_b, step_b, steps=2)
    for a, b in zip(expected, got):
        assert torch.equal(a, b)
    assert torch.equal(cache_a.ssm_state, cache_b.ssm_state)


def test_custom_ops_declare_their_mutations():
    schema = torch.ops.replayssm.mamba2_step.default._schema
    mutated = {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write}
    assert mutated == {"state", "out", "x_cache", "dt_cache", "B_cache"}
    schema = torch.ops.replayssm.gdn_step.default._schema
    assert {a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write} == {
        "state", "out", "d_cache", "k_cache", "g_cache"}
