"""Real model shapes on a CUDA device (skipped on the CPU interpreter)."""

import pytest
import torch

from conftest import requires_cuda
from mamba2_harness import Scenario, run_replay, run_standard
from trtllm_replayssm.benchmarking import mamba2_ar
from trtllm_replayssm.models import MAMBA2_MODELS

pytestmark = requires_cuda

MODELS = ["nemotron-3-nano-4b", "nemotron-3-super"]


@pytest.mark.parametrize("route", ["output_only", "state_and_output"])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", MODELS)
def test_replay_real_shapes(model, state_dtype, route):
    sc = Scenario(MAMBA2_MODELS[model].geom, 16, state_dtype, torch.bfloat16, tied_params=True)
    run_replay(sc, 3 * 16 + 2, route=route)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", MODELS)
def test_flush_every_step_routes_real_shapes(model, state_dtype):
    """``always_flush`` drains the staggered rings, then ``standard_step`` on the empty ones
    (the standard kernel with the cursor check, as the dispatcher runs them at small batches)."""
    sc = Scenario(MAMBA2_MODELS[model].geom, 16, state_dtype, torch.bfloat16, tied_params=True)
    run_replay(sc, 6, route=lambda t: "always_flush" if t < 2 else "standard_step")


@pytest.mark.parametrize("config", mamba2_ar.CANDIDATES["always_flush"], ids=str)
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", MODELS)
def test_always_flush_drain_on_every_tuning_candidate(model, state_dtype, config):
    """The drain's quarter tiles (``launch.drain_rows``) compiled for the GPU on each tile
    the tuner may pick, on staggered non-empty rings."""
    sc = Scenario(MAMBA2_MODELS[model].geom, 16, state_dtype, torch.bfloat16, tied_params=True)
    run_replay(sc, 3, route="always_flush", config=config)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_fold_with_matmul_real_shapes(state_dtype):
    """tf32x3 matmul fold (GPU only) stays within the fp32 tolerance over 3 cycles."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    sc = Scenario(MAMBA2_MODELS["nemotron-3-super"].geom, 16, state_dtype, torch.bfloat16, tied_params=True)
    run_replay(sc, 3 * 16 + 2, route="output_only", fold_config=LaunchConfig(32, 4, fold_dot=1))


@pytest.mark.parametrize("config", [(32, 1, 0), (64, 4, 0)], ids=str)
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", MODELS)
def test_non_flush_ring_as_tiles_real_shapes(model, state_dtype, config):
    """``fold_chunk = 0`` on the GPU: the non-flush launch's ring tiles over 3 cycles."""
    from trtllm_replayssm.ops.launch import LaunchConfig

    sc = Scenario(MAMBA2_MODELS[model].geom, 16, state_dtype, torch.bfloat16, tied_params=True)
    run_replay(sc, 3 * 16 + 2, route="output_only", config=LaunchConfig(*config))


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", MODELS)
def test_standard_real_shapes(model, state_dtype):
    run_standard(Scenario(MAMBA2_MODELS[model].geom, 1, state_dtype, torch.bfloat16, tied_params=True), 8)


def test_replay_step_captures_in_cuda_graph():
    """Replay step + cursor advance inside one CUDA graph equal the eager run."""
    from trtllm_replayssm.benchmarking.mamba2_ar import Launch, Mamba2Case, Mamba2Rig
    from trtllm_replayssm.benchmarking.timing import capture

    geom = MAMBA2_MODELS["nemotron-3-super"].geom
    case = Mamba2Case("super", geom, 8, 4, torch.float32)
    eager, graphed = Mamba2Rig(case, 2, seed=1), Mamba2Rig(case, 2, seed=1)
    eager.cycle_fn(Launch("output_only"))()
    g = capture(graphed.cycle_fn(Launch("output_only")), warmup=0)
    g.replay()
    torch.cuda.synchronize()
    assert torch.equal(eager.cache.ssm_state, graphed.cache.ssm_state)
    assert torch.equal(eager.cache.write_pos, graphed.cache.write_pos)
    assert torch.equal(eager.step["out"], graphed.step["out"])


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("model", MODELS)
def test_fold_with_staged_block_loop_real_shapes(monkeypatch, model, stages):
    """``LOOP_STAGES``: the fold program's loop over a head's blocks software-pipelined."""
    from trtllm_replayssm.ops.launch import LaunchConfig
    from trtllm_replayssm.ops.mamba2 import replay_fold

    monkeypatch.setattr(replay_fold, "LOOP_STAGES", stages)
    sc = Scenario(MAMBA2_MODELS[model].geom, 16, torch.float32, torch.bfloat16, tied_params=True)
    run_replay(sc, 3 * 16 + 2, route="output_only", fold_config=LaunchConfig(16, 2, 1, 1, 1, 0, 8))


@pytest.mark.parametrize("config", [c for c in mamba2_ar.CANDIDATES["output_only"] if c.loop_blocks > 1], ids=str)
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", MODELS)
def test_non_flush_row_block_runs_on_every_tuning_candidate(model, state_dtype, config):
    """The non-flush launch over runs of row blocks on every tile the tuner may pick, compiled
    for the GPU, over 3 cycles."""
    sc = Scenario(MAMBA2_MODELS[model].geom, 16, state_dtype, torch.bfloat16, tied_params=True)
    run_replay(sc, 3 * 16 + 2, route="output_only", config=config)
