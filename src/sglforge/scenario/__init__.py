"""The scenario file format (``smoke/*.toml``): what is launched, how, what is checked and the
``[bench]`` workload, parsed once (``file.load_scenario``) and carried as a ``Scenario``.

It is data, below ``project`` (which finds and parses scenarios) and the requests, and below
every package that runs one (``smoke``, ``bench``, ``gates``); it imports none of them.
"""
