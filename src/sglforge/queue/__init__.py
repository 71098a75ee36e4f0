"""The queue's data: what ``Project`` reads from ``patches/`` (below ``project.py``).

Submodules: ``series`` (the series file, the patch files with their trailers, and the pin),
``configs`` (config items: tuned aiter tables carried beside the patches) and ``upstream``
(where upstream comes from). The verbs that take a ``Project`` live in ``sglforge.patches``.
"""
