"""The pictures of the lessons: one per language, each lesson showing its
own language's, and the committed SVGs the ones tools/figures.py draws.

The stale check draws every picture once into a temporary folder (about
15 s of CPU) and compares bytes.
"""
import re
import subprocess
import sys
import warnings

import matplotlib.pyplot as plt
import pytest

from test_notebooks import CHAPTERS, LANGS, NB, ROOT

sys.path.insert(0, str(ROOT / 'tools'))
import figures  # noqa: E402

IMG = NB / 'img'
IMAGE = re.compile(r'!\[[^\]]*\]\(([^)\s]+)\)|<img [^>]*src="([^"]+)"')
# Words a translated picture may share with the English one: names (of
# models, methods, functions and the optimizer Adam; fp of fp32), the
# collectives' English names (kept, per the glossaries) and French or
# Turkish words spelt as in English.
SHARED = {'AlexNet', 'CPU', 'GPU', 'Krizhevsky', 'softmax', 'allreduce',
          'reduce', 'scatter', 'all', 'gather', 'ZeRO', 'FSDP', 'GPipe',
          'ReLU', 'Adam', 'fp'}
SAME_WORD = {'fr': {'al', 'et', 'classes', 'communication', 'convolution',
                    'gradient', 'gradients', 'image', 'micro', 'original',
                    'part', 'passes', 'worker', 'workers'},
             'tr': {'model'}, 'zh': set()}


def references(lang):
    """(chapter, line number, target) for every image of the lesson
    sources of `lang`."""
    found = []
    for chapter in CHAPTERS:
        text = (NB / lang / f'{chapter}.md').read_text(encoding='utf-8')
        for n, line in enumerate(text.splitlines(), 1):
            for m in IMAGE.finditer(line):
                found.append((chapter, n, m.group(1) or m.group(2)))
    return found


def pictures(lang, folder=IMG):
    return {p.name for p in (folder / lang).glob('*.svg')}


def svg_texts(path):
    """The texts of a picture: matplotlib writes each as a comment."""
    return re.findall(r'<!-- (.*?) -->', path.read_text(encoding='utf-8'),
                      re.S)


@pytest.mark.parametrize('lang', LANGS)
def test_every_image_of_a_lesson_is_a_picture_of_its_language(lang):
    problems = []
    refs = references(lang)
    assert refs, f'no image in the {lang} lessons'
    for chapter, n, target in refs:
        # The path is read from the built notebook, notebooks/<lang>/<fw>/.
        path = (NB / lang / 'pytorch' / target).resolve()
        where = f'notebooks/{lang}/{chapter}.md:{n}: {target}'
        if path.parent != IMG / lang:
            problems.append(f'{where} is not in notebooks/img/{lang}/')
        elif not path.exists():
            problems.append(f'{where} does not exist')
    assert not problems, '\n'.join(problems)


@pytest.mark.parametrize('lang', LANGS[1:])
def test_each_lesson_shows_the_same_pictures_in_every_language(lang):
    def per_chapter(lang):
        return {chapter: [target.rsplit('/', 1)[-1]
                          for c, _, target in references(lang)
                          if c == chapter] for chapter in CHAPTERS}
    assert per_chapter(lang) == per_chapter('en')


def test_every_language_has_the_same_pictures_and_uses_them():
    assert not list(IMG.glob('*.svg')), \
        'pictures without a language in notebooks/img/: remove them'
    names = pictures('en')
    assert names, 'no picture in notebooks/img/en/'
    for lang in LANGS:
        assert pictures(lang) == names, \
            f'notebooks/img/{lang}/ differs from en: ' \
            f'{sorted(pictures(lang) ^ names)}'
        used = {target.rsplit('/', 1)[-1] for *_, target in references(lang)}
        assert names <= used, \
            f'{lang}: pictures no lesson shows: {sorted(names - used)}'


@pytest.mark.parametrize('lang', LANGS[1:])
def test_the_pictures_are_in_their_language(lang):
    english = set()
    for path in (IMG / 'en').glob('*.svg'):
        for text in svg_texts(path):
            english |= set(re.findall(r'[^\W\d_]{2,}', text))
    problems = []
    for path in sorted((IMG / lang).glob('*.svg')):
        for text in svg_texts(path):
            left = set(re.findall(r'[^\W\d_]{2,}', text)) & english
            left -= SHARED | SAME_WORD[lang]
            if left:
                problems.append(f'{path.name}: {text!r}: {sorted(left)}')
            if lang == 'fr' and re.search(r'(?<!\u00a0)[:;!?]', text):
                problems.append(f'{path.name}: {text!r}: no no-break space '
                                f'before : ; ! ?')
    assert not problems, '\n'.join(sorted(set(problems)))


@pytest.fixture(scope='module')
def drawn(tmp_path_factory):
    """Every picture drawn afresh, in a process of its own."""
    out = tmp_path_factory.mktemp('img')
    run = subprocess.run([sys.executable, str(ROOT / 'tools' / 'figures.py'),
                          '--out', str(out)], capture_output=True, text=True,
                         cwd=ROOT)
    assert run.returncode == 0, run.stdout + run.stderr
    return out


@pytest.mark.parametrize('lang', LANGS)
def test_the_committed_pictures_are_those_figures_py_draws(drawn, lang):
    assert pictures(lang, drawn) == pictures(lang), \
        f'tools/figures.py draws {sorted(pictures(lang, drawn))}, ' \
        f'notebooks/img/{lang}/ holds {sorted(pictures(lang))}'
    stale = [name for name in sorted(pictures(lang))
             if (IMG / lang / name).read_bytes() !=
             (drawn / lang / name).read_bytes()]
    assert not stale, f'notebooks/img/{lang}/: {stale} differ from what ' \
                      f'tools/figures.py draws: run `make figures`'


@pytest.mark.parametrize('k', [1, 2, 3, 4])
def test_the_1f1b_schedule_of_the_picture_is_the_lessons(k):
    """Every pass once, after the pass it needs; GPipe's bubble; at most
    min(k, m) micro-batches held (lesson 5, "1F1B")."""
    for m in range(1, 7):
        ticks = figures.one_f_one_b(k, m)
        when = {p: t for t, tick in enumerate(ticks) for p in tick}
        assert sorted(when) == sorted((s, kind, j) for s in range(k)
                                      for kind in 'BF' for j in range(m))
        for (s, kind, j), t in when.items():
            need = ((s - 1, 'F', j) if kind == 'F' else
                    (s + 1, 'B', j) if s < k - 1 else (s, 'F', j))
            assert need not in when or when[need] < t
        idle = k * len(ticks) - len(when)
        assert idle / (k * len(ticks)) == \
            pytest.approx(figures.bubble_fraction(k, m))
        assert figures.held(ticks, k) == min(k, m)
    if k == 2:  # the picture's (m = 4): stage 0 waits for B0 and B3
        rows = [' '.join(next((f'{kind}{j}' for s, kind, j in tick
                               if s == d), '.')
                         for tick in figures.one_f_one_b(k, 4))
                for d in range(k)]
        assert rows == ['F0 F1 . B0 F2 B1 F3 B2 . B3',
                        '. F0 B0 F1 B1 F2 B2 F3 B3 .']


def test_a_missing_glyph_stops_the_drawing():
    with plt.rc_context({'font.family': ['DejaVu Sans']}):
        fig = plt.figure()
        fig.text(0.5, 0.5, '环形全规约')
        with pytest.raises(UserWarning, match='missing from'):
            figures.save(fig, '/dev/null')
    plt.close('all')


def test_chinese_is_drawn_with_the_pinned_noto_font(tmp_path):
    with plt.rc_context(figures.RC):
        figures.use_fonts('zh')
        fig = plt.figure()
        fig.text(0.5, 0.5, '环形全规约 ∇W2 ← 1.5 N')
        with warnings.catch_warnings():
            warnings.simplefilter('error')
            figures.save(fig, tmp_path / 'zh.svg')
    assert 'NotoSansCJKsc-Regular-73af' in (tmp_path / 'zh.svg').read_text()


def test_french_words_need_the_no_break_space(monkeypatch):
    fr = dict(figures.WORDS['fr'], ps='serveur : paramètres')
    monkeypatch.setitem(figures.WORDS, 'fr', fr)
    with pytest.raises(AssertionError, match='no-break space'):
        figures.words('fr')
