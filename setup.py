"""Build hook for the optional C accelerators of replication/records.py and eddy/murmur2.py.

Everything else lives in pyproject.toml. The extension is optional: without a compiler the
install still succeeds and records.py falls back to its pure-Python code.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "replication._records",
            ["replication/_records.c"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
        ),
        Extension(
            "eddy._murmur2",
            ["eddy/_murmur2.c"],
            optional=True,
            extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        ),
    ]
)
