"""roofline: a capacity planner for LLM serving.

An analytical cost model predicts each prefill/decode step of a vLLM-style paged-KV engine from FLOP and
byte counts against a YAML hardware profile; a discrete-event simulator drives the engine's own scheduler
(`engine.core`) on a virtual clock to predict TTFT, TPOT, throughput, goodput and cost.

`import roofline` never imports torch.
"""

__version__ = "0.1.0"
