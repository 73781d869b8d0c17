"""sitp.posttrain.prefs, .reward and .dpo, and GRPO's new options: against torch on the same
weights, by finite differences, and by hand."""

import math

import numpy as np
import pytest
import torch

import sitp
from sitp.data.tokens import ByteTokenizer
from sitp.models.gpt import GPT, GPTConfig
from sitp.models.port import load_module
from sitp.posttrain import dpo, prefs, reward, rl
from sitp.posttrain.chat import ChatTokenizer
from sitp.posttrain.tasks import get_task

TOK = ChatTokenizer(ByteTokenizer())
CFG = dict(vocab_size=12, block_size=12, n_layer=1, n_head=2, n_embd=16, rope=True)


def tiny_gpt(seed=0, **over):
    sitp.manual_seed(seed)
    return GPT(GPTConfig(**{**CFG, **over})).eval()


def torch_twin(model):
    t_gpt = load_module("gpt", "torch")
    twin = t_gpt.GPT(t_gpt.GPTConfig(**vars(model.config))).eval()
    twin.load_state_dict({k: torch.tensor(v.numpy().copy()) for k, v in model.state_dict().items()})
    return twin


def grads(module):
    return {k: p.grad.numpy().copy() for k, p in module.named_parameters() if p.grad is not None}


PROMPTS = [[0, 1, 2], [3, 4], [0, 5, 6, 7]]
CHOSEN = [[8, 9, 11], [10, 11], [2, 3, 4, 11]]
REJECTED = [[9, 11], [1, 2, 3, 4, 11], [6]]


# -------------------------------------------------------------------------- reward model
def test_bradley_terry_loss_and_gradients_match_torch_on_the_same_weights():
    gpt = tiny_gpt(1)
    rm = reward.RewardModel(gpt)
    rng = np.random.default_rng(0)
    w = rng.normal(0, 0.5, (1, CFG["n_embd"])).astype(np.float32)
    rm.head.weight.data = sitp.tensor(w)  # a head that is not zero, so every weight moves
    pairs = list(zip(PROMPTS, CHOSEN, REJECTED))
    r_c, r_r = reward.pair_scores(rm, pairs)
    loss = reward.bradley_terry_loss(r_c, r_r)
    loss.backward()

    twin = torch_twin(gpt)
    head = torch.nn.Linear(CFG["n_embd"], 1)
    with torch.no_grad():
        head.weight.copy_(torch.tensor(w))
        head.bias.zero_()

    def t_score(prompt, reply):
        seq = torch.tensor([prompt + reply])
        T = seq.shape[1]
        x = twin.transformer.wte(seq)
        for block in twin.transformer.h:
            x = block(x, (twin.rope_cos[:T], twin.rope_sin[:T]))
        return head(twin.transformer.ln_f(x)[0, -1])[0]

    t_c = torch.stack([t_score(p, c) for p, c, _ in pairs])
    t_r = torch.stack([t_score(p, r) for p, _, r in pairs])
    np.testing.assert_allclose(r_c.detach().numpy(), t_c.detach().numpy(), atol=1e-5)
    t_loss = -torch.nn.functional.logsigmoid(t_c - t_r).mean()
    t_loss.backward()
    assert abs(loss.item() - t_loss.item()) < 1e-5
    mine, theirs = grads(rm.gpt), {k: p.grad.numpy() for k, p in twin.named_parameters()}
    assert mine.keys() == {k for k, p in twin.named_parameters() if p.grad is not None}
    for k in mine:
        np.testing.assert_allclose(mine[k], theirs[k], atol=2e-5, err_msg=k)
    np.testing.assert_allclose(rm.head.weight.grad.numpy(), head.weight.grad.numpy(), atol=2e-5)


def test_bradley_terry_gradient_by_finite_differences():
    rng = np.random.default_rng(1)
    rc, rr = rng.normal(size=5), rng.normal(size=5)
    s_rc = sitp.tensor(rc, requires_grad=True)
    reward.bradley_terry_loss(s_rc, sitp.tensor(rr)).backward()

    def f(x):
        return float(np.mean(np.log1p(np.exp(-(x - rr)))))

    h = 1e-6
    fd = [(f(rc + h * e) - f(rc - h * e)) / (2 * h) for e in np.eye(5)]
    np.testing.assert_allclose(s_rc.grad.numpy(), fd, atol=1e-8)


def test_reward_model_learns_a_preference():
    """Chosen replies end with token 5, rejected ones with 6: 30 steps rank them."""
    rm = reward.RewardModel(tiny_gpt(2))
    rng = np.random.default_rng(0)
    pairs = [([0, 1], [int(rng.integers(7, 12)), 5], [int(rng.integers(7, 12)), 6])
             for _ in range(20)]  # fmt: skip
    assert reward.pair_accuracy(rm, pairs) == 0.0  # zero head: every score ties
    losses, _ = reward.train_reward_model(rm, pairs, steps=30, batch_size=8, lr=1e-2)
    assert losses[-1] < 0.5 * math.log(2) and reward.pair_accuracy(rm, pairs) == 1.0
    with pytest.raises(ValueError, match="at least one pair"):
        reward.train_reward_model(rm, [], 1)


# ----------------------------------------------------------------------------------- DPO
def test_dpo_loss_and_gradients_match_torch_on_the_same_weights():
    policy, ref = tiny_gpt(3), tiny_gpt(4)
    pairs = list(zip(PROMPTS, CHOSEN, REJECTED))
    pi_c, pi_r = dpo.pair_logprobs(policy, pairs)
    with sitp.no_grad():
        ref_c, ref_r = dpo.pair_logprobs(ref, pairs)
    loss, stats = dpo.dpo_loss(pi_c, pi_r, ref_c, ref_r, beta=0.5)
    loss.backward()

    t_pol, t_ref = torch_twin(policy), torch_twin(ref)

    def t_logp(model, prompt, reply):
        seq = prompt + reply
        logits = model(torch.tensor([seq[:-1]]))[0][0]
        logp = torch.log_softmax(logits, dim=-1)
        return sum(logp[len(prompt) - 1 + t, tok] for t, tok in enumerate(reply))

    def t_margins(model_c, model_r):
        return torch.stack([t_logp(model_c, p, c) - t_logp(model_r, p, r) for p, c, r in pairs])

    with torch.no_grad():
        t_ref_m = t_margins(t_ref, t_ref)
    t_m = 0.5 * (t_margins(t_pol, t_pol) - t_ref_m)
    t_loss = -torch.nn.functional.logsigmoid(t_m).mean()
    t_loss.backward()
    assert abs(loss.item() - t_loss.item()) < 1e-5
    assert stats["margin"] == pytest.approx(t_m.mean().item(), abs=1e-5)
    assert stats["accuracy"] == pytest.approx((t_m > 0).float().mean().item())
    theirs = {k: p.grad.numpy() for k, p in t_pol.named_parameters() if p.grad is not None}
    mine = grads(policy)
    assert mine.keys() == theirs.keys()
    for k in mine:
        np.testing.assert_allclose(mine[k], theirs[k], atol=2e-5, err_msg=k)


def test_dpo_gradient_by_finite_differences_on_a_weight():
    policy, ref = tiny_gpt(5).double(), tiny_gpt(6).double()
    pairs = list(zip(PROMPTS, CHOSEN, REJECTED))
    with sitp.no_grad():
        ref_c, ref_r = dpo.pair_logprobs(ref, pairs)

    def loss_of():
        pi_c, pi_r = dpo.pair_logprobs(policy, pairs)
        return dpo.dpo_loss(pi_c, pi_r, ref_c, ref_r, beta=0.3)[0]

    loss_of().backward()
    w = policy.transformer.h[0].mlp.c_fc.weight
    analytic = w.grad.numpy().copy()
    h = 1e-6
    for i, j in [(0, 0), (5, 3), (17, 9)]:
        base = w.data.numpy().copy()
        values = []
        for sign in (1, -1):
            bumped = base.copy()
            bumped[i, j] += sign * h
            w.data = sitp.tensor(bumped)
            with sitp.no_grad():
                values.append(loss_of().item())
        w.data = sitp.tensor(base)
        assert analytic[i, j] == pytest.approx((values[0] - values[1]) / (2 * h), abs=1e-7)


def test_dpo_raises_the_chosen_replies_and_starts_at_log2():
    policy, ref = tiny_gpt(7), tiny_gpt(7)
    pairs = list(zip(PROMPTS, CHOSEN, REJECTED))
    history = dpo.train_dpo(policy, ref, pairs, steps=15, batch_size=3, beta=0.5, lr=1e-2)
    assert history[0]["loss"] == pytest.approx(math.log(2), abs=1e-5)  # π = π_ref at first
    assert history[-1]["loss"] < 0.5 * math.log(2) and history[-1]["accuracy"] == 1.0
    with pytest.raises(ValueError, match="beta must be > 0"):
        dpo.dpo_loss(sitp.zeros(1), sitp.zeros(1), sitp.zeros(1), sitp.zeros(1), beta=0.0)


# ------------------------------------------------------------------------ preference data
def test_gold_utility_by_hand_and_the_styles():
    task = get_task("chain1")
    p = task.problems("heldout", 1, seed=0)[0]
    ref = task.reference(p)
    assert prefs.gold_utility(task, p, ref) == pytest.approx(4 - 0.05 * len(ref))
    polite = "Sure! " + ref + " Thanks!"  # polite counts once
    assert prefs.gold_utility(task, p, polite) == pytest.approx(5 - 0.05 * len(polite))
    assert prefs.gold_utility(task, p, "Thanks") == pytest.approx(1 - 0.3)
    convos = prefs.styled_conversations(task, [p], copies=40, seed=0)
    replies = {c[1]["content"] for c in convos}
    assert all(ref in r for r in replies) and len(replies) > 8  # many of the 16 styles
    with pytest.raises(ValueError, match="copies"):
        prefs.styled_conversations(task, [p], copies=0)


def test_label_pairs_follows_the_bradley_terry_annotator():
    task = get_task("chain1")
    p = task.problems("heldout", 1, seed=0)[0]
    prompt = prefs.prompt_ids(task, p, TOK)
    right, wrong = TOK.encode_text(task.reference(p)), TOK.encode_text("Answer: 99")
    gap = prefs.gold_utility(task, p, task.reference(p)) - prefs.gold_utility(task, p, "Answer: 99")
    pairs = [(p, prompt, right, wrong)] * 4000 + [(p, prompt, right, right)]
    labelled = prefs.label_pairs(task, TOK, pairs, temperature=1.0, seed=0)
    assert len(labelled) == 4000  # the identical pair is dropped
    share = np.mean([c == right for _, c, _ in labelled])
    expected = 1 / (1 + math.exp(-gap))
    assert abs(share - expected) < 4 * math.sqrt(expected * (1 - expected) / 4000)


def test_win_rate_counts_ties_as_half():
    task = get_task("chain1")
    ps = task.problems("heldout", 3, seed=0)
    enc = TOK.encode_text
    mine = [enc("Sure! " + task.reference(ps[0])), enc(task.reference(ps[1])), enc("0")]
    base = [enc(task.reference(ps[0])), enc(task.reference(ps[1])), enc(task.reference(ps[2]))]
    out = prefs.win_rate(task, TOK, ps, mine, base)
    assert (out["wins"], out["ties"], out["losses"]) == (1, 1, 1)
    assert out["win_rate"] == 0.5 and out["ci"][0] < 0.5 < out["ci"][1]


# ---------------------------------------------------------------------- GRPO's new options
def test_grpo_loss_per_sequence_normalisation_against_torch():
    rng = np.random.default_rng(2)
    B, T = 3, 5
    logp = -rng.uniform(0.1, 3, (B, T)).astype(np.float32)
    old = (logp + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    adv = rng.normal(0, 1, B).astype(np.float32)
    mask = np.array([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 1, 0]], dtype=np.float32)
    s_logp = sitp.tensor(logp, requires_grad=True)
    loss, _ = rl.grpo_loss(s_logp, sitp.tensor(old), sitp.tensor(adv), sitp.tensor(mask), 0.2,
                           norm="sequence")  # fmt: skip
    loss.backward()
    t_logp = torch.tensor(logp, requires_grad=True)
    ratio = torch.exp(t_logp - torch.tensor(old))
    a = torch.tensor(adv)[:, None]
    per = -torch.minimum(ratio * a, torch.clamp(ratio, 0.8, 1.2) * a)
    t_mask = torch.tensor(mask)
    t_loss = ((per * t_mask).sum(1) / t_mask.sum(1)).mean()
    t_loss.backward()
    assert abs(loss.item() - t_loss.item()) < 1e-6
    np.testing.assert_allclose(s_logp.grad.numpy(), t_logp.grad.numpy(), atol=1e-7)
    token, _ = rl.grpo_loss(sitp.tensor(logp), sitp.tensor(old), sitp.tensor(adv),
                            sitp.tensor(mask), 0.2)  # fmt: skip
    assert abs(token.item() - ((per * t_mask).sum() / t_mask.sum()).item()) < 1e-6
    with pytest.raises(ValueError, match="norm must be one of"):
        rl.grpo_loss(s_logp, sitp.tensor(old), sitp.tensor(adv), sitp.tensor(mask), norm="x")


def test_completion_entropy_matches_torch():
    model = tiny_gpt(8)
    prompts, replies = PROMPTS, CHOSEN
    _, mask, ent = rl.completion_logprobs(model, prompts, replies, 0.7, entropy=True)
    for b, (p, r) in enumerate(zip(prompts, replies)):
        seq = p + r
        with sitp.no_grad():
            logits = model(sitp.tensor([seq[:-1]]))[0].numpy()[0]
        logp = torch.log_softmax(torch.tensor(logits) / 0.7, dim=-1)
        want = -(logp.exp() * logp).sum(-1)
        for t in range(len(r)):
            assert abs(ent[b, len(p) - 1 + t].item() - want[len(p) - 1 + t].item()) < 1e-5


def test_grpo_step_reward_batch_equals_reward_fn():
    """Scoring all replies at once gives the same step as one call per reply."""
    results = []
    for batched in (False, True):
        model = tiny_gpt(9)
        opt = sitp.optim.AdamW(model.parameters(), lr=1e-2)
        gen = sitp.Generator().manual_seed(0)

        def fn(i, reply):
            return float(reply.count(3) + i)

        kwargs = {"reward_batch": lambda rows, rs: [fn(i, r) for i, r in zip(rows, rs)]} \
            if batched else {"reward_fn": fn}  # fmt: skip
        stats = rl.grpo_step(model, opt, [[0, 1], [2]], group_size=4, max_new_tokens=4,
                             stop_ids=(11,), generator=gen, epochs=2, norm="sequence",
                             **kwargs)  # fmt: skip
        results.append((stats, model.transformer.h[0].mlp.c_fc.weight.detach().numpy()))
    assert results[0][0] == results[1][0] and results[0][0]["entropy"] > 0
    np.testing.assert_array_equal(results[0][1], results[1][1])
    with pytest.raises(ValueError, match="exactly one of reward_fn and reward_batch"):
        rl.grpo_step(model, opt, [[0]], group_size=2, generator=gen)


# --------------------------------------------------------------------- sitp rm, dpo, rl
def make_init(path):
    from sitp.posttrain import cli

    sitp.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=48, n_layer=1, n_head=2,
                          n_embd=16))  # fmt: skip
    cli.save(path, model, sitp.optim.AdamW(model.parameters()), TOK, None,
             {"stage": "sft", "step": 0, "history": []})  # fmt: skip


def saved_weights(directory):
    from sitp.train import checkpoint as ckpt

    return ckpt.load_checkpoint(directory).model_state


@pytest.mark.parametrize("verb", ["rm", "dpo"])
def test_rm_and_dpo_resume_exactly(tmp_path, capsys, verb):
    from sitp.posttrain import cli

    main = {"rm": cli.main_rm, "dpo": cli.main_dpo}[verb]
    make_init(tmp_path / "init")
    base = ["--init", str(tmp_path / "init"), "--task", "addition1", "--problems", "12",
            "--batch-size", "4"]  # fmt: skip
    assert main(base + ["--out", str(tmp_path / "a"), "--steps", "4"]) == 0
    assert main(base + ["--out", str(tmp_path / "b"), "--steps", "2"]) == 0
    assert main(base + ["--out", str(tmp_path / "b"), "--steps", "4"]) == 0  # resume
    wa, wb = saved_weights(tmp_path / "a"), saved_weights(tmp_path / "b")
    assert wa.keys() == wb.keys() and (("head.weight" in wa) == (verb == "rm"))
    for k in wa:
        np.testing.assert_array_equal(wa[k], wb[k], err_msg=k)
    assert f"{verb} step 4: loss" in capsys.readouterr().out
    assert main(base + ["--out", str(tmp_path / "init"), "--steps", "1"]) == 2  # an sft dir
    assert f"not {verb}" in capsys.readouterr().err
    if verb == "rm":  # RL against the learned reward, then eval of the policy
        assert cli.main_rl(["--init", str(tmp_path / "init"), "--out", str(tmp_path / "rl"),
                            "--task", "addition1", "--reward-model", str(tmp_path / "a"),
                            "--steps", "2", "--prompts", "2", "--group", "2",
                            "--epochs", "2", "--kl", "0.1", "--norm", "sequence"]) == 0  # fmt: skip
        assert "rl step 2: reward" in capsys.readouterr().out
        assert cli.main_rl(["--init", str(tmp_path / "init"), "--out", str(tmp_path / "x"),
                            "--task", "addition1", "--reward-model", str(tmp_path / "init"),
                            "--steps", "1"]) == 2  # fmt: skip
        assert "not a reward model" in capsys.readouterr().err
    else:  # a DPO checkpoint is a GPT that sitp eval reads
        assert cli.main_eval([str(tmp_path / "a"), "--task", "addition1", "--problems", "3"]) == 0
