"""Inference with a KV cache (section 5.4): cached decoding equals full recomputation.

At every step the logits of the last position, computed from the cache, must equal
those of a forward pass over the whole sequence, with learned positions and with
rotary ones (whose angles must use absolute positions). The cache never holds more
than block_size positions: past that it refuses, and so does the engine up front.
"""

import numpy as np
import pytest

import sitp
from sitp.models.engine import Engine, sample_next
from sitp.models.gpt import GPT, GPTConfig, KVCache, causal_mask
from sitp.models.port import load_module

TINY = dict(block_size=16, vocab_size=27, n_layer=2, n_head=4, n_embd=32)
ATOL = 1e-5
MODERN = dict(rope=True, norm="rmsnorm", qk_norm=True, mlp="relu2", bias=False, logit_softcap=5.0)


def model_for(**fields):
    sitp.manual_seed(0)
    model = GPT(GPTConfig(**TINY, **fields)).eval()
    with sitp.no_grad():  # larger weights than at init, so that positions matter
        for p in model.parameters():
            p.add_(sitp.randn(p.shape) * 0.2)
    return model


@pytest.mark.parametrize("fields", [{}, {"rope": True}, MODERN], ids=["learned", "rope", "modern"])
def test_cached_decoding_equals_recomputation_at_every_step(fields):
    model = model_for(**fields)
    g = sitp.Generator().manual_seed(1)
    seq_BT = sitp.randint(0, 27, (2, 16), generator=g)
    cache = model.make_kv_cache(2)
    with sitp.no_grad():
        logits, _ = model(seq_BT[:, :4], kv_cache=cache)  # prefill 4 positions
        full, _ = model(seq_BT[:, :4])
        np.testing.assert_allclose(logits.numpy(), full.numpy(), atol=ATOL)
        for t in range(4, 16):  # then one position at a time
            step_B1V, _ = model(seq_BT[:, t : t + 1], kv_cache=cache)
            full_BTV, _ = model(seq_BT[:, : t + 1])
            assert cache.pos == t + 1
            np.testing.assert_allclose(step_B1V[:, 0].numpy(), full_BTV[:, -1].numpy(), atol=ATOL)


def test_a_chunk_after_the_prefill_sees_the_cache_and_its_own_past():
    model = model_for(rope=True)
    idx_BT = sitp.randint(0, 27, (3, 11), generator=sitp.Generator().manual_seed(2))
    cache = model.make_kv_cache(3)
    with sitp.no_grad():
        model(idx_BT[:, :5], kv_cache=cache)
        chunk, _ = model(idx_BT[:, 5:], kv_cache=cache)  # 6 positions at once, offset 5
        full, _ = model(idx_BT)
    np.testing.assert_allclose(chunk.numpy(), full[:, 5:].numpy(), atol=ATOL)
    assert causal_mask(1, 7) is None
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]


def test_the_cache_refuses_to_pass_block_size():
    model = model_for(rope=True)
    cache = model.make_kv_cache(1)
    with sitp.no_grad():
        model(sitp.zeros((1, 15), dtype=sitp.long), kv_cache=cache)
        model(sitp.zeros((1, 1), dtype=sitp.long), kv_cache=cache)  # exactly full: 16
        assert cache.pos == 16 == cache.block_size
        with pytest.raises(ValueError, match="holds 16 positions; 1 more would pass block_size 16"):
            model(sitp.zeros((1, 1), dtype=sitp.long), kv_cache=cache)
        assert cache.pos == 16  # nothing was written
        with pytest.raises(ValueError, match="batch of 1, got 2"):
            model(sitp.zeros((2, 1), dtype=sitp.long), kv_cache=model.make_kv_cache(1))
    assert tuple(cache.k_LBHSD.shape) == (2, 1, 4, 16, 8)  # never more than block_size


def test_engine_cached_and_uncached_agree():
    model = model_for(**MODERN)
    prompt_BT = sitp.tensor([[1, 2, 3], [4, 5, 6]])
    engine = Engine(model)
    runs = {}
    for use_cache in (True, False):
        g = sitp.Generator().manual_seed(7)
        steps = list(
            engine.stream(prompt_BT, 13, temperature=0.8, top_k=5, generator=g, use_cache=use_cache)
        )
        runs[use_cache] = steps
    assert len(runs[True]) == 13
    for (tok_c, log_c), (tok_f, log_f) in zip(runs[True], runs[False]):
        np.testing.assert_allclose(log_c.numpy(), log_f.numpy(), atol=ATOL)
        assert tok_c.tolist() == tok_f.tolist()
    greedy = engine.generate(prompt_BT, 13, temperature=0.0)
    assert (
        greedy.tolist() == engine.generate(prompt_BT, 13, temperature=0.0, use_cache=False).tolist()
    )
    assert greedy.tolist() == engine.generate(prompt_BT, 13, top_k=1).tolist()  # top-1 is greedy
    assert greedy[:, :3].tolist() == prompt_BT.tolist() and tuple(greedy.shape) == (2, 16)


def test_engine_is_reproducible_with_a_generator():
    engine = Engine(model_for(rope=True))
    prompt_BT = sitp.zeros((4, 1), dtype=sitp.long)
    a = engine.generate(prompt_BT, 10, generator=sitp.Generator().manual_seed(3))
    b = engine.generate(prompt_BT, 10, generator=sitp.Generator().manual_seed(3))
    c = engine.generate(prompt_BT, 10, generator=sitp.Generator().manual_seed(4))
    assert a.tolist() == b.tolist() != c.tolist()


def test_engine_refuses_more_than_block_size_up_front():
    engine = Engine(model_for())
    prompt_BT = sitp.zeros((1, 6), dtype=sitp.long)
    assert engine.generate(prompt_BT, 11).shape[1] == 17  # reads 16 positions: fits
    with pytest.raises(ValueError, match="need 17 positions, more than block_size 16"):
        engine.generate(prompt_BT, 12)


def test_sample_next_arguments():
    logits_BV = sitp.tensor([[0.0, 3.0, 1.0], [2.0, 1.0, 0.0]])
    assert sample_next(logits_BV, temperature=0).tolist() == [[1], [0]]
    g = sitp.Generator().manual_seed(0)
    draws = sample_next(logits_BV.repeat(50, 1), top_k=2, generator=g)  # rows alternate
    assert set(draws[0::2, 0].tolist()) <= {1, 2} and set(draws[1::2, 0].tolist()) <= {0, 1}
    with pytest.raises(ValueError, match="temperature"):
        sample_next(logits_BV, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        sample_next(logits_BV, top_k=0)


def test_the_engine_file_runs_with_torch():
    """engine.py and gpt.py are PyTorch code: the torch copies agree with sitp's cached logits."""
    torch = pytest.importorskip("torch")
    t_gpt, t_engine = load_module("gpt", "torch"), load_module("engine", "torch")
    smodel = model_for(**MODERN)
    tmodel = t_gpt.GPT(t_gpt.GPTConfig(**TINY, **MODERN)).eval()
    tmodel.load_state_dict(
        {k: torch.tensor(v.numpy().copy()) for k, v in smodel.state_dict().items()}
    )
    prompt = [[3, 1, 4, 1, 5]]
    s_steps = list(Engine(smodel).stream(sitp.tensor(prompt), 8, temperature=0.0))
    t_steps = list(t_engine.Engine(tmodel).stream(torch.tensor(prompt), 8, temperature=0.0))
    for (s_tok, s_log), (t_tok, t_log) in zip(s_steps, t_steps):
        np.testing.assert_allclose(s_log.numpy(), t_log.numpy(), atol=1e-4)
        assert s_tok.tolist() == t_tok.tolist()
    assert isinstance(smodel.make_kv_cache(1), KVCache)
