"""The simulator's requests and prompts made in C (engine/core/_kvcore.c `LazyRequests`, `PromptSources`;
roofline/sim/workload.py's `RequestFactory.lazy` and `PromptStream.source`, the reference): in use where built, the
Python methods otherwise, and the same requests, ids, generator state and errors in any order of asking."""

import dataclasses

import numpy as np
import pytest

from engine.core import Request, SamplingParams
from engine.core import request as request_module
from engine.core.native import _kvcore
from roofline.sim import workload as workload_module
from roofline.sim.workload import PromptStream, RequestFactory, RequestSpec, load_workload, sample_requests

_built = pytest.mark.skipif(not workload_module._IN_C or request_module._new_lazy is None,
                            reason="engine.core._kvcore is not built or not selected")


def _python(factory: RequestFactory, stream: PromptStream) -> None:
    """Back to the Python methods (the instance attributes that shadow them removed)."""
    factory.__dict__.pop("lazy", None)
    stream.__dict__.pop("source", None)


def _specs() -> list[RequestSpec]:
    """Plain prompts (most of them, of lengths that cross the generator's draws ahead), a shared-prefix group and a
    two-turn session among them, and a replayed trace's blocks."""
    rng = np.random.default_rng(3)
    specs = [RequestSpec(f"r{i}", float(i), int(rng.integers(1, 9000)), int(rng.integers(1, 50)))
             for i in range(60)]
    specs[7] = dataclasses.replace(specs[7], prefix_group=1)
    specs[11] = dataclasses.replace(specs[11], session_id=0, turn=0, num_prompt_tokens=40)
    specs[12] = dataclasses.replace(specs[12], session_id=0, turn=1, num_prompt_tokens=40 + specs[11].num_output_tokens + 9)
    specs[20] = dataclasses.replace(specs[20], block_ids=(3, 4, 3), block_tokens=16, num_prompt_tokens=40)
    return specs


def _make(order: list[int], in_c: bool) -> tuple[list[list[int]], list[Request], tuple]:
    specs = _specs()
    factory = RequestFactory(32000, seed=4, bos_token_id=1, eos_token_id=2)
    stream = PromptStream(factory, specs, prefix_tokens=24)
    assert isinstance(stream.source, _kvcore.PromptSources) and isinstance(factory.lazy, _kvcore.LazyRequests)
    if not in_c:
        _python(factory, stream)
    requests = [factory.lazy(specs[i], stream.source(i), 0.5 * i) for i in range(len(specs))]
    prompts = [[] for _ in specs]
    for i in order:
        prompts[i] = requests[i].prompt_array.tolist()
        again = requests[i].prompt_array  # (kept)
        assert again.flags.writeable is False and again.dtype == np.int64
    gen = factory._gen
    return prompts, requests, (stream._next, sorted(stream._made), gen._ahead_pos, len(gen._ahead),
                               gen._stream.bit_generator.state["state"]["state"])


def _fields(req: Request) -> list:
    return [(name, getattr(req, name)) for name in ("request_id", "num_prompt_tokens", "arrival_time_s",
                                                     "eos_token_id", "priority", "status", "max_num_tokens")] + [
        ("sampling", dataclasses.asdict(req.sampling) if dataclasses.is_dataclass(req.sampling) else
         vars(req.sampling) if hasattr(req.sampling, "__dict__") else repr(req.sampling))]


@_built
@pytest.mark.parametrize("order", ["in order", "reversed", "shuffled"])
def test_requests_and_prompts_made_in_c_are_the_python_ones(order):
    n = len(_specs())
    ask = {"in order": list(range(n)), "reversed": list(range(n))[::-1],
           "shuffled": np.random.default_rng(8).permutation(n).tolist()}[order]
    c_prompts, c_requests, c_state = _make(ask, True)
    py_prompts, py_requests, py_state = _make(ask, False)
    assert c_prompts == py_prompts and c_state == py_state
    assert [_fields(r) for r in c_requests] == [_fields(r) for r in py_requests]
    assert all(len(p) == s.num_prompt_tokens for p, s in zip(c_prompts, _specs()))


@_built
def test_the_scheduler_loads_a_prompt_source_without_python_frames(monkeypatch):
    """The scheduler's first read of a lazy request's prompt (the KV cache manager's block hashes) takes a
    `PromptSource`'s ids in C; `Request._load_prompt` runs only for another source (or a prompt it does not keep as it
    is: the same array handed to the Python checks)."""
    from engine.core import CacheConfig, Scheduler, SchedulerConfig

    loads = []
    original = Request._load_prompt

    def counted(self):
        loads.append(self.request_id)
        return original(self)

    monkeypatch.setattr(Request, "_load_prompt", counted)
    specs = [RequestSpec(f"r{i}", 0.0, 40 + i, 3) for i in range(6)]
    factory = RequestFactory(1000, seed=1)
    stream = PromptStream(factory, specs)
    sched = Scheduler(SchedulerConfig(max_num_seqs=8, max_num_batched_tokens=512, max_model_len=128),
                      CacheConfig(num_blocks=64, block_size=16, enable_prefix_caching=True))
    reqs = [factory.lazy(spec, stream.source(i), 0.0) for i, spec in enumerate(specs)]
    reqs.append(Request.lazy("other", 40, lambda: np.arange(40, dtype=np.int64), SamplingParams(max_tokens=3)))
    for req in reqs:
        sched.add_request(req)
    plan = sched.schedule(0.0)
    assert plan.num_seqs == 7 and loads == ["other"]
    assert [r._prompt_source for r in reqs[:6]] == [None] * 6
    reference = RequestFactory(1000, seed=1)
    assert [r.prompt_array.tolist() for r in reqs[:6]] == [reference.prompt_ids(s).tolist() for s in specs]


@_built
def test_a_source_prompt_not_kept_as_it_is_goes_the_python_way():
    """A `PromptSource` whose stream's `_prompt` gives a list: the Python checks convert it (a read-only int64 array),
    a wrong length is their ValueError."""

    class Stream:
        _next = -1  # (never the next prompt: `_prompt` called)

        def _prompt(self, index):
            return [5, 6, 7] if index == 0 else [5, 6]

    stream = Stream()  # (held weakly by its sources' maker, strongly by each source)
    sources = _kvcore.PromptSources(stream, [], None, {}, np.ndarray)
    ok = Request.lazy("a", 3, sources(0), SamplingParams())
    short = Request.lazy("b", 3, sources(1), SamplingParams())
    del stream, sources
    prompt = ok.prompt_array
    assert prompt.tolist() == [5, 6, 7] and prompt.dtype == np.int64 and not prompt.flags.writeable
    with pytest.raises(ValueError, match="prompt source"):
        _ = short.prompt_array


@_built
def test_lazy_in_c_raises_the_python_error():
    factory = RequestFactory(1000, seed=1)
    spec = RequestSpec("bad", 0.0, 0, 3)
    with pytest.raises(ValueError, match="num_prompt_tokens must be a positive integer"):
        factory.lazy(spec, lambda: np.zeros(0, dtype=np.int64), 0.0)
    same = factory.lazy(RequestSpec("a", 0.0, 4, 3), None, 0.0), factory.lazy(RequestSpec("b", 0.0, 4, 3), None, 0.0)
    assert same[0].sampling is same[1].sampling and same[0].sampling.ignore_eos


def test_without_the_extension_the_python_methods_run(monkeypatch):
    monkeypatch.setattr(workload_module, "_IN_C", False)
    factory = RequestFactory(1000, seed=1)
    stream = PromptStream(factory, [RequestSpec("a", 0.0, 4, 3)])
    assert "lazy" not in vars(factory) and "source" not in vars(stream)
    assert factory.lazy(RequestSpec("a", 0.0, 4, 3), stream.source(0), 0.0).prompt_array.shape == (4,)


@_built
def test_a_workload_run_gives_the_same_requests():
    """The README's workload's first 300 specs, each request made and its prompt read on arrival, C against Python."""
    wl = dataclasses.replace(load_workload("sharegpt-chat"), num_requests=300)
    specs = sample_requests(wl)
    out = []
    for in_c in (True, False):
        factory = RequestFactory(128256, seed=wl.seed)
        stream = PromptStream(factory, specs)
        if not in_c:
            _python(factory, stream)
        reqs = [factory.lazy(s, stream.source(i), s.arrival_s) for i, s in enumerate(specs)]
        out.append([(r.request_id, r.num_prompt_tokens, r.sampling.max_tokens, r.prompt_array.tobytes()) for r in reqs])
    assert out[0] == out[1]


@_built
def test_most_prompts_in_order_are_made_in_c(monkeypatch):
    """In spec order, `PromptStream._prompt` runs only for the prompts C leaves to it: the first (nothing drawn
    ahead yet), the shared prefix, the session's turns, the trace's blocks, and a prompt past the ids drawn ahead."""
    calls = []
    original = PromptStream._prompt

    def counted(self, index):
        calls.append(index)
        return original(self, index)

    monkeypatch.setattr(PromptStream, "_prompt", counted)
    _make(list(range(len(_specs()))), True)
    assert {0, 7, 11, 12, 20} <= set(calls) and len(calls) <= 10


@_built
def test_a_finished_stream_is_freed_by_reference_counting():
    """A PromptStream holds its C `source` and not the reverse (a weak reference): dropped, it is freed at once, its
    specs with it, while a request's source not yet called keeps it as `functools.partial(stream._prompt, i)` did."""
    import gc
    import weakref

    specs = [RequestSpec(f"r{i}", 0.0, 5, 2) for i in range(3)]
    factory = RequestFactory(1000, seed=1)
    stream = PromptStream(factory, specs)
    pending = factory.lazy(specs[2], stream.source(2), 0.0)
    dead = weakref.ref(stream)
    gc.disable()
    try:
        del stream
        assert dead() is not None  # (the pending request's source holds it)
        reference = RequestFactory(1000, seed=1)
        assert pending.prompt_array.tolist() == [reference.prompt_ids(spec) for spec in specs][2].tolist()
        del pending
        assert dead() is None
    finally:
        gc.enable()
