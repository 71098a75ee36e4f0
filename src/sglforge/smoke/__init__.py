"""Smoke tests of serving images, a package mirroring the ``smoke/`` data folder:

- :mod:`.scenario`: the scenario files;
- :mod:`.preflight`: what the host must have before a launch;
- :mod:`.checks`: the checks against a ready server;
- :mod:`.runner`: ``run_smoke``, the pipeline from preflight to report;
- :mod:`.report`: what a run found and how it renders.

The names most callers use are re-exported here.
"""

from __future__ import annotations

from sglforge.scenario.constants import (
    ACCELERATORS,
    DEFAULT_ACCEPT_LENGTH,
    DEFAULT_COMMAND,
    DEFAULT_LOAD_TIMEOUT,
    DEFAULT_PORT,
    EXIT_GRACE_S,
    HTTP_FAILED,
    LOG_TAIL_LINES,
    PLACEHOLDERS,
    SEVERITIES,
    Value,
)
from sglforge.scenario.file import (
    Checks,
    ForbiddenPattern,
    LogMatch,
    Question,
    RequiredPattern,
    Scenario,
    load_scenario,
    parse_scenario,
)
from sglforge.smoke.checks import (
    CHECK_ORDER,
    HttpError,
    accept_length_from_meta,
    accept_length_from_server_info,
    answer_matches,
    decode_speed,
    logs_check,
    scan_log,
    scan_required,
    strip_reasoning,
)
from sglforge.smoke.preflight import (
    GpuInventory,
    detect_gpus,
    expected_arch,
    gfx_from_target_version,
    parse_amd_smi,
    parse_rocminfo,
    port_in_use,
    preflight,
    read_kfd_topology,
)
from sglforge.smoke.report import (
    Check,
    SmokeReport,
    append_step_summary,
    junit_suite,
    junit_xml,
    markdown,
    report_dict,
    table_rows,
    write_junit,
)
from sglforge.smoke.runner import (
    new_report_dir,
    run_smoke,
)

__all__ = [
    "ACCELERATORS",
    "CHECK_ORDER",
    "Check",
    "Checks",
    "DEFAULT_ACCEPT_LENGTH",
    "DEFAULT_COMMAND",
    "DEFAULT_LOAD_TIMEOUT",
    "DEFAULT_PORT",
    "EXIT_GRACE_S",
    "ForbiddenPattern",
    "GpuInventory",
    "HTTP_FAILED",
    "HttpError",
    "LOG_TAIL_LINES",
    "LogMatch",
    "PLACEHOLDERS",
    "Question",
    "RequiredPattern",
    "SEVERITIES",
    "Scenario",
    "SmokeReport",
    "Value",
    "accept_length_from_meta",
    "accept_length_from_server_info",
    "answer_matches",
    "append_step_summary",
    "decode_speed",
    "detect_gpus",
    "expected_arch",
    "gfx_from_target_version",
    "junit_suite",
    "junit_xml",
    "load_scenario",
    "logs_check",
    "markdown",
    "new_report_dir",
    "parse_amd_smi",
    "parse_rocminfo",
    "parse_scenario",
    "port_in_use",
    "preflight",
    "read_kfd_topology",
    "report_dict",
    "run_smoke",
    "scan_log",
    "scan_required",
    "strip_reasoning",
    "table_rows",
    "write_junit",
]
