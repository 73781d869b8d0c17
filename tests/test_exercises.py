"""The "make these tests pass" assignments of sitp.exercises (one per chapter).

Every test of every assignment passes on its solution, and fails on the stub a reader
starts from, with the stub's NotImplementedError: a test that passed on the stub would
check nothing. The reader's own command, ``pytest --pyargs sitp.exercises.tests``, is run
too, in a fresh process from an empty folder.
"""

import os
import subprocess
import sys

import pytest

from sitp.exercises import ASSIGNMENTS, assignment_tests, module

CASES = [(name, test) for name in ASSIGNMENTS for test in assignment_tests(name)]


@pytest.mark.parametrize("name,test", CASES)
def test_the_solution_passes(name, test):
    assignment_tests(name)[test](module(name, "solution"))


@pytest.mark.parametrize("name,test", CASES)
def test_the_stub_fails(name, test):
    with pytest.raises(NotImplementedError):
        assignment_tests(name)[test](module(name, "exercise"))


def test_every_assignment_has_tests_and_a_chapter():
    assert {"bigram", "strides", "adamw", "engine"} <= set(ASSIGNMENTS)
    for name in ASSIGNMENTS:
        assert len(assignment_tests(name)) >= 4, name


def pytest_in_a_fresh_folder(tmp_path, target):
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["SITP_EXERCISE_TARGET"] = target
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--rootdir",
            str(tmp_path),
            "--pyargs",
            "sitp.exercises.tests",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_readers_command(tmp_path):
    """``pytest --pyargs sitp.exercises.tests`` fails every test on the stubs and passes
    every test on the solutions."""
    stub = pytest_in_a_fresh_folder(tmp_path, "exercise")
    assert stub.returncode == 1, stub.stdout + stub.stderr
    assert f"{len(CASES)} failed" in stub.stdout, stub.stdout
    assert stub.stdout.count("NotImplementedError") >= len(CASES), stub.stdout
    solved = pytest_in_a_fresh_folder(tmp_path, "solution")
    assert solved.returncode == 0, solved.stdout + solved.stderr
    assert f"{len(CASES)} passed" in solved.stdout, solved.stdout
