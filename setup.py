"""The compiled part of the package; everything else is declared in pyproject.toml."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("tidemark.records._speedups", ["src/tidemark/records/_speedups.c"],
                             extra_compile_args=["-O2"])])
