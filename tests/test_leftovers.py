"""The guard that fails a test run which leaves processes running
(conftest.py, tests/leftovers.py)."""
import os
import subprocess
import sys
import textwrap
import time

import psutil

import leftovers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run_pytest(folder, body):
    (folder / 'test_inner.py').write_text(textwrap.dedent(body))
    # The repository's conftest.py as a plugin: the same guard as make test
    return subprocess.run(
        [sys.executable, '-m', 'pytest', '-p', 'conftest', '-p',
         'no:cacheprovider', '-q', str(folder / 'test_inner.py')],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, 'PYTHONPATH': ROOT})


def test_a_run_that_leaves_a_process_fails_and_kills_it(tmp_path):
    pid_file = tmp_path / 'pid'
    result = _run_pytest(tmp_path, f'''
        import subprocess, sys

        def test_leaves_a_sleeper_behind():
            # Its own session, as a stray child of a training script has
            p = subprocess.Popen([sys.executable, '-c',
                                  'import time; time.sleep(300)'],
                                 start_new_session=True)
            open({str(pid_file)!r}, 'w').write(str(p.pid))
    ''')
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert '1 passed' in out and 'left running' in out, out
    assert 'time.sleep(300)' in out, out
    pid = int(pid_file.read_text())
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == \
        psutil.STATUS_ZOMBIE


def test_a_run_that_stops_what_it_starts_passes(tmp_path):
    result = _run_pytest(tmp_path, '''
        import subprocess, sys

        def test_waits_for_its_child():
            subprocess.run([sys.executable, '-c', 'pass'], check=True)
    ''')
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    assert 'left running' not in out, out


def test_the_mark_is_this_runs_own():
    # Set by conftest.py in this run's controller, inherited here
    mark = os.environ[leftovers.MARK]
    child = subprocess.Popen([sys.executable, '-c',
                              'import time; time.sleep(30)'])
    try:
        # Its environment is readable once the child has started (CI on
        # Python 3.13 once looked before that): look for up to 10 s
        deadline = time.monotonic() + 10
        while child.pid not in {p.pid for p in leftovers.left_running(mark)}:
            assert time.monotonic() < deadline, 'the child was not found'
            time.sleep(0.1)
        assert not leftovers.left_running(mark + 'x')
    finally:
        leftovers.kill([psutil.Process(child.pid)])
        child.wait()
