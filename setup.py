"""The optional C extension engine.core._kvcore (the compiled block pool and KV cache manager,
engine/core/compiled_kv.py); everything else is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found, the build warns and installs without it, and
engine.core runs on its Python classes. tests/test_compiled_kv.py checks that a built extension is the one in use.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "engine.core._kvcore",
            sources=["engine/core/_kvcore.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
