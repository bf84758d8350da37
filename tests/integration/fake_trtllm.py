"""A stand-in ``tensorrt_llm`` package with the module paths and names an era's adapter
patches, written to a folder so the import machinery (and a subprocess) can find it."""

from pathlib import Path

MIXER = '''
def selective_state_update(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False,
                           state_batch_indices=None, pad_slot_id=-1, out=None, disable_state_update=False,
                           intermediate_states_buffer=None, cache_steps=None):
    from trtllm_replayssm.ops.mamba2 import selective_state_update as standard
    return standard(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                    state_batch_indices=state_batch_indices, pad_slot_id=pad_slot_id, out=out)
'''
# 1.2's Qwen3-Next decode entry on a [slots, HV, K, V] pool (the line below is what the
# adapter reads the order from), done here by the project's standard kernel.
GDN_12 = '''
# p_h0 = h0 + i_hv * K * V + o_k[:, None] * V + o_v[None, :]
def fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b,
                                           initial_state_source, initial_state_indices, scale=None,
                                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, output=None):
    from trtllm_replayssm.ops.gdn import fused_sigmoid_gating_delta_rule_update as standard
    assert cu_seqlens is None and q.shape[1] == 1, "the stand-in takes batched decode only"
    n = q.shape[0]
    o = standard(initial_state_source.transpose(-1, -2), q[:, 0], k[:, 0], v[:, 0], a.reshape(n, -1),
                 b.reshape(n, -1), A_log, dt_bias, scale, use_qk_l2norm_in_kernel, initial_state_indices,
                 softplus_beta=softplus_beta, softplus_threshold=softplus_threshold)
    return o[:, None]
'''
MANAGER = '''
import torch

class MambaCacheManager:
    def __init__(self, layers, slots, state_shape, conv_width, device="cpu"):
        self.ssm_states = torch.zeros(layers, slots, *state_shape, device=device)
        self.conv_states = torch.zeros(layers, slots, conv_width, 3, dtype=torch.float32, device=device)
        self.slot_of = {}

    def prepare_resources(self, scheduled_batch):
        for r in scheduled_batch.context_requests:
            self.slot_of.setdefault(r.py_request_id, len(self.slot_of))

    def free_resources(self, request):
        self.slot_of.pop(request.py_request_id)

    def get_state_indices(self, request_ids):
        return [self.slot_of[i] for i in request_ids]
'''


def write_fake_trtllm(root: Path, version: str = "1.2.1", with_gdn: bool = True, with_manager: bool = True) -> Path:
    files = {
        "tensorrt_llm/__init__.py": f"__version__ = {version!r}\n",
        "tensorrt_llm/_torch/__init__.py": "",
        "tensorrt_llm/_torch/modules/__init__.py": "",
        "tensorrt_llm/_torch/modules/mamba/__init__.py": "",
        "tensorrt_llm/_torch/modules/mamba/mamba2_mixer.py": MIXER,
        "tensorrt_llm/_torch/models/__init__.py": "",
        "tensorrt_llm/_torch/pyexecutor/__init__.py": "",
        "tensorrt_llm/_torch/pyexecutor/mamba_cache_manager.py": MANAGER if with_manager else "",
    }
    if with_gdn:
        files["tensorrt_llm/_torch/models/modeling_qwen3_next.py"] = GDN_12
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root
