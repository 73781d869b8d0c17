"""Grad modes: whether ops record the autograd graph (chapter 4.1).

``no_grad``, ``enable_grad``, ``set_grad_enabled`` and ``inference_mode`` switch one
thread-local flag that :meth:`sitp.autograd.function.Function.apply` reads.
"""

from __future__ import annotations

import functools
import threading


# --8<-- [start:grad_mode]
class _State(threading.local):
    """One flag per thread. A thread that never set it reads the class's default: an
    attribute the instance lacks would make ``getattr(state, name, default)`` raise and
    catch an AttributeError, 0.3 us of every recorded op's 2.6."""

    enabled = True
    inference = False  # (inside an inference_mode block)


_state = _State()


def is_grad_enabled() -> bool:
    """Whether ops record the graph right now."""
    return _state.enabled


def set_grad_enabled(mode: bool) -> None:
    _state.enabled = bool(mode)


class _GradMode:
    """Base of :class:`no_grad` and :class:`enable_grad`: a context manager
    that is also a decorator."""

    mode = True

    def __new__(cls, orig_func=None):
        if orig_func is not None:  # a bare @no_grad (no parentheses), as torch allows
            return cls()(orig_func)
        return super().__new__(cls)

    def __enter__(self):
        self.prev = is_grad_enabled()
        set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        set_grad_enabled(self.prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """Turn off graph recording, like ``torch.no_grad`` (context or decorator).

    >>> import sitp
    >>> x = sitp.ones(2, requires_grad=True)
    >>> with sitp.no_grad():
    ...     y = x * 2
    >>> y.requires_grad
    False
    """

    mode = False


class enable_grad(_GradMode):
    """Turn graph recording back on inside a ``no_grad`` block."""

    mode = True


# --8<-- [end:grad_mode]


class set_grad_enabled(_GradMode):  # noqa: F811, N801  (PyTorch's name; replaces the function above)
    """Set graph recording on or off, like ``torch.set_grad_enabled``.

    Calling it sets the mode at once (``sitp.set_grad_enabled(False)`` as a
    statement); used in a ``with`` block it restores the previous mode at the end;
    used as a decorator (``@set_grad_enabled(False)``) it runs the function in that
    mode and leaves the caller's mode alone.

    >>> import sitp
    >>> x = sitp.ones(2, requires_grad=True)
    >>> with sitp.set_grad_enabled(False):
    ...     y = x * 2
    >>> y.requires_grad, sitp.is_grad_enabled()
    (False, True)
    """

    def __new__(cls, mode: bool):
        return object.__new__(cls)

    def __init__(self, mode: bool) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled expects a bool, got {type(mode).__name__}")
        self.prev, self.mode = is_grad_enabled(), mode
        _state.enabled = mode

    def __enter__(self):
        pass  # set already, in __init__

    def __exit__(self, *exc):
        _state.enabled = self.prev
        return False

    def __call__(self, fn):
        _state.enabled = self.prev  # as a decorator it changes nothing until fn runs
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)

        return wrapper


class inference_mode(_GradMode):  # noqa: N801
    """``torch.inference_mode``: no graph recording, as a context or a decorator.

    sitp has no separate inference tensors, so ``inference_mode()`` is
    :class:`no_grad` (``inference_mode(False)`` changes nothing). Both
    ``@inference_mode()`` and a bare ``@inference_mode`` decorate a function.

    >>> import sitp
    >>> @sitp.inference_mode()
    ... def predict(x):
    ...     return x * 2
    >>> predict(sitp.ones(2, requires_grad=True)).requires_grad
    False
    """

    def __new__(cls, mode=True):
        if callable(mode) and not isinstance(mode, bool):  # bare @inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode: bool = True) -> None:
        if not isinstance(mode, bool):
            raise TypeError(f"inference_mode expects a bool, got {type(mode).__name__}")
        self.inference = mode

    def __enter__(self):
        self.prev = is_grad_enabled(), is_inference_mode_enabled()
        _state.inference = self.inference
        if self.inference:
            _state.enabled = False

    def __exit__(self, *exc):
        _state.enabled, _state.inference = self.prev
        return False

    def __call__(self, fn):
        inference = self.inference

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with inference_mode(inference):
                return fn(*args, **kwargs)

        return wrapper


def is_inference_mode_enabled() -> bool:
    """Whether the code runs inside an :class:`inference_mode` block."""
    return _state.inference
