"""Against a real TensorRT-LLM install on a GPU (skipped where either is missing, as on
every machine of this project so far). Checkpoints come from the environment:
``REPLAYSSM_NEMOTRON_H_CKPT`` (a small Nemotron-H), ``REPLAYSSM_QWEN3_NEXT_CKPT`` (a
small Qwen3-Next) and, on TensorRT-LLM >= 1.3, ``REPLAYSSM_QWEN3_5_CKPT`` (a small Qwen3.5)."""

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("tensorrt_llm", reason="TensorRT-LLM is not installed (it cannot be on this project's machines)")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

GENERATE = """
import json, sys
import tensorrt_llm
from tensorrt_llm import LLM, SamplingParams
kv = {"enable_block_reuse": False}
if tuple(int(v) for v in tensorrt_llm.__version__.split(".")[:2]) >= (1, 3):
    kv["use_kv_cache_manager_v2"] = True  # main: ReplaySSM's rings are V2 pool buffers
llm = LLM(model=sys.argv[1], max_batch_size=8, kv_cache_config=kv)
outs = llm.generate(["The capital of France is", "def fibonacci(n):"],
                    SamplingParams(max_tokens=48, temperature=0.0, logprobs=1))
print(json.dumps([[o.outputs[0].token_ids, [list(d.values())[0].logprob for d in o.outputs[0].logprobs]]
                  for o in outs]))
"""


def _ckpt(var: str) -> str:
    path = os.environ.get(var)
    if not path:
        pytest.skip(f"set {var} to a checkpoint folder")
    return path


def test_patch_lands_on_the_real_classes():
    from trtllm_replayssm.integration.apply import apply_replayssm

    info = apply_replayssm(models=["mamba2"])
    import tensorrt_llm._torch.modules.mamba.mamba2_mixer as mixer

    assert any(hasattr(getattr(mixer, name, None), "__wrapped__")
               for name in ("selective_state_update", "selective_state_update_native")), info


def _standard_and_replay_agree(ckpt: str, models: str) -> None:
    runs = {}
    for on in ("0", "1"):  # in fresh processes, so the executor workers are spawned with the switch
        env = dict(os.environ, TRTLLM_REPLAYSSM=on, TRTLLM_REPLAYSSM_MODELS=models)
        out = subprocess.run([sys.executable, "-c", GENERATE, ckpt], env=env, capture_output=True, text=True,
                             timeout=1800, check=True)
        runs[on] = (json.loads(out.stdout.strip().splitlines()[-1]), out.stderr)
    assert "ReplaySSM on" in runs["1"][1] and "ReplaySSM on" not in runs["0"][1]
    for (tok0, lp0), (tok1, lp1) in zip(runs["0"][0], runs["1"][0]):
        assert tok0 == tok1
        assert max(abs(a - b) for a, b in zip(lp0, lp1)) < 5e-2


def test_greedy_outputs_and_logprobs_agree_nemotron_h():
    _standard_and_replay_agree(_ckpt("REPLAYSSM_NEMOTRON_H_CKPT"), "mamba2")


def test_greedy_outputs_and_logprobs_agree_qwen3_next():
    _standard_and_replay_agree(_ckpt("REPLAYSSM_QWEN3_NEXT_CKPT"), "gdn")


def test_greedy_outputs_and_logprobs_agree_qwen3_5():
    import tensorrt_llm

    if tuple(int(v) for v in tensorrt_llm.__version__.split(".")[:2]) < (1, 3):
        pytest.skip("Qwen3.5 needs TensorRT-LLM >= 1.3")
    _standard_and_replay_agree(_ckpt("REPLAYSSM_QWEN3_5_CKPT"), "gdn")
