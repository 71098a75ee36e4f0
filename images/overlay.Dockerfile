# sglforge overlay image: a released sglang image plus only the files the patch queue changes.
#
# Rendered by sglforge.build (`sglforge build --dry-run` prints the result); the double-brace
# placeholders are filled in there. Only classic-builder syntax: the engine builds it
# through the Docker API, without BuildKit.
FROM {{BASE}}

# Provenance (OCI and io.sglforge.* labels) first, so every layer of the build carries them,
# including the leftovers of a failed build. They are left out of the inputs key.
{{LABELS}}

# One layer: the changed files staged at their paths in the image, plus
# /opt/sglforge/manifest.json. Deterministic file times and owners (root) come from the
# build context, so the layer holds the changed bytes and nothing else.
COPY overlay/ /
{{DELETE}}
# Runtime defaults for {{TARGET}} ({{GPU_ARCH}}, {{ROCM}}); `docker run -e` overrides them.
{{ENV}}

# No ENTRYPOINT and no CMD: the image keeps the base's WORKDIR, CMD ["/bin/bash"] and (absent)
# ENTRYPOINT, so every command line that runs the release image runs this one:
#   docker run ... IMAGE python3 -m sglang.launch_server --model-path ...
# A base that sets an ENTRYPOINT gets `ENTRYPOINT []` (and its CMD restated) appended by
# sglforge, recorded in the label io.sglforge.base.entrypoint-reset.
