# The affinity arm: bench_serving on CPUs 12-15, everything else (the server) on 0-11.
import os
import sys

cpus = range(12, 16) if "sglang.bench_serving" in sys.argv else range(0, 12)
os.sched_setaffinity(0, cpus)
os.execvp("python3", ["python3", *sys.argv[1:]])
