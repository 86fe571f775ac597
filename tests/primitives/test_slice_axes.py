"""slice along any axis of a tensor or an image (a user trial cut q, k and v out of [B, h, N, d]
and found only tokens and channels): the same values as torch's slicing, the checker's shapes and
layouts, and located errors for the batch axis, an axis the tensor lacks, and an empty range."""

from __future__ import annotations

import pytest
import torch

import archspec

SPEC = """
name: cuts
inputs:
  x: [B, 16, 48]
  image: [B, 6, 8, 10]
graph:
  - {id: heads, from: x, rearrange: {pattern: "b n (h d) -> b h n d", sizes: {h: 4}}}   # [B, 4, 16, 12]
  - {id: q, from: heads, slice: {along: 3, stop: 4}}                # [B, 4, 16, 4]
  - {id: k, from: heads, slice: {along: -1, start: 4, stop: 8}}     # [B, 4, 16, 4]
  - {id: v, from: heads, slice: {along: channels, start: 8}}        # the last axis: [B, 4, 16, 4]
  - {id: two_heads, from: heads, slice: {along: 1, stop: 2}}        # [B, 2, 16, 12]
  - {id: some_channels, from: image, slice: {along: channels, stop: 3}}      # an image's channels: [B, 3, 8, 10]
  - {id: top, from: image, slice: {along: 2, stop: 5}}              # rows: [B, 6, 5, 10]
  - {id: first_tokens, from: x, slice: {along: 1, stop: 3}}         # tokens [B, 3, 48]
outputs: [q, k, v, two_heads, some_channels, top, first_tokens]
"""


def test_slices_are_torchs_and_the_checker_knows_their_shapes():
    report = archspec.check_text(SPEC)
    model = archspec.build_text(SPEC).eval()
    x, image = torch.randn(2, 16, 48), torch.randn(2, 6, 8, 10)
    heads = x.view(2, 16, 4, 12).permute(0, 2, 1, 3)
    expected = {"q": heads[..., :4], "k": heads[..., 4:8], "v": heads[..., 8:], "two_heads": heads[:, :2],
                "some_channels": image[:, :3], "top": image[:, :, :5], "first_tokens": x[:, :3]}
    with torch.no_grad():
        outs = model(x, image)
    for (name, want), got in zip(expected.items(), outs):
        assert torch.equal(got, want), name
        checked = report.graph.type_of(name)
        assert [2 if str(d) == "B" else d for d in checked.shape] == list(want.shape), name
    layouts = {name: report.graph.type_of(name).layout for name in expected}
    assert layouts == {"q": "tensor", "k": "tensor", "v": "tensor", "two_heads": "tensor", "some_channels": "image",
                       "top": "image", "first_tokens": "tokens"}


@pytest.mark.parametrize("node, message, hint", [
    ("{from: image, slice: {along: 0}}", "axis 0 is not an axis of [B, 6, 8, 10] other than the batch",
     "axes 1 to 3, or -1 to -3 from the end"),
    ("{from: image, slice: {along: -4}}", "axis -4 is not an axis of [B, 6, 8, 10] other than the batch", None),
    ("{from: image, slice: {along: tokens}}", "an image has no tokens axis ([B, 6, 8, 10])",
     "name the axis: along: 1 to 3, or -1 for the last"),
    ("{from: image, slice: {along: 3, start: 10}}", "slice 10: is outside or empty for axis 3 of [B, 6, 8, 10]",
     "start runs from 0 to 9, stop to 10 (or -10 to -1 from the end)"),
    ("{from: image, slice: {along: 3, start: -11}}", "slice -11: is outside or empty for axis 3 of [B, 6, 8, 10]",
     None),
    ("{from: image, slice: {along: 3, start: 4, stop: -6}}", "slice 4:-6 is outside or empty for axis 3 of "
     "[B, 6, 8, 10]", None),
])
def test_bad_axes_give_a_located_error(node, message, hint):
    text = SPEC.split("graph:")[0] + f"graph:\n  - {node}\n"
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text)
    assert info.value.message.endswith(message), info.value.message
    assert info.value.loc.line == 7
    if hint is not None:
        assert info.value.hint == hint


def test_an_axis_number_on_tokens_keeps_the_grid_as_the_name_does():
    text = """
name: grid
inputs:
  image: [B, 3, 32, 32]
graph:
  - {id: patches, from: image, patchify: {patch: 8, dim: 16, cls_token: true}}   # [B, 17, 16] 4x4+1
  - {id: by_number, from: patches, slice: {along: 1, start: 1}}
  - {id: by_name, from: patches, slice: {along: tokens, start: 1}}
  - {id: channels, from: patches, slice: {along: -1, stop: 8}}
outputs: [by_number, by_name, channels]
"""
    graph = archspec.check_text(text).graph
    assert graph.type_of("by_number") == graph.type_of("by_name")
    assert graph.type_of("by_number").grid == (4, 4) and graph.type_of("channels").grid == (4, 4)
    assert graph.type_of("channels").shape[1:] == (17, 8)


NEGATIVE = """
name: from_the_end
dims: {L: [4, 64]}
inputs:
  x: [B, 16, 48]
  image: [B, 6, 8, 10]
  seq: [B, L, 8]
graph:
  - {id: all_but_last, from: x, slice: {stop: -1}}                  # Wav2Vec2's SamePad, x[:, :-1]: [B, 15, 48]
  - {id: last, from: x, slice: {start: -1}}                        # [B, 1, 48]
  - {id: middle, from: image, slice: {along: 3, start: -7, stop: -2}}   # [B, 6, 8, 5]
  - {id: last_two_channels, from: x, slice: {along: channels, start: -2}}   # [B, 16, 2]
  - {id: last_of_any_length, from: seq, slice: {start: -3}}        # [B, 3, 8]
outputs: [all_but_last, last, middle, last_two_channels, last_of_any_length]
"""


def test_negative_indices_count_from_the_end_as_pythons_do():
    report = archspec.check_text(NEGATIVE)
    model = archspec.build_text(NEGATIVE).eval()
    x, image, seq = torch.randn(2, 16, 48), torch.randn(2, 6, 8, 10), torch.randn(2, 9, 8)
    expected = {"all_but_last": x[:, :-1], "last": x[:, -1:], "middle": image[..., -7:-2],
                "last_two_channels": x[..., -2:], "last_of_any_length": seq[:, -3:]}
    with torch.no_grad():
        outs = model(x, image, seq)
    for (name, want), got in zip(expected.items(), outs):
        assert torch.equal(got, want), name
        checked = report.graph.type_of(name)
        assert [2 if str(d) == "B" else d for d in checked.shape] == list(want.shape), name


def test_a_count_cut_from_a_symbolic_length_leaves_a_symbolic_length():
    """`stop: -1` and `start: 2` over L give L-1 and L-2 tokens (they were refused: WavLM's
    pos-conv drop and PaliGemma's text after its image tokens), and cutting the shortest to
    nothing is refused."""
    text = NEGATIVE.split("graph:")[0] + ("graph:\n  - {id: a, from: seq, slice: {stop: -1}}\n"
                                          "  - {id: b, from: seq, slice: {start: 2}}\noutputs: [a, b]\n")
    graph = archspec.check_text(text).graph
    assert [str(graph.type_of(n).shape[1]) for n in "ab"] == ["L-1", "L-2"]
    model = archspec.build_text(text).eval()
    x, image, seq = torch.randn(2, 16, 48), torch.randn(2, 6, 8, 10), torch.randn(2, 9, 8)
    a, b = model(x, image, seq)
    assert torch.equal(a, seq[:, :-1]) and torch.equal(b, seq[:, 2:])
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(text.replace("start: 2", "start: 4"))
    assert "slice 4: drops 4 of a symbolic length (L, at least 4): its shortest would be empty" in info.value.message
