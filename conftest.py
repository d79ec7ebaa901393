"""Two guards for every pytest run here (make test, make test-reach, a
bare pytest).

Nothing left running: the run marks its environment, and at its end
looks for the processes that carry the mark (training scripts, torchrun,
notebook kernels and what they left behind, tests/leftovers.py). Each one
found is named in the summary and killed, and the run fails.

Where MXNet is not installed (Python 3.13 and later, macOS on Apple
silicon, Windows), every pytest run here (make test, make test-reach, a
bare pytest) runs the PyTorch track: it deselects the tests and notebooks
that need MXNet, and says in its last lines what it did not run and why,
never silently. Where MXNet is installed this does nothing.

A test needs MXNet when it runs a notebook under notebooks/<lang>/mxnet/,
when one of its parameters is 'mxnet' (the `backend` fixture, the
`framework` parameters), or when its name says mxnet.
"""
import importlib.util
import os
import platform
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), 'tests'))
import leftovers  # noqa: E402

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
    if getattr(node, 'workeroutput', {}).get('d2lpar_pid'):
        _workers.add(node.workeroutput['d2lpar_pid'])
    for nodeid in getattr(node, 'workeroutput', {}).get('d2lpar_no_mxnet',
                                                        ()):
        if nodeid not in _seen:
            _seen.add(nodeid)
            _deselected.append(nodeid)


SKIP_REASON = 'needs MXNet, which is not installed here'


def _is_missing_mxnet(exc):
    """Whether `exc` (or what caused it) says that MXNet is missing."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ImportError) and exc.name == 'mxnet':
            return True
        text = str(exc)
        if ("No module named 'mxnet'" in text
                or 'MXNet is not installed here' in text):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that reaches MXNet in its body (get_backend('mxnet'), a
    script of lesson 4) where MXNet is missing: skipped, with the reason
    that the summary counts."""
    outcome = yield
    report = outcome.get_result()
    if (call.excinfo is not None and mxnet_missing()
            and _is_missing_mxnet(call.excinfo.value)):
        report.outcome = 'skipped'
        report.longrepr = (str(item.path), (item.location[1] or 0) + 1,
                           f'Skipped: {SKIP_REASON}')


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


def _count_by_file(nodeids):
    counts = {}
    for n in nodeids:
        counts[n.split('::')[0]] = counts.get(n.split('::')[0], 0) + 1
    return counts.items()


def pytest_terminal_summary(terminalreporter):
    if _left:
        terminalreporter.section('left running', sep='=', red=True)
        terminalreporter.write_line(
            f'FAILED: {len(_left)} process(es) started by this run were '
            f'still running at its end (now killed): a test or a notebook '
            f'does not stop what it starts.')
        for line in _left:
            terminalreporter.write_line(f'  {line}')
    skipped = sorted({r.nodeid for r in terminalreporter.stats.get(
        'skipped', []) if SKIP_REASON in str(r.longrepr)})
    if not _deselected and not skipped:
        return
    terminalreporter.section('not run: no MXNet here', sep='=')
    for line in summary_lines(_deselected) if _deselected else []:
        terminalreporter.write_line(line)
    if skipped:
        terminalreporter.write_line(
            f'NOT RUN: {len(skipped)} more test(s) reached MXNet and were '
            f'skipped, in ' + ', '.join(
                f'{f} ({n})' for f, n in sorted(_count_by_file(skipped))))
    terminalreporter.write_line(
        f'(python {sys.version.split()[0]}; the MXNet track runs where '
        f'MXNet installs: Linux x86-64, Python 3.11 or 3.12)')


# --------------------------------------------------------------------------
# Nothing left running

_left = []
_workers = set()  # the pids of pytest-xdist's workers


def pytest_configure(config):
    if hasattr(config, 'workerinput'):  # a pytest-xdist worker
        config.workeroutput['d2lpar_pid'] = os.getpid()
    else:
        leftovers.mark_this_run()


def _still_running(process):
    import psutil
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:  # gone
        return False


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if hasattr(session.config, 'workerinput'):
        return
    import psutil
    # pytest-xdist has shut its workers down by now; give them time to go
    deadline = time.monotonic() + 30
    while (any(psutil.pid_exists(pid) for pid in _workers)
           and time.monotonic() < deadline):
        time.sleep(0.2)
    # What is left running is what still runs 10 s on, save Python's
    # multiprocessing.resource_tracker: not a process of a test, but the
    # helper that multiprocessing starts once per process that uses it
    # (a pytest-xdist worker, a kernel); it ends when the last process
    # holding its pipe has ended, cleaning up after them
    found = [p for p in leftovers.left_running(
        os.environ[leftovers.MARK], but={os.getpid(), *_workers})
        if 'multiprocessing.resource_tracker' not in leftovers.describe(p)]
    deadline = time.monotonic() + 10
    while found and time.monotonic() < deadline:
        time.sleep(0.5)
        found = [p for p in found if _still_running(p)]
    if found:
        _left.extend(leftovers.describe(p) for p in found)
        leftovers.kill(found)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
