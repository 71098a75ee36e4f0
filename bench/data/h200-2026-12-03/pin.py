import os
import sys

lo, hi = sys.argv[1].split("-")
os.sched_setaffinity(0, range(int(lo), int(hi) + 1))
os.execvp(sys.argv[2], sys.argv[2:])
