"""Lesson 4's PyTorch launcher: ``d2lpar.distributed.ddp_train`` in k
processes under torchrun on 127.0.0.1, stopped with all its processes
when one fails or the time runs out (launch.py); torchrun's summary names
the failed rank.
"""
import os
import re
import subprocess
import sys

from d2lpar.i18n import Bilingual, Message, _, error_message
from d2lpar.distributed.launch import (
    HOST, Processes, check_port, python_env)
from d2lpar.distributed.runs import (
    check_restarts, collect, device_options, prepare)

def torch_failure(log):
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


def run_module(module, args, out_dir, num_processes, timeout, failed):
    """Run ``python -m <module> <args>`` in `num_processes` processes under
    torchrun on 127.0.0.1, its logs in `out_dir`, and wait up to `timeout`
    seconds. A run that fails, or is still running then, is stopped with
    all its processes and raises RuntimeError: the message `failed`
    (marked with N_, with the fields {n} and {code}), then the end of
    torchrun's log. A crash on the way out, once the run had written
    `out_dir`/result.json, is only reported: PyTorch's teardown crash
    ("terminate called without an active exception", SIGABRT) can hit a
    process after everything else is done."""
    # Port 0: torchrun's store binds a free port itself (see launch_torch)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1',
           '--nproc-per-node', str(num_processes), '--rdzv-backend', 'c10d',
           '--rdzv-endpoint', f'{HOST}:0', '-m', module, *args]
    with Processes(out_dir) as processes:
        proc = processes.start('torchrun', cmd, python_env())
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            code = 'timeout'
        done = os.path.exists(os.path.join(out_dir, 'result.json'))
        failure = torch_failure(processes.logs['torchrun'])
        if code != 0 and done and failure:
            print(_('d2lpar: rank {rank} crashed while shutting down, '
                    'after writing all its results ({error}); the run '
                    'itself is complete.').format(
                rank=failure[0], error=failure[2]), flush=True)
        elif code != 0:
            raise RuntimeError(
                error_message(failed, n=num_processes, code=code) + '\n'
                + processes.tail('torchrun', 40))


def _results_written(out_dir, num_workers):
    """Whether the run in `out_dir` wrote every result: result.json and
    each rank's rank<r>.json (prepare() removed those of former runs)."""
    names = ['result.json'] + [f'rank{r}.json' for r in range(num_workers)]
    return all(os.path.exists(os.path.join(out_dir, n)) for n in names)


def launch_torch(num_workers, out_dir, script_args=(), port=None,
                 timeout=300, num_gpus=None, use_gpus=None, max_restarts=0):
    """Run ``d2lpar.distributed.ddp_train`` in `num_workers` processes
    under torchrun on 127.0.0.1 (rendezvous at `port`, default: a free
    one that torchrun picks) and return a `DistributedResult`. Raises
    RuntimeError, with the failing rank and the end of the log, when a
    process fails or `timeout` seconds pass; no process is left behind
    either way. The processes train on GPUs when there are `num_gpus` >=
    `num_workers` (default: as many as PyTorch sees), else all on the CPU;
    `use_gpus` False puts them on the CPU in any case (see
    `runs.device_options`). When a process fails, torchrun stops the
    others and starts them all again, up to `max_restarts` times
    (``--max-restarts``), before it gives up."""
    # With no port asked for, torchrun's rendezvous store binds a free one
    # itself (port 0, as torchrun --standalone does): a port chosen here
    # could be taken by another program before torchrun binds it, and
    # torchrun would then wait for that program as if it were the store
    port = 0 if port is None else check_port(port)
    out_dir = prepare(out_dir, num_workers, timeout)
    devices = device_options('torch', num_gpus, num_workers, use_gpus)
    max_restarts = check_restarts(max_restarts)
    cmd = [sys.executable, '-m', 'torch.distributed.run', '--nnodes', '1',
           '--nproc-per-node', str(num_workers), '--rdzv-backend', 'c10d',
           '--rdzv-endpoint', f'{HOST}:{port}',
           '--max-restarts', str(max_restarts),
           '-m', 'd2lpar.distributed.ddp_train', '--out', out_dir, *devices,
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
        failure = torch_failure(run.logs['torchrun']) if code else None
        if code and failure and _results_written(out_dir, num_workers):
            # Every process wrote its results (its last step before it
            # leaves the process group), then one died on its way out: a
            # crash in PyTorch's teardown (SIGABRT, "terminate called
            # without an active exception", seen in lesson 5's FSDP runs
            # under load). The run is complete; say so, do not fail it
            print(_('d2lpar: rank {rank} crashed while shutting down, after '
                    'writing all its results ({error}); the run itself is '
                    'complete.').format(rank=failure[0], error=failure[2]),
                  flush=True)
        elif code:
            what = (Message('rank {rank} failed (exit code {code}): {error}',
                            rank=failure[0], code=failure[1],
                            error=failure[2]) if failure else
                    Message('torchrun exited with code {code}', code=code))
            raise RuntimeError(error_message(
                'PyTorch training with {n} processes failed: {what}. Stopped '
                'all its processes. End of {log}:', n=num_workers, what=what,
                log=run.logs['torchrun']) + '\n' + run.tail('torchrun'))
    return collect('torch', out_dir, 'rank', num_workers)
