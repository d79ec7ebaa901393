"""Checks on the lesson notebooks that do not need a kernel.

nbval runs the notebooks themselves (see the Makefile); these tests keep
the four languages in step and catch prose left in the wrong language
(tests/test_library.py: the #@save functions d2lpar takes from them).
"""
import ast
import json
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
NB = ROOT / 'notebooks'
sys.path.insert(0, str(ROOT / 'tools'))
import notebooks as builder  # noqa: E402

LANGS = list(builder.LANGS)
CHAPTERS = sorted(p.stem for p in (NB / 'en').glob('*.md'))
FRAMEWORKS = list(builder.FRAMEWORKS)


def load(lang, fw, chapter, kind='lesson'):
    """A built notebook: the lesson, or (kind='solutions') its solutions."""
    path = NB / lang / fw / (f'{chapter}.ipynb' if kind == 'lesson'
                             else f'solutions/{chapter}.ipynb')
    assert path.exists(), f'{path} is missing: run `make notebooks`'
    return json.loads(path.read_text(encoding='utf-8'))



def has_solutions(lang, chapter):
    return ':begin_solutions:' in (NB / lang / f'{chapter}.md').read_text(
        encoding='utf-8')


def notebooks_of(lang):
    """(fw, chapter, kind) of every built notebook of a language: the
    lessons, and the solutions of the chapters that have them."""
    return [(fw, chapter, kind) for fw in FRAMEWORKS for chapter in CHAPTERS
            for kind in ('lesson', 'solutions')
            if kind == 'lesson' or has_solutions(lang, chapter)]


def cells(lang):
    """(framework/chapter, cell) for every cell of the built notebooks of
    `lang` (see `notebooks_of`)."""
    for fw, chapter, kind in notebooks_of(lang):
        for cell in load(lang, fw, chapter, kind)['cells']:
            yield f'{fw}/{chapter}', cell


class _SetStringsAside(ast.NodeTransformer):
    """Blank string constants and the text of f-strings (both translated),
    keeping f-string expressions, conversions and format specs."""

    def visit_Constant(self, node):
        return ast.Constant('<str>') if isinstance(node.value, str) else node

    def visit_JoinedStr(self, node):
        node.values = [self.visit(v) for v in node.values
                       if isinstance(v, ast.FormattedValue)]
        return node

    def visit_FormattedValue(self, node):
        node.value = self.visit(node.value)  # format_spec kept as written
        return node


def _picks_the_language(stmt):
    """Whether `stmt` is a statement ``d2l.use_language(...)``, which the
    French, Turkish and Chinese lessons add to their first cell."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    return (isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == 'use_language'
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == 'd2l')


def code_shape(source):
    """A code cell's syntax tree without comments, string contents and
    the statement that picks the lesson's language."""
    tree = ast.parse(source)
    tree.body = [s for s in tree.body if not _picks_the_language(s)]
    return ast.dump(_SetStringsAside().visit(tree))


@pytest.mark.parametrize('english, translated', [
    ("print(f'difference: {abs(a - b)}')",
     "print(f'différence : {undefined_name:.3f}')"),
    ("print(f'gap: {gap:.3f}')", "print(f'écart : {gap:.2f}')"),
    ("print(f'{x!r} items')", "print(f'{x} éléments')"),
    ("print(f'{\", \".join(xs)}')", "print(f'{\"; \".join(ys)}')"),
    ("plot(x, 'loss')", "plot(y, 'perte')"),
])
def test_code_shape_sees_code_inside_strings(english, translated):
    assert code_shape(english) != code_shape(translated)


def test_code_shape_ignores_comments_and_string_text():
    english = ("x = 1  # one\nprint(f'gap: {abs(a - b):.3f} after {n!r}', "
               "'done')\n")
    translated = ("x = 1  # un\nprint(f'écart : {abs(a - b):.3f} "
                  "après {n!r} essais', 'fini')\n")
    assert code_shape(english) == code_shape(translated)


def test_code_shape_ignores_only_the_language_statement():
    english = 'from d2lpar import torch as d2l\nimport torch\n'
    assert code_shape(english) == code_shape(
        "from d2lpar import torch as d2l\nimport torch\n"
        "d2l.use_language('fr')\n")
    for other in ("d2l.use_languages('fr')", "d2l.try_gpu('fr')",
                  "lang = d2l.use_language('fr')", "use_language('fr')",
                  "d2l.use_language('fr'); x = 1"):
        assert code_shape(english) != code_shape(english + other + '\n'), \
            other


def test_committed_notebooks_match_their_sources():
    result = subprocess.run([sys.executable, str(ROOT / 'tools' /
                                                  'notebooks.py'), 'check'],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


LESSON = """# A lesson

```{.python .input}
#@tab all
#@check
print(1 + 1)
```

```{.python .output}
#@tab all
2
```
"""


def lesson_tree(tmp_path, source=LESSON):
    """A notebooks/ folder under tmp_path holding one English source."""
    root = tmp_path / 'notebooks'
    (root / 'en').mkdir(parents=True)
    (root / 'en' / 'lesson.md').write_text(source, encoding='utf-8')
    return root


def test_check_passes_on_a_freshly_built_tree(tmp_path, capsys):
    root = lesson_tree(tmp_path)
    assert builder.main(['notebooks.py', 'build'], root) == 0
    assert builder.main(['notebooks.py', 'check'], root) == 0
    assert '2 notebooks match their sources' in capsys.readouterr().out


@pytest.mark.parametrize('notebook', [
    'en/pytorch/lesson.ipynb',  # a lesson
    'en/mxnet/solutions/lesson.ipynb',  # the solutions of a lesson
])
@pytest.mark.parametrize('change', ['edited', 'missing', 'orphan'])
def test_check_fails_on_a_stale_or_orphan_notebook(tmp_path, capsys, change,
                                                   notebook):
    root = lesson_tree(tmp_path, SOLVED)
    assert builder.main(['notebooks.py', 'build'], root) == 0
    nb = root / notebook
    expected = f'stale: notebooks/{notebook}'
    if change == 'edited':  # edited after building
        nb.write_text(nb.read_text(encoding='utf-8').replace('1 + 1', '1 + 3'),
                      encoding='utf-8')
    elif change == 'missing':
        nb.unlink()
    else:  # a notebook whose source is gone
        shutil.copy(nb, nb.with_name('gone.ipynb'))
        expected = f'orphan: {pathlib.Path("notebooks", notebook).parent}' \
                   f'/gone.ipynb'
    capsys.readouterr()
    assert builder.main(['notebooks.py', 'check'], root) == 1
    assert expected in capsys.readouterr().out


@pytest.mark.parametrize('source, fw', [
    (LESSON.split('```{.python .output}')[0], 'pytorch'),  # at the end
    (LESSON.split('```{.python .output}')[0] + 'Some prose.\n', 'pytorch'),
    (LESSON.replace('#@tab all\n2', '#@tab pytorch\n2'), 'mxnet'),
], ids=['at-the-end', 'before-prose', 'for-one-framework-only'])
def test_a_check_cell_without_its_output_is_an_error(tmp_path, source, fw):
    """Else nbval would skip the cell: it has no output to compare."""
    root = lesson_tree(tmp_path, source)
    with pytest.raises(builder.SourceError,
                       match=rf'^notebooks/en/lesson\.md:3: a #@check cell '
                             rf'needs an output block for {fw}$'):
        builder.main(['notebooks.py', 'build'], root)


SOLVED = LESSON + """
## Exercises

1. Add one and one.

:begin_solutions:

### Exercise 1

The model answer.

```{.python .input}
#@tab all
answer = 1 + 1
```

:end_solutions:

After the block.
"""


def built_cells(root, fw, kind='lesson'):
    name = 'lesson.ipynb' if kind == 'lesson' else 'solutions/lesson.ipynb'
    nb = json.loads((root / 'en' / fw / name).read_text(encoding='utf-8'))
    return [(c['cell_type'], ''.join(c['source']), c) for c in nb['cells']]


def test_the_lesson_leaves_the_solutions_out(tmp_path):
    root = lesson_tree(tmp_path, SOLVED)
    assert builder.main(['notebooks.py', 'build'], root) == 0
    for fw in FRAMEWORKS:
        text = '\n'.join(src for _, src, _ in built_cells(root, fw))
        assert '1. Add one and one.' in text and 'After the block.' in text
        for part in ('Exercise 1', 'The model answer.', 'answer = 1 + 1',
                     'solutions:'):
            assert part not in text, f'{fw}: {part!r} in the lesson'


def test_the_solutions_notebook_runs_on_its_own(tmp_path):
    root = lesson_tree(tmp_path, SOLVED)
    assert builder.main(['notebooks.py', 'build'], root) == 0
    for fw in FRAMEWORKS:
        cells = built_cells(root, fw, 'solutions')
        kinds = [kind for kind, _, _ in cells]
        sources = [src for _, src, _ in cells]
        assert kinds == ['markdown', 'code', 'markdown', 'code', 'markdown',
                         'code']
        header, install, title, first, answer, code = sources
        assert install.startswith('# ') and '!pip install' in install
        assert f'[Français](../../../fr/{fw}/solutions/lesson.ipynb)' in header
        assert '(../lesson.ipynb)' in header and 'solutions/lesson' in header
        assert title == '# A lesson: Solutions'
        # The lesson's first cell, for its imports, without its check
        assert first == 'print(1 + 1)' and not cells[3][2]['outputs'] \
            and not cells[3][2]['metadata']
        assert answer.startswith('### Exercise 1') and \
            'The model answer.' in answer and 'After' not in answer
        assert code == 'answer = 1 + 1'


def test_a_lesson_without_solutions_has_no_solutions_notebook(tmp_path):
    root = lesson_tree(tmp_path)
    assert builder.main(['notebooks.py', 'build'], root) == 0
    assert not list(root.glob('*/*/solutions'))


@pytest.mark.parametrize('source, message', [
    (SOLVED.replace(':end_solutions:\n', ''),
     r'notebooks/en/lesson\.md:18: :begin_solutions: without '
     r':end_solutions:'),
    (SOLVED.replace(':begin_solutions:\n', ''),
     r'notebooks/en/lesson\.md:28: :end_solutions: without '
     r':begin_solutions:'),
    (SOLVED + ':begin_solutions:\n:end_solutions:\n',
     r'notebooks/en/lesson\.md:32: a second :begin_solutions:'),
    (SOLVED.replace(':begin_solutions:', ':begin_tab:`mxnet`\n'
                    ':begin_solutions:'),
     r'notebooks/en/lesson\.md:19: :begin_solutions: inside a tab'),
    (SOLVED.replace('#@tab all\nanswer', '#@tab all\n#@check\nanswer'),
     r'notebooks/en/lesson\.md:24: #@check in the solutions'),
], ids=['unclosed', 'end-without-begin', 'second-block', 'inside-a-tab',
        'checked-output'])
def test_a_broken_solutions_block_is_an_error(tmp_path, source, message):
    root = lesson_tree(tmp_path, source)
    with pytest.raises(builder.SourceError, match='^' + message):
        builder.main(['notebooks.py', 'build'], root)


@pytest.mark.parametrize('lang', LANGS[1:])
def test_every_chapter_exists_in_every_language(lang):
    for chapter in CHAPTERS:
        assert (NB / lang / f'{chapter}.md').exists(), \
            f'notebooks/{lang}/{chapter}.md is missing'


@pytest.mark.parametrize('lang', LANGS[1:])
@pytest.mark.parametrize('chapter', CHAPTERS)
@pytest.mark.parametrize('fw', FRAMEWORKS)
@pytest.mark.parametrize('kind', ['lesson', 'solutions'])
def test_code_is_the_same_in_every_language(kind, fw, chapter, lang):
    ref = load('en', fw, chapter, kind)['cells']
    ref_types = [c['cell_type'] for c in ref]
    ref_code = [code_shape(''.join(c['source'])) for c in ref
                if c['cell_type'] == 'code']
    ref_checked = [bool(c['outputs']) for c in ref if c['cell_type'] == 'code']
    cells = load(lang, fw, chapter, kind)['cells']
    where = f'{lang}/{fw}/{"solutions/" if kind == "solutions" else ""}' \
            f'{chapter}'
    assert [c['cell_type'] for c in cells] == ref_types, \
        f'{where}: the order of code and markdown cells differs from English'
    code = [code_shape(''.join(c['source'])) for c in cells
            if c['cell_type'] == 'code']
    for n, (a, b) in enumerate(zip(ref_code, code)):
        assert a == b, f'{where}: code cell {n} differs from English'
    checked = [bool(c['outputs']) for c in cells if c['cell_type'] == 'code']
    assert checked == ref_checked, f'{where}: not the same cells are ' \
                                   f'checked as in English'


# The heading of the exercises in each language.
EXERCISES = {'## Exercises', '## Exercices', '## Alıştırmalar', '## 练习'}


def exercises_and_solutions(text):
    """How many exercises the list after "## Exercises" (or its
    translation) has (items of any framework) and how many "### "
    solutions the solutions block has."""
    lines = text.splitlines()
    start = next(n for n, line in enumerate(lines) if line in EXERCISES)
    end = lines.index(':begin_solutions:') if ':begin_solutions:' in lines \
        else len(lines)
    items = [x for x in lines[start:end] if re.match(r'\d+\. ', x)]
    block = lines[end:]
    return len(items), len([x for x in block if x.startswith('### ')])


@pytest.mark.parametrize('lang', LANGS)
@pytest.mark.parametrize('chapter', CHAPTERS)
def test_every_exercise_has_a_solution(chapter, lang):
    exercises, solutions = exercises_and_solutions(
        (NB / lang / f'{chapter}.md').read_text(encoding='utf-8'))
    assert exercises > 0
    assert solutions == exercises, \
        f'{lang}/{chapter}.md: {exercises} exercises, {solutions} solutions'
    for fw in FRAMEWORKS:
        assert (NB / lang / fw / 'solutions' / f'{chapter}.ipynb').exists()


# Words of English that a translated lesson must not print in a checked
# output. Names of APIs (launch, synchronize, width=...), the quoted keys
# of a printed dict (d2l.zero_memory's 'parameters') and words that French
# or Turkish share with English (test, points) are not counted.
ENGLISH_OUTPUT = {
    'the', 'and', 'of', 'to', 'is', 'are', 'with', 'for', 'from', 'after',
    'before', 'both', 'alone', 'together', 'sum', 'parts', 'difference',
    'within', 'accuracy', 'accuracies', 'acc', 'value',
    'input', 'output', 'labels', 'devices', 'device', 'same', 'largest',
    'step', 'took', 'returned', 'times', 'long', 'first', 'than', 'less',
    'equal', 'each', 'parameters', 'shape',
    # labels and units, not only sentences
    'ring', 'naive', 'billion', 'million', 'bytes', 'seconds', 'per',
    'stage', 'stages', 'steps', 'processes', 'process', 'hidden', 'layer',
    'layers', 'memory', 'bubble', 'forward', 'backward', 'kept',
    'data', 'set', 'run', 'runs', 'overlap', 'share'}
# Units that a language writes its own way (docs/glossary/fr.md: Mo, Go;
# a link's name, such as Ethernet 10 Gb/s, is written as its makers do)
FOREIGN_UNITS = {'fr': re.compile(r'\b[kKMGT]B\b')}


def without_names(text):
    # Names are not prose: code in backticks, calls, d2l.x, the quoted
    # keys of a printed dict ({'parameters': 4, ...}), which code reads,
    # and identifiers with an underscore.
    return re.sub(r"`[^`]*`|\b\w+\([^)]*\)|\bd2l\.\w+|'\w+':|\w+_\w+", ' ',
                  text)


def english_in_output(text):
    return sorted({w for w in re.findall(r'[A-Za-z]+', without_names(text))
                   if w.lower() in ENGLISH_OUTPUT})


def test_english_in_output_sees_english_and_ignores_names():
    assert english_in_output('test acc: 0.91, 0.90') == ['acc']
    assert english_in_output('précision : 0.91 sur cpu(0), d2l.allreduce') \
        == []
    assert english_in_output("0 {'parameters': 8, 'gradients': 8}") == []
    assert english_in_output("{'a': 'the same'}") == ['same', 'the']
    assert english_in_output('parameters: 8') == ['parameters']


@pytest.mark.parametrize('lang', LANGS[1:])
def test_checked_outputs_are_in_the_language_of_the_notebook(lang):
    problems = []
    for where, cell in cells(lang):
        for out in cell.get('outputs', []):
            text = ''.join(out.get('text', ''))
            for line in text.splitlines():
                words = english_in_output(line)
                unit = FOREIGN_UNITS.get(lang)
                found = unit and unit.search(without_names(line))
                if found:
                    words.append(found[0])
                if words:
                    problems.append(f'{where}: {words}: {line[:70]!r}')
    assert not problems, '\n'.join(problems)


ENGLISH = set('the and of to is are we that this with for it be by which '
              'can not from each what they our their when more into than '
              'but have has will there so if at or these you your its was '
              'were been only also how does do'.split())
NATIVE = {
    'fr': set('le la les des du de et est une un que qui pour dans sur pas '
              'nous avec ce cette sont par plus au aux ou en se il elle '
              'on chaque leur mais donc'.split()),
    'tr': set('ve bir bu için ile da de olarak çok daha her gibi ne ama '
              'veya kadar sonra olan değil biz şu mi ki bu ise iki hem '
              'ancak yani göre ya'.split()),
}
STRIP = [re.compile(p, re.S) for p in (
    r'`[^`]*`', r'\$\$.*?\$\$', r'\$[^$]*\$', r'!\[[^\]]*\]\([^)]*\)',
    r'\]\([^)]*\)', r'https?://\S+', r'<[^>]+>')]
CJK = re.compile(r'[\u4e00-\u9fff]')


def paragraph_language_problem(lang, text):
    for pattern in STRIP:
        text = pattern.sub(' ', text)
    words = re.findall(r"[A-Za-zÀ-ÿğüşöçıİĞÜŞÖÇ']+", text.lower())
    english = sum(w in ENGLISH for w in words)
    if lang == 'zh':
        native = len(CJK.findall(text)) // 2
    else:
        native = sum(w in NATIVE[lang] for w in words)
    if english >= 3 and english > native:
        return f'{english} English function words, {native} native'
    if len(words) >= 8 and native == 0:
        return 'no word of the language'
    return None


@pytest.mark.parametrize('lang', LANGS[1:])
def test_prose_is_in_the_language_of_the_notebook(lang):
    problems = []
    for where, cell in cells(lang):
        if cell['cell_type'] != 'markdown' or \
                'header' in cell['metadata'].get('tags', []):
            continue
        text = ''.join(cell['source'])
        for para in re.split(r'\n\s*\n', text):
            problem = paragraph_language_problem(lang, para)
            if problem:
                problems.append(f'{where}: {problem}: {para[:70]!r}')
    assert not problems, '\n'.join(problems)


def test_pinned_outputs_replace_the_blocks_and_split_a_shared_one():
    import pin_outputs
    assert pin_outputs.pin(LESSON, {'pytorch': ['2'], 'mxnet': ['2']}) \
        == LESSON.rstrip('\n') + '\n'
    two = pin_outputs.pin(LESSON, {'pytorch': ['2'], 'mxnet': ['2.0']})
    assert '#@tab pytorch\n2\n```\n\n```{.python .output}\n#@tab mxnet\n' \
        '2.0\n```' in two
    assert '#@tab all\n2\n' not in two
    only = pin_outputs.pin(LESSON, {'mxnet': ['3']})  # pytorch keeps its own
    assert '#@tab pytorch\n2\n' in only and '#@tab mxnet\n3\n' in only


def test_every_notebook_shows_the_install_line_second():
    """Below the header, the commented-out lines that install d2lpar in a
    kernel that has PyTorch already (Colab, a cluster): from the
    repository's root, which the relative path reaches from the notebook's
    folder, or from the wheel of `make dist`; the MXNet notebooks ask for
    the mxnet extra. Running the cell changes nothing."""
    version = builder.version()
    paths = sorted(builder.ROOT.glob('*/*/*.ipynb')) + \
        sorted(builder.ROOT.glob('*/*/solutions/*.ipynb'))
    # a lesson and its solutions, per framework and language
    assert len(paths) == 2 * len(FRAMEWORKS) * len(LANGS) * len(CHAPTERS)
    for path in paths:
        nb = json.loads(path.read_text(encoding='utf-8'))
        cell = nb['cells'][1]
        lines = ''.join(cell['source']).splitlines()
        assert cell['cell_type'] == 'code' and 'install' in \
            cell['metadata']['tags'], path
        assert all(line.startswith('# ') for line in lines), path
        extra = '[mxnet]' if nb['metadata']['d2lpar']['framework'] == \
            'mxnet' else ''
        root, wheel = [line.split('"')[1] for line in lines[-2:]]
        assert root.endswith(extra) and wheel == \
            f'd2lpar-{version}-py3-none-any.whl{extra}', path
        where = path.parent / root[:len(root) - len(extra)]
        assert where.resolve() == builder.ROOT.parent.resolve(), path
        # The words are the notebook's language (English is ASCII)
        words = ' '.join(lines[:-2])
        assert words.isascii() == (nb['metadata']['d2lpar']['language'] ==
                                   'en'), path


@pytest.mark.parametrize('lang', LANGS)
@pytest.mark.parametrize('chapter', CHAPTERS)
def test_every_checked_accuracy_names_its_data(chapter, lang):
    """A checked cell that prints a test accuracy prints with it the data
    it was measured on (d2l.data_source(): the stand-in data set or
    Fashion-MNIST), so that a figure from the synthetic stand-in is never
    read as one on Fashion-MNIST (issue 32, N9)."""
    from lesson_source import parse
    path = NB / lang / f'{chapter}.md'
    for kind, _, body, at in parse(path.read_text(encoding='utf-8'), path):
        code = '\n'.join(body) if kind == 'input' else ''
        # test_acc, test_accs, accuracy, acc...: the names of the code
        named = re.search(r'\bacc\b|_acc(s\b|_|\b)|accuracy', code)
        if '#@check' in code and named:
            assert 'd2l.data_source()' in code, (
                f'{at}: a checked accuracy without d2l.data_source()')
