"""``Module``: the base of every layer and model (chapter 4.2).

A module keeps three ordered dicts — its parameters, its buffers and its
child modules — filled in by plain attribute assignment (``self.fc =
Linear(...)``) through ``__setattr__``. Everything else (``parameters()``,
``state_dict()``, ``train()``, ``to()``) walks that tree.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

from sitp._tensor.creation import tensor
from sitp._tensor.tensor import Tensor
from sitp.autograd.grad_mode import no_grad
from sitp.dtypes import float32, float64
from sitp.nn.parameter import Parameter

_IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Module:
    """Subclass it, create layers in ``__init__``, compute in ``forward``."""

    training: bool

    # --8<-- [start:setattr]
    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() takes no arguments")
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(
                f"cannot assign {name!r} before Module.__init__() call (call super().__init__())"
            )
        if isinstance(value, Parameter):
            store = self._parameters
        elif isinstance(value, Module):
            store = self._modules
        elif name in self.__dict__.get("_buffer_names", ()) and isinstance(value, Tensor):
            store = self._buffers
        else:
            store = None
        # a name that changes kind leaves its old registry; one that keeps it keeps its
        # place there, as in torch (a reassigned weight stays first in the state dict)
        for d in (self._parameters, self._buffers, self._modules):
            if d is not store:
                d.pop(name, None)
        if store is None:
            object.__setattr__(self, name, value)
            return
        store[name] = value
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for store in ("_parameters", "_buffers", "_modules"):
            if store in d and name in d[store]:
                return d[store][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for d in (self._parameters, self._buffers, self._modules):
            if name in d:
                del d[name]
                return
        object.__delattr__(self, name)

    # --8<-- [end:setattr]

    def register_parameter(self, name: str, param) -> None:
        if param is None:
            self._parameters[name] = None
        else:
            setattr(self, name, param)

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """A tensor that is part of the module's state but not trained (e.g. a mask)."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer '{name}'")
        self.__dict__.setdefault("_buffer_names", set()).add(name)
        self.__dict__.pop(name, None)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module) -> None:
        self._modules[name] = module

    register_module = add_module

    def forward(self, *args, **kwargs):
        raise NotImplementedError(
            f'Module [{type(self).__name__}] is missing the required "forward" function'
        )

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---------------------------------------------------------------- walking
    # --8<-- [start:walk]
    def named_modules(self, memo=None, prefix: str = "", remove_duplicate: bool = True):
        """(name, module) for this module and every descendant, each once."""
        memo = set() if memo is None else memo
        if remove_duplicate and id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(
                memo, f"{prefix}.{name}" if prefix else name, remove_duplicate
            )

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ):
        """(dotted name, parameter); a tied parameter is listed once."""
        seen = set()
        mods = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for mprefix, m in mods:
            for name, p in m._parameters.items():
                if p is None or (remove_duplicate and id(p) in seen):
                    continue
                seen.add(id(p))
                yield (f"{mprefix}.{name}" if mprefix else name), p

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, b in m._buffers.items():
                if b is not None:
                    yield (f"{mprefix}.{name}" if mprefix else name), b

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # --8<-- [end:walk]

    def get_submodule(self, target: str) -> "Module":
        m = self
        for part in target.split(".") if target else []:
            m = getattr(m, part)
        return m

    def apply(self, fn) -> "Module":
        """Call ``fn`` on every submodule (children first), then on self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def train(self, mode: bool = True) -> "Module":
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p.grad is not None:
                if set_to_none:
                    p.grad = None
                else:
                    p.grad.zero_()

    # ------------------------------------------------------------------ state
    # --8<-- [start:state_dict]
    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        """Every parameter and persistent buffer by dotted name (tied ones twice)."""
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        """Copy tensors into the parameters and buffers with the same names.

        Raises:
            RuntimeError: with ``strict`` when keys are missing or unexpected,
                and always when a shape differs; lists every problem.
        """
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        errors = []
        for k, dst in own.items():
            if k in state_dict:
                src = state_dict[k]
                if not isinstance(src, Tensor):
                    src = tensor(src)
                if tuple(src.shape) != tuple(dst.shape):
                    errors.append(
                        f"size mismatch for {k}: copying a param with shape {tuple(src.shape)} "
                        f"from checkpoint, the shape in current model is {tuple(dst.shape)}."
                    )
                    continue
                if src.device != dst.device:  # torch copies across devices: a checkpoint
                    src = src.to(dst.device)  # saved on the CPU loads into a model on a GPU
                with no_grad():
                    dst.copy_(src)
        if strict:
            if unexpected:
                errors.insert(
                    0,
                    "Unexpected key(s) in state_dict: "
                    + ", ".join(f'"{k}"' for k in unexpected)
                    + ". ",
                )
            if missing:
                errors.insert(
                    0,
                    "Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in missing) + ". ",
                )
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors)
            )
        return _IncompatibleKeys(missing, unexpected)

    # --8<-- [end:state_dict]

    def _apply_tensors(self, fn) -> "Module":
        with no_grad():
            for m in self.modules():
                for name, p in m._parameters.items():
                    if p is not None:
                        new = fn(p)
                        if new is not p:
                            p.data = new
                for name, b in m._buffers.items():
                    if b is not None:
                        m._buffers[name] = fn(b)
        return self

    def to(self, *args, **kwargs) -> "Module":
        """Move/convert parameters and buffers (floating ones only for dtypes)."""

        def conv(t):
            if not t.dtype.is_floating_point:
                args2 = [a for a in args if isinstance(a, str) or hasattr(a, "type")]
                return t.to(*args2, **{k: v for k, v in kwargs.items() if k == "device"})
            return t.to(*args, **kwargs)

        return self._apply_tensors(conv)

    def cpu(self) -> "Module":
        return self

    def cuda(self, device=None) -> "Module":
        return self.to("cuda")

    def float(self) -> "Module":
        return self.to(float32)

    def double(self) -> "Module":
        return self.to(float64)

    # ------------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = []
        extra = self.extra_repr()
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        main = type(self).__name__ + "("
        if extra and not lines:
            return main + extra + ")"
        if not lines:
            return main + ")"
        return main + ("\n  " + extra if extra else "") + "\n  " + "\n  ".join(lines) + "\n)"

    def __dir__(self):
        return sorted(
            set(super().__dir__()) | set(self._parameters) | set(self._modules) | set(self._buffers)
        )

    def __getstate__(self):
        return self.__dict__

    def __setstate__(self, state):
        self.__dict__.update(state)
