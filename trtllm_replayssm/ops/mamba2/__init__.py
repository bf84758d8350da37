"""Mamba2 decode: standard step, ReplaySSM step (two routes + always-flush), reference."""

from ..launch import LaunchConfig
from .naive import mamba2_step_ref, process_dt
from .replay import (
    ROUTES,
    choose_route,
    selective_state_update_replayssm,
    selective_state_update_replayssm_output_only,
    selective_state_update_replayssm_state_and_output,
)
from .spec import (
    commit_replayssm_spec,
    reset_replayssm_spec_cursors,
    ring_capacity,
    selective_state_update_replayssm_spec,
    spec_workspace_numel,
)
from .standard import selective_state_update

__all__ = [
    "LaunchConfig", "ROUTES", "choose_route", "mamba2_step_ref", "process_dt",
    "selective_state_update", "selective_state_update_replayssm",
    "selective_state_update_replayssm_output_only", "selective_state_update_replayssm_state_and_output",
    "commit_replayssm_spec", "reset_replayssm_spec_cursors", "ring_capacity", "selective_state_update_replayssm_spec",
    "spec_workspace_numel",
]
