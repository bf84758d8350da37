"""Build a TensorRT engine of one Mamba2 ReplaySSM decode step with plugin-owned rings
(the TensorRT-LLM <= 1.2 engine path; see README.md). Needs TensorRT 10.x/11.x and the
built libraries (cmake -S . -B build -DTRT_INCLUDE_DIR=... && cmake --build build)."""

from __future__ import annotations

import argparse

from trtllm_replayssm.aot import tensorrt as rs_trt
from trtllm_replayssm.models import mamba2_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="nemotron-3-nano-4b")
    ap.add_argument("--max-batch", type=int, default=128)
    ap.add_argument("--max-slots", type=int, default=256)
    ap.add_argument("--buffer-len", type=int, default=16)
    ap.add_argument("--out", default="mamba2_step.engine")
    args = ap.parse_args()

    import tensorrt as trt

    plugin_path = rs_trt.load_plugins()
    g = mamba2_model(args.model).geom
    H, P, N, G = g.nheads, g.headdim, g.dstate, g.ngroups
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    bf16, f32, i32 = trt.DataType.BF16, trt.DataType.FLOAT, trt.DataType.INT32
    state = network.add_input("ssm_state", f32, (args.max_slots, H, P, N))
    x = network.add_input("x", bf16, (-1, H, P))
    dt = network.add_input("dt", bf16, (-1, H))
    A, D, dt_bias = (network.add_input(n, f32, (H,)) for n in ("A", "D", "dt_bias"))
    B, C = (network.add_input(n, bf16, (-1, G, N)) for n in ("B", "C"))
    slot_idx = network.add_input("slot_mapping", i32, (-1,))
    new_slots = network.add_input("new_slots", i32, (-1,))  # slots entering decode, -1 elsewhere
    y, new_state = rs_trt.add_mamba2_step(network, state, x, dt, A, B, C, D, dt_bias, slot_idx, rings=None,
                                          new_slots=new_slots, max_slots=args.max_slots, buffer_len=args.buffer_len)
    y.name, new_state.name = "y", "ssm_state_out"
    network.mark_output(y)
    network.mark_output(new_state)

    profile = builder.create_optimization_profile()
    for t, shape in ((x, (H, P)), (dt, (H,)), (B, (G, N)), (C, (G, N)), (slot_idx, ()), (new_slots, ())):
        profile.set_shape(t.name, (1, *shape), (args.max_batch, *shape), (args.max_batch, *shape))
    config = builder.create_builder_config()
    config.add_optimization_profile(profile)
    config.set_preview_feature(trt.PreviewFeature.ALIASED_PLUGIN_IO_10_03, True)
    config.plugins_to_serialize = [plugin_path]
    engine = builder.build_serialized_network(network, config)
    if engine is None:
        raise SystemExit("engine build failed")
    with open(args.out, "wb") as f:
        f.write(engine)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
