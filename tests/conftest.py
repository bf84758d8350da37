import os
import sys

# The harness modules live beside the tests.
sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402
import torch  # noqa: E402

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (real shapes)")
