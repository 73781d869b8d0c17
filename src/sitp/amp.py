"""``sitp.amp``: torch.amp's mixed-precision names, ``autocast`` and ``GradScaler``.

Training scripts written for PyTorch run their forward pass under
``torch.amp.autocast(device_type, dtype)`` on a GPU and scale the loss with a
``torch.amp.GradScaler`` when they train in float16, so that small gradients do not
underflow. sitp has no 16-bit dtypes, so:

* :class:`autocast` is accepted (as a context manager or a decorator) and changes
  nothing: every op computes in its inputs' dtype, float32 or float64. It warns once
  when asked for a lower precision that sitp does not have.
* :class:`GradScaler` is torch's dynamic loss scaling, in full: ``scale`` multiplies the
  loss by the scale, ``unscale_`` divides the gradients by it and looks for infs and
  NaNs, ``step`` skips the optimizer's step when it found one, ``update`` halves the
  scale after such a step and doubles it after ``growth_interval`` clean ones. Disabled
  (``enabled=False``, what a float32 script passes), each call passes through: ``scale``
  returns the loss, ``step`` calls ``optimizer.step()``. As in torch, a scaler for
  ``"cuda"`` without a GPU warns and disables itself.

>>> import sitp
>>> w = sitp.nn.Parameter(sitp.tensor([1.0, 2.0]))
>>> opt = sitp.optim.SGD([w], lr=0.1)
>>> scaler = sitp.amp.GradScaler("cpu", init_scale=1024.0)
>>> scaler.scale((w * w).sum()).backward()
>>> w.grad.tolist(), scaler.get_scale()
([2048.0, 4096.0], 1024.0)
>>> scaler.step(opt)  # unscales first: the step uses the true gradient
>>> scaler.update()
>>> [round(v, 4) for v in w.tolist()]
[0.8, 1.6]
"""

from __future__ import annotations

import functools
import math
import warnings

from sitp import cuda, dtypes
from sitp._tensor.tensor import Tensor

_warned = False


class autocast:
    """torch.amp.autocast's signature; a region that computes as it would without it.

    Args:
        device_type: ``"cpu"`` or ``"cuda"``.
        dtype: the precision asked for (torch's default: bfloat16 on a CPU, float16 on a
            GPU). sitp has neither: the region keeps its tensors' dtypes.
        enabled: False turns the region off, as in torch.
        cache_enabled: accepted.
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        if not isinstance(device_type, str):
            raise ValueError(
                f"Expected `device_type` of type `str`, got: `{type(device_type).__name__}`"
            )
        if device_type not in ("cpu", "cuda"):
            raise RuntimeError(
                f"User specified an unsupported autocast device_type '{device_type}'"
            )
        if dtype is not None and not isinstance(dtype, dtypes.dtype):
            raise TypeError(f"autocast: dtype must be a sitp dtype, got {type(dtype).__name__}")
        self.device = device_type
        self.fast_dtype = dtype
        self._enabled = bool(enabled)

    def __enter__(self):
        global _warned
        lower = self.fast_dtype is None or self.fast_dtype is not dtypes.float32
        if self._enabled and lower and self.fast_dtype is not dtypes.float64 and not _warned:
            _warned = True
            warnings.warn(
                "sitp.amp.autocast: sitp has no 16-bit dtypes, so the region computes in its "
                "tensors' own dtypes (float32)",
                stacklevel=2,
            )
        return self

    def __exit__(self, *exc):
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with self:
                return fn(*args, **kwargs)

        return wrapped


class GradScaler:
    """Dynamic loss scaling, with torch.amp.GradScaler's arguments and methods."""

    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ):
        self._device = device
        self._enabled = bool(enabled)
        if self._enabled and device == "cuda" and not cuda.is_available():
            warnings.warn(
                "sitp.amp.GradScaler is enabled for 'cuda', but no GPU is available; "
                "disabling it (as torch does)",
                stacklevel=2,
            )
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._unscaled: dict[int, bool] = {}  # id(optimizer) -> found an inf or NaN
        self._stepped: set[int] = set()

    def is_enabled(self) -> bool:
        return self._enabled

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def scale(self, outputs):
        """The loss (or a list, tuple of losses) times the scale; itself when disabled."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer) -> None:
        """Divide the optimizer's gradients by the scale, in place, once per step."""
        if not self._enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if id(optimizer) in self._stepped:
            raise RuntimeError("unscale_() is being called after step().")
        inv = 1.0 / self._scale
        found = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                p.grad.mul_(inv)
                if not found and not bool(p.grad.isfinite().all().item()):
                    found = True
        self._unscaled[id(optimizer)] = found

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` on unscaled gradients, skipped if one was inf or NaN."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        if id(optimizer) in self._stepped:
            raise RuntimeError("step() has already been called since the last update().")
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        self._stepped.add(id(optimizer))
        if self._unscaled[id(optimizer)]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:
        """Back off after a step that met an inf or NaN; grow after enough clean ones."""
        if not self._enabled:
            return
        if new_scale is not None:
            self._scale = float(new_scale.item() if isinstance(new_scale, Tensor) else new_scale)
        else:
            if not self._unscaled:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(self._unscaled.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    grown = self._scale * self._growth_factor
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
        self._unscaled.clear()
        self._stepped.clear()

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved from a disabled "
                "instance of GradScaler."
            )
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])


__all__ = ["GradScaler", "autocast"]
