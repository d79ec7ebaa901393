"""Starting processes and always stopping them: free ports, process groups
that get cleaned up, and waiting for several processes at once. Used by
lesson 4's launchers (d2lpar.distributed), `train_concise`, the benchmark
(tools/bench) and the tests.

Each child starts in a session of its own, with a mark in its environment
that its own children inherit; when a run fails, times out, or Python
exits, every marked process gets SIGTERM, then SIGKILL. Needs Linux or
macOS (process groups).
"""
import atexit
import errno
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import d2lpar
from d2lpar.i18n import error_message

HOST = '127.0.0.1'
# The folder that holds the package d2lpar, for the children's PYTHONPATH
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(d2lpar.__file__)))
_MARK = 'D2LPAR_RUN'  # environment variable that marks our processes


# --------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------
def free_port(host=HOST):
    """A TCP port that nobody listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def check_port(port, host=HOST):
    """Return `port` if it can be bound on `host`, else a RuntimeError."""
    if not isinstance(port, int) or not 0 < port < 65536:
        raise ValueError(error_message(
            'A port is an int from 1 to 65535, got {port!r}.', port=port))
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise RuntimeError(error_message(
                    'port {port} on {host} is already in use (another '
                    'training run?): pass another port or stop that '
                    'process.', port=port, host=host)) from None
            raise RuntimeError(error_message(
                'port {port} on {host} cannot be used ({error}): pass '
                'another port.', port=port, host=host, error=e)) from None
    return port


# --------------------------------------------------------------------------
# Stopping processes
# --------------------------------------------------------------------------
def _marked(mark, variable=_MARK):
    """Pids of the live processes whose environment variable `variable`
    is `mark`."""
    needle = f'{variable}={mark}'
    try:
        import psutil
    except ImportError:  # Linux without psutil: read /proc directly
        pids = []
        if not os.path.isdir('/proc'):
            return pids  # then only the process groups get stopped
        for pid in filter(str.isdigit, os.listdir('/proc')):
            try:
                with open(f'/proc/{pid}/environ', 'rb') as f:
                    if needle.encode() in f.read().split(b'\0'):
                        pids.append(int(pid))
            except OSError:
                pass
        return pids
    pids = []
    for p in psutil.process_iter():
        try:
            if p.environ().get(variable) == mark:
                pids.append(p.pid)
        except (psutil.Error, OSError):
            pass
    return pids


def send(pid, sig, group=False):
    """Send `sig` to process `pid` (with `group`: to its process group),
    saying nothing when it is gone already."""
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc, grace=5.0):
    """Stop `proc`, a child started in a session of its own, and every
    process of its group: SIGTERM, SIGKILL after `grace` seconds, and a
    last SIGKILL for what it left behind in its group."""
    if proc.poll() is None:
        send(proc.pid, signal.SIGTERM, group=True)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    send(proc.pid, signal.SIGKILL, group=True)  # not reaped: still its group
    proc.wait()


def stop_spawned(processes, grace=5.0):
    """Stop the `multiprocessing` processes of `processes` that still run:
    SIGTERM, then SIGKILL for those that have not ended `grace` seconds
    later."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:  # SIGKILL what SIGTERM did not end
        p.join(grace)
        if p.is_alive():
            p.kill()
            p.join()


def wait_for(procs, done, timeout, interval=0.2):
    """Poll the processes `procs` ({name: Popen}) until those named in
    `done` have all exited with code 0, and return None; or return the
    name of the first process (in the order of `procs`) that exited with
    another code. A `subprocess.TimeoutExpired` when `timeout` seconds
    pass first. Nothing is stopped: see `Processes`."""
    deadline = time.monotonic() + timeout
    while True:
        for name, p in procs.items():
            if p.poll():  # exited, and not with 0
                return name
        if all(procs[name].poll() == 0 for name in done):
            return None
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(list(done), timeout)
        time.sleep(interval)


class Processes:
    """The processes of one run: `start` them, then leave the ``with``
    block, which stops whatever is still running (SIGTERM, then SIGKILL
    after `grace` seconds), their children included. Each process writes
    its output to ``<out_dir>/<name>.log``."""
    _live = []

    def __init__(self, out_dir, grace=5.0):
        self.out_dir, self.grace = out_dir, grace
        self.mark = uuid.uuid4().hex
        self.procs = {}  # name -> Popen
        self.logs = {}  # name -> log file

    def start(self, name, cmd, env, cwd=None):
        log = os.path.join(self.out_dir, re.sub(r'\W+', '-', name) + '.log')
        self.logs[name] = log
        with open(log, 'wb') as f:
            self.procs[name] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=f,
                stderr=subprocess.STDOUT, start_new_session=True,
                env={**env, _MARK: self.mark}, cwd=cwd)
        return self.procs[name]

    def tail(self, name, lines=15):
        try:
            with open(self.logs[name], errors='replace') as f:
                text = f.read().rstrip().splitlines()
        except OSError:
            return '(no log)'
        return '\n'.join(text[-lines:]) or '(empty log)'

    def stop(self):
        """SIGTERM everything still running, SIGKILL it after `grace`."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in self.procs.values() if p.poll() is None]
            others = _marked(self.mark)
            if not alive and not others:
                break
            for p in alive:
                send(p.pid, sig, group=True)
            for pid in others:
                send(pid, sig)
            deadline = time.monotonic() + self.grace
            while time.monotonic() < deadline and (
                    any(p.poll() is None for p in self.procs.values())
                    or _marked(self.mark)):
                time.sleep(0.1)
        for p in self.procs.values():
            p.wait()

    def __enter__(self):
        Processes._live.append(self)
        return self

    def __exit__(self, *exc_info):
        try:
            self.stop()
        finally:
            Processes._live.remove(self)
        return False


@atexit.register
def _stop_all():
    for group in list(Processes._live):
        group.stop()


def python_env(extra=()):
    """The environment of a Python process that imports this d2lpar:
    this one's, unbuffered, with the repository first on PYTHONPATH, one
    thread per process (as torchrun sets it for several: k processes use
    k cores, like k one-core machines) unless told otherwise, and
    `extra`."""
    env = dict(os.environ, PYTHONUNBUFFERED='1', **dict(extra))
    path = env.get('PYTHONPATH')
    env['PYTHONPATH'] = _REPO + (os.pathsep + path if path else '')
    env.setdefault('OMP_NUM_THREADS', '1')
    return env
