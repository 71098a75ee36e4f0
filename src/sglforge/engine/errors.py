"""The engine's own errors: one kind per thing that went wrong with Docker or a registry.

Each kind keeps the exit code the README documents for it, whichever command hit it:
a bad reference is a usage error (2), an unreachable engine 5, a failed build step 6, a
container that cannot start 7, a registry or push failure 8, an image that exists nowhere 9.
Other engine failures (the engine refused an operation) are ``EngineError`` itself (5). A
caller wraps one only where it adds meaning (``build``: "the base image ... was never
published").
"""

from __future__ import annotations

from sglforge.errors import (
    EXIT_BUILD,
    EXIT_ENGINE,
    EXIT_NO_IMAGE,
    EXIT_PUBLISH,
    EXIT_SMOKE,
    EXIT_USAGE,
    BuildError,
    ConfigError,
    ImageNotFound,
    SglforgeError,
    SmokeError,
)


class EngineError(SglforgeError):
    """The Docker engine failed or refused an operation."""

    exit_code = EXIT_ENGINE


class BadReference(EngineError, ConfigError):
    """An image reference or registry that cannot be used (exit 2, nothing ran)."""

    exit_code = EXIT_USAGE


class ImageMissing(EngineError, ImageNotFound):
    """The image exists neither on the engine nor (when asked) in its registry (exit 9)."""

    exit_code = EXIT_NO_IMAGE


class BuildFailed(EngineError, BuildError):
    """A build step, ``docker buildx`` or a probe run inside an image failed (exit 6)."""

    exit_code = EXIT_BUILD


class ContainerFailed(EngineError, SmokeError):
    """A container could not be created or started (exit 7)."""

    exit_code = EXIT_SMOKE


class RegistryError(EngineError):
    """A registry answered with an error, or an operation against it failed (exit 8)."""

    exit_code = EXIT_PUBLISH


class RegistryUnreachable(RegistryError):
    """The registry (or its token service) did not answer."""


class RegistryAuthRefused(RegistryError):
    """The registry or its token service refused the login (never retried)."""


class CredentialsUnusable(RegistryError):
    """The registry login could not be read (half-set environment, unreadable Docker config)."""


class ManifestMissing(RegistryError):
    """The registry has no such tag, manifest or blob (HTTP 404)."""


class PushFailed(RegistryError):
    """A push failed after its retries."""


__all__ = [
    "BadReference",
    "BuildFailed",
    "ContainerFailed",
    "CredentialsUnusable",
    "EngineError",
    "ImageMissing",
    "ManifestMissing",
    "PushFailed",
    "RegistryAuthRefused",
    "RegistryError",
    "RegistryUnreachable",
]
