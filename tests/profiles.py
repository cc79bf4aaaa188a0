"""A small CPU hardware profile for tests (as a YAML mapping), shared by the calibrate and compare tests."""

TEST_CPU_PROFILE = {
    "id": "test-cpu", "name": "test CPU", "kind": "cpu", "vendor": "test",
    "peak_tflops": {"fp32": 0.05, "bf16": 0.2}, "memory_capacity_gb": 16, "memory_bandwidth_gb_per_s": 10,
    "l2_cache_mib": None, "num_compute_units": 2, "boost_clock_mhz": None, "interconnect": None,
    "pcie_bandwidth_gb_per_s_per_direction": None, "tdp_w": None,
    "efficiency": {"gemm_compute_efficiency": 0.8, "memory_efficiency": 0.7},
    "executor": {"mode": "eager", "kernel_launch_us": 5.0, "step_overhead_us": 1000.0},
    "sources": {"peak_tflops": "test", "memory_capacity_gb": "test", "memory_bandwidth_gb_per_s": "test",
                "num_compute_units": "test", "efficiency": "test", "executor": "test"},
}


def gpu_profile_without_tokenizer(profile_id: str):  # noqa: ANN201 - a HardwareProfile
    """A shipped GPU profile whose requests reach the engine at once (no API server: no `host:` section, no
    tokenization or frontend time): the engine loops the simulator is compared with in tests take requests directly,
    without vLLM's frontend."""
    from dataclasses import replace

    from roofline.cost.hardware import load_profile

    hw = load_profile(profile_id)
    return replace(hw, host=None,
                   executor=replace(hw.executor, tokenize_s_per_prompt_token=0.0, frontend_s_per_request=0.0))
