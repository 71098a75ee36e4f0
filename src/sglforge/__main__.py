"""``python -m sglforge``: the command line.

The first statements, before anything else is imported: a Ctrl-C or SIGTERM that arrives
while Python loads sglforge ends the process quietly (``sglforge.cli.signals`` takes over
with the same exit codes once the command line is loaded). ``_signal`` is built in.
"""

import _signal
import os


def _quiet(signum: int, _frame: object) -> None:
    os.write(2, b"interrupted\n" if signum == _signal.SIGINT else b"terminated\n")
    os._exit(128 + signum)  # 130, 143, 129: the codes the command line gives


for _s in (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP):
    _signal.signal(_s, _quiet)

from sglforge.cli import main  # noqa: E402

main()
