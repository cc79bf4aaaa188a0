"""Workloads: when requests arrive and how long their prompts and outputs are.

A workload is a YAML file (shipped ids live in `workloads/`), a CSV trace to replay, or the fixed-length
synthetic workload of `--input-len/--output-len`. `simulate` and `measure` read the same flags through
`roofline.sim.workload_args` (`add_workload_args(parser)`, `workload_from_args(args)`), and see the same requests:
same arrival times, same lengths, same token ids (from `engine.core.token_ids`), for the same seed.

    wl = load_workload("sharegpt-chat")                   # an id or a path (.yaml, or .csv to replay)
    specs = sample_requests(wl)                           # list[RequestSpec], seeded by wl.seed
    requests = build_requests(wl, specs, vocab_size=128256, eos_token_id=128001)  # engine.core Requests

YAML schema (every key checked; unknown keys are errors):

    name: sharegpt-chat            # free text
    description: ...               # free text, optional
    seed: 0                        # seeds every random stream of the workload
    num_requests: 500              # how many requests (`--num-requests` overrides)
    arrival:                       # omitted with `trace:`
      process: poisson             # poisson | gamma | constant | burst | all_at_once
      rate_per_s: 8                # mean request rate, a number or inf (`--request-rate` overrides)
      cv: 2.0                      # gamma only: coefficient of variation of the gaps between arrivals
      burst_size: 16               # burst only: requests that arrive together; bursts come at rate_per_s / burst_size
    prompt_tokens: <length>        # omitted with `trace:`
    output_tokens: <length>        # omitted with `trace:`
    shared_prefix:                 # optional: requests start with one of a few shared prefixes (system prompts)
      num_groups: 4                # distinct prefixes; request i uses group i mod num_groups
      prefix_tokens: 1024          # length of each prefix, counted inside prompt_tokens
    sessions:                      # optional: multi-turn conversations
      num_turns: <length>          # turns per conversation
      think_time_s: 20             # mean (exponential) time from one turn's arrival to the next one's
    trace: file.csv                # optional: replay a CSV instead of sampling (path relative to the YAML)

A <length> is a mapping with `distribution` and its parameters, in tokens; `min`/`max` clip every kind:

    {distribution: fixed, value: 512}
    {distribution: uniform, min: 16, max: 1024}                 # integers, both ends included
    {distribution: normal, mean: 512, std: 128, min: 1}
    {distribution: lognormal, mean_log: 6.2, std_log: 0.9, max: 8192}   # log of tokens
    {distribution: empirical, csv: lengths.csv}                 # CSV histogram: min_tokens,max_tokens,count

Multi-turn sessions: turn k+1 of a conversation arrives `think_time` after turn k arrived and its prompt is
turn k's prompt, turn k's output and a new user message of `prompt_tokens` (open loop: the arrival does not
wait for the answer, as in a replayed trace). Conversations start by the arrival process.

CSV traces: `arrival_s,prompt_tokens,output_tokens` (seconds from the start), or a public production trace as
published: Azure's LLM inference traces (`TIMESTAMP,ContextTokens,GeneratedTokens`) or BurstGPT (`Timestamp,Model,
Request tokens,Response tokens,Total tokens,Log Type`); `roofline.sim.trace_csv`. Rows are replayed in arrival
order, without prefix sharing; `--request-rate` rescales time to that mean rate (`roofline.sim.traces.arrange`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.core import request as _request
from engine.core.native import COMPILED, _kvcore
from engine.core.request import Request, SamplingParams
from engine.core.token_ids import MultiTurnSession, TokenIdGenerator
from roofline.errors import UserError, check_fields
from roofline.registry import resolve
from roofline.sim.native import COMPILED as COMPILED_SIM
from roofline.sim.native import _simcore
from roofline.yaml_file import read_yaml

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_WORKLOAD = "sharegpt-chat"
ARRIVAL_PROCESSES = ("poisson", "gamma", "constant", "burst", "all_at_once")
DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal", "empirical")
_HISTOGRAM_COLUMNS = ("min_tokens", "max_tokens", "count")
# Bounds beyond which a number in a workload or trace is a mistake, not a workload: no model serves a context
# longer than 10 million tokens (Llama 4 Scout's window, the longest published); a rate above a million requests
# per second, a think time or an arrival beyond a year (3.2e7 s), or more than 100 million requests, describe no
# serving run this simulator can answer for.
MAX_TOKENS = 10_000_000
MAX_RATE_PER_S = 1e6
MAX_TIME_S = 3.2e7
MAX_NUM_REQUESTS = 10_000_000  # (100,000 requests take 1.5 GB: BENCHMARKS.md, simulator speed)
MAX_SEED = 2**32 - 1


# ---- configs -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LengthDistribution:
    """A distribution of token counts; every sample is an integer clipped to [min_tokens, max_tokens]."""

    kind: str
    value: int = 0  # fixed
    mean: float = 0.0  # normal
    std: float = 0.0  # normal
    mean_log: float = 0.0  # lognormal
    std_log: float = 0.0  # lognormal
    histogram: tuple[tuple[int, int, float], ...] = ()  # empirical: (min_tokens, max_tokens, count) per bin
    min_tokens: int = 1
    max_tokens: int | None = None

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n token counts (int64)."""
        if self.kind == "fixed":
            raw = np.full(n, float(self.value))
        elif self.kind == "uniform":
            assert self.max_tokens is not None
            raw = rng.integers(self.min_tokens, self.max_tokens + 1, size=n).astype(float)
        elif self.kind == "normal":
            raw = rng.normal(self.mean, self.std, size=n)
        elif self.kind == "lognormal":
            raw = rng.lognormal(self.mean_log, self.std_log, size=n)
        else:
            raw = self._sample_histogram(rng, n)
        upper = np.inf if self.max_tokens is None else self.max_tokens
        return np.clip(np.rint(raw), self.min_tokens, upper).astype(np.int64)

    def _sample_histogram(self, rng: np.random.Generator, n: int) -> np.ndarray:
        # Pick a bin with probability proportional to its count, then an integer uniformly inside it.
        bins = np.array(self.histogram, dtype=float)
        weights = bins[:, 2] / bins[:, 2].sum()
        index = rng.choice(len(bins), size=n, p=weights)
        return rng.integers(bins[index, 0].astype(np.int64), bins[index, 1].astype(np.int64) + 1).astype(float)

    def mean_tokens(self) -> float:
        """The mean before clipping (for messages and sanity checks)."""
        if self.kind == "fixed":
            return float(self.value)
        if self.kind == "uniform":
            assert self.max_tokens is not None
            return (self.min_tokens + self.max_tokens) / 2
        if self.kind == "normal":
            return self.mean
        if self.kind == "lognormal":
            return math.exp(self.mean_log + self.std_log ** 2 / 2)
        bins = np.array(self.histogram, dtype=float)
        return float(((bins[:, 0] + bins[:, 1]) / 2 * bins[:, 2]).sum() / bins[:, 2].sum())


@dataclass(frozen=True)
class ArrivalProcess:
    """When requests (or conversations) arrive; times start at 0 s."""

    process: str
    rate_per_s: float = math.inf
    cv: float = 1.0  # gamma
    burst_size: int = 1  # burst

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """n non-decreasing arrival times in seconds, the first at 0."""
        if n == 0:
            return np.zeros(0)
        if self.process == "all_at_once" or math.isinf(self.rate_per_s):
            return np.zeros(n)
        mean_gap_s = 1.0 / self.rate_per_s
        if self.process == "poisson":
            gaps = rng.exponential(mean_gap_s, size=n - 1)
        elif self.process == "gamma":
            shape = 1.0 / self.cv ** 2  # CV of a gamma variable is 1/sqrt(shape)
            gaps = rng.gamma(shape, mean_gap_s / shape, size=n - 1)
        elif self.process == "constant":
            gaps = np.full(n - 1, mean_gap_s)
        else:  # burst: every burst_size-th request opens a new burst, one burst interval after the previous one
            index = np.arange(1, n)
            gaps = np.where(index % self.burst_size == 0, mean_gap_s * self.burst_size, 0.0)
        return np.concatenate([[0.0], np.cumsum(gaps)])


@dataclass(frozen=True)
class SharedPrefix:
    num_groups: int
    prefix_tokens: int


@dataclass(frozen=True)
class Sessions:
    num_turns: LengthDistribution
    think_time_s: float


@dataclass(frozen=True)
class Workload:
    """A validated workload. Exactly one of (arrival, prompt_tokens, output_tokens) or trace_path is set."""

    name: str
    seed: int = 0
    num_requests: int = 500
    arrival: ArrivalProcess | None = None
    prompt_tokens: LengthDistribution | None = None
    output_tokens: LengthDistribution | None = None
    shared_prefix: SharedPrefix | None = None
    sessions: Sessions | None = None
    trace_path: Path | None = None
    trace_rate_per_s: float | None = None  # replay a trace rescaled to this mean rate
    # Replay only the trace's requests arriving in [start, end) seconds of its own clock (0 = its first arrival), the
    # window's start then at 0 (`--trace-window`), and/or `trace_speed` times faster (`--trace-speed`).
    trace_window_s: tuple[float, float] | None = None
    trace_speed: float | None = None
    description: str = ""

    @property
    def synthetic(self) -> tuple[ArrivalProcess, LengthDistribution, LengthDistribution]:
        """(arrival, prompt_tokens, output_tokens) of a workload that is not a trace replay."""
        assert self.arrival is not None and self.prompt_tokens is not None and self.output_tokens is not None, (
            f"workload {self.name} replays a trace")
        return self.arrival, self.prompt_tokens, self.output_tokens


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request before it becomes an engine.core Request: what the token-id generator and the simulator need.

    `num_prompt_tokens` counts everything in the prompt: the shared prefix, the history of earlier turns and the
    new message. (Slots, no instance dict: 48 bytes less a spec, 48 MB at 1,000,000 requests.)
    """

    request_id: str
    arrival_s: float
    num_prompt_tokens: int
    num_output_tokens: int
    prefix_group: int | None = None
    session_id: int | None = None
    turn: int = 0
    # A replayed trace's token blocks (`roofline.sim.traces`): the prompt is these blocks' ids in order, each
    # `block_tokens` long, cut at num_prompt_tokens; equal ids are equal blocks, so prefix caching sees the trace's reuse.
    block_ids: tuple[int, ...] | None = None
    block_tokens: int = 0


# ---- YAML parsing ---------------------------------------------------------------------------------------------

_TOP_KEYS = ("name", "description", "seed", "num_requests", "arrival", "prompt_tokens", "output_tokens",
             "shared_prefix", "sessions", "trace")
_DIST_KEYS = {
    "fixed": ("distribution", "value"),
    "uniform": ("distribution", "min", "max"),
    "normal": ("distribution", "mean", "std", "min", "max"),
    "lognormal": ("distribution", "mean_log", "std_log", "min", "max"),
    "empirical": ("distribution", "csv", "min", "max"),
}
_ARRIVAL_KEYS = {
    "poisson": ("process", "rate_per_s"),
    "gamma": ("process", "rate_per_s", "cv"),
    "constant": ("process", "rate_per_s"),
    "burst": ("process", "rate_per_s", "burst_size"),
    "all_at_once": ("process",),
}


def _number(section: dict[str, Any], key: str, where: str, lo: float = 0.0, allow_inf: bool = False,
            positive: bool = False, hi: float = math.inf) -> float:
    """A finite number in [lo, hi] (> lo with `positive`), or inf where `allow_inf`."""
    value = section[key]
    if isinstance(value, str) and allow_inf and value.strip().lower() in ("inf", "infinity"):
        return math.inf
    bound = f"> {lo:g}" if positive else f">= {lo:g}"
    allowed = bound + (f" and <= {hi:g}" if math.isfinite(hi) else "") + (" or inf" if allow_inf else "")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise UserError(f"{where}.{key}: must be a number {allowed}, got {value!r}")
    if value < lo or (positive and value <= 0) or (math.isinf(value) and not allow_inf) \
            or (math.isfinite(value) and value > hi):
        raise UserError(f"{where}.{key}: must be {allowed}, got {value!r}")
    return float(value)


def _integer(section: dict[str, Any], key: str, where: str, lo: int = 0, hi: int = MAX_TOKENS) -> int:
    value = section[key]
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise UserError(f"{where}.{key}: must be an integer from {lo} to {hi:,}, got {value!r}")
    return value


def _check_clipping(dist: LengthDistribution, where: str) -> LengthDistribution:
    """A normal or lognormal whose centre lies outside [min, max] would clip most samples to one bound: the
    lengths would then be that bound, not the distribution written. Refused, naming the centre."""
    if dist.kind == "normal":
        centre, what = dist.mean, f"mean {dist.mean:g}"
    elif dist.kind == "lognormal":
        centre = math.exp(dist.mean_log)
        what = f"mean_log {dist.mean_log:g} (a median of {centre:.4g} tokens)"
    else:
        return dist
    upper = dist.max_tokens if dist.max_tokens is not None else MAX_TOKENS
    if centre > upper:
        bound = f"max {upper}" if dist.max_tokens is not None else f"{MAX_TOKENS:,} tokens"
        raise UserError(f"{where}: {what} lies above {bound}, so most lengths would be clipped to {upper}; allowed: "
                        f"a centre within [min, max]" + (f" (mean_log <= {math.log(upper):.3g})"
                                                         if dist.kind == "lognormal" else ""))
    if centre < dist.min_tokens:
        raise UserError(f"{where}: {what} lies below min {dist.min_tokens}, so most lengths would be clipped to "
                        f"{dist.min_tokens}; allowed: a centre within [min, max]")
    return dist


def parse_length(section: Any, where: str, base_dir: Path) -> LengthDistribution:
    """A <length> mapping (see the module docstring) -> LengthDistribution."""
    if not isinstance(section, dict) or "distribution" not in section:
        raise UserError(f"{where}: must be a mapping with 'distribution' ({', '.join(DISTRIBUTIONS)})")
    kind = section["distribution"]
    if kind not in DISTRIBUTIONS:
        raise UserError(f"{where}.distribution: '{kind}' is not allowed; allowed: {', '.join(DISTRIBUTIONS)}")
    required = {"fixed": ("value",), "uniform": ("min", "max"), "normal": ("mean", "std"),
                "lognormal": ("mean_log", "std_log"), "empirical": ("csv",)}[kind]
    check_fields(section, _DIST_KEYS[kind], where, required)
    min_tokens = _integer(section, "min", where, 1) if "min" in section else 1
    max_tokens = _integer(section, "max", where, 1) if "max" in section else None
    if max_tokens is not None and max_tokens < min_tokens:
        raise UserError(f"{where}: max ({max_tokens}) must be >= min ({min_tokens})")
    if kind == "fixed":
        return LengthDistribution("fixed", value=_integer(section, "value", where, 1))
    if kind == "uniform":
        return LengthDistribution("uniform", min_tokens=min_tokens, max_tokens=max_tokens)
    if kind == "normal":
        return _check_clipping(LengthDistribution(
            "normal", mean=_number(section, "mean", where, hi=MAX_TOKENS),
            std=_number(section, "std", where, hi=MAX_TOKENS), min_tokens=min_tokens, max_tokens=max_tokens), where)
    if kind == "lognormal":
        # exp(mean_log + std_log^2 / 2) is the mean: both bounded so that it is a number of tokens.
        return _check_clipping(LengthDistribution(
            "lognormal", mean_log=_number(section, "mean_log", where, lo=-50.0, hi=math.log(MAX_TOKENS)),
            std_log=_number(section, "std_log", where, hi=5.0), min_tokens=min_tokens, max_tokens=max_tokens), where)
    histogram = read_histogram(base_dir / str(section["csv"]), f"{where}.csv")
    return LengthDistribution("empirical", histogram=histogram, min_tokens=min_tokens, max_tokens=max_tokens)


def read_histogram(path: Path, where: str) -> tuple[tuple[int, int, float], ...]:
    """A CSV histogram `min_tokens,max_tokens,count` (bins inclusive at both ends)."""
    plain = _integer_csv(path)
    if plain is not None:  # (the shipped histograms: no pandas imported for them)
        header, rows = plain
        missing = [c for c in _HISTOGRAM_COLUMNS if c not in header]
        picked = [header.index(c) for c in _HISTOGRAM_COLUMNS if c in header]
        table = [tuple(row[i] for i in picked) for row in rows]
    else:
        frame = read_csv_table(path, where)
        missing = [c for c in _HISTOGRAM_COLUMNS if c not in frame.columns]
        table = [] if missing else list(frame[list(_HISTOGRAM_COLUMNS)].itertuples(index=False))
    if missing:
        raise UserError(f"{where}: '{path}' lacks column '{missing[0]}'; expected columns: "
                        f"{','.join(_HISTOGRAM_COLUMNS)}")
    bins = []
    for row_number, row in enumerate(table, start=2):
        lo, hi, count = row
        if not (float(lo).is_integer() and float(hi).is_integer() and 1 <= lo <= hi and count >= 0):
            raise UserError(f"{where}: '{path}' line {row_number}: need integers 1 <= min_tokens <= max_tokens "
                            f"and count >= 0, got {lo},{hi},{count}")
        bins.append((int(lo), int(hi), float(count)))
    if not bins or sum(b[2] for b in bins) <= 0:
        raise UserError(f"{where}: '{path}' has no bin with a positive count")
    return tuple(bins)


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIGITS = re.compile(r"[0-9]{1,18}")  # (below 2^63: an int64 column)


def _integer_csv(path: Path) -> tuple[list[str], list[list[int]]] | None:
    """The header and rows of a CSV file of plain column names and non-negative integers only (ASCII, one row a
    line, every row as wide as the header, no blank line), as `pd.read_csv` reads such a file (int64 columns);
    None for any other file (or none at all), which `read_csv_table` reads, or refuses, with pandas."""
    try:
        lines = [line.removesuffix("\r") for line in path.read_bytes().decode("ascii").split("\n")]
    except (OSError, UnicodeDecodeError):
        return None
    if lines[-1] == "":  # (the last line's end)
        lines.pop()
    if len(lines) < 2:
        return None
    header = lines[0].split(",")
    if len(set(header)) != len(header) or not all(_NAME.fullmatch(name) for name in header):
        return None
    rows = []
    for line in lines[1:]:
        cells = line.split(",")
        if len(cells) != len(header) or not all(_DIGITS.fullmatch(cell) for cell in cells):
            return None
        rows.append([int(cell) for cell in cells])
    return header, rows


def read_csv_table(path: Path, where: str) -> pd.DataFrame:
    import pandas as pd  # (here: a run without a CSV file imports no pandas)

    if not path.is_file():
        raise UserError(f"{where}: no such file '{path}'")
    try:
        return pd.read_csv(path)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise UserError(f"{where}: '{path}' is not a readable CSV: {str(exc).splitlines()[0]}") from None


def parse_arrival(section: Any, where: str) -> ArrivalProcess:
    if not isinstance(section, dict) or "process" not in section:
        raise UserError(f"{where}: must be a mapping with 'process' ({', '.join(ARRIVAL_PROCESSES)})")
    process = section["process"]
    if process not in ARRIVAL_PROCESSES:
        raise UserError(f"{where}.process: '{process}' is not allowed; allowed: {', '.join(ARRIVAL_PROCESSES)}")
    keys = _ARRIVAL_KEYS[process]
    check_fields(section, keys, where, keys)
    if process == "all_at_once":
        return ArrivalProcess("all_at_once")
    rate = _number(section, "rate_per_s", where, allow_inf=True, positive=True, hi=MAX_RATE_PER_S)
    cv = _number(section, "cv", where, positive=True, hi=1000.0) if process == "gamma" else 1.0
    burst_size = _integer(section, "burst_size", where, 1, MAX_NUM_REQUESTS) if process == "burst" else 1
    return ArrivalProcess(process, rate_per_s=rate, cv=cv, burst_size=burst_size)


def parse_workload(data: Any, where: str, base_dir: Path) -> Workload:
    """A workload mapping (parsed YAML) -> a validated Workload; `where` names the file in errors."""
    section = check_fields(data, _TOP_KEYS, where, ("name",))
    seed = _integer(section, "seed", where, 0, MAX_SEED) if "seed" in section else 0
    num_requests = (_integer(section, "num_requests", where, 1, MAX_NUM_REQUESTS) if "num_requests" in section
                    else 500)
    name, description = str(section["name"]), str(section.get("description", ""))
    if "trace" in section:
        clash = [k for k in ("arrival", "prompt_tokens", "output_tokens", "shared_prefix", "sessions") if k in section]
        if clash:
            raise UserError(f"{where}: '{clash[0]}' cannot be combined with 'trace' (a trace sets arrivals and lengths); "
                            f"give one of them")
        trace_path = base_dir / str(section["trace"])
        if not trace_path.is_file():
            raise UserError(f"{where}.trace: no such file '{trace_path}'")
        return Workload(name, seed, num_requests, trace_path=trace_path, description=description)
    for key in ("arrival", "prompt_tokens", "output_tokens"):
        if key not in section:
            raise UserError(f"{where}: missing field '{key}' (or give 'trace')")
    shared_prefix = None
    if "shared_prefix" in section:
        sp = check_fields(section["shared_prefix"], ("num_groups", "prefix_tokens"), f"{where}.shared_prefix",
                         ("num_groups", "prefix_tokens"))
        shared_prefix = SharedPrefix(_integer(sp, "num_groups", f"{where}.shared_prefix", 1),
                                     _integer(sp, "prefix_tokens", f"{where}.shared_prefix", 1))
    sessions = None
    if "sessions" in section:
        ss = check_fields(section["sessions"], ("num_turns", "think_time_s"), f"{where}.sessions",
                         ("num_turns", "think_time_s"))
        sessions = Sessions(parse_length(ss["num_turns"], f"{where}.sessions.num_turns", base_dir),
                            _number(ss, "think_time_s", f"{where}.sessions", hi=MAX_TIME_S))
    return Workload(
        name, seed, num_requests, description=description,
        arrival=parse_arrival(section["arrival"], f"{where}.arrival"),
        prompt_tokens=parse_length(section["prompt_tokens"], f"{where}.prompt_tokens", base_dir),
        output_tokens=parse_length(section["output_tokens"], f"{where}.output_tokens", base_dir),
        shared_prefix=shared_prefix, sessions=sessions)


def load_workload(id_or_path: str | Path) -> Workload:
    """A shipped id, a workload YAML, a CSV trace or a Mooncake JSONL trace -> Workload."""
    path = resolve("workload", id_or_path)
    if path.is_dir():
        raise UserError(f"--workload: '{path}' is a directory; expected a .yaml workload or a .csv trace")
    if path.suffix.lower() in (".csv", ".jsonl"):  # a trace (roofline.sim.traces): CSV, or Mooncake's JSONL
        from roofline.sim.traces import trace_rows
        return Workload(name=path.stem, trace_path=path, num_requests=len(trace_rows(path)))
    return parse_workload(read_yaml(path), str(path), path.parent)


def fixed_workload(input_len: int, output_len: int, num_requests: int, rate_per_s: float, seed: int) -> Workload:
    """The synthetic workload of `--input-len/--output-len`: fixed lengths, Poisson arrivals (or all at once)."""
    return Workload(name=f"fixed-{input_len}-{output_len}", seed=seed, num_requests=num_requests,
                    arrival=ArrivalProcess("poisson", rate_per_s=rate_per_s),
                    prompt_tokens=LengthDistribution("fixed", value=input_len),
                    output_tokens=LengthDistribution("fixed", value=output_len))


# ---- sampling ---------------------------------------------------------------------------------------------------


def sample_requests(workload: Workload) -> list[RequestSpec]:
    """The workload's requests in arrival order (ties keep generation order), reproducible from its seed."""
    if workload.trace_path is not None:
        from roofline.sim.traces import read_trace  # (traces builds on this module's RequestSpec)
        return read_trace(workload.trace_path, workload.num_requests, workload.trace_rate_per_s,
                          workload.trace_window_s, workload.trace_speed)
    # One independent stream per random quantity, so that changing one distribution leaves the others' draws as
    # they were (SeedSequence.spawn: https://numpy.org/doc/stable/reference/random/parallel.html).
    arrival_rng, prompt_rng, output_rng, session_rng = (
        np.random.Generator(np.random.PCG64(s)) for s in np.random.SeedSequence(workload.seed).spawn(4))
    if workload.sessions is None:
        specs, arrivals = _single_turn(workload, arrival_rng, prompt_rng, output_rng)
    else:
        specs = _multi_turn(workload, workload.sessions, arrival_rng, prompt_rng, output_rng, session_rng)
        arrivals = np.array([spec.arrival_s for spec in specs], dtype=np.float64)
    if _all(arrivals[:-1] <= arrivals[1:]):  # in order already (an arrival process's times): as sorted
        return specs
    times = arrivals.tolist()
    order = sorted(range(len(specs)), key=lambda i: (times[i], i))
    return [specs[i] for i in order]


def _single_turn(workload: Workload, arrival_rng: np.random.Generator, prompt_rng: np.random.Generator,
                 output_rng: np.random.Generator) -> tuple[list[RequestSpec], np.ndarray]:
    """The specs, and their arrival times as an array."""
    n = workload.num_requests
    arrival, prompt_tokens, output_tokens = workload.synthetic
    times = np.asarray(arrival.sample(arrival_rng, n), dtype=np.float64)
    # (as Python numbers at once: the same floats and ints as each element's float() / int())
    arrivals = times.tolist()
    prompts = np.asarray(prompt_tokens.sample(prompt_rng, n)).tolist()
    outputs = np.asarray(output_tokens.sample(output_rng, n)).tolist()
    prefix = workload.shared_prefix
    if _SPECS_IN_C:  # the loop below in C (roofline/sim/_simcore.c `make_specs`): the same specs, ~10x faster
        groups = None
        if prefix is not None:
            prompts = np.maximum(np.asarray(prompts, dtype=np.int64), prefix.prefix_tokens + 1).tolist()
            groups = (np.arange(n) % prefix.num_groups).tolist()
        columns = {"arrival_s": arrivals, "num_prompt_tokens": prompts, "num_output_tokens": outputs,
                   "prefix_group": groups}
        values = tuple(columns.get(name, default) for name, default in _SPEC_DEFAULTS[1:])
        return _simcore.make_specs(RequestSpec, n, "r", tuple(name for name, _ in _SPEC_DEFAULTS), values), times
    specs = []
    for i in range(n):
        group = None if prefix is None else i % prefix.num_groups
        # A shared prefix is part of the prompt: a prompt shorter than prefix + 1 is lengthened to it.
        num_prompt = prompts[i] if prefix is None else max(prompts[i], prefix.prefix_tokens + 1)
        specs.append(RequestSpec(f"r{i}", arrivals[i], num_prompt, outputs[i], prefix_group=group))
    return specs, times


# `make_specs`' fields: RequestSpec's in its `__init__`'s order, each with its default (None: none, the first's the id);
# the compiled maker skips `__init__`, so the class has no `__post_init__` to miss.
_SPEC_DEFAULTS = tuple((f.name, None if f.default is MISSING else f.default) for f in fields(RequestSpec))
assert not hasattr(RequestSpec, "__post_init__") and _SPEC_DEFAULTS[0][0] == "request_id"
_SPECS_IN_C = COMPILED_SIM and hasattr(_simcore, "make_specs")  # (a build of this source)
_all = np.logical_and.reduce  # (of a bool array: True where empty)


def _multi_turn(workload: Workload, sessions: Sessions, arrival_rng: np.random.Generator,
                prompt_rng: np.random.Generator, output_rng: np.random.Generator,
                session_rng: np.random.Generator) -> list[RequestSpec]:
    # Draw conversations until num_requests turns exist; the last conversation is cut short.
    n = workload.num_requests
    arrival_process, prompt_tokens, output_tokens = workload.synthetic
    num_turns = sessions.num_turns.sample(session_rng, n)
    num_sessions = int(np.searchsorted(np.cumsum(num_turns), n) + 1)
    starts = arrival_process.sample(arrival_rng, num_sessions)
    messages = prompt_tokens.sample(prompt_rng, n)
    outputs = output_tokens.sample(output_rng, n)
    think = session_rng.exponential(sessions.think_time_s, size=n) if sessions.think_time_s > 0 else np.zeros(n)
    prefix = workload.shared_prefix
    specs: list[RequestSpec] = []
    for session in range(num_sessions):
        arrival = float(starts[session])
        history = 0 if prefix is None else prefix.prefix_tokens
        for turn in range(int(num_turns[session])):
            i = len(specs)
            if i == n:
                break
            if turn > 0:
                arrival += float(think[i])
            num_prompt = history + int(messages[i])
            group = None if prefix is None else session % prefix.num_groups
            specs.append(RequestSpec(f"r{i}", arrival, num_prompt, int(outputs[i]), prefix_group=group,
                                     session_id=session, turn=turn))
            history = num_prompt + int(outputs[i])
    return specs


# ---- engine.core requests ------------------------------------------------------------------------------------


class RequestFactory:
    """Turns RequestSpecs, in arrival order, into engine.core Requests with token ids from
    `engine.core.token_ids` (shared prefixes are the same ids within a group; a later turn of a conversation
    starts with the earlier turn's prompt). Requests carry `ignore_eos`, so output lengths are honoured.
    Ids depend on the order of calls: `simulate` (one at a time, on arrival) and `measure` (all at once) both go
    in spec order and so see the same ids."""

    def __init__(self, vocab_size: int, seed: int = 0, bos_token_id: int | None = None,
                 eos_token_id: int | None = None) -> None:
        self._gen = TokenIdGenerator(vocab_size, seed, reserved_ids=(bos_token_id, eos_token_id))
        self._eos_token_id = eos_token_id
        self._sessions: dict[int, tuple[MultiTurnSession, int, int]] = {}  # id -> (session, prompt, output)
        self._sampling: dict[int, SamplingParams] = {}
        if _IN_C and type(self) is RequestFactory and _request._new_lazy is not None:
            # `lazy` in C (engine/core/_kvcore.c `LazyRequests`: the same requests, one call a request instead of
            # two Python frames); `Request.lazy` given for its errors. (An instance attribute: a subclass, or
            # ROOFLINE_PURE_PYTHON=1, keeps the method below, the reference.)
            self.lazy = _kvcore.LazyRequests(self._sampling, _sampling_of, eos_token_id,  # type: ignore[method-assign]
                                             Request.lazy)

    def __call__(self, spec: RequestSpec, prefix_tokens: int = 0, arrival_s: float | None = None) -> Request:
        """The request of `spec`, arriving at `arrival_s` (default: the spec's arrival time)."""
        sampling = self._sampling.get(spec.num_output_tokens)
        if sampling is None:  # immutable, so requests of one output length share one
            sampling = self._sampling[spec.num_output_tokens] = SamplingParams(max_tokens=spec.num_output_tokens,
                                                                               ignore_eos=True)
        return Request(spec.request_id, self.prompt_ids(spec, prefix_tokens), sampling,
                       arrival_time_s=spec.arrival_s if arrival_s is None else arrival_s,
                       eos_token_id=self._eos_token_id)

    def lazy(self, spec: RequestSpec, prompt_source: Callable[[], np.ndarray], arrival_s: float) -> Request:
        """The request of `spec` arriving at `arrival_s`, its prompt made when the scheduler first reads it
        (`Request.lazy`; `PromptStream.source` makes the same ids as `__call__` in spec order)."""
        sampling = self._sampling.get(spec.num_output_tokens)
        if sampling is None:
            sampling = self._sampling[spec.num_output_tokens] = _sampling_of(spec.num_output_tokens)
        return Request.lazy(spec.request_id, spec.num_prompt_tokens, prompt_source, sampling, arrival_time_s=arrival_s,
                            eos_token_id=self._eos_token_id)

    def prompt_ids(self, spec: RequestSpec, prefix_tokens: int = 0) -> np.ndarray:
        """The prompt of `spec` as an int64 array; `prefix_tokens` is the workload's shared-prefix length (with
        prefix_group)."""
        if spec.block_ids is not None:
            blocks = [self._gen.block_array(b, spec.block_tokens) for b in spec.block_ids]
            return np.concatenate(blocks)[:spec.num_prompt_tokens]
        prefix = None if spec.prefix_group is None else self._gen.prefix_array(spec.prefix_group, prefix_tokens)
        num_prefix = 0 if prefix is None else len(prefix)
        if spec.session_id is None:
            unique = self._gen.unique_array(spec.num_prompt_tokens - num_prefix)
            return unique if prefix is None else np.concatenate((prefix, unique))
        if spec.turn == 0:
            session = self._gen.session(prefix_ids=() if prefix is None else prefix)
            ids = session.next_prompt_array(spec.num_prompt_tokens - num_prefix)
        else:
            session, previous_prompt, previous_output = self._sessions[spec.session_id]
            num_user = spec.num_prompt_tokens - previous_prompt - previous_output
            ids = session.next_prompt_array(num_user, num_previous_output_tokens=previous_output)
        self._sessions[spec.session_id] = (session, spec.num_prompt_tokens, spec.num_output_tokens)
        return ids


class PromptStream:
    """The prompts of `specs`, made in spec order (so the ids are those `RequestFactory.__call__` gives request after
    request) but each only when first asked for: `source(i)` is a callable giving spec i's prompt. Prompts made
    before they are asked for (a later request scheduled first, on another replica) wait here."""

    def __init__(self, factory: RequestFactory, specs: Sequence[RequestSpec], prefix_tokens: int = 0) -> None:
        self._factory, self._specs, self._prefix_tokens = factory, specs, prefix_tokens
        self._next = 0  # the first spec whose prompt is not made yet
        self._made: dict[int, np.ndarray] = {}
        if _IN_C and type(self) is PromptStream and type(factory) is RequestFactory \
                and type(factory._gen) is TokenIdGenerator:
            # `source` in C (engine/core/_kvcore.c `PromptSources`): a spec's next unique prompt taken from the ids
            # drawn ahead as `unique_array` takes it, any other by `_prompt`; the same ids, and the scheduler loads
            # a source of its own kind without `Request._load_prompt`'s Python frames.
            self.source = _kvcore.PromptSources(self, specs, factory._gen, self._made,  # type: ignore[method-assign]
                                                np.ndarray)

    def source(self, index: int) -> Callable[[], np.ndarray]:
        return functools.partial(self._prompt, index)

    def _prompt(self, index: int) -> np.ndarray:
        made = self._made
        while self._next <= index:
            made[self._next] = self._factory.prompt_ids(self._specs[self._next], self._prefix_tokens)
            self._next += 1
        return made.pop(index)


class KeptPrompts:
    """Every prompt of `specs` made at once, in spec order (the ids `PromptStream` gives), read-only and kept:
    `roofline simulate --intervals` runs the same requests on several sampled cost models, which read these instead
    of making each prompt again (`source(i)` as `PromptStream.source`). Holds every prompt's ids (8 bytes a token):
    `kept` keeps at most `MAX_TOKENS` of them (a day's replayed trace can hold hundreds of millions)."""

    MAX_TOKENS = 1 << 24  # 128 MiB of ids

    @classmethod
    def kept(cls, workload: Workload, specs: Sequence[RequestSpec], vocab_size: int, bos_token_id: int | None = None,
             eos_token_id: int | None = None) -> KeptPrompts | None:
        """The prompts kept, or None (each run makes its own: the same ids) over `MAX_TOKENS`."""
        if sum(spec.num_prompt_tokens for spec in specs) > cls.MAX_TOKENS:
            return None
        return cls(workload, specs, vocab_size, bos_token_id, eos_token_id)

    def __init__(self, workload: Workload, specs: Sequence[RequestSpec], vocab_size: int,
                 bos_token_id: int | None = None, eos_token_id: int | None = None) -> None:
        factory = RequestFactory(vocab_size, workload.seed, bos_token_id, eos_token_id)  # as the simulator's
        prefix_tokens = workload.shared_prefix.prefix_tokens if workload.shared_prefix else 0
        self._prompts = [factory.prompt_ids(spec, prefix_tokens) for spec in specs]
        for ids in self._prompts:
            ids.flags.writeable = False  # each request's prompt_array (read-only there too)

    def source(self, index: int) -> Callable[[], np.ndarray]:
        return functools.partial(self._prompts.__getitem__, index)


def _sampling_of(num_output_tokens: int) -> SamplingParams:
    """The sampling of a simulated request of `num_output_tokens` (`ignore_eos`: its output length is honoured)."""
    return SamplingParams(max_tokens=num_output_tokens, ignore_eos=True)


# The requests' and prompts' making in C (`RequestFactory.lazy`, `PromptStream.source`) where the extension is built,
# selected and new enough.
_IN_C = COMPILED and hasattr(_kvcore, "PromptSources")


def build_requests(workload: Workload, specs: Sequence[RequestSpec], vocab_size: int,
                   bos_token_id: int | None = None, eos_token_id: int | None = None) -> list[Request]:
    """All requests at once (for `measure`), seeded by the workload's seed."""
    factory = RequestFactory(vocab_size, workload.seed, bos_token_id, eos_token_id)
    prefix_tokens = workload.shared_prefix.prefix_tokens if workload.shared_prefix else 0
    return [factory(spec, prefix_tokens) for spec in specs]
