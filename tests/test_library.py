"""The generated part of d2lpar's backends (tools/library.py) and what
importing a backend costs in modules."""
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / 'tools'))
import library  # noqa: E402
import notebooks as builder  # noqa: E402


@pytest.fixture
def tree(tmp_path):
    """A copy of the English lessons and of the two backends."""
    shutil.copytree(ROOT / 'notebooks' / 'en', tmp_path / 'notebooks' / 'en',
                    ignore=shutil.ignore_patterns('pytorch', 'mxnet'))
    (tmp_path / 'd2lpar').mkdir()
    for file in library.BACKENDS.values():
        shutil.copy(ROOT / 'd2lpar' / file, tmp_path / 'd2lpar' / file)
    return tmp_path


def test_the_backends_match_their_lessons():
    assert library.check(ROOT / 'notebooks') == []


def test_a_hand_edit_in_the_generated_part_is_caught_by_name(tree):
    path = tree / 'd2lpar' / 'torch.py'
    text = path.read_text(encoding='utf-8')
    hand, generated = text.split(library.MARKER)
    edited = generated.replace('    new_params = [p.detach()',
                               '    new_params = [p.clone().detach()', 1)
    assert edited != generated
    path.write_text(hand + library.MARKER + edited, encoding='utf-8')
    problems = library.check(tree / 'notebooks')
    assert problems[0] == ('d2lpar/torch.py: get_params differs from its '
                           'lesson (edited by hand below the generated-code '
                           'line?)')
    assert len(problems) == 2 and 'make' not in problems[0]
    assert library.build(tree / 'notebooks') == [path]  # build repairs it
    assert library.check(tree / 'notebooks') == []


def test_a_function_added_or_removed_by_hand_is_caught(tree):
    path = tree / 'd2lpar' / 'mxnet.py'
    text = path.read_text(encoding='utf-8')
    path.write_text(text + '\n\ndef extra():\n    pass\n', encoding='utf-8')
    assert library.check(tree / 'notebooks')[0] == (
        'd2lpar/mxnet.py: extra stands in the generated part but in no '
        'lesson')
    lesson = tree / 'notebooks' / 'en' / 'beyond-data-parallelism.md'
    lesson.write_text(lesson.read_text(encoding='utf-8').replace(
        '#@save\ndef split_rows', '#@save\ndef split_rows_by_hand'),
        encoding='utf-8')
    problems = library.check(tree / 'notebooks')
    assert ('d2lpar/mxnet.py: split_rows_by_hand is missing from the '
            'generated part') in problems


def test_the_generated_part_is_the_lessons_code_in_lesson_order():
    text = (ROOT / 'd2lpar' / 'torch.py').read_text(encoding='utf-8')
    generated = text.split(library.MARKER)[1]
    names = list(library._blocks(generated))
    assert names[:3] == ['lenet', 'get_params', 'allreduce']
    assert names.index('train') < names.index('Residual') \
        < names.index('reduce_scatter')
    assert 'ddp_worker' in names and 'ddp_worker' not in library._blocks(
        (ROOT / 'd2lpar' / 'mxnet.py').read_text(encoding='utf-8').split(
            library.MARKER)[1])
    assert 'Generated' not in text.split(library.MARKER)[0]


def test_a_save_line_that_saves_nothing_is_an_error():
    source = '```{.python .input}\n#@tab all\nx = 1\n#@save\n```\n'
    with pytest.raises(builder.SourceError, match='#@save ends the cell'):
        library.saved(source, 'pytorch', 'x.md')


@pytest.mark.parametrize('backend', ['torch', 'mxnet'])
def test_importing_a_backend_loads_neither_torchvision_nor_pandas(backend):
    code = (f'import sys; from d2lpar import {backend}; '
            f'print(sorted(m for m in ("torchvision", "pandas", "d2l") '
            f'if m in sys.modules))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == '[]'
