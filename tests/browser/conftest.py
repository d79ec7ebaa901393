"""Fixtures of the browser test: a JupyterLab server started from the venv,
and a headless Chromium driven by Playwright for Python.

What the test needs, and where it comes from:

- Playwright for Python: `requirements/lock-py3.X.txt` (so `make venv` installs
  it). Playwright's own browser download (`playwright install`) is never
  used: it needs a CDN that a closed network does not reach.
- A Chromium or Chrome binary: `$D2LPAR_CHROMIUM`, else the first of
  `chromium`, `chromium-browser`, `google-chrome-stable`, `google-chrome`
  on the PATH. When there is none, and we are root on a machine with
  apt-get, the fixture runs `apt-get install -y chromium` (Debian's
  package) once. Otherwise the test is skipped with a reason that says
  exactly what is missing, and a warning repeats it in pytest's summary:
  never silently. Likewise (best effort, a warning if it fails) a CJK
  font, `fonts-wqy-zenhei`, when fontconfig knows none: without it the
  screenshots of the Chinese notebooks show boxes.
  D2LPAR_REQUIRE_BROWSER=1 (set in CI) turns the skip into a failure.

The server runs with a private token on a free loopback port, with its own
settings folder (autosave off, so running the notebooks never writes them
back to the repository; every cell attached to the page; no news
requests), its own runtime/data/config folders and its own checkpoint
folder (so nothing is written into the repository), and menus in English
(or the language a test asks for, set as `make lab LAB_LANG=...` sets it:
tools/lab_language.py); it is shut down, kernels
included, when the module's tests end, whether they passed or not.
"""
import importlib.util
import json
import os
import pathlib
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
import warnings

import pytest

from d2lpar.distributed.launch import free_port, stop_group

# The notebook on show, once its kernel is idle
IDLE = ('.jp-NotebookPanel:not(.lm-mod-hidden) '
        '.jp-Notebook-ExecutionIndicator[data-status="idle"]')

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / 'build' / 'browser'
CHROMIUM_NAMES = ('chromium', 'chromium-browser', 'google-chrome-stable',
                  'google-chrome')
CHROMIUM_ARGS = ['--headless', '--no-sandbox', '--disable-gpu',
                 '--disable-quic', '--no-first-run',
                 '--disable-background-networking',
                 '--disable-component-update', '--disable-sync',
                 '--disable-dev-shm-usage']
SERVER_START_TIMEOUT = 120  # seconds

# JupyterLab user settings for the test server (its own folder).
LAB_SETTINGS = {
    # Never save the notebooks we run: they are committed without outputs.
    '@jupyterlab/docmanager-extension/plugin': {'autosave': False},
    # Attach every cell to the page, so that the DOM holds all of them.
    '@jupyterlab/notebook-extension/tracker': {'windowingMode': 'none'},
    # No "Would you like to get news?" toast, no requests to the web.
    '@jupyterlab/apputils-extension/notification': {
        'fetchNews': 'false', 'checkForUpdates': False},
}


class BrowserUnavailable(Exception):
    pass


def loud_skip(what):
    """Skip, and say so in the warnings summary too (shown even with -q,
    and relayed by pytest-xdist). With D2LPAR_REQUIRE_BROWSER=1 (CI),
    fail instead."""
    message = (f'BROWSER TEST NOT RUN: {what}. The JupyterLab browser test '
               f'(tests/browser) needs it; see tests/browser/conftest.py.')
    if os.environ.get('D2LPAR_REQUIRE_BROWSER') == '1':
        pytest.fail(message + ' (D2LPAR_REQUIRE_BROWSER=1)', pytrace=False)
    warnings.warn(pytest.PytestWarning(message))
    pytest.skip(message)


def _run(cmd, timeout):
    return subprocess.run(cmd, capture_output=True, text=True,
                          timeout=timeout,
                          env=dict(os.environ,
                                   DEBIAN_FRONTEND='noninteractive'))


def find_chromium():
    explicit = os.environ.get('D2LPAR_CHROMIUM')
    if explicit:
        if os.access(explicit, os.X_OK):
            return explicit
        raise BrowserUnavailable(
            f'D2LPAR_CHROMIUM={explicit} is not an executable file')
    if os.access('/usr/bin/chromium', os.X_OK):
        return '/usr/bin/chromium'
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


_apt_updated = []


def can_apt():
    return (hasattr(os, 'geteuid') and os.geteuid() == 0
            and shutil.which('apt-get') is not None)


def apt_install(*packages):
    """`apt-get update` (once) and `apt-get install -y <packages>`; None
    when it worked, else what went wrong."""
    steps = [['apt-get', 'install', '-y', '-qq', *packages]]
    if not _apt_updated:
        steps.insert(0, ['apt-get', 'update', '-qq'])
    for cmd in steps:
        try:
            result = _run(cmd, timeout=900)
        except subprocess.TimeoutExpired:
            return f'`{" ".join(cmd)}` timed out'
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip()[-600:]
            return f'`{" ".join(cmd)}` failed (exit {result.returncode}): ' \
                   f'{tail}'
        if cmd[1] == 'update':
            _apt_updated.append(True)
    return None


def install_chromium():
    """`apt-get install -y chromium`, when we are root and apt works."""
    if not can_apt():
        why = ('no apt-get' if getattr(os, 'geteuid', lambda: 1)() == 0 else
               'not root, so `apt-get install -y chromium` was not tried')
        raise BrowserUnavailable(
            'no Chromium/Chrome binary (looked for $D2LPAR_CHROMIUM, '
            '/usr/bin/chromium and ' + ', '.join(CHROMIUM_NAMES) +
            f' on the PATH), and {why}: install Chromium (Debian: sudo '
            'apt-get install -y chromium) or set D2LPAR_CHROMIUM to a '
            'Chromium or Chrome binary')
    problem = apt_install('chromium')
    if problem:
        raise BrowserUnavailable(f'no Chromium binary, and {problem}')
    path = find_chromium()
    if not path:
        raise BrowserUnavailable('`apt-get install -y chromium` succeeded '
                                 'but /usr/bin/chromium is still missing')
    return path


def ensure_cjk_font():
    """The Chinese notebooks need a CJK font, or their screenshots show
    empty boxes. Best effort: install a small one when we can."""
    if not shutil.which('fc-list'):
        return
    found = subprocess.run(['fc-list', ':lang=zh'], capture_output=True,
                           text=True).stdout.strip()
    if found:
        return
    problem = (apt_install('fonts-wqy-zenhei') if can_apt()
               else 'not root with apt-get')
    if problem:
        warnings.warn(pytest.PytestWarning(
            f'No CJK font ({problem}): the Chinese notebooks run, but '
            f'their screenshots show boxes instead of characters. Install '
            f'one, e.g. `apt-get install -y fonts-wqy-zenhei`.'))


@pytest.fixture(scope='session')
def chromium_path():
    try:
        path = find_chromium() or install_chromium()
    except BrowserUnavailable as e:
        loud_skip(str(e))
    ensure_cjk_font()
    return path


@pytest.fixture(scope='session')
def sync_playwright():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        loud_skip(f'the Python package `playwright` is not installed in '
                  f'{sys.prefix} (it is in requirements/lock-py3.X.txt: run '
                  f'`make venv`, or `{sys.executable} -m pip install '
                  f'playwright`; never `playwright install`)')
    return sync_playwright


def write_lab_settings(folder):
    for plugin, values in LAB_SETTINGS.items():
        path = folder / f'{plugin}.jupyterlab-settings'
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(values), encoding='utf-8')


class LabServer:
    """A running `jupyter lab`, and the few REST calls the test needs."""

    def __init__(self, proc, url, token, log_path, home):
        self.proc, self.url, self.token = proc, url, token
        self.log_path, self.home = log_path, home

    def api(self, method, path, timeout=30):
        request = urllib.request.Request(
            f'{self.url}{path}', method=method,
            headers={'Authorization': f'token {self.token}'})
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
            return response.status, json.loads(body) if body else None

    def open(self, page, path, prefix='d2lpar-'):
        """Open notebook `path` (from the repository's root) in `page`, in
        a fresh workspace: nothing else is open in the tab."""
        workspace = prefix + uuid.uuid4().hex[:8]
        page.goto(f'{self.url}/lab/workspaces/{workspace}/tree/'
                  f'{urllib.parse.quote(path)}?reset&token={self.token}')

    def lab_url(self, path):
        return f'{self.url}/lab/tree/{path}?token={self.token}'

    def log(self):
        return self.log_path.read_text(encoding='utf-8', errors='replace')

    def shutdown_kernels(self):
        """Stop every kernel (they run in their own process groups, so
        killing the server's group would not reach them)."""
        try:
            _, kernels = self.api('GET', '/api/kernels')
            for kernel in kernels:
                self.api('DELETE', f'/api/kernels/{kernel["id"]}',
                         timeout=60)
        except (OSError, ValueError):
            pass

    def stop(self):
        if self.proc.poll() is None:
            self.shutdown_kernels()
        stop_group(self.proc, grace=20)  # the server and its children


def lab_language():
    """tools/lab_language.py, which chooses the language for `make lab`."""
    spec = importlib.util.spec_from_file_location(
        'lab_language', ROOT / 'tools' / 'lab_language.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def start_lab(home, language='en'):
    """`jupyter lab` in `home`'s folders, its menus in `language` (fr, tr,
    zh, en), set the way `make lab LAB_LANG=...` sets it. English unless
    asked: left to its default, JupyterLab would follow the machine's
    locale, and the tests click menus by their English names."""
    token = secrets.token_hex(24)
    port = free_port()
    settings = home / 'settings'
    write_lab_settings(settings)
    env = dict(os.environ)
    # Like the Makefile: one data cache in the repository's data/.
    env['D2LPAR_DATA'] = os.environ.get('D2LPAR_DATA') or str(ROOT / 'data')
    env.pop('MPLBACKEND', None)  # the kernel must draw inline, not on Agg
    # Keep the user's Jupyter folders out of it, and write nothing there.
    env['JUPYTER_RUNTIME_DIR'] = str(home / 'runtime')
    env['JUPYTER_DATA_DIR'] = str(home / 'data')
    env['JUPYTER_CONFIG_DIR'] = str(home / 'config')
    env['IPYTHONDIR'] = str(home / 'ipython')
    tool = lab_language()
    config = str(tool.write_config(tool.lab_locale(language), root=home))
    env['JUPYTER_CONFIG_PATH'] = os.pathsep.join(
        filter(None, [config, os.environ.get('JUPYTER_CONFIG_PATH')]))
    # the venv running pytest (.venv, .venv-py3.X, make test-reach's)
    jupyter = pathlib.Path(sys.executable).parent / 'jupyter'
    if not jupyter.exists():
        jupyter = ROOT / '.venv' / 'bin' / 'jupyter'
    cmd = [str(jupyter), 'lab', '--no-browser',
           f'--IdentityProvider.token={token}', f'--port={port}',
           '--port-retries=0', '--ServerApp.ip=127.0.0.1',
           f'--ServerApp.root_dir={ROOT}',
           f'--LabApp.user_settings_dir={settings}',
           f'--LabApp.workspaces_dir={home / "workspaces"}',
           '--LabApp.extension_manager=readonly',
           # Checkpoints (made when a notebook is opened) go to our
           # folder, not to .ipynb_checkpoints/ in the repository.
           f'--FileCheckpoints.checkpoint_dir={home / "checkpoints"}']
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        cmd.append('--allow-root')
    log_path = home / 'jupyter-lab.log'
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL,
                                start_new_session=True)
    server = LabServer(proc, f'http://127.0.0.1:{port}', token, log_path,
                       home)
    deadline = time.monotonic() + SERVER_START_TIMEOUT
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f'jupyter lab exited with {proc.returncode} '
                               f'before serving:\n{server.log()[-4000:]}')
        try:
            server.api('GET', '/api/status', timeout=5)
            return server
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            server.stop()
            raise RuntimeError(f'jupyter lab did not answer within '
                               f'{SERVER_START_TIMEOUT} s:\n'
                               f'{server.log()[-4000:]}')
        time.sleep(0.3)


def serve_lab(request, prefix, language='en'):
    """A `jupyter lab` in a fresh home folder (named from `prefix`), which
    stops, and the folder goes, when the fixture's scope ends."""
    home = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    server = None

    def finish():
        if server is not None:
            server.stop()
        shutil.rmtree(home, ignore_errors=True)

    request.addfinalizer(finish)  # runs whether the tests pass or fail
    server = start_lab(home, language=language)
    return server


@pytest.fixture(scope='module')
def lab_server(request, chromium_path, sync_playwright):
    return serve_lab(request, 'd2lpar-lab-')


@pytest.fixture(scope='module')
def browser(chromium_path, sync_playwright, tmp_path_factory):
    profile = tmp_path_factory.mktemp('chromium-profile')
    home = tmp_path_factory.mktemp('chromium-home')
    # Chromium writes crash-report settings and a dconf cache under the
    # XDG folders: keep them in temporary ones too.
    env = dict(os.environ, XDG_CONFIG_HOME=str(home / 'config'),
               XDG_CACHE_HOME=str(home / 'cache'))
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(profile), executable_path=chromium_path, headless=True,
            env=env,
            args=CHROMIUM_ARGS, viewport={'width': 1400, 'height': 1800},
            device_scale_factor=1)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def screenshot_dir():
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
