import sys
from pathlib import Path

try:
    import tidemark  # noqa: F401
except ImportError:  # not installed into the venv: run from the source tree
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
