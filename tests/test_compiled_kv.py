"""The compiled KV cache manager (engine/core/_kvcore.c, engine.core.compiled_kv): built where a C compiler is, in
use when built, and turned off by ROOFLINE_PURE_PYTHON=1. (That it gives the Python classes' results:
tests/test_core_block_pool.py, tests/test_core_properties.py.)"""

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from engine.core import CacheConfig, KVCacheManager, Scheduler, SchedulerConfig, compiled_kv

_PROBE = ("from engine.core import CacheConfig, Scheduler, SchedulerConfig; "
          "s = Scheduler(SchedulerConfig(max_model_len=64), CacheConfig(num_blocks=16, block_size=4)); "
          "print(type(s.kv).__name__)")


def _compiler_found() -> bool:
    """What setup.py's optional build needs: the C compiler Python was built with and Python's headers."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc) is not None and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()


def _kind_in_subprocess(**env: str) -> str:
    run = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return run.stdout.strip()


def test_the_extension_is_built_where_a_compiler_is():
    """In CI (a fresh clone installed by .ci/run) a missing build is a failure; in a checkout installed before the
    extension existed it is only a skip that says how to build it."""
    if not _compiler_found():
        pytest.skip("no C compiler or Python headers here: the package runs on the Python classes")
    if not compiled_kv.BUILT and not os.environ.get("CI"):
        pytest.skip("engine.core._kvcore is not built in this checkout: `pip install -e .` builds it")
    assert compiled_kv.BUILT, "a C compiler is here but engine.core._kvcore was not built (pip install -e . again)"


def test_the_compiled_manager_is_in_use_when_built():
    if not compiled_kv.BUILT:
        pytest.skip("engine.core._kvcore is not built")
    assert _kind_in_subprocess(ROOFLINE_PURE_PYTHON="") == "CompiledKVCacheManager"
    cache = CacheConfig(num_blocks=16, block_size=4)
    if compiled_kv.COMPILED:  # (this process's environment may select the Python classes)
        assert isinstance(Scheduler(SchedulerConfig(max_model_len=64), cache).kv, compiled_kv.CompiledKVCacheManager)


@pytest.mark.parametrize("value", ["1", "TRUE", " yes"])
def test_pure_python_is_selected_by_the_environment(value):
    assert _kind_in_subprocess(ROOFLINE_PURE_PYTHON=value) == "KVCacheManager"


def test_a_false_value_keeps_the_compiled_manager():
    if not compiled_kv.BUILT:
        pytest.skip("engine.core._kvcore is not built")
    assert _kind_in_subprocess(ROOFLINE_PURE_PYTHON="0") == "CompiledKVCacheManager"


def test_a_hybrid_cache_uses_the_python_manager():
    cache = CacheConfig(num_blocks=16, block_size=4, enable_prefix_caching=False, num_sliding_groups=1,
                        sliding_window=8, sliding_admission_cap_blocks=100)
    assert compiled_kv.kv_cache_manager_class(cache) is KVCacheManager
    if compiled_kv.BUILT:
        with pytest.raises(ValueError, match="num_sliding_groups"):
            compiled_kv.CompiledKVCacheManager(cache, 64)
