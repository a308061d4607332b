"""The one compiled part: Kafka's checks of the records in a batch (headrace._record_check).
Optional: without a C compiler the install goes on and the Python reference does the work
(``headrace.record_check``). Everything else is configured in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "headrace._record_check",
            sources=["broker/headrace/_record_check.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
        Extension(
            "headrace.pipeline._send",
            sources=["pipeline/_send.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
