"""vLLM's engine flags, defined once (`roofline.engine_args`): every bad value is one line naming the flag, exit 2,
before any work; the same flags and choices in every command that takes them."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from roofline.cli import build_parser, main
from roofline.cost.step_shape import StepArrays
from roofline.engine_args import EngineArgs, default_batch_limits, derived_max_model_len
from roofline.errors import UserError
from roofline.planning.backend import SimulatorBackend
from roofline.planning.search import Config
from roofline.registry import load_model

GIB = 2 ** 30


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


@pytest.mark.parametrize("flag", ["--max-num-seqs", "--max-num-batched-tokens", "--max-model-len",
                                  "--tensor-parallel-size", "--num-gpu-blocks-override"])
def test_zero_counts_are_errors_not_defaults(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["simulate", "--num-requests", "3", flag, "0"], capsys, flag, "positive integer")


def test_block_size_must_be_a_multiple_of_16(capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["simulate", "--num-requests", "3", "--block-size", "7"], capsys, "--block-size", "multiple of 16")
    assert EngineArgs(block_size=32).block_size == 32


def test_tensor_parallelism_stays_within_one_nvlink_domain(capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["simulate", "--num-requests", "3", "--model", "llama-3.1-70b", "--tensor-parallel-size", "16"], capsys,
           "--tensor-parallel-size", "multi-node", "1 to 8")


def test_tensor_parallelism_on_a_cpu_profile_is_refused() -> None:
    from roofline.cost.hardware import load_profile

    cpu = load_profile(Path(__file__).resolve().parents[1] / "tests" / "data" / "cpu-profile.yaml")
    EngineArgs().check_hardware(cpu)
    with pytest.raises(UserError, match="--tensor-parallel-size.*allowed: 1"):
        EngineArgs(tensor_parallel_size=2).check_hardware(cpu)


def test_async_scheduling_flag_sets_the_host_overlap(capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.cost.hardware import load_profile
    from roofline.sim.deployment import make_deployment

    h100 = load_profile("h100-sxm")
    assert h100.executor.host_overlaps_device  # the Hopper family describes vLLM >= 0.14 (async by default)
    default = make_deployment("llama-3.1-8b", h100, EngineArgs())
    sync = make_deployment("llama-3.1-8b", h100, EngineArgs(async_scheduling=False))
    assert default.engine_record["async_scheduling"] is True and sync.engine_record["async_scheduling"] is False
    contexts = np.full(128, 2000)
    # without the overlap the host's time adds to the device's instead of hiding under it
    decodes = StepArrays(np.ones(128, np.int64), contexts, np.ones(128, bool))
    assert sync.cost_model.time_s(decodes) > default.cost_model.time_s(decodes)
    cpu = Path(__file__).resolve().parents[1] / "tests" / "data" / "cpu-profile.yaml"
    _fails(["simulate", "--num-requests", "3", "--model", "llama-156m", "--hardware", str(cpu), "--async-scheduling"],
           capsys, "--async-scheduling", "CPU profile", "allowed: --no-async-scheduling or unset")


def test_moe_backend_flag_reaches_the_record_and_is_refused_on_a_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.sim.deployment import make_deployment

    marlin = make_deployment("gpt-oss-20b", "h100-sxm", EngineArgs(moe_backend="marlin"))
    assert marlin.engine_record["moe_backend"] == "marlin" and marlin.cost_model.quant.expert_kernel == "mxfp4-marlin"
    cpu = Path(__file__).resolve().parents[1] / "tests" / "data" / "cpu-profile.yaml"
    _fails(["simulate", "--num-requests", "3", "--model", "llama-156m", "--hardware", str(cpu), "--moe-backend",
            "marlin"], capsys, "--moe-backend", "CPU profile", "allowed: auto")


def test_float32_matmul_precision_reaches_the_record_and_is_refused_on_a_cpu(
        capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.sim.deployment import make_deployment

    high = make_deployment("minimax-m2.5", "b300", EngineArgs(tensor_parallel_size=4, float32_matmul_precision="high"))
    assert high.engine_record["float32_matmul_precision"] == "high" and high.cost_model.quant.fp32_gemm_dtype == "tf32"
    cpu = Path(__file__).resolve().parents[1] / "tests" / "data" / "cpu-profile.yaml"
    _fails(["simulate", "--num-requests", "3", "--model", "llama-156m", "--hardware", str(cpu),
            "--float32-matmul-precision", "high"], capsys, "--float32-matmul-precision", "CPU profile",
           "allowed: highest")


def test_mxfp8_moe_backend_reaches_the_record_on_blackwell_and_is_refused_on_hopper(
        capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.sim.deployment import make_deployment

    mxfp8 = make_deployment("gpt-oss-20b", "b200", EngineArgs(moe_backend="flashinfer-mxfp4-mxfp8"))
    assert mxfp8.engine_record["moe_backend"] == "flashinfer-mxfp4-mxfp8"
    assert mxfp8.cost_model.quant.expert_kernel == "mxfp4-mxfp8"
    _fails(["simulate", "--num-requests", "3", "--model", "gpt-oss-20b", "--hardware", "h100-sxm", "--moe-backend",
            "flashinfer-mxfp4-mxfp8"], capsys, "--moe-backend flashinfer-mxfp4-mxfp8", "Blackwell", "allowed: auto")


def test_max_model_len_within_what_vllm_derives(capsys: pytest.CaptureFixture[str]) -> None:
    assert derived_max_model_len(load_model("llama-3.1-8b")) == 131072  # llama3 RoPE: already scaled
    _fails(["simulate", "--num-requests", "3", "--max-model-len", "200000"], capsys, "--max-model-len", "131072")


def test_max_model_len_minus_one_auto_fits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--num-requests", "3", "--input-len", "256", "--output-len", "8", "--model", "llama-3.1-70b",
             "--tensor-parallel-size", "2", "--json"]
    _fails(["simulate", *flags], capsys, "KV cache too small", "-1: the longest that fits")
    assert main(["simulate", *flags, "--max-model-len", "-1"]) == 0
    engine = json.loads(capsys.readouterr().out)["engine"]
    assert 0 < engine["max_model_len"] < 131072 and engine["max_model_len"] % 16 == 0
    _fails(["simulate", *flags, "--max-model-len", "-2"], capsys, "--max-model-len", "or -1")
    _fails(["measure", "--out", str(tmp_path / "t"), "--max-model-len", "-1"], capsys, "--max-model-len", "-1")


def test_values_out_of_range(capsys: pytest.CaptureFixture[str]) -> None:
    _fails(["simulate", "--num-requests", "3", "--gpu-memory-utilization", "1.5"], capsys,
           "--gpu-memory-utilization", "(0, 1]")
    _fails(["simulate", "--num-requests", "3", "--kv-cache-memory-bytes", "-1"], capsys, "--kv-cache-memory-bytes")
    with pytest.raises(UserError, match="--dtype: 'fp64' is not allowed; allowed: auto"):
        EngineArgs(dtype="fp64")


def test_seed_on_a_csv_trace_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,10,5\n0.5,20,5\n")
    assert main(["simulate", "--workload", str(trace), "--json"]) == 0
    capsys.readouterr()
    _fails(["simulate", "--workload", str(trace), "--seed", "3"], capsys, "--seed", "a trace (")


def test_output_paths_are_checked_before_simulating(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / "file"
    existing.write_text("")
    _fails(["simulate", "--num-requests", "3", "--out", str(existing)], capsys, "--out", "not a directory")
    _fails(["simulate", "--num-requests", "3", "--out", str(existing / "sub")], capsys, "--out", "cannot write")
    _fails(["plan", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--workload", "sharegpt-chat",
            "--slo-ttft-s", "1", "--slo-tpot-s", "0.1", "--target-qps", "1", "--out", str(existing)], capsys, "--out")


def test_measure_on_cuda_without_cuda_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    _fails(["measure", "--device", "cuda", "--out", str(tmp_path / "t"), "--input-len", "4", "--output-len", "2",
            "--num-requests", "1"], capsys, "--device", "no CUDA device")
    assert not (tmp_path / "t").exists()


def test_every_command_offers_the_same_choices() -> None:
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction").choices
    choices = {name: {a.dest: a.choices for a in subparsers[name]._actions if a.dest in ("dtype", "quantization",
                                                                                           "kv_cache_dtype")}
               for name in ("simulate", "measure", "plan")}
    assert choices["simulate"]["dtype"] == choices["measure"]["dtype"] == choices["plan"]["dtype"]
    assert choices["simulate"]["quantization"] == choices["plan"]["quantization"]
    assert "quantization" not in choices["measure"]  # the engine runs unquantized weights: refused, not ignored


def test_measure_refuses_flags_it_cannot_honour(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["measure", "--out", "x", "--tensor-parallel-size", "2"])
    assert exit_info.value.code == 2
    assert "unrecognized arguments: --tensor-parallel-size" in capsys.readouterr().err


def test_plan_rejects_a_configuration_past_the_nvlink_domain_with_its_reason() -> None:
    backend = SimulatorBackend("llama-3.1-70b", "sharegpt-chat", EngineArgs())
    assert backend.fit(Config("h100-sxm", 8, 64)).fits
    fit = backend.fit(Config("h100-sxm", 16, 64))
    assert not fit.fits and "multi-node" in fit.reason


def test_batch_defaults_follow_vllm_0_32() -> None:
    assert default_batch_limits(80 * GIB, "h100-sxm", is_cpu=False) == (1024, 8192)
    assert default_batch_limits(80 * GIB, "NVIDIA A100-SXM4-80GB", is_cpu=False) == (256, 2048)
    assert default_batch_limits(180 * GIB, "b200", is_cpu=False) == (1024, 16384)
    assert default_batch_limits(24 * GIB, "l4", is_cpu=False) == (256, 2048)
    assert default_batch_limits(0, "cpu", is_cpu=True) == (128, 2048)
    spec = load_model("llama-3.1-8b")
    # An unset max_num_seqs never exceeds the token budget (vLLM caps it), instead of failing the config.
    assert EngineArgs(max_num_batched_tokens=512).batch_limits(spec, 80 * GIB, "h100", False) == (512, 512)
    # Without chunked prefill the default budget holds a whole max_model_len prompt.
    assert EngineArgs(enable_chunked_prefill=False, max_model_len=20000).batch_limits(
        spec, 80 * GIB, "h100", False) == (1024, 20000)


def test_cudagraph_capture_sizes_follow_vllm_0_32() -> None:
    from roofline.cost.params import ExecutorParams

    # vLLM's default: min(2 x max_num_seqs, 512) at most max_num_batched_tokens, on 1, 2, 4 / 8 / 16 strides.
    assert EngineArgs().cudagraph_capture_sizes(1024, 8192) == ExecutorParams().cuda_graph_batch_sizes
    assert EngineArgs().cudagraph_capture_sizes(4, 8192) == (1, 2, 4, 8)
    sizes = EngineArgs().cudagraph_capture_sizes(100, 8192)  # ceiling 200; max_num_seqs off the stride, added
    assert sizes[-1] == 200 and 100 in sizes and 104 in sizes and 196 not in sizes
    # Given: the ceiling, strides of 16 from 256, at most the token budget (which is then captured itself).
    given = EngineArgs(max_cudagraph_capture_size=2048)
    assert given.cudagraph_capture_sizes(4, 8192)[-3:] == (2016, 2032, 2048)
    assert given.cudagraph_capture_sizes(4, 1000)[-2:] == (992, 1000)
    # gpt-oss: vLLM's model config sets 1,024 where the user sets nothing.
    assert EngineArgs().cudagraph_capture_sizes(4, 8192, "GptOssForCausalLM")[-1] == 1024
    assert given.cudagraph_capture_sizes(4, 8192, "GptOssForCausalLM")[-1] == 2048


def test_max_cudagraph_capture_size_sets_which_batches_replay_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    from profiles import TEST_CPU_PROFILE

    from roofline.cost.hardware import parse_profile
    from roofline.sim.deployment import make_deployment

    def prefill(engine: EngineArgs):  # noqa: ANN202 - a StepCost
        cm = make_deployment("llama-3.1-8b", "h100-sxm", engine).cost_model
        return cm.cost(StepArrays(np.array([1000]), np.array([0]), np.array([True])))

    eager, graphed = prefill(EngineArgs()), prefill(EngineArgs(max_cudagraph_capture_size=1024))
    layers = load_model("llama-3.1-8b").num_layers
    launch = make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs()).hw.executor.kernel_launch_s
    assert eager.padded_num_tokens == 1000 and graphed.padded_num_tokens == 1008
    assert graphed.host_s < eager.host_s
    assert graphed.host_s - eager.host_s == pytest.approx(((2 * layers + 1) - eager.num_kernels) * launch)
    record = make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs(max_num_seqs=64)).engine_record
    assert record["max_cudagraph_capture_size"] == 128
    with pytest.raises(UserError, match="--max-cudagraph-capture-size: --enforce-eager captures no CUDA graphs"):
        EngineArgs(enforce_eager=True, max_cudagraph_capture_size=1024)
    with pytest.raises(UserError, match="--max-cudagraph-capture-size: must be a positive integer"):
        EngineArgs(max_cudagraph_capture_size=0)
    with pytest.raises(UserError, match="--max-cudagraph-capture-size: .* CPU profile"):
        EngineArgs(max_cudagraph_capture_size=64).check_hardware(parse_profile(TEST_CPU_PROFILE, "test"))


def test_cudagraph_mode_reaches_the_record_and_contradictions_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    from roofline.sim.deployment import make_deployment

    assert make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs()).engine_record["cudagraph_mode"] == \
        "FULL_AND_PIECEWISE"
    decode_only = make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs(cudagraph_mode="FULL_DECODE_ONLY"))
    assert decode_only.engine_record["cudagraph_mode"] == "FULL_DECODE_ONLY"
    assert make_deployment("llama-3.1-8b", "h100-sxm", EngineArgs(enforce_eager=True)).engine_record[
        "cudagraph_mode"] == "NONE"
    with pytest.raises(UserError, match="FULL is not modelled"):
        EngineArgs(cudagraph_mode="FULL")
    _fails(["simulate", "--num-requests", "3", "--enforce-eager", "--cudagraph-mode", "PIECEWISE"], capsys,
           "--enforce-eager", "contradicts --cudagraph-mode PIECEWISE", "allowed")
    cpu = Path(__file__).resolve().parents[1] / "tests" / "data" / "cpu-profile.yaml"
    _fails(["simulate", "--num-requests", "3", "--model", "llama-156m", "--hardware", str(cpu), "--enforce-eager"],
           capsys, "--enforce-eager", "CPU profile", "allowed")
