"""Start, watch and stop multi-process training on this machine, and write
the command lines that run it on several machines.

Framework-free: the training itself runs in other processes, the PyTorch
script ``d2lpar.ddp_train`` under ``torchrun`` and the MXNet script
``d2lpar.kvstore_train`` as scheduler, server and workers, all on the
loopback interface (127.0.0.1). This module imports a framework only to
count the GPUs. Every process computes with one thread (OMP_NUM_THREADS=1,
unless the environment says otherwise), so k processes stand for k
one-core machines. With fewer GPUs than processes, all processes train on
the CPU (see `devices.choose_gpu`), and the launcher says so.

A failed or stuck run never leaves processes behind (d2lpar.launch): each
child starts in a session of its own, with a mark in its environment
that its own children inherit; when a run fails, times out, or Python
exits, every marked process gets SIGTERM, then SIGKILL. The tables and
plots of a run's processes are in d2lpar.plots.
"""
import dataclasses
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

from d2lpar.devices import choose_gpu
from d2lpar.i18n import Bilingual, Message, N_, _, error_message
from d2lpar.launch import (  # noqa: F401 (HOST, Processes: for the tests)
    HOST, Processes, check_port, free_port, python_env, wait_for)
from d2lpar.training import TrainResult

_OUTPUTS = re.compile(r'^(rank\d+\.json|worker\d+\.json|result\.json|'
                      r'params_step1\.npz|torchrun\.log|scheduler\.log|'
                      r'server(-\d+)?\.log|server\d+\.json|'
                      r'worker-process-\d+\.log)$')




# --------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------
@dataclasses.dataclass
class DistributedResult(TrainResult):
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
    GPUs when each process can have one of its own (`choose_gpu`);
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
    gpu, notice = choose_gpu(num_gpus, 0, num_workers)
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
                 timeout=300, num_gpus=None, use_gpus=None):
    """Run ``d2lpar.ddp_train`` in `num_workers` processes under torchrun on
    127.0.0.1 (rendezvous at `port`, default: a free one) and return a
    `DistributedResult`. Raises RuntimeError, with the failing rank and
    the end of the log, when a process fails or `timeout` seconds pass;
    no process is left behind either way. The processes train on GPUs
    when there are `num_gpus` >= `num_workers` (default: as many as
    PyTorch sees), else all on the CPU; `use_gpus` False puts them on the
    CPU in any case (see `_device_options`)."""
    port = free_port() if port is None else check_port(port)
    out_dir = _prepare(out_dir, num_workers, timeout)
    devices = _device_options('torch', num_gpus, num_workers, use_gpus)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1',
           '--nproc-per-node', str(num_workers), '--rdzv-backend', 'c10d',
           '--rdzv-endpoint', f'{HOST}:{port}', '--max-restarts', '0',
           '-m', 'd2lpar.ddp_train', '--out', out_dir, *devices,
           *map(str, script_args)]
    with Processes(out_dir) as run:
        proc = run.start('torchrun', cmd, python_env())
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
                   bigarray_bound=None):
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
    False puts them on the CPU in any case (see `_device_options`)."""
    port = free_port() if port is None else check_port(port)
    out_dir = _prepare(out_dir, num_workers, timeout)
    devices = _device_options('mxnet', num_gpus, num_workers, use_gpus)
    cmd = [sys.executable, '-m', 'd2lpar.kvstore_train', '--out', out_dir,
           *devices, *map(str, script_args)]
    dmlc = {'DMLC_PS_ROOT_URI': HOST, 'DMLC_PS_ROOT_PORT': str(port),
            'DMLC_NUM_SERVER': str(num_servers),
            'DMLC_NUM_WORKER': str(num_workers), 'DMLC_NODE_HOST': HOST}
    if bigarray_bound is not None:
        dmlc['MXNET_KVSTORE_BIGARRAY_BOUND'] = str(bigarray_bound)
    deadline = time.monotonic() + timeout
    with Processes(out_dir) as run:
        helpers = {'scheduler': run.start('scheduler', cmd, python_env(
            {**dmlc, 'DMLC_ROLE': 'scheduler'}))}
        roles = {'scheduler': 'scheduler'}  # process name -> role
        for i in range(num_servers):  # server<i>.json says what i holds
            name = 'server' if num_servers == 1 else f'server-{i}'
            roles[name] = 'server'
            helpers[name] = run.start(name, cmd, python_env(
                {**dmlc, 'DMLC_ROLE': 'server', 'D2LPAR_SERVER': str(i)}))
        workers = {f'worker-process-{i}': run.start(
            f'worker-process-{i}', cmd,
            python_env({**dmlc, 'DMLC_ROLE': 'worker',
                        'D2LPAR_LOCAL_RANK': str(i),
                        'D2LPAR_LOCAL_WORKERS': str(num_workers)}))
            for i in range(num_workers)}
        try:
            failed = wait_for({**workers, **helpers}, workers,
                              deadline - time.monotonic())
        except subprocess.TimeoutExpired:
            waiting = [n for n, p in workers.items() if p.poll() is None]
            raise RuntimeError(error_message(
                'MXNet training with {n} workers did not finish within '
                '{timeout} s (still running: {waiting}): stopped all '
                'its processes. End of {log}:', n=num_workers,
                timeout=timeout, waiting=', '.join(waiting),
                log=run.logs[waiting[0]]) + '\n' + run.tail(waiting[0])) \
                from None
        if failed in workers:
            rank = _worker_rank(run, failed)
            who = (Message('worker rank {rank}', rank=rank)
                   if rank is not None else
                   Message('{name} (rank not known yet)', name=failed))
            raise RuntimeError(error_message(
                'MXNet training with {n} workers failed: {who} '
                'exited with code {code}. Stopped all its processes '
                '(scheduler and server too). End of {log}:',
                n=num_workers, who=who, code=workers[failed].returncode,
                log=run.logs[failed]) + '\n' + run.tail(failed))
        if failed in helpers:
            raise RuntimeError(error_message(
                'MXNet training with {n} workers failed: the {role} '
                'exited with {status} before the workers were done. '
                'Stopped all its processes (the workers would wait '
                'for it forever); see its log, then run the '
                'training again. End of {log}:', n=num_workers,
                role=Message(ROLES[roles[failed]]),
                status=_exit_status(helpers[failed]),
                log=run.logs[failed]) + '\n' + run.tail(failed))
        # Once the workers are done, the scheduler and server exit by
        # themselves; the with block stops them if they linger.
        for p in helpers.values():
            try:
                p.wait(min(10, max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
    return _collect('mxnet', out_dir, 'worker', num_workers, num_servers)


# --------------------------------------------------------------------------
# What the lessons call
# --------------------------------------------------------------------------
def train(framework, num_workers, batch_size=256, lr=0.2, num_epochs=2,
          num_train=None, num_test=None, port=None, timeout=300,
          crash_at_step=None, out_dir=None, use_gpus=None, sharded=False,
          optimizer='sgd', pipelined=False):
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
    processes): the pipeline MLP of lesson 5 in two GPipe stages."""
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
    if num_train is not None:
        args += ['--num-train', num_train]
    if num_test is not None:
        args += ['--num-test', num_test]
    if crash_at_step is not None:
        args += ['--crash-at-step', crash_at_step,
                 '--crash-rank', num_workers - 1]
    result = launch(num_workers, out_dir, args, port=port, timeout=timeout,
                    use_gpus=use_gpus, **servers)
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
