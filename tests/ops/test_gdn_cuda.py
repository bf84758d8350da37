"""GDN at real model shapes on a CUDA device (skipped on the CPU interpreter)."""

import pytest
import torch

from conftest import requires_cuda
from gdn_harness import GDNScenario, run_gdn_replay, run_gdn_standard
from trtllm_replayssm.benchmarking import gdn_ar
from trtllm_replayssm.models import GDN_MODELS
from trtllm_replayssm.ops.launch import LaunchConfig

pytestmark = requires_cuda


@pytest.mark.parametrize("ring_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", ["qwen3.5-4b", "qwen3.5-122b"])
def test_replay_real_shapes(model, state_dtype, ring_dtype):
    run_gdn_replay(GDNScenario(GDN_MODELS[model].geom, 16, state_dtype, torch.bfloat16, ring_dtype), 3 * 16 + 2)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", ["qwen3.5-4b", "qwen3.5-122b"])
def test_flush_every_step_routes_real_shapes(model, state_dtype):
    """``always_flush`` drains the staggered rings, then ``standard_step`` on the empty ones
    (the standard kernel with the cursor check, as the dispatcher runs them at small batches)."""
    run_gdn_replay(GDNScenario(GDN_MODELS[model].geom, 16, state_dtype, torch.bfloat16), 6,
                   route=lambda t: "always_flush" if t < 2 else "standard_step")


@pytest.mark.parametrize("config", gdn_ar.CANDIDATES["always_flush"], ids=str)
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model", ["qwen3.5-4b", "qwen3.5-122b"])
def test_always_flush_drain_on_every_tuning_candidate(model, state_dtype, config):
    """The drain's quarter tiles (``launch.drain_rows``) compiled for the GPU on each tile
    the tuner may pick, on staggered non-empty rings."""
    run_gdn_replay(GDNScenario(GDN_MODELS[model].geom, 16, state_dtype, torch.bfloat16), 3, route="always_flush",
                   config=config)


@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_standard_real_shapes(state_dtype):
    run_gdn_standard(GDNScenario(GDN_MODELS["qwen3.5-122b"].geom, 1, state_dtype, torch.bfloat16), 8)


@pytest.mark.parametrize("config, fold_config", [
    (LaunchConfig(8, 1, loop_blocks=16), LaunchConfig(16, 2, fold_dot=1, loop_blocks=8)),
    (LaunchConfig(16, 2, loop_blocks=4), LaunchConfig(32, 4, fold_dot=1, loop_blocks=2, heads_per_prog=4)),
], ids=["whole_head", "two_runs"])
def test_replay_looping_over_value_blocks_real_shapes(config, fold_config):
    run_gdn_replay(GDNScenario(GDN_MODELS["qwen3.5-122b"].geom, 16, torch.float32, torch.bfloat16), 3 * 16 + 2,
                   config=config, fold_config=fold_config)


@pytest.mark.parametrize("stages", [2, 3])
def test_replay_with_staged_block_loops_real_shapes(monkeypatch, stages):
    """``LOOP_STAGES``: both launches' loops over value blocks software-pipelined."""
    from trtllm_replayssm.ops.gdn import replay

    monkeypatch.setitem(replay.LOOP_STAGES, replay.NONFLUSH.value, stages)
    monkeypatch.setitem(replay.LOOP_STAGES, replay.FOLD.value, stages)
    run_gdn_replay(GDNScenario(GDN_MODELS["qwen3.5-122b"].geom, 16, torch.float32, torch.bfloat16), 3 * 16 + 2,
                   config=LaunchConfig(8, 1, loop_blocks=16), fold_config=LaunchConfig(16, 2, fold_dot=1, loop_blocks=8))
