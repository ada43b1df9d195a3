"""What an executor unpickles first: a check that tidemark and its dependencies are importable
there, failing with what is missing and how to ship it.

Spark pickles the data source, its readers and writers in the driver and unpickles them in the
executors' Python workers. Pickled as usual, an executor without tidemark (or confluent-kafka,
which tidemark's modules import) fails inside pickle.loads with a bare "No module named ...".
Instead each is pickled as a call to a function carried by value (it is defined inside another,
so cloudpickle cannot pickle it by reference), which imports the class first and says what to
do when that fails; the object's own state travels as pickled bytes, opened only after that.
"""

from __future__ import annotations

from typing import Any

DEPENDENCIES = ("confluent_kafka", "pyarrow")
HINTS = {
    "tidemark": "ship it with spark-submit --py-files tidemark.zip (python -m tidemark.spark.package "
                "tidemark.zip builds it) or install tidemark in the executors' Python",
    "confluent_kafka": "install confluent-kafka in the executors' Python (or ship a packed environment "
                       "with spark.archives)",
    "pyarrow": "install pyarrow in the executors' Python (Spark's Python data sources need it)",
}
MESSAGE = "{what} cannot run in this Python ({python}): module {missing!r} is not importable; {hint}"


def require_dependencies() -> None:
    """Fail with MESSAGE when a package the Spark modules import is missing (imported by the
    package, so it runs first wherever Spark imports a class of ours by reference)."""
    import importlib.util
    import sys

    for name in DEPENDENCIES:
        if importlib.util.find_spec(name) is None:
            raise ImportError(MESSAGE.format(what="tidemark.spark", python=sys.executable, missing=name,
                                             hint=HINTS[name]), name=name)


def _restorer():
    def restore_on_executor(module: str, name: str, state: bytes, hints: dict, message: str) -> Any:
        import importlib
        import pickle
        import sys

        try:
            cls = getattr(importlib.import_module(module), name)
        except ImportError as exc:
            missing = (exc.name or "").split(".")[0]
            hint = hints.get(missing, f"install {missing} in the executors' Python")
            raise ImportError(message.format(what=f"{module}.{name}", python=sys.executable, missing=missing,
                                             hint=hint), name=exc.name) from exc
        restored = cls.__new__(cls)
        restored.__dict__.update(pickle.loads(state))
        return restored

    return restore_on_executor


class ShippedToExecutors:
    """Mixin: instances unpickle through the import check above."""

    def __reduce__(self):
        from pyspark import cloudpickle

        cls = type(self)
        return _restorer(), (cls.__module__, cls.__qualname__, cloudpickle.dumps(self.__getstate__()), HINTS,
                               MESSAGE)

    def __getstate__(self) -> dict:
        return dict(self.__dict__)
