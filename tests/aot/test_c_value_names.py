"""The C library hands each AOT kernel its arguments by name (``*_VALUES`` in
``replayssm_kernels.c``); a kernel parameter the C side does not name fails only at launch,
on a GPU. Checked here against the kernels' signatures, with no build and no GPU."""

import inspect
import re
from pathlib import Path

import pytest

from trtllm_replayssm.ops.gdn import replay as gdn_replay, spec as gdn_spec, standard as gdn_standard
from trtllm_replayssm.ops.mamba2 import replay as m2_replay, replay_fold as m2_fold, spec as m2_spec
from trtllm_replayssm.ops.mamba2 import standard as m2_standard

C_SOURCE = Path(__file__).resolve().parents[2] / "plugins/replayssm_kernels/replayssm_kernels.c"
KERNELS = {
    "MAMBA2_VALUES": [m2_replay._replay_step_kernel, m2_fold._replay_fold_kernel,
                      m2_standard._selective_state_update_kernel],
    "GDN_VALUES": [gdn_replay._gdn_replay_kernel, gdn_standard._gdn_update_kernel],
    "MAMBA2_SPEC_VALUES": [m2_spec._spec_verify_kernel, m2_spec._spec_state_product_kernel],
    "GDN_SPEC_VALUES": [gdn_spec._gdn_spec_verify_kernel, gdn_spec._gdn_spec_verify_dot_kernel,
                        gdn_spec._gdn_spec_solve_kernel, gdn_spec._gdn_spec_ring_part_kernel,
                        gdn_spec._gdn_spec_state_product_kernel],
}


def runtime_params(kernel) -> list:
    """A Triton kernel's parameters that are not ``tl.constexpr`` (JIT or interpreted)."""
    fn = getattr(kernel, "fn", kernel)
    return [name for name, p in inspect.signature(fn).parameters.items() if "constexpr" not in str(p.annotation)]


def c_names(macro: str) -> set:
    text = C_SOURCE.read_text()
    body = re.search(rf"#define {macro}\(X\)(.*?)\n(?!\s)", text.replace("\\\n", " "), re.S)
    assert body, f"{macro} not found in {C_SOURCE.name}"
    return set(re.findall(r"X\((\w+),", body.group(1)))


@pytest.mark.parametrize("macro", sorted(KERNELS))
def test_c_side_names_every_kernel_parameter(macro):
    names = c_names(macro)
    for kernel in KERNELS[macro]:
        missing = [p for p in runtime_params(kernel) if p not in names]
        assert not missing, f"{macro} lacks {missing} of {getattr(kernel, 'fn', kernel).__name__}"
