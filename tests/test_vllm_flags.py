"""vLLM's spellings on roofline's command line (`roofline.vllm_flags`): short options, `32k` lengths, dtype and
quantization aliases, and every other `vllm serve` 0.32 flag recognised (refused as not modelled yet, or accepted
where it changes no timing) instead of "unrecognized arguments"."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from roofline.cli import main as _main
from roofline.vllm_flags import TIMING_NEUTRAL, VLLM_SERVE_FLAGS, human_readable_int, human_readable_int_or_auto


def main(argv: list[str]) -> int:
    """The CLI in this process; argparse's refusals (SystemExit) as their exit code."""
    try:
        return _main(argv)
    except SystemExit as exc:
        return int(exc.code or 0)


SMALL = ["simulate", "--model", "llama-156m", "--hardware", "h100-sxm", "--input-len", "64", "--output-len", "4",
         "--num-requests", "4", "--json"]


def test_the_flag_list_is_vllm_0_32s() -> None:
    lines = (Path(__file__).parent / "data" / "vllm-0.32.0-engine-flags.txt").read_text().splitlines()
    listed = [line.strip() for line in lines if line.startswith("--")]
    assert sorted(VLLM_SERVE_FLAGS) == sorted(listed)


@pytest.mark.parametrize("text, value", [("32k", 32000), ("32K", 32768), ("25.6k", 25600), ("4096", 4096),
                                         ("1m", 1_000_000), ("2M", 2 * 2**20), (" 8k ", 8000)])
def test_human_readable_int_reads_as_vllm(text: str, value: int) -> None:
    assert human_readable_int(text) == value


@pytest.mark.parametrize("text", ["3.5K", "abc", "1e3", "", "4 k"])
def test_human_readable_int_refuses_what_vllm_refuses(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        human_readable_int(text)


def test_auto_is_vllms_auto_fit() -> None:
    assert human_readable_int_or_auto("auto") == -1 and human_readable_int_or_auto("-1") == -1


def _engine(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:
    assert main([*SMALL, *argv]) == 0
    return json.loads(capsys.readouterr().out)["engine"]


@pytest.mark.parametrize("argv, key, value", [
    (["-tp", "2"], "tensor_parallel_size", 2),
    (["--max-model-len", "2k"], "max_model_len", 2000),
    (["--max-num-batched-tokens", "4K"], "max_num_batched_tokens", 4096),
    (["--dtype", "half"], "dtype", "float16"),
    (["--dtype", "float"], "dtype", "float32"),
    (["--kv-cache-dtype", "fp8_e4m3"], "kv_cache_dtype", "fp8"),
    (["--kv-cache-dtype", "fp8_e5m2"], "kv_cache_dtype", "fp8"),
    (["--quantization", "awq_marlin"], "quantization", "awq"),
    (["-q", "modelopt"], "quantization", "fp8"),
])
def test_vllm_spellings_are_accepted(argv: list[str], key: str, value: object,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    assert _engine(argv, capsys)[key] == value


def test_compressed_tensors_takes_the_checkpoints_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--model", "qwen3-235b-a22b-fp8", "--hardware", "h200-sxm", "-tp", "8",
                 "--quantization", "compressed-tensors", "--num-requests", "4", "--input-len", "64", "--output-len",
                 "4"]) == 0
    assert "quantization=fp8-block" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["-pp", "2", "-dp", "2"], "--pipeline-parallel-size (-pp): 2 with --data-parallel-size: pipeline parallelism "
                               "combined with data or expert parallelism is a vllm serve setting the simulator does "
                               "not model yet"),
    (["--data-parallel-size", "2"], "model 'llama-156m' is dense, whose DP ranks vLLM runs as independent engines"),
    (["-ep"], "--enable-expert-parallel: model 'llama-156m' has no MoE layers"),
    (["--speculative-config", "{\"method\": \"ngram\"}"], "not model yet (speculative decoding)"),
    (["--enable-lora"], "(LoRA adapters)"),
    (["--cpu-offload-gb", "4"], "(CPU offloading)"),
    (["--quantization", "bitsandbytes"], "'bitsandbytes' is a vLLM method the simulator does not model yet"),
    (["--quantization", "compressed-tensors"], "model 'llama-156m' has none"),
    (["--max-model-len", "3.5K"], "decimals only with the decimal suffixes"),
    (["--dtype", "fp64"], "'fp64' is not allowed; allowed: auto, bfloat16, float16, float32"),
])
def test_unmodelled_vllm_flags_are_refused_in_one_line(argv: list[str], message: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "unrecognized" not in err and len(err.strip().splitlines()) == 1


def test_timing_neutral_flags_are_accepted_and_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    assert {"--trust-remote-code", "--served-model-name", "--download-dir"} <= TIMING_NEUTRAL
    assert main([*SMALL, "--trust-remote-code", "--served-model-name", "m"]) == 0
    err = capsys.readouterr().err
    assert "--trust-remote-code: accepted as vllm serve takes it; it changes no simulated timing" in err


@pytest.mark.parametrize("flag", sorted(set(VLLM_SERVE_FLAGS) - {"--help"}))
def test_every_vllm_serve_flag_is_recognised_by_simulate(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    """No flag of vllm serve is "unrecognized": each is roofline's own, refused as not modelled, or accepted."""
    parser = __import__("roofline.cli", fromlist=["build_parser"]).build_parser()
    simulate = parser._subparsers._group_actions[0].choices["simulate"]  # type: ignore[union-attr]
    assert flag in simulate._option_string_actions


def test_plan_points_single_value_flags_to_its_lists(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
                 "--slo-ttft-s", "1", "--slo-tpot-s", "0.1", "--target-qps", "1", "--out", "x", "-tp", "2"]) == 2
    assert "-tp: roofline plan searches this setting; give --tensor-parallel-sizes" in capsys.readouterr().err


def test_plan_lists_take_vllm_aliases() -> None:
    from roofline.commands.plan import parse_choice_list
    from roofline.cost.quant import KV_CACHE_DTYPE_CHOICES
    from roofline.vllm_flags import canonical_kv_cache_dtype

    assert parse_choice_list("auto,fp8_e4m3", "--kv-cache-dtypes", KV_CACHE_DTYPE_CHOICES,
                             canonical_kv_cache_dtype) == ("auto", "fp8")
