"""Gated DeltaNet decode: standard step, ReplaySSM step, reference."""

from .naive import gdn_gates, gdn_step_ref, l2norm
from .replay import ROUTES, choose_gdn_route, fused_recurrent_gated_delta_rule_replayssm
from .spec import (commit_gdn_replayssm_spec, gdn_replayssm_spec_decode, gdn_spec_workspace_numel,
                   reset_gdn_replayssm_spec_cursors)
from .standard import fused_sigmoid_gating_delta_rule_update
from .step_inputs import split_packed_qkv

__all__ = [
    "ROUTES", "choose_gdn_route", "commit_gdn_replayssm_spec", "gdn_replayssm_spec_decode",
    "reset_gdn_replayssm_spec_cursors", "gdn_spec_workspace_numel", "fused_recurrent_gated_delta_rule_replayssm",
    "fused_sigmoid_gating_delta_rule_update", "gdn_gates", "gdn_step_ref", "l2norm", "split_packed_qkv",
]
