"""sitp.examples.ffn_memory: the probe of 3.5's MLP cells (the page's fence checks the rest)."""

import numpy as np

import sitp
from sitp.examples import ffn_memory
from sitp.models.gpt import GPT, GPTConfig


def test_triggers_keep_each_prefix_once_and_skip_padding():
    m_BTS = np.zeros((2, 3, 2))
    m_BTS[0, :, 1] = [5.0, 4.0, 9.0]  # name 0: '.', '.a', '.ab'
    m_BTS[1, :, 1] = [5.0, 3.0, 8.0]  # name 1: '.', '.c', then padding (score 8 ignored)
    prefixes = [[".", ".a", ".ab"], [".", ".c", None]]
    found = ffn_memory.triggers(m_BTS, prefixes, unit=1, k=3)
    assert found == [(".ab", 9.0), (".", 5.0), (".a", 4.0)]


def test_agreement_counts_the_most_common_next_character():
    next_letters = [["a", "a", "b"], ["c"], ["d", "e", "e"]]
    value_top = [{"a", "x"}, {"y"}, {"d"}]  # hit, miss, miss (e is more common than d)
    assert ffn_memory.agreement(next_letters, value_top) == 1 / 3


def test_value_letters_are_the_logits_of_a_stream_that_holds_only_the_value():
    """ln_f(u) = gain * (u - mean u) / std u + shift: the logits, less the shift's, are
    value_letters' row scaled by 1 / std u, so the order of the letters is the same."""
    sitp.manual_seed(0)
    model = GPT(GPTConfig(n_layer=1, n_head=2, n_embd=16, vocab_size=11)).eval()
    ln_f = model.transformer.ln_f
    with sitp.no_grad():
        ln_f.weight.copy_(sitp.rand(16) + 0.5)
        ln_f.bias.copy_(sitp.randn(16))
        logits_SV = ffn_memory.value_letters(model, 0)
        u_C = ffn_memory.memory(model.transformer.h[0])[2][3]
        read = model.lm_head(ln_f(u_C)) - model.lm_head(ln_f.bias)
    std = float(np.sqrt(u_C.numpy().var() + ln_f.eps))
    np.testing.assert_allclose(read.numpy(), logits_SV[3].numpy() / std, rtol=1e-4, atol=1e-5)
    assert list(np.argsort(read.numpy())) == list(np.argsort(logits_SV[3].numpy()))
