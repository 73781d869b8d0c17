"""The ladder of models (sitp.models): shapes, the loss at init, learning, and PyTorch parity.

Every model file is PyTorch code with ``sitp`` in its import lines, so the same
source runs with both libraries (sitp.models.port); with the same weights and
inputs the two must agree on logits, loss and gradients. A nanoGPT-style file
written for PyTorch alone (tests/torch_style_gpt.py) must also run unchanged with
sitp standing in for torch.
"""

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import sitp
import sitp.nn
import sitp.nn.functional
from sitp.data import Vocab, build_context_dataset, build_sequence_dataset, load_names
from sitp.models import MODELS, build_model
from sitp.models.port import load_module, torch_source
from sitp.models.sampling import generate, sample_names

torch = pytest.importorskip("torch")

V = 27
LOG_V = math.log(V)
RTOL, ATOL = 1e-4, 1e-5


@pytest.fixture(scope="module")
def words():
    return load_names("offline")[:400]


def batch_for(name, words, n=32):
    """The first ``n`` examples of the model's kind of dataset."""
    vocab = Vocab(load_names("offline"))
    spec = MODELS[name]
    if spec.data == "context":
        X, Y = build_context_dataset(words, vocab, spec.make_config().block_size)
    else:
        X, Y = build_sequence_dataset(words, vocab, 12)
    return X[:n], Y[:n]


def copy_weights(src, dst):
    """Loads src's state_dict into dst (either library into either)."""
    src_sd = src.state_dict()
    if isinstance(dst, torch.nn.Module):
        dst.load_state_dict(
            {k: torch.tensor(np.asarray(v.detach().numpy()).copy()) for k, v in src_sd.items()}
        )
    else:
        dst.load_state_dict(
            {k: sitp.tensor(v.detach().cpu().numpy().copy()) for k, v in src_sd.items()}
        )


def np_(t):
    return t.detach().cpu().numpy() if isinstance(t, torch.Tensor) else t.detach().numpy()


# ------------------------------------------------------------------ the registry
def test_registry_lists_the_ladder():
    assert list(MODELS) == ["bigram", "mlp", "wavenet", "rnn", "gru", "lstm", "gpt"]
    assert {k: v.data for k, v in MODELS.items()} == {
        "bigram": "context",
        "mlp": "context",
        "wavenet": "context",
        "rnn": "sequence",
        "gru": "sequence",
        "lstm": "sequence",
        "gpt": "sequence",
    }
    assert isinstance(build_model("gru", vocab_size=V).cell, sitp.nn.GRUCell)
    assert isinstance(build_model("rnn", vocab_size=V).cell, sitp.nn.RNNCell)
    with pytest.raises(KeyError, match="unknown model"):
        build_model("transformer")


def test_parameter_counts_match_makemore():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    assert count(build_model("bigram", vocab_size=V)) == V * V
    assert count(build_model("mlp", vocab_size=V)) == 11_897  # makemore part 2
    assert count(build_model("wavenet", vocab_size=V)) == 76_579  # makemore part 5
    gpt = build_model("gpt", vocab_size=V)
    assert gpt.lm_head.weight is gpt.transformer.wte.weight  # tied, counted once


def test_torch_source_rewrites_only_import_lines():
    src = "import sitp as torch\nimport sitp.nn as nn\nfrom sitp.nn import functional as F\ns = 'sitp'\n"
    assert torch_source(src) == (
        "import torch as torch\nimport torch.nn as nn\n"
        "from torch.nn import functional as F\ns = 'sitp'\n"
    )
    for name in ("neural_bigram", "mlp", "wavenet", "rnn", "gpt", "sampling"):
        text = Path(load_module(name).__file__).read_text()
        body = [ln for ln in text.splitlines() if ln.startswith(("import", "from"))]
        assert all("sitp" not in ln or ln.split()[1].split(".")[0] == "sitp" for ln in body)
        mod = load_module(name, "torch")
        assert mod.torch is torch


# ------------------------------------------------------- shapes and loss at init
@pytest.mark.parametrize("name", list(MODELS))
def test_forward_shapes_and_loss_at_init(name, words):
    sitp.manual_seed(0)
    model = build_model(name, vocab_size=V)
    X, Y = batch_for(name, words)
    logits, loss = model(X, Y)
    if MODELS[name].data == "context":
        assert tuple(logits.shape) == (32, V)
    else:
        assert tuple(logits.shape) == (32, 12, V)
    assert loss.ndim == 0
    # a fresh model is nearly uniform: about log V = 3.2958 nats
    assert abs(loss.item() - LOG_V) < 0.1, loss.item()
    logits2, loss2 = model(X)
    assert loss2 is None and tuple(logits2.shape) == tuple(logits.shape)


@pytest.mark.parametrize("name", list(MODELS))
def test_a_few_steps_reduce_the_loss(name, words):
    sitp.manual_seed(1)
    small = {
        "gpt": {"n_layer": 2, "n_embd": 32},
        "rnn": {"n_embd2": 32},
        "gru": {"n_embd2": 32},
    }.get(name, {})
    model = build_model(name, vocab_size=V, **small)
    X, Y = batch_for(name, words)
    opt = sitp.optim.AdamW(model.parameters(), lr=MODELS[name].lr)
    losses = []
    for _ in range(12):
        _, loss = model(X, Y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] - 0.3, losses


# ---------------------------------------------------------------- PyTorch parity
@pytest.mark.parametrize("name", list(MODELS))
def test_same_file_same_numbers_in_torch(name, words):
    """The model file run by PyTorch, with sitp's weights: logits, loss, grads agree."""
    spec = MODELS[name]
    sitp.manual_seed(2)
    model = build_model(name, vocab_size=V)
    tmodel = spec.build(spec.make_config("torch", vocab_size=V), "torch")
    copy_weights(model, tmodel)
    X, Y = batch_for(name, words)
    logits, loss = model(X, Y)
    loss.backward()
    tlogits, tloss = tmodel(torch.tensor(X.numpy()), torch.tensor(Y.numpy()))
    tloss.backward()
    np.testing.assert_allclose(np_(logits), np_(tlogits), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=RTOL)
    tparams = dict(tmodel.named_parameters())
    names = [n for n, _ in model.named_parameters()]
    assert names == list(tparams)
    for n, p in model.named_parameters():
        np.testing.assert_allclose(
            np_(p.grad), np_(tparams[n].grad), rtol=RTOL, atol=ATOL, err_msg=n
        )
    if name == "wavenet":  # BatchNorm's running statistics follow torch's too
        for (n, b), (_, tb) in zip(model.named_buffers(), tmodel.named_buffers()):
            np.testing.assert_allclose(np_(b), np_(tb), rtol=RTOL, atol=ATOL, err_msg=n)


def load_torch_style_gpt(backend):
    """Imports tests/torch_style_gpt.py with ``torch`` meaning PyTorch or sitp."""
    path = Path(__file__).with_name("torch_style_gpt.py")
    name = f"torch_style_gpt__{backend}"
    swap = {}
    if backend == "sitp":
        swap = {"torch": sitp, "torch.nn": sitp.nn, "torch.nn.functional": sitp.nn.functional}
    saved = {k: sys.modules.get(k) for k in swap}
    sys.modules.update(swap)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    return module


@pytest.fixture(scope="module")
def gpt_pair():
    t_mod, s_mod = load_torch_style_gpt("torch"), load_torch_style_gpt("sitp")
    assert s_mod.torch is sitp and t_mod.torch is torch
    torch.manual_seed(0)
    tmodel = t_mod.GPT(t_mod.GPTConfig())
    smodel = s_mod.GPT(s_mod.GPTConfig())
    copy_weights(tmodel, smodel)
    return tmodel, smodel


def test_pytorch_file_runs_unchanged_with_sitp(gpt_pair, words):
    tmodel, smodel = gpt_pair
    assert isinstance(smodel, sitp.nn.Module) and isinstance(tmodel, torch.nn.Module)
    assert smodel.get_num_params() == tmodel.get_num_params()
    X, Y = batch_for("gpt", words, n=16)
    for flash in (True, False):  # F.scaled_dot_product_attention, then the manual path
        for blk in list(smodel.transformer.h) + list(tmodel.transformer.h):
            blk.attn.flash = flash
        logits, loss = smodel(X, Y)
        smodel.zero_grad()
        loss.backward()
        tmodel.zero_grad()
        tlogits, tloss = tmodel(torch.tensor(X.numpy()), torch.tensor(Y.numpy()))
        tloss.backward()
        np.testing.assert_allclose(np_(logits), np_(tlogits), rtol=RTOL, atol=ATOL)
        np.testing.assert_allclose(loss.item(), tloss.item(), rtol=RTOL)
        tparams = dict(tmodel.named_parameters())
        for n, p in smodel.named_parameters():
            np.testing.assert_allclose(
                np_(p.grad),
                np_(tparams[n].grad),
                rtol=RTOL,
                atol=ATOL,
                err_msg=f"{n} (flash={flash})",
            )
    assert smodel.transformer.h[0].attn.flash is False
    # inference: nanoGPT keeps the time dim of the last position with x[:, [-1], :]
    logits, loss = smodel(X)
    tlogits, _ = tmodel(torch.tensor(X.numpy()))
    assert loss is None and tuple(logits.shape) == (16, 1, 27)
    np.testing.assert_allclose(np_(logits), np_(tlogits), rtol=RTOL, atol=ATOL)


def test_pytorch_generate_runs_unchanged_with_sitp(gpt_pair):
    _, smodel = gpt_pair
    sitp.manual_seed(0)
    out = smodel.generate(sitp.zeros((3, 1), dtype=sitp.long), max_new_tokens=5, top_k=5)
    assert tuple(out.shape) == (3, 6) and out.dtype == sitp.int64
    # top_k=1 is greedy: the argmax path, whatever the random numbers
    a = smodel.generate(sitp.zeros((2, 1), dtype=sitp.long), 4, top_k=1)
    b = smodel.generate(sitp.zeros((2, 1), dtype=sitp.long), 4, top_k=1)
    assert a.tolist() == b.tolist()


# ------------------------------------------------------------------- sampling
@pytest.mark.parametrize("name", ["mlp", "gpt"])
def test_sampling_with_temperature_and_top_k(name):
    sitp.manual_seed(0)
    model = build_model(name, vocab_size=V).eval()
    fixed = MODELS[name].data == "context"
    itos = Vocab(load_names("offline")).itos
    g = sitp.Generator().manual_seed(5)
    names = sample_names(
        model, itos, 6, max_len=8, temperature=0.7, top_k=4, generator=g, fixed_context=fixed
    )
    assert len(names) == 6 and all(len(n) <= 8 and "." not in n for n in names)
    g2 = sitp.Generator().manual_seed(5)
    assert names == sample_names(
        model, itos, 6, max_len=8, temperature=0.7, top_k=4, generator=g2, fixed_context=fixed
    )
    # top-k 1 is the argmax: every row the same
    idx = generate(model, sitp.zeros((4, 1), dtype=sitp.long), 5, top_k=1, fixed_context=fixed)
    assert len({tuple(r) for r in idx.tolist()}) == 1
    with pytest.raises(ValueError, match="temperature"):
        generate(model, sitp.zeros((1, 1), dtype=sitp.long), 1, temperature=0.0)


def test_sampling_file_runs_with_torch():
    """sampling.py is PyTorch code too: its torch copy samples from a torch model."""
    t_sampling = load_module("sampling", "torch")
    spec = MODELS["gpt"]
    tmodel = spec.build(spec.make_config("torch", vocab_size=V), "torch").eval()
    g = torch.Generator().manual_seed(0)
    names = t_sampling.sample_names(
        tmodel, Vocab(load_names("offline")).itos, 3, max_len=6, top_k=3, generator=g
    )
    assert len(names) == 3 and all(len(n) <= 6 for n in names)
