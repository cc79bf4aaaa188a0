"""vLLM's own spellings on the command line: short options, `32k` lengths, dtype and quantization aliases, and every
other `vllm serve` flag, recognised and answered (refused as not modelled yet, or accepted where it changes no
timing, and said so) rather than "unrecognized arguments".

    add_vllm_serve_flags(parser, command)     # after add_engine_args: the flags roofline does not define
    human_readable_int("32k")                  # 32000, as vLLM's parser reads it
    canonical_quantization("awq_marlin")       # "awq"

Sources: vLLM 0.32.0's `EngineArgs.add_cli_args` (vllm/engine/arg_utils.py; its long flags are listed in
tests/data/vllm-0.32.0-engine-flags.txt, and `VLLM_SERVE_FLAGS` below must equal that list), its short aliases
(`-tp`, `-pp`, `-dp`, `-dcp`, `-pcp`, `-ep`, `-q`, `-n`, `-r`, `-dpn`, `-dpr`, `-dpl`, `-dpa`, `-dpp`, `-dpb`, `-dph`,
`-dpe`), `human_readable_int` / `human_readable_int_or_auto` (vllm/utils/argparse_utils.py: `max_model_len`,
`max_num_batched_tokens`, `kv_cache_memory_bytes`), `ModelDType` (vllm/config/model.py: auto, half, float16,
bfloat16, float, float32) and `CacheDType` (vllm/config/cache.py: fp8, fp8_e4m3, fp8_e5m2, ...).
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any

# ---- lengths: vLLM's human_readable_int ----------------------------------------------------------------------

_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_HUMAN_INT = re.compile(r"(-?\d+(?:\.\d+)?)([kmgtKMGT]?)")


def human_readable_int(text: str) -> int:
    """'32k' -> 32000, '32K' -> 32768, '25.6k' -> 25600, '4096' -> 4096 (vLLM's `human_readable_int`: a lowercase
    suffix is decimal and takes decimals, an uppercase one binary and takes whole numbers)."""
    value = text.strip()
    match = _HUMAN_INT.fullmatch(value)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer; allowed: an integer, or one with vLLM's "
                                         f"suffixes k/m/g/t (x1000) or K/M/G/T (x1024), e.g. 32k or 32K")
    number, suffix = match.groups()
    if suffix in _DECIMAL:
        return int(float(number) * _DECIMAL[suffix])
    if "." in number:
        raise argparse.ArgumentTypeError(f"{text!r}: decimals only with the decimal suffixes k/m/g/t (e.g. 25.6k)")
    return int(number) * _BINARY.get(suffix, 1)


def human_readable_int_or_auto(text: str) -> int:
    """`human_readable_int`, or 'auto' / -1: vLLM's --max-model-len auto-fit (`human_readable_int_or_auto`)."""
    return -1 if text.strip().lower() == "auto" else human_readable_int(text)


# ---- dtype and quantization aliases --------------------------------------------------------------------------

# vLLM's --dtype spellings -> roofline's (`roofline.cost.quant.DTYPE_CHOICES`).
DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# vLLM's --kv-cache-dtype spellings -> roofline's: both fp8 formats store one byte per element (fp8_e5m2's range,
# fp8_e4m3's precision); the byte count is what the cost model prices.
KV_CACHE_DTYPE_ALIASES = {"fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "bf16": "bfloat16", "fp16": "float16",
                          "half": "float16"}
# vLLM's --quantization methods -> the scheme the cost model prices (the same weight bytes and GEMM dtype; the
# kernel vLLM picks for it is the device's, as for the scheme's own name): Marlin kernels of AWQ/GPTQ checkpoints,
# NVIDIA ModelOpt's fp8 and NVFP4 checkpoints, fbgemm's and PTPC's per-channel/per-token fp8.
QUANTIZATION_ALIASES = {"awq_marlin": "awq", "gptq_marlin": "gptq", "modelopt": "fp8", "modelopt_fp4": "nvfp4",
                        "fbgemm_fp8": "fp8", "ptpc_fp8": "fp8"}
# Methods that take their scheme from the checkpoint's quantization_config, as vLLM reads it.
CHECKPOINT_QUANTIZATIONS = ("compressed-tensors",)
# vLLM 0.32 methods whose kernels or formats the cost model does not describe.
UNMODELLED_QUANTIZATIONS = ("bitsandbytes", "gguf", "experts_int8", "quark", "torchao", "inc", "moe_wna16",
                            "fp_quant", "petit_nvfp4", "mxfp8", "cpu_awq", "gptq_bitblas", "bitblas", "hqq",
                            "tpu_int8", "deepspeedfp", "auto-round", "auto_round")


def alias_type(choices: tuple[str, ...], aliases: dict[str, str], flag: str,
               extra: tuple[str, ...] = (), unmodelled: tuple[str, ...] = ()) -> Any:
    """An argparse `type` that maps vLLM's alias to roofline's name and refuses anything else in one line (the
    allowed names, then vLLM's aliases)."""
    def convert(text: str) -> str:
        value = aliases.get(text, text)
        if value in choices or value in extra:
            return value
        if value in unmodelled:
            raise argparse.ArgumentTypeError(f"{text!r} is a vLLM method the simulator does not model yet; allowed: "
                                             f"{', '.join(choices + extra)}")
        alias_text = ", ".join(f"{a}={c}" for a, c in aliases.items())
        raise argparse.ArgumentTypeError(f"{text!r} is not allowed; allowed: {', '.join(choices + extra)} (vLLM's "
                                         f"aliases: {alias_text})")
    convert.__name__ = flag  # argparse names the type in some messages
    return convert


def canonical_quantization(text: str) -> str:
    return QUANTIZATION_ALIASES.get(text, text)


def canonical_kv_cache_dtype(text: str) -> str:
    return KV_CACHE_DTYPE_ALIASES.get(text, text)


# ---- the other vllm serve flags ------------------------------------------------------------------------------

# Every long flag of vLLM 0.32.0's `EngineArgs.add_cli_args` (tests/data/vllm-0.32.0-engine-flags.txt checks it).
VLLM_SERVE_FLAGS = tuple("""
--additional-config --aggregate-engine-logging --all2all-backend --allow-deprecated-quantization
--allowed-local-media-path --allowed-media-domains --async-scheduling --attention-backend --attention-config
--aux-output-config --block-size --code-revision --collect-detailed-traces --compilation-config --config-format
--convert --cp-kv-cache-interleave-size --cpu-distributed-timeout-seconds --cpu-offload-gb --cpu-offload-params
--cudagraph-capture-sizes --cudagraph-metrics --custom-histogram-buckets --data-parallel-address
--data-parallel-backend --data-parallel-external-lb --data-parallel-hybrid-lb --data-parallel-multi-port-external-lb
--data-parallel-rank --data-parallel-rpc-port --data-parallel-size --data-parallel-size-local
--data-parallel-start-rank --dbo-decode-token-threshold --dbo-prefill-token-threshold --dcp-comm-backend
--dcp-kv-cache-interleave-size --dcp-q-replicate --decode-context-parallel-size --default-mm-loras --device-ids
--device-memory-utilization --diffusion-config --disable-cascade-attn --disable-chunked-mm-input
--disable-custom-all-reduce --disable-hybrid-kv-cache-manager --disable-log-stats
--disable-nccl-for-dp-synchronization --disable-sliding-window --distributed-executor-backend
--distributed-timeout-seconds --download-dir --dp-sync-interval --dtype --ec-manager-config --ec-transfer-config
--elastic-ep-max-dp-size --enable-batch-sharded-sampling --enable-chunked-prefill --enable-cumem-allocator
--enable-dbo --enable-elastic-ep --enable-ep-weight-filter --enable-eplb --enable-expert-parallel
--enable-fault-tolerance --enable-flashinfer-autotune --enable-hc-sp --enable-layerwise-nvtx-tracing
--enable-log-requests --enable-logging-iteration-details --enable-lora --enable-mamba-cache-stochastic-rounding
--enable-mamba-shared-prefix-checkpoint --enable-mfu-metrics --enable-mixed-moe-lora-format --enable-mm-embeds
--enable-moe-shared-loras --enable-nccl-comm-suspend --enable-prefix-caching --enable-prompt-embeds
--enable-return-routed-experts --enable-shm-tensor-arena --enable-sleep-mode --enable-tower-connector-lora
--enable-trace-replay --enforce-eager --engram-config --eplb-config --expert-placement-strategy
--fail-on-environ-validation --fault-tolerance-config --fully-sharded-loras --gdn-prefill-backend
--generation-config --gpu-memory-utilization --help --hf-config-path --hf-overrides --hf-token --ignore-patterns
--interleave-mm-strings --io-processor-plugin --ir-op-priority --jit-monitor-mode --jit-monitor-verbose
--kda-decode-backend --kda-prefill-backend --kernel-config --kv-cache-dtype --kv-cache-dtype-skip-layers
--kv-cache-memory-bytes --kv-cache-metrics --kv-cache-metrics-sample --kv-events-config --kv-offloading-backend
--kv-offloading-size --kv-sharing-fast-prefill --kv-transfer-config --language-model-only --limit-mm-per-prompt
--linear-backend --load-format --log-config-file --log-level --logging-config --logits-processors --logprobs-mode
--long-prefill-token-threshold --long-prefill-token-threshold-adaptive --lora-dtype --lora-target-modules
--mamba-backend --mamba-block-size --mamba-cache-dtype --mamba-cache-mode --mamba-cache-philox-rounds
--mamba-ssm-cache-dtype --mamba-ssu-algorithm --master-addr --master-port --max-cpu-loras
--max-cudagraph-capture-size --max-logprobs --max-lora-cls-labels --max-lora-rank --max-loras --max-model-len
--max-num-active-seqs --max-num-batched-tokens --max-num-queued-reqs --max-num-queued-tokens
--max-num-scheduled-tokens --max-num-seqs --max-parallel-loading-workers --media-io-kwargs
--mm-device-do-normalize --mm-encoder-attn-backend --mm-encoder-attn-dtype --mm-encoder-fp8-scale-path
--mm-encoder-fp8-scale-save-margin --mm-encoder-fp8-scale-save-path --mm-encoder-only --mm-encoder-tp-mode
--mm-hasher-algorithm --mm-ipc-gpu-memory-gb --mm-processor-cache-gb --mm-processor-cache-type
--mm-processor-device --mm-processor-kwargs --mm-shm-cache-max-object-size-mb --mm-tensor-ipc --model
--model-class-overrides --model-impl --model-loader-extra-config --moe-backend --nnodes --node-rank
--num-gpu-blocks-override --numa-bind --numa-bind-cpus --numa-bind-nodes --offload-backend --offload-group-size
--offload-num-in-group --offload-params --offload-prefetch-step --optimization-level --otlp-traces-endpoint
--override-generation-config --per-request-spec-decode-metrics --performance-mode --pipeline-parallel-size
--pooler-config --prefill-context-parallel-size --prefill-schedule-interval --prefix-cache-retention-interval
--prefix-caching-hash-algo --prefix-match-unit --profiler-config --pt-load-map-location --quantization
--quantization-config --ray-workers-use-nsight --reasoning-config --reasoning-parser --reasoning-parser-plugin
--renderer-num-workers --replayssm-buffer-len --return-sampling-mask --revision --runner --safetensors-load-strategy
--safetensors-prefetch-block-size --safetensors-prefetch-num-threads --scheduler-cls --scheduler-reserve-full-isl
--scheduling-policy --seed --served-model-name --show-hidden-metrics-for-version --shutdown-timeout
--skip-mm-profiling --skip-tokenizer-init --sleep-mode-offload-cudagraph --sleep-preserve-parameter-names
--sparse-indexer-topk-backend --spec-method --spec-model --spec-tokens --specialize-active-lora --speculative-config
--stream-interval --structured-outputs-config --swa-bounded-replay --tensor-parallel-size --tokenizer
--tokenizer-mode --tokenizer-revision --trust-remote-code --ubatch-size --use-fp64-gumbel --use-replayssm
--use-tqdm-on-load --video-pruning-method --video-pruning-rate --watermark --watermark-config
--weight-transfer-config --worker-cls --worker-extension-cls --no-async-scheduling --no-enable-chunked-prefill
--no-enable-prefix-caching
""".split())

# vLLM's short options -> their long flag (arg_utils.py `add_cli_args`).
SHORT_ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
                 "-dcp": "--decode-context-parallel-size", "-pcp": "--prefill-context-parallel-size",
                 "-ep": "--enable-expert-parallel", "-q": "--quantization", "-n": "--nnodes", "-r": "--node-rank",
                 "-dpn": "--data-parallel-rank", "-dpr": "--data-parallel-start-rank",
                 "-dpl": "--data-parallel-size-local", "-dpa": "--data-parallel-address",
                 "-dpp": "--data-parallel-rpc-port", "-dpb": "--data-parallel-backend",
                 "-dph": "--data-parallel-hybrid-lb", "-dpe": "--data-parallel-external-lb"}

# Flags that change no simulated time: where the weights come from, names, logging, metrics, tracing, the
# tokenizer's files (the simulator counts tokens, it does not run a tokenizer on the engine's side), the engine's
# sampling seed (outputs always run to their length here). Accepted, and said so on stderr.
TIMING_NEUTRAL = frozenset("""
--aggregate-engine-logging --allowed-local-media-path --allowed-media-domains --code-revision --collect-detailed-traces
--config-format --cudagraph-metrics --custom-histogram-buckets --disable-log-stats --download-dir
--enable-layerwise-nvtx-tracing --enable-log-requests --enable-logging-iteration-details --enable-mfu-metrics
--generation-config --hf-config-path --hf-token --ignore-patterns --kv-cache-metrics --kv-cache-metrics-sample
--load-format --log-config-file --log-level --logging-config --max-logprobs --model --otlp-traces-endpoint
--override-generation-config --per-request-spec-decode-metrics --pt-load-map-location --revision
--safetensors-load-strategy --safetensors-prefetch-block-size --safetensors-prefetch-num-threads --seed
--served-model-name --show-hidden-metrics-for-version --shutdown-timeout --skip-tokenizer-init --tokenizer
--tokenizer-mode --tokenizer-revision --trust-remote-code --use-tqdm-on-load --model-loader-extra-config
--reasoning-parser --reasoning-parser-plugin --max-parallel-loading-workers --distributed-timeout-seconds
--cpu-distributed-timeout-seconds --fail-on-environ-validation --jit-monitor-mode --jit-monitor-verbose
""".split())

# What a not-modelled flag would change, for its message.
_FEATURES = {"pipeline": "pipeline parallelism", "data-parallel": "data parallelism (use --num-replicas for "
             "independent replicas)", "expert": "expert parallelism", "eplb": "expert parallelism's load balancer",
             "spec": "speculative decoding", "speculative": "speculative decoding", "lora": "LoRA adapters",
             "context-parallel": "context parallelism", "dcp": "context parallelism", "offload": "CPU offloading",
             "nnodes": "multi-node serving", "node-rank": "multi-node serving", "mm-": "multimodal inputs",
             "mamba": "Mamba/SSM models", "dbo": "dual-batch overlap", "kv-transfer": "disaggregated serving",
             "kv-offloading": "KV-cache offloading", "sleep": "sleep mode", "attention-backend": "the choice of "
             "attention backend (the device's default is priced)", "compilation-config": "compilation settings "
             "(the CUDA-graph mode has --cudagraph-mode)", "cudagraph-capture-sizes": "explicit capture sizes "
             "(--max-cudagraph-capture-size is modelled)", "scheduling-policy": "priority scheduling",
             "long-prefill": "the long-prefill threshold", "max-num-scheduled-tokens": "a scheduled-token cap below "
             "the token budget", "sliding-window": "sliding-window changes", "cascade": "cascade attention "
             "changes"}


def _feature(flag: str) -> str:
    return next((text for key, text in _FEATURES.items() if key in flag), "its effect")


class _NotModelled(argparse.Action):
    """A `vllm serve` flag that changes what is served in a way the simulator does not model: refused, one line."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        name = SHORT_ALIASES.get(option_string or "", option_string) if option_string else self.dest
        shown = f"{option_string} ({name})" if name != option_string else str(option_string)
        parser.error(f"{shown}: a vllm serve flag the simulator does not model yet ({_feature(str(name))}); "
                     f"remove it to simulate without it")


class _TimingNeutral(argparse.Action):
    """A `vllm serve` flag with no effect on the simulated timing: accepted, and said so on stderr."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"{parser.prog}: {option_string}: accepted as vllm serve takes it; it changes no simulated timing",
              file=sys.stderr)


# roofline plan's lists for vLLM's single-value flags.
_PLAN_LISTS = {"--tensor-parallel-size": "--tensor-parallel-sizes N,...",
               "--data-parallel-size": "--data-parallel-sizes N,...", "--enable-expert-parallel": "--expert-parallel "
               "off,on", "--data-parallel-size-local": "nothing: it puts as many DP ranks on a node as its GPUs hold",
               "--kv-cache-memory-bytes": "nothing: "
               "it sizes the KV cache per device as vLLM does", "--num-gpu-blocks-override": "nothing: it sizes the "
               "KV cache per device as vLLM does"}


class _NotTaken(argparse.Action):
    """A flag roofline plan takes under another name (it searches lists of its own)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        long = SHORT_ALIASES.get(option_string or "", option_string)
        parser.error(f"{option_string}: roofline plan searches this setting; give {_PLAN_LISTS[str(long)]}")


def add_vllm_serve_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """Every `vllm serve` flag and short alias `parser` does not define yet: a short alias of a defined flag becomes
    its alias; the rest are refused as not modelled yet, or accepted with a note when they change no timing."""
    defined = parser._option_string_actions  # (argparse keeps no public index of its options)
    for short, long in SHORT_ALIASES.items():
        if short in defined:
            continue
        if long in defined:
            action = defined[long]
            action.option_strings = [*action.option_strings, short]
            defined[short] = action
        else:
            flag_action(parser, command, long, short)
    for flag in VLLM_SERVE_FLAGS:
        if flag not in defined and flag != "--help":
            flag_action(parser, command, flag)


# Data / expert parallelism: `roofline simulate` takes these (`roofline.parallel_config`); the other commands do not.
SIMULATE_ONLY = frozenset(("--data-parallel-size", "--data-parallel-size-local", "--enable-expert-parallel",
                           "--all2all-backend", "--enable-eplb", "--eplb-config"))


class _SimulateOnly(argparse.Action):
    """A data / expert parallelism flag on a command other than simulate."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        name = SHORT_ALIASES.get(option_string or "", option_string)
        shown = f"{option_string} ({name})" if name != option_string else str(option_string)
        parser.error(f"{shown}: data / expert parallelism is taken by roofline simulate only (this command does "
                     f"not model it yet); remove it, or simulate the layout with roofline simulate")


def flag_action(parser: argparse.ArgumentParser, command: str, flag: str, *aliases: str) -> None:
    group = _unmodelled_group(parser)
    names = [flag, *aliases]
    if command == "plan" and flag in _PLAN_LISTS:
        group.add_argument(*names, action=_NotTaken, nargs="?", help=argparse.SUPPRESS)
    elif flag in SIMULATE_ONLY:
        group.add_argument(*names, action=_SimulateOnly, nargs="?", help=argparse.SUPPRESS)
    elif flag in TIMING_NEUTRAL:
        group.add_argument(*names, action=_TimingNeutral, nargs="?", help=argparse.SUPPRESS)
    else:
        group.add_argument(*names, action=_NotModelled, nargs="?", help=argparse.SUPPRESS)


def _unmodelled_group(parser: argparse.ArgumentParser) -> Any:
    for group in parser._action_groups:
        if group.title == "other vllm serve flags":
            return group
    return parser.add_argument_group(
        "other vllm serve flags", "every other flag of vllm serve 0.32 is recognised: one that changes no timing "
        "(names, logging, download settings) is accepted and said so; the others are refused as not modelled yet")
