"""``sglforge bench --calibrate K`` end to end without Docker (issue 40): the stand-in server as
a local process (the process runtime, tests/integration/test_process_runtime.py's site and
scenario), K boots each with the discarded warm-up probe and the compared probe, the node
profile written where asked and read back as a comparison would read it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from test_process_runtime import free_port, scenario_file, site  # noqa: F401 (a fixture)

from sglforge.bench import noise as node_noise
from sglforge.cli import main


def test_calibrate_boots_k_times_with_the_warmup_and_writes_the_profile(
    site: Path,  # noqa: F811
    tmp_path: Path,
) -> None:
    path = scenario_file(tmp_path)
    text = path.read_text()
    assert "warmup_probe = false" in text
    path.write_text(text.replace("warmup_probe = false", "warmup_probe = true"))
    out, report = tmp_path / "node.json", tmp_path / "report"
    args = ["bench", "--scenario", str(path), "--runtime", "process", "--python", sys.executable,
            "--env", f"PYTHONPATH={site}", "--port", str(free_port()), "--calibrate", "2",
            "--noise-profile", str(out), "--report-dir", str(report), "--json"]  # fmt: skip
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{") :])
    assert doc["boots"] == 2 and doc["dof"] == 1 and doc["path"] == str(out)
    assert doc["shape"] == {"concurrency": 2, "requests_per_boot": 16}
    assert len(doc["boot_seconds"]) == 2 and all(s > 0 for s in doc["boot_seconds"])
    assert doc["warmup_probe"] is True and doc["hardware"].startswith("standin-cpu")
    assert doc["intra_batch_correlation"] is not None and doc["within_boot_sd"] > 0
    assert isinstance(doc["gate"], str) and doc["gate"]
    # each boot ran its warm-up (discarded) before the compared probe
    for i in range(2):
        assert (report / f"calibrate-{i}-warmup.jsonl").is_file()
        assert (report / f"calibrate-{i}-speed.jsonl").is_file()
    prof = node_noise.load(out)
    assert prof.figure == "decode_tok_s_per_request_at_concurrency_2"
    assert prof.noise().dof == 1 and prof.boot_sd == doc["boot_sd"]
    assert json.loads((report / "noise-profile.json").read_text())["boots"] == 2
