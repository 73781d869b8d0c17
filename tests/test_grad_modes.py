"""``inference_mode`` and ``set_grad_enabled`` in each form a script uses them, run
side by side with torch: the same outputs record (or not) the graph, and the mode
after each block is the same."""

import pytest
import torch

import sitp


def scenario(lib):
    """What each form does; returns the observations as a list of bools."""
    seen = []
    x = lib.ones(2, requires_grad=True)
    with lib.inference_mode():
        seen.append((x * 2).requires_grad)
        with lib.inference_mode(False):
            seen.append(lib.is_inference_mode_enabled())
        seen.append(lib.is_inference_mode_enabled())
    seen += [lib.is_grad_enabled(), lib.is_inference_mode_enabled()]

    @lib.inference_mode()
    def f(t):
        return t * 2

    @lib.inference_mode
    def g(t):
        return t * 3

    seen += [f(x).requires_grad, g(x).requires_grad, lib.is_grad_enabled()]
    with lib.set_grad_enabled(False):
        seen.append((x * 2).requires_grad)
        with lib.set_grad_enabled(True):
            seen.append((x * 2).requires_grad)
    seen.append(lib.is_grad_enabled())

    @lib.set_grad_enabled(False)
    def h(t):
        return t * 2

    seen += [lib.is_grad_enabled(), h(x).requires_grad, lib.is_grad_enabled()]
    lib.set_grad_enabled(False)  # as a statement
    seen += [lib.is_grad_enabled(), (x * 2).requires_grad]
    lib.set_grad_enabled(True)
    seen += [lib.is_grad_enabled(), (x * 2).requires_grad]
    with lib.no_grad():
        with lib.enable_grad():
            seen.append((x * 2).requires_grad)
    return seen


def test_grad_modes_behave_like_torch():
    assert scenario(sitp) == scenario(torch)


def test_modes_are_restored_after_an_exception():
    for lib in (sitp, torch):
        with pytest.raises(ZeroDivisionError):
            with lib.inference_mode():
                1 / 0
        with pytest.raises(ZeroDivisionError):
            with lib.set_grad_enabled(False):
                1 / 0
        assert lib.is_grad_enabled() and not lib.is_inference_mode_enabled()


def test_bad_mode_arguments_are_type_errors():
    for lib in (sitp, torch):
        with pytest.raises(TypeError):
            lib.set_grad_enabled("no")
    with pytest.raises(TypeError, match="bool"):
        sitp.inference_mode("yes")
