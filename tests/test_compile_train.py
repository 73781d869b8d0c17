"""``python -m sitp train --compile``: each step's forward and backward through
sitp.compile (src/sitp/train/trainer.py's grad_step). A compiled run stopped at step 4
and resumed to 8 ends with the weights, optimizer state and history of a compiled run
that went to 8 at once, bit for bit; and its losses follow an eager run's."""

import json

import numpy as np
from safetensors.numpy import load_file

import sitp
import sitp.train.checkpoint
import sitp.train.trainer
from sitp.train.cli import main

TINY = ["--set", "n_layer=1", "--set", "n_embd=16", "--set", "n_head=2"]


def train(out, *extra, steps=8):
    argv = ["train", "--model", "gpt", "--steps", str(steps), "--out", str(out), "--quiet"]
    argv += ["--eval-every", "0", "--save-every", "4", "--batch-size", "8", *TINY, *extra]
    return main(argv)


def arrays(path):
    return load_file(str(path))


def assert_same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_compiled_run_resumes_exactly(tmp_path, monkeypatch, capsys):
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train(whole, "--compile") == 0
    said = capsys.readouterr().out
    assert "sitp.compile: signature 0: compiled" in said, said  # no graph break

    real_save = sitp.train.checkpoint.save_checkpoint

    def save_then_die(*args, **kwargs):  # the process "crashes" right after the step-4 save
        real_save(*args, **kwargs)
        raise KeyboardInterrupt

    monkeypatch.setattr(sitp.train.trainer.ckpt, "save_checkpoint", save_then_die)
    assert train(parts, "--compile") == 130
    monkeypatch.undo()
    record = json.loads((parts / "record.json").read_text())
    assert record["step"] == 4 and record["train_config"]["compile"] is True
    assert main(["train", "--resume", "--out", str(parts), "--quiet"]) == 0  # compiled again

    for name in ("model.safetensors", "optimizer.safetensors"):
        assert_same(arrays(whole / name), arrays(parts / name))
    a, b = (json.loads((d / "record.json").read_text()) for d in (whole, parts))
    assert a["history"] == b["history"] and a["final"] == b["final"]


def test_compiled_losses_follow_eager(tmp_path, capsys):
    """The same run eager and compiled, with --grad-accum 2 (two micro-batches a step, so
    both compiled signatures run: no gradient yet, and one to add to): every step's loss
    within float32 rounding of eager's, and the weights after 6 steps close."""
    runs = {}
    for mode in ("--no-compile", "--compile"):
        out = tmp_path / mode
        assert train(out, mode, "--grad-accum", "2", steps=6) == 0
        if mode == "--compile":  # both signatures compiled, neither a graph break
            said = capsys.readouterr().out
            assert "signature 0: compiled" in said and "signature 1: compiled" in said, said
        record = json.loads((out / "record.json").read_text())
        runs[mode] = (record["history"]["train"], arrays(out / "model.safetensors"))
    (le, we), (lc, wc) = runs["--no-compile"], runs["--compile"]
    np.testing.assert_allclose(lc, le, rtol=1e-5)
    for k in we:
        np.testing.assert_allclose(wc[k], we[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_rerun_trace_returns_the_programs_values():
    """rerun_trace: the tracing call undoes its writes (an input written in place, a .grad)
    and returns what the program computes, as every later call does."""

    def f(x, w, buf):
        buf.mul_(0.5)
        y = (x * w).exp().sum()
        y.backward()
        return y.detach()

    rng = np.random.default_rng(0)
    x = sitp.tensor(rng.standard_normal(64).astype(np.float32))
    w = sitp.tensor(rng.standard_normal(64).astype(np.float32), requires_grad=True)
    buf = sitp.ones(3)
    cf = sitp.compile(f, rerun_trace=True)
    first = cf(x, w, buf)
    assert buf.tolist() == [0.5] * 3  # written once, not twice
    g1 = w.grad.numpy().copy()
    w.grad = None
    second = cf(x, w, buf)
    assert len(cf.entries) == 1 and cf.entries[0].program is not None
    assert first.item() == second.item()
    np.testing.assert_array_equal(g1, w.grad.numpy())
    w.grad = None
    assert cf.signature_known(x, w, buf) and not cf.signature_known(x[:3], w, buf)


def test_a_compiled_modules_first_call_is_its_program():
    """torch.compile(model) in a training script: a module's tracing call is rerun as its
    program (rerun_trace's default for modules), so its first step equals every later
    one's computation bit for bit, forward and the gradients of its backward."""

    class Net(sitp.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = sitp.nn.Linear(16, 16)

        def forward(self, x):
            return self.fc(x).tanh().sum(-1)

    x = sitp.tensor(np.random.default_rng(0).standard_normal((16, 16)).astype(np.float32))
    runs = []
    for calls in (1, 2):  # a fresh copy each: its first call, and its second
        sitp.manual_seed(0)
        net = Net()
        cm = sitp.compile(net)
        for _ in range(calls):
            net.zero_grad(set_to_none=True)
            y = cm(x)
            y.sum().backward()
        runs.append([y.detach().numpy(), net.fc.weight.grad.numpy().copy()])
        eager = net(x).detach().numpy()
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(runs[0][0], eager)  # (eager's libm tanh and sums differ)
