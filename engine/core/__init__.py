"""The torch-free core shared by the engine and the simulator: requests, KV blocks, scheduler, step trace."""
