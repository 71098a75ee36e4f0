"""Defaults and vocabularies shared by the smoke modules."""

from __future__ import annotations

DEFAULT_PORT = 30000
DEFAULT_LOAD_TIMEOUT = 1800.0
DEFAULT_ACCEPT_LENGTH = 2.5
DEFAULT_COMMAND = ("python3", "-m", "sglang.launch_server")
PLACEHOLDERS = frozenset({"port", "model"})
LOG_TAIL_LINES = 50
# After a failed request: how long to wait for the engine to report the container's exit.
EXIT_GRACE_S = 2.0
HTTP_FAILED = "request failed: "
ACCELERATORS = ("rocm", "cuda", "none")  # cuda: no GPU preflight (NVIDIA, process runtime)
SEVERITIES = ("fail", "warn")
Value = float | int | str | None


# --------------------------------------------------------------------------- scenarios
