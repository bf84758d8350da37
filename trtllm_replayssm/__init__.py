"""trtllm_replayssm: ReplaySSM decode kernels for hybrid SSM models in TensorRT-LLM.

ReplaySSM keeps one checkpoint state per request and a small ring of recent step inputs,
so a decode step reads the state and writes it back only once every L steps.
"""

from . import _runtime  # noqa: F401  (settles TRITON_INTERPRET before kernels are defined)
from .cache import (
    GDNGeometry,
    GDNLayerCache,
    GDNReplayCache,
    Mamba2Geometry,
    Mamba2LayerCache,
    Mamba2ReplayCache,
    gdn_bytes_per_slot,
    mamba2_bytes_per_slot,
)
from .ops.cursors import advance_write_pos, reset_write_pos
from .ops.gdn import (
    choose_gdn_route,
    commit_gdn_replayssm_spec,
    fused_recurrent_gated_delta_rule_replayssm,
    fused_sigmoid_gating_delta_rule_update,
    gdn_replayssm_spec_decode,
    gdn_spec_workspace_numel,
    gdn_step_ref,
    reset_gdn_replayssm_spec_cursors,
    split_packed_qkv,
)
from .ops.mamba2 import (
    ROUTES,
    LaunchConfig,
    choose_route,
    commit_replayssm_spec,
    reset_replayssm_spec_cursors,
    selective_state_update_replayssm_spec,
    spec_workspace_numel,
    mamba2_step_ref,
    selective_state_update,
    selective_state_update_replayssm,
    selective_state_update_replayssm_output_only,
    selective_state_update_replayssm_state_and_output,
)

from .aot.backend import activate as _activate_backend

__version__ = "0.1.0"

# TRTLLM_REPLAYSSM_BACKEND: aot | jit | unset (aot where a built libreplayssm_kernels holds
# kernels for this GPU, else jit). See trtllm_replayssm.aot.backend.
BACKEND = _activate_backend()

__all__ = [
    "GDNGeometry", "GDNLayerCache", "GDNReplayCache", "choose_gdn_route", "fused_recurrent_gated_delta_rule_replayssm",
    "fused_sigmoid_gating_delta_rule_update", "gdn_bytes_per_slot", "gdn_replayssm_spec_decode", "gdn_spec_workspace_numel",
    "commit_gdn_replayssm_spec", "reset_gdn_replayssm_spec_cursors", "gdn_step_ref", "split_packed_qkv",
    "commit_replayssm_spec", "reset_replayssm_spec_cursors", "selective_state_update_replayssm_spec",
    "spec_workspace_numel",
    "LaunchConfig", "Mamba2Geometry", "Mamba2LayerCache", "Mamba2ReplayCache", "ROUTES",
    "advance_write_pos", "choose_route", "mamba2_bytes_per_slot", "mamba2_step_ref", "reset_write_pos",
    "selective_state_update", "selective_state_update_replayssm",
    "selective_state_update_replayssm_output_only", "selective_state_update_replayssm_state_and_output",
]
