"""Subcommands of the `roofline` CLI, one module each.

`HELP` is each command's line in `roofline --help`, here so that a command line naming no command (`roofline
--help`, `roofline --version`, a misspelt command) builds the top-level parser without importing any command's
module, and with them numpy, pandas and the rest (`roofline.cli.build_parser`); each command's parser takes its line
from here."""

HELP = {
    "simulate": "simulate serving a workload (latency, throughput, goodput, KV usage)",
    "measure": "run a workload on the real paged-KV engine and record its step trace (needs torch)",
    "calibrate": "fit a hardware profile on step traces or operator tables; write a calibrated profile",
    "compare": "compare a measured step trace, or a vllm bench serve result, with the prediction",
    "predict_ops": "predict single operators (GEMM, attention, all-reduce, MoE)",
    "profile_device": "microbenchmark this machine's CPU or GPU into a hardware profile",
    "plan": "capacity plan: GPUs, configuration and cost for a traffic and SLOs",
    "profiles": "list the shipped hardware profiles",
    "models": "list the shipped model presets",
}
