"""The stand-in sglang server (TEST DOUBLE): the one copy ships in the package as data,
``src/sglforge/data/standin/server.py`` (the stand-in base runs it as
``sglang/launch_server.py``). ``from standin import server`` is that module."""

import sys

from sglforge.data.standin import server as _server

sys.modules[__name__] = _server
