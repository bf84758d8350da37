"""The output_only route's fold launch on a side stream (``ops.streams``).

On the CPU the decision is always off (the interpreter has no streams); on a GPU the
side stream is forced at the harnesses' small batches (the limit set to 0) and the
replays are checked against the recurrence over 3 cycles with staggered cursors, and a
captured CUDA graph against the eager steps.
"""

import pytest
import torch

from conftest import requires_cuda
from gdn_harness import GDNScenario, run_gdn_replay
from mamba2_harness import Scenario, run_replay
from trtllm_replayssm.models import GDN_MODELS, MAMBA2_MODELS
from trtllm_replayssm.ops import launch, streams


def test_off_below_the_limit_and_on_the_cpu():
    cpu, meta = torch.device("cpu"), torch.device("meta")
    limit = launch.FOLD_PDL_MAX_HEAD_ROWS["mamba2"]
    assert not launch.fold_side_stream(cpu, 10 * limit, "mamba2")
    assert not launch.fold_side_stream(meta, 10 * limit, "mamba2")  # (meta: only while recording for an arch)
    with launch.recording_for_arch(90):
        assert launch.fold_side_stream(meta, limit + 1, "mamba2")
        assert not launch.fold_side_stream(meta, limit, "mamba2")
        assert not launch.fold_side_stream(meta, launch.FOLD_PDL_MAX_HEAD_ROWS["gdn"], "gdn")


def test_recorded_fold_is_marked_and_made_first():
    """Recorded (not run), the fold is made first and marked; the step after it is not."""
    made = []

    def fold():
        made.append(("fold", streams.launching_on_side_stream()))

    def nonflush():
        made.append(("nonflush", streams.launching_on_side_stream()))

    streams.launch_fold_beside(fold, nonflush, torch.device("meta"), beside=True)
    assert made == [("fold", True), ("nonflush", False)]
    made.clear()
    streams.launch_fold_beside(fold, nonflush, torch.device("meta"), beside=False)
    assert made == [("nonflush", False), ("fold", False)]


@pytest.fixture
def side_stream_always(monkeypatch):
    """The side stream at every batch; counts the steps that took it."""
    monkeypatch.setattr(launch, "FOLD_PDL_MAX_HEAD_ROWS", {"mamba2": 0, "gdn": 0})
    taken = []
    real = streams.launch_fold_beside

    def counting(fold, nonflush, device, beside):
        taken.append(beside)
        real(fold, nonflush, device, beside)

    for module in ("trtllm_replayssm.ops.mamba2.replay", "trtllm_replayssm.ops.gdn.replay"):
        monkeypatch.setattr(f"{module}.launch_fold_beside", counting)
    return taken


@requires_cuda
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_mamba2_fold_beside_real_shapes(side_stream_always, state_dtype):
    sc = Scenario(MAMBA2_MODELS["nemotron-3-super"].geom, 16, state_dtype, torch.bfloat16, tied_params=True)
    run_replay(sc, 3 * 16 + 2, route="output_only")
    assert side_stream_always and all(side_stream_always)


@requires_cuda
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_gdn_fold_beside_real_shapes(side_stream_always, state_dtype):
    run_gdn_replay(GDNScenario(GDN_MODELS["qwen3.5-122b"].geom, 16, state_dtype, torch.bfloat16), 3 * 16 + 2)
    assert side_stream_always and all(side_stream_always)


@requires_cuda
@pytest.mark.parametrize("family", ["mamba2", "gdn"])
def test_fold_beside_captures_in_cuda_graph(side_stream_always, monkeypatch, family):
    """Two cycles (staggered cursors: rows flush at every step) inside one CUDA graph, the
    fold on the side stream (made during the capture), equal the same cycles run eagerly,
    bit for bit."""
    from trtllm_replayssm.benchmarking.gdn_ar import GDNCase, GDNRig
    from trtllm_replayssm.benchmarking.mamba2_ar import Mamba2Case, Mamba2Rig
    from trtllm_replayssm.benchmarking.rig import Launch
    from trtllm_replayssm.benchmarking.timing import capture

    if family == "mamba2":
        case, rig = Mamba2Case("super", MAMBA2_MODELS["nemotron-3-super"].geom, 16, 4, torch.float32), Mamba2Rig
    else:
        case, rig = GDNCase("122b", GDN_MODELS["qwen3.5-122b"].geom, 16, 4, torch.float32), GDNRig
    eager, graphed = rig(case, 2, seed=1), rig(case, 2, seed=1)
    launch_ = Launch("output_only")
    for r in (eager, graphed):
        r.start_cursors(launch_, staggered=True)
    monkeypatch.setattr(streams, "_side_streams", {})
    g = capture(graphed.cycle_fn(launch_), warmup=0)
    g.replay()
    g.replay()
    cycle = eager.cycle_fn(launch_)
    cycle()
    cycle()
    torch.cuda.synchronize()
    assert side_stream_always and all(side_stream_always)
    assert torch.equal(eager.cache.write_pos, graphed.cache.write_pos)
    assert torch.equal(eager.cache.ssm_state, graphed.cache.ssm_state)
    assert torch.equal(eager.step["out"], graphed.step["out"])
