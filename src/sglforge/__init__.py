"""sglforge: a patch queue on a pinned sglang, ROCm images built from it, and smoke tests."""

__version__ = "0.1.0"
