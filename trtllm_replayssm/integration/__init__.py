"""Engine-agnostic pieces of the TensorRT-LLM integration: model geometry from a Hugging
Face ``config.json``, memory planning, and the per-slot ring / cursor lifecycle. Nothing
here imports TensorRT-LLM; the era-specific adapters wrap these."""
