"""Lesson 4's MXNet launcher: ``d2lpar.distributed.kvstore_train`` with the
``dist_sync`` KVStore on 127.0.0.1, as a scheduler, servers and workers;
when one of them fails the others would wait forever, so all are stopped
(launch.py), and the whole job may start again from its checkpoint.
"""
import re
import signal
import subprocess
import sys
import time

from d2lpar.i18n import Message, N_, _, error_message
from d2lpar.distributed.launch import (
    HOST, Processes, check_port, free_port, python_env, wait_for)
from d2lpar.distributed.runs import (
    check_restarts, collect, device_options, prepare)

def worker_rank(run, name):
    # kvstore_train writes this line in English, whatever the language
    try:
        with open(run.logs[name], errors='replace') as f:
            found = re.search(r'd2lpar: worker rank (\d+) of', f.read())
    except OSError:
        return None
    return int(found[1]) if found else None


def exit_status(proc):
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
    """Run ``d2lpar.distributed.kvstore_train`` with the ``dist_sync``
    KVStore on 127.0.0.1: a scheduler (at `port`, default: a free one),
    `num_servers` servers and `num_workers` workers (arrays of more than
    `bigarray_bound` elements are cut into a part per server; default:
    MXNet's, a million). Returns a `DistributedResult`. Raises
    RuntimeError, naming the failed worker (or scheduler, or server) with
    the end of its log, when a process fails or `timeout` seconds pass,
    after stopping them all: the others would otherwise wait forever.
    The workers train on GPUs when there are `num_gpus` >= `num_workers`
    (default: as many as MXNet sees), else all on the CPU; `use_gpus`
    False puts them on the CPU in any case (see `runs.device_options`).

    The KVStore cannot take a new worker in the place of one that died.
    With `max_restarts` > 0, a failed process (not a timeout) stops the
    whole job, which then starts again, scheduler and server included, on
    a new port, up to `max_restarts` times: the workers go on from their
    checkpoint (``--checkpoint``), if they keep one."""
    port = free_port() if port is None else check_port(port)
    out_dir = prepare(out_dir, num_workers, timeout)
    devices = device_options('mxnet', num_gpus, num_workers, use_gpus)
    max_restarts = check_restarts(max_restarts)
    cmd = [sys.executable, '-m', 'd2lpar.distributed.kvstore_train',
           '--out', out_dir, *devices, *map(str, script_args)]
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
    return collect('mxnet', out_dir, 'worker', num_workers, num_servers)


class _Failed(RuntimeError):
    """A process of an MXNet job failed (`what` says which): the job may
    start again."""

    def __init__(self, message, what):
        super().__init__(message)
        self.what = what


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
            p, rank = workers[failed], worker_rank(run, failed)
            who = (Message('worker rank {rank}', rank=rank)
                   if rank is not None else
                   Message('{name} (rank not known yet)', name=failed))
            raise _Failed(error_message(
                'MXNet training with {n} workers failed: {who} '
                'exited with code {code}. Stopped all its processes '
                '(scheduler and server too). End of {log}:',
                n=num_workers, who=who, code=p.returncode,
                log=run.logs[failed]) + '\n' + run.tail(failed),
                Message('{who} exited with {status}', who=who,
                        status=exit_status(p)))
        if failed in helpers:
            p, role = helpers[failed], Message(ROLES[roles[failed]])
            raise _Failed(error_message(
                'MXNet training with {n} workers failed: the {role} '
                'exited with {status} before the workers were done. '
                'Stopped all its processes (the workers would wait '
                'for it forever); see its log, then run the '
                'training again. End of {log}:', n=num_workers,
                role=role, status=exit_status(p),
                log=run.logs[failed]) + '\n' + run.tail(failed),
                Message('the {role} exited with {status}', role=role,
                        status=exit_status(p)))
        # Once the workers are done, the scheduler and server exit by
        # themselves; the with block stops them if they linger.
        for p in helpers.values():
            try:
                p.wait(min(10, max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
