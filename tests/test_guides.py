"""The teacher's guides and README say what the lessons show (review of
issue 32, N1 and N15): lesson 1's MXNet copies run beside the products on
the engine's prioritised threads, in the lesson itself, in the guides'
lesson-1 row, plan and FAQ, and in README; README's machine table has a
column for every lesson; the guides' slide notes name lesson 2's
subsection."""
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LANGS = ('en', 'fr', 'tr', 'zh')

# What lesson 1 used to say about MXNet before d2lpar handed its copies to
# the engine's prioritised threads: none of it may come back
STALE = {
    'en': [r'MXNet does not overlap', r'MXNet nothing',
           r'Why does MXNet not overlap', r'no overlap \(we will see why\)',
           r'not in MXNet'],
    'fr': [r'MXNet ne recouvre', r'MXNet rien', r'pas de recouvrement',
           r'nous verrons pourquoi'],
    'tr': [r'hiç örtüşme olmaz', r'MXNet hiç kazanmaz',
           r'MXNet dizüstümde', r'örtüşme yok', r'nedenini göreceğiz'],
    'zh': [r'MXNet 完全没有重叠', r'MXNet 没有收益',
           r'MXNet 的计算和复制没有重叠', r'没有重叠（原因后面会讲到）'],
}
# The engine's prioritised threads, in each language's own words
PRIORITISED = {
    'en': r"engine's prioritised threads",
    'fr': r'threads que le moteur réserve au travail prioritaire',
    'tr': r'motorun öncelikli işler için ayırdığı iş parçacıklarına',
    'zh': r'引擎留给高优先级工作的线程',
}
# How the lesson's MXNet tab says it (the text the guides must agree with)
LESSON_SAYS = {
    'en': r'threads the engine keeps for\s+prioritised CPU work',
    'fr': r'threads que le\s+moteur réserve au travail CPU prioritaire',
    'tr': r'motorun öncelikli CPU işleri için ayırdığı iş\s+parçacıklarında',
    'zh': r'引擎留给高优先级 CPU 工作的线程',
}
LESSON_1 = {'en': 'Lesson 1,', 'fr': 'Leçon 1,', 'tr': '1. Ders,',
            'zh': '第 1 课，'}


def _read(*parts):
    with open(os.path.join(ROOT, *parts), encoding='utf-8') as f:
        return f.read()


def _table_rows(text):
    """The data rows of the first Markdown table in `text`, as cell lists."""
    rows = []
    for line in text.splitlines():
        if line.startswith('|'):
            rows.append([c.strip() for c in line.strip('|').split('|')])
        elif rows:
            break
    return [r for r in rows[2:]]


def _guide_lesson_1(lang):
    guide = _read('docs', 'teaching', f'{lang}.md')
    start = guide.index(f'### {LESSON_1[lang]}')
    return guide[start:guide.index('\n### ', start + 1)]


@pytest.mark.parametrize('lang', LANGS)
def test_lesson_1_and_guide_say_mxnet_copies_run_beside(lang):
    lesson = _read('notebooks', lang, 'auto-parallelism.md')
    guide = _read('docs', 'teaching', f'{lang}.md')
    for text, where in ((lesson, 'lesson 1'), (guide, 'guide')):
        for pattern in STALE[lang]:
            assert not re.search(pattern, text), (lang, where, pattern)
    # The lesson explains the prioritised threads; its table, and the
    # guide's row for a machine without a GPU, say the same
    assert re.search(LESSON_SAYS[lang], lesson), lang
    no_gpu = _table_rows(lesson[lesson.index('\n|'):])[0]
    assert re.search(PRIORITISED[lang], no_gpu[2]), (lang, no_gpu[2])
    no_gpu = _table_rows(_guide_lesson_1(lang))[0]
    assert 'MXNet' in no_gpu[2]
    assert re.search(PRIORITISED[lang], no_gpu[2]), (lang, no_gpu[2])


def test_readme_machine_table():
    readme = _read('README.md')
    for pattern in STALE['en']:
        assert not re.search(pattern, readme), pattern
    start = readme.index('### What each machine shows')
    table = readme[start:]
    header = table[table.index('\n|') + 1:].splitlines()[0]
    chapters = [c.strip() for c in header.strip('|').split('|')][1:]
    assert chapters == ['Automatic Parallelism', 'Multi-GPU Training',
                        'Concise Implementation', 'Several Machines',
                        'Beyond Data Parallelism']
    rows = _table_rows(table[table.index('\n|'):])
    assert [r[0] for r in rows] == ['no GPU', 'one GPU', 'two or more GPUs']
    for row in rows:
        assert len(row) == 1 + len(chapters) and all(row), row
    assert re.search(PRIORITISED['en'], rows[0][1]), rows[0][1]


@pytest.mark.parametrize('lang', LANGS)
def test_guide_slides_name_lesson_2_subsection(lang):
    """The slide notes list the subsections: lesson 2b has one too."""
    lesson = _read('notebooks', lang, 'communication-cost.md')
    title = re.search(r'^### (.+)$', lesson, re.M).group(1)
    guide = _read('docs', 'teaching', f'{lang}.md')
    slides = guide[guide.index('make slides'):]
    assert re.search(re.escape(title).replace(r'\ ', r'\s+'), slides), (
        lang, title)
