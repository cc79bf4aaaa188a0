"""The sequential stream's draws made ahead on another thread (`TokenIdGenerator._draw_stream`,
`_kvcore.DrawAhead`): the same ids, in the same order, and the same observable generator state as the draws made
on the caller's thread; across draw and batch boundaries, after a fork, and without the extension."""

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest

from engine.core import token_ids
from engine.core.native import COMPILED, _kvcore
from engine.core.token_ids import TokenIdGenerator

_threaded = pytest.mark.skipif(not token_ids.DRAW_AHEAD, reason="engine.core._kvcore not built or not selected")


def _observed(gen: TokenIdGenerator) -> tuple[object, ...]:
    """What a caller can read of a generator's stream: its state, and the ids drawn and not yet handed out."""
    return gen._stream.bit_generator.state, gen._ahead_pos, gen._ahead.tolist()


def _run(sizes: list[int], vocab_size: int = 128_256, reserved: tuple[int, ...] = (128_000, 128_001, 128_009),
         session_every: int = 0, observe_every: int = 1) -> tuple[list[object], list[tuple[object, ...]], TokenIdGenerator]:
    gen = TokenIdGenerator(vocab_size, 11, reserved_ids=reserved)
    ids: list[object] = []
    seen = []
    for i, n in enumerate(sizes):
        if session_every and i % session_every == 0:
            ids.append(gen.session().next_prompt(n + 1))
        else:
            ids.append(gen.unique_array(n).copy())
        if i % observe_every == 0 or i == len(sizes) - 1:
            seen.append(_observed(gen))
    return [x.tolist() if isinstance(x, np.ndarray) else x for x in ids], seen, gen


@_threaded
@pytest.mark.parametrize("vocab_size, reserved", [(128_256, (128_000, 128_001, 128_009)), (3, (1,)), (50_000, ())])
def test_threaded_draws_give_the_sequential_ids_across_draw_and_batch_boundaries(monkeypatch, vocab_size, reserved):
    """Small draws (64 ids) in batches of 3 so that a few hundred calls cross many of both boundaries; calls
    longer than a draw (the ids drawn ahead dropped, drawing ahead begun afresh), empty calls, sessions."""
    monkeypatch.setattr(token_ids, "_STREAM_AHEAD", 64)
    monkeypatch.setattr(token_ids, "_DRAW_AHEAD_CHUNKS", 3)
    rng = np.random.default_rng(2)
    sizes = rng.choice([0, 1, 2, 5, 17, 40, 63, 64, 65, 130, 500], size=400).tolist()
    threaded_ids, threaded_seen, gen = _run(sizes, vocab_size, reserved, session_every=7)
    assert gen._drawer is not None and gen._drawer.pending  # (the next batch being drawn: the thread was used)
    monkeypatch.setattr(token_ids, "DRAW_AHEAD", False)
    ids, seen, plain = _run(sizes, vocab_size, reserved, session_every=7)
    assert plain._drawer is None
    assert threaded_ids == ids
    assert threaded_seen == seen


@_threaded
def test_threaded_draws_at_the_default_sizes():
    """The defaults (65,536-id draws, 16 a batch): ~2,340-id prompts over two batches, and a 200,000-id call."""
    sizes = [2340] * 900 + [200_000] + [2340] * 30
    threaded_ids, threaded_seen, _ = _run(sizes, observe_every=97)
    token_ids.DRAW_AHEAD = False
    try:
        ids, seen, _ = _run(sizes, observe_every=97)
    finally:
        token_ids.DRAW_AHEAD = True
    assert threaded_ids == ids
    assert threaded_seen == seen


@_threaded
def test_a_forked_child_continues_the_sequence(monkeypatch):
    """`os.fork` joins the pending draw first (`os.register_at_fork`): no draw's thread is running at the fork,
    and the child hands out the same ids as the parent would."""
    monkeypatch.setattr(token_ids, "_STREAM_AHEAD", 256)
    monkeypatch.setattr(token_ids, "_DRAW_AHEAD_CHUNKS", 4)
    sizes = [100] * 30
    monkeypatch.setattr(token_ids, "DRAW_AHEAD", False)
    expected, _, _ = _run(sizes)
    monkeypatch.setattr(token_ids, "DRAW_AHEAD", True)
    gen = TokenIdGenerator(128_256, 11, reserved_ids=(128_000, 128_001, 128_009))
    head = [gen.unique(n) for n in sizes[:10]]
    assert head == expected[:10] and gen._drawer.running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the rest of the ids
        try:
            os.close(read)
            ok = gen._drawer.pending and not gen._drawer.running and [gen.unique(n) for n in sizes[10:]] == expected[10:]
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    assert gen._drawer.pending and not gen._drawer.running  # (joined before the fork, its result kept)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        answer = f.read()
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert [gen.unique(n) for n in sizes[10:]] == expected[10:]  # (and the parent goes on as before)


@_threaded
def test_a_draw_whose_thread_is_in_another_process_is_not_read():
    """A child made by a fork that skips Python's hooks (libc's fork) while a draw runs: `join` gives None (the
    ids in its array are the parent's thread's, not to be read) and the generator draws them itself."""
    drawer = _kvcore.DrawAhead()
    outs = [np.empty(1 << 20, dtype=np.int64) for _ in range(4)]
    state = np.random.default_rng(5).bit_generator.state
    drawer.start(state["state"]["state"], state["state"]["inc"], 0, 0, 1000, [], outs)
    libc = ctypes.CDLL(None)
    pid = libc.fork()
    if pid == 0:
        os._exit(0 if drawer.join() is None and not drawer.pending else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    after = drawer.join()
    assert len(after) == 4
    ref = np.random.default_rng(5)
    np.testing.assert_array_equal(np.concatenate(outs), ref.integers(0, 1000, size=1 << 22))
    assert after[-1][0] == ref.bit_generator.state["state"]["state"]


@_threaded
def test_no_draw_thread_is_left_running():
    """`join_draws` (run at exit and before a fork) leaves no draw's thread (only those numpy's BLAS had before);
    a generator dropped with its draw pending joins it."""
    probe = ("import os, numpy as np\n"
             "from engine.core import token_ids\n"
             "from engine.core.native import _kvcore\n"
             "threads = lambda: len(os.listdir('/proc/self/task'))\n"
             "before = threads()\n"
             "gen = token_ids.TokenIdGenerator(128256, 0)\n"
             "gen.unique(10)\n"
             "assert gen._drawer.running\n"
             "_kvcore.join_draws()\n"
             "assert threads() == before and not gen._drawer.running\n"
             "assert gen._drawer.pending  # (joined, its result kept)\n"
             "ids = gen.unique(70000)\n"
             "assert gen._drawer.running\n"
             "del gen\n"
             "assert threads() == before\n"
             "print('ok')\n")
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_without_the_extension_ids_are_drawn_on_the_callers_thread():
    """ROOFLINE_PURE_PYTHON=1: no thread, numpy's draw, the same ids as the compiled, threaded path."""
    probe = ("from engine.core import token_ids\n"
             "gen = token_ids.TokenIdGenerator(128256, 11, reserved_ids=(128000, 128001, 128009))\n"
             "ids = [gen.unique(n)[:3] + gen.unique(n)[-3:] for n in (2340, 70000, 65536, 5, 2340)]\n"
             "assert not token_ids.DRAW_AHEAD and gen._drawer is None\n"
             "print(ids)\n")
    env = dict(os.environ, ROOFLINE_PURE_PYTHON="1")
    pure = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, env=env)
    gen = TokenIdGenerator(128_256, 11, reserved_ids=(128_000, 128_001, 128_009))
    ids = [gen.unique(n)[:3] + gen.unique(n)[-3:] for n in (2340, 70000, 65536, 5, 2340)]
    assert pure.stdout.strip() == str(ids)
    assert (gen._drawer is not None) == (COMPILED and token_ids.DRAW_AHEAD)


@_threaded
def test_the_draw_thread_takes_no_signal():
    """The draw's thread blocks every signal (a Ctrl-C goes to the interpreter's thread, which handles it)."""
    if not os.path.isdir("/proc/self/task"):
        pytest.skip("no /proc")
    before = set(os.listdir("/proc/self/task"))
    drawer = _kvcore.DrawAhead()
    outs = [np.empty(1 << 22, dtype=np.int64) for _ in range(8)]  # (~0.1 s of draws: the thread is there to read)
    state = np.random.default_rng(5).bit_generator.state
    drawer.start(state["state"]["state"], state["state"]["inc"], 0, 0, 1000, [], outs)
    masks = []
    for tid in set(os.listdir("/proc/self/task")) - before:
        try:
            with open(f"/proc/self/task/{tid}/status") as f:
                masks += [line.split()[1] for line in f if line.startswith("SigBlk:")]
        except FileNotFoundError:  # (ended meanwhile)
            pass
    assert drawer.join() is not None
    assert masks, "the draw's thread ended before it was read"
    # SIGKILL and SIGSTOP, and glibc's own 32 and 33 (SIGCANCEL, SIGSETXID: its pthread_sigmask keeps them out)
    unblockable = sum(1 << (sig - 1) for sig in (9, 19, 32, 33))
    assert all(int(mask, 16) | unblockable == (1 << 64) - 1 for mask in masks), masks
