"""CI that can be trusted: the workflows are valid and pass a security audit, offline.

- check-jsonschema validates each workflow against GitHub's workflow schema, which the
  package vendors (``--builtin-schema vendor.github-workflows``: no download).
- zizmor audits them (``--offline``) at its default severity: actions pinned by SHA,
  no credentials persisted by checkout, no template injection, and the self-hosted GPU
  job never runs code from a fork or a pull request.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed (pip install -e '.[test]')")
    return str(path)


def test_there_are_workflows():
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gpu.yml", "pages.yml"}


def test_workflows_match_githubs_schema():
    run = subprocess.run(
        [_tool("check-jsonschema"), "--builtin-schema", "vendor.github-workflows", *WORKFLOWS],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_zizmor_finds_nothing():
    run = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", str(ROOT / ".github" / "workflows")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_gpu_workflow_never_runs_code_from_a_pull_request():
    """The self-hosted runner executes what it is given: no pull_request trigger at all."""
    import yaml

    gpu = yaml.safe_load((ROOT / ".github" / "workflows" / "gpu.yml").read_text())
    triggers = gpu.get("on", gpu.get(True))  # YAML 1.1 reads the key `on` as True
    assert set(triggers) <= {"push", "workflow_dispatch"}, triggers
    assert "refs/heads/main" in gpu["jobs"]["gpu"]["if"]
    assert "fork == false" in gpu["jobs"]["gpu"]["if"]
