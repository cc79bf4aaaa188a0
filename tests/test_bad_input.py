"""The project's bad-input suite: every subcommand, every kind of file it reads, the flags it shares with vLLM.
Each case must end in one line on stderr naming the field (a flag, a file's key or column) and what is allowed,
exit 2, no traceback, nothing written to stdout: never a silent acceptance. In this process (`roofline.cli.main`),
so that the suite stays fast."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from roofline.cli import main
from roofline.registry import resolve

# What every refusal says besides the field: what is allowed, or what to give instead.
ALLOWED = re.compile(r"allowed|must be|expected|give |only with|choose from|not a directory|no such file|is a file|"
                     r"is not a|does not model yet|searches this setting|unknown field|missing field|required|"
                     r"exceed|holds no|not JSON|not an integer|decimals only|contradicts|invalid|no system|has none|"
                     r"remove it|is a directory|cannot write|malformed|leaves no time|unrecognized arguments|"
                     r"raise |lower |too small|must have|must divide")

WORKLOAD = {"name": "w", "num_requests": 5, "arrival": "{process: poisson, rate_per_s: 2}",
            "prompt_tokens": "{distribution: fixed, value: 10}", "output_tokens": "{distribution: fixed, value: 4}"}


def _workload(**changes: str | None) -> str:
    fields = {**WORKLOAD, **changes}
    return "".join(f"{k}: {v}\n" for k, v in fields.items() if v is not None)


# name -> YAML text of a bad workload, and the field its refusal names.
BAD_WORKLOADS = {
    "rate-1e30": (_workload(arrival="{process: poisson, rate_per_s: 1e30}"), "rate_per_s"),
    "rate-neg": (_workload(arrival="{process: poisson, rate_per_s: -1}"), "rate_per_s"),
    "rate-zero": (_workload(arrival="{process: poisson, rate_per_s: 0}"), "rate_per_s"),
    "rate-nan": (_workload(arrival="{process: poisson, rate_per_s: .nan}"), "rate_per_s"),
    "rate-text": (_workload(arrival="{process: poisson, rate_per_s: fast}"), "rate_per_s"),
    "rate-missing": (_workload(arrival="{process: poisson}"), "rate_per_s"),
    "process": (_workload(arrival="{process: weibull, rate_per_s: 1}"), "process"),
    "cv-zero": (_workload(arrival="{process: gamma, rate_per_s: 1, cv: 0}"), "cv"),
    "cv-inf": (_workload(arrival="{process: gamma, rate_per_s: 1, cv: .inf}"), "cv"),
    "burst-size": (_workload(arrival="{process: burst, rate_per_s: 1, burst_size: 0}"), "burst_size"),
    "burst-float": (_workload(arrival="{process: burst, rate_per_s: 1, burst_size: 2.5}"), "burst_size"),
    "arrival-extra": (_workload(arrival="{process: poisson, rate_per_s: 1, cv: 2}"), "cv"),
    "mean-log-3e17": (_workload(prompt_tokens="{distribution: lognormal, mean_log: 40, std_log: 1, max: 4096}"),
                      "mean_log"),
    "mean-log-above-max": (_workload(prompt_tokens="{distribution: lognormal, mean_log: 12, std_log: 1, "
                                                   "max: 4096}"), "mean_log"),
    "std-log-huge": (_workload(prompt_tokens="{distribution: lognormal, mean_log: 5, std_log: 50}"), "std_log"),
    "mean-log-inf": (_workload(prompt_tokens="{distribution: lognormal, mean_log: .inf, std_log: 1}"), "mean_log"),
    "normal-mean-above-max": (_workload(prompt_tokens="{distribution: normal, mean: 10000, std: 10, max: 100}"),
                              "mean 10000"),
    "normal-mean-below-min": (_workload(prompt_tokens="{distribution: normal, mean: 5, std: 1, min: 100}"),
                              "mean 5"),
    "normal-std-neg": (_workload(prompt_tokens="{distribution: normal, mean: 50, std: -1}"), "std"),
    "normal-mean-1e30": (_workload(prompt_tokens="{distribution: normal, mean: 1e30, std: 1}"), "mean"),
    "fixed-zero": (_workload(prompt_tokens="{distribution: fixed, value: 0}"), "value"),
    "fixed-huge": (_workload(prompt_tokens="{distribution: fixed, value: 100000000000}"), "value"),
    "fixed-float": (_workload(prompt_tokens="{distribution: fixed, value: 10.5}"), "value"),
    "uniform-max-below-min": (_workload(prompt_tokens="{distribution: uniform, min: 20, max: 10}"), "max"),
    "uniform-no-max": (_workload(prompt_tokens="{distribution: uniform, min: 20}"), "max"),
    "distribution": (_workload(prompt_tokens="{distribution: zipf, value: 3}"), "distribution"),
    "empirical-missing": (_workload(prompt_tokens="{distribution: empirical, csv: none.csv}"), "csv"),
    "length-not-mapping": (_workload(output_tokens="12"), "output_tokens"),
    "num-requests-zero": (_workload(num_requests="0"), "num_requests"),
    "num-requests-huge": (_workload(num_requests="100000000000"), "num_requests"),
    "seed-neg": (_workload(seed="-1"), "seed"),
    "seed-huge": (_workload(seed="99999999999"), "seed"),
    "unknown-field": (_workload(rate="3"), "rate"),
    "no-name": (_workload(name=None), "name"),
    "no-arrival": (_workload(arrival=None), "arrival"),
    "think-time-huge": (_workload(sessions="{num_turns: {distribution: fixed, value: 2}, think_time_s: 1e12}"),
                        "think_time_s"),
    "prefix-zero": (_workload(shared_prefix="{num_groups: 0, prefix_tokens: 10}"), "num_groups"),
    "trace-and-arrival": (_workload(trace="t.csv"), "trace"),
    "duplicate-key": ("name: a\nname: b\n", "duplicate key"),
    "malformed": ("name: [a\n", "malformed YAML"),
}

# name -> CSV trace text, and the column its refusal names.
TRACE_HEAD = "arrival_s,prompt_tokens,output_tokens\n"
BAD_TRACES = {
    "arrival-inf": (TRACE_HEAD + "0,10,10\ninf,10,10\n", "arrival_s"),
    "arrival-nan": (TRACE_HEAD + "0,10,10\nnan,10,10\n", "arrival_s"),
    "arrival-neg": (TRACE_HEAD + "0,10,10\n-5,10,10\n", "arrival_s"),
    "arrival-1e30": (TRACE_HEAD + "0,10,10\n1e30,10,10\n", "arrival_s"),
    "arrival-text": (TRACE_HEAD + "0,10,10\nsoon,10,10\n", "arrival_s"),
    "prompt-zero": (TRACE_HEAD + "0,0,10\n", "prompt_tokens"),
    "prompt-float": (TRACE_HEAD + "0,10.5,10\n", "prompt_tokens"),
    "prompt-huge": (TRACE_HEAD + "0,1e12,10\n", "prompt_tokens"),
    "output-inf": (TRACE_HEAD + "0,10,inf\n", "output_tokens"),
    "columns": ("time,in,out\n0,1,1\n", "arrival_s,prompt_tokens,output_tokens"),
    "azure-bad-time": ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,10,10\n", "TIMESTAMP"),
    "azure-neg": ("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:01+00:00,10,-1\n", "GeneratedTokens"),
    "burstgpt-neg": ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5,ChatGPT,-3,18,15,Conversation log\n", "Request tokens"),
}

# name -> (the change to h100-sxm.yaml: (line start, replacement)), and the field named.
BAD_PROFILES = {
    "bandwidth-inf": (("memory_bandwidth_gb_per_s:", "memory_bandwidth_gb_per_s: .inf"), "memory_bandwidth_gb_per_s"),
    "bandwidth-nan": (("memory_bandwidth_gb_per_s:", "memory_bandwidth_gb_per_s: .nan"), "memory_bandwidth_gb_per_s"),
    "bandwidth-1e30": (("memory_bandwidth_gb_per_s:", "memory_bandwidth_gb_per_s: 1e30"), "memory_bandwidth_gb_per_s"),
    "bandwidth-zero": (("memory_bandwidth_gb_per_s:", "memory_bandwidth_gb_per_s: 0"), "memory_bandwidth_gb_per_s"),
    "bandwidth-text": (("memory_bandwidth_gb_per_s:", "memory_bandwidth_gb_per_s: fast"), "memory_bandwidth_gb_per_s"),
    "capacity-neg": (("memory_capacity_gb:", "memory_capacity_gb: -80"), "memory_capacity_gb"),
    "capacity-inf": (("memory_capacity_gb:", "memory_capacity_gb: .inf"), "memory_capacity_gb"),
    "units-zero": (("num_compute_units:", "num_compute_units: 0"), "num_compute_units"),
    "units-float": (("num_compute_units:", "num_compute_units: 1.5"), "num_compute_units"),
    "clock-inf": (("boost_clock_mhz:", "boost_clock_mhz: .inf"), "boost_clock_mhz"),
    "kind": (("kind:", "kind: tpu"), "kind"),
    "id": (("id:", "id: H100 SXM"), "id"),
    "tdp-neg": (("tdp_w:", "tdp_w: -700"), "tdp_w"),
    "pcie-inf": (("pcie_bandwidth_gb_per_s_per_direction:", "pcie_bandwidth_gb_per_s_per_direction: .inf"),
                 "pcie_bandwidth_gb_per_s_per_direction"),
    "unknown-field": (("tdp_w:", "tdp_watts: 700"), "tdp_watts"),
}

# name -> a vllm bench serve result (JSON text), and the key named.
GOOD_RESULT = {"duration": 10.0, "completed": 5, "num_prompts": 5, "request_rate": 1.0, "burstiness": 1.0,
               "max_concurrency": None}
BAD_RESULTS = {
    "empty": ("", "holds no result"),
    "not-json": ("{nope", "not JSON"),
    "not-a-result": (json.dumps({"hello": 1}), "not a vllm bench serve result"),
    "rate-neg": (json.dumps({**GOOD_RESULT, "request_rate": -1}), "request_rate"),
    "rate-text": (json.dumps({**GOOD_RESULT, "request_rate": "fast"}), "request_rate"),
    "burstiness-zero": (json.dumps({**GOOD_RESULT, "burstiness": 0}), "burstiness"),
    "duration-nan": ('{"duration": NaN, "completed": 5}', "duration"),
    "num-prompts-neg": (json.dumps({**GOOD_RESULT, "num_prompts": -5}), "num_prompts"),
    "concurrency-zero": (json.dumps({**GOOD_RESULT, "max_concurrency": 0}), "max_concurrency"),
    "input-lens-neg": (json.dumps({**GOOD_RESULT, "input_lens": [10, -3], "output_lens": [1, 1]}), "input_lens"),
    "output-lens-huge": (json.dumps({**GOOD_RESULT, "input_lens": [10], "output_lens": [10**12]}), "output_lens"),
    "start-times-inf": ('{"duration": 10, "completed": 1, "input_lens": [1], "output_lens": [1], '
                        '"start_times": [Infinity]}', "start_times"),
    "ramp-strategy": (json.dumps({**GOOD_RESULT, "ramp_up_strategy": "cubic"}), "ramp_up_strategy"),
}

# name -> an HF config.json change to llama-156m's, and the key named.
BAD_MODELS = {
    "kv-heads-zero": ({"num_key_value_heads": 0}, "num_key_value_heads"),
    "kv-heads-neg": ({"num_key_value_heads": -8}, "num_key_value_heads"),
    "heads-zero": ({"num_attention_heads": 0}, "num_attention_heads"),
    "layers-zero": ({"num_hidden_layers": 0}, "num_hidden_layers"),
    "kv-heads-not-dividing": ({"num_key_value_heads": 3}, "num_key_value_heads"),
    "vocab-text": ({"vocab_size": "big"}, "vocab_size"),
}

SIM = "simulate --model llama-156m --hardware h100-sxm --num-requests 4 --input-len 16 --output-len 4"
PLAN = ("plan --model llama-3.1-8b --hardware h100-sxm --workload sharegpt-chat --slo-ttft-s 1 --slo-tpot-s 0.1 "
        "--target-qps 1 --out {d}/plan")
BENCH = "simulate --model llama-156m --hardware h100-sxm --dataset-name random --num-prompts 4"
CMP = "compare --hardware h100-sxm --model llama-3.1-8b --vllm-bench {d}/good.json"

# (command line, the field its refusal must name). {d}: the folder of this suite's files.
CASES: list[tuple[str, str]] = [
    # simulate: the load
    *[(f"simulate --num-requests {v}", "--num-requests") for v in ("0", "-5", "abc", "1e30", "100000000000", "")],
    *[(f"simulate --request-rate {v}", "--request-rate") for v in ("0", "-1", "nan", "abc", "1e30", "-inf")],
    *[(f"simulate {v}", f) for v, f in (("--input-len 0 --output-len 5", "--input-len"),
                                        ("--input-len 5", "--input-len/--output-len"),
                                        ("--input-len 100000000000 --output-len 4", "--input-len"),
                                        ("--output-len -3 --input-len 4", "--output-len"),
                                        ("--input-len x --output-len 4", "--input-len"))],
    *[(f"simulate --seed {v}", "--seed") for v in ("-1", "abc", "99999999999999999999", "1.5")],
    *[(f"simulate --slo-ttft-s {v}", "--slo-ttft-s") for v in ("0", "nan", "-1", "inf", "x")],
    *[(f"simulate --slo-tpot-s {v}", "--slo-tpot-s") for v in ("0", "-1", "inf")],
    *[(f"{SIM} --warmup-s {v}", "--warmup-s") for v in ("-1", "nan", "inf", "1e9")],
    *[(f"simulate --num-replicas {v}", "--num-replicas") for v in ("0", "-1", "x")],
    ("simulate --router foo", "--router"),
    # simulate: prediction intervals (roofline.sim.intervals)
    *[(f"simulate --intervals {v}", "--intervals") for v in ("abc", "99", "49", "nan", "inf")],
    *[(f"simulate --intervals --interval-samples {v}", "--interval-samples") for v in ("3", "65", "2.5", "x")],
    ("simulate --interval-samples 8", "--interval-samples"),
    ("simulate --intervals --hardware mi300x", "--intervals"),
    ("simulate --model nope", "--model"),
    ("simulate --hardware nope", "--hardware"),
    ("simulate --workload nope", "--workload"),
    ("simulate --workload {d}", "--workload"),
    *[(f"simulate --max-concurrency {v}", "--max-concurrency") for v in ("0", "-2", "x")],
    *[(f"{SIM} --goodput {v}", "--goodput") for v in ("ttft:abc", "ttft:-5", "foo:5", "ttft:nan", "ttft=5")],
    *[(f"{SIM} --metric-percentiles {v}", "--metric-percentiles") for v in ("101", "abc", "nan", "-1")],
    (f"{SIM} --percentile-metrics foo", "--percentile-metrics"),
    # simulate: vllm bench serve's load flags
    *[(f"{BENCH} --burstiness {v}", "--burstiness") for v in ("0", "nan", "-1", "x")],
    *[(f"{BENCH} --random-input-len {v}", "--random-input-len") for v in ("0", "-4", "x")],
    (f"{BENCH} --random-output-len 0", "--random-output-len"),
    (f"{BENCH} --random-prefix-len -1", "--random-prefix-len"),
    *[(f"{BENCH} --random-range-ratio {v}", "--random-range-ratio") for v in ("nan", "-0.5", "1.5", "x")],
    (f"{BENCH} --ramp-up-strategy foo --ramp-up-start-rps 1 --ramp-up-end-rps 2", "--ramp-up-strategy"),
    (f"{BENCH} --ramp-up-strategy linear --ramp-up-start-rps -1 --ramp-up-end-rps 2", "--ramp-up"),
    (f"{BENCH} --ramp-up-strategy linear --ramp-up-start-rps nan --ramp-up-end-rps 2", "--ramp-up"),
    (f"{BENCH} --ramp-up-strategy linear --ramp-up-start-rps 1", "--ramp-up"),
    (f"{BENCH} --num-warmups -1", "--num-warmups"),
    ("simulate --dataset-name random --num-prompts 0", "--num-prompts"),
    ("simulate --dataset-name random --num-prompts 100000000000", "--num-prompts"),
    ("simulate --dataset-name random --seed 99999999999", "--seed"),
    ("simulate --dataset-name sonnet", "--dataset-name"),
    ("simulate --dataset-name sharegpt", "--dataset-path"),
    ("simulate --random-input-len 100", "--random-input-len"),
    ("simulate --ignore-eos", "--ignore-eos"),
    ("simulate --dataset-name random --workload sharegpt-chat", "--workload"),
    # simulate: engine flags, vLLM's spellings and the flags not modelled
    *[(f"simulate --gpu-memory-utilization {v}", "--gpu-memory-utilization") for v in ("0", "nan", "inf", "1.5")],
    *[(f"simulate --kv-cache-memory-bytes {v}", "--kv-cache-memory-bytes") for v in ("0", "-1", "inf", "x")],
    *[(f"simulate --num-gpu-blocks-override {v}", "--num-gpu-blocks-override") for v in ("0", "-3")],
    *[(f"simulate --max-num-seqs {v}", "--max-num-seqs") for v in ("0", "-1", "x")],
    *[(f"simulate --max-num-batched-tokens {v}", "--max-num-batched-tokens") for v in ("0", "1e30", "3.5K")],
    *[(f"simulate --max-model-len {v}", "--max-model-len") for v in ("0", "-2", "200000", "x")],
    *[(f"simulate --block-size {v}", "--block-size") for v in ("0", "15", "-16")],
    *[(f"simulate {f} {v}", "--tensor-parallel-size") for f in ("--tensor-parallel-size", "-tp")
      for v in ("0", "3", "1000")],
    ("simulate --max-cudagraph-capture-size 0", "--max-cudagraph-capture-size"),
    ("simulate --enforce-eager --cudagraph-mode PIECEWISE", "--enforce-eager"),
    ("simulate --cudagraph-mode foo", "--cudagraph-mode"),
    ("simulate --moe-backend marlin", "--moe-backend"),
    ("simulate --moe-backend foo", "--moe-backend"),
    ("simulate --float32-matmul-precision foo", "--float32-matmul-precision"),
    *[(f"simulate --kv-cache-dtype {v}", "--kv-cache-dtype") for v in ("fp4", "int8", "fp8_inc")],
    *[(f"simulate --dtype {v}", "--dtype") for v in ("fp64", "int8")],
    *[(f"simulate {f} {v}", "--quantization") for f in ("--quantization", "-q")
      for v in ("foo", "bitsandbytes", "gguf", "compressed-tensors")],
    ("simulate --model gpt-oss-120b --hardware h200-sxm --quantization none", "--quantization none"),
    ("simulate --model gpt-oss-120b --hardware h200-sxm --quantization fp8", "--quantization fp8"),
    ("simulate --model llama-3.1-70b --hardware l4", "does not fit"),
    # data / expert / pipeline parallelism: checked as vLLM checks them (more in tests/test_data_parallel.py)
    *[(f"simulate {flag}", field) for flag, field in (
        ("-pp 0", "--pipeline-parallel-size"), ("--pipeline-parallel-size 2 -dp 2", "--pipeline-parallel-size"),
        ("-dp 2", "--data-parallel-size"), ("--data-parallel-size 2", "--data-parallel-size"),
        ("-ep", "--enable-expert-parallel"), ("--enable-expert-parallel", "--enable-expert-parallel"),
        ("--model qwen3-30b-a3b -dp 2 --all2all-backend nixl_ep", "--all2all-backend"),
        ("--model qwen3-30b-a3b -dp 2 --enable-eplb", "--enable-eplb"))],
    *[(f"simulate {flag}", flag.split()[0]) for flag in (
        "--speculative-config {}", "--spec-model m", "--enable-lora", "--max-loras 2", "-dcp 2", "-pcp 2",
        "--cpu-offload-gb 4", "--kv-transfer-config {}", "--nnodes 2", "--enable-dbo", "--attention-backend FLASHINFER",
        "--compilation-config {}", "--cudagraph-capture-sizes 1 2", "--scheduling-policy priority",
        "--long-prefill-token-threshold 100", "--disable-sliding-window", "--max-num-scheduled-tokens 100")],
    # simulate: outputs, checked before any work
    ("simulate --save-detailed", "--save-detailed"),
    ("simulate --result-dir {d}/r", "--result-dir"),
    ("simulate --result-filename x.json", "--result-filename"),
    ("simulate --save-result --result-dir {d}/afile", "--result-dir"),
    ("simulate --out {d}/afile", "--out"),
    ("simulate --out {d}/afile/sub", "--out"),
    ("simulate --workload {d}/t.csv --seed 3", "--seed"),
    # plan
    *[(f"{PLAN} --target-qps {v}", "--target-qps") for v in ("0", "nan", "inf", "-1")],
    *[(f"{PLAN} --slo-ttft-s {v}", "--slo-ttft-s") for v in ("0", "nan")],
    (f"{PLAN} --slo-tpot-s inf", "--slo-tpot-s"),
    *[(f"{PLAN} {flag}", field) for flag, field in (
        ("--data-parallel-sizes 0", "--data-parallel-sizes"), ("--data-parallel-sizes 2,x", "--data-parallel-sizes"),
        ("--expert-parallel yes", "--expert-parallel"), ("--data-parallel-size 8", "--data-parallel-size"),
        ("-dp 8", "--data-parallel-size"), ("--enable-expert-parallel", "--enable-expert-parallel"))],
    *[(f"{PLAN} --slo-percentile {v}", "--slo-percentile") for v in ("0", "101", "nan")],
    (f"{PLAN} --slo-itl-s -1", "--slo-itl-s"),
    (f"{PLAN} --slo-e2el-s nan", "--slo-e2el-s"),
    *[(f"{PLAN} --num-requests {v}", "--num-requests") for v in ("0", "1000000000000")],
    (f"{PLAN} --workers 0", "--workers"),
    (f"{PLAN} --workers 2 --ray-address auto", "--workers"),
    (f"{PLAN} --ray-address ' '", "--ray-address"),
    *[(f"{PLAN} --tensor-parallel-sizes {v}", "--tensor-parallel-sizes") for v in ("0", "a,b", "")],
    (f"{PLAN} --max-num-seqs 0", "--max-num-seqs"),
    (f"{PLAN} --quantizations foo", "--quantizations"),
    (f"{PLAN} --kv-cache-dtypes fp4", "--kv-cache-dtypes"),
    (f"{PLAN} --max-num-batched-tokens-list 0", "--max-num-batched-tokens-list"),
    (f"{PLAN} --quantization fp8 --quantizations fp8", "--quantizations"),
    *[(f"{PLAN} --price {v}", "--price") for v in ("h100-sxm=abc", "h100-sxm=-1", "h100-sxm=inf", "foo")],
    (f"{PLAN} --checkpoint foo", "--checkpoint"),
    (f"{PLAN} -tp 2", "-tp"),
    (f"{PLAN} --tensor-parallel-size 2", "--tensor-parallel-size"),
    (f"{PLAN} -pp 2", "-pp"),
    ("plan --model llama-3.1-8b --hardware , --workload sharegpt-chat --slo-ttft-s 1 --slo-tpot-s 0.1 "
     "--target-qps 1 --out {d}/plan", "--hardware"),
    ("plan --model llama-3.1-8b --hardware nope --workload sharegpt-chat --slo-ttft-s 1 --slo-tpot-s 0.1 "
     "--target-qps 1 --out {d}/plan", "--hardware"),
    ("plan --model llama-3.1-8b --hardware h100-sxm --workload nope --slo-ttft-s 1 --slo-tpot-s 0.1 "
     "--target-qps 1 --out {d}/plan", "--workload"),
    ("plan --model llama-3.1-8b --hardware h100-sxm --workload sharegpt-chat --slo-ttft-s 1 --slo-tpot-s 0.1 "
     "--target-qps 1", "--out"),
    ("plan --model llama-3.1-8b --hardware h100-sxm --workload sharegpt-chat --slo-ttft-s 1 --slo-tpot-s 0.1 "
     "--target-qps 1 --out {d}/afile", "--out"),
    ("plan --model llama-3.1-8b --hardware h100-sxm --workload sharegpt-chat", "--slo-ttft-s"),
    # compare
    ("compare --hardware h100-sxm", "--trace/--vllm-bench"),
    ("compare --hardware h100-sxm --trace {d}/nope", "--trace"),
    ("compare --hardware h100-sxm --trace {d}", "--trace"),
    ("compare --hardware h100-sxm --vllm-bench {d}/nope.json", "--vllm-bench"),
    (f"{CMP} --result-index 5", "--result-index"),
    (f"{CMP} --result-index -1", "--result-index"),
    (f"{CMP} --request-rate -2", "--request-rate"),
    (f"{CMP} --num-prompts 0", "--num-prompts"),
    (f"{CMP} -pp 2 -dp 2", "-pp"),
    (f"{CMP} --quantization none --model gpt-oss-120b", "--quantization none"),
    (f"{CMP} --no-end-to-end", "--no-end-to-end"),
    ("compare --hardware h100-sxm --trace {d}/nope --model llama-3.1-8b", "--model"),
    # predict-ops
    ("predict-ops --hardware h100-sxm --input {d}/nope.csv --output {d}/o.csv", "--input"),
    ("predict-ops --hardware nope --input {d}/ops.csv --output {d}/o.csv", "--hardware"),
    ("predict-ops --hardware h100-sxm --input {d}/ops.csv --output {d}/afile/o.csv", "--output"),
    ("predict-ops --hardware h100-sxm --input {d}/ops.csv --output {d}", "--output"),
    ("predict-ops --hardware h100-sxm --input {d}/badops.csv --output {d}/o.csv", "--input"),
    ("predict-ops --hardware h100-sxm --input {d}/ops.csv", "--output"),
    # calibrate
    ("calibrate --hardware h100-sxm --out {d}/c.yaml", "--trace --op-tables"),
    ("calibrate --hardware h100-sxm --out {d}/c.yaml --op-tables nope", "--op-tables"),
    ("calibrate --hardware h100-sxm --out {d}/c.yaml --op-tables h100_sxm --uncertainty", "--uncertainty"),
    ("calibrate --op-tables --all-to-all --uncertainty", "--uncertainty"),
    ("calibrate --hardware h100-sxm --out {d}/c.yaml --trace {d}/nope", "--trace"),
    ("calibrate --hardware h100-sxm --out {d}/afile/c.yaml --op-tables h100_sxm", "--out"),
    ("calibrate --hardware h100-sxm --out {d} --op-tables h100_sxm", "--out"),
    ("calibrate --hardware nope --out {d}/c.yaml --op-tables h100_sxm", "--hardware"),
    ("calibrate --hardware h100-sxm --out {d}/c.yaml --op-tables h100_sxm --prior-scale 1", "--prior-scale"),
    ("calibrate --hardware h100-sxm --out {d}/c.yaml --trace {d}/nope --prior-scale -1", "--prior-scale"),
    # profile-device
    ("profile-device --threads 0", "--threads"),
    ("profile-device --repeats 1", "--repeats"),
    *[(f"profile-device --gemm-budget-s {v}", "--gemm-budget-s") for v in ("0", "-1", "inf", "nan", "x")],
    ("profile-device --device tpu", "--device"),
    ("profile-device --vllm-python {d}/nope", "--vllm-python"),
    ("profile-device --out {d}/afile/p.yaml", "--out"),
    ("profile-device --out {d}", "--out"),
    # measure
    ("measure --model llama-156m --out {d}/m --num-requests 0", "--num-requests"),
    ("measure --model llama-156m --out {d}/m --input-len 4", "--input-len/--output-len"),
    ("measure --model nope --out {d}/m", "--model"),
    ("measure --model llama-156m --out {d}/afile", "--out"),
    ("measure --model llama-156m --out {d}/m --repeats 0", "--repeats"),
    ("measure --model llama-156m --out {d}/m --engine foo", "--engine"),
    ("measure --model llama-156m --out {d}/m --request-rate nan", "--request-rate"),
    # profiles, models, the top level
    ("profiles --foo", "--foo"),
    ("models --foo", "--foo"),
    ("nope", "COMMAND"),
    # the files each command reads
    *[(f"simulate --workload {{d}}/w-{name}.yaml", field) for name, (_, field) in BAD_WORKLOADS.items()],
    *[(f"simulate --workload {{d}}/t-{name}.csv", field) for name, (_, field) in BAD_TRACES.items()],
    *[(f"{SIM} --hardware {{d}}/p-{name}.yaml", field) for name, (_, field) in BAD_PROFILES.items()],
    *[(f"compare --hardware h100-sxm --model llama-3.1-8b --vllm-bench {{d}}/r-{name}.json", field)
      for name, (_, field) in BAD_RESULTS.items()],
    *[(f"simulate --model {{d}}/m-{name}.json --num-requests 4", field) for name, (_, field) in BAD_MODELS.items()],
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("bad-input")
    (d / "afile").write_text("a file, not a folder\n")
    (d / "t.csv").write_text(TRACE_HEAD + "0,10,4\n1,12,4\n")
    (d / "ops.csv").write_text("op,dtype,m,n,k\ngemm,bf16,16,4096,4096\n")
    (d / "badops.csv").write_text("op,dtype,m,n,k\ngemm,bf16,0,4096,4096\n")
    (d / "good.json").write_text(json.dumps(GOOD_RESULT))
    for name, (text, _) in BAD_WORKLOADS.items():
        (d / f"w-{name}.yaml").write_text(text)
    for name, (text, _) in BAD_TRACES.items():
        (d / f"t-{name}.csv").write_text(text)
    base = resolve("hardware", "h100-sxm").read_text().splitlines()
    for name, ((start, line), _) in BAD_PROFILES.items():
        (d / f"p-{name}.yaml").write_text("\n".join(line if old.startswith(start) else old for old in base) + "\n")
    for name, (text, _) in BAD_RESULTS.items():
        (d / f"r-{name}.json").write_text(text)
    config = json.loads(resolve("model", "llama-156m").read_text())
    for name, (changes, _) in BAD_MODELS.items():
        (d / f"m-{name}.json").write_text(json.dumps({**config, **changes}))
    return d


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `roofline ARGV` in this process; argparse's SystemExit as its code."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, out.getvalue(), err.getvalue()


def test_the_suite_covers_every_subcommand_with_at_least_200_cases() -> None:
    commands = {shlex.split(line)[0] for line, _ in CASES}
    assert commands >= {"simulate", "plan", "compare", "predict-ops", "calibrate", "profile-device", "measure",
                        "profiles", "models"}
    assert len(CASES) >= 200


@pytest.mark.parametrize("line, field", CASES, ids=[line[:90] for line, _ in CASES])
def test_bad_input_is_one_line_naming_the_field_and_what_is_allowed(folder: Path, line: str, field: str) -> None:
    rc, out, err = run_cli(shlex.split(line.replace("{d}", str(folder))))
    message = err.strip()
    assert rc == 2, f"accepted (exit {rc}): {line}\n{err}"
    assert "Traceback" not in err and len(message.splitlines()) == 1, err
    assert field in message, f"the message does not name {field!r}: {message}"
    assert ALLOWED.search(message), f"the message does not say what is allowed: {message}"
    assert out == "", out
