"""A character-level tokenizer built from code: no files, no downloads.

One token per character of ``alphabet`` plus ``<pad>``, ``<eos>`` and ``<unk>``, as a real
``transformers.PreTrainedTokenizerFast`` (the same object TRL and ``model.generate`` take).

Example:
    >>> tok = char_tokenizer()
    >>> ids = tok("12+7=")["input_ids"]
    >>> len(ids), tok.decode(ids)
    (5, '12+7=')
    >>> tok.pad_token, tok.eos_token, tok.padding_side
    ('<pad>', '<eos>', 'left')
"""

from __future__ import annotations

__all__ = ["ARITHMETIC_ALPHABET", "char_tokenizer"]

#: digits, the operators and the space: everything the arithmetic task writes
ARITHMETIC_ALPHABET = "0123456789+-*= "

_SPECIALS = ("<pad>", "<eos>", "<unk>")


def char_tokenizer(alphabet: str = ARITHMETIC_ALPHABET):
    """A ``PreTrainedTokenizerFast`` with one id per character of ``alphabet``.

    Ids: ``<pad>`` 0, ``<eos>`` 1, ``<unk>`` 2, then the characters in order. Prompts are
    padded on the left (generation continues them on the right).
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    if len(set(alphabet)) != len(alphabet) or not alphabet:
        raise ValueError(f"the alphabet must be distinct characters, got {alphabet!r}")
    vocab = {token: i for i, token in enumerate(_SPECIALS)}
    vocab.update({ch: len(_SPECIALS) + i for i, ch in enumerate(alphabet)})
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    # every character its own token; Fuse joins them back with nothing in between
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )
