"""Small helpers for plain-language messages: lists, plurals, "did you mean"."""

from __future__ import annotations


class DidYouMean(str):
    """The hint "did you mean 'mlp'?", which also keeps, as data, the word as written (`written`)
    and the word meant (`meant`): an editor makes the change from these (the language server's
    code action), never from the words of the hint. It is a str, so it goes wherever a hint goes."""

    written: str
    meant: str
    note: str  # words after the question ('mlp has no option ...'), or ''

    def __new__(cls, written: str, meant: str, note: str = "") -> "DidYouMean":
        hint = super().__new__(cls, f"did you mean '{meant}'?" + (f" {note}" if note else ""))
        hint.written, hint.meant, hint.note = str(written), str(meant), str(note)
        return hint

    def __reduce__(self):  # copied or pickled with its data
        return (DidYouMean, (self.written, self.meant, self.note))


# words that mean a choice spelt otherwise (a did-you-mean by spelling would pick another)
SAME_MEANING = {"lte": "le", "leq": "le", "<=": "le", "gte": "ge", "geq": "ge", ">=": "ge", "neq": "ne", "!=": "ne",
                "<": "lt", ">": "gt", "==": "eq", "=": "eq", "avg": "mean", "average": "mean",
                # activations by Hugging Face's and papers' names (the Persimmon trial's squared_relu met star_relu)
                "squared_relu": "relu2", "relu_squared": "relu2", "swish": "silu", "gelu_new": "gelu_tanh",
                "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh"}

# gated activations: the word and the mlp option that makes the gate (the ERNIE trial's act: swiglu)
GATED = {"swiglu": "silu", "geglu": "gelu", "reglu": "relu", "gated_gelu": "gelu", "gated_silu": "silu"}


def did_you_mean(word: str, choices, cutoff: float = 0.6) -> DidYouMean | None:
    """A hint naming the closest known word, if one is close enough (difflib's ratio >= cutoff)."""
    import difflib  # only when a hint is wanted: keeps `archspec check` start-up short

    names = [str(c) for c in choices]
    lowered = str(word).lower()
    if SAME_MEANING.get(lowered) in names:  # `lte` is le, though lt is spelt closer
        return DidYouMean(word, SAME_MEANING[lowered])
    if GATED.get(lowered) in names:
        return DidYouMean(word, GATED[lowered], f"with `gated: true` on the mlp ({word} is a gated {GATED[lowered]})")
    same_letters = [name for name in names if name.lower() == lowered]
    if len(same_letters) == 1:  # `reLU` is relu
        return DidYouMean(word, same_letters[0])
    reordered = same_parts(str(word), names)
    if reordered is not None:  # `post_res` means res_post, not the closer-spelt post
        return DidYouMean(word, reordered)
    close = difflib.get_close_matches(str(word), names, n=1, cutoff=cutoff)
    return DidYouMean(word, close[0]) if close else None


def same_parts(word: str, names: list[str]) -> str | None:
    """The one name made of the same `_`-separated parts as `word` in another order, or None."""
    parts = sorted(word.split("_"))
    if len(parts) < 2:
        return None
    found = [name for name in names if name != word and sorted(name.split("_")) == parts]
    return found[0] if len(found) == 1 else None


def one_of(choices) -> str:
    return ", ".join(str(c) for c in choices)


def plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")
