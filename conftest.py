"""Where MXNet is not installed (Python 3.13 and later, macOS on Apple
silicon, Windows), every pytest run here (make test, make test-reach, a
bare pytest) runs the PyTorch track: it deselects the tests and notebooks
that need MXNet, and says in its last lines what it did not run and why,
never silently. Where MXNet is installed this does nothing.

A test needs MXNet when it runs a notebook under notebooks/<lang>/mxnet/,
when one of its parameters is 'mxnet' (the `backend` fixture, the
`framework` parameters), or when its name says mxnet.
"""
import importlib.util
import platform
import sys

import pytest

MXNET_MISSING_ENV = 'D2LPAR_TEST_WITHOUT_MXNET'


def mxnet_missing():
    """Whether MXNet is missing here (D2LPAR_TEST_WITHOUT_MXNET=1 makes it
    so, for the test of this file)."""
    import os
    if os.environ.get(MXNET_MISSING_ENV) == '1':
        return True
    return importlib.util.find_spec('mxnet') is None


def needs_mxnet(item):
    """Whether the collected test `item` needs MXNet."""
    path = str(getattr(item, 'path', item.fspath)).replace('\\', '/')
    if '/mxnet/' in path:
        return True
    params = getattr(getattr(item, 'callspec', None), 'params', {})
    if any(value == 'mxnet' for value in params.values()):
        return True
    return 'mxnet' in item.name.lower()


_deselected = []
_seen = set()


def pytest_collection_modifyitems(config, items):
    if not mxnet_missing():
        return
    keep = [item for item in items if not needs_mxnet(item)]
    dropped = [item for item in items if needs_mxnet(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        _deselected.extend(item.nodeid for item in dropped)
    if hasattr(config, 'workeroutput'):  # a pytest-xdist worker tells
        config.workeroutput['d2lpar_no_mxnet'] = list(_deselected)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: what each worker deselected (they all
    collect the same items)."""
    for nodeid in getattr(node, 'workeroutput', {}).get('d2lpar_no_mxnet',
                                                        ()):
        if nodeid not in _seen:
            _seen.add(nodeid)
            _deselected.append(nodeid)


def summary_lines(nodeids):
    """What the summary says about the deselected `nodeids`."""
    notebooks = sorted({n.split('::')[0] for n in nodeids
                        if n.split('::')[0].endswith('.ipynb')})
    tests = [n for n in nodeids if not n.split('::')[0].endswith('.ipynb')]
    here = (f'{platform.system()} {platform.machine()}, Python '
            f'{platform.python_version()}')
    cells = len(nodeids) - len(tests)
    lines = [f'NOT RUN: the MXNet track, {len(notebooks)} notebook(s) '
             f'({cells} cells) and {len(tests)} test(s), deselected: MXNet '
             f'is not installed here ({here}; MXNet 1.9.1 has wheels only '
             f'for Linux x86-64 with Python 3.8 to 3.12). The PyTorch track '
             f'ran alone.']
    if notebooks:
        lines.append('NOT RUN: MXNet notebook(s): '
                     + ', '.join(notebooks))
    if tests:
        files = {}
        for n in tests:
            files.setdefault(n.split('::')[0], []).append(n)
        lines.append(f'NOT RUN: {len(tests)} MXNet test(s) in '
                     + ', '.join(f'{f} ({len(v)})'
                                 for f, v in sorted(files.items())))
    return lines


def pytest_terminal_summary(terminalreporter):
    if not _deselected:
        return
    terminalreporter.section('not run: no MXNet here', sep='=')
    for line in summary_lines(_deselected):
        terminalreporter.write_line(line)
    terminalreporter.write_line(
        f'(python {sys.version.split()[0]}; the MXNet track runs where '
        f'MXNet installs: Linux x86-64, Python 3.11 or 3.12)')
