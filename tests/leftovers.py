"""What a test run leaves running. The run marks its environment
(`mark_this_run`); every process it starts inherits the mark (the pytest
workers, notebook kernels, torchrun, the training scripts, and the
children those leave behind, even once they belong to no parent), so that
the end of the run can find them all by it (`left_running`)."""
import os
import uuid

import psutil

MARK = 'D2LPAR_TEST_RUN'


def mark_this_run():
    """A new mark, set in the environment of this process, so in that of
    every process it starts. New also in a run that a test starts: a run
    never looks at the processes of another."""
    os.environ[MARK] = uuid.uuid4().hex
    return os.environ[MARK]


def left_running(mark, but=()):
    """The processes that carry `mark`, save those whose pid is in `but`
    and those that have ended (zombies included)."""
    found = []
    for p in psutil.process_iter(['status']):
        if p.pid in but or p.info['status'] == psutil.STATUS_ZOMBIE:
            continue
        try:
            if p.environ().get(MARK) == mark:
                found.append(p)
        except psutil.Error:  # ended meanwhile, or not ours to read
            continue
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
