"""Run a PyTorch script with a chosen library bound to the name ``torch``.

    python tests/scripts/run_with.py sitp tests/scripts/makemore_mlp.py --data ... --out ...
    python tests/scripts/run_with.py torch tests/scripts/makemore_mlp.py ...

With ``sitp``, every ``import torch...`` in the script (``torch.nn``,
``torch.utils.data.dataloader``, ...) resolves to the module of the same dotted path
under ``sitp``; a path sitp lacks is an ImportError naming it. The script runs as
``__main__``; its stdout is the caller's.
"""

import importlib
import importlib.abc
import importlib.util
import runpy
import sys


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``torch[.x.y]`` is ``sitp[.x.y]``: the same module object, under both names."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torch" or fullname.startswith("torch."):
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return importlib.import_module("sitp" + spec.name[len("torch") :])

    def exec_module(self, module):
        pass  # imported already, as sitp.*


def main(argv):
    lib, script, *args = argv
    if lib == "sitp":
        sys.meta_path.insert(0, _Alias())
    elif lib != "torch":
        raise SystemExit(f"run_with.py: the library is sitp or torch, not {lib!r}")
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
