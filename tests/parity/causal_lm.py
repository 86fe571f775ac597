"""The checks every causal LM's parity file makes against its Hugging Face reference (deepseek_v3,
gpt_oss): logits at a length, logits on a left-padded batch, greedy generate token for token."""

from __future__ import annotations

import torch

from archspec.compiler.generate import generate

from tests.generate.test_generate import left_padded
from tests.parity.test_vocabulary import TOL, close, ids


def logits_equal(ref, ours, length: int, vocab: int) -> None:
    """The reference's logits and ours on the same ids [2, length], within TOL."""
    input_ids = ids(2, length, vocab)
    with torch.no_grad():
        expected, got = ref(input_ids=input_ids).logits, ours(input_ids)
    assert close(expected, got) < TOL, close(expected, got)


def padded_logits_equal(ref, ours) -> None:
    """The reference's logits on a left-padded batch (positions as generate numbers them) against
    ours on each row's real tokens alone."""
    input_ids, mask = left_padded()
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = ref(input_ids=input_ids, attention_mask=mask, position_ids=positions).logits
        for row in range(input_ids.shape[0]):
            real = mask[row].bool()
            got = ours(input_ids[row, real][None])[0]
            assert close(expected[row, real], got) < TOL, (row, close(expected[row, real], got))


def greedy_equal(ref, ours, new: int, vocab: int) -> None:
    """Greedy generate() token for token equal to the reference's, for `new` tokens at batch 1 and
    on a left-padded batch of 3."""
    prompt = torch.randint(1, vocab, (1, 7), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        expected = ref.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new, do_sample=False,
                                pad_token_id=0)
    out = generate(ours, prompt, max_new_tokens=new)
    assert out.shape == (1, 7 + new) and torch.equal(out, expected)
    input_ids, mask = left_padded()
    with torch.no_grad():
        expected = ref.generate(input_ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=0)
    assert torch.equal(generate(ours, input_ids, max_new_tokens=new, attention_mask=mask), expected)
