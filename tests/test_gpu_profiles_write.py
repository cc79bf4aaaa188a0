"""`roofline calibrate --op-tables --family F --write`: what the fit does not set is kept from the family file it
replaces."""

from __future__ import annotations

from roofline.calibration.family_fit import keep_unfitted


def test_write_keeps_the_files_executor_and_the_parameters_fitted_elsewhere() -> None:
    fit = {"fitted_params": ("gemm_compute_efficiency",)}
    doc = {"id": "hopper",
           "efficiency": {"gemm_compute_efficiency": 0.8, "moe_fp8_fixed_us": 20.0, "gemm_fixed_rows": 2.0},
           "executor": {"kernel_launch_us": 4},
           "fit": {"held_out": {}},
           "sources": {"efficiency.gemm_compute_efficiency": "fitted now",
                       "efficiency.moe_fp8_fixed_us": "assumed: the default",
                       "efficiency.gemm_fixed_rows": "CPU-only",
                       "executor.kernel_launch_us": "the writer's old text",
                       "per_chip": "per chip"}}
    existing = {"efficiency": {"gemm_compute_efficiency": 0.7, "moe_fp8_fixed_us": 68.3},
                "executor": {"kernel_launch_us": 40, "frontend_us_per_request": 4640},
                "sources": {"efficiency.gemm_compute_efficiency": "fitted before",
                            "efficiency.moe_fp8_fixed_us": "fitted by benchmarks/moe_accuracy.py",
                            "executor.kernel_launch_us": "host_launch_evidence.py",
                            "executor.frontend_us_per_request": "measured on vLLM"}}
    out = keep_unfitted(doc, existing, fit)
    # fitted now: the new value and source; fitted elsewhere: the file's; neither (a default): left out
    assert out["efficiency"] == {"gemm_compute_efficiency": 0.8, "moe_fp8_fixed_us": 68.3}
    assert out["executor"] == existing["executor"]
    assert out["sources"] == {"efficiency.gemm_compute_efficiency": "fitted now",
                              "efficiency.moe_fp8_fixed_us": "fitted by benchmarks/moe_accuracy.py",
                              "executor.kernel_launch_us": "host_launch_evidence.py",
                              "executor.frontend_us_per_request": "measured on vLLM", "per_chip": "per chip"}
    assert out["fit"] == doc["fit"] and out["id"] == "hopper"


def test_write_keeps_sections_it_does_not_write_where_the_file_has_them() -> None:
    """A section the fit does not write (`host:`) and its sources stay, in the file's order."""
    fit = {"fitted_params": ("gemm_compute_efficiency",)}
    doc = {"id": "hopper", "efficiency": {"gemm_compute_efficiency": 0.8}, "executor": {}, "fit": {"held_out": {}},
           "sources": {"efficiency.gemm_compute_efficiency": "fitted now", "per_chip": "per chip"}}
    existing = {"id": "hopper", "efficiency": {"gemm_compute_efficiency": 0.7}, "executor": {"kernel_launch_us": 40},
                "fit": {}, "host": {"single_thread_speed_relative": 2.0},
                "sources": {"host.single_thread_speed_relative": "DGX H100 host",
                            "efficiency.gemm_compute_efficiency": "fitted before",
                            "executor.kernel_launch_us": "host_launch_evidence.py"}}
    out = keep_unfitted(doc, existing, fit)
    assert list(out) == ["id", "efficiency", "executor", "fit", "host", "sources"]
    assert out["host"] == existing["host"]
    assert list(out["sources"].items()) == [("host.single_thread_speed_relative", "DGX H100 host"),
                                            ("efficiency.gemm_compute_efficiency", "fitted now"),
                                            ("executor.kernel_launch_us", "host_launch_evidence.py"),
                                            ("per_chip", "per chip")]
