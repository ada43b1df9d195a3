"""Zip the tidemark package for executors that do not have it: `spark-submit --py-files`.

    python -m tidemark.spark.package tidemark.zip

The zip holds the package's Python sources only; its dependencies (confluent-kafka, pyarrow) are
native code and must be installed in the executors' Python, or shipped as a packed environment.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path


def build(target: Path) -> int:
    """Write tidemark's sources to `target` as an importable zip; returns the number of files."""
    import tidemark

    root = Path(tidemark.__file__).resolve().parent
    count = 0
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*.py")):
            archive.write(path, Path("tidemark") / path.relative_to(root))
            count += 1
    return count


def main(argv: list[str]) -> None:
    if len(argv) != 1:
        raise SystemExit("usage: python -m tidemark.spark.package TARGET.zip")
    count = build(Path(argv[0]))
    print(f"{argv[0]}: {count} modules of tidemark")


if __name__ == "__main__":
    main(sys.argv[1:])
