"""Standard Mamba2 decode step (baseline and fallback) against the fp64 recurrence."""

import pytest
import torch

from mamba2_harness import Scenario, run_standard
from trtllm_replayssm.cache import Mamba2Geometry
from trtllm_replayssm.ops.launch import LaunchConfig

GEOM = Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@pytest.mark.parametrize("act_dtype", DTYPES)
@pytest.mark.parametrize("state_dtype", DTYPES)
def test_standard_dtype_pairs(state_dtype, act_dtype):
    run_standard(Scenario(GEOM, 1, state_dtype, act_dtype, seed=11), 8)


@pytest.mark.parametrize("has_terms", [True, False], ids=["D_z", "no_D_z"])
@pytest.mark.parametrize("state_dtype", [torch.float32, torch.bfloat16])
def test_standard_output_terms_loaded_early(state_dtype, has_terms):
    """``early_terms``: the kernel loads ``D`` and ``z`` with the step's inputs (before the
    state's store); outputs and states still follow the recurrence."""
    run_standard(Scenario(GEOM, 1, state_dtype, torch.bfloat16, has_d=has_terms, has_z=has_terms, seed=13), 6,
                 config=LaunchConfig(8, 1, early_terms=1))


def test_standard_headdim_80_tied_no_z():
    geom = Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=2)
    run_standard(Scenario(geom, 1, has_z=False, tied_params=True, seed=12), 6)
