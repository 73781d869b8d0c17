"""The LSTM rung of the ladder (sitp.models.rnn with cell_type="lstm", chapter 3.4).

The registry's parametrised tests (tests/test_models.py) cover its loss at init, a few
steps of learning and the same file run by PyTorch; here: the config, the parameter
count, the unrolled model against torch's whole-sequence ``nn.LSTM`` with the same
weights, and the trainer's ``--model lstm``.
"""

import numpy as np
import pytest

import sitp
from sitp.models import MODELS, build_model
from sitp.models.rnn import RNN, RNNConfig

torch = pytest.importorskip("torch")


def test_registry_entry_is_the_rnn_file_with_an_lstm_cell():
    spec = MODELS["lstm"]
    assert (spec.module, spec.model_class, spec.data) == ("rnn", "RNN", "sequence")
    assert spec.lr == MODELS["gru"].lr
    model = build_model("lstm", vocab_size=27)
    assert isinstance(model.cell, sitp.nn.LSTMCell)
    C, S, V = model.config.n_embd, model.config.n_embd2, 27
    # start, embedding, the four gates' weights and biases, the head
    expected = S + V * C + 4 * S * (C + S + 2) + (V * S + V)
    assert sum(p.numel() for p in model.parameters()) == expected


def test_unknown_cell_type_is_refused_by_name():
    with pytest.raises(ValueError, match="'lstm'.*'transformer'"):
        RNN(RNNConfig(cell_type="transformer"))


def test_unrolled_model_matches_torch_lstm_layer():
    """The model's loop of LSTMCell steps = torch.nn.LSTM over the sequence, h0 = start, c0 = 0."""
    sitp.manual_seed(0)
    model = build_model("lstm", vocab_size=7, n_embd=5, n_embd2=6)
    with sitp.no_grad():
        model.start.copy_(sitp.randn(1, 6))  # a non-zero start, so that h_{-1} matters
    idx = sitp.tensor(np.random.default_rng(0).integers(0, 7, (3, 4)))
    Y = sitp.tensor(np.random.default_rng(1).integers(0, 7, (3, 4)))
    logits, loss = model(idx, Y)
    loss.backward()

    t = lambda p: torch.tensor(p.detach().numpy().copy(), requires_grad=True)  # noqa: E731
    emb, start, head_w, head_b = (
        t(model.wte.weight),
        t(model.start),
        t(model.lm_head.weight),
        t(model.lm_head.bias),
    )
    lstm = torch.nn.LSTM(5, 6, batch_first=True)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(lstm, name + "_l0").copy_(
                torch.tensor(getattr(model.cell, name).detach().numpy())
            )
    x = torch.nn.functional.embedding(torch.tensor(idx.numpy()), emb)
    h0 = start.expand(3, 6).unsqueeze(0).contiguous()
    out, _ = lstm(x, (h0, torch.zeros(1, 3, 6)))
    tlogits = out @ head_w.T + head_b
    tloss = torch.nn.functional.cross_entropy(
        tlogits.reshape(-1, 7), torch.tensor(Y.numpy()).reshape(-1)
    )
    tloss.backward()

    np.testing.assert_allclose(logits.detach().numpy(), tlogits.detach().numpy(), atol=1e-5)
    for ours, theirs in [
        (model.start, start),
        (model.wte.weight, emb),
        (model.cell.weight_hh, lstm.weight_hh_l0),
        (model.cell.bias_ih, lstm.bias_ih_l0),
    ]:
        np.testing.assert_allclose(ours.grad.numpy(), theirs.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_trainer_trains_the_lstm(tmp_path):
    from sitp.train.trainer import TrainConfig, Trainer

    cfg = TrainConfig(model="lstm", steps=3, batch_size=8, eval_every=0, save_every=0)
    record = Trainer.fresh(cfg, tmp_path, {"n_embd": 8, "n_embd2": 8}).run(
        log=lambda line: None, progress=False
    )
    assert record["model_config"]["cell_type"] == "lstm"
    assert all(np.isfinite(record["final"][k]) for k in ("train", "val", "test"))
