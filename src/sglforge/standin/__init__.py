"""Stand-ins for a machine without a GPU: TEST DOUBLES, labelled ``io.sglforge.standin=1``.

``base`` builds the replica of an sglang ROCm release image whose ``sglang.launch_server`` is
the stand-in server (``sglforge/data/standin/server.py``); ``registry`` runs a local registry.
The tests use them, and so does ``sglforge tryout``. A smoke or bench on a stand-in is
recorded as one (``standin-cpu``), never as a GPU run.
"""
