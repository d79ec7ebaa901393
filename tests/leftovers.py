"""What a test run leaves running. The run marks its environment
(`mark_this_run`); every process it starts inherits the mark (the pytest
workers, notebook kernels, torchrun, the training scripts, and the
children those leave behind, even once they belong to no parent), so that
the end of the run can find them all by it (`left_running`)."""
import os
import uuid

import psutil

from d2lpar.distributed import launch

MARK = 'D2LPAR_TEST_RUN'


def mark_this_run():
    """A new mark, set in the environment of this process, so in that of
    every process it starts. New also in a run that a test starts: a run
    never looks at the processes of another."""
    os.environ[MARK] = uuid.uuid4().hex
    return os.environ[MARK]


def left_running(mark, but=()):
    """The live processes that carry `mark`, save those whose pid is in
    `but` (found as d2lpar's launcher finds the processes of a run)."""
    found = []
    for pid in launch._marked(mark, MARK):
        try:
            process = psutil.Process(pid)
            if pid not in but and process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
        except psutil.Error:  # ended meanwhile
            pass
    return found


def describe(process):
    try:
        return f'pid {process.pid}: ' + ' '.join(process.cmdline())[:200]
    except psutil.Error:
        return f'pid {process.pid}'


def kill(processes, timeout=10):
    for p in processes:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(processes, timeout=timeout)
