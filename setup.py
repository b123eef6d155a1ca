"""Build hook for the optional C accelerators of replication/records.py, eddy/murmur2.py,
eddy/messages.py, state/cache/kv.py, state/window.py, streams/runtime/direct_sink.py and
streams/dsl/change.py.

Everything else lives in pyproject.toml. The extensions are optional: without a compiler the
install still succeeds and each module falls back to its pure-Python code.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "replication._records",
            ["replication/_records.c"],
            depends=["eddy/message_layout.h"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        ),
        Extension(
            "eddy._murmur2",
            ["eddy/_murmur2.c"],
            depends=["eddy/murmur2.h"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "eddy._messages",
            ["eddy/_messages.c"],
            depends=["eddy/message_layout.h"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        ),
        Extension(
            "state.cache._cache",
            ["state/cache/_cache.c"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        ),
        Extension(
            "state._window",
            ["state/_window.c"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
        Extension(
            "streams.dsl._change",
            ["streams/dsl/_change.c"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        ),
        Extension(
            "streams.runtime._sink",
            ["streams/runtime/_sink.c"],
            depends=["eddy/murmur2.h"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        ),
    ]
)
