"""Complete models of the book, one module per model, in the order the chapters build them.

An application (layer 6 of docs/layout.md): each model is written against torch's API
(``sitp.nn``, ``sitp.nn.functional``), as a PyTorch user would write it.

* :mod:`sitp.models.bigram` — the bigram language model by counting (chapter 1).
* :mod:`sitp.models.neural_bigram` — the bigram as a learned table of logits (chapter 1).
* :mod:`sitp.models.mlp` — the MLP of Bengio et al. 2003 (chapter 3.1).
* :mod:`sitp.models.wavenet` — the WaveNet-style hierarchical model (chapter 3.3).
* :mod:`sitp.models.rnn` — the vanilla RNN, the GRU and the LSTM (chapter 3.4).
* :mod:`sitp.models.gpt` — the nanoGPT-style transformer (chapter 3.5).
* :mod:`sitp.models.sampling` — temperature and top-k sampling of names.
* :mod:`sitp.models.port` — the same model files run with PyTorch.

:data:`MODELS` is the ladder that ``python -m sitp train --model NAME`` trains: each
entry says which class and config build the model, and how it gets its batches —
``"context"`` models (bigram, MLP, WaveNet) see a window of the last ``block_size``
characters (:func:`sitp.data.build_context_dataset`); ``"sequence"`` models (RNN, GRU,
LSTM, GPT) read a whole name and predict every next character
(:func:`sitp.data.build_sequence_dataset`).

Example:
    >>> from sitp.models import MODELS, build_model
    >>> list(MODELS)
    ['bigram', 'mlp', 'wavenet', 'rnn', 'gru', 'lstm', 'gpt']
    >>> MODELS["wavenet"].data, MODELS["gpt"].data
    ('context', 'sequence')
    >>> model = build_model("mlp", vocab_size=27, n_hidden=100)
    >>> model.config.n_hidden, model.block_size
    (100, 3)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from sitp.models.port import load_module


@dataclass(frozen=True)
class ModelSpec:
    """One rung of the ladder: how to build a model and feed it.

    Attributes:
        name: the registry key (``--model NAME``).
        module: the model file under ``sitp.models``.
        model_class: the ``nn.Module`` class in it.
        config_class: its config dataclass.
        data: ``"context"`` (windows of ``block_size`` characters, target of shape (N,))
            or ``"sequence"`` (whole names, targets of shape (N, T) padded with -1).
        config_overrides: config fields this entry sets (the GRU is the RNN file
            with ``cell_type="gru"``).
        lr: the default AdamW learning rate of ``sitp train``.
    """

    name: str
    module: str
    model_class: str
    config_class: str
    data: str
    config_overrides: dict = field(default_factory=dict)
    lr: float = 1e-3

    def load(self, backend: str = "sitp"):
        """The model file as a module, run by sitp or by PyTorch (:mod:`sitp.models.port`)."""
        return load_module(self.module, backend)

    def make_config(self, backend: str = "sitp", **fields):
        """The config dataclass with the registry's overrides, then ``fields``."""
        config_class = getattr(self.load(backend), self.config_class)
        return config_class(**{**self.config_overrides, **fields})

    def build(self, config, backend: str = "sitp"):
        """The model for ``config`` (a config of :meth:`make_config`, or a dict of its fields)."""
        mod = self.load(backend)
        if isinstance(config, dict):
            config = getattr(mod, self.config_class)(**config)
        return getattr(mod, self.model_class)(config)


MODELS: dict[str, ModelSpec] = {
    "bigram": ModelSpec("bigram", "neural_bigram", "Bigram", "BigramConfig", "context", lr=0.1),
    "mlp": ModelSpec("mlp", "mlp", "MLP", "MLPConfig", "context", lr=1e-2),
    "wavenet": ModelSpec("wavenet", "wavenet", "WaveNet", "WaveNetConfig", "context", lr=1e-2),
    "rnn": ModelSpec(
        "rnn", "rnn", "RNN", "RNNConfig", "sequence", config_overrides={"cell_type": "rnn"}, lr=5e-3
    ),
    "gru": ModelSpec(
        "gru", "rnn", "RNN", "RNNConfig", "sequence", config_overrides={"cell_type": "gru"}, lr=5e-3
    ),
    "lstm": ModelSpec(
        "lstm",
        "rnn",
        "RNN",
        "RNNConfig",
        "sequence",
        config_overrides={"cell_type": "lstm"},
        lr=5e-3,
    ),
    "gpt": ModelSpec("gpt", "gpt", "GPT", "GPTConfig", "sequence", lr=3e-3),
}


def build_model(name: str, backend: str = "sitp", **config_fields):
    """Builds ladder model ``name`` with its config's defaults overridden by ``config_fields``."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    spec = MODELS[name]
    return spec.build(spec.make_config(backend, **config_fields), backend)


def config_dict(config) -> dict:
    """A model config as a plain dict (for record.json)."""
    return dataclasses.asdict(config)


__all__ = ["MODELS", "ModelSpec", "build_model", "config_dict"]
