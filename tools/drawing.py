"""The drawing kit of tools/figures.py: the languages, fonts and words of
the pictures (words in tools/figure_words.json), their colours, and the
primitives every picture is made of (canvas, box, label, arrow, legend,
badge) and `save`, which fails on a missing glyph."""
import importlib.util
import json
import pathlib
import re
import warnings

import matplotlib

matplotlib.use('agg')  # measures text; savefig('*.svg') writes SVG
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import colors, font_manager  # noqa: E402
from matplotlib.patches import (  # noqa: E402
    Circle, FancyArrowPatch, FancyBboxPatch)

OUT = pathlib.Path(__file__).resolve().parent.parent / 'notebooks' / 'img'
LANGS = ('en', 'fr', 'tr', 'zh')
GPU1, GPU2, CPU = 'tab:blue', 'tab:purple', 'tab:green'
COMM, DATA, INK = 'tab:orange', 'tab:gray', '0.25'
CJK_FONT = 'NotoSansCJKsc-Regular.otf'  # in mplfonts==0.0.11
FONTS = {'en': ['DejaVu Sans'], 'fr': ['DejaVu Sans'],
         'tr': ['DejaVu Sans'], 'zh': ['Noto Sans CJK SC', 'DejaVu Sans']}

# Set while drawing only (a test imports this module).
RC = {'svg.hashsalt': 'd2lpar', 'font.size': 7}

# Every word of every picture, per language, in tools/figure_words.json
# ({lang: {key: text}}). French puts a no-break space (U+00A0, written
# \u00a0 there) before : ; ! ? (checked by `words`); decimals use the
# language's own separator.
WORDS = json.loads((pathlib.Path(__file__).with_name('figure_words.json')
                    ).read_text(encoding='utf-8'))
DECIMAL = {'en': '.', 'fr': ',', 'tr': ',', 'zh': '.'}


def words(lang):
    """The words of `lang`, checked: every key, French typography."""
    w = WORDS[lang]
    assert w.keys() == WORDS['en'].keys(), \
        f'{lang}: keys differ from en: {w.keys() ^ WORDS["en"].keys()}'
    if lang == 'fr':
        for key, text in w.items():
            bad = re.search(r'(?<!\u00a0)[:;!?]', text)
            assert not bad, f'fr {key!r}: no-break space missing before ' \
                            f'{bad.group()!r} in {text!r}'
    return w


def number(x, lang):
    return f'{x:g}'.replace('.', DECIMAL[lang])


def cjk_font_file():
    """The path of Noto Sans CJK SC inside the installed mplfonts."""
    spec = importlib.util.find_spec('mplfonts')  # found, not imported
    if spec is None:
        raise RuntimeError(
            'mplfonts is not installed: the Chinese pictures need its Noto '
            'Sans CJK SC (make venv installs it from requirements-nodeps.txt)')
    for folder in spec.submodule_search_locations:
        path = pathlib.Path(folder) / 'fonts' / CJK_FONT
        if path.exists():
            return path
    raise RuntimeError(f'mplfonts has no fonts/{CJK_FONT}')


def use_fonts(lang):
    """Make the fonts of `lang` the ones matplotlib draws with. For zh,
    the Noto Sans CJK SC of mplfonts becomes the only font of that name
    (a copy installed on the machine, maybe of another version or with a
    bold face, would change the drawing)."""
    if lang == 'zh':
        path = str(cjk_font_file())
        manager = font_manager.fontManager
        if not any(f.fname == path for f in manager.ttflist):
            manager.addfont(path)
        manager.ttflist = [f for f in manager.ttflist
                           if f.name != 'Noto Sans CJK SC' or f.fname == path]
        found = font_manager.findfont(
            font_manager.FontProperties(family='Noto Sans CJK SC'),
            fallback_to_default=False)
        assert found == path, f'Noto Sans CJK SC found at {found}'
    plt.rcParams['font.family'] = FONTS[lang]


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


def fit(text, width, height=None, smallest=5):
    """Shrink `text` until it fits `width` x `height` inches, or fail."""
    fig = text.figure
    renderer = fig.canvas.get_renderer()
    while True:
        box = text.get_window_extent(renderer)
        if box.width / fig.dpi <= width and \
                (height is None or box.height / fig.dpi <= height):
            return text
        size = text.get_fontsize() - 0.25
        if size < smallest:
            raise ValueError(f'{text.get_text()!r} does not fit in '
                             f'{width:.2f} x {height} inches')
        text.set_fontsize(size)


def label(ax, x, y, text, width, **kw):
    """Write `text` at (x, y), shrunk to fit `width` inches."""
    kw.setdefault('va', 'center')
    return fit(ax.text(x, y, text, **kw), width)


def box(ax, x, y, w, h, text='', color=INK, fill=0.2, **kw):
    """Draw a rounded box at (x, y), lower left; no fill: see-through.
    Its text is shrunk to fit inside."""
    face = 'none' if fill is None else tint(color, fill)
    patch = FancyBboxPatch((x, y), w, h, fc=face, ec=color,
                           lw=kw.pop('lw', 1.2),
                           boxstyle='round,pad=0,rounding_size=0.04')
    ax.add_patch(patch)
    if text:
        fit(ax.text(x + w / 2, y + h / 2, text, ha='center', va='center',
                    **kw), w - 0.04, h)
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
        mutation_scale=8, lw=kw.pop('lw', 1), shrinkA=1.5, shrinkB=1.5,
        **kw))


def legend(ax, x, y, items, gap=0.25):
    """Draw a one-line legend of (colour, fill, label); no fill: arrow;
    'dash': a dashed arrow. A legend wider than the figure is an error."""
    renderer = ax.figure.canvas.get_renderer()
    for color, fill, text in items:
        if fill is None or fill == 'dash':
            arrow(ax, (x, y), (x + 0.3, y), color,
                  ls='--' if fill == 'dash' else '-')
        else:
            box(ax, x, y - 0.08, 0.3, 0.16, color=color, fill=fill)
        t = ax.text(x + 0.38, y, text, va='center')
        x += 0.38 + t.get_window_extent(renderer).width / ax.figure.dpi \
            + gap
    if x - gap > ax.get_xlim()[1]:
        raise ValueError(f'the legend {[text for *_, text in items]} ends '
                         f'at {x - gap:.2f} inches, past the figure')


def badge(ax, x, y, step):
    """Draw a step number in a dark disc."""
    ax.add_patch(Circle((x, y), 0.1, color=INK))
    ax.text(x, y, str(step), ha='center', va='center', color='white',
            fontsize=8, weight='bold')


def save(fig, path, png=None):
    """Write the SVG; any missing glyph is an error."""
    with warnings.catch_warnings():
        warnings.filterwarnings('error', message='.*missing from .*font')
        fig.savefig(path, metadata={'Date': None})
        if png:
            fig.savefig(png, dpi=110)
    plt.close(fig)


# Ways of partitioning a network over two GPUs.
