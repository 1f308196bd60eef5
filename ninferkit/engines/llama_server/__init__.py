"""llama.cpp's `llama-server`: the embedded default, and the engine people A/B NInfer against."""
