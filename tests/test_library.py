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


def test_a_hand_edit_in_one_copy_of_shared_code_is_caught_by_name(tree):
    """A cell #@tab all has a copy in each backend; editing one of them is
    caught, in that backend only, and build makes them equal again."""
    path = tree / 'd2lpar' / 'mxnet.py'
    text = path.read_text(encoding='utf-8')
    edited = text.replace('num_examples // num_epochs',
                          'num_examples / num_epochs', 1)
    assert edited != text
    path.write_text(edited, encoding='utf-8')
    assert library.check(tree / 'notebooks')[:-1] == [
        'd2lpar/mxnet.py: train differs from its lesson (edited by hand '
        'below the generated-code line?)']
    assert library.build(tree / 'notebooks') == [path]
    assert library.check(tree / 'notebooks') == []


def _rename_split_batch(tree, name):
    """Lesson 2a's #@save split_batch renamed `name` in the copy `tree`."""
    lesson = tree / 'notebooks' / 'en' / 'multiple-gpus.md'
    lesson.write_text(lesson.read_text(encoding='utf-8').replace(
        '#@save\ndef split_batch', f'#@save\ndef {name}'), encoding='utf-8')


def test_a_saved_function_may_not_replace_a_hand_written_one(tree):
    # torch.py defines try_devices by hand (a wrapper of _backend's): a
    # lesson's #@save function of that name would silently replace it
    _rename_split_batch(tree, 'try_devices')
    problems = library.check(tree / 'notebooks')
    assert ("d2lpar/torch.py: the lessons' #@save try_devices would replace "
            "the try_devices that the hand-written part defines; rename one "
            "of them") in problems


def test_a_function_added_or_removed_by_hand_is_caught(tree):
    path = tree / 'd2lpar' / 'mxnet.py'
    text = path.read_text(encoding='utf-8')
    path.write_text(text + '\n\ndef extra():\n    pass\n', encoding='utf-8')
    assert library.check(tree / 'notebooks')[0] == (
        'd2lpar/mxnet.py: extra stands in the generated part but in no '
        'lesson')
    _rename_split_batch(tree, 'split_batch_by_hand')
    problems = library.check(tree / 'notebooks')
    assert ('d2lpar/mxnet.py: split_batch_by_hand is missing from the '
            'generated part') in problems


def _generated_names(file):
    text = (ROOT / 'd2lpar' / file).read_text(encoding='utf-8')
    assert 'Generated' not in text.split(library.MARKER)[0]
    return list(library._blocks(text.split(library.MARKER)[1]))


def test_the_generated_part_is_the_lessons_code_in_lesson_order():
    names = _generated_names('torch.py')
    assert names[:4] == ['lenet_params', 'lenet', 'get_params', 'allreduce']
    assert names.index('allreduce') < names.index('Residual')
    assert 'ddp_worker' in names and 'ddp_worker' not in _generated_names(
        'mxnet.py')
    # Code of the cells #@tab all stands in both backends, in the lesson's
    # order among the code of each framework, marked as shared; lesson 2a's
    # train and lesson 5's reduce_scatter come from a cell of each framework
    shared = ['train_batch']
    for file in library.BACKENDS.values():
        names = _generated_names(file)
        assert names.index('split_batch') < names.index('train_batch') \
            < names.index('train') < names.index('reduce_scatter')
        text = (ROOT / 'd2lpar' / file).read_text(encoding='utf-8')
        for name in shared:
            assert (f'{library.SHARED_NOTE}\ndef {name}(') in text
        for name in ('train', 'reduce_scatter'):
            assert f'{library.SHARED_NOTE}\ndef {name}(' not in text


def test_no_module_of_the_package_runs_code_with_exec():
    """Go-to-definition works on every function a lesson calls: no code
    of d2lpar is run from a string or another file (exec, eval,
    runpy)."""
    import ast
    for path in (ROOT / 'd2lpar').rglob('*.py'):
        tree = ast.parse(path.read_text(encoding='utf-8'))
        for node in ast.walk(tree):
            name = (node.func.id if isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name) else None)
            assert name not in ('exec', 'eval'), f'{path.name}: {name}'
            assert not (isinstance(node, (ast.Import, ast.ImportFrom))
                        and 'runpy' in ast.dump(node)), path.name


@pytest.mark.parametrize('backend', ['torch', 'mxnet'])
def test_the_shared_code_belongs_to_each_backend(backend, monkeypatch):
    """`train` of each backend calls that backend's functions, and is
    documented and located as its own (help, inspect, tracebacks,
    go-to-definition)."""
    import importlib
    import inspect
    d2l = importlib.import_module(f'd2lpar.{backend}')
    # d2l.train first checks its input (checks.checked, which keeps the
    # name, the docstring and the signature); what it calls is the lesson's
    lesson_train = inspect.unwrap(d2l.train)
    assert lesson_train.__globals__ is vars(d2l)
    assert d2l.train.__module__ == f'd2lpar.{backend}'
    assert inspect.getsourcefile(lesson_train) == d2l.__file__
    assert inspect.signature(d2l.train) == inspect.signature(lesson_train)
    assert d2l.__doc__.startswith('d2lpar for ')  # not replaced
    seen = []
    monkeypatch.setattr(d2l, 'get_params',
                        lambda params, device: seen.append(device) or 1 / 0)
    with pytest.raises(ZeroDivisionError):
        d2l.train(1, 16, 0.1, num_epochs=1, num_train=32, num_test=16,
                  plot=False)
    assert len(seen) == 1


def test_a_save_line_that_saves_nothing_is_an_error():
    source = '```{.python .input}\n#@tab all\nx = 1\n#@save\n```\n'
    with pytest.raises(builder.SourceError, match='#@save ends the cell'):
        library.saved(source, 'all', 'x.md')


@pytest.mark.parametrize('backend', ['torch', 'mxnet'])
def test_importing_a_backend_loads_neither_torchvision_nor_pandas(backend):
    code = (f'import sys; from d2lpar import {backend}; '
            f'print(sorted(m for m in ("torchvision", "pandas", "d2l") '
            f'if m in sys.modules))')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == '[]'


def test_a_lesson_missing_from_the_list_of_lessons_is_caught(tree,
                                                             monkeypatch):
    # Left out of LESSONS, communication-cost's #@save matmul_rate would
    # vanish from both backends at the next build, and the check passed
    monkeypatch.setattr(library, 'LESSONS', tuple(
        name for name in library.LESSONS if name != 'communication-cost'))
    library.build(tree / 'notebooks')  # matmul_rate is gone from both
    assert ('notebooks/en/communication-cost.md has #@save code but is not '
            'in LESSONS (tools/library.py): add it in the order of the '
            'course') in library.check(tree / 'notebooks')


def test_a_checked_wrapping_line_longer_than_79_columns_is_cut(monkeypatch):
    """make lib cuts a wrapping line of CHECKED that would pass 79 columns
    after ``checked(``, so that ruff, part of make test, takes the backend
    as it is generated; a short one stays on one line."""
    monkeypatch.setitem(library.CHECKED, 'short', 'check')
    assert library._wrap_line('short') == \
        'short = _checks.checked(short, check)'
    long_check = "_checks.collective(check_collective, 'all_gather', False)"
    monkeypatch.setitem(library.CHECKED, 'all_gather', long_check)
    lines = library._wrap_line('all_gather').split('\n')
    assert lines == ['all_gather = _checks.checked(',
                     f'    all_gather, {long_check})']
    assert all(len(line) <= 79 for line in lines)
