"""Running a model file with PyTorch instead of sitp.

Every model of the ladder is written as PyTorch code. Its file opens with::

    import sitp as torch
    import sitp.nn as nn
    from sitp.nn import functional as F

and uses only ``torch.*``, ``nn.*`` and ``F.*`` after that. Changing ``sitp`` to
``torch`` in those import lines gives a file that PyTorch runs unchanged; this
module does that substitution, so the very same source can be run by both
libraries and their numbers compared (``tests/test_models.py``,
``scripts/compare_torch.py``).

A poor man's port: the rewrite is textual and touches only lines that start with
``import sitp`` or ``from sitp``; a model file must import nothing else from sitp.

Example:
    >>> torch_gpt = load_module("gpt", "torch")   # doctest: +SKIP
    >>> model = torch_gpt.GPT(torch_gpt.GPTConfig(vocab_size=27))   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
import types

_SITP_IMPORT = re.compile(r"^(import|from)\s+sitp(?=[\s.])", re.MULTILINE)


def torch_source(source: str) -> str:
    """The source with its sitp import lines pointed at PyTorch.

    >>> torch_source("import sitp as torch\\nimport sitp.nn as nn\\nx = 'sitp'")
    "import torch as torch\\nimport torch.nn as nn\\nx = 'sitp'"
    """
    return _SITP_IMPORT.sub(r"\1 torch", source)


def load_module(name: str, backend: str = "sitp") -> types.ModuleType:
    """Imports the model file ``sitp.models.<name>`` for ``backend`` ("sitp" or "torch").

    With "sitp" this is a plain import. With "torch" the file is read, its
    import lines rewritten (:func:`torch_source`) and executed as a fresh module
    named ``sitp.models.<name>__torch``, which is cached in ``sys.modules``.
    """
    qualified = f"sitp.models.{name}"
    if backend == "sitp":
        return importlib.import_module(qualified)
    if backend != "torch":
        raise ValueError(f"backend must be 'sitp' or 'torch', got {backend!r}")
    torch_name = qualified + "__torch"
    if torch_name in sys.modules:
        return sys.modules[torch_name]
    spec = importlib.util.find_spec(qualified)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no model file {qualified}")
    with open(spec.origin, encoding="utf-8") as f:
        source = torch_source(f.read())
    module = types.ModuleType(torch_name)
    module.__file__ = spec.origin
    sys.modules[torch_name] = module  # dataclasses look their module up here
    try:
        exec(compile(source, spec.origin, "exec"), module.__dict__)
    except BaseException:
        del sys.modules[torch_name]
        raise
    return module
