"""The load `vllm bench serve` offers, mirrored for the simulator: its datasets, its send schedule, its closed loop.

Mirrors vLLM 0.32.0's benchmark client (`VLLM_BENCH_VERSION`; `vllm/benchmarks/serve.py` and
`vllm/benchmarks/datasets/`), flag for flag, under the same names and defaults:

- `--dataset-name random`: per request, input and output lengths drawn uniformly from
  [floor(L (1 - r)), ceil(L (1 + r))] (outputs at least 1) with `np.random.default_rng(--seed)`, inputs first
  then outputs, as vLLM's `get_sampling_params`, so the lengths are vLLM's own for the same seed. Before drawing,
  vLLM subtracts the tokenizer's special tokens (`num_special_tokens_to_add()`, e.g. Llama's BOS) from
  `--random-input-len`, and the server adds them back when it tokenizes the prompt: vLLM's `input_lens` and
  `total_input_tokens` count without them, the simulated prompt has them (see `num_special_tokens`). A fixed
  random prefix of `--random-prefix-len` tokens (the same for every request) leads every prompt. vLLM forces
  `ignore_eos` for this dataset. Not mirrored: vLLM decodes each token sequence to text and re-encodes it,
  which can change a prompt's length by a few tokens (it logs the total mismatch).
- `--dataset-name sharegpt --dataset-path FILE --tokenizer DIR`: the file's conversations with at least two
  turns, shuffled with Python's `random.seed(--seed)` exactly as vLLM shuffles them; per conversation, the first
  turn's text is the prompt and the second's the completion, both tokenized with the tokenizer's special tokens
  (so a Llama BOS counts in both, as in vLLM); `--sharegpt-output-len` replaces the completion's length. vLLM's
  filter `is_valid_sequence` drops prompts < 4 or > 1024 tokens, completions < 4 tokens (unless the output length
  is given) and pairs > 2048 tokens; too few valid pairs are topped up by vLLM's oversampling (`random.choice`
  after `random.seed(--seed)`). The tokenizer is loaded from a local directory with transformers
  (`AutoTokenizer`, no download).
- send schedule (`get_request`): request i comes due after a gamma-distributed gap of shape `--burstiness` and
  mean 1 / rate (burstiness 1: Poisson; inf: constant gaps), drawn with `np.random.seed(--seed)` as vLLM draws
  them; the first request waits one gap too. Without ramp-up the cumulative times are scaled so that the last
  request comes due at exactly N / rate s. With `--ramp-up-strategy linear|exponential` the rate of request i
  goes from `--ramp-up-start-rps` to `--ramp-up-end-rps` with i / (N - 1) and nothing is rescaled.
  `--request-rate inf` (the default) makes every request due at 0.
- `--max-concurrency N`: the closed loop (`SimulationOptions.max_concurrency`): a due request waits for one of N
  slots; vLLM's TTFT, ITL and end-to-end latency start when it is sent.
- time 0 is vLLM's `benchmark_start_time`, taken just before the first request is scheduled.

The simulator generates every request's output to its length: EOS is never sampled, so the run is the run of
`--ignore-eos` whatever that flag says. A `vllm bench serve` run without it (ShareGPT) stops where the model
samples EOS; replaying its saved `output_lens` (`roofline compare --vllm-bench`) takes those lengths instead.

    load = BenchLoad(dataset=RandomDataset(input_len=1024, output_len=128), num_prompts=200, request_rate=8.0,
                     max_concurrency=32)
    requests = load.build(model_spec)              # BenchRequests: workload, specs, client_input_lens
    run_simulation(deployment, requests.workload, SimulationOptions(max_concurrency=32), specs=requests.specs)
"""

from __future__ import annotations

import argparse
import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.core.model_spec import ModelSpec
from roofline.errors import UserError
from roofline.sim.workload import (
    MAX_NUM_REQUESTS,
    ArrivalProcess,
    LengthDistribution,
    RequestSpec,
    SharedPrefix,
    Workload,
)
from roofline.sim.workload_args import check_seed, parse_rate

VLLM_BENCH_VERSION = "0.32.0"
DATASET_NAMES = ("random", "sharegpt")
RAMP_UP_STRATEGIES = ("linear", "exponential")
# vLLM 0.32's defaults (vllm/benchmarks/datasets/datasets.py: DEFAULT_NUM_PROMPTS, RandomDataset.DEFAULT_*,
# add_dataset_parser's --seed; serve.py's --request-rate, --burstiness).
DEFAULT_NUM_PROMPTS = 1000
DEFAULT_SEED = 0
DEFAULT_RANDOM_INPUT_LEN = 1024
DEFAULT_RANDOM_OUTPUT_LEN = 128
# is_valid_sequence's defaults: the ShareGPT filter.
SHAREGPT_MIN_LEN = 4
SHAREGPT_MAX_PROMPT_LEN = 1024
SHAREGPT_MAX_TOTAL_LEN = 2048
# Tokenizers that add a BOS to every prompt (one special token), by the model's architecture: Llama, Mistral
# and Mixtral tokenizers do (add_bos_token / Llama 3's TemplateProcessing), Qwen2/Qwen3 tokenizers add none.
# Used when no --tokenizer is given; with one, its num_special_tokens_to_add() is used.
_BOS_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM")


# ---- datasets ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RandomDataset:
    """vLLM's `--dataset-name random` (`RandomDataset` with `get_sampling_params`)."""

    input_len: int = DEFAULT_RANDOM_INPUT_LEN
    output_len: int = DEFAULT_RANDOM_OUTPUT_LEN
    input_range_ratio: float = 0.0
    output_range_ratio: float = 0.0
    prefix_len: int = 0

    def __post_init__(self) -> None:
        for flag, value in (("--random-input-len", self.input_len), ("--random-output-len", self.output_len),
                            ("--random-prefix-len", self.prefix_len)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise UserError(f"{flag}: must be an integer >= 0, got {value!r}")
        if self.output_len < 1:  # (vLLM's client would make it 1 token, `bounds`: refused, not replaced)
            raise UserError(f"--random-output-len: must be an integer >= 1, got {self.output_len}")
        for ratio in (self.input_range_ratio, self.output_range_ratio):
            if not 0.0 <= ratio < 1.0:
                raise UserError(f"--random-range-ratio: must be in [0, 1) (or a JSON dict of 'input' and 'output' "
                                f"in [0, 1)), got {ratio!r}")

    def bounds(self, num_special_tokens: int) -> tuple[int, int, int, int]:
        """(input low, input high, output low, output high), both ends included, inputs without special tokens."""
        real_input_len = max(0, self.input_len - num_special_tokens)
        input_low = math.floor(real_input_len * (1 - self.input_range_ratio))
        input_high = math.ceil(real_input_len * (1 + self.input_range_ratio))
        output_low = max(math.floor(self.output_len * (1 - self.output_range_ratio)), 1)
        output_high = max(math.ceil(self.output_len * (1 + self.output_range_ratio)), 1)
        if self.prefix_len + input_low < 1:
            raise UserError(f"--random-input-len: too small: with {num_special_tokens} special token(s) and range "
                            f"ratio {self.input_range_ratio} a prompt may have no token; raise --random-input-len "
                            f"or --random-prefix-len")
        return input_low, input_high, output_low, output_high

    def lengths(self, num_prompts: int, seed: int, num_special_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Client-side prompt lengths (prefix + sampled, no special tokens) and output lengths, as vLLM's."""
        input_low, input_high, output_low, output_high = self.bounds(num_special_tokens)
        rng = np.random.default_rng(seed)
        inputs = rng.integers(input_low, input_high + 1, size=num_prompts)
        outputs = rng.integers(output_low, output_high + 1, size=num_prompts)
        return self.prefix_len + inputs.astype(np.int64), outputs.astype(np.int64)

    def describe(self) -> dict[str, object]:
        return {"dataset_name": "random", "random_input_len": self.input_len,
                "random_output_len": self.output_len, "random_range_ratio": _ratio_text(self),
                "random_prefix_len": self.prefix_len}


@dataclass(frozen=True)
class ShareGPTDataset:
    """vLLM's `--dataset-name sharegpt`: a ShareGPT JSON file, tokenized with a local tokenizer."""

    path: Path
    tokenizer_dir: Path
    output_len: int | None = None

    def lengths(self, num_prompts: int, seed: int, tokenizer: Any) -> tuple[np.ndarray, np.ndarray]:
        """Prompt and output lengths of the pairs vLLM would send, in its order."""
        entries = _read_sharegpt(self.path)
        random.Random(seed).shuffle(entries)  # random.seed(seed); random.shuffle(data), as vLLM
        prompts: list[int] = []
        outputs: list[int] = []
        for entry in entries:
            if len(prompts) >= num_prompts:
                break
            prompt_len = len(tokenizer(_turn_text(entry, 0)).input_ids)
            completion_len = len(tokenizer(_turn_text(entry, 1)).input_ids)
            output_len = completion_len if self.output_len is None else self.output_len
            if is_valid_sequence(prompt_len, output_len, skip_min_output_len_check=self.output_len is not None):
                prompts.append(prompt_len)
                outputs.append(output_len)
        if not prompts:
            raise UserError(f"--dataset-path: '{self.path}' has no conversation that passes vLLM's ShareGPT filter "
                            f"(prompt {SHAREGPT_MIN_LEN}-{SHAREGPT_MAX_PROMPT_LEN} tokens, completion >= "
                            f"{SHAREGPT_MIN_LEN}, both <= {SHAREGPT_MAX_TOTAL_LEN})")
        if len(prompts) < num_prompts:  # vLLM's maybe_oversample_requests: random.choice among the valid pairs
            pick, num_valid = random.Random(seed), len(prompts)
            for _ in range(num_prompts - num_valid):
                i = pick.choice(range(num_valid))  # the same draw as random.choice on a list of num_valid items
                prompts.append(prompts[i])
                outputs.append(outputs[i])
        return np.array(prompts, dtype=np.int64), np.array(outputs, dtype=np.int64)

    def describe(self) -> dict[str, object]:
        return {"dataset_name": "sharegpt", "dataset_path": str(self.path), "tokenizer": str(self.tokenizer_dir),
                "sharegpt_output_len": self.output_len}


def is_valid_sequence(prompt_len: int, output_len: int, skip_min_output_len_check: bool = False) -> bool:
    """vLLM's ShareGPT filter with its defaults (min 4 tokens, prompt <= 1024, prompt + output <= 2048)."""
    return not (prompt_len < SHAREGPT_MIN_LEN
                or (not skip_min_output_len_check and output_len < SHAREGPT_MIN_LEN)
                or prompt_len > SHAREGPT_MAX_PROMPT_LEN
                or prompt_len + output_len > SHAREGPT_MAX_TOTAL_LEN)


def _read_sharegpt(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"--dataset-path: no such file '{path}'") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UserError(f"--dataset-path: '{path}' is not a ShareGPT JSON file: {exc}") from None
    if not isinstance(data, list):
        raise UserError(f"--dataset-path: '{path}' must hold a JSON list of conversations")
    return [entry for entry in data if isinstance(entry, dict) and isinstance(entry.get("conversations"), list)
            and len(entry["conversations"]) >= 2]


def _turn_text(entry: dict[str, Any], turn: int) -> str:
    value = entry["conversations"][turn]
    text = value.get("value") if isinstance(value, dict) else None
    if not isinstance(text, str):
        raise UserError(f"--dataset-path: a conversation turn has no text 'value': {str(value)[:80]!r}")
    return text


def load_tokenizer(directory: Path) -> Any:
    """A local HF tokenizer directory (tokenizer.json / tokenizer_config.json), loaded without any download."""
    if not Path(directory).is_dir():
        raise UserError(f"--tokenizer: '{directory}' is not a directory with a tokenizer (tokenizer.json)")
    try:
        from transformers import AutoTokenizer  # lazy: only the ShareGPT dataset and --tokenizer need it
    except ImportError:
        raise UserError("--tokenizer: needs the transformers package (pip install transformers)") from None
    try:
        return AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as exc:
        raise UserError(f"--tokenizer: cannot load a tokenizer from '{directory}': {str(exc).splitlines()[0]}") from None


def num_special_tokens(spec: ModelSpec, tokenizer: Any | None) -> int:
    """Special tokens the server adds to a prompt: the tokenizer's count, or 1 (a BOS) for Llama-family
    architectures and 0 for others when no tokenizer is given (an assumption: `--tokenizer` makes it exact)."""
    if tokenizer is not None:
        return int(tokenizer.num_special_tokens_to_add())
    return int(spec.architecture in _BOS_ARCHITECTURES)


# ---- the send schedule ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RampUp:
    """vLLM's `--ramp-up-strategy` with `--ramp-up-start-rps` and `--ramp-up-end-rps`."""

    strategy: str
    start_rps: float
    end_rps: float

    def __post_init__(self) -> None:
        if self.strategy not in RAMP_UP_STRATEGIES:
            raise UserError(f"--ramp-up-strategy: '{self.strategy}' is not allowed; allowed: "
                            f"{', '.join(RAMP_UP_STRATEGIES)}")
        if not 0 < self.start_rps <= self.end_rps or math.isinf(self.end_rps):
            # vLLM refuses start > end and a negative rate, and its get_request fails on a first rate of 0.
            raise UserError(f"--ramp-up-start-rps/--ramp-up-end-rps: must be 0 < start <= end < inf, got "
                            f"{self.start_rps} and {self.end_rps}")

    def rates(self, n: int) -> np.ndarray:
        progress = np.arange(n) / max(n - 1, 1)
        if self.strategy == "linear":
            return self.start_rps + (self.end_rps - self.start_rps) * progress
        return self.start_rps * (self.end_rps / self.start_rps) ** progress


def send_schedule(n: int, request_rate: float, burstiness: float = 1.0, ramp_up: RampUp | None = None,
                  seed: int = DEFAULT_SEED) -> np.ndarray:
    """When each of n requests comes due, in seconds after the benchmark's start (vLLM's `get_request`)."""
    if n == 0:
        return np.zeros(0)
    rates = ramp_up.rates(n) if ramp_up is not None else np.full(n, request_rate)
    if ramp_up is None and math.isinf(request_rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = 1.0 / rates
    else:
        # vLLM: np.random.seed(seed), then np.random.gamma(shape, scale) per request from the legacy global
        # generator; a RandomState of the same seed draws the same numbers (one by one or as an array).
        gaps = np.random.RandomState(seed).gamma(shape=burstiness, scale=1.0 / (rates * burstiness))
    due = np.cumsum(gaps)
    if ramp_up is None and due[-1] != 0:
        due = due * ((n / request_rate) / due[-1])  # the last request is due at exactly N / rate
    return due


# ---- the load ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchRequests:
    """The simulator's input for one benchmark run: `specs` in send order, vLLM's client-side prompt lengths."""

    workload: Workload
    specs: list[RequestSpec]
    client_input_lens: np.ndarray  # what vLLM's input_lens / total_input_tokens count
    num_special_tokens: int  # added by the server to each prompt of the random dataset (0 for ShareGPT)


@dataclass(frozen=True)
class BenchLoad:
    """The load of one `vllm bench serve` run: what it sends and when (see the module docstring)."""

    dataset: RandomDataset | ShareGPTDataset | None = None  # None: `lengths` below
    num_prompts: int = DEFAULT_NUM_PROMPTS
    request_rate: float = math.inf
    burstiness: float = 1.0
    ramp_up: RampUp | None = None
    max_concurrency: int | None = None
    seed: int = DEFAULT_SEED
    ignore_eos: bool = False
    num_warmups: int = 0
    # Replayed per-request lengths (client-side prompt lengths, output lengths): a saved result's input_lens and
    # output_lens. They replace the dataset's draws; the dataset still says how the server counts the prompt.
    lengths: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # Replayed due times (s after the start): a saved result's start_times minus queue_times.
    due_s: tuple[float, ...] | None = None
    tokenizer_dir: Path | None = None
    name: str = field(default="")

    def __post_init__(self) -> None:
        if isinstance(self.num_prompts, bool) or not isinstance(self.num_prompts, int) or \
                not 1 <= self.num_prompts <= MAX_NUM_REQUESTS:
            raise UserError(f"--num-prompts: must be a positive integer up to {MAX_NUM_REQUESTS:,}, got "
                            f"{self.num_prompts!r}")
        check_seed(self.seed)
        if not self.request_rate > 0:
            raise UserError(f"--request-rate: must be a positive number or 'inf', got {self.request_rate!r}")
        if not self.burstiness > 0:
            raise UserError(f"--burstiness: must be a positive number (1 = Poisson) or inf, got {self.burstiness!r}")
        if self.ramp_up is not None and not math.isinf(self.request_rate):
            raise UserError("--ramp-up-strategy: the ramp-up sets the rate; drop --request-rate (as vLLM requires)")
        if self.max_concurrency is not None and (isinstance(self.max_concurrency, bool) or self.max_concurrency < 1):
            raise UserError(f"--max-concurrency: must be a positive integer, got {self.max_concurrency!r}")
        if self.num_warmups < 0:
            raise UserError(f"--num-warmups: must be an integer >= 0, got {self.num_warmups}")
        if self.dataset is None and self.lengths is None:
            raise UserError("--dataset-name: give a dataset (allowed: random, sharegpt)")

    def build(self, spec: ModelSpec) -> BenchRequests:
        """The requests vLLM's client would send, with the prompts the server would see."""
        tokenizer = load_tokenizer(self.tokenizer_dir) if self.tokenizer_dir is not None else None
        is_random = isinstance(self.dataset, RandomDataset) or self.dataset is None
        special = num_special_tokens(spec, tokenizer) if is_random else 0
        if self.lengths is not None:
            inputs, outputs = (np.array(v, dtype=np.int64) for v in self.lengths)
        elif isinstance(self.dataset, RandomDataset):
            inputs, outputs = self.dataset.lengths(self.num_prompts, self.seed, special)
        else:
            assert isinstance(self.dataset, ShareGPTDataset)
            inputs, outputs = self.dataset.lengths(self.num_prompts, self.seed,
                                                   tokenizer or load_tokenizer(self.dataset.tokenizer_dir))
        n = len(inputs)
        due = (np.array(self.due_s, dtype=float) if self.due_s is not None
               else send_schedule(n, self.request_rate, self.burstiness, self.ramp_up, self.seed))
        assert len(due) == n and len(outputs) == n
        prefix_len = self.dataset.prefix_len if isinstance(self.dataset, RandomDataset) else 0
        shared = SharedPrefix(num_groups=1, prefix_tokens=prefix_len + special) if prefix_len > 0 else None
        order = np.argsort(due, kind="stable")  # due times are sorted unless replayed from a file
        specs = [RequestSpec(f"r{i}", float(due[i]), int(inputs[i]) + special, int(outputs[i]),
                             prefix_group=0 if shared is not None else None) for i in order]
        workload = Workload(name=self.name or self.describe_dataset(), seed=self.seed, num_requests=n,
                            arrival=ArrivalProcess("gamma" if self.burstiness != 1 else "poisson",
                                                   rate_per_s=self.request_rate),
                            prompt_tokens=LengthDistribution("fixed", value=1),
                            output_tokens=LengthDistribution("fixed", value=1), shared_prefix=shared,
                            description="vllm bench serve load (specs given explicitly)")
        return BenchRequests(workload, specs, inputs[order], special)

    def describe_dataset(self) -> str:
        if self.lengths is not None or self.dataset is None:  # (the checks above: one of the two is set)
            return "replayed lengths"
        return f"vllm-{self.dataset.describe()['dataset_name']}"

    def offered_load(self) -> dict[str, object]:
        """The load in vLLM's terms, for every output."""
        load: dict[str, object] = {
            "mirrors": f"vllm bench serve {VLLM_BENCH_VERSION}",
            **(self.dataset.describe() if self.dataset is not None else {}),
            "num_prompts": self.num_prompts,
            "request_rate": "inf" if math.isinf(self.request_rate) else self.request_rate,
            "burstiness": self.burstiness,
            "max_concurrency": self.max_concurrency,
            "seed": self.seed,
            # What vLLM sends (it forces ignore_eos for the random dataset); the simulator runs every output to its
            # length either way.
            "ignore_eos": self.ignore_eos or isinstance(self.dataset, RandomDataset),
            "output_lengths": "generated in full (the simulator samples no EOS)",
            "num_warmups": self.num_warmups,
        }
        if self.ramp_up is not None:
            load.update(ramp_up_strategy=self.ramp_up.strategy, ramp_up_start_rps=self.ramp_up.start_rps,
                        ramp_up_end_rps=self.ramp_up.end_rps)
        if self.lengths is not None:
            load["lengths"] = "replayed from the result file (input_lens, output_lens)"
        if self.due_s is not None:
            load["send_schedule"] = "replayed from the result file (start_times - queue_times)"
        return load


def _ratio_text(dataset: RandomDataset) -> object:
    if dataset.input_range_ratio == dataset.output_range_ratio:
        return dataset.input_range_ratio
    return {"input": dataset.input_range_ratio, "output": dataset.output_range_ratio}


# ---- flags ---------------------------------------------------------------------------------------------------


def add_bench_args(parser: argparse.ArgumentParser) -> None:
    """vLLM's load flags (`vllm bench serve`), next to `add_workload_args`' --num-requests (= --num-prompts),
    --request-rate, --input-len, --output-len and --seed."""
    group = parser.add_argument_group(f"vllm bench serve load (mirrors vLLM {VLLM_BENCH_VERSION})")
    group.add_argument("--dataset-name", default=None, metavar="NAME",
                       help="random or sharegpt: the request set of vllm bench serve (replaces --workload)")
    group.add_argument("--dataset-path", type=Path, default=None, metavar="FILE", help="ShareGPT JSON file")
    group.add_argument("--tokenizer", type=Path, default=None, metavar="DIR",
                       help="local HF tokenizer directory (ShareGPT: needed; random: exact special-token count)")
    group.add_argument("--random-input-len", type=int, default=None, metavar="TOKENS",
                       help=f"random dataset prompt length (default {DEFAULT_RANDOM_INPUT_LEN})")
    group.add_argument("--random-output-len", type=int, default=None, metavar="TOKENS",
                       help=f"random dataset output length (default {DEFAULT_RANDOM_OUTPUT_LEN})")
    group.add_argument("--random-range-ratio", default=None, metavar="R",
                       help="lengths uniform in [L(1-R), L(1+R)], 0 <= R < 1, or a JSON dict of 'input' and 'output'")
    group.add_argument("--random-prefix-len", type=int, default=None, metavar="TOKENS",
                       help="fixed random prefix shared by every prompt of the random dataset (default 0)")
    group.add_argument("--sharegpt-output-len", type=int, default=None, metavar="TOKENS",
                       help="ShareGPT output length instead of the completion's")
    group.add_argument("--burstiness", type=float, default=None, metavar="B",
                       help="gamma shape of the gaps between requests (1 = Poisson; inf = constant gaps)")
    group.add_argument("--ramp-up-strategy", default=None, metavar="linear|exponential",
                       help="ramp the rate from --ramp-up-start-rps to --ramp-up-end-rps over the run")
    group.add_argument("--ramp-up-start-rps", type=float, default=None, metavar="RPS")
    group.add_argument("--ramp-up-end-rps", type=float, default=None, metavar="RPS")
    group.add_argument("--max-concurrency", type=int, default=None, metavar="N",
                       help="closed loop: at most N requests in flight; a due request waits for a slot and is sent "
                            "when one finishes (default: no cap)")
    group.add_argument("--ignore-eos", action="store_true",
                       help="recorded; the simulator always generates each output to its length, as with this flag")
    group.add_argument("--num-warmups", type=int, default=0, metavar="N",
                       help="recorded; vLLM's warm-up requests precede the measured run and are not simulated")


def is_bench_mode(args: argparse.Namespace) -> bool:
    """Whether the flags ask for vLLM's client (its datasets or its send schedule)."""
    return (args.dataset_name is not None or args.burstiness is not None or args.ramp_up_strategy is not None)


def parse_range_ratio(text: str) -> tuple[float, float]:
    """'0.1' or '{"input": 0.1, "output": 0.5}' -> (input ratio, output ratio), as vLLM's _parse_range_ratio."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        value = text
    try:
        if isinstance(value, dict):
            return float(value["input"]), float(value["output"])
        return float(value), float(value)
    except (KeyError, TypeError, ValueError):
        raise UserError(f"--random-range-ratio: must be a number in [0, 1) or a JSON dict with 'input' and "
                        f"'output', got {text!r}") from None


def bench_load_from_args(args: argparse.Namespace, lengths: tuple[Sequence[int], Sequence[int]] | None = None,
                         due_s: Sequence[float] | None = None, defaults: dict[str, Any] | None = None) -> BenchLoad:
    """The BenchLoad the flags describe. `defaults` (a saved result's settings) fill flags the user left unset."""
    defaults = defaults or {}
    dataset_name = args.dataset_name or defaults.get("dataset_name") or "random"
    if dataset_name not in DATASET_NAMES:
        raise UserError(f"--dataset-name: '{dataset_name}' is not simulated; allowed: {', '.join(DATASET_NAMES)}")
    if getattr(args, "workload", None) is not None:
        raise UserError("--workload: cannot be combined with vllm bench serve's --dataset-name, --burstiness or "
                        "--ramp-up-strategy; give one or the other")
    input_len = _first(args.input_len, args.random_input_len, DEFAULT_RANDOM_INPUT_LEN)  # --input-len maps as vLLM
    output_len = _first(args.output_len, args.random_output_len, DEFAULT_RANDOM_OUTPUT_LEN)
    dataset: RandomDataset | ShareGPTDataset
    other = (("sharegpt_output_len",) if dataset_name == "random"
             else ("random_input_len", "random_output_len", "random_range_ratio", "random_prefix_len"))
    for name in other:  # vLLM ignores another dataset's flags; a flag that changes nothing is refused here
        if getattr(args, name) is not None:
            raise UserError(f"--{name.replace('_', '-')}: not a flag of --dataset-name {dataset_name}")
    if dataset_name == "random":
        if args.dataset_path is not None:
            raise UserError("--dataset-path: the random dataset takes no file (as in vLLM); use --dataset-name "
                            "sharegpt")
        in_ratio, out_ratio = parse_range_ratio(args.random_range_ratio or "0.0")
        dataset = RandomDataset(input_len, output_len, in_ratio, out_ratio, args.random_prefix_len or 0)
    else:
        if args.dataset_path is None and lengths is None:
            raise UserError("--dataset-path: --dataset-name sharegpt needs the ShareGPT JSON file: give --dataset-path "
                            "FILE (no default length table is shipped: no public source of its lengths was found)")
        if args.tokenizer is None and lengths is None:
            raise UserError("--tokenizer: --dataset-name sharegpt needs a local tokenizer directory to count tokens")
        sharegpt_output_len = _first(args.output_len, args.sharegpt_output_len, None)
        if sharegpt_output_len is not None and sharegpt_output_len < 1:
            raise UserError(f"--sharegpt-output-len: must be a positive integer, got {sharegpt_output_len}")
        dataset = ShareGPTDataset(args.dataset_path or Path(), args.tokenizer or Path(), sharegpt_output_len)
    ramp_up = None
    strategy = args.ramp_up_strategy or defaults.get("ramp_up_strategy")
    if strategy is None and (args.ramp_up_start_rps is not None or args.ramp_up_end_rps is not None):
        raise UserError("--ramp-up-start-rps/--ramp-up-end-rps: only with --ramp-up-strategy linear|exponential")
    if strategy is not None:
        start = _first(args.ramp_up_start_rps, defaults.get("ramp_up_start_rps"), None)
        end = _first(args.ramp_up_end_rps, defaults.get("ramp_up_end_rps"), None)
        if start is None or end is None:
            raise UserError("--ramp-up-strategy: give both --ramp-up-start-rps and --ramp-up-end-rps")
        ramp_up = RampUp(strategy, float(start), float(end))
    rate_text = _first(args.request_rate, defaults.get("request_rate"), "inf")
    return BenchLoad(
        dataset=dataset,
        num_prompts=_first(args.num_requests, defaults.get("num_prompts"), DEFAULT_NUM_PROMPTS),
        request_rate=parse_rate(str(rate_text)),
        burstiness=float(_first(args.burstiness, defaults.get("burstiness"), 1.0)),
        ramp_up=ramp_up,
        max_concurrency=_first(args.max_concurrency, defaults.get("max_concurrency"), None),
        seed=_first(args.seed, None, DEFAULT_SEED),
        ignore_eos=args.ignore_eos,
        num_warmups=args.num_warmups,
        lengths=None if lengths is None else (tuple(int(v) for v in lengths[0]), tuple(int(v) for v in lengths[1])),
        due_s=None if due_s is None else tuple(float(t) for t in due_s),
        tokenizer_dir=args.tokenizer,
    )


def _first(*values: Any) -> Any:
    for value in values[:-1]:
        if value is not None:
            return value
    return values[-1]
