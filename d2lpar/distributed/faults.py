"""Failures on purpose, for lesson 4 and the tests: what the training
scripts do when asked to fail, kept out of their training loops.

- ``--crash-at-step N --crash-rank R``: process R raises an error at step
  N (lesson 4's ``crash_at_step``: a crash ends the run cleanly);
- ``--fail-at-step N``: the last process kills itself with SIGKILL at
  step N, the first time only (lesson 4's ``fail_at_step``: a restarted
  run resumes from its checkpoint);
- ``--leave-a-child``: every process first starts a process that
  outlives it (the tests check that the launcher stops those too);
- ``D2LPAR_TEST_ABORT_AT_EXIT=R`` in the environment: rank R aborts after
  writing its results (the tests check that such a run counts as done).

The scripts call `add_arguments` on their parser, `at_step` at every
step and `at_exit` as they leave.
"""
import argparse
import os

from d2lpar.i18n import _, error_message


def add_arguments(p):
    """The options of the failures on purpose."""
    p.add_argument('--crash-at-step', type=int, default=None,
                   help=_('to test failure handling: --crash-rank fails '
                          'here'))
    p.add_argument('--crash-rank', type=int, default=0)
    p.add_argument('--fail-at-step', type=int, default=None,
                   help=_('to test restarts: the last process kills itself '
                          'at this step, the first time only'))
    # Only the tests use it (every process starts a process that outlives
    # it, to test the cleanup): it stays out of --help
    p.add_argument('--leave-a-child', action='store_true',
                   help=argparse.SUPPRESS)


def at_step(args, step, rank, world):
    """Fail at `step` of this process (`rank` of `world`) if asked to."""
    if args.leave_a_child and step == 1:
        leave_a_child(args.out, rank)
    if step == args.crash_at_step and rank == args.crash_rank:
        raise RuntimeError(error_message(
            'rank {rank} crashes at step {step}, as asked by '
            '--crash-at-step', rank=rank, step=step))
    if step == args.fail_at_step and rank == world - 1:
        fail_once(args.out, rank, step)


def at_exit(rank):
    """Abort instead of leaving, if the environment asks it of `rank`."""
    if os.environ.get('D2LPAR_TEST_ABORT_AT_EXIT') == str(rank):
        os.abort()


def fail_once(out, rank, step):
    """Kill this process with SIGKILL, as a crashed machine would end it,
    unless it did so before: the file OUT/failed-at-step-N remembers, so
    that the restarted run goes past step N."""
    import signal
    marker = os.path.join(out, f'failed-at-step-{step}')
    if os.path.exists(marker):
        return
    os.makedirs(out, exist_ok=True)
    with open(marker, 'w') as f:
        f.write(f'{os.getpid()}\n')
    print(_('rank {rank} kills itself at step {step} (--fail-at-step)')
          .format(rank=rank, step=step), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def leave_a_child(out, rank):
    """Start a process that sleeps for 10 minutes in a session of its own,
    where no signal to our process group reaches it, and say its pid on
    stdout. Its command line names `out`, so that a test can find it."""
    import subprocess
    import sys
    child = subprocess.Popen(
        [sys.executable, '-c', 'import time; time.sleep(600)', out],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True)
    # Not translated: the tests read this line
    print(f'd2lpar: rank {rank} left process {child.pid} behind', flush=True)
