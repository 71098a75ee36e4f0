"""``sglforge bench``: the serving benchmark of an image, run with the image's own
``python3 -m sglang.bench_serving``, and the gate that compares it with the last release."""
