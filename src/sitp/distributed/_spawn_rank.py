"""What each rank of a :func:`sitp.distributed.spawn` job runs (``python -m
sitp.distributed.run ... -m sitp.distributed._spawn_rank FOLDER``): rebuild the function
from ``FOLDER/payload.pkl`` (written by ``spawn.py``), call ``fn(rank, *args)`` and leave
the result in ``FOLDER/result<rank>.pkl``. Kept apart from ``spawn.py`` so that running it
as ``__main__`` does not import a module the package has imported already.
"""

from __future__ import annotations

import builtins
import importlib
import os
import pickle
import sys
from pathlib import Path


def _lookup(module: str, qualname: str):
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def rebuild(payload: dict):
    """The function that ``spawn.py``'s ``_pack`` described, defined afresh."""
    ns = {"__name__": "__main__", "__builtins__": builtins}
    for name, kind, what in payload["entries"]:
        if kind == "module":
            ns[name] = importlib.import_module(what)
        elif kind == "import":
            ns[name] = _lookup(*what)
        elif kind == "value":
            ns[name] = pickle.loads(what)
        else:  # "source": a def, run in the shared namespace, at its file's line numbers
            src, filename, first = what
            exec(compile("\n" * (first - 1) + src, filename, "exec"), ns)
    kind, what = payload["fn"]
    return _lookup(*what) if kind == "import" else ns[what]


def main(folder: Path) -> None:
    payload = pickle.loads((folder / "payload.pkl").read_bytes())
    sys.path[:0] = [p for p in payload["path"] if p not in sys.path]
    fn = rebuild(payload)
    rank = int(os.environ["RANK"])
    result = fn(rank, *payload["args"])
    out = folder / f"result{rank}.pkl"
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(pickle.dumps(result))
    os.replace(tmp, out)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
