# Generated from chapters/09_triton_chunked_forward.md by tools/tangle.py.
# Edit the chapter, not this file: `python tools/tangle.py` rewrites it.

"""A pipeline figure: kernels as boxes, HBM buffers as arrows, each with shape and type, checked against the
buffers a launch sequence really allocates."""


def pipeline_mismatches(pipeline, buffers, sizes, types):
    """Every row of the table that the real buffers contradict.

    pipeline: rows (names, written by, read by, shapes, type); names "A, Aqk" share one shape, or take one each
    from shapes "[a, b], [c, d]". buffers: {name: tensor}; sizes: {dimension name: int}; types: {type: dtype}.
    Returns a list of (name, (shape, dtype) the table says, (shape, dtype) found); empty when all agree."""
    wrong = []
    for names, _, _, shapes, kind in pipeline:
        names = names.split(", ")
        shapes = shapes.strip("[]").split("], [")
        for name, shape in zip(names, shapes * len(names) if len(shapes) == 1 else shapes, strict=True):
            said = (tuple(sizes[d] for d in shape.split(", ")), types[kind])
            found = (tuple(buffers[name].shape), buffers[name].dtype)
            if said != found:
                wrong.append((name, said, found))
    return wrong


def _rounded_box(ax, x, y, width, height, colour, pad=0.05):
    """A box with rounded corners (quadratic Bezier corners of radius pad, as matplotlib's "round" box style)."""
    x0, y0, x1, y1 = x - pad, y - pad, x + width + pad, y + height + pad
    corners = [((x1 - pad, y0), (x1, y0), (x1, y0 + pad)), ((x1, y1 - pad), (x1, y1), (x1 - pad, y1)),
               ((x0 + pad, y1), (x0, y1), (x0, y1 - pad)), ((x0, y0 + pad), (x0, y0), (x0 + pad, y0))]
    points = [[(1 - t) ** 2 * a[i] + 2 * (1 - t) * t * c[i] + t ** 2 * e[i] for i in (0, 1)]
              for a, c, e in corners for t in [j / 8 for j in range(9)]]
    xs, ys = zip(*points)
    ax.fill(xs, ys, facecolor=colour, edgecolor="black")


def _arrow(ax, start, end, size, **style):
    """An arrow from start to end in data coordinates, head size `size` points."""
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="-|>", mutation_scale=size, shrinkA=2,
                                                          shrinkB=2, **style))


def draw_pipeline(ax, pipeline, grids, inputs_label, output_label, notes, sequential=("scan",), top=3.6):
    """Draw a launch sequence on ax: one box per kernel of grids ({kernel: its grid}, left to right; those in
    `sequential` shaded), an arrow per (writer, reader) pair of the table pipeline (rows as in
    pipeline_mismatches; readers not in grids, such as "caller", get no arrow) labelled with its buffers,
    straight between neighbours and arched over the boxes between farther ones. inputs_label enters the first
    box, output_label leaves the last; notes {kernel: text} stand above the boxes. Returns ax."""
    xs = {name: 2.6 * i for i, name in enumerate(grids)}
    for name, x in xs.items():
        _rounded_box(ax, x, 1.0, 1.6, 0.8, "#f6dcd8" if name in sequential else "#d8e8f6")
        ax.text(x + 0.8, 1.5, name, ha="center", va="center", fontsize=9, weight="bold")
        ax.text(x + 0.8, 1.18, grids[name], ha="center", va="center", fontsize=6.5)
    _arrow(ax, (-0.6, 1.4), (0.0, 1.4), 10)
    ax.text(-0.65, 1.4, inputs_label, ha="right", va="center", fontsize=7)
    arrows = {}                                      # (writer, reader) -> the buffers' labels
    for names, src, dst, shapes, kind in pipeline:
        for target in (t for t in dst.split(", ") if t in xs and src in xs):
            arrows.setdefault((src, target), []).append(f"{names} {shapes} {kind}")
    for (src, target), labels in arrows.items():
        x0, x1 = xs[src] + 1.6, xs[target]
        if x1 - x0 < 2:                              # neighbours: a straight arrow, its labels under the gap
            _arrow(ax, (x0, 1.4), (x1, 1.4), 8, lw=0.8)
            ax.text((x0 + x1) / 2, 0.92, "\n".join(labels), ha="center", va="top", fontsize=6)
        else:                                        # farther: an arc from box top to box top
            x0, x1 = xs[src] + 1.2, xs[target] + 0.4
            _arrow(ax, (x0, 1.85), (x1, 1.85), 8, lw=0.8, connectionstyle="arc3,rad=-0.3")
            ax.text((x0 + x1) / 2, 1.9 + 0.19 * (x1 - x0), "\n".join(labels), ha="center", va="bottom", fontsize=6)
    for name, text in notes.items():
        ax.text(xs[name] + 0.8, 1.95, text, ha="center", va="bottom", fontsize=6)
    last = max(xs.values())
    _arrow(ax, (last + 1.6, 1.4), (last + 2.1, 1.4), 10)
    ax.text(last + 2.15, 1.4, output_label, ha="left", va="center", fontsize=9)
    ax.set_xlim(-1.6, last + 2.5)
    ax.set_ylim(0.2, top)
    ax.axis("off")
    return ax
