"""Ahead-of-time kernels: the build (:mod:`.build`, :mod:`.specs`, :mod:`.c_table`), the C
library's bindings (:mod:`.library`), the jit/aot backend switch (:mod:`.backend`) and the
TensorRT network helper (:mod:`.tensorrt`)."""
