"""Text in and out of generate(): a tokenizer, when one is given.

    TextTokenizer("tokenizer.json")        a Hugging Face tokenizer file, read by the `tokenizers`
                                           package (pip install tokenizers)
    TextTokenizer(AutoTokenizer...(...))   any Hugging Face tokenizer object (encode, decode)
    TextTokenizer(tokenizers.Tokenizer)    a `tokenizers` Tokenizer

`encode(text)` gives token ids, `decode(ids)` text (special tokens left out). `TextStreamer`
prints the new text as generate() makes it, as Hugging Face's TextStreamer.
"""

from __future__ import annotations

import os
import sys


class TextTokenizer:
    """One interface over a tokenizer.json file, a `tokenizers` Tokenizer, or an HF tokenizer."""

    def __init__(self, source):
        if isinstance(source, os.PathLike):
            source = os.fspath(source)
        if isinstance(source, str):
            source = read_tokenizer_file(source)
        if not (callable(getattr(source, "encode", None)) and callable(getattr(source, "decode", None))):
            raise TypeError(f"tokenizer must be a tokenizer.json path or an object with encode() and decode() "
                            f"(a Hugging Face tokenizer), got {type(source).__name__}")
        self.tokenizer = source

    def encode(self, text: str) -> list[int]:
        encoded = self.tokenizer.encode(text)
        return list(getattr(encoded, "ids", encoded))  # tokenizers gives an Encoding, transformers a list

    def decode(self, ids) -> str:
        ids = [int(i) for i in ids]
        try:
            return self.tokenizer.decode(ids, skip_special_tokens=True)
        except TypeError:  # a decode without that keyword
            return self.tokenizer.decode(ids)

    @property
    def vocab_size(self) -> int | None:
        size = getattr(self.tokenizer, "get_vocab_size", None)
        return size() if callable(size) else getattr(self.tokenizer, "vocab_size", None)


def read_tokenizer_file(path: str):
    """A `tokenizers` Tokenizer from a tokenizer.json file; ValueError in words for anything else."""
    if not os.path.isfile(path):
        raise ValueError(f"tokenizer: no such file {path}")
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ValueError("tokenizer: reading a tokenizer.json needs the tokenizers package (pip install tokenizers)"
                         ) from None
    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # noqa: BLE001 - tokenizers raises its own exception for every malformed file
        first = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise ValueError(f"tokenizer: {path} is not a tokenizer.json the tokenizers package reads ({first})"
                         ) from None


class TextStreamer:
    """A streamer (put, end) printing the new text as it comes, skipping the prompt (Hugging
    Face's TextStreamer): each step decodes the new tokens so far and prints what was added."""

    def __init__(self, tokenizer: TextTokenizer, stream=None):
        self.tokenizer, self.stream = tokenizer, stream or sys.stdout
        self.prompt_seen, self.ids, self.printed = False, [], 0

    def put(self, tokens) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.ids.append(int(tokens.reshape(-1)[0]))
        text = self.tokenizer.decode(self.ids)
        if text.endswith("\ufffd"):  # a character split across tokens: wait for the rest
            return
        print(text[self.printed:], end="", file=self.stream, flush=True)
        self.printed = len(text)

    def end(self) -> None:
        text = self.tokenizer.decode(self.ids)
        print(text[self.printed:], file=self.stream, flush=True)
