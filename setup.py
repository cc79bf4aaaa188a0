"""The optional C extensions engine.core._kvcore (the compiled block pool and KV cache manager,
engine/core/compiled_kv.py), roofline.cost._stepcost (the step cost's GPU full-attention paths,
roofline/cost/native.py), roofline.sim._simcore (a finished request's runs of stamps, roofline/sim/native.py),
roofline.sim._apicore (the API server's threads, roofline/sim/api_server.py), and
for `--out` engine.core._steprec (the steps' sequences, engine/core/step_record.py) and roofline.sim._csvrows (the
CSV rows, roofline/sim/outputs.py); everything else is in pyproject.toml.

`optional=True`: where no C compiler (or no Python headers) is found, the build warns and installs without it, and
engine.core runs on its Python classes. tests/test_compiled_kv.py checks that a built extension is the one in use.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "engine.core._kvcore",
            sources=["engine/core/_kvcore.c"],
            include_dirs=["engine/core"],  # (_slots.h)
            depends=["engine/core/_slots.h"],
            optional=True,
            extra_compile_args=["-O2"],
            extra_link_args=["-pthread"],  # (`DrawAhead`'s thread; in libc itself since glibc 2.34)
        ),
        Extension(
            "engine.core._steprec",
            sources=["engine/core/_steprec.c"],
            include_dirs=["engine/core"],  # (_slots.h)
            depends=["engine/core/_slots.h"],
            optional=True,
            extra_compile_args=["-O3"],  # (its loops over a step's rows vectorized)
        ),
        # The same floats as the Python code (roofline/cost/_stepcost.c): no fused multiply-adds.
        Extension(
            "roofline.cost._stepcost",
            sources=["roofline/cost/_stepcost.c"],
            include_dirs=["engine/core"],  # (_slots.h)
            depends=["engine/core/_slots.h"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
        # (no fused multiply-adds either: `ordered_sum`'s squared deviations are numpy's floats)
        Extension(
            "roofline.sim._simcore",
            sources=["roofline/sim/_simcore.c"],
            include_dirs=["engine/core"],  # (_slots.h)
            depends=["engine/core/_slots.h"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
        # (no fused multiply-adds: the API server's times are the Python code's floats)
        Extension(
            "roofline.sim._apicore",
            sources=["roofline/sim/_apicore.c"],
            optional=True,
            extra_compile_args=["-O2", "-ffp-contract=off"],
        ),
        Extension(
            "roofline.sim._csvrows",
            sources=["roofline/sim/_csvrows.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
