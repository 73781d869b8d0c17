"""``sitp.examples``: the programs and the recorded results that the book's pages use.

Chapters 3 and 4 draw their figures with them. An application (layer 6 of
docs/layout.md).

They ship with the package, so that a page's code runs wherever it is pasted, not only
in a checkout of the repository:

- ``torch_style_gpt.py``: a GPT written for PyTorch alone (nanoGPT's ``model.py``
  style), which chapter 3.5 runs unchanged with ``import sitp as torch``; read its
  source with ``importlib.resources.files("sitp.examples") / "torch_style_gpt.py"``;
- the scripts that draw the figures of chapters 3 and 4 (``ffn_figures``,
  ``cnn_figures``, ``optimizers``, ``mlp_optimizers``, ``primitives_figures``):
  ``from sitp.examples import ffn_figures``. In the repository they live beside the
  figures they draw, in ``docs/assets/``, and this folder links to them;
- the results of the long runs that the pages read (``*.json``), with the machine
  they were measured on.
"""
