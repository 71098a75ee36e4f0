import sys
import urllib.request

try:
    sys.exit(0 if urllib.request.urlopen(sys.argv[1], timeout=3).status == 200 else 1)
except Exception:
    sys.exit(1)
