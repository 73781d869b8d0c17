"""sitp.data.shapes (the generated images) and sitp.examples.shapes_cnn (the LeNet of
chapter 3.3): the data is what its docstring says, the LeNet computes what torch's does
with the same weights (loss and every gradient, a training step and eval mode), a short
training learns, and the recorded results agree with themselves."""

import json
from importlib.resources import files

import numpy as np
import pytest
import torch

import sitp
from helpers import np_of
from sitp.data.shapes import CLASSES, make_shapes
from sitp.examples import shapes_cnn


def test_make_shapes_is_seeded_balanced_and_inside_the_frame():
    X, y = make_shapes(40, seed=3)
    X2, y2 = make_shapes(40, seed=3)
    assert X.shape == (40, 1, 16, 16) and X.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_array_equal(X, X2)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(X, make_shapes(40, seed=4)[0])
    assert np.bincount(y, minlength=len(CLASSES)).tolist() == [10] * len(CLASSES)
    clean, yc = make_shapes(200, noise=0.0, seed=5)
    assert clean.min() >= 0.0 and clean.max() <= 1.0
    assert np.all(clean.reshape(200, -1).max(1) > 0.3)  # every image has a stroke
    grid = np.arange(16) + 0.5
    mass = clean[:, 0].sum((1, 2))
    cy = (clean[:, 0].sum(2) * grid).sum(1) / mass  # the drawings' centres of mass
    cx = (clean[:, 0].sum(1) * grid).sum(1) / mass
    assert cy.std() > 1.0 and cx.std() > 1.0  # they move about the frame
    assert 4 < cy.min() and cy.max() < 12 and 4 < cx.min() and cx.max() < 12
    noisy, _ = make_shapes(200, noise=0.35, seed=5)
    assert abs(float((noisy - clean).std()) - 0.35) < 0.01


def _torch_lenet(model):
    """torch's LeNet with the sitp model's weights."""
    t = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1, bias=False),
        torch.nn.BatchNorm2d(16),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(256, 4),
    ).double()
    assert list(t.state_dict()) == list(model.state_dict())
    t.load_state_dict({k: torch.tensor(np_of(v)) for k, v in model.state_dict().items()})
    return t


def test_lenet_matches_torch_in_train_and_eval():
    sitp.manual_seed(0)
    model = shapes_cnn.lenet().to(sitp.float64)
    tmodel = _torch_lenet(model)
    X, y = make_shapes(12, seed=1)
    X = X.astype(np.float64)
    loss = sitp.nn.functional.cross_entropy(model(sitp.tensor(X)), sitp.tensor(y))
    tloss = torch.nn.functional.cross_entropy(tmodel(torch.tensor(X)), torch.tensor(y))
    np.testing.assert_allclose(loss.item(), tloss.item(), rtol=1e-10)
    loss.backward()
    tloss.backward()
    tparams = dict(tmodel.named_parameters())
    for name, p in model.named_parameters():
        np.testing.assert_allclose(np_of(p.grad), tparams[name].grad.numpy(), rtol=1e-8, atol=1e-12)
    model.eval()
    tmodel.eval()
    np.testing.assert_allclose(
        np_of(model(sitp.tensor(X))),
        tmodel(torch.tensor(X)).detach().numpy(),
        rtol=1e-9,
        atol=1e-12,
    )


def test_a_short_training_learns():
    r = shapes_cnn.train_shapes(0, n_train=400, n_test=200, epochs=2)
    assert r["train_loss"][1] < r["train_loss"][0] < np.log(4) + 0.2
    assert r["test_accuracy"] > 0.4  # chance is 0.25
    assert r["params"] == 2300


def test_recorded_runs_agree_with_their_summary():
    rec = json.loads((files("sitp.examples") / "shapes-cnn.json").read_text())
    for model, s in rec["summary"].items():
        acc = [r["test_accuracy"] for r in rec["runs"] if r["model"] == model]
        assert len(acc) == s["n"] >= 3
        assert s["mean"] == pytest.approx(np.mean(acc))
        assert s["sd"] == pytest.approx(np.std(acc, ddof=1))
    assert rec["summary"]["lenet"]["mean"] > rec["summary"]["mlp"]["mean"]
    for r in rec["runs"]:
        assert r["train_loss"] and r["train_cpu_seconds"] > 0
