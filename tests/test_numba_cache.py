"""numba's cache of sitp's kernels (sitp/_env.py): one cache for every copy of the sources.

Each case runs fresh interpreters on an empty ``NUMBA_CACHE_DIR``: the repository's
sitp compiles a small kernel, then a copy of the package at another path (with other
modification times: what a wheel installed in a virtual environment is) finds it in
the cache, and a copy whose kernel source differs does not.
"""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import sitp

PACKAGE = Path(sitp.__file__).resolve().parent

PROBE = r"""
import json, sys
import numpy as np
import sitp
from sitp.kernels.cpu.blas import level1
x, y = np.ones(5, np.float32), np.ones(5, np.float32)
level1.saxpy(np.float32(2), x, y)
locator = level1.saxpy._cache._impl._locator
print(json.dumps({"file": sitp.__file__, "hits": sum(level1.saxpy.stats.cache_hits.values()),
                  "misses": sum(level1.saxpy.stats.cache_misses.values()),
                  "locator": type(locator).__name__, "path": locator.get_cache_path(),
                  "y": y.tolist()}))
"""

OUTSIDE = r"""
import json
import sitp
from numba import njit

@njit(cache=True)
def twice(x):
    return 2 * x

twice(3)
print(json.dumps({"locator": type(twice._cache._impl._locator).__name__}))
"""


def _run(code, cache, pythonpath=None, cwd=None, script=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CACHE", "_SITP_"))}
    env["NUMBA_CACHE_DIR"] = str(cache)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run(
        [sys.executable, str(script)] if script else [sys.executable, "-c", code],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def _copy_package(dest: Path) -> Path:
    shutil.copytree(PACKAGE, dest / "sitp", ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def test_a_copy_of_the_sources_at_another_path_reuses_the_cache(tmp_path):
    cache = tmp_path / "cache"
    first = _run(PROBE, cache, cwd=tmp_path)
    assert first["locator"] == "PackageCacheLocator"
    assert first["misses"] == 1 and first["hits"] == 0
    assert Path(first["path"]).relative_to(cache).parts[1:] == ("kernels", "cpu", "blas")
    copy = _copy_package(tmp_path / "copy")
    (copy / "sitp" / "kernels" / "cpu" / "blas" / "level1.py").touch()  # a newer mtime
    second = _run(PROBE, cache, pythonpath=copy, cwd=tmp_path)
    assert Path(second["file"]).resolve().is_relative_to(copy.resolve())
    assert second["hits"] == 1 and second["misses"] == 0
    assert second["y"] == first["y"] == [3.0] * 5


def test_a_copy_whose_kernel_source_differs_compiles_again(tmp_path):
    cache = tmp_path / "cache"
    _run(PROBE, cache, cwd=tmp_path)
    copy = _copy_package(tmp_path / "edited")
    level1 = copy / "sitp" / "kernels" / "cpu" / "blas" / "level1.py"
    level1.write_text(level1.read_text() + "\n# an edit\n")
    edited = _run(PROBE, cache, pythonpath=copy, cwd=tmp_path)
    assert edited["hits"] == 0 and edited["misses"] == 1


def test_functions_outside_sitp_keep_numbas_own_locators(tmp_path):
    script = tmp_path / "outside.py"  # numba caches only functions of a file
    script.write_text(OUTSIDE)
    got = _run(None, tmp_path / "cache", cwd=tmp_path, script=script)
    assert got["locator"] != "PackageCacheLocator"


TOGETHER = r"""
import json, os, sys, time
from pathlib import Path
import numpy as np
import sitp
from sitp.kernels.cpu.blas import level1
here = Path(sys.argv[1])
(here / f"ready-{sys.argv[2]}").touch()
while not (here / "go").exists():  # both processes ask for the kernel at the same moment
    time.sleep(0.001)
x, y = np.ones(5, np.float32), np.ones(5, np.float32)
level1.saxpy(np.float32(2), x, y)
print(json.dumps({"hits": sum(level1.saxpy.stats.cache_hits.values()),
                  "misses": sum(level1.saxpy.stats.cache_misses.values()), "y": y.tolist()}))
"""


def test_processes_that_start_together_compile_a_kernel_once(tmp_path):
    """Two interpreters on one empty cache ask for the same kernel at the same moment: one
    compiles it, holding the kernel's lock file (sitp._env._compile_once); the other waits
    for the lock, then loads the kernel from the cache."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_CACHE", "_SITP_"))}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", TOGETHER, str(tmp_path), str(i)],
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready-{i}").exists() for i in range(2)):
            assert time.monotonic() < deadline, "the interpreters did not start"
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            time.sleep(0.01)
        (tmp_path / "go").touch()
        outs = [p.communicate(timeout=300) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert all(p.returncode == 0 for p in procs), [err[-3000:] for _, err in outs]
    got = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
    assert sorted((g["misses"], g["hits"]) for g in got) == [(0, 1), (1, 0)], got
    assert all(g["y"] == [3.0] * 5 for g in got)
    assert list((tmp_path / "cache").rglob(".locks/saxpy-*.lock"))
