"""Section 5.4's serving features: a padded batch, many samples from one prefill, and
grouped-query / multi-query attention as a model option.

A prompt decoded in a batch of prompts of other lengths draws the same tokens as alone;
a GQA model agrees with PyTorch running the same file on the same weights (forward and
gradients) and with the multi-head model whose key and value heads are its own, copied.
"""

import numpy as np
import pytest

import sitp
from sitp.models.engine import Engine, left_pad
from sitp.models.gpt import GPT, GPTConfig, padded_mask
from sitp.models.port import load_module

TINY = dict(block_size=16, vocab_size=27, n_layer=2, n_head=4, n_embd=32)
MODERN = dict(rope=True, norm="rmsnorm", qk_norm=True, mlp="relu2", bias=False, logit_softcap=5.0)
ATOL = 1e-5


def model_for(**fields):
    sitp.manual_seed(0)
    model = GPT(GPTConfig(**{**TINY, **fields})).eval()
    with sitp.no_grad():  # larger weights than at init, so that positions matter
        for p in model.parameters():
            p.add_(sitp.randn(p.shape) * 0.2)
    return model


PROMPTS = [[3, 1, 4], [1, 5, 9, 2, 6, 5, 3], [5], [8, 9, 7, 9, 3]]


@pytest.mark.parametrize("fields", [{}, MODERN, dict(MODERN, n_kv_head=2)],
                         ids=["learned", "modern", "gqa"])  # fmt: skip
def test_a_padded_batch_decodes_each_prompt_as_alone(fields):
    engine = Engine(model_for(**fields))
    batch = list(engine.stream(PROMPTS, 6, temperature=0.0))
    tokens = engine.generate(PROMPTS, 6, temperature=0.0)
    for b, prompt in enumerate(PROMPTS):
        alone = list(engine.stream(sitp.tensor([prompt]), 6, temperature=0.0))
        for (tok_B1, logits_BV), (tok_11, logits_1V) in zip(batch, alone):
            np.testing.assert_allclose(logits_BV[b].numpy(), logits_1V[0].numpy(), atol=ATOL)
            assert tok_B1[b].tolist() == tok_11[0].tolist()
        assert tokens[b] == prompt + [int(t[b]) for t, _ in batch]


def test_padding_masks_and_positions():
    idx_BT, pad = left_pad([[7, 8], [1, 2, 3, 4]])
    assert idx_BT.tolist() == [[0, 0, 7, 8], [1, 2, 3, 4]] and pad == [2, 0]
    mask = padded_mask(sitp.tensor(pad), 2, 4)  # the last 2 of 4 slots
    assert tuple(mask.shape) == (2, 1, 2, 4)
    assert mask[0, 0].tolist() == [[False, False, True, False], [False, False, True, True]]
    assert mask[1, 0].tolist() == [[True, True, True, False], [True, True, True, True]]
    model = model_for()
    with pytest.raises(ValueError, match="padding must be 2 counts >= 0"):
        model.make_kv_cache(2, padding=[1])
    with pytest.raises(ValueError, match="use_cache=False takes prompts of one length"):
        list(Engine(model).stream([[1], [2, 3]], 2, use_cache=False))
    with pytest.raises(ValueError, match="at least one token"):
        left_pad([[1], []])


def test_many_samples_from_one_prefill():
    model = model_for(**MODERN)
    prompt_1T = sitp.tensor([[2, 7, 1, 8]])
    g = sitp.Generator().manual_seed(5)
    once = Engine(model).generate(prompt_1T, 8, num_samples=4, top_k=5, generator=g)
    g = sitp.Generator().manual_seed(5)
    four = Engine(model).generate(prompt_1T.repeat(4, 1), 8, top_k=5, generator=g)
    assert once.tolist() == four.tolist() and tuple(once.shape) == (4, 12)
    assert len({tuple(r) for r in once.tolist()}) > 1  # the samples went their own ways
    two = Engine(model).generate([[1, 2], [3]], 3, num_samples=2, temperature=0.0)
    assert [r[: len(p)] for r, p in zip(two, [[1, 2], [1, 2], [3], [3]])] == [
        [1, 2], [1, 2], [3], [3]]  # fmt: skip
    assert two[0] == two[1] and two[2] == two[3]  # greedy: each prompt's samples agree


@pytest.mark.parametrize("n_kv_head", [2, 1], ids=["gqa", "mqa"])
def test_grouped_query_attention_equals_multi_head_with_copied_heads(n_kv_head):
    gqa = model_for(**MODERN, n_kv_head=n_kv_head)
    mha = GPT(GPTConfig(**TINY, **MODERN)).eval()
    state = {k: v.numpy().copy() for k, v in gqa.state_dict().items()}
    C, H, D = 32, 4, 8
    for name in [k for k in state if k.endswith("c_attn.weight")]:
        w = state[name]
        q, k, v = w[:C], w[C : C + n_kv_head * D], w[C + n_kv_head * D :]
        rows = [g * D + d for h in range(H) for g in [h // (H // n_kv_head)] for d in range(D)]
        state[name] = np.concatenate([q, k[rows], v[rows]])
    mha.load_state_dict({k: sitp.tensor(v) for k, v in state.items()})
    idx_BT = sitp.randint(0, 27, (2, 9), generator=sitp.Generator().manual_seed(4))
    with sitp.no_grad():
        np.testing.assert_allclose(gqa(idx_BT)[0].numpy(), mha(idx_BT)[0].numpy(), atol=ATOL)
    assert tuple(gqa.transformer.h[0].attn.c_attn.weight.shape) == (C + 2 * n_kv_head * D, C)
    cache = gqa.make_kv_cache(3)
    assert tuple(cache.k_LBGSD.shape) == (2, 3, n_kv_head, 16, D)  # H / G times smaller


@pytest.mark.parametrize("n_kv_head", [2, 1], ids=["gqa", "mqa"])
def test_grouped_query_cached_decoding_equals_recomputation(n_kv_head):
    model = model_for(**MODERN, n_kv_head=n_kv_head)
    seq_BT = sitp.randint(0, 27, (2, 12), generator=sitp.Generator().manual_seed(1))
    cache = model.make_kv_cache(2)
    with sitp.no_grad():
        model(seq_BT[:, :3], kv_cache=cache)
        for t in range(3, 12):
            step_B1V, _ = model(seq_BT[:, t : t + 1], kv_cache=cache)
            full_BTV, _ = model(seq_BT[:, : t + 1])
            np.testing.assert_allclose(step_B1V[:, 0].numpy(), full_BTV[:, -1].numpy(), atol=ATOL)


@pytest.mark.parametrize("n_kv_head", [2, 1], ids=["gqa", "mqa"])
def test_grouped_query_matches_torch_forward_gradients_and_decoding(n_kv_head):
    torch = pytest.importorskip("torch")
    t_gpt, t_engine = load_module("gpt", "torch"), load_module("engine", "torch")
    smodel = model_for(**MODERN, n_kv_head=n_kv_head)
    tmodel = t_gpt.GPT(t_gpt.GPTConfig(**TINY, **MODERN, n_kv_head=n_kv_head)).eval()
    tmodel.load_state_dict(
        {k: torch.tensor(v.numpy().copy()) for k, v in smodel.state_dict().items()}
    )
    g = np.random.default_rng(0)
    idx, targets = g.integers(0, 27, (2, 10)), g.integers(0, 27, (2, 10))
    s_logits, s_loss = smodel(sitp.tensor(idx), sitp.tensor(targets))
    t_logits, t_loss = tmodel(torch.tensor(idx), torch.tensor(targets))
    np.testing.assert_allclose(s_logits.detach().numpy(), t_logits.detach().numpy(), atol=1e-4)
    s_loss.backward()
    t_loss.backward()
    t_grads = dict(tmodel.named_parameters())
    for name, p in smodel.named_parameters():
        np.testing.assert_allclose(
            p.grad.numpy(), t_grads[name].grad.numpy(), atol=1e-4, err_msg=name
        )
    s_out = Engine(smodel).generate(PROMPTS, 5, temperature=0.0)
    t_out = t_engine.Engine(tmodel).generate(PROMPTS, 5, temperature=0.0)
    assert s_out == t_out


def test_n_kv_head_must_divide_n_head():
    with pytest.raises(ValueError, match="n_kv_head must divide n_head 4"):
        GPTConfig(n_head=4, n_kv_head=3)
    assert GPTConfig(n_head=4).n_kv_head == 0  # 0: as many as query heads (multi-head)


def test_transposed_weights_change_the_layout_not_the_model():
    from sitp.models.engine import transpose_weights

    model = model_for(**MODERN)
    idx_BT = sitp.randint(0, 27, (2, 7), generator=sitp.Generator().manual_seed(6))
    params = list(model.parameters())
    with sitp.no_grad():
        before = model(idx_BT)[0].numpy().copy()
        transpose_weights(model)
        after = model(idx_BT)[0].numpy()
    assert all(a is b for a, b in zip(params, model.parameters()))  # the same Parameters
    w = model.transformer.h[0].mlp.c_fc.weight
    assert tuple(w.shape) == (128, 32) and w.stride() == (1, 128)  # column-major now
    np.testing.assert_allclose(after, before, atol=ATOL)


def test_joint_qk_norm_and_rotary_equal_separate_calls_bit_for_bit():
    """The attention normalises and rotates q and k in one call: the same bits as one
    call each, the straightforward code, written out here."""
    import sitp.nn.functional as F
    from sitp.models.gpt import apply_rotary

    model = model_for(**MODERN, n_kv_head=2)
    attn, T = model.transformer.h[0].attn, 9
    x_BTC = sitp.randn(2, T, 32, generator=sitp.Generator().manual_seed(8))
    rope = model.rope_cos[:T], model.rope_sin[:T]
    with sitp.no_grad():
        q, k, v = attn.c_attn(x_BTC).split([32, 16, 16], dim=2)
        q = apply_rotary(F.rms_norm(q.view(2, T, 4, 8).transpose(1, 2), (8,)), *rope)
        k = apply_rotary(F.rms_norm(k.view(2, T, 2, 8).transpose(1, 2), (8,)), *rope)
        v = v.view(2, T, 2, 8).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        want = attn.c_proj(y.transpose(1, 2).contiguous().view(2, T, 32))
        np.testing.assert_array_equal(attn(x_BTC, rope).numpy(), want.numpy())
