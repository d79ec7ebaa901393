"""Plots drawn at run time show Chinese (and Turkish, French) text: no
"Glyph ... missing from current font" warning, in SVG or PNG, whether the
lesson draws through a d2lpar helper or with `plt` itself; and Latin text
looks exactly as it did before the CJK font was added (d2lpar/fonts.py).

Each check runs in a fresh Python, so that matplotlib's state (fonts
registered, rcParams) is what d2lpar alone made it, not what an earlier
test left behind.
"""
import subprocess
import sys
import textwrap

# Turn a missing glyph into an error, and fail on the font manager's
# "findfont: Font family ... not found" too (a log record, not a warning).
PRELUDE = r'''
import io, logging, warnings
import matplotlib
matplotlib.use('Agg')
warnings.filterwarnings('error', message=r'.*[Gg]lyph .* missing')
warnings.filterwarnings('ignore', message='.*non-GUI backend')

class Fail(logging.Handler):
    def emit(self, record):
        raise AssertionError('matplotlib: ' + record.getMessage())

logging.getLogger('matplotlib.font_manager').addHandler(Fail(logging.WARNING))

def render(fig):
    """The figure as SVG text and PNG bytes (each a full draw)."""
    svg, png = io.BytesIO(), io.BytesIO()
    fig.savefig(svg, format='svg')
    fig.savefig(png, format='png')
    return svg.getvalue().decode(), png.getvalue()
'''


def run(code, timeout=300):
    result = subprocess.run(
        [sys.executable, '-c', PRELUDE + textwrap.dedent(code)],
        capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, \
        f'exit {result.returncode}\n{result.stdout[-3000:]}' \
        f'\n{result.stderr[-5000:]}'
    return result.stdout


def test_d2lpar_plots_draw_chinese_and_turkish_text():
    """Through three d2lpar helpers (a timing bar chart, a timeline, the
    training animator), with a Chinese title, axis labels and legend, and
    Turkish letters: every figure renders to SVG and PNG without a missing
    glyph; the font is registered the first time d2lpar draws, not when
    d2lpar is imported."""
    out = run(r'''
    import sys
    from matplotlib import font_manager
    import matplotlib.pyplot as plt
    from d2lpar import fonts, plots, timeline, timing

    path = fonts.cjk_font_path()
    assert path and path.endswith('NotoSansCJKsc-Regular.otf'), path
    def registered():
        return any(f.fname == path for f in font_manager.fontManager.ttflist)
    assert not registered(), 'registered before the first plot'

    # A bar chart of timings, with a Chinese title and bar labels.
    timing.Benchmark.records += [('设备 1 单独', 0.5), ('两台设备同时', 0.6)]
    plots.plot_timings(['设备 1 单独', '两台设备同时'], title='计时（秒）')
    assert registered(), 'the first plot did not register the CJK font'
    figures = [plt.gcf()]

    # A timeline: Chinese operation names, rows and title.
    tl = timeline.Timeline()
    tl.events = [timeline.Event('矩阵乘法', '设备 1', 0.0, 0.5),
                 timeline.Event('复制到内存', '设备 2', 0.1, 0.4, 'copy')]
    tl.plot('两台设备的时间线')
    figures.append(plt.gcf())

    # The training animator: Chinese and Turkish axis labels and legend.
    from unittest import mock
    with mock.patch('IPython.display.display'):
        animator = plots.Animator('轮次 (ğ ş ı İ)', '测试准确率',
                                    legend=['训练', 'doğruluk İŞĞı'])
        animator.add(1, [0.5, 0.6])
        animator.add(2, [0.7, 0.8])
    animator.ax.set_title('准确率 — Eğitim doğruluğu')
    figures.append(animator.fig)

    for fig in figures:
        svg, png = render(fig)
        assert png.startswith(b'\x89PNG'), 'no PNG'
        # Text is drawn as paths; the SVG keeps each string in a comment.
        for ax in fig.axes:
            legend = ax.get_legend()
            texts = [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + (
                [t.get_text() for t in legend.get_texts()] if legend else [])
            for text in filter(None, texts):
                assert f'<!-- {text} -->' in svg, f'{text!r} not drawn'
    print('family', matplotlib.rcParams['font.family'])
    ''')
    assert "family ['sans-serif', 'Noto Sans CJK SC']" in out, out


def test_lesson_plt_plot_draws_chinese_after_importing_d2lpar_torch():
    """A lesson's own `plt.plot(..., label='中文')` (lesson 3 draws its
    learning-rate schedule so) gets the font from the import of d2lpar,
    before any d2lpar helper has drawn."""
    run(r'''
    import matplotlib.pyplot as plt
    from d2lpar import torch as d2l
    fig, ax = plt.subplots()
    ax.plot([0, 1], [0, 1], label='1 个设备：批量 256')
    ax.set_xlabel('轮次'), ax.set_ylabel('学习率'), ax.legend()
    ax.set_title('学习率预热')
    render(fig)
    ''')


def test_latin_text_looks_as_before():
    """The CJK font is only a fallback: a figure of Latin text (French and
    Turkish letters, digits, a minus sign) is drawn pixel for pixel as it
    was without it."""
    run(r'''
    import numpy as np
    import matplotlib.pyplot as plt
    from d2lpar import fonts

    def draw():
        fig, ax = plt.subplots(figsize=(4, 2))
        ax.plot([-1, 0, 1], [1, -2, 3], label='précision « test »')
        ax.set_xlabel('époque ğ ş ı İ'), ax.set_ylabel('doğruluk −1')
        ax.set_title('Équilibre : Eğitim İşlemci'), ax.legend()
        fig.canvas.draw()
        return np.asarray(fig.canvas.buffer_rgba()).copy()

    before = draw()
    assert fonts.use_cjk_font()
    after = draw()
    assert before.shape == after.shape
    assert (before == after).all(), \
        f'{(before != after).any(axis=2).sum()} pixels changed'
    ''')
