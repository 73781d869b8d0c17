"""A switch of torch.backends: a bool read and written like an attribute, checked as
torch checks it (a non-bool is an error naming the setter)."""

from __future__ import annotations


class BoolFlag:
    """A data descriptor holding one bool, process-wide.

    Args:
        default: the value before anyone sets it (torch's default).
        setter: the name torch's error gives for a wrong type (``set_benchmark_cudnn``).
        pair: the switch also takes a tuple or list of bools, as torch's
            reduced-precision switches do (whose first item is the switch itself;
            the second, torch's split-K choice, has nothing to choose in sitp).
    """

    def __init__(self, default: bool, setter: str, pair: bool = False):
        self.value = default
        self.setter = setter
        self.pair = pair

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner=None):
        return self.value if obj is not None else self

    def __set__(self, obj, value):
        if self.pair and isinstance(value, (tuple, list)) and value:
            if all(isinstance(v, bool) for v in value):
                value = value[0]
        if not isinstance(value, bool):
            if self.pair:
                raise TypeError(
                    f"{self.name} expects a bool or a tuple/list of bools, but got {type(value)}"
                )
            raise RuntimeError(f"{self.setter} expects a bool, but got {type(value).__name__}")
        self.value = value
