"""What a score part is.

A sequence attention node lists its parts under `scores:`, in order:

    - attention: {kind: global, heads: 4, scores: [talking_heads]}
    - attention: {kind: global, heads: 12, scores: [{decomposed: {}}]}

Each part is one `ScorePart` object in one file of this package, named after it, with its
parameter model, its shape rule and its cost. It registers in the op registry
(archspec/primitives/registry.py) under the family `attention.scores` and its name, so a spec's
parts are found by name through the op index (check imports the parts a spec uses, not all of
them); its facts (SCORE_DECODE below, the torch side's SCORE_MODULE) are registered against the
object. A part either adds a bias to the scores (`explicit = False`: lowering passes it to one
fused `scaled_dot_product_attention` as its additive mask) or changes the scores themselves
(`explicit = True`: talking heads, soft-capping; lowering writes the attention out,
softmax(q·k^T · scale + bias) · v, with the part's steps before and after the softmax).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, ClassVar

from .....core.declared import ValidationError
from .....core.suggestions import Remedy
from .....core.words import did_you_mean
from .....core.types import TensorType
from ....base import Cost, RuleError
from .... import registry
from ....decoding import Mixes
from ....facts import Fact


GRID_HINT = ("patchify an image first, declare the input's `grid: [H, W]`, or make tokens on a grid of an image: "
             "`to_tokens` (a `rearrange` with `as: image` first, for patches in another order)")


@dataclass(frozen=True)
class ScoreSite:
    """Where a part works: the attention's heads and head width, its query and key counts, and
    the token grid its queries lie on (the window, for window kinds; None: a plain sequence);
    whether the kind's module calls the parts' `rotate(q, k)` (the sequence kinds), and the
    node's 1-D `rope_theta`."""

    heads: int
    head_dim: int
    queries: int
    keys: int
    grid: tuple[int, int] | None
    x: TensorType
    rotates: bool = False
    rope_theta: float | None = None
    tensors: tuple[TensorType, ...] = ()  # the inputs a part reads by name (`mod`'s tensors), in order
    masks: bool = False  # the kind's module joins the parts' masks to its own (the sequence kinds)
    scale: float | None = None  # the node's score scale (None: 1/sqrt(head width)), for parts that must agree
    key_grid: tuple[int, int] | None = None  # the keys' grid where it is not the queries' (pooled attention)
    self_attention: bool = True  # the keys are the queries' own tokens (not a memory's: cross attention)
    off_grid_keys: str | None = None  # external keys not in the queries' grid order, in words (None: they are)

    def check_queries_on_the_grid(self, needs: str) -> None:
        """For a part that `needs` (e.g. "a relative position table needs") queries on a grid, at a
        site without one whose input has a grid: this kind's queries are not its tokens (class
        attention's are the class tokens), which is what the error says."""
        if self.grid is None and self.x.grid is not None:
            h, w = self.x.grid
            raise RuleError(f"{needs} queries on a grid, and this attention's queries ({self.queries}) are not "
                            f"the tokens of the {h}x{w} grid: class attention's queries are its class tokens",
                            field="scores",
                            hint=Remedy("use the part on attention whose queries are the grid's tokens (global, "
                                        "window)"))

    def grid_of_the_queries(self, needs: str, hint: str = GRID_HINT) -> tuple[int, int]:
        """The (H, W) grid the queries lie on, for a part that `needs` one (e.g. "an offset table
        needs"); RuleError at a site whose queries are not a grid's tokens or that has no grid."""
        self.check_queries_on_the_grid(needs)
        if self.grid is None:
            raise RuleError(f"{needs} tokens on a grid, got {self.x.layout_name()} without one", field="scores",
                            hint=Remedy(hint))
        return self.grid

    def check_keys_are_the_queries(self, needs: str, kinds: str = "global or window kinds") -> None:
        """For a part that `needs` the keys on the queries' grid: self-attention, as many keys as queries,
        and external keys laid on the queries' grid (the EfficientFormerV2 trial: keys of another
        order passed, the table placed as if on the queries' grid)."""
        self.check_external_keys_on_the_grid(needs)
        if self.keys != self.queries:
            h, w = self.grid
            raise RuleError(f"{needs} the keys on the queries' {h}x{w} grid, but there are {self.keys} keys for "
                            f"{self.queries} queries", field="scores",
                            hint=Remedy(f"use the part with self-attention ({kinds})"))


    def check_external_keys_on_the_grid(self, needs: str) -> None:
        if self.off_grid_keys is not None:
            h, w = self.grid
            raise RuleError(f"{needs} the keys on the queries' {h}x{w} grid, and external {self.off_grid_keys}: "
                            "its tokens are not known to lie in the queries' order", field="from",
                            hint="make k (and v) tokens of the queries' grid, as q is made (to_tokens of the same "
                                 "image, or a rearrange 'b c h w -> b (h w) c')")


SCORES = "attention.scores"  # the registry's family of the score parts


class ScorePart:
    """One score part. Subclass it, set `name`, `Params`, `explicit`, override `check` and
    `cost`, and `registry.register` an instance."""

    primitive: ClassVar[str] = SCORES  # where the registry keeps it (a family no node can name)
    name: ClassVar[str]
    Params: ClassVar[type[Params]]
    explicit: ClassVar[bool] = False  # changes the scores themselves (a kind that only adds a bias refuses it)
    adds_bias: ClassVar[bool] = False  # adds a bias to the scores, before every part that changes them
    changes_scores: ClassVar[bool] = False  # maps the scores to others (talking heads, softcap, mod)
    one_grid: ClassVar[str | None] = None  # what it holds made for one grid, in words (export with a dynamic size)
    hides_keys: ClassVar[bool] = False  # hides keys by where they are (local_window)
    sees_hidden_keys: ClassVar[bool] = False  # lets a query see keys the mask hides (blockwise): needs a mask
    default: ClassVar[bool] = False  # (the registry's question of a kind: never for a part)
    plugin: str | None = None  # the plugin that registered it (set by the registry); None: built in

    @property
    def kind(self) -> str:
        """Its key in the registry's family: its name."""
        return self.name

    @property
    def fused(self) -> bool:
        """Whether sequence attention keeps one fused kernel with this part (every part that only adds a
        bias or masks; `sinks` too, as a zero key whose mask column is its logit)."""
        return not self.explicit

    def check(self, p, site: ScoreSite) -> None:
        """RuleError when the part does not fit the attention."""

    def cost(self, p, site: ScoreSite) -> Cost:
        return Cost(0, 0)

    @property
    def doc(self) -> str:
        return (type(self).__doc__ or "").strip()

    @property
    def label(self) -> str:
        return f"score part {self.name!r}"

    def __repr__(self) -> str:
        return f"<score part {self.name}>"


def known_parts() -> dict[str, ScorePart]:
    """Every score part by name: the built-in ones and those plugins registered."""
    return registry.parts(SCORES)


@dataclass(frozen=True)
class ScoreUse:
    """One entry of a node's `scores:`: the part and its validated params."""

    part: ScorePart
    params: Any
    at: str = "scores"  # where the entry is among the node's options: scores.0.mod

    def check(self, site: ScoreSite) -> None:
        """The part's check at `site`, its error located at the entry, or at the option of it that
        the error names (`steps.2` of a mod: scores.0.mod.steps.2); an error about the node's
        own options (`from`, `heads`) stays theirs."""
        try:
            self.part.check(self.params, site)
        except RuleError as exc:
            field = exc.field
            if field == "scores":
                exc.suggestion = replace(exc.suggestion, field=self.at)
            elif field and field.split(".")[0] in self.part.Params.model_fields:
                exc.suggestion = replace(exc.suggestion, field=f"{self.at}.{field}")
            raise


def part_named(name: str) -> ScorePart | None:
    """The score part called `name` (its file alone imported), or None."""
    return registry.part(SCORES, name) if isinstance(name, str) else None


def parse_scores(entries: list[Any]) -> list[ScoreUse]:
    """The `scores:` list -> parts with their params; RuleError (field `scores`) for an unknown
    part, a malformed entry or bad params."""
    uses = []
    for i, entry in enumerate(entries):
        if isinstance(entry, str):
            name, given = entry, {}
        elif isinstance(entry, dict) and len(entry) == 1:
            (name, given), = entry.items()
            given = {} if given is None else given
        else:
            raise RuleError(f"scores entry {i + 1} must be a part name or a one-key mapping {{part: {{...}}}}",
                            field=f"scores.{i}",
                            hint=Remedy(f"e.g. scores: [{', '.join(sorted(known_parts()))}]"))
        at = f"scores.{i}" + (f".{name}" if isinstance(entry, dict) else "")
        part = part_named(name)
        if part is None:
            guess = did_you_mean(str(name), sorted(known_parts()))
            parts = f"the score parts are: {', '.join(sorted(known_parts()))}"
            raise RuleError(f"unknown score part {name!r}", field=at,
                            hint=Remedy(f"{guess} ({parts})" if guess else parts))
        if not isinstance(given, dict):
            raise RuleError(f"score part {name!r} takes a mapping of options, got {given!r}", field=at)
        try:
            params = part.Params.model_validate(given)
        except ValidationError as e:
            raise option_error(name, part, first_error(e.errors()), at) from None
        uses.append(ScoreUse(part, params, at))
    check_bias_first(uses)
    return uses


def check_bias_first(uses: list[ScoreUse]) -> None:
    """A part that adds a bias listed after one that changes the scores: the bias is added first
    whatever the order (the kernel adds every bias to q·k^T, then runs the steps), so the order
    written would be another model (the EfficientFormerV2 trial's [talking_heads, offset_table]
    built timm's [offset_table, talking_heads] without a word)."""
    for i, use in enumerate(uses):
        earlier = next((u for u in uses[:i] if u.part.changes_scores), None)
        if use.part.adds_bias and earlier is not None:
            raise RuleError(f"score part {use.part.name!r} adds its bias to q·k^T before every part that changes "
                            f"the scores, and it is listed after {earlier.part.name!r}", field=use.at,
                            hint=Remedy(f"list {use.part.name!r} before {earlier.part.name!r} (the order it runs "
                                        "in); a bias added after a change of the scores is a mod step "
                                        "(`add` of a table read with `at`)"))


def first_error(errors: list[dict]) -> dict:
    """The error to report of a part's options: an unknown option first (a misspelt required one
    is also missing, and `windw` says more than `window: Field required`)."""
    return next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])


def option_error(name: str, part, first: dict, at: str) -> RuleError:
    """A score part's option that does not validate, located at the option: an unknown one with
    the closest name (`capp`: did you mean 'cap'?), else pydantic's words for the value."""
    where = ".".join(str(x) for x in first["loc"])
    field = f"{at}.{where}" if where else at
    options = sorted(part.Params.model_fields)
    if first["type"] == "extra_forbidden":
        guess = did_you_mean(where, options)
        return RuleError(f"score part {name!r} has no option {where!r}", field=field,
                         hint=Remedy(str(guess) if guess else f"its options: {', '.join(options) or 'none'}"))
    return RuleError(f"score part {name!r}: {where + ': ' if where else ''}{first['msg']}", field=field)


def check_bias_parts(entries: list[Any], site: ScoreSite, kind: str, hint: str) -> None:
    """For a kind whose kernel only adds a bias to the scores (window, shifted, pooled): each part
    of `entries` fits `site`, and a part that changes the scores themselves is a RuleError."""
    for use in parse_scores(entries):
        if use.part.explicit:
            raise RuleError(f"{kind} attention takes score parts that add a bias, and {use.part.name} "
                            "changes the scores themselves", field="scores", hint=Remedy(hint))
        use.check(site)


# -- how a part decodes: a fact registered from the part's own file ------------------------------

@dataclass(frozen=True)
class Decodes:
    """The part works unchanged when generate() brings the queries one at a time over cached
    keys: its module's steps read the scores [B, h, N, M] of the current queries over the keys
    so far (and, where it asks, their positions), never a key the mask hides."""


DECODES = Decodes()

SCORE_DECODE = Fact(
    "SCORE_DECODE", "how the score part behaves when generate() decodes over a key/value cache: DECODES, "
    "Mixes(why) (it cannot yet, and why), or a function of the part's params giving one",
    "the part's rule file (archspec/primitives/ops/attention/scores/<part>.py), beside its checks")


def register_score_decoding(part: ScorePart, decode) -> ScorePart:
    """Register how `part` decodes (DECODES, Mixes(why), or a function of its params)."""
    if not isinstance(decode, Decodes | Mixes) and not callable(decode):
        raise ValueError(f"{part.label}: SCORE_DECODE is DECODES, Mixes(why) or a function, got {decode!r}")
    SCORE_DECODE.register(part, decode)
    return part


def decode_refusal(entries: list[Any]) -> str | None:
    """Why an attention with these `scores:` cannot decode over a cache (its first part whose
    SCORE_DECODE is Mixes), or None. A part that registered no answer fails naming itself."""
    for use in parse_scores(entries):
        answer = SCORE_DECODE.of(use.part)
        if not isinstance(answer, Decodes | Mixes):
            answer = answer(use.params)
        if isinstance(answer, Mixes):
            return f"its score part {use.part.name}: {answer.why}"
    return None



def unless_a_part_refuses(cache):
    """DECODE of an attention kind that decodes with a cache (`cache`: a SelfCache or CrossCache),
    as a function of the node's params: `cache`, or Mixes naming its first score part that cannot
    decode (so kv_cache asks the kind alone, never the parts)."""

    def decode(params):
        why = decode_refusal(getattr(params, "scores", None) or [])
        return cache if why is None else Mixes(why)

    return decode