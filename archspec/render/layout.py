"""Where things go in the SVG picture: a layered layout, top to bottom, cluster by cluster.

Each cluster lays out its children (boxes, and sub-clusters as rectangles sized by their own
layout) in rows: a child's row is one below the lowest row of the children it reads from (the
longest path; edges against the spec's order are ignored for this), children in a row are
ordered by where what they read from lies, and rows are centred. Edges are routed afterwards
in page coordinates: down from the source, across just above the target and down into it,
or, when a box is in the way, along a lane to the right of everything they pass.

Text is measured with a fixed advance per character (the SVG uses a monospace font), so
the layout needs no font files and no external program.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .picture import Box, Cluster, Edge, Picture, box_lines, cluster_lines, error_lines, walk

FONT = 12
CHAR = 7.3  # the advance of one character at FONT px in a monospace font
LINE = 16
BOX_PAD_X, BOX_PAD_Y = 10, 6
BOX_MIN_W = 150
CLUSTER_PAD = 14
CLUSTER_BOTTOM = 26  # room for the label of the edge that leaves the last row
ROW_GAP = 40
COL_GAP = 28
LANE_GAP = 12
HEADER_LINES = 3


@dataclass
class Rect:
    x: float
    y: float
    w: float
    h: float

    @property
    def bottom(self) -> float:
        return self.y + self.h

    @property
    def right(self) -> float:
        return self.x + self.w

    @property
    def cx(self) -> float:
        return self.x + self.w / 2


@dataclass
class Route:
    edge: Edge
    points: list[tuple[float, float]]


@dataclass
class Layout:
    rects: dict[int, Rect] = field(default_factory=dict)  # id(item) -> its rectangle, in page coordinates
    routes: list[Route] = field(default_factory=list)
    width: float = 0
    height: float = 0
    header: float = 0  # the height of the title block above the graph

    def rect(self, item) -> Rect:
        return self.rects[id(item)]


def text_width(text: str) -> float:
    return len(text) * CHAR


def box_size(box: Box) -> tuple[float, float]:
    lines = box_lines(box) + [line for d in box.errors for line in error_lines(d)]
    return max(BOX_MIN_W, max(map(text_width, lines)) + 2 * BOX_PAD_X), len(lines) * LINE + 2 * BOX_PAD_Y


def cluster_header(cluster: Cluster) -> float:
    lines = len(cluster_lines(cluster)) + sum(len(error_lines(d)) for d in cluster.errors)
    return lines * LINE + 8


def layout(pic: Picture) -> Layout:
    result = Layout()
    header_lines = HEADER_LINES + sum(len(error_lines(d, 110)) for d in pic.unplaced)
    result.header = header_lines * LINE + 30
    sizes: dict[int, tuple[float, float]] = {}
    placements: dict[int, dict[int, tuple[float, float]]] = {}  # cluster -> child -> offset
    owner = _owners(pic)
    w, h = _measure(pic.root, pic, owner, sizes, placements, root=True)
    _place(pic.root, 20, result.header, sizes, placements, result.rects)
    result.width = max(w + 40, max((text_width(t) for t in header_texts(pic)), default=0) + 40)
    result.height = result.header + h + 20
    _route(pic, result)
    return result


def header_texts(pic: Picture) -> list[str]:
    state = "checks" if pic.ok else f"{len(pic.errors)} error{'s' if len(pic.errors) != 1 else ''}"
    from .picture import figures

    where = "in total" if pic.ok else "where checked"
    return [pic.name, pic.summary, f"{figures(pic.params, pic.flops)} {where} \u00b7 {state}"]


def _owners(pic: Picture) -> dict[str, list]:
    """box key -> the chain of items containing it, outermost first (the box last)."""
    chains: dict[str, list] = {}

    def visit(item, chain):
        chain = chain + [item]
        if isinstance(item, Box):
            chains[item.key] = chain
        else:
            for child in item.children:
                visit(child, chain)

    visit(pic.root, [])
    return chains


def _measure(cluster: Cluster, pic: Picture, owner, sizes, placements, root: bool = False) -> tuple[float, float]:
    for child in cluster.children:
        if isinstance(child, Box):
            sizes[id(child)] = box_size(child)
        else:
            sizes[id(child)] = _measure(child, pic, owner, sizes, placements)
    rows = _rows(cluster, pic, owner)
    offsets: dict[int, tuple[float, float]] = {}
    top = 0.0 if root else cluster_header(cluster) + CLUSTER_PAD
    pad = 0.0 if root else CLUSTER_PAD
    widths = [sum(sizes[id(c)][0] for c in row) + COL_GAP * (len(row) - 1) for row in rows]
    inner = max(widths, default=BOX_MIN_W)
    if not root:
        inner = max(inner, max(map(text_width, cluster_lines(cluster))) + 8)
    y = top
    for row, width in zip(rows, widths):
        x = pad + (inner - width) / 2
        height = max(sizes[id(c)][1] for c in row)
        for child in row:
            offsets[id(child)] = (x, y)
            x += sizes[id(child)][0] + COL_GAP
        y += height + ROW_GAP
    placements[id(cluster)] = offsets
    height = y - ROW_GAP + (0 if root else CLUSTER_BOTTOM)
    return inner + 2 * pad, max(height, top + LINE)


def _rows(cluster: Cluster, pic: Picture, owner) -> list[list]:
    """The cluster's children in rows (longest path over the edges between them), each row
    ordered by the mean position of what its members read from in the row above."""
    index = {id(c): i for i, c in enumerate(cluster.children)}
    preds: dict[int, set[int]] = {i: set() for i in range(len(cluster.children))}
    for edge in pic.edges:
        a, b = _child_of(cluster, owner, edge.source, index), _child_of(cluster, owner, edge.target, index)
        if a is not None and b is not None and a < b:
            preds[b].add(a)
    rank: dict[int, int] = {}
    for i in range(len(cluster.children)):
        rank[i] = max((rank[p] + 1 for p in preds[i]), default=0)
    rows: list[list[int]] = [[] for _ in range(max(rank.values(), default=-1) + 1)]
    for i in range(len(cluster.children)):
        rows[rank[i]].append(i)
    position: dict[int, float] = {}
    for row in rows:
        row.sort(key=lambda i: (sum(position[p] for p in preds[i]) / len(preds[i]) if preds[i] else i, i))
        for n, i in enumerate(row):
            position[i] = n
    return [[cluster.children[i] for i in row] for row in rows]


def _child_of(cluster: Cluster, owner, key: str, index: dict[int, int]) -> int | None:
    chain = owner.get(key, [])
    for depth, item in enumerate(chain):
        if item is cluster and depth + 1 < len(chain):
            return index[id(chain[depth + 1])]
    return None


def _place(cluster: Cluster, x: float, y: float, sizes, placements, rects) -> None:
    rects[id(cluster)] = Rect(x, y, *sizes[id(cluster)]) if id(cluster) in sizes else Rect(x, y, 0, 0)
    for child in cluster.children:
        dx, dy = placements[id(cluster)][id(child)]
        if isinstance(child, Box):
            rects[id(child)] = Rect(x + dx, y + dy, *sizes[id(child)])
        else:
            rects[id(child)] = Rect(x + dx, y + dy, *sizes[id(child)])
            _place(child, x + dx, y + dy, sizes, placements, rects)


def _route(pic: Picture, result: Layout) -> None:
    boxes = {b.key: b for b in pic.boxes()}
    leaves = [result.rect(b) for b in boxes.values()]
    frames = [result.rect(c) for c in walk(pic.root) if isinstance(c, Cluster) and c is not pic.root]
    lanes = 0
    for edge in pic.edges:
        a, b = result.rect(boxes[edge.source]), result.rect(boxes[edge.target])
        start, end = (a.cx, a.bottom), (b.cx, b.y)
        turn = b.y - 12
        if turn > start[1] and not _blocked(start[0], start[1], turn, leaves, (a, b)):
            points = [start, (start[0], turn), (end[0], turn), end]
        else:
            lanes += 1
            lane = _lane_x(a, b, leaves + frames) + lanes * LANE_GAP
            down = a.bottom + 22  # below the source's label
            points = [start, (start[0], down), (lane, down), (lane, turn), (end[0], turn), end]
            result.width = max(result.width, lane + 20)
        result.routes.append(Route(edge, _simplify(points)))


def _blocked(x: float, top: float, bottom: float, rects: list[Rect], ends) -> bool:
    return any(r.x - 4 <= x <= r.right + 4 and r.y < bottom and r.bottom > top and r not in ends for r in rects)


def _lane_x(a: Rect, b: Rect, rects: list[Rect]) -> float:
    top, bottom = min(a.y, b.y), max(a.bottom, b.bottom)
    return max([r.right for r in rects if r.y < bottom and r.bottom > top] + [a.right, b.right]) + LANE_GAP


def _simplify(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Drop repeated points and the middle of three in a line."""
    out: list[tuple[float, float]] = []
    for p in points:
        if out and p == out[-1]:
            continue
        if len(out) >= 2 and (out[-2][0] == out[-1][0] == p[0] or out[-2][1] == out[-1][1] == p[1]):
            out[-1] = p
            continue
        out.append(p)
    return out
