"""Multi-process training on this machine (lesson 4), and the command
lines that run it on several machines: the package of everything that
runs in several processes.

Framework-free: the training itself runs in other processes, the PyTorch
script ``d2lpar.distributed.ddp_train`` under ``torchrun`` (ddp_launch)
and the MXNet script ``d2lpar.distributed.kvstore_train`` as scheduler,
servers and workers (kvstore_launch), all on the loopback interface
(127.0.0.1). Only counting the GPUs imports a framework. Every process
computes with one thread (OMP_NUM_THREADS=1, unless the environment says
otherwise), so k processes stand for k one-core machines. With fewer GPUs
than processes, all processes train on the CPU (see
`devices.choose_gpu`), and the launcher says so.

A failed or stuck run never leaves processes behind (launch): each child
starts in a session of its own, with a mark in its environment that its
own children inherit; when a run fails, times out, or Python exits, every
marked process gets SIGTERM, then SIGKILL. The tables and plots of a
run's processes are in d2lpar.plots, its folder and result in runs.

Also here: the practices of the two scripts (ddp_practices,
kvstore_practices, kvstore_state, scripts), the failures on purpose
(faults), lesson 3's overlap script (ddp_overlap) and lesson 5's
(pipeline_train, tensor_parallel).
"""
import atexit
import os
import shlex
import shutil
import tempfile

from d2lpar.distributed.ddp_launch import launch_torch
from d2lpar.i18n import error_message
from d2lpar.distributed.kvstore_launch import launch_kvstore
from d2lpar.distributed.launch import HOST, Processes, check_port  # noqa: F401 (tests)
from d2lpar.distributed.runs import DistributedResult  # noqa: F401 (the backends)


# --------------------------------------------------------------------------
# What the lessons call
# --------------------------------------------------------------------------
def train(framework, num_workers, batch_size=256, lr=0.2, num_epochs=2,
          num_train=None, num_test=None, port=None, timeout=300,
          crash_at_step=None, out_dir=None, use_gpus=None, sharded=False,
          optimizer='sgd', pipelined=False, checkpoint=False,
          fail_at_step=None, max_restarts=0, amp=False, accumulate=1,
          naive_accumulate=False):
    """Train LeNet with `num_workers` processes of `framework` ('torch':
    DDP under torchrun; 'mxnet': the dist_sync KVStore) on 127.0.0.1,
    print and return the `DistributedResult`. Results and logs go to
    `out_dir`, by default a new temporary folder, removed when this
    program (the notebook's kernel) ends. `crash_at_step` makes
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
    processes): the pipeline MLP of lesson 5 in two stages, with the GPipe
    schedule (True or 'gpipe') or the 1F1B schedule ('1f1b').

    `checkpoint` True saves a checkpoint after every epoch in
    OUT_DIR/checkpoint, and resumes from it; `fail_at_step` makes the last
    process kill itself (SIGKILL) at that step, once; `max_restarts`
    starts the processes again after a failure (PyTorch: torchrun's
    ``--max-restarts``; MXNet: the whole job). `amp` True trains in mixed
    precision (``--amp``). `accumulate`: micro-batches per step, gradients
    sent once per step; with `naive_accumulate` True, sent after every
    micro-batch, as a naive loop does (PyTorch: without ``no_sync``, the
    same step; MXNet: a ``trainer.step``, hence an update, per
    micro-batch)."""
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
    if naive_accumulate and accumulate < 2:
        raise ValueError(error_message(
            'naive_accumulate=True needs accumulate=2 or more: with one '
            'micro-batch per step nothing can be sent early.'))
    if pipelined and framework != 'torch':
        raise NotImplementedError(error_message(
            'MXNet has no pipeline tool: see the from-scratch GPipe of '
            'lesson 5 (d2l.gpipe_step).'))
    if pipelined not in (False, True, 'gpipe', '1f1b'):
        raise ValueError(error_message(
            "pipelined is False, True, 'gpipe' or '1f1b', got "
            "{pipelined!r}.", pipelined=pipelined))
    if pipelined and (sharded or num_workers != 2):
        raise ValueError(error_message(
            'pipelined=True cuts the model into 2 stages: pass num_workers=2 '
            'and no sharded.'))
    if out_dir is None:  # removed when the kernel or program ends
        out_dir = tempfile.mkdtemp(prefix=f'd2lpar-{framework}-'
                                          f'{num_workers}-')
        atexit.register(shutil.rmtree, out_dir, ignore_errors=True)
    args = ['--batch-size', batch_size, '--lr', lr, '--epochs', num_epochs,
            '--optimizer', optimizer]
    servers = {}
    if sharded and framework == 'torch':
        args.append('--fsdp')
    elif sharded:  # a server per worker, each with its part of every array
        servers = dict(num_servers=num_workers, bigarray_bound=10000)
    if pipelined:
        schedule = '1f1b' if pipelined == '1f1b' else 'gpipe'
        args += ['--pipeline', '--schedule', schedule]
    if accumulate != 1:
        args += ['--accumulate', accumulate]
    if naive_accumulate:
        args.append('--naive-accumulate')
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
                         out_dir='OUT', script_args=(), max_restarts=0):
    """The command lines that train on the machines `hosts` (names or
    addresses; the first one coordinates), `workers_per_host` processes
    on each, as one string: a line per command, ``[host]$ command``.
    `max_restarts` (PyTorch): how many times torchrun starts the processes
    again after a failure (with ``--checkpoint`` on a folder that every
    machine shares, they go on from the last epoch)."""
    if isinstance(hosts, str) or not hosts:
        raise ValueError(error_message(
            'hosts is a list of machine names, got {hosts!r}.', hosts=hosts))
    n, g, first = len(hosts), workers_per_host, hosts[0]
    script = shlex.join(['--out', str(out_dir), *map(str, script_args)])
    lines = []
    if framework == 'torch':
        for i, host in enumerate(hosts):
            # Said, not guessed from the machine's hostname (which Debian
            # and Ubuntu map to 127.0.1.1): the first machine serves the
            # rendezvous, and each machine tells the others its address
            restarts = f'--max-restarts {max_restarts} ' * bool(max_restarts)
            lines.append(
                f'[{host}]$ torchrun --nnodes {n} --nproc-per-node {g} '
                f'{restarts}'
                f'--rdzv-backend c10d --rdzv-endpoint {first}:{port} '
                f'--rdzv-conf is_host={int(i == 0)} --local-addr {host} '
                f'-m d2lpar.distributed.ddp_train {script}')
    elif framework == 'mxnet':
        if max_restarts:
            raise ValueError(error_message(
                'MXNet restarts a whole job, not its processes: pass no '
                'max_restarts, and start the commands again after a '
                'failure (with --checkpoint, they go on from it).'))
        env = (f'DMLC_PS_ROOT_URI={first} DMLC_PS_ROOT_PORT={port} '
               f'DMLC_NUM_SERVER={n} DMLC_NUM_WORKER={n * g}')
        run = f'python -m d2lpar.distributed.kvstore_train {script}'
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
