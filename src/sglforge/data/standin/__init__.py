"""The stand-in sglang server (``server.py``): a TEST DOUBLE the stand-in base runs as
``sglang/launch_server.py``. It is a program copied into an image, kept here as data."""
