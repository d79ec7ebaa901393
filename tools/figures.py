"""Draw the pictures of the lessons, once per language.

The pictures are our own drawings, made from matplotlib patches, arrows
and text only, and are written as SVG files into
``notebooks/img/<lang>/<name>.svg`` for every language of the lessons
(en, fr, tr, zh), with every word in that language (the terms of
``docs/glossary/<lang>.md``):

* ``splitting.svg``: ways to split a network over two GPUs;
* ``alexnet-two-gpus.svg``: AlexNet split over two GPUs as Krizhevsky
  et al. (2012) did, with the layers where the GPUs exchange activations;
* ``data-parallel.svg``: one training step of data parallelism;
* ``ring-allreduce.svg``: the ring allreduce on three devices;
* ``mlp-dependencies.svg``: the dependencies of one training step of a
  two-layer MLP on a CPU and two GPUs;
* ``ring-vs-server.svg``: the bytes each link carries in one step, ring
  allreduce next to a parameter server, for four workers;
* ``zero-partition.svg``: the model state that each of four devices
  keeps with data parallelism and ZeRO-1, 2 and 3, to scale (fp32 with
  Adam, the bytes of ``d2lpar.sharding.zero_memory``);
* ``tensor-parallel.svg``: Megatron-LM's split of a two-layer MLP over two
  devices, with its allreduces of the forward and the backward pass;
* ``pipeline-schedules.svg``: GPipe, 1F1B and the interleaved schedule
  on one clock, for 2 devices and 4 micro-batches (the schedules of
  ``d2lpar.sharding``; 1F1B's by the same rule, here), with the bubble.

Colours: GPU 1 (or device 0 of a schedule) blue, GPU 2 purple, CPU
green, copies and communication orange, data and idle time grey; in
ZeRO's picture, parameters blue, gradients red, optimizer state green. A
forward pass is drawn pale, a backward pass in the full colour. Text is
drawn as paths, so a picture looks the same without the fonts: DejaVu
Sans (matplotlib's own) for en, fr and tr; for zh, Noto Sans CJK SC from
the pinned ``mplfonts`` package (installed with ``--no-deps``, see
``requirements-nodeps.txt``), registered with matplotlib's font manager.
A glyph missing from the fonts, a label wider than its box, a legend
wider than the picture, or a French colon without its no-break space
stops the drawing with an error.

The output is deterministic (a fixed ``svg.hashsalt``, no date): drawing
again with the pinned matplotlib changes no byte, and
``tests/test_figures.py`` checks that the committed pictures are those
this script draws. Run it from the repository root::

    .venv/bin/python tools/figures.py                 # every picture
    .venv/bin/python tools/figures.py --out DIR       # into DIR/<lang>/
    .venv/bin/python tools/figures.py --png DIR       # also PNG previews
    .venv/bin/python tools/figures.py --lang zh --only ring-allreduce

Each picture is a function of the words of one language (and the
language code, for its decimal separator), listed in FIGURES, drawn with
the kit of tools/drawing.py (fonts, words, boxes, arrows, `save`).
"""
import argparse
import copy
import math
import pathlib

from drawing import (  # tools/drawing.py; sets matplotlib's backend first
    CPU, COMM, DATA, GPU1, GPU2, INK, LANGS, OUT, RC, WORDS,  # noqa: F401
    arrow, badge, box, canvas, label, legend, number, save, tint, use_fonts,
    words)
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import (  # noqa: E402
    FancyArrowPatch, FancyBboxPatch, Rectangle)
from matplotlib.path import Path  # noqa: E402

from d2lpar.sharding import (  # noqa: E402 (the lesson's own numbers)
    FP32_ADAM, bubble_fraction, gpipe_schedule, interleaved_schedule,
    zero_memory)


LEVELS = [0.42 + 0.44 * k for k in range(5)]  # batch, layers 1 to 4
HIGH = 0.26  # box height


def stack(ax, w, x, width, gpus, batch):
    """Draw a batch feeding four layers; orange arrows cross GPUs."""
    below = box(ax, x, LEVELS[0], width, HIGH, batch, DATA)
    for k, gpu in enumerate(gpus, 1):
        layer = box(ax, x, LEVELS[k], width, HIGH, w['layer'].format(k),
                    gpu)
        cross = k > 1 and gpus[k - 2] != gpu
        arrow(ax, below, layer, COMM if cross else INK)
        below = layer


def splitting(w, lang):
    fig, ax = canvas(8, 3)
    titles = [w['original'], w['network'], w['layerwise'],
              w['dataparallel']]
    for p, title in enumerate(titles):
        label(ax, 2 * p + 1, 2.82, title, 1.95, ha='center', fontsize=9,
              weight='bold')
    stack(ax, w, 0.5, 1, [GPU1] * 4, w['batch'])
    stack(ax, w, 2.5, 1, [GPU1, GPU1, GPU2, GPU2], w['batch'])
    # Layer-wise: each layer is cut in two halves by channels.
    box(ax, 4.1, LEVELS[0], 1.8, HIGH, w['batch'], DATA)
    left, right = 4.52, 5.48  # centres of the two halves
    for k in range(1, 5):
        box(ax, 4.1, LEVELS[k], 0.84, HIGH, w['layer'].format(k), GPU1)
        box(ax, 5.06, LEVELS[k], 0.84, HIGH, w['layer'].format(k), GPU2)
        low, high = LEVELS[k - 1] + HIGH, LEVELS[k]
        arrow(ax, (left - 0.2, low), (left - 0.2, high))
        arrow(ax, (right + 0.2, low), (right + 0.2, high))
        if k > 1:
            arrow(ax, (left + 0.2, low), (right - 0.2, high), COMM)
            arrow(ax, (right - 0.2, low), (left + 0.2, high), COMM)
    # Data parallelism: two full copies, each fed half of the batch.
    stack(ax, w, 6.1, 0.75, [GPU1] * 4, w['half'].format(1))
    stack(ax, w, 7.15, 0.75, [GPU2] * 4, w['half'].format(2))
    for k in range(1, 5):
        y = LEVELS[k] + HIGH / 2
        arrow(ax, (6.85, y), (7.15, y), COMM, style='<|-|>')
    label(ax, 7, LEVELS[4] + HIGH + 0.1, w['sync'], 1.9, color=COMM,
          ha='center', weight='bold')
    legend(ax, 2.2, 0.15, [(GPU1, 0.2, w['gpu'].format(1)),
                           (GPU2, 0.2, w['gpu'].format(2)),
                           (DATA, 0.2, w['data']),
                           (COMM, None, w['transfer'])])
    return fig


# AlexNet over two GPUs (Krizhevsky et al., 2012, section 3.2 and
# figure 2): half of the kernels (or neurons) of every layer on each GPU;
# the GPUs communicate only at the inputs of the third convolution and
# of the fully connected layers.

ALEXNET = [('conv', 1, 48, False), ('conv', 2, 128, False),
           ('conv', 3, 192, True), ('conv', 4, 192, False),
           ('conv', 5, 128, False), ('fc', 1, 2048, True),
           ('fc', 2, 2048, True), ('fc', 3, 500, True)]


def alexnet(w, lang):
    fig, ax = canvas(8, 4.6)
    pitch, high = 0.37, 0.25
    left, width, gap = 1.95, 1.75, 1.0  # GPU 1 column, then the gap
    right = left + width + gap
    label(ax, 4, 4.43, w['alexnet'], 7.8, ha='center', fontsize=9,
          weight='bold')
    for x, gpu, color in [(left, 1, GPU1), (right, 2, GPU2)]:
        ax.text(x + width / 2, 4.17, w['gpu'].format(gpu), ha='center',
                va='center', color=color, fontsize=9, weight='bold')
    middles = (left + width / 2, right + width / 2)

    def row(level, name):
        y = 0.45 + pitch * level
        label(ax, left - 0.12, y + high / 2, name, 1.8, ha='right')
        return y

    y = row(0, w['input'])
    box(ax, left, y, 2 * width + gap, high, w['image'], DATA)
    below = [(x, y + high) for x in middles]
    for level, (kind, index, size, exchange) in enumerate(ALEXNET, 1):
        y = row(level, w[kind].format(index))
        text = w['channels' if kind == 'conv' else 'units'].format(size)
        layer = [box(ax, left, y, width, high, text, GPU1),
                 box(ax, right, y, width, high, text, GPU2)]
        for g in (0, 1):
            arrow(ax, below[g], layer[g] if level > 1 else (middles[g], y))
        if exchange:
            low, top = y - pitch + high, y
            arrow(ax, (left + width - 0.1, low), (right + 0.1, top), COMM)
            arrow(ax, (right + 0.1, low), (left + width - 0.1, top), COMM)
            label(ax, right + width + 0.12, y - (pitch - high) / 2,
                  w['exchange'], 8 - right - width - 0.2, color=COMM,
                  weight='bold')
        below = layer
    y = row(len(ALEXNET) + 1, w['output'])
    box(ax, left, y, 2 * width + gap, high, w['softmax'], DATA)
    for g in (0, 1):
        arrow(ax, below[g], (middles[g], y))
    legend(ax, 2.0, 0.17, [(GPU1, 0.2, w['gpu'].format(1)),
                           (GPU2, 0.2, w['gpu'].format(2)),
                           (INK, None, w['same']),
                           (COMM, None, w['other'])])
    return fig


# One step of data parallelism on two GPUs.

def data_parallel(w, lang):
    fig, ax = canvas(7.45, 3)
    label(ax, 0.55, 2.04, w['batch'], 1.0, ha='center', fontsize=8)
    parts = [box(ax, 0.15, 1.52, 0.8, 0.4, w['part'].format(1), CPU),
             box(ax, 0.15, 1.08, 0.8, 0.4, w['part'].format(2), CPU)]
    total = box(ax, 3.6, 1.25, 1.3, 0.5, w['allreduce'], COMM, fontsize=8)
    for i, (gpu, side) in enumerate([(GPU1, 1), (GPU2, -1)]):
        y, top = 1.5 + 0.62 * side, 1.5 + 1.2 * side
        ax.text(1.78, top, w['gpu'].format(i + 1), ha='right', va='center',
                color=gpu, fontsize=9, weight='bold')
        params = box(ax, 1.9, top - 0.175, 1, 0.35, w['params'], gpu)
        grad = box(ax, 1.9, y - 0.2, 1, 0.4, w['lossgrad'].format(i + 1),
                   gpu)
        update = box(ax, 5.9, y - 0.2, 1.4, 0.4, w['update'], gpu)
        arrow(ax, parts[i], grad, COMM)
        arrow(ax, params, grad)
        arrow(ax, grad, total, COMM)
        arrow(ax, total, update, COMM)
        arrow(ax, (6.6, y + 0.2 * side), (2.9, top), DATA, ls='--',
              conn='angle,angleA=90,angleB=0,rad=0')
        label(ax, 4.75, top + 0.1 * side, w['next'], 1.6, color=DATA,
              ha='center')
    for x, step in [(1.4, 1), (2.4, 2), (3.25, 3), (5.4, 4), (6.6, 5)]:
        badge(ax, x, 1.5, step)
    return fig


# The ring allreduce on three devices.

def ring_steps(n=3):
    """Yield (phase, step, state, sends) for each panel of the ring
    allreduce (phase None: the start).

    state[i][k] is the set of devices whose chunk k is summed on device
    i, after the step; sends lists the pairs (i, k): device i sent its
    chunk k to device i + 1 (mod n) during the step.
    """
    state = [[{i} for _ in range(n)] for i in range(n)]
    yield None, 0, state, []
    for phase in ('rs', 'ag'):  # reduce-scatter, all-gather
        for s in range(n - 1):
            old, state = state, copy.deepcopy(state)
            sends = []
            for i in range(n):
                j = (i + 1) % n
                if phase == 'rs':
                    k = (i - s) % n
                    state[j][k] = old[j][k] | old[i][k]
                else:
                    k = (i + 1 - s) % n
                    state[j][k] = set(old[i][k])
                sends.append((i, k))
            yield phase, s + 1, state, sends
        if phase == 'rs':  # device i has chunk i + 1 summed
            assert all(state[i][(i + 1) % n] == set(range(n))
                       for i in range(n))
    assert all(cell == set(range(n)) for row in state for cell in row)


def ring_allreduce(w, lang):
    fig, ax = canvas(8, 3)
    width, height = 0.36, 0.42  # chunk cell
    tops = [2.52, 1.86, 1.2]  # top edge of each device's row
    shade = {1: 0.06, 2: 0.35, 3: 1}
    for i, top in enumerate(tops):
        label(ax, 0.66, top - height / 2, w['dev'].format(i), 0.62,
              ha='right', fontsize=8, weight='bold')
    for p, (phase, step, state, sends) in enumerate(ring_steps()):
        x0 = 0.75 + 1.45 * p
        title = w[phase].format(step) if phase else w['start']
        label(ax, x0 + 0.57, 2.8, title, 1.4, ha='center', fontsize=8,
              weight='bold')
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
    legend(ax, 0.9, 0.3, [(GPU1, 0.06, w['own']), (GPU1, 0.35,
                          w['partial']), (GPU1, 1, w['full']),
                          (COMM, None, w['sent'])])
    return fig


# The dependencies of one training step of a two-layer MLP.

def mlp_dependencies(w, lang):
    fig, ax = canvas(8.4, 3)
    pitch, wide = 0.66, 0.53  # of the columns, of a node
    lanes = [(w['gpu'].format(1), GPU1, 1.9, 2.76),
             (w['cpu'], CPU, 1.18, 1.78),
             (w['gpu'].format(2), GPU2, 0.2, 1.06)]
    for name, color, low, high in lanes:
        ax.add_patch(FancyBboxPatch(
            (0.05, low), 8.3, high - low, fc=tint(color, 0.1), ec='none',
            zorder=0, boxstyle='round,pad=0,rounding_size=0.06'))
        ax.text(0.18, (low + high) / 2, name, color=color, rotation=90,
                ha='center', va='center', fontsize=8, weight='bold')

    def node(col, y, text, color):
        return box(ax, 0.36 + pitch * col, y - 0.16, wide, 0.32, text,
                   color, fontsize=6.5)

    load = node(0, 1.48, w['load'], CPU)
    split = node(1, 1.48, w['split'], CPU)
    sum2 = node(8, 1.48, w['sumgrad'].format(2), CPU)
    sum1 = node(9, 1.48, w['sumgrad'].format(1), CPU)
    update = node(10, 1.48, w['updatew'], CPU)
    arrow(ax, load, split)
    arrow(ax, sum2, update, conn='arc3,rad=-0.45')
    arrow(ax, sum1, update)
    steps = [w['fwd'].format(1), w['fwd'].format(2), w['loss'],
             w['bwd'].format(2), w['bwd'].format(1)]
    for i, (gpu, side) in enumerate([(GPU1, 1), (GPU2, -1)]):
        work, move = 1.48 + 1.06 * side, 1.48 + 0.63 * side
        copy_in = node(2, move, w['copyhalf'].format(i + 1), COMM)
        chain = [node(col, work, text, gpu)
                 for col, text in enumerate(steps, 3)]
        grad2 = node(7, move, w['copygrad'].format(2), COMM)
        grad1 = node(8, move, w['copygrad'].format(1), COMM)
        new = node(11, move, w['copynew'], COMM)
        for a, b in [(split, copy_in), (copy_in, chain[0]),
                     *zip(chain, chain[1:]), (chain[3], grad2),
                     (chain[4], grad1), (grad2, sum2), (grad1, sum1),
                     (update, new)]:
            arrow(ax, a, b)
        # Sending grad W2 overlaps with the backward pass of layer 1.
        x = 0.36 + pitch * 7  # the column of backward layer 1
        ax.add_patch(FancyBboxPatch(
            (x - 0.04, min(work, move) - 0.2), wide + 0.08, 0.83,
            fc='none', ec=INK, ls='--', lw=1, zorder=0.5,
            boxstyle='round,pad=0,rounding_size=0.05'))
        label(ax, x + wide / 2, 1.48 + 1.4 * side, w['overlap'], 1.5,
              ha='center', fontsize=8, style='italic')
    return fig


# Bytes per link in one step: ring allreduce and a parameter server.

def ring_vs_server(w, lang, k=4):
    """Both on the same network: every worker has one link to a switch
    (and the server too); each link shows what it carries each way."""
    fig, ax = canvas(8, 3.5)
    label(ax, 4, 3.32, w['setting'], 7.8, ha='center', fontsize=8)
    bw, bh, pitch = 0.66, 0.3, 0.92  # worker boxes
    work_y, hub_y, hub_h = 0.78, 1.82, 0.24

    def link(x, low, high, text, lw=1.0, weight='normal'):
        """A link with an arrow up on its left and down on its right."""
        ax.plot([x, x], [low, high], color=DATA, lw=0.8, zorder=0.5)
        for dx, a, b in [(-0.06, low, high), (0.06, high, low)]:
            arrow(ax, (x + dx, a), (x + dx, b), COMM, lw=lw)
            ax.text(x + 2 * dx, (low + high) / 2, text, va='center',
                    ha='right' if dx < 0 else 'left', fontsize=6.5,
                    weight=weight)

    def network(x0, title, bytes_, notes):
        cx = x0 + 1.85
        label(ax, cx, 3.0, title, 3.6, ha='center', fontsize=9,
              weight='bold')
        xs = [cx + pitch * (i - (k - 1) / 2) for i in range(k)]
        box(ax, xs[0] - bw / 2, hub_y, xs[-1] - xs[0] + bw, hub_h,
            w['switch'], DATA, fontsize=6.5)
        for i, x in enumerate(xs):
            box(ax, x - bw / 2, work_y, bw, bh, w['worker'].format(i + 1),
                GPU1, fontsize=6.5)
            link(x, work_y + bh, hub_y, bytes_)
        for n, note in enumerate(notes):
            label(ax, cx, 0.27 - 0.17 * n, note, 3.8, ha='center',
                  fontsize=6.5)
        return cx, xs

    # Left, the ring: every worker sends 2(k-1)/k N to the next one and
    # receives as much from the one before, through the switch.
    share = number(2 * (k - 1) / k, lang)
    cx, xs = network(0.1, w['ring'], f'{share} N',
                     [w['ringlink'].format(share), w['ringnote']])
    mid = work_y + bh / 2
    for a, b in zip(xs, xs[1:]):  # the order of the ring, 1 to k, then 1
        arrow(ax, (a + bw / 2, mid), (b - bw / 2, mid), INK, ls='--',
              lw=0.8)
    low = work_y - 0.12
    ax.add_patch(FancyArrowPatch(
        path=Path([(xs[-1], work_y), (xs[-1], low), (xs[0], low),
                   (xs[0], work_y)]),
        arrowstyle='-|>', mutation_scale=8, color=INK, ls='--', lw=0.8,
        shrinkA=1.5, shrinkB=1.5))
    label(ax, cx, low - 0.1, w['logical'], 1.6, ha='center', fontsize=6.5,
          style='italic', color=INK)
    # Right, one parameter server: every worker pushes N of gradients and
    # pulls N of parameters, so the server's own link carries k N.
    cx, xs = network(4.1, w['ps'], 'N', [w['worklink'], w['serverlink']])
    box(ax, cx - 0.5, 2.5, 1.0, 0.3, w['server'], GPU2)
    link(cx, hub_y + hub_h, 2.5, f'{k} N', lw=2.2, weight='bold')
    return fig


# ZeRO's partition of the model state over k devices (after Rajbhandari
# et al., 2020, figure 1), in fp32 with Adam as in the lesson's table:
# each bar is one device's 16 bytes per parameter, drawn to scale.

STATE = [('parameters', GPU1), ('gradients', 'tab:red'),
         ('optimizer', CPU)]  # the keys of zero_memory, their colours


def times_psi(x, lang):
    """x Ψ bytes, written as in the lesson: 4Ψ, Ψ."""
    return ('' if x == 1 else number(x, lang)) + 'Ψ'


def zero_partition(w, lang, k=4):
    fig, ax = canvas(8, 3.2)
    label(ax, 4, 3.02, w['zerosetting'], 7.8, ha='center', fontsize=8)
    unit, high, pitch = 0.062, 0.3, 0.52  # inches per byte, bar, row
    full = sum(FP32_ADAM) * unit
    left, gap = 1.75, 0.14
    right = left + k * (full + gap)
    for i in range(k):
        label(ax, left + i * (full + gap) + full / 2, 2.72,
              w['dev'].format(i), full, ha='center', fontsize=8,
              weight='bold')
    label(ax, right + 0.05, 2.72, w['perdevice'], 8 - right - 0.1,
          fontsize=8, weight='bold')
    rows = [w['dataparallel'], 'ZeRO-1', 'ZeRO-2', w['zero3']]
    for stage, name in enumerate(rows):
        y = 2.28 - pitch * stage  # bottom of the bars
        label(ax, 0.1, y + high - 0.05, name, left - 0.2, fontsize=8,
              weight='bold')
        label(ax, 0.1, y + 0.02, w[f'shards{stage}'], left - 0.2,
              fontsize=6.5)
        held = zero_memory(1, k, stage)  # bytes per parameter, per device
        for i in range(k):
            x = left + i * (full + gap)
            for (key, color), size in zip(STATE, FP32_ADAM):
                if held[key] == size:  # whole on every device
                    ax.add_patch(Rectangle((x, y), size * unit, high,
                                           fc=tint(color, 0.8), ec='none'))
                else:  # device i keeps shard i, the others keep the rest
                    assert held[key] == size / k
                    part = size * unit / k
                    for s in range(k):
                        ax.add_patch(Rectangle(
                            (x + s * part, y), part, high, ec='white',
                            lw=0.6, fc=tint(color, 0.8 if s == i else 0.12)))
                x += size * unit
            ax.add_patch(Rectangle((x - full, y), full, high, fc='none',
                                   ec=INK, lw=0.8))
        terms = [times_psi(held[key], lang) for key, _ in STATE]
        label(ax, right + 0.05, y + high / 2, ' + '.join(terms) + ' = '
              + times_psi(sum(held.values()), lang), 8 - right - 0.1)
    legend(ax, 0.2, 0.32, [(color, 0.8, w[key]) for key, color in STATE]
           + [(DATA, 0.12, w['elsewhere'])], gap=0.25)
    return fig


# Megatron-LM's split of a two-layer MLP over two devices (Shoeybi et
# al., 2019, figure 3a): W1 by columns, W2 by rows, one allreduce in the
# forward pass (of the partial sums) and one in the backward pass (of the
# gradient of X).

def split_matrix(ax, x, y, width, height, by):
    """A small matrix cut in two halves, GPU 1's and GPU 2's, side by side
    ('columns') or one above the other ('rows')."""
    for i, color in enumerate((GPU1, GPU2)):
        if by == 'columns':
            cell = (x + i * width / 2, y), width / 2, height
        else:
            cell = (x, y + (1 - i) * height / 2), width, height / 2
        ax.add_patch(Rectangle(*cell, fc=tint(color, 0.6), ec=INK, lw=0.6))


def tensor_parallel(w, lang):
    fig, ax = canvas(8, 3.75)
    lanes = [(1, GPU1, 2.55), (2, GPU2, 0.95)]  # device, colour, centre
    gap = (lanes[0][2] + lanes[1][2]) / 2  # between the lanes
    for x, width, text in [(0.52, 0.95, w['xcopied']),
                           (2.62, 1.75, w['bycols']),
                           (4.45, 1.05, w['byrows']),
                           (5.85, 1.2, w['fwdallreduce']),
                           (7.35, 1.1, w['outputs'])]:
        label(ax, x, 3.47, text, width, ha='center', fontsize=7.5,
              weight='bold', linespacing=1.2)
    split_matrix(ax, 1.5, 3.29, 0.2, 0.36, 'columns')  # W1: 784 x 256
    split_matrix(ax, 3.7, 3.29, 0.12, 0.36, 'rows')  # W2: 256 x 10
    X = box(ax, 0.15, gap - 0.22, 0.75, 0.44, '$X$', DATA, fontsize=9)
    back = box(ax, 1.55, gap - 0.13, 1.8, 0.26, w['gradx'], COMM,
               fill=None, fontsize=6.5)
    back.set_linestyle('--')
    total = box(ax, 5.2, gap - 0.48, 1.3, 0.96,
                w['tpallreduce'] + '\n$Y = H^{(1)} W_2^{(1)}$\n'
                '$+ H^{(2)} W_2^{(2)}$',
                COMM, fontsize=7, linespacing=1.5)
    for i, color, mid in lanes:
        ax.add_patch(FancyBboxPatch(
            (1.1, mid - 0.55), 6.85, 1.1, fc=tint(color, 0.08),
            ec='none', zorder=0, boxstyle='round,pad=0,rounding_size=0.06'))
        ax.text(1.24, mid, w['dev'].format(i), color=color, rotation=90,
                ha='center', va='center', fontsize=8, weight='bold')
        layer1 = box(ax, 1.45, mid - 0.2, 2.0, 0.4,
                     f'$H^{{({i})}}$ = ReLU($X W_1^{{({i})}} + '
                     f'b_1^{{({i})}}$)', color, fontsize=7)
        note = mid + (0.36 if i == 1 else -0.36)  # away from the middle
        label(ax, 2.45, note, w['nocomm'], 2.0, ha='center',
              fontsize=6.5, style='italic')
        layer2 = box(ax, 3.85, mid - 0.2, 1.0, 0.4,
                     f'$H^{{({i})}} W_2^{{({i})}}$', color, fontsize=7)
        label(ax, 4.35, note, w['partial'], 1.2, ha='center',
              fontsize=6.5, style='italic')
        out = box(ax, 6.85, mid - 0.2, 1.0, 0.4, '$Y + b_2$', color,
                  fontsize=7)
        arrow(ax, X, layer1)
        arrow(ax, layer1, layer2)
        arrow(ax, layer2, total, COMM)
        arrow(ax, total, out, COMM)
        arrow(ax, layer1, back, COMM, ls='--')
    legend(ax, 1.2, 0.17, [(COMM, None, w['fwdnote']),
                           (COMM, 'dash', w['bwdnote'])], gap=0.4)
    return fig


# The pipeline schedules of lesson 5 on one clock, for k = 2 devices and
# m = 4 micro-batches: GPipe (d2l.gpipe_schedule), 1F1B and the
# interleaved schedule with v = 2 chunks per device
# (d2l.interleaved_schedule), whose ticks last half a stage.

def one_f_one_b(k, m):
    """The 1F1B schedule (Narayanan et al., 2019) as clock ticks of
    (stage, 'F' or 'B', micro-batch), by the rule of
    d2l.interleaved_schedule: at each tick a stage runs the next pass of
    its list if the pass it needs ran at an earlier tick. Stage s runs
    min(k - s, m) forward passes, then alternates a backward and a
    forward pass, and ends with the backward passes left."""
    todo = []
    for s in range(k):
        first = min(k - s, m)
        order = [('F', j) for j in range(first)]
        for j in range(m):
            order.append(('B', j))
            if first + j < m:
                order.append(('F', first + j))
        todo.append(order)
    done, ticks = {}, []
    while any(todo):
        t, tick = len(ticks), []
        for s in range(k):
            if todo[s]:
                kind, j = todo[s][0]
                need = (s - 1, 'F', j) if kind == 'F' else (s + 1, 'B', j)
                if kind == 'B' and s == k - 1:
                    need = (s, 'F', j)
                if not 0 <= need[0] < k or done.get(need, t) < t:
                    tick.append((s, kind, j))
                    todo[s].pop(0)
        if not tick:
            raise RuntimeError(f'the 1F1B schedule of k={k}, m={m} is stuck '
                               f'at tick {t}')
        for s, kind, j in tick:
            done[s, kind, j] = t
        ticks.append(tick)
    return ticks


def held(ticks, k):
    """The most micro-batches whose activations a device keeps at once
    (forward passes done, backward passes not yet begun), over devices."""
    most, now = 0, [0] * k
    for tick in ticks:
        for d, kind, *_ in tick:
            now[d] += 1 if kind == 'F' else -1
            most = max(most, now[d])
    return most


def pipeline_schedules(w, lang, k=2, m=4, v=2):
    fig, ax = canvas(8, 4.5)
    label(ax, 4, 4.32, w['pipesetting'].format(k=k, m=m), 7.8,
          ha='center', fontsize=8)
    x0, unit, high = 1.95, 0.58, 0.3  # time 0, inches per stage, row
    gpipe = [[(s, kind, j, '') for s, kind, j in tick]
             for tick in gpipe_schedule(k, m)]
    one_f = [[(s, kind, j, '') for s, kind, j in tick]
             for tick in one_f_one_b(k, m)]
    chunked = [[(d, kind, j, 'abcdefgh'[c // k]) for d, kind, j, c in tick]
               for tick in interleaved_schedule(k, m, v)]
    if not (held(gpipe, k) == m and held(one_f, k) == min(k, m)):
        raise ValueError('the schedules keep other counts of micro-batches '
                         'than lesson 5 says (m for GPipe, min(k, m) for '
                         '1F1B)')
    panels = [('GPipe', gpipe, 1, w['held'].format(held(gpipe, k))),
              ('1F1B', one_f, 1, w['held'].format(held(one_f, k))),
              (w['interleaved'].format(v), chunked, v, w['halftick'])]
    end = max(len(ticks) / chunks for _, ticks, chunks, _ in panels)
    for t in range(int(end) + 1):  # the clock, one line per stage's pass
        ax.plot([x0 + unit * t] * 2, [0.62, 4.0], color=DATA, lw=0.4,
                ls=':', zorder=0)
        ax.text(x0 + unit * t, 0.52, str(t), ha='center', va='center',
                color=INK, fontsize=6.5)
    label(ax, x0 + unit * end / 2, 0.33, w['clock'], unit * end,
          ha='center', fontsize=7)
    for p, (name, ticks, chunks, note) in enumerate(panels):
        top = 3.95 - 1.13 * p
        slots = k * len(ticks)
        idle = slots - sum(len(tick) for tick in ticks)
        if not math.isclose(idle / slots, bubble_fraction(k, m, chunks)):
            raise ValueError(f'{name}: {idle}/{slots} idle slots, but '
                             f'bubble_fraction gives '
                             f'{bubble_fraction(k, m, chunks)}')
        label(ax, x0, top - 0.08, w['bubble'].format(
            idle, slots, number(round(idle / slots, 3), lang), note),
            8 - x0 - 0.1, fontsize=7)
        label(ax, 0.1, top - 0.17 - high, name, 0.95, fontsize=8.5,
              weight='bold')
        size = unit / chunks
        for d, color in enumerate((GPU1, GPU2)):
            y = top - 0.2 - (high + 0.06) * (d + 1)
            label(ax, x0 - 0.08, y + high / 2, w['dev'].format(d), 0.85,
                  ha='right', fontsize=7.5, color=color, weight='bold')
            for t, tick in enumerate(ticks):
                x = x0 + size * t
                mine = [c for c in tick if c[0] == d]
                if not mine:  # a slot of the bubble
                    slot = box(ax, x + 0.015, y, size - 0.03, high,
                               color=DATA, fill=0.12, lw=0.8)
                    slot.set_linestyle('--')
                    continue
                _, kind, j, chunk = mine[0]
                box(ax, x + 0.015, y, size - 0.03, high, f'{kind}{j}{chunk}',
                    color, 0.2 if kind == 'F' else 1, fontsize=7,
                    c='black' if kind == 'F' else 'white')
    legend(ax, 1.2, 0.12, [(GPU1, 0.2, w['fwdpass']),
                           (GPU1, 1, w['bwdpass']),
                           (DATA, 0.12, w['idle'])], gap=0.4)
    return fig


FIGURES = {'splitting': splitting, 'alexnet-two-gpus': alexnet,
           'data-parallel': data_parallel, 'ring-allreduce': ring_allreduce,
           'mlp-dependencies': mlp_dependencies,
           'ring-vs-server': ring_vs_server,
           'zero-partition': zero_partition,
           'tensor-parallel': tensor_parallel,
           'pipeline-schedules': pipeline_schedules}


def draw(out=OUT, png=None, langs=LANGS, names=tuple(FIGURES)):
    """Draw the pictures `names` in `langs` into out/<lang>/<name>.svg
    (and PNG previews into png/<lang>/ if given)."""
    paths = []
    for lang in langs:
        w = words(lang)
        (out / lang).mkdir(parents=True, exist_ok=True)
        if png:
            (png / lang).mkdir(parents=True, exist_ok=True)
        with plt.rc_context(RC):
            use_fonts(lang)
            for name in names:
                fig = FIGURES[name](w, lang)
                paths.append(out / lang / f'{name}.svg')
                save(fig, paths[-1], png / lang / f'{name}.png' if png
                     else None)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--out', type=pathlib.Path, default=OUT)
    parser.add_argument('--png', type=pathlib.Path)
    parser.add_argument('--lang', nargs='+', default=LANGS, choices=LANGS)
    parser.add_argument('--only', nargs='+', default=tuple(FIGURES),
                        choices=FIGURES, metavar='NAME')
    args = parser.parse_args(argv)
    paths = draw(args.out, args.png, args.lang, args.only)
    print(f'wrote {len(paths)} pictures to {args.out}')


if __name__ == '__main__':
    main()
