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
