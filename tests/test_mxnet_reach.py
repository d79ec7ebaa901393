"""Where MXNet is not installed: the one sentence that stops an MXNet
notebook (d2lpar.mxnet_reach), and what `make test` says it did not run
(conftest.py at the root). Also the Makefile's TORCH= option, which must
reach the pip that installs torch."""
import os
import pathlib
import re
import stat
import subprocess
import sys
import textwrap

import pytest

from d2lpar import i18n, mxnet_reach

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOK = '/home/me/d2lpar/notebooks/{lang}/mxnet/multiple-gpus.ipynb'
# A word of each language that its sentence must have
WORDS = {'en': 'open the PyTorch notebook', 'fr': 'ouvrez plutôt',
         'tr': 'PyTorch defterini', 'zh': '请改为打开'}


@pytest.mark.parametrize('lang', i18n.LANGUAGES)
def test_one_sentence_in_the_students_language(lang, monkeypatch):
    monkeypatch.setenv('D2LPAR_LANG', lang)
    error = mxnet_reach.unavailable(NOTEBOOK.format(lang=lang))
    [sentence] = error._render_traceback_()
    assert WORDS[lang] in sentence
    assert '\n' not in sentence and sentence.endswith(('.', '。'))
    # one sentence: no full stop before its end but in numbers
    assert sentence.rstrip('.。').count('。') == 0
    assert '. ' not in sentence
    assert '../pytorch/multiple-gpus.ipynb' in sentence
    for fact in ('MXNet 1.9.1', 'Linux x86-64', '3.8', '3.12',
                 f'Python {sys.version.split()[0]}'):
        assert fact in sentence, (fact, sentence)
    assert isinstance(error, ImportError)
    assert str(error).startswith(sentence)
    if lang != 'en':  # the English text follows, for searching the web
        assert '\n(en) MXNet is not installed here' in str(error)


@pytest.mark.parametrize('lang', i18n.LANGUAGES)
def test_the_language_of_the_notebook_when_none_is_set(lang, monkeypatch):
    monkeypatch.delenv('D2LPAR_LANG', raising=False)
    [sentence] = mxnet_reach.unavailable(
        NOTEBOOK.format(lang=lang))._render_traceback_()
    assert WORDS[lang] in sentence
    assert 'D2LPAR_LANG' not in os.environ  # left as it was


def test_without_a_notebook_path_it_names_the_folder(monkeypatch):
    monkeypatch.delenv('JPY_SESSION_NAME', raising=False)
    [sentence] = mxnet_reach.unavailable()._render_traceback_()
    assert 'the notebook of the same name in ../pytorch/' in sentence


def test_where_mxnet_installs():
    assert mxnet_reach.where_mxnet_installs('Linux', 'x86_64', (3, 12))
    assert not mxnet_reach.where_mxnet_installs('Linux', 'x86_64', (3, 13))
    assert not mxnet_reach.where_mxnet_installs('Darwin', 'arm64', (3, 11))
    assert not mxnet_reach.where_mxnet_installs('Windows', 'AMD64', (3, 11))


def test_the_shims_give_numpy_bool():
    import numpy
    mxnet_reach.shims()
    assert numpy.bool in (bool, getattr(numpy, 'bool_', None))


# A Jupyter kernel's cell, in IPython, where MXNet cannot be found
HIDE_MXNET = textwrap.dedent('''\
    import importlib.util, sys
    _find = importlib.util.find_spec
    importlib.util.find_spec = (
        lambda name, *a: None if name == 'mxnet' else _find(name, *a))
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    result = shell.run_cell('from d2lpar import mxnet as d2l')
    print('ERROR TYPE', type(result.error_in_exec).__name__)
    ''')


def test_the_first_cell_stops_with_the_sentence_alone():
    env = {k: v for k, v in os.environ.items() if k != 'D2LPAR_LANG'}
    env['JPY_SESSION_NAME'] = NOTEBOOK.format(lang='fr')
    out = subprocess.run([sys.executable, '-c', HIDE_MXNET], env=env,
                         cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert lines[-1] == 'ERROR TYPE MXNetUnavailable', out
    # the cell shows one line: the French sentence, no traceback
    assert len(lines) == 2, lines
    assert WORDS['fr'] in lines[0]
    assert '../pytorch/multiple-gpus.ipynb' in lines[0]
    assert 'Traceback' not in out.stdout + out.stderr


@pytest.mark.parametrize('framework', ['torch', 'mxnet'])
def test_runs_with_each_framework(framework):
    """Run by the test below, where MXNet is said to be missing."""
    assert framework in ('torch', 'mxnet')


def test_reaches_the_other_framework_in_its_body():
    """Run by the test below: it stands for a test that asks for MXNet in
    its body (get_backend('mxnet')), where MXNet is said to be missing."""
    if os.environ.get('D2LPAR_TEST_WITHOUT_MXNET') == '1':
        raise mxnet_reach.unavailable()


def test_make_test_says_what_it_did_not_run():
    env = dict(os.environ, D2LPAR_TEST_WITHOUT_MXNET='1')
    out = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider',
         '-p', 'no:randomly', '--nbval-lax',
         'tests/test_mxnet_reach.py::test_runs_with_each_framework',
         'notebooks/en/mxnet/multiple-gpus.ipynb',
         'notebooks/en/pytorch/multiple-gpus.ipynb', '--collect-only', '-q'],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert 'test_runs_with_each_framework[mxnet]' not in out.stdout
    assert 'notebooks/en/mxnet/' not in out.stdout.split('NOT RUN')[0]
    assert 'notebooks/en/pytorch/multiple-gpus.ipynb' in out.stdout
    out = subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'no:cacheprovider',
         '-p', 'no:randomly', '--nbval-lax',
         'tests/test_mxnet_reach.py::test_runs_with_each_framework',
         'tests/test_mxnet_reach.py::test_reaches_the_other_framework_in_its_body',
         'notebooks/en/mxnet/multiple-gpus.ipynb'],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]
    last = out.stdout.strip().splitlines()[-6:]
    text = '\n'.join(last)
    assert re.search(r'NOT RUN: the MXNet track, 1 notebook\(s\) \(\d+ '
                     r'cells\) and 1 test\(s\), deselected: MXNet is not '
                     r'installed here', text), text
    assert 'NOT RUN: MXNet notebook(s): notebooks/en/mxnet/' \
        'multiple-gpus.ipynb' in text, text
    assert 'NOT RUN: 1 MXNet test(s) in tests/test_mxnet_reach.py (1)' \
        in text, text
    assert 'NOT RUN: 1 more test(s) reached MXNet and were skipped, in ' \
        'tests/test_mxnet_reach.py (1)' in text, text
    assert re.search(r' 1 passed, 1 skipped, \d+ deselected ', last[-1]), \
        text


def _fake_python(folder):
    """A stand-in for python: records its arguments in calls.log, makes a
    venv of stand-ins, and prints a version when asked."""
    log = folder / 'calls.log'
    script = folder / 'python'
    script.write_text(textwrap.dedent(f'''\
        #!/bin/sh
        echo "$0 $*" >> {log}
        case "$1" in
          -c) echo 3.13 ;;
          -m) if [ "$2" = venv ]; then
                mkdir -p "$3/bin"
                cp "$0" "$3/bin/python"; cp "$0" "$3/bin/jupyter"
              fi ;;
        esac
        exit 0
        '''))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script, log


def test_make_lab_torch_cpu_reaches_pip(tmp_path):
    python, log = _fake_python(tmp_path)
    venv = tmp_path / 'venv'
    make = ['make', '--no-print-directory', 'lab', f'PYTHON={python}',
            f'VENV={venv}']
    out = subprocess.run(make + ['TORCH=cpu'], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    pips = [line for line in log.read_text().splitlines()
            if ' -m pip install ' in line]
    torch = [line for line in pips if 'torch==' in line]
    assert torch, pips
    assert '--index-url https://download.pytorch.org/whl/cpu' in torch[0]
    assert pips.index(torch[0]) == 0  # before the lock file's torch
    assert '-r requirements/lock-py3.13.txt' in pips[1]
    assert any(' lab ' in line and 'jupyter' in line
               for line in log.read_text().splitlines())
    # without TORCH=, torch comes from the lock file alone
    log.unlink()
    (venv / '.installed-stamp').unlink()
    out = subprocess.run(make, cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert 'download.pytorch.org' not in log.read_text()
