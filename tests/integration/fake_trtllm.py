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


# --- main era (>= 1.3): the mixer binds one of two state-update functions; the hybrid
# cache manager on KV cache manager V2 takes Mamba cache features. The stand-in V2
# manager keeps, per layer, one page per slot holding [ssm | conv | feature buffers] (V2
# coalesces a slot's per-layer buffers) and can move a live request's pages to another
# slot, as V2 does when it offloads and onboards them.
MAIN_MIXER = '''
def _standard(state, x, dt, A, B, C, D=None, z=None, dt_bias=None, dt_softplus=False, state_batch_indices=None,
              pad_slot_id=-1, out=None, disable_state_update=False, intermediate_states_buffer=None,
              cache_steps=None, intermediate_state_indices=None, **kwargs):
    from trtllm_replayssm.ops.mamba2 import selective_state_update as standard
    assert not disable_state_update and not kwargs, "the stand-in takes autoregressive decode only"
    return standard(state, x, dt, A, B, C, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                    state_batch_indices=state_batch_indices, pad_slot_id=pad_slot_id, out=out)


def selective_state_update_native(*args, **kwargs):
    return _standard(*args, **kwargs)


def selective_state_update_fi(*args, **kwargs):  # FlashInfer's, for headdim 64 / 128
    return _standard(*args, **kwargs)
'''
# main's GDN decode entry on a [slots, HV, V, K] pool (the comment is what the adapter
# reads the order from), packed varlen: q (1, N, H, K) with cu_seqlens (N + 1,).
MAIN_FLA_GDN = '''
# p_h0 = h0 + i_hv * V * K + o_v[None, :] * K + o_k[:, None]
def fused_sigmoid_gating_delta_rule_update(A_log, a, dt_bias, softplus_beta, softplus_threshold, q, k, v, b,
                                           initial_state_source, initial_state_indices, scale=None,
                                           use_qk_l2norm_in_kernel=False, cu_seqlens=None, output=None):
    from trtllm_replayssm.ops.gdn import fused_sigmoid_gating_delta_rule_update as standard
    assert cu_seqlens is not None and q.shape[0] == 1, "the stand-in takes packed decode only"
    o = standard(initial_state_source, q[0], k[0], v[0], a, b, A_log, dt_bias, scale, use_qk_l2norm_in_kernel,
                 initial_state_indices, softplus_beta=softplus_beta, softplus_threshold=softplus_threshold)
    return o[None]
'''
# main's GDN layer, its verify branches only: the states are gathered into a copy before the
# kernel call (what the adapter has to see past), gates computed before it too.
MAIN_GDN_MIXER = '''
import torch
import torch.nn.functional as F

from ..fla.fused_sigmoid_gating_recurrent import fused_sigmoid_gating_delta_rule_update


def fused_recurrent_gated_delta_rule_update(q, k, v, g, beta, initial_state_source, initial_state_indices,
                                            use_qk_l2norm_in_kernel=False, disable_state_update=False,
                                            intermediate_states_buffer=None, cache_steps=None):
    raise NotImplementedError("the stand-in keeps no intermediate states: verify must go through ReplaySSM")


class Qwen3NextGatedDeltaNet:
    def __init__(self, A_log, dt_bias, num_k_heads, num_v_heads, head_k_dim, head_v_dim):
        self.A_log, self.dt_bias = A_log, dt_bias
        self.H, self.HV, self.K, self.V = num_k_heads, num_v_heads, head_k_dim, head_v_dim

    def _verify(self, mixed_qkv, a, b, ssm_states, slots, n, T, intermediate_ssm_states):
        q, k, v = torch.split(mixed_qkv, [self.H * self.K, self.H * self.K, self.HV * self.V], dim=-1)
        g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias)
        return fused_recurrent_gated_delta_rule_update(
            q=q.reshape(n, T, self.H, self.K), k=k.reshape(n, T, self.H, self.K), v=v.reshape(n, T, self.HV, self.V),
            g=g.reshape(n, T, -1), beta=b.sigmoid().reshape(n, T, -1), initial_state_source=ssm_states[slots],
            initial_state_indices=torch.arange(n, dtype=torch.int32, device=slots.device), use_qk_l2norm_in_kernel=True,
            disable_state_update=True, intermediate_states_buffer=intermediate_ssm_states, cache_steps=T)

    def forward_decode(self, conv_states, ssm_states, query_start_loc_long, spec_metadata=None,
                       intermediate_conv_states=None, intermediate_ssm_states=None, is_target_verify=False, **kwargs):
        assert is_target_verify, "the stand-in has the verify branch only"
        n, T = kwargs["num_decodes"], spec_metadata.max_draft_len + 1
        return self._verify(kwargs["mixed_qkv"], kwargs["a"], kwargs["b"], ssm_states, kwargs["cache_indices"][:n], n, T,
                            intermediate_ssm_states)

    def forward_extend(self, conv_states, ssm_states, spec_metadata=None, intermediate_conv_states=None,
                       intermediate_ssm_states=None, is_target_verify=False, **kwargs):
        assert is_target_verify, "the stand-in has the verify branch only"
        p, n, T = kwargs["num_prefill_tokens"], kwargs["num_decodes"], spec_metadata.max_draft_len + 1
        out_d = self._verify(kwargs["mixed_qkv"][p:], kwargs["a"][p:], kwargs["b"][p:], ssm_states,
                             kwargs["state_indices_d"], n, T, intermediate_ssm_states)
        out_p = torch.zeros(1, p, self.HV, self.V, dtype=out_d.dtype, device=out_d.device)  # prefill: not modelled
        return torch.cat((out_p, out_d.reshape(1, n * T, self.HV, self.V)), dim=1)
'''
MAIN_KV_V2_RUNTIME = '''
from dataclasses import dataclass


@dataclass(frozen=True)
class DataRole:
    name: str


@dataclass(frozen=True)
class BufferConfig:
    role: DataRole
    size: int
'''
MAIN_COMMON = '''
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Optional

import torch

_AUX_CACHE_ESTIMATORS = {}


def register_mamba_aux_cache_estimator(key, estimator):
    if _AUX_CACHE_ESTIMATORS.get(key, estimator) is not estimator:
        raise ValueError(f"Duplicate Mamba auxiliary cache estimator: {key!r}")
    _AUX_CACHE_ESTIMATORS[key] = estimator


def estimate_mamba_aux_cache_bytes_per_rank(*args, **kwargs):
    return sum(estimator(*args, **kwargs) for estimator in _AUX_CACHE_ESTIMATORS.values())


@dataclass(frozen=True)
class MambaCacheBuildContext:
    layer_mask: tuple
    mamba_pp_layers: tuple
    conv_state_shape: tuple
    ssm_state_shape: tuple
    conv_state_dtype: torch.dtype
    ssm_state_dtype: torch.dtype
    n_groups_per_rank: int
    slot_capacity: Optional[int] = None
    state_index_capacity: int = 0
    spec_config: object = None
    stochastic_rounding: bool = False
    conv_state_layout: str = "x_b_c"


@dataclass(frozen=True, kw_only=True)
class MambaLayerCache:
    conv: torch.Tensor
    temporal: torch.Tensor


@dataclass(frozen=True, kw_only=True)
class SpeculativeMambaLayerCache(MambaLayerCache):
    intermediate_conv_window: Optional[torch.Tensor] = None
    intermediate_ssm: Optional[torch.Tensor] = None


@dataclass(frozen=True, kw_only=True)
class MambaStateUpdateBatch:
    attention_metadata: object
    num_contexts: int
    num_generations: int
    num_accepted_tokens: torch.Tensor
    accepted_positions: torch.Tensor
    source_state_indices: torch.Tensor
    destination_state_indices: torch.Tensor
    is_dummy_request: Optional[torch.Tensor]


class MambaStateUpdateStrategy(ABC):
    @property
    @abstractmethod
    def key(self): ...

    @property
    def uses_replay(self):
        return False

    def validate(self, context):
        pass

    def buffer_configs(self, context, layer_id):
        return ()

    def bytes_per_slot(self, context, layer_id):
        return sum(config.size for config in self.buffer_configs(context, layer_id))

    def bind(self, context, manager):
        pass

    def layer_cache_fields(self, layer_offset):
        return {}

    def make_layer_cache(self, layer_offset, conv, temporal):
        return SpeculativeMambaLayerCache(conv=conv, temporal=temporal, **self.layer_cache_fields(layer_offset))

    def reset_slots(self, slots, host_slots):
        pass

    def relocate_slots(self, old_slots, new_slots):
        pass

    def refresh_dummy_request_mask(self, is_dummy):
        pass

    def dummy_request_mask(self, start, end):
        return None

    def source_state_indices(self, count):
        raise RuntimeError("not bound")

    def update(self, batch, manager):
        return False

    def get_replay_metadata(self):
        return None

    def iter_buffers(self):
        return ()

    def shutdown(self, manager=None):
        pass


class MambaAuxCacheExtension(ABC):
    @property
    @abstractmethod
    def key(self): ...

    @property
    @abstractmethod
    def data_roles(self): ...

    def validate(self, context):
        pass

    @abstractmethod
    def buffer_configs(self, context, layer_id): ...

    def bytes_per_slot(self, context, layer_id):
        return sum(config.size for config in self.buffer_configs(context, layer_id))

    def bind(self, context, manager):
        pass

    def reset_slots(self, slots, host_slots):
        pass

    def on_state_transfer_complete(self, request_ids, manager):
        pass

    def iter_buffers(self):
        return ()

    def shutdown(self):
        pass
'''
MAIN_V2_MANAGER = '''
import math
from dataclasses import replace

import torch

from tensorrt_llm.runtime.kv_cache_manager_v2 import BufferConfig, DataRole

from .common import MambaCacheBuildContext

SSM, CONV = DataRole("ssm_state"), DataRole("conv_state")


class MambaHybridCacheManagerV2:
    def __init__(self, mamba_d_state, mamba_d_conv, mamba_num_heads, mamba_n_groups, mamba_head_dim,
                 mamba_layer_mask, mamba_cache_dtype, mamba_ssm_cache_dtype, *, num_slots, device="cpu",
                 spec_config=None, mamba_ssm_stochastic_rounding=False, conv_state_layout="x_b_c",
                 enable_block_reuse=False, use_replay_state_update=False, state_update_strategy=None,
                 aux_cache_extensions=()):
        if spec_config is not None and state_update_strategy is None:
            raise NotImplementedError("the stand-in has no TensorRT-LLM replay strategy of its own")
        if use_replay_state_update and not state_update_strategy.uses_replay:
            raise ValueError("use_replay_state_update=True conflicts with the supplied strategy")
        self.spec_config, self.strategy = spec_config, state_update_strategy
        self.enable_block_reuse = enable_block_reuse
        self.layer_offsets = {i: i for i in range(len(mamba_layer_mask))}
        self.mamba_pp_layers = [i for i, m in enumerate(mamba_layer_mask) if m]
        conv_dim = mamba_num_heads * mamba_head_dim + 2 * mamba_n_groups * mamba_d_state
        self.ssm_state_shape = [mamba_num_heads, mamba_head_dim, mamba_d_state]
        self.conv_state_shape = [conv_dim, mamba_d_conv - 1]
        self.ssm_dtype, self.conv_dtype = mamba_ssm_cache_dtype, mamba_cache_dtype
        self._aux = {e.key: e for e in aux_cache_extensions}
        ctx = MambaCacheBuildContext(
            layer_mask=tuple(mamba_layer_mask), mamba_pp_layers=tuple(self.mamba_pp_layers),
            conv_state_shape=tuple(self.conv_state_shape), ssm_state_shape=tuple(self.ssm_state_shape),
            conv_state_dtype=mamba_cache_dtype, ssm_state_dtype=mamba_ssm_cache_dtype, n_groups_per_rank=mamba_n_groups,
            spec_config=spec_config, stochastic_rounding=mamba_ssm_stochastic_rounding,
            conv_state_layout=conv_state_layout, state_index_capacity=num_slots)
        for e in aux_cache_extensions:
            e.validate(ctx)
        if self.strategy is not None:
            self.strategy.validate(ctx)
        self._buffers, self._pages = {}, {}
        for layer in self.mamba_pp_layers:
            configs = [BufferConfig(SSM, math.prod(self.ssm_state_shape) * mamba_ssm_cache_dtype.itemsize),
                       BufferConfig(CONV, math.prod(self.conv_state_shape) * mamba_cache_dtype.itemsize)]
            for e in aux_cache_extensions:
                configs += e.buffer_configs(ctx, layer)
            offsets, page = {}, 0
            for c in configs:
                offsets[c.role] = (page, c.size)
                page += -(-c.size // 16) * 16
            self._buffers[layer] = offsets
            self._pages[layer] = torch.full((num_slots, page), 0xAB, dtype=torch.uint8, device=device)
        self.ctx = replace(ctx, slot_capacity=num_slots)
        self.all_ssm_states = [self._get_state_buffer(l, SSM, self.ssm_dtype, self.ssm_state_shape)
                               for l in self.mamba_pp_layers]
        self.all_conv_states = [self._get_state_buffer(l, CONV, self.conv_dtype, self.conv_state_shape)
                                for l in self.mamba_pp_layers]
        for s in self.all_ssm_states + self.all_conv_states:
            s.zero_()
        for e in aux_cache_extensions:
            e.bind(self.ctx, self)
        if self.strategy is not None:
            self.strategy.bind(self.ctx, self)
        self.free_slots = list(range(num_slots - 1, 0, -1))  # slot 0: the padding rows' dummy slot
        self.slot_of, self.host_pages, self.committed = {}, {}, {}

    def _get_state_buffer(self, local_layer_idx, role, dtype, state_shape):
        offset, size = self._buffers[local_layer_idx][role]
        item = torch.empty((), dtype=dtype).element_size()
        typed = self._pages[local_layer_idx].view(dtype)
        return typed[:, offset // item:(offset + size) // item].view(typed.shape[0], *state_shape)

    def get_ssm_states(self, layer_idx):
        return self.all_ssm_states[self.mamba_pp_layers.index(layer_idx)]

    def get_conv_states(self, layer_idx):
        return self.all_conv_states[self.mamba_pp_layers.index(layer_idx)]

    def get_aux_cache_extension(self, key):
        return self._aux.get(key)

    def _mamba_state_bytes_per_slot(self):
        base = len(self.mamba_pp_layers) * (math.prod(self.ssm_state_shape) * self.ssm_dtype.itemsize
                                            + math.prod(self.conv_state_shape) * self.conv_dtype.itemsize)
        return base + sum(e.bytes_per_slot(self.ctx, l) for e in self._aux.values() for l in self.mamba_pp_layers)

    def is_speculative(self):
        return self.spec_config is not None

    def mamba_layer_cache(self, layer_idx):
        conv, ssm = self.get_conv_states(layer_idx), self.get_ssm_states(layer_idx)
        return self.strategy.make_layer_cache(self.mamba_pp_layers.index(layer_idx), conv, ssm)

    def prepare_resources(self, scheduled_batch):
        ctx = scheduled_batch.context_requests
        for r in ctx:
            if r.py_request_id not in self.slot_of:
                self.slot_of[r.py_request_id] = self.free_slots.pop()
        for r in scheduled_batch.generation_requests:
            if getattr(r, "is_dummy", False):
                self.slot_of[r.py_request_id] = 0  # every CUDA-graph padding row shares the dummy slot
        slots = [self.slot_of[r.py_request_id] for r in ctx]
        if self.strategy is not None:
            self.strategy.refresh_dummy_request_mask(
                [getattr(r, "is_dummy", False) for r in list(ctx) + list(scheduled_batch.generation_requests)])
        if slots:
            device = self._pages[self.mamba_pp_layers[0]].device
            for e in [*self._aux.values(), *([self.strategy] if self.strategy else [])]:
                e.reset_slots(torch.tensor(slots, dtype=torch.long, device=device), slots)

    def update_mamba_states(self, attn_metadata, num_accepted_tokens, state_indices=None):
        n_ctx, n = attn_metadata.num_contexts, attn_metadata.num_seqs
        accepted = num_accepted_tokens[n_ctx:n]
        from .common import MambaStateUpdateBatch

        self.strategy.update(MambaStateUpdateBatch(
            attention_metadata=attn_metadata, num_contexts=n_ctx, num_generations=n - n_ctx,
            num_accepted_tokens=accepted, accepted_positions=(accepted - 1).to(torch.int32),
            source_state_indices=self.strategy.source_state_indices(n - n_ctx),
            destination_state_indices=state_indices[n_ctx:n].to(torch.int32),
            is_dummy_request=self.strategy.dummy_request_mask(n_ctx, n)), self)

    def free_resources(self, request):
        slot = self.slot_of.pop(request.py_request_id)
        if self.enable_block_reuse:  # the page may be committed for reuse
            self.committed[request.py_request_id] = [p[slot].clone() for p in self._pages.values()]
        self.free_slots.append(slot)

    def get_state_indices(self, request_ids=None, is_padding=None):
        return [self.slot_of[i] for i in request_ids]

    def suspend(self, request_id):
        """Offload a live request's pages to the host; its slot goes back to the free list."""
        slot = self.slot_of.pop(request_id)
        self.host_pages[request_id] = [p[slot].clone() for p in self._pages.values()]
        self.free_slots.append(slot)

    def resume(self, request_id, avoid=()):
        """Onboard its pages into a free slot (not one of ``avoid``)."""
        slot = next(s for s in reversed(self.free_slots) if s not in avoid)
        self.free_slots.remove(slot)
        for p, saved in zip(self._pages.values(), self.host_pages.pop(request_id)):
            p[slot] = saved
        self.slot_of[request_id] = slot
        return slot

    def shutdown(self):
        for e in self._aux.values():
            e.shutdown()
        if self.strategy is not None:
            self.strategy.shutdown(self)
'''
MAIN_LEGACY = '''
class PythonMambaCacheManager:
    def __init__(self, *args, **kwargs):
        pass


class CppMambaHybridCacheManager:
    def __init__(self, *args, **kwargs):
        pass
'''
MAIN_KV_INIT = '''
from .common import (MambaAuxCacheExtension, MambaCacheBuildContext, MambaStateUpdateBatch, MambaStateUpdateStrategy,
                     register_mamba_aux_cache_estimator)
from .legacy import CppMambaHybridCacheManager, PythonMambaCacheManager
from .mamba_cache_manager_v2 import MambaHybridCacheManagerV2
'''


def write_fake_trtllm_main(root: Path, version: str = "1.3.0rc9", with_extension_api: bool = True) -> Path:
    kv = "tensorrt_llm/_torch/pyexecutor/kv_cache/mamba_cache_manager"
    files = {
        "tensorrt_llm/__init__.py": f"__version__ = {version!r}\n",
        "tensorrt_llm/runtime/__init__.py": "",
        "tensorrt_llm/runtime/kv_cache_manager_v2.py": MAIN_KV_V2_RUNTIME,
        "tensorrt_llm/_torch/__init__.py": "",
        "tensorrt_llm/_torch/modules/__init__.py": "",
        "tensorrt_llm/_torch/modules/mamba/__init__.py": "",
        "tensorrt_llm/_torch/modules/mamba/mamba2_mixer.py": MAIN_MIXER,
        "tensorrt_llm/_torch/modules/mamba/gdn_mixer.py": MAIN_GDN_MIXER,
        "tensorrt_llm/_torch/modules/fla/__init__.py": "",
        "tensorrt_llm/_torch/modules/fla/fused_sigmoid_gating_recurrent.py": MAIN_FLA_GDN,
        "tensorrt_llm/_torch/pyexecutor/__init__.py": "",
        "tensorrt_llm/_torch/pyexecutor/kv_cache/__init__.py": "",
        f"{kv}/__init__.py": MAIN_KV_INIT if with_extension_api else
        "from .legacy import CppMambaHybridCacheManager, PythonMambaCacheManager\n",
        f"{kv}/common.py": MAIN_COMMON,
        f"{kv}/legacy.py": MAIN_LEGACY,
        f"{kv}/mamba_cache_manager_v2.py": MAIN_V2_MANAGER,
    }
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root
