"""The chat stream's work per output token for harmony-rendered models (gpt-oss) by vLLM release
(roofline.sim.api_server.release_chat_output_token_extra_s): added to the chat endpoint's output passes only, scaled
by the host; no other model and not the completions endpoint."""

from __future__ import annotations

from dataclasses import replace

import pytest
from api_costs import only
from profiles import gpu_profile_without_tokenizer

from roofline.cost.host_cpu import HostCpu
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.sim.api_server import HARMONY_CHAT_OUTPUT_TOKEN_S, release_chat_output_token_extra_s
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload

V0102, V0110, V032 = (value for _, value in HARMONY_CHAT_OUTPUT_TOKEN_S)
ENGINE = EngineArgs(max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=512, num_gpu_blocks_override=400,
                    async_scheduling=False)
STEP_S = 0.01
OUTPUT_ONLY = only(output_token_s=0.001)


@pytest.mark.parametrize(("version", "architecture", "extra_s"), [
    ("0.10.2", "GptOssForCausalLM", V0102),
    ("0.9.2", "GptOssForCausalLM", V0102),  # older than every release read: the oldest's
    ("0.11.0", "GptOssForCausalLM", V0110),
    ("0.11.0+cpu", "GptOssForCausalLM", V0110),
    ("0.19.0", "GptOssForCausalLM", V0110),  # the nearest release read at or below
    ("0.32.0", "GptOssForCausalLM", V032),
    ("v0.33.1rc1", "GptOssForCausalLM", V032),
    ("0.32.0", "Qwen3ForCausalLM", 0.0),  # a jinja-templated model: no harmony
    ("0.11.0", "LlamaForCausalLM", 0.0),
])
def test_harmony_models_add_their_release_cost_per_output_token(version: str, architecture: str,
                                                                extra_s: float) -> None:
    assert release_chat_output_token_extra_s(version, architecture) == extra_s


def test_the_releases_read_order_their_costs() -> None:
    # 0.10.2 < 0.11.0 (the default reasoning parser's list per token) < 0.32 (HarmonyParser's messages per token).
    assert 0.0 < V0102 < V0110 < V032


def test_a_bad_version_is_refused() -> None:
    with pytest.raises(UserError, match="vLLM version"):
        release_chat_output_token_extra_s("eleven", "GptOssForCausalLM")


def _last_token_s(model: str, version: str, endpoint: str, speed: float = 2.0, output_tokens: int = 8) -> float:
    hw = replace(gpu_profile_without_tokenizer("h100-sxm"), host=HostCpu("test host", speed))
    deployment = make_deployment(model, hw, ENGINE, vllm_version=version)
    workload = Workload(name="one", seed=0, num_requests=1, arrival=ArrivalProcess("all_at_once"),
                        prompt_tokens=LengthDistribution("fixed", value=16),
                        output_tokens=LengthDistribution("fixed", value=output_tokens))
    result = run_simulation(deployment, workload, SimulationOptions(api_server_costs=OUTPUT_ONLY, endpoint=endpoint),
                            step_time_fn=lambda replica, step, start, plan: STEP_S)
    return float(result.requests.e2e_s[0])


def test_gpt_oss_chat_streams_pay_the_harmony_cost_scaled_by_the_host() -> None:
    # One request: every step streams one token; the last token's pass carries 1 ms / 2 (+ the release's extra / 2).
    for version, extra_s in (("0.11.0", V0110), ("0.32.0", V032)):
        chat = _last_token_s("gpt-oss-20b", version, "chat")
        completions = _last_token_s("gpt-oss-20b", version, "completions")
        assert chat - completions == pytest.approx(extra_s / 2, abs=1e-12)
    # Not another model's chat stream, nor the completions endpoint (what the silicon judge simulates).
    assert _last_token_s("llama-156m", "0.32.0", "chat") == pytest.approx(
        _last_token_s("llama-156m", "0.32.0", "completions"), abs=1e-12)
    assert _last_token_s("gpt-oss-20b", "0.32.0", "completions") == pytest.approx(
        _last_token_s("gpt-oss-20b", "0.10.2", "completions"), abs=1e-12)
