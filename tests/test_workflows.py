"""CI that can be trusted: the workflows are valid and pass a security audit, offline.

- check-jsonschema validates each workflow against GitHub's workflow schema, which the
  package vendors (``--builtin-schema vendor.github-workflows``: no download).
- zizmor audits them (``--offline``) at its default severity: actions pinned by SHA,
  no credentials persisted by checkout, no template injection, and the self-hosted GPU
  job never runs code from a fork or a pull request.
"""

from __future__ import annotations

import os
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
        why = f"{name} is not installed (pip install -e '.[test]')"
        if os.environ.get("CI", "").strip().lower() in ("true", "1"):
            pytest.fail(f"CI=true: {why}")  # make test installs it: never skip there
        pytest.skip(why)
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


def test_ci_gives_make_test_the_corpora_sitp_pins():
    """GitHub's CI downloads names.txt and tinyshakespeare from the addresses sitp.data
    downloads them from, checks them against the digests sitp pins, and points make test's
    SITP_DATA_DIR at them, so that the pages and tests that read them run there."""
    import yaml

    from sitp.data import download

    job = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())["jobs"]["test"]
    steps = job["steps"]
    makes = [s for s in steps if s.get("run", "").strip().startswith("make ")]
    (fetch,) = [s for s in steps if download.MAKEMORE_URL in s.get("run", "")]
    assert makes and all(steps.index(fetch) < steps.index(m) for m in makes)
    data = fetch["env"]["DATA"]
    assert all(m["env"]["SITP_DATA_DIR"] == data for m in makes), makes
    assert "CI" not in job.get("env", {})  # GitHub's CI=true: a missing corpus fails
    script = fetch["run"]
    for url, name, digest in [
        (download.MAKEMORE_URL, "names.txt", download.MAKEMORE_FACTS.sha256),
        (download.TINYSHAKESPEARE_URL, "tinyshakespeare.txt", download.TINYSHAKESPEARE_SHA256),
    ]:
        assert f'-o "$DATA/{name}" \\\n  {url}\n' in script, name
        assert f"\n{digest}  {name}\n" in script, name
    assert "sha256sum --check --strict" in script
