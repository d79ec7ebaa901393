"""Draw the lesson figures on parallelism and multi-GPU training.

The pictures are our own drawings, made from matplotlib patches, arrows
and text only, and are written as SVG files into ``notebooks/img/``:

* ``splitting.svg``: ways to split a network over two GPUs;
* ``data-parallel.svg``: one training step of data parallelism;
* ``ring-allreduce.svg``: the ring allreduce on three devices;
* ``mlp-dependencies.svg``: the dependencies of one training step of a
  two-layer MLP on a CPU and two GPUs.

All labels are short plain-ASCII English words, because the same images
serve the English, French, Turkish and Chinese lessons. Colours: GPU 1
blue, GPU 2 purple, CPU green, copies and communication orange, data
grey. The output is deterministic, so rerunning the script on the same
matplotlib version changes no file. Run it from the repository root::

    .venv/bin/python tools/figures.py
"""
import copy
import pathlib

import matplotlib.pyplot as plt
from matplotlib import colors
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path

OUT = pathlib.Path(__file__).resolve().parent.parent / 'notebooks' / 'img'
GPU1, GPU2, CPU = 'tab:blue', 'tab:purple', 'tab:green'
COMM, DATA, INK = 'tab:orange', 'tab:gray', '0.25'

plt.rcParams['svg.hashsalt'] = 'd2lpar'
plt.rcParams['font.size'] = 7


def tint(color, amount):
    """Mix `color` with white; `amount` 1 gives the pure colour."""
    return tuple(1 - amount * (1 - c) for c in colors.to_rgb(color))


def canvas(width, height):
    """A figure whose data coordinates are inches from the lower left."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis('off')
    return fig, ax


def box(ax, x, y, w, h, text='', color=INK, fill=0.2, **kw):
    """Draw a rounded box at (x, y), lower left; no fill: see-through."""
    face = 'none' if fill is None else tint(color, fill)
    patch = FancyBboxPatch((x, y), w, h, fc=face, ec=color,
                           lw=kw.pop('lw', 1.2),
                           boxstyle='round,pad=0,rounding_size=0.04')
    ax.add_patch(patch)
    ax.text(x + w / 2, y + h / 2, text, ha='center', va='center', **kw)
    return patch


def centre(patch):
    return (patch.get_x() + patch.get_width() / 2,
            patch.get_y() + patch.get_height() / 2)


def arrow(ax, a, b, color=INK, style='-|>', conn='arc3', **kw):
    """Draw an arrow from a to b, each a point or a box to clip at."""
    pa = a if isinstance(a, FancyBboxPatch) else None
    pb = b if isinstance(b, FancyBboxPatch) else None
    ax.add_patch(FancyArrowPatch(
        centre(a) if pa else a, centre(b) if pb else b, patchA=pa,
        patchB=pb, arrowstyle=style, connectionstyle=conn, color=color,
        mutation_scale=8, lw=1, shrinkA=1.5, shrinkB=1.5, **kw))


def legend(ax, x, y, items):
    """Draw a one-line legend of (colour, fill, label); no fill: arrow."""
    for color, fill, label in items:
        if fill is None:
            arrow(ax, (x, y), (x + 0.3, y), color)
        else:
            box(ax, x, y - 0.08, 0.3, 0.16, color=color, fill=fill)
        ax.text(x + 0.38, y, label, va='center')
        x += 0.55 + 0.055 * len(label)


def badge(ax, x, y, number):
    """Draw a step number in a dark disc."""
    ax.add_patch(Circle((x, y), 0.1, color=INK))
    ax.text(x, y, str(number), ha='center', va='center', color='white',
            fontsize=8, weight='bold')


def save(fig, name):
    fig.savefig(OUT / name, metadata={'Date': None})
    plt.close(fig)


# Figure 1: partitioning a network over two GPUs.

LEVELS = [0.42 + 0.44 * k for k in range(5)]  # batch, layers 1 to 4
HIGH = 0.26  # box height


def stack(ax, x, w, gpus, batch='batch'):
    """Draw a batch feeding four layers; orange arrows cross GPUs."""
    below = box(ax, x, LEVELS[0], w, HIGH, batch, DATA)
    for k, gpu in enumerate(gpus, 1):
        layer = box(ax, x, LEVELS[k], w, HIGH, f'layer {k}', gpu)
        cross = k > 1 and gpus[k - 2] != gpu
        arrow(ax, below, layer, COMM if cross else INK)
        below = layer


def splitting():
    fig, ax = canvas(8, 3)
    titles = ['original', 'network partitioning',
              'layer-wise partitioning', 'data parallelism']
    for p, title in enumerate(titles):
        ax.text(2 * p + 1, 2.82, title, ha='center', va='center',
                fontsize=9, weight='bold')
    stack(ax, 0.5, 1, [GPU1] * 4)
    stack(ax, 2.5, 1, [GPU1, GPU1, GPU2, GPU2])
    # Layer-wise: each layer is cut in two halves by channels.
    box(ax, 4.1, LEVELS[0], 1.8, HIGH, 'batch', DATA)
    left, right = 4.52, 5.48  # centres of the two halves
    for k in range(1, 5):
        box(ax, 4.1, LEVELS[k], 0.84, HIGH, f'layer {k}', GPU1)
        box(ax, 5.06, LEVELS[k], 0.84, HIGH, f'layer {k}', GPU2)
        low, high = LEVELS[k - 1] + HIGH, LEVELS[k]
        arrow(ax, (left - 0.2, low), (left - 0.2, high))
        arrow(ax, (right + 0.2, low), (right + 0.2, high))
        if k > 1:
            arrow(ax, (left + 0.2, low), (right - 0.2, high), COMM)
            arrow(ax, (right - 0.2, low), (left + 0.2, high), COMM)
    # Data parallelism: two full copies, each fed half of the batch.
    stack(ax, 6.1, 0.75, [GPU1] * 4, 'half 1')
    stack(ax, 7.15, 0.75, [GPU2] * 4, 'half 2')
    for k in range(1, 5):
        y = LEVELS[k] + HIGH / 2
        arrow(ax, (6.85, y), (7.15, y), COMM, style='<|-|>')
    ax.text(7, LEVELS[4] + HIGH + 0.1, 'sync gradients', color=COMM,
            ha='center', va='center', weight='bold')
    legend(ax, 2.2, 0.15, [(GPU1, 0.2, 'GPU 1'), (GPU2, 0.2, 'GPU 2'),
                           (DATA, 0.2, 'data'), (COMM, None, 'transfer')])
    save(fig, 'splitting.svg')


# Figure 2: one step of data parallelism on two GPUs.

def data_parallel():
    fig, ax = canvas(7.45, 3)
    ax.text(0.55, 2.04, 'minibatch', ha='center', va='center', fontsize=8)
    parts = [box(ax, 0.15, 1.52, 0.8, 0.4, 'part 1', CPU),
             box(ax, 0.15, 1.08, 0.8, 0.4, 'part 2', CPU)]
    total = box(ax, 3.6, 1.25, 1.3, 0.5, 'allreduce\ng = g1 + g2', COMM,
                fontsize=8)
    for i, (gpu, side) in enumerate([(GPU1, 1), (GPU2, -1)]):
        y, top = 1.5 + 0.62 * side, 1.5 + 1.2 * side
        ax.text(1.78, top, f'GPU {i + 1}', ha='right', va='center',
                color=gpu, fontsize=9, weight='bold')
        params = box(ax, 1.9, top - 0.175, 1, 0.35, 'params w', gpu)
        grad = box(ax, 1.9, y - 0.2, 1, 0.4,
                   f'loss and\ngradient g{i + 1}', gpu)
        update = box(ax, 5.9, y - 0.2, 1.4, 0.4, 'update\nw <- w - lr * g',
                     gpu)
        arrow(ax, parts[i], grad, COMM)
        arrow(ax, params, grad)
        arrow(ax, grad, total, COMM)
        arrow(ax, total, update, COMM)
        arrow(ax, (6.6, y + 0.2 * side), (2.9, top), DATA, ls='--',
              conn='angle,angleA=90,angleB=0,rad=0')
        ax.text(4.75, top + 0.1 * side, 'next step', color=DATA,
                ha='center', va='center')
    for x, step in [(1.4, 1), (2.4, 2), (3.25, 3), (5.4, 4), (6.6, 5)]:
        badge(ax, x, 1.5, step)
    save(fig, 'data-parallel.svg')


# Figure 3: ring allreduce on three devices.

def ring_steps(n=3):
    """Yield (title, state, sends) for each panel of the ring allreduce.

    state[i][k] is the set of devices whose chunk k is summed on device
    i, after the step; sends lists the pairs (i, k): device i sent its
    chunk k to device i + 1 (mod n) during the step.
    """
    state = [[{i} for _ in range(n)] for i in range(n)]
    yield 'start', state, []
    for phase in ('reduce-scatter', 'all-gather'):
        for s in range(n - 1):
            old, state = state, copy.deepcopy(state)
            sends = []
            for i in range(n):
                j = (i + 1) % n
                if phase == 'reduce-scatter':
                    k = (i - s) % n
                    state[j][k] = old[j][k] | old[i][k]
                else:
                    k = (i + 1 - s) % n
                    state[j][k] = set(old[i][k])
                sends.append((i, k))
            yield f'{phase}\nstep {s + 1}', state, sends
        if phase == 'reduce-scatter':  # device i has chunk i + 1 summed
            assert all(state[i][(i + 1) % n] == set(range(n))
                       for i in range(n))
    assert all(cell == set(range(n)) for row in state for cell in row)


def ring_allreduce():
    fig, ax = canvas(8, 3)
    width, height = 0.36, 0.42  # chunk cell
    tops = [2.52, 1.86, 1.2]  # top edge of each device's row
    shade = {1: 0.06, 2: 0.35, 3: 1}
    for i, top in enumerate(tops):
        ax.text(0.5, top - height / 2, f'dev {i}', ha='right',
                va='center', fontsize=8, weight='bold')
    for p, (title, state, sends) in enumerate(ring_steps()):
        x0 = 0.6 + 1.49 * p
        ax.text(x0 + 0.57, 2.8, title, ha='center', va='center',
                fontsize=8, weight='bold')
        got = {((i + 1) % 3, k) for i, k in sends}
        for i, row in enumerate(state):
            for k, cell in enumerate(row):
                text = '\n+'.join('abc'[d] + str(k) for d in sorted(cell))
                box(ax, x0 + 0.39 * k, tops[i] - height, width, height,
                    text, GPU1, shade[len(cell)], linespacing=1.05,
                    c='white' if len(cell) == 3 else 'black')
                if (i, k) in got:
                    box(ax, x0 + 0.39 * k, tops[i] - height, width, height,
                        color=COMM, fill=None, lw=2.2)
        for i, k in sends:
            x = x0 + 0.39 * k + width / 2
            if i < 2:
                arrow(ax, (x, tops[i] - height), (x, tops[i + 1]), COMM)
                continue
            low, high, side = tops[2] - height - 0.1, tops[0] + 0.1, x0 + 1.22
            path = Path([(x, tops[2] - height), (x, low), (side, low),
                         (side, high), (x, high), (x, tops[0])])
            ax.add_patch(FancyArrowPatch(path=path, arrowstyle='-|>',
                                         mutation_scale=8, color=COMM))
    legend(ax, 1.6, 0.3, [(GPU1, 0.06, 'own chunk'), (GPU1, 0.35,
                          'partial sum'), (GPU1, 1, 'full sum'),
                          (COMM, None, 'sent to next device')])
    save(fig, 'ring-allreduce.svg')


# Figure 4: dependencies of one training step of a two-layer MLP.

def mlp_dependencies():
    fig, ax = canvas(8, 3)
    lanes = [('GPU 1', GPU1, 1.9, 2.76), ('CPU', CPU, 1.18, 1.78),
             ('GPU 2', GPU2, 0.2, 1.06)]
    for name, color, low, high in lanes:
        ax.add_patch(FancyBboxPatch(
            (0.05, low), 7.9, high - low, fc=tint(color, 0.1), ec='none',
            zorder=0, boxstyle='round,pad=0,rounding_size=0.06'))
        ax.text(0.18, (low + high) / 2, name, color=color, rotation=90,
                ha='center', va='center', fontsize=8, weight='bold')

    def node(col, y, text, color):
        return box(ax, 0.38 + 0.633 * col, y - 0.15, 0.5, 0.3, text,
                   color, fontsize=6.5)

    load, split = node(0, 1.48, 'load', CPU), node(1, 1.48, 'split', CPU)
    sum2 = node(8, 1.48, 'sum\ngrad W2', CPU)
    sum1 = node(9, 1.48, 'sum\ngrad W1', CPU)
    update = node(10, 1.48, 'update\nW1, W2', CPU)
    arrow(ax, load, split)
    arrow(ax, sum2, update, conn='arc3,rad=-0.45')
    arrow(ax, sum1, update)
    steps = ['forward\nlayer 1', 'forward\nlayer 2', 'loss',
             'backward\nlayer 2', 'backward\nlayer 1']
    for i, (gpu, side) in enumerate([(GPU1, 1), (GPU2, -1)]):
        work, move = 1.48 + 1.06 * side, 1.48 + 0.63 * side
        copy_in = node(2, move, f'copy\nhalf {i + 1}', COMM)
        chain = [node(col, work, text, gpu)
                 for col, text in enumerate(steps, 3)]
        grad2 = node(7, move, 'copy\ngrad W2', COMM)
        grad1 = node(8, move, 'copy\ngrad W1', COMM)
        new = node(11, move, 'copy\nnew W', COMM)
        for a, b in [(split, copy_in), (copy_in, chain[0]),
                     *zip(chain, chain[1:]), (chain[3], grad2),
                     (chain[4], grad1), (grad2, sum2), (grad1, sum1),
                     (update, new)]:
            arrow(ax, a, b)
        # Sending grad W2 overlaps with the backward pass of layer 1.
        ax.add_patch(FancyBboxPatch(
            (0.38 + 0.633 * 7 - 0.05, min(work, move) - 0.19), 0.6, 0.81,
            fc='none', ec=INK, ls='--', lw=1, zorder=0.5,
            boxstyle='round,pad=0,rounding_size=0.05'))
        ax.text(0.63 + 0.633 * 7, 1.48 + 1.4 * side, 'can overlap',
                ha='center', va='center', fontsize=8, style='italic')
    save(fig, 'mlp-dependencies.svg')


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    splitting()
    data_parallel()
    ring_allreduce()
    mlp_dependencies()
    print('wrote 4 figures to', OUT)


if __name__ == '__main__':
    main()
