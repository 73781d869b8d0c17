"""No public function or constructor swallows keyword arguments it does not know.

Every public callable of the package's torch-facing namespaces is inspected: one that
takes ``**kwargs`` must be on the list below, with the reason, and the forwarding ones
are called with a misspelt keyword to show that it still is a ``TypeError``.
"""

import inspect

import pytest
import torch

import sitp
import sitp.nn.functional
import sitp.nn.init
import sitp.optim.lr_scheduler
import sitp.utils.data

NAMESPACES = [
    sitp,
    sitp.nn,
    sitp.nn.functional,
    sitp.nn.init,
    sitp.optim,
    sitp.optim.lr_scheduler,
    sitp.utils.data,
    sitp.utils.data.dataloader,
    sitp.utils.data.sampler,
    sitp.utils.data.dataset,
]

FORWARDING = {  # name -> why it takes **kwargs
    "Identity.__init__": "torch.nn.Identity takes and ignores any arguments too",
    "Module.__init__": "raises TypeError for any argument (layers without options inherit it)",
    "Module.__call__": "passes them to forward",
    "Module.forward": "a subclass defines the real signature",
    "Sequential.forward": "raises or forwards",
    "ModuleList.forward": "raises: a ModuleList has no forward",
    "ModuleDict.forward": "raises: a ModuleDict has no forward",
    "Module.to": "passes them to Tensor.to, which checks them",
    "Tensor.to": "parses torch's overloads itself and rejects the rest",
    "Tensor.__init__": "always raises: tensors come from sitp.tensor and friends",
    "gradcheck": "forwards to sitp.autograd.gradcheck.gradcheck",
}


def public_callables():
    seen = set()
    for ns in NAMESPACES:
        for name in dir(ns):
            if name.startswith("_"):
                continue
            obj = getattr(ns, name)
            if not callable(obj) or id(obj) in seen or inspect.ismodule(obj):
                continue
            seen.add(id(obj))
            yield name, obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if callable(member) and (
                        not attr.startswith("_") or attr in ("__init__", "__call__")
                    ):
                        yield f"{obj.__name__}.{attr}", member
    for attr, member in vars(sitp.Tensor).items():
        if callable(member) and not attr.startswith("_") or attr == "__init__":
            yield f"Tensor.{attr}", member


def takes_var_keyword(fn) -> bool:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return False
    return any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())


def test_no_public_callable_swallows_keywords():
    offenders = []
    for name, fn in public_callables():
        if inspect.isclass(fn):  # a constructor: judged by its __init__
            name, fn = fn.__init__.__qualname__, fn.__init__
        if getattr(fn, "__module__", "").startswith("sitp") and takes_var_keyword(fn):
            # the sitp.exp-style forwarders call the Tensor method with the same keywords
            if getattr(fn, "__doc__", "") and "is ``x." in (fn.__doc__ or ""):
                continue
            if name not in FORWARDING:
                offenders.append(name)
    assert not offenders, f"take **kwargs without checking them: {offenders}"


def test_forwarders_still_reject_misspelt_keywords():
    x = sitp.ones(2, 3)
    cases = [
        lambda: sitp.sum(x, dimm=0),
        lambda: x.to(dtyp=sitp.float64),
        lambda: sitp.nn.Linear(3, 2).to(devic="cpu"),
        lambda: sitp.nn.Linear(3, 2)(x, bogus=1),
        lambda: sitp.utils.data.DataLoader([1], bogus=1),
        lambda: sitp.optim.AdamW(sitp.nn.Linear(3, 2).parameters(), lrr=0.1),
        lambda: sitp.nn.Linear(3, 2, bogus=1),
        lambda: sitp.save({}, "unused", bogus=1),
        lambda: sitp.load("unused", bogus=1),
        lambda: sitp.nn.Tanh(bogus=1),
        lambda: sitp.nn.Identity.__mro__[1](bogus=1),  # Module itself
    ]
    for case in cases:
        with pytest.raises(TypeError):
            case()
    with pytest.raises(TypeError):  # torch agrees on the first one
        torch.sum(torch.ones(2, 3), dimm=0)
