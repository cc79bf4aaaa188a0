"""The API server's chat cost by vLLM release (roofline.sim.api_server.release_chat_request_extra_s): vLLM 0.11.0
parses the model's chat template for every chat request; no other release does, nor 0.11.0 for harmony models."""

from __future__ import annotations

from dataclasses import replace

import pytest
from api_costs import only
from profiles import gpu_profile_without_tokenizer

from roofline.cost.host_cpu import HostCpu
from roofline.engine_args import EngineArgs
from roofline.errors import UserError
from roofline.sim.api_server import CHAT_TEMPLATE_PARSE_S, release_chat_request_extra_s
from roofline.sim.deployment import make_deployment
from roofline.sim.simulator import SimulationOptions, run_simulation
from roofline.sim.workload import ArrivalProcess, LengthDistribution, Workload

ENGINE = EngineArgs(max_num_seqs=64, max_num_batched_tokens=4096, max_model_len=512, num_gpu_blocks_override=400,
                    async_scheduling=False)
STEP_S = 0.01
INPUT_ONLY = only(request_s=0.02, chat_request_s=0.005)


@pytest.mark.parametrize(("version", "architecture", "extra_s"), [
    ("0.11.0", "Qwen3ForCausalLM", CHAT_TEMPLATE_PARSE_S),
    ("0.11.0+cpu", "LlamaForCausalLM", CHAT_TEMPLATE_PARSE_S),
    ("v0.11.0rc2", "DeepseekV3ForCausalLM", CHAT_TEMPLATE_PARSE_S),
    ("0.11.0", "GptOssForCausalLM", 0.0),  # rendered by harmony, no jinja template
    ("0.10.2", "Qwen3ForCausalLM", 0.0),  # before the per-request parse
    ("0.11.1", "Qwen3ForCausalLM", 0.0),  # the parse's result cached
    ("0.32.0", "Qwen3ForCausalLM", 0.0),
])
def test_only_0_11_0_parses_the_template_per_chat_request(version: str, architecture: str, extra_s: float) -> None:
    assert release_chat_request_extra_s(version, architecture) == extra_s


def test_a_bad_version_is_refused() -> None:
    with pytest.raises(UserError, match="vLLM version"):
        release_chat_request_extra_s("eleven", "Qwen3ForCausalLM")


def _ttft_s(version: str, endpoint: str, speed: float = 2.0) -> float:
    hw = replace(gpu_profile_without_tokenizer("h100-sxm"),
                 host=HostCpu("test host", speed, api_server_before_render_fraction=0.0))
    deployment = make_deployment("llama-156m", hw, ENGINE, vllm_version=version)
    workload = Workload(name="one", seed=0, num_requests=1, arrival=ArrivalProcess("all_at_once"),
                        prompt_tokens=LengthDistribution("fixed", value=16),
                        output_tokens=LengthDistribution("fixed", value=1))
    result = run_simulation(deployment, workload, SimulationOptions(api_server_costs=INPUT_ONLY, endpoint=endpoint),
                            step_time_fn=lambda replica, step, start, plan: STEP_S)
    return float(result.requests.ttft_s[0])


def test_the_simulated_release_adds_its_chat_work_scaled_by_the_host() -> None:
    # 0.32: (20 + 5 ms) / 2 of input work, then the 10-ms step; 0.11.0's chat request adds the parse / 2.
    assert _ttft_s("0.32.0", "chat") == pytest.approx(0.0125 + STEP_S, abs=1e-12)
    assert _ttft_s("0.11.0", "chat") == pytest.approx(0.0125 + CHAT_TEMPLATE_PARSE_S / 2 + STEP_S, abs=1e-12)
    # The completions endpoint renders no chat template.
    assert _ttft_s("0.11.0", "completions") == pytest.approx(_ttft_s("0.32.0", "completions"), abs=1e-12)
