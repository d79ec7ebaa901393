"""A multi-process training run on this machine, framework-free: its
folder (no stale results from a former run), the devices of its processes
(`device_options`: GPUs when each process can have one of its own), and
its result (`DistributedResult`, read from what the processes wrote).
Used by the launchers ddp_launch.py and kvstore_launch.py.
"""
import dataclasses
import os
import re

import numpy as np

from d2lpar import data
from d2lpar.devices import choose_gpu
from d2lpar.i18n import _, error_message
from d2lpar.training import TrainResult

_OUTPUTS = re.compile(r'^(rank\d+\.json|worker\d+\.json|result\.json|'
                      r'params_step1\.npz|torchrun\.log|scheduler\.log|'
                      r'server(-\d+)?\.log|server\d+\.json|'
                      r'worker-process-\d+\.log|failed-at-step-\d+)$')


@dataclasses.dataclass(kw_only=True)
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


def collect(framework, out_dir, prefix, num_workers, num_servers=0):
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
    if summary.get('data'):  # the run's processes loaded the data, so
        # d2l.data_source() names what they trained on
        data.set_source(summary['data'])
    seconds = max(p['seconds_total'] for p in processes)
    epochs = summary['epochs']
    return DistributedResult(
        test_acc=summary['test_acc'], sec_per_epoch=seconds / epochs,
        devices=[f'{p["device"]} (rank {p["rank"]})' for p in processes],
        num_epochs=epochs,
        num_examples=summary['examples'] // epochs,
        test_accs=[summary['test_acc']],
        framework=framework, backend=summary['backend'], processes=processes,
        out_dir=out_dir, summary=summary, servers=servers)


def prepare(out_dir, num_workers, timeout):
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


def device_options(framework, num_gpus, num_workers, use_gpus=None):
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
            from d2lpar.mxnet_reach import require_mxnet
            num_gpus = require_mxnet().context.num_gpus()
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


def check_restarts(max_restarts):
    if not isinstance(max_restarts, int) or max_restarts < 0:
        raise ValueError(error_message(
            'max_restarts must be an int >= 0, got {max_restarts!r}.',
            max_restarts=max_restarts))
    return max_restarts
