"""Start, watch and stop multi-process training on this machine, and write
the command lines that run it on several machines.

Framework-free: the training itself runs in other processes, the PyTorch
script ``d2lpar.ddp_train`` under ``torchrun`` and the MXNet script
``d2lpar.kvstore_train`` as scheduler, server and workers, all on the
loopback interface (127.0.0.1). This module imports a framework only to
count the GPUs. Every process computes with one thread (OMP_NUM_THREADS=1,
unless the environment says otherwise), so k processes stand for k
one-core machines. With fewer GPUs than processes, all processes train on
the CPU (see `_common.choose_gpu`), and the launcher says so.

A failed or stuck run never leaves processes behind: each child starts in
a session of its own, with a mark in its environment that its own
children inherit; when a run fails, times out, or Python exits, every
marked process gets SIGTERM, then SIGKILL.
"""
import atexit
import dataclasses
import errno
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid

import numpy as np

from d2lpar import _common
from d2lpar import fonts
from d2lpar.i18n import (
    Bilingual, Message, N_, _, display_width, error_message, number, pad)

HOST = '127.0.0.1'
_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MARK = 'D2LPAR_RUN'  # environment variable that marks our processes
_OUTPUTS = re.compile(r'^(rank\d+\.json|worker\d+\.json|result\.json|'
                      r'params_step1\.npz|torchrun\.log|scheduler\.log|'
                      r'server(-\d+)?\.log|server\d+\.json|'
                      r'worker-process-\d+\.log|failed-at-step-\d+)$')


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
# Process groups that always get cleaned up
# --------------------------------------------------------------------------
def _marked(mark):
    """Pids of the live processes whose environment carries `mark`."""
    needle = f'{_MARK}={mark}'
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
            if p.environ().get(_MARK) == mark:
                pids.append(p.pid)
        except (psutil.Error, OSError):
            pass
    return pids


def _signal(pid, sig, group=False):
    try:
        os.killpg(pid, sig) if group else os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Processes:
    """The processes of one run: `start` them, then leave the ``with``
    block, which stops whatever is still running (SIGTERM, then SIGKILL
    after `grace` seconds), their children included."""
    _live = []

    def __init__(self, out_dir, grace=5.0):
        self.out_dir, self.grace = out_dir, grace
        self.mark = uuid.uuid4().hex
        self.procs = {}  # name -> Popen
        self.logs = {}  # name -> log file

    def start(self, name, cmd, env):
        log = os.path.join(self.out_dir, re.sub(r'\W+', '-', name) + '.log')
        self.logs[name] = log
        with open(log, 'wb') as f:
            self.procs[name] = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=f,
                stderr=subprocess.STDOUT, start_new_session=True,
                env={**env, _MARK: self.mark})
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
                _signal(p.pid, sig, group=True)
            for pid in others:
                _signal(pid, sig)
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


# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------
@dataclasses.dataclass
class DistributedResult(_common.TrainResult):
    """A `TrainResult` (so `plot_scaling` takes it) plus what each process
    measured: `processes` holds one dict per worker, by rank."""
    framework: str = ''
    backend: str = ''
    processes: list = dataclasses.field(default_factory=list)
    out_dir: str = ''
    summary: dict = dataclasses.field(default_factory=dict)  # result.json
    # MXNet: what each server held (server<i>.json of kvstore_state)
    servers: list = dataclasses.field(default_factory=list)

    @property
    def num_workers(self):
        return len(self.processes)

    def first_step_params(self):
        """{name: NumPy array}: the model's parameters after the first
        step of the run, as rank 0 saved them."""
        with np.load(os.path.join(self.out_dir, 'params_step1.npz')) as f:
            return dict(f)

    def __str__(self):
        devices = ', '.join(sorted({p['device'] for p in self.processes}))
        return _('test acc: {test_acc:.2f}, {sec_per_epoch:.1f} sec/epoch '
                 'with {n} processes ({framework}, {backend}, '
                 '{devices})').format(
            test_acc=self.test_acc, sec_per_epoch=self.sec_per_epoch,
            n=self.num_workers, framework=self.framework,
            backend=self.backend, devices=devices)


def _collect(framework, out_dir, prefix, num_workers, num_servers=0):
    import json
    with open(os.path.join(out_dir, 'result.json')) as f:
        summary = json.load(f)
    processes = []
    for r in range(num_workers):
        with open(os.path.join(out_dir, f'{prefix}{r}.json')) as f:
            processes.append(json.load(f))
    servers = []
    for i in range(num_servers):  # none: that server created no state
        path = os.path.join(out_dir, f'server{i}.json')
        if os.path.exists(path):
            with open(path) as f:
                servers.append(json.load(f))
        else:
            servers.append({'server': i, 'keys': {}, 'parameter_bytes': 0,
                            'optimizer_bytes': 0})
    seconds = max(p['seconds_total'] for p in processes)
    epochs = summary['epochs']
    return DistributedResult(
        summary['test_acc'], seconds / epochs,
        [f'{p["device"]} (rank {p["rank"]})' for p in processes], epochs,
        summary['examples'] // epochs, [summary['test_acc']],
        framework, summary['backend'], processes, out_dir, summary, servers)


def _prepare(out_dir, num_workers, timeout):
    if os.name != 'posix':  # process groups (os.killpg, start_new_session)
        raise OSError(error_message(
            'Training in several processes from a lesson needs Linux or '
            'macOS (it stops a run through its process group); on Windows, '
            'run the lesson in WSL 2 or on Colab.'))
    if not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(error_message(
            'num_workers must be an int >= 1, got {num_workers!r}.',
            num_workers=num_workers))
    if timeout <= 0:
        raise ValueError(error_message(
            'timeout must be positive, got {timeout!r}.', timeout=timeout))
    out_dir = os.path.abspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(out_dir):  # no stale results from a former run
        if _OUTPUTS.match(name):
            os.remove(os.path.join(out_dir, name))
    return out_dir


def _device_options(framework, num_gpus, num_workers, use_gpus=None):
    """The script options that put `num_workers` processes on this
    machine's devices: ``['--cpu']`` when they train on the CPU, else
    ``[]``, printing why the CPU when there are GPUs. `use_gpus` None:
    GPUs when each process can have one of its own (`_common.choose_gpu`);
    False: the CPU; True: GPUs, a ValueError when there are too few.
    `num_gpus` None: ask `framework` how many GPUs it sees."""
    if use_gpus not in (None, True, False):
        raise ValueError(error_message(
            'use_gpus is None, True or False, got {use_gpus!r}.',
            use_gpus=use_gpus))
    if num_gpus is None:
        if framework == 'torch':
            import torch
            num_gpus = torch.cuda.device_count()
        else:
            import mxnet
            num_gpus = mxnet.context.num_gpus()
    gpu, notice = _common.choose_gpu(num_gpus, 0, num_workers)
    if use_gpus and gpu is None:
        raise ValueError(error_message(
            'use_gpus=True needs a GPU for each of the {n} processes; this '
            'machine has {num_gpus}.', n=num_workers, num_gpus=num_gpus))
    if use_gpus is False and gpu is not None:
        gpu, notice = None, _(
            '{n} process(es) on the CPU, as asked (use_gpus=False), '
            'although this machine has {num_gpus} GPU(s).').format(
                n=num_workers, num_gpus=num_gpus)
    if notice:
        print(notice)
    return ['--cpu'] if gpu is None else []


def _env(extra=()):
    env = dict(os.environ, PYTHONUNBUFFERED='1', **dict(extra))
    path = env.get('PYTHONPATH')
    env['PYTHONPATH'] = _REPO + (os.pathsep + path if path else '')
    # One thread per process, as torchrun sets it for several: k processes
    # use k cores, like k one-core machines (unless told otherwise).
    env.setdefault('OMP_NUM_THREADS', '1')
    return env


# --------------------------------------------------------------------------
# PyTorch: torchrun and d2lpar.ddp_train
# --------------------------------------------------------------------------
def _torch_failure(log):
    """(rank, exit code, error) of torchrun's 'Root Cause' summary."""
    try:
        with open(log, errors='replace') as f:
            text = f.read()
    except OSError:
        return None
    cause = text.partition('Root Cause (first observed failure):')[2]
    rank = re.search(r'rank\s*:\s*(\d+)', cause)
    if not rank:
        return None
    code = re.search(r'exitcode\s*:\s*(-?\d+)', cause)
    lines = [ln.strip() for ln in cause.partition('\n===')[0].splitlines()
             if ln.strip()]
    error = lines[-1] if lines else ''
    if error.startswith('(en) ') and len(lines) > 1:
        # An error of d2lpar in another language: its last two lines are
        # 'SomeError: <translated>' and '(en) <English>'
        kind = re.match(r'[\w.]+: ', lines[-2])
        error = Bilingual(lines[-2], (kind[0] if kind else '') + error[5:])
    return int(rank[1]), code[1] if code else '?', error


def launch_torch(num_workers, out_dir, script_args=(), port=None,
                 timeout=300, num_gpus=None, use_gpus=None, max_restarts=0):
    """Run ``d2lpar.ddp_train`` in `num_workers` processes under torchrun on
    127.0.0.1 (rendezvous at `port`, default: a free one) and return a
    `DistributedResult`. Raises RuntimeError, with the failing rank and
    the end of the log, when a process fails or `timeout` seconds pass;
    no process is left behind either way. The processes train on GPUs
    when there are `num_gpus` >= `num_workers` (default: as many as
    PyTorch sees), else all on the CPU; `use_gpus` False puts them on the
    CPU in any case (see `_device_options`). When a process fails,
    torchrun stops the others and starts them all again, up to
    `max_restarts` times (``--max-restarts``), before it gives up."""
    port = free_port() if port is None else check_port(port)
    out_dir = _prepare(out_dir, num_workers, timeout)
    devices = _device_options('torch', num_gpus, num_workers, use_gpus)
    max_restarts = _check_restarts(max_restarts)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1',
           '--nproc-per-node', str(num_workers), '--rdzv-backend', 'c10d',
           '--rdzv-endpoint', f'{HOST}:{port}',
           '--max-restarts', str(max_restarts),
           '-m', 'd2lpar.ddp_train', '--out', out_dir, *devices,
           *map(str, script_args)]
    with Processes(out_dir) as run:
        proc = run.start('torchrun', cmd, _env())
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            run.stop()
            raise RuntimeError(error_message(
                'PyTorch training with {n} processes did not finish within '
                '{timeout} s: stopped all its processes. End of {log}:',
                n=num_workers, timeout=timeout, log=run.logs['torchrun'])
                + '\n' + run.tail('torchrun')) from None
        if code != 0:
            failure = _torch_failure(run.logs['torchrun'])
            what = (Message('rank {rank} failed (exit code {code}): {error}',
                            rank=failure[0], code=failure[1],
                            error=failure[2]) if failure else
                    Message('torchrun exited with code {code}', code=code))
            raise RuntimeError(error_message(
                'PyTorch training with {n} processes failed: {what}. Stopped '
                'all its processes. End of {log}:', n=num_workers, what=what,
                log=run.logs['torchrun']) + '\n' + run.tail('torchrun'))
    return _collect('torch', out_dir, 'rank', num_workers)


# --------------------------------------------------------------------------
# MXNet: scheduler, server and workers of d2lpar.kvstore_train
# --------------------------------------------------------------------------
def _worker_rank(run, name):
    # kvstore_train writes this line in English, whatever the language
    try:
        with open(run.logs[name], errors='replace') as f:
            found = re.search(r'd2lpar: worker rank (\d+) of', f.read())
    except OSError:
        return None
    return int(found[1]) if found else None


def _exit_status(proc):
    """'code 1', or 'signal SIGKILL' for a process killed by a signal."""
    if proc.returncode < 0:
        try:
            return Message('signal {name}',
                           name=signal.Signals(-proc.returncode).name)
        except ValueError:
            pass
    return Message('code {code}', code=proc.returncode)


# The processes of the parameter server, as an error names them
# TRANSLATORS: "the {role} exited with code 1": the scheduler, the server
ROLES = {'scheduler': N_('scheduler'), 'server': N_('server')}


def launch_kvstore(num_workers, out_dir, script_args=(), port=None,
                   timeout=300, num_gpus=None, use_gpus=None, num_servers=1,
                   bigarray_bound=None, max_restarts=0):
    """Run ``d2lpar.kvstore_train`` with the ``dist_sync`` KVStore on
    127.0.0.1: a scheduler (at `port`, default: a free one),
    `num_servers` servers and `num_workers` workers (arrays of more than
    `bigarray_bound` elements are cut into a part per server; default:
    MXNet's, a million). Returns a `DistributedResult`. Raises
    RuntimeError, naming the failed worker (or scheduler, or server) with
    the end of its log, when a process fails or `timeout` seconds pass,
    after stopping them all: the others would otherwise wait forever.
    The workers train on GPUs when there are `num_gpus` >= `num_workers`
    (default: as many as MXNet sees), else all on the CPU; `use_gpus`
    False puts them on the CPU in any case (see `_device_options`).

    The KVStore cannot take a new worker in the place of one that died.
    With `max_restarts` > 0, a failed process (not a timeout) stops the
    whole job, which then starts again, scheduler and server included, on
    a new port, up to `max_restarts` times: the workers go on from their
    checkpoint (``--checkpoint``), if they keep one."""
    port = free_port() if port is None else check_port(port)
    out_dir = _prepare(out_dir, num_workers, timeout)
    devices = _device_options('mxnet', num_gpus, num_workers, use_gpus)
    max_restarts = _check_restarts(max_restarts)
    cmd = [sys.executable, '-m', 'd2lpar.kvstore_train', '--out', out_dir,
           *devices, *map(str, script_args)]
    deadline = time.monotonic() + timeout
    for restart in range(max_restarts + 1):
        try:
            _run_kvstore(cmd, num_workers, num_servers, bigarray_bound,
                         out_dir, port, deadline, timeout, restart)
            break
        except _Failed as e:
            if restart == max_restarts:
                raise RuntimeError(*e.args) from None
            print(_('{what}: restarting the whole job from its checkpoint '
                    '({restart} of {max_restarts}).').format(
                what=e.what, restart=restart + 1,
                max_restarts=max_restarts), flush=True)
            port = free_port()  # the old one may not be free again yet
    return _collect('mxnet', out_dir, 'worker', num_workers, num_servers)


class _Failed(RuntimeError):
    """A process of an MXNet job failed (`what` says which): the job may
    start again."""

    def __init__(self, message, what):
        super().__init__(message)
        self.what = what


def _check_restarts(max_restarts):
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(error_message(
            'max_restarts must be an int >= 0, got {max_restarts!r}.',
            max_restarts=max_restarts))
    return max_restarts


def _run_kvstore(cmd, num_workers, num_servers, bigarray_bound, out_dir,
                 port, deadline, timeout, restart):
    """One attempt of `launch_kvstore`: start a scheduler, the servers
    and the workers, wait for the workers, stop the others."""
    dmlc = {'DMLC_PS_ROOT_URI': HOST, 'DMLC_PS_ROOT_PORT': str(port),
            'DMLC_NUM_SERVER': str(num_servers),
            'DMLC_NUM_WORKER': str(num_workers), 'DMLC_NODE_HOST': HOST,
            'D2LPAR_RESTART_COUNT': str(restart)}
    if bigarray_bound is not None:
        dmlc['MXNET_KVSTORE_BIGARRAY_BOUND'] = str(bigarray_bound)
    with Processes(out_dir) as run:
        helpers = {('scheduler', 'scheduler'): run.start(
            'scheduler', cmd, _env({**dmlc, 'DMLC_ROLE': 'scheduler'}))}
        for i in range(num_servers):  # server<i>.json says what i holds
            name = 'server' if num_servers == 1 else f'server-{i}'
            helpers['server', name] = run.start(name, cmd, _env(
                {**dmlc, 'DMLC_ROLE': 'server', 'D2LPAR_SERVER': str(i)}))
        workers = {f'worker-process-{i}': run.start(
            f'worker-process-{i}', cmd,
            _env({**dmlc, 'DMLC_ROLE': 'worker', 'D2LPAR_LOCAL_RANK': str(i),
                  'D2LPAR_LOCAL_WORKERS': str(num_workers)}))
            for i in range(num_workers)}
        while True:
            for name, p in workers.items():
                if p.poll():  # exited, and not with 0
                    rank = _worker_rank(run, name)
                    who = (Message('worker rank {rank}', rank=rank)
                           if rank is not None else
                           Message('{name} (rank not known yet)', name=name))
                    raise _Failed(error_message(
                        'MXNet training with {n} workers failed: {who} '
                        'exited with code {code}. Stopped all its processes '
                        '(scheduler and server too). End of {log}:',
                        n=num_workers, who=who, code=p.returncode,
                        log=run.logs[name]) + '\n' + run.tail(name),
                        Message('{who} exited with {status}', who=who,
                                status=_exit_status(p)))
            for (role, name), p in helpers.items():
                if p.poll():  # exited, and not with 0
                    raise _Failed(error_message(
                        'MXNet training with {n} workers failed: the {role} '
                        'exited with {status} before the workers were done. '
                        'Stopped all its processes (the workers would wait '
                        'for it forever); see its log, then run the '
                        'training again. End of {log}:', n=num_workers,
                        role=Message(ROLES[role]), status=_exit_status(p),
                        log=run.logs[name]) + '\n' + run.tail(name),
                        Message('the {role} exited with {status}',
                                role=Message(ROLES[role]),
                                status=_exit_status(p)))
            if all(p.poll() == 0 for p in workers.values()):
                break
            if time.monotonic() > deadline:
                waiting = [n for n, p in workers.items() if p.poll() is None]
                raise RuntimeError(error_message(
                    'MXNet training with {n} workers did not finish within '
                    '{timeout} s (still running: {waiting}): stopped all '
                    'its processes. End of {log}:', n=num_workers,
                    timeout=timeout, waiting=', '.join(waiting),
                    log=run.logs[waiting[0]]) + '\n' + run.tail(waiting[0]))
            time.sleep(0.2)
        # Once the workers are done, the scheduler and server exit by
        # themselves; the with block stops them if they linger.
        for p in helpers.values():
            try:
                p.wait(min(10, max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass


# --------------------------------------------------------------------------
# What the lessons call
# --------------------------------------------------------------------------
def train(framework, num_workers, batch_size=256, lr=0.2, num_epochs=2,
          num_train=None, num_test=None, port=None, timeout=300,
          crash_at_step=None, out_dir=None, use_gpus=None, sharded=False,
          optimizer='sgd', pipelined=False, checkpoint=False,
          fail_at_step=None, max_restarts=0, amp=False, accumulate=1):
    """Train LeNet with `num_workers` processes of `framework` ('torch':
    DDP under torchrun; 'mxnet': the dist_sync KVStore) on 127.0.0.1,
    print and return the `DistributedResult`. Results and logs go to
    `out_dir`, by default a new temporary folder. `crash_at_step` makes
    the last process fail at that step, to see how a failure ends.
    `use_gpus`: None, GPUs when each process can have one of its own,
    else the CPU; False, the CPU; True, GPUs (a ValueError when there are
    fewer than `num_workers`). Runs to be compared should use the same
    kind of device: results of GPU kernels differ from the CPU's by more
    than rounding (TF32 convolutions, other algorithms). `sharded`:
    PyTorch shards the model with FSDP; MXNet runs as many servers as
    workers, each updating its part of the parameters with its part of
    the optimizer state (arrays of more than 10000 numbers cut among the
    servers). `optimizer`: 'sgd' or 'adam'. `pipelined` (PyTorch, two
    processes): the pipeline MLP of lesson 5 in two GPipe stages.

    `checkpoint` True saves a checkpoint after every epoch in
    OUT_DIR/checkpoint, and resumes from it; `fail_at_step` makes the last
    process kill itself (SIGKILL) at that step, once; `max_restarts`
    starts the processes again after a failure (PyTorch: torchrun's
    ``--max-restarts``; MXNet: the whole job). `amp` True trains in mixed
    precision (``--amp``). `accumulate`: micro-batches per step, gradients
    sent once per step."""
    launch = {'torch': launch_torch, 'mxnet': launch_kvstore}.get(framework)
    if launch is None:
        raise ValueError(error_message(
            "framework is 'torch' or 'mxnet', got {framework!r}.",
            framework=framework))
    if not isinstance(batch_size, int) or batch_size % max(num_workers, 1):
        raise ValueError(error_message(
            'The global batch of {batch_size!s} cannot be cut into {n!s} '
            'equal shards: pass a multiple of {n!s}.',
            batch_size=batch_size, n=num_workers))
    if optimizer not in ('sgd', 'adam'):
        raise ValueError(error_message(
            "optimizer is 'sgd' or 'adam', got {optimizer!r}.",
            optimizer=optimizer))
    if pipelined and framework != 'torch':
        raise NotImplementedError(error_message(
            'MXNet has no pipeline tool: see the from-scratch GPipe of '
            'lesson 5 (d2l.gpipe_step).'))
    if pipelined and (sharded or num_workers != 2):
        raise ValueError(error_message(
            'pipelined=True cuts the model into 2 stages: pass num_workers=2 '
            'and no sharded.'))
    if out_dir is None:
        out_dir = tempfile.mkdtemp(prefix=f'd2lpar-{framework}-'
                                          f'{num_workers}-')
    args = ['--batch-size', batch_size, '--lr', lr, '--epochs', num_epochs,
            '--optimizer', optimizer]
    servers = {}
    if sharded and framework == 'torch':
        args.append('--fsdp')
    elif sharded:  # a server per worker, each with its part of every array
        servers = dict(num_servers=num_workers, bigarray_bound=10000)
    if pipelined:
        args.append('--pipeline')
    if accumulate != 1:
        args += ['--accumulate', accumulate]
    if num_train is not None:
        args += ['--num-train', num_train]
    if num_test is not None:
        args += ['--num-test', num_test]
    if crash_at_step is not None:
        args += ['--crash-at-step', crash_at_step,
                 '--crash-rank', num_workers - 1]
    if checkpoint:
        args += ['--checkpoint', os.path.join(out_dir, 'checkpoint')]
    if fail_at_step is not None:
        args += ['--fail-at-step', fail_at_step]
    if amp:
        args.append('--amp')
    result = launch(num_workers, out_dir, args, port=port, timeout=timeout,
                    use_gpus=use_gpus, max_restarts=max_restarts,
                    **servers)
    print(result)
    return result


def command_for_machines(framework, hosts, workers_per_host=1, port=29500,
                         out_dir='OUT', script_args=()):
    """The command lines that train on the machines `hosts` (names or
    addresses; the first one coordinates), `workers_per_host` processes
    on each, as one string: a line per command, ``[host]$ command``."""
    if isinstance(hosts, str) or not hosts:
        raise ValueError(error_message(
            'hosts is a list of machine names, got {hosts!r}.', hosts=hosts))
    n, g, first = len(hosts), workers_per_host, hosts[0]
    script = shlex.join(['--out', str(out_dir), *map(str, script_args)])
    lines = []
    if framework == 'torch':
        for host in hosts:  # the same command everywhere
            lines.append(
                f'[{host}]$ torchrun --nnodes {n} --nproc-per-node {g} '
                f'--rdzv-backend c10d --rdzv-endpoint {first}:{port} '
                f'-m d2lpar.ddp_train {script}')
    elif framework == 'mxnet':
        env = (f'DMLC_PS_ROOT_URI={first} DMLC_PS_ROOT_PORT={port} '
               f'DMLC_NUM_SERVER={n} DMLC_NUM_WORKER={n * g}')
        run = f'python -m d2lpar.kvstore_train {script}'
        lines.append(f'[{first}]$ DMLC_ROLE=scheduler {env} {run} &')
        for host in hosts:
            lines.append(f'[{host}]$ DMLC_ROLE=server {env} {run} &')
            lines += [f'[{host}]$ DMLC_ROLE=worker D2LPAR_LOCAL_RANK={i} '
                      f'D2LPAR_LOCAL_WORKERS={g} {env} {run} &'
                      for i in range(g)]  # worker i takes GPU i
    else:
        raise ValueError(error_message(
            "framework is 'torch' or 'mxnet', got {framework!r}.",
            framework=framework))
    return '\n'.join(lines)


def _as_list(results):
    return [results] if isinstance(results, DistributedResult) \
        else list(results)


def _rows(results):
    for r in _as_list(results):
        label = (_('{framework} x{n}: rank {rank}') if r.framework == 'torch'
                 else _('{framework} x{n}: worker {rank}'))
        for p in r.processes:
            other = max(0.0, p['seconds_total'] - p['seconds_compute']
                        - p['seconds_communication'])
            yield (label.format(framework=r.framework, n=r.num_workers,
                                rank=p['rank']), p, other)


# The columns of print_processes: heading, width (at least), format
_COLUMNS = [(N_('process'), 22, None), (N_('steps'), 6, 'd'),
            (N_('examples'), 9, 'd'), (N_('compute s'), 11, '.3f'),
            (N_('comm. s'), 9, '.3f'), (N_('total s'), 9, '.3f'),
            (N_('comm. %'), 9, '.0f')]


def print_processes(results):
    """A table of what each process of one or more runs measured."""
    rows = list(_rows(results))
    # A column is as wide as its heading (in the lesson's language) and,
    # for the first, its labels need
    heads = [_(name) for name, width, spec in _COLUMNS]
    widths = [max(width, display_width(head) + 1)
              for head, (name, width, spec) in zip(heads, _COLUMNS)]
    widths[0] = max([widths[0]] + [display_width(label) + 1
                                   for label, p, other in rows])
    head = pad(heads[0], widths[0]) + ''.join(
        pad(h, w, '>') for h, w in zip(heads[1:], widths[1:]))
    print(head)
    print('-' * display_width(head))
    for label, p, other in rows:
        share = 100 * p['seconds_communication'] / p['seconds_total']
        values = [p['steps'], p['examples'], p['seconds_compute'],
                  p['seconds_communication'], p['seconds_total']]
        cells = [number(v, spec) for v, (name, width, spec) in
                 zip(values, _COLUMNS[1:])] + [number(share, '.0f') + '%']
        print(pad(label, widths[0]) + ''.join(
            pad(c, w, '>') for c, w in zip(cells, widths[1:])))


def plot_processes(results, title=None, ax=None):
    """Stacked bars, one per process: compute, communication, and the
    rest of the training loop's time (data, updates, waiting)."""
    import matplotlib.pyplot as plt
    fonts.use_cjk_font()  # Chinese text, no missing glyph
    rows = list(_rows(results))[::-1]
    if ax is None:
        ax = plt.subplots(figsize=(6, 0.4 * len(rows) + 1.0))[1]
    labels = [label for label, _p, _other in rows]
    left = [0.0] * len(rows)
    for key, kind, color in (
            ('seconds_compute', 'compute', _common.KIND_COLORS['compute']),
            ('seconds_communication', 'communication',
             _common.KIND_COLORS['copy']),
            (None, 'other', _common.KIND_COLORS['other'])):
        widths = [other if key is None else p[key]
                  for _label, p, other in rows]
        ax.barh(labels, widths, left=left, color=color,
                label=_(_common.KIND_LABELS[kind]))
        left = [a + w for a, w in zip(left, widths)]
    ax.set_xlabel(_('seconds'))
    ax.legend(fontsize=8, frameon=False, loc='lower left',
              bbox_to_anchor=(1.0, 0.0))
    if title:
        ax.set_title(title, fontsize=10)
    plt.tight_layout()
    plt.show()
    return ax
