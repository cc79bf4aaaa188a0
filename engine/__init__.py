"""engine: a small, real paged-KV inference engine (PyTorch). `engine.core` is its torch-free scheduler."""
