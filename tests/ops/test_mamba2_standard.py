"""Standard Mamba2 decode step (baseline and fallback) against the fp64 recurrence."""

import pytest
import torch

from mamba2_harness import Scenario, run_standard
from trtllm_replayssm.cache import Mamba2Geometry

GEOM = Mamba2Geometry(nheads=4, headdim=16, dstate=16, ngroups=2)
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


@pytest.mark.parametrize("act_dtype", DTYPES)
@pytest.mark.parametrize("state_dtype", DTYPES)
def test_standard_dtype_pairs(state_dtype, act_dtype):
    run_standard(Scenario(GEOM, 1, state_dtype, act_dtype, seed=11), 8)


def test_standard_headdim_80_tied_no_z():
    geom = Mamba2Geometry(nheads=2, headdim=80, dstate=16, ngroups=2)
    run_standard(Scenario(geom, 1, has_z=False, tied_params=True, seed=12), 6)
