"""einsum and rearrange (einops notation): the parser's results and errors, each op against a
torch computation written here from its definition, the checker's shapes, parameters and
FLOPs against the modules and FlopCounterMode (including torch.einsum's own decomposition of
equations the rule has not seen), the token grid a rearrange keeps for the grid ops after it,
located errors, torch.export with a dynamic batch, ONNX against onnxruntime, and TensorRT's
operator coverage.
"""

from __future__ import annotations

import importlib.util
import re

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import archspec
from archspec.cli import EXIT_SPEC, main
from archspec.compiler.backends.export import SizeRange, export_program
from archspec.compiler.backends.onnx import export_onnx
from archspec.core.types import BATCH, tensor
from archspec.primitives.axes_notation import AxesError, parse_equation, parse_pattern
from archspec.primitives.ops.einsum import contraction_flops
from archspec.primitives.ops.rearrange import RearrangeParams, rearranged_grid

from tests.conftest import build_counted, checks_shapes, checks_tensorrt_coverage

TOL = 1e-5


def counted_flops(model, *args) -> int:
    counter = FlopCounterMode(display=False)
    with counter:
        model(*args)
    return counter.get_total_flops()


def spec(graph: str, inputs: str = "  x: [B, 6, 16]\n") -> str:
    return f"name: t\ninputs:\n{inputs}graph:\n{graph}"


# -- the notation ----------------------------------------------------------------------------------


def test_the_parser_reads_groups_ones_and_terms():
    pattern = parse_pattern(" b c (h p)  (w q) -> b (h w) (p q c) 1 ")
    assert pattern.left.groups == (("b",), ("c",), ("h", "p"), ("w", "q"))
    assert pattern.right.groups == (("b",), ("h", "w"), ("p", "q", "c"), ())
    equation = parse_equation("b h i d, b h j d -> b h i j")
    assert [side.axes for side in equation.inputs] == [("b", "h", "i", "d"), ("b", "h", "j", "d")]
    assert equation.letters() == "abcd,abed->abce"
    assert parse_equation("batch n_1 c -> batch c n_1").letters() == "abc->acb"


@pytest.mark.parametrize("text, message, hint", [
    ("b n c", "'b n c' has no '->'", "write the input axes, '->', then the output axes"),
    ("b n -> b n -> b n", "has more than one '->'", None),
    ("b (h (w)) -> b h w", "nested parentheses in the left side 'b (h (w))'", "one level deep"),
    ("b h w) -> b h w", "')' without '(' in the left side", None),
    ("b (h w -> b h w", "'(' without ')' in the left side 'b (h w'", None),
    ("b () c -> b c", "empty parentheses in the left side 'b () c'", "write 1 for a size-1 axis"),
    ("b ... c -> b c", "'...' in the left side 'b ... c': archspec's patterns name every axis", "write the axes out"),
    ("b (h 2) -> b h", "a number (2) in the left side", "give its size under `sizes`"),
    ("b (h 1) -> b h", "1 inside parentheses in the left side", "write 1 on its own"),
    ("b n+c -> b n", "unexpected '+' in the left side 'b n+c'", None),
    ("b h h -> b h", "axis 'h' appears twice in the left side 'b h h'", "give each axis its own name"),
    ("b n c -> b n", "axis 'c' is on the left of 'b n c -> b n' but not on the right", "without dropping any"),
    ("b n -> b n c", "axis 'c' is on the right of 'b n -> b n c' but not on the left", "without creating any"),
    (" -> b", "the left side is empty", None),
])
def test_pattern_errors_are_precise(text, message, hint):
    with pytest.raises(AxesError) as info:
        parse_pattern(text)
    assert message in info.value.message
    assert hint is None or hint in info.value.hint


@pytest.mark.parametrize("text, message", [
    ("b i, b j -> b i k", "output axis 'k' of 'b i, b j -> b i k' is in no input"),
    ("b (h d) -> b h d", "input 1 'b (h d)' groups axes or writes 1; einsum axes are plain names"),
    ("b i, b i i -> b i", "axis 'i' appears twice in input 2 'b i i'"),
    ("b i, -> b i", "input 2 is empty"),
    ("b i -> b i i", "axis 'i' appears twice in the output 'b i i'"),
])
def test_equation_errors_are_precise(text, message):
    with pytest.raises(AxesError) as info:
        parse_equation(text)
    assert message in info.value.message


# -- einsum ----------------------------------------------------------------------------------------

ATTENTION_SCORES = spec("""\
  - {id: q, from: x, linear: {dim: 16}}
  - {id: k, from: x, linear: {dim: 16}}
  - {id: q_heads, from: q, rearrange: {pattern: "b n (h d) -> b n h d", sizes: {h: 2}}}
  - {id: k_heads, from: k, rearrange: {pattern: "b n (h d) -> b n h d", sizes: {h: 2}}}
  - {id: scores, from: [q_heads, k_heads], einsum: {eq: "b i h d, b j h d -> b h i j"}}
""")


def test_multi_head_attention_scores_equal_the_torch_reference():
    report, model = build_counted(ATTENTION_SCORES)
    x = torch.randn(3, 6, 16)
    q = (x @ model.q.weight.t() + model.q.bias).view(3, 6, 2, 8).transpose(1, 2)  # [B, H, N, D]
    k = (x @ model.k.weight.t() + model.k.bias).view(3, 6, 2, 8).transpose(1, 2)
    assert torch.allclose(model(x), q @ k.transpose(-2, -1), atol=TOL)
    assert report.graph.type_of("scores").describe() == "[B, 2, 6, 6]"
    checks_shapes(report, model, (x,))
    projections = 2 * (2 * 6 * 16 * 16)
    assert counted_flops(model, torch.randn(1, 6, 16)) == report.flops == projections + 2 * 2 * 6 * 6 * 8


THREE_WAY = spec("""\
  - {id: a, param: {shape: [16, 4], init: normal}}
  - {id: m, param: {shape: [4, 5], init: normal}}
  - {id: chain, from: [x, a, m], einsum: {eq: "b n c, b c e, b e f -> b n f"}}
  - {id: swapped, from: x, einsum: {eq: "b n c -> b c n"}}
  - {id: summed, from: x, einsum: {eq: "b n c -> b n"}}
  - {id: outer, from: [summed, summed], einsum: {eq: "b i, b j -> b i j"}}
outputs: [chain, swapped, summed, outer]
""")


def test_an_axis_summed_within_one_input_of_several_is_warned_and_one_inputs_sum_is_not():
    """The EfficientViT, TimesFM and Perceiver trials' typo, 'b d i, b e j -> b i j' (d and e
    each summed apart), checked clean; a one-input sum ('b n c -> b n') is a reduce, meant."""
    lone = spec("""\
  - {id: y, linear: {dim: 16}}
  - {id: s, from: [x, y], einsum: {eq: "b i d, b j e -> b i j"}}
""")
    warnings = [w for w in archspec.check_text(lone).graph.warnings if "before the product" in w.message]
    assert [w.message for w in warnings] == ["'b i d, b j e -> b i j' sums 'd' within input 1, 'e' within input 2 "
                                             "alone, before the product: each such sum is taken apart from the "
                                             "other inputs"]
    assert "a misspelt shared axis?" in warnings[0].hint
    assert not [w for w in archspec.check_text(THREE_WAY).graph.warnings if "before the product" in w.message]


def test_three_inputs_one_input_and_an_outer_product():
    report, model = build_counted(THREE_WAY)
    x = torch.randn(2, 6, 16)
    chain, swapped, summed, outer = model(x)
    a, m = model.a.value[0], model.m.value[0]  # the params' batch of 1 broadcasts
    assert torch.allclose(chain, x @ a @ m, atol=TOL)
    assert torch.equal(swapped, x.transpose(1, 2))
    assert torch.allclose(summed, x.sum(-1), atol=TOL)
    assert torch.allclose(outer, summed[:, :, None] * summed[:, None, :], atol=TOL)
    checks_shapes(report, model, (x,))
    assert report.params == 16 * 4 + 4 * 5
    # x @ a (2*6*4*16), then @ m (2*6*5*4); the transpose, the sum and the outer product count 0
    assert counted_flops(model, torch.randn(1, 6, 16)) == report.flops == 2 * 6 * 4 * 16 + 2 * 6 * 5 * 4


@pytest.mark.parametrize("eq, shapes", [
    ("b h i d, b h j d -> b h i j", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("b i j, b j k -> b k i", [(1, 3, 4), (1, 4, 5)]),
    ("b i j x, b j k -> b i k", [(1, 3, 4, 7), (1, 4, 5)]),  # x summed alone first
    ("b i, b i -> b", [(1, 3), (1, 3)]),
    ("b i, b i -> b i", [(1, 3), (1, 3)]),  # element-wise: 0
    ("b i d, b j d -> b i j", [(1, 1, 1), (1, 5, 1)]),  # a summed axis of size 1: element-wise
    ("b i d e, b j d e -> b j i", [(1, 3, 1, 4), (1, 5, 1, 4)]),
    ("b i j, b j k, b k l -> b i l", [(1, 3, 4), (1, 4, 5), (1, 5, 6)]),
    ("b i j, b j k, b k l -> b l", [(1, 3, 4), (1, 4, 5), (1, 5, 6)]),
    ("b i, b j, b k -> b i j k", [(1, 3), (1, 4), (1, 5)]),
    ("b i j, b k, b j k -> b i", [(1, 3, 4), (1, 5), (1, 4, 5)]),
    ("b n c -> b c", [(1, 3, 4)]),
])
def test_the_flop_rule_is_what_flop_counter_counts_for_torch_einsum(eq, shapes):
    """torch.einsum of the whole equation, as torch decomposes it (not archspec's module)."""
    equation = parse_equation(eq)
    sizes = {a: s for side, shape in zip(equation.inputs, shapes) for a, s in zip(side.axes, shape)}
    assert counted_flops(lambda *xs: torch.einsum(equation.letters(), *xs),
                         *[torch.randn(*s) for s in shapes]) == contraction_flops(equation, sizes)


# -- rearrange -------------------------------------------------------------------------------------

IMAGE = "  image: [B, 3, 16, 16]\n"
GRID_OPS = spec("""\
  - {id: patches, rearrange: {pattern: "b c (h p) (w q) -> b (h w) (p q c)", sizes: {p: 4, q: 4}}}
  - {id: embedded, linear: {dim: 8}}
  - {id: pixels, rearrange: {pattern: "b (h w) c -> b c h w"}}
  - {id: again, rearrange: {pattern: "b c h w -> b (h w) c"}}
  - {id: merged, merge: {kind: concat, dim: 16}}
  - {id: picture, from: again, to_image: {}}
  - {id: flat, from: picture, rearrange: {pattern: "b c h w -> b (c h w) 1", as: tensor}}
outputs: [merged, picture, flat]
""", IMAGE)


def test_rearranged_tokens_keep_the_grid_for_the_grid_ops():
    report, model = build_counted(GRID_OPS)
    types = {name: report.graph.type_of(name) for name in ("patches", "pixels", "again", "merged", "flat")}
    assert (types["patches"].layout, types["patches"].grid, types["patches"].shape[1:]) == ("tokens", (4, 4), (16, 48))
    assert (types["pixels"].layout, types["pixels"].shape[1:]) == ("image", (8, 4, 4))
    assert (types["again"].layout, types["again"].grid) == ("tokens", (4, 4))
    assert types["merged"].grid == (2, 2)
    assert (types["flat"].layout, types["flat"].shape[1:]) == ("tensor", (128, 1))
    image = torch.randn(2, 3, 16, 16)
    patches = image.view(2, 3, 4, 4, 4, 4).permute(0, 2, 4, 3, 5, 1).reshape(2, 16, 48)  # b h w p q c
    tokens = patches @ model.embedded.weight.t() + model.embedded.bias  # [2, 16, 8] on the 4x4 grid
    picture = tokens.transpose(1, 2).reshape(2, 8, 4, 4)
    merged, got_picture, flat = model(image)
    assert torch.allclose(got_picture, picture, atol=TOL)
    assert torch.allclose(flat, picture.reshape(2, 128, 1), atol=TOL)
    with torch.no_grad():
        assert torch.allclose(merged, model.merged(tokens), atol=TOL)  # merge read the grid it was given
    checks_shapes(report, model, (image,))
    assert counted_flops(model, torch.randn(1, 3, 16, 16)) == report.flops


@pytest.mark.parametrize("pattern, extra, layout, shape, grid", [
    ("b c h w -> b (h w) c", "", "tokens", (16, 3), (4, 4)),
    ("b c h w -> b (w h) c", "", "tensor", (16, 3), None),  # the grid transposed is not the grid
    ("b c h w -> b (h w) c", ", as: tensor", "tensor", (16, 3), None),
    ("b c h w -> b (h w) c", ", as: tokens", "tokens", (16, 3), (4, 4)),
    ("b c h w -> b c (h w)", ", as: tokens", "tokens", (3, 16), None),
    ("b (g c) h w -> b (c g) h w", ", sizes: {g: 3}", "image", (3, 4, 4), None),  # a channel shuffle
    ("b c (h p) w -> b (h w) (p c)", ", sizes: {p: 2}", "tokens", (8, 6), (2, 4)),
    ("b c h w -> b h w c", "", "tensor", (4, 4, 3), None),
])
def test_the_layout_follows_the_grid(pattern, extra, layout, shape, grid):
    report = archspec.check_text(spec(f'  - {{id: r, rearrange: {{pattern: "{pattern}"{extra}}}}}\n',
                                      "  x: [B, 3, 4, 4]\n"))
    out = report.graph.type_of("r")
    assert (out.layout, out.shape[1:], out.grid) == (layout, shape, grid)


def test_an_image_row_written_1_is_no_grid():
    report = archspec.check_text(spec('  - {id: r, rearrange: {pattern: "b c 1 w -> b w c"}}\n', "  x: [B, 3, 1, 4]\n"))
    assert report.graph.type_of("r") == tensor((BATCH, 4, 3))


def test_heads_split_and_size_one_axes():
    report, model = build_counted(spec("""\
  - {id: heads, rearrange: {pattern: "b n (h d) -> b h n d", sizes: {d: 4}}}
  - {id: back, rearrange: {pattern: "b h n d -> b n 1 (h d)"}}
  - {id: squeezed, rearrange: {pattern: "b n 1 c -> b c n"}}
outputs: [heads, back, squeezed]
"""))
    x = torch.randn(2, 6, 16)
    heads, back, squeezed = model(x)
    assert torch.equal(heads, x.view(2, 6, 4, 4).permute(0, 2, 1, 3))
    assert torch.equal(back, x.unsqueeze(2))
    assert torch.equal(squeezed, x.transpose(1, 2))
    checks_shapes(report, model, (x,))
    assert report.params == 0 and report.flops == 0


def test_a_symbolic_length_moves_but_does_not_split():
    text = "name: t\ndims:\n  L: [1, 32]\ninputs:\n  x: [B, L, 8]\ngraph:\n"
    report, model = build_counted(text + '  - {rearrange: {pattern: "b l (h d) -> b h l d", sizes: {h: 2}}}\n')
    x = torch.randn(2, 5, 8)
    assert torch.equal(model(x), x.view(2, 5, 2, 4).transpose(1, 2))
    with pytest.raises(archspec.SpecError, match="dimension 1 has the symbolic size L"):
        archspec.check_text(text + '  - {rearrange: {pattern: "b (l k) c -> b l k c", sizes: {k: 2}}}\n')
    with pytest.raises(archspec.SpecError, match="axis 'l' has the symbolic size L; '\\(l c\\)' would merge it"):
        archspec.check_text(text + '  - {rearrange: {pattern: "b l c -> b (l c)"}}\n')


PATCH_GRID = """\
  - {id: grid, rearrange: {pattern: "b c (h p) (w q) -> b (h w) (p q c)", sizes: {p: 4, q: 4}}}
  - {id: embedded, linear: {dim: 8}}
  - {id: merged, merge: {kind: concat, dim: 16}}
  - {id: pixels, rearrange: {pattern: "b (h w) c -> b c h w"}}
  - {id: tokens, rearrange: {pattern: "b c h w -> b (h w) c"}}
"""


def test_exported_with_a_dynamic_image_size_the_grids_follow():
    """The grid a rearrange cuts, the one a merge halves, and the one the next rearrange reads
    from the tokens all follow the image (TOKEN_GRID), here at sizes it was not built for."""
    text = spec(PATCH_GRID, "  image: [B, 3, 16, 16]\n")
    report, model = build_counted(text)
    program = export_program(model, report.graph, size_range=SizeRange(16, 64, 8))
    for height, width in ((32, 24), (48, 64)):
        eager = archspec.build_text(text.replace("16, 16]", f"{height}, {width}]"), seed=0).eval()
        image = torch.randn(2, 3, height, width)
        with torch.no_grad():
            assert torch.allclose(program.module()(image), eager(image), atol=TOL)


def test_the_grid_rule_follows_a_dynamic_image_size():
    patch = RearrangeParams.model_validate({"pattern": "b c (h p) (w q) -> b (h w) (p q c)", "sizes": {"p": 4, "q": 2}})
    assert rearranged_grid(patch, (32, 24)) == (8, 12)
    flatten = RearrangeParams.model_validate({"pattern": "b (h w) c -> b (h w) c"})
    assert rearranged_grid(flatten, (7, 9)) == (7, 9)
    assert rearranged_grid(flatten, None) is None


# -- located errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("node, column, message, hint", [
    ('{from: [x, y], einsum: {eq: "b i d, b j e -> b i j", extra: 1}}', 58, "unknown key 'extra' in einsum",
     "allowed keys: eq"),
    ('{from: [x, y], einsum: {eq: "b i d, b j d -> b i j"}}', 33,
     "axis 'd' is 16 in input 1 (x) and 8 in input 2 (y)", "an axis has one size"),
    ('{from: [x, y], einsum: {eq: "b i d, b j d -> i j"}}', 33, "'b i d, b j d -> i j' sums over the batch axis 'b'",
     "keep 'b' first in the output"),
    ('{from: [x, y], einsum: {eq: "b i d, b j d -> i b j"}}', 33, "moves the batch axis 'b' from first place",
     "write 'b' first in the output"),
    ('{from: [x, y], einsum: {eq: "b i d, j b d -> b i j"}}', 33, "input 2 'j b d' must start with the batch axis 'b'",
     "archspec's tensors are batch first"),
    ('{from: [x, y], einsum: {eq: "b i d, b j -> b i j"}}', 33,
     "input 2 (y) is [B, 6, 8], rank 3; 'b j' names 2 axes", "one axis per dimension"),
    ('{from: [x, y], einsum: {eq: "b i, b j, b k, b l -> b"}}', 33,
     "`eq` must have 1 to 3 inputs before '->', separated by commas (4 given)", None),
    ('{from: [x, y], einsum: {eq: "b i, b j"}}', 33, "`eq` must read 'inputs -> output' ('b i, b j' has no '->')",
     None),
    ('{from: x, einsum: {eq: "b i d, b j d -> b i j"}}', 12, "einsum reads 2 input(s) (x, y), this node gives 1",
     None),
    ('{from: x, rearrange: {pattern: "b (h w) c -> b c h w"}}', 36,
     "cannot infer both 'h' and 'w' in '(h w)' (dimension 1, size 6)", "give all but one of h, w under `sizes`"),
    ('{from: x, rearrange: {pattern: "b (h w) c -> b c h w", sizes: {h: 4}}}', 67,
     "axis 'w' of '(h w)': dimension 1 of size 6 does not divide by 4 (h=4)",
     "give sizes whose product divides 6 (2, 3, 6)"),
    ('{from: x, rearrange: {pattern: "b (h w) c -> b c h w", sizes: {h: 2, w: 2}}}', 67,
     "'(h w)' is 4 (h=2 * w=2) but dimension 1 is 6", "give sizes whose product is 6"),
    ('{from: x, rearrange: {pattern: "b n c -> b c n", sizes: {k: 2}}}', 61,
     "`sizes` gives 'k', which is not an axis of 'b n c -> b c n'", "the axes are n, c"),
    ('{from: x, rearrange: {pattern: "b n c -> n b c"}}', 36, "moves the batch axis 'b' out of the first dimension",
     "write 'b' in the first dimension on the right"),
    ('{from: x, rearrange: {pattern: "(b n) c -> b n c"}}', 36, "'(b n)' leaves 'b' and 'n' without a size",
     "give every axis but the batch under `sizes`"),
    ('{from: x, rearrange: {pattern: "(b n) c d -> b n c d", sizes: {n: 2}}}', 67,
     "'(b n)' unfolds 2 rows per sample (n=2) out of the batch B", "fold the axes into the batch first"),
    ('{from: x, rearrange: {pattern: "b n c d -> b n c d"}}', 36,
     "the input is [B, 6, 16], rank 3; 'b n c d' has 4 dimensions", None),
    ('{from: x, rearrange: {pattern: "b n c -> b n c", as: image}}', 58,
     "`as: image` needs a rank-4 output; 'b n c' has rank 3", "use `as: tensor`"),
    ('{from: x, rearrange: {pattern: "b n c -> b c n", as: picture}}', 58,
     "`as` must be 'tensor', 'image' or 'tokens'; got 'picture'", None),
    ('{from: x, rearrange: {pattern: "b n c -> b c", sizes: {}}}', 36,
     "axis 'n' is on the left of 'b n c -> b c' but not on the right", "without dropping any"),
])
def test_bad_parameters_are_located_errors(node, column, message, hint):
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(spec(f"  - {node}\n", "  x: [B, 6, 16]\n  y: [B, 6, 8]\n"), name="bad.yaml")
    error = info.value
    assert message in error.message
    assert hint is None or hint in error.hint
    assert (error.loc.file, error.loc.line, error.loc.col) == ("bad.yaml", 6, column)


def test_archspec_check_exits_1_on_a_bad_pattern_without_a_traceback(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(spec('  - {id: img, rearrange: {pattern: "b (h w) c -> b c h w", sizes: {h: 4}}}\n'))
    assert main(["check", str(path)]) == EXIT_SPEC == 1
    err = capsys.readouterr().err
    assert f"{path}:5:" in err and "img: axis 'w' of '(h w)': dimension 1 of size 6 does not divide by 4" in err
    assert "hint: give sizes whose product divides 6" in err and "Traceback" not in err


# -- export, ONNX, TensorRT ------------------------------------------------------------------------

EVERY_USE = spec("""\
  - {id: q, from: x, linear: {dim: 16}}
  - {id: q_heads, from: q, rearrange: {pattern: "b n (h d) -> b n h d", sizes: {h: 2}}}
  - {id: k_heads, from: x, rearrange: {pattern: "b n (h d) -> b n h d", sizes: {h: 2}}}
  - {id: scores, from: [q_heads, k_heads], einsum: {eq: "b i h d, b j h d -> b h i j"}}
  - {id: w, param: {shape: [16, 4], init: normal}}
  - {id: chain, from: [x, w, x], einsum: {eq: "b n c, b c e, b m c -> b n m e"}}
  - {id: grid, from: image, rearrange: {pattern: "b c (h p) (w q) -> b (h w) (p q c)", sizes: {p: 2, q: 2}}}
  - {id: pixels, from: grid, rearrange: {pattern: "b (h w) c -> b c h w"}}
outputs: [scores, chain, pixels]
""", "  x: [B, 6, 16]\n  image: [B, 3, 8, 8]\n")


def test_the_ops_export_with_a_dynamic_batch():
    report, model = build_counted(EVERY_USE)
    program = export_program(model, report.graph)
    args = (torch.randn(5, 6, 16), torch.randn(5, 3, 8, 8))  # not the batch it was traced with
    with torch.no_grad():
        for got, want in zip(program.module()(*args), model(*args), strict=True):
            assert torch.allclose(got, want, atol=TOL)
    assert counted_flops(model, torch.randn(1, 6, 16), torch.randn(1, 3, 8, 8)) == report.flops


def test_the_ops_in_onnx_match_onnxruntime(tmp_path):
    pytest.importorskip("onnxruntime")
    report, model = build_counted(EVERY_USE)
    result = export_onnx(model, report.graph, str(tmp_path / "model.onnx"))
    assert result.max_difference is not None and result.max_difference < 1e-4  # at batch 3, traced at another


@pytest.mark.skipif(importlib.util.find_spec("torch_tensorrt") is None, reason="torch-tensorrt is not installed")
def test_tensorrt_converts_every_op(tmp_path, capsys):
    checks_tensorrt_coverage(EVERY_USE, tmp_path, capsys)


UNFOLD = """
name: unfold
params: {img: 160}
inputs:
  image: [B, 3, img, img]
graph:
  - {id: c1, conv: {out: 8, kernel: 3, stride: 4, padding: 1}}                 # [B, 8, 40, 40]
  - {id: c2, conv: {out: 8, kernel: 3, stride: 8, padding: 1}}                 # [B, 8, 5, 5]
  - id: quadrants                 # MobileViT's unfold as a rearrange: 2x2 patches need an even side
    rearrange: {pattern: "b c (nh ph) (nw pw) -> b c (ph nh) (pw nw)", sizes: {ph: 2, pw: 2}, as: image}
outputs: [quadrants]
"""


def test_a_side_that_does_not_divide_gets_input_sizes_that_pass():
    """The side comes from the input size: the hint names input sizes with which the whole spec
    passes (a user trial got only the divisors of 5)."""
    with pytest.raises(archspec.SpecError) as info:
        archspec.check_text(UNFOLD)
    assert info.value.message.endswith("axis 'nh' of '(nh ph)': dimension 2 of size 5 does not divide by 2 (ph=2)")
    sizes = [int(s) for s in re.findall(r"\d+", info.value.hint.split("an input of", 1)[1])]
    assert sizes
    for size in sizes:
        assert archspec.check_text(UNFOLD, {"img": size}).graph.type_of("quadrants").shape[2] % 2 == 0


def test_the_divisors_a_hint_offers_are_those_near_the_size_given():
    """The Moonshine trial: 3904 = 61 x 64 split by c=48 was offered 2, 4, 8, 16, 32, 61 (not 64)."""
    from archspec.primitives.grids import divisors_near

    assert divisors_near(3904, 48) == [16, 32, 61, 64, 122, 244]
    assert divisors_near(6, 4) == [2, 3, 6] and divisors_near(7, 2) == [7]
