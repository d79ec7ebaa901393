"""The processes of `train_concise` on several devices: one spawned per
device, their reports passed back through a mailbox of files, and none
left running whatever happens."""
import contextlib
import io
import os
import pickle
import signal
import tempfile
import time

import torch
from torch.multiprocessing.spawn import ProcessException

from d2lpar.distributed import launch as _launch
from d2lpar.i18n import _, error_message


def _quiet_worker(rank, worker, *args):
    """``worker(rank, *args)`` (the lesson's `ddp_worker`), with the data
    notices that the parent already printed kept out of the notebook."""
    with contextlib.redirect_stdout(io.StringIO()):
        worker(rank, *args)


def _check_importable(net):
    for m in net.modules():
        if type(m).__module__ == '__main__':
            raise ValueError(error_message(
                'The layer class {name} is defined in this notebook or '
                'script; the processes train_concise starts cannot import '
                'it. Move it into a .py file and import it, or build the '
                'network from torch.nn layers.', name=type(m).__name__))


class _Mailbox:
    """What `ddp_worker` calls `queue`: ``put(message)`` sends a message
    from a training process to the parent, which ``take()``s them in the
    order they were put (only rank 0 sends).

    Each message is pickled into a file of its own, written under a
    temporary name and renamed into place. A pipe would do in a happy
    run, but a process killed half-way through writing the trained
    parameters into one would leave the parent waiting for the rest of a
    message that never comes; a half-written file is simply never
    renamed, and the parent sees the process end and says so."""

    def __init__(self, folder):
        self.folder, self.sent, self.received = folder, 0, 0

    def put(self, message):
        path = os.path.join(self.folder, f'{self.sent:08d}.msg')
        with open(path + '.part', 'wb') as f:
            pickle.dump(message, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(path + '.part', path)
        self.sent += 1

    def take(self):
        """The messages that arrived since the last call, oldest first."""
        messages = []
        while True:
            path = os.path.join(self.folder, f'{self.received:08d}.msg')
            if not os.path.exists(path):
                return messages
            with open(path, 'rb') as f:
                messages.append(pickle.load(f))
            os.remove(path)
            self.received += 1


def _run_processes(worker, net, devices, settings, report, timeout=3600):
    """Run `worker` (the lesson's `ddp_worker`, a function of
    d2lpar.torch that the spawned processes import) in one spawned
    process per device, pass their reports on as they come, and load the
    parameters rank 0 trained into `net`. A failed process stops all of
    them, with its error; so does a run in which no epoch ends for
    `timeout` seconds."""
    _check_importable(net)
    net = net.cpu()
    with tempfile.TemporaryDirectory(prefix='d2lpar-') as folder:
        mailbox = _Mailbox(folder)
        procs = torch.multiprocessing.start_processes(
            _quiet_worker, nprocs=len(devices), join=False,
            start_method='spawn',
            args=(worker, len(devices), _launch.free_port(), net, devices,
                  settings, mailbox))
        state = _watch_processes(procs, mailbox, report, timeout)
    if state is None:
        raise RuntimeError(error_message(
            'The training processes ended without sending back the trained '
            'parameters.'))
    net.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})


def _watch_processes(procs, mailbox, report, timeout):
    """Pass the reports of `procs` on until all have ended, and return the
    trained state; stop every process on a failure or a stall, and in any
    case leave none running."""
    deadline, state = time.monotonic() + timeout, None
    try:
        while True:
            time.sleep(0.1)
            codes = [p.exitcode for p in procs.processes]
            state, epochs = _take(mailbox, report, state)
            if epochs:
                deadline = time.monotonic() + timeout
            failed = [i for i, code in enumerate(codes)
                      if code not in (None, 0)]
            if failed:
                state = _after_teardown_crash(failed[0], codes[failed[0]],
                                              procs, mailbox, report, state)
                if state is not None:
                    return state
                try:  # the error of the failed process, with its traceback
                    procs.join(timeout=1)
                    error = f'process {failed[0]} exit code {codes[failed[0]]}'
                except ProcessException as e:
                    error = str(e)
                raise RuntimeError(error_message(
                    'A training process failed, so train_concise stopped '
                    'all of them:') + f'\n{error}')
            if all(code == 0 for code in codes):
                procs.join()
                return _take(mailbox, report, state)[0]
            if time.monotonic() > deadline:
                raise RuntimeError(error_message(
                    'No epoch of train_concise ended within {timeout} s, so '
                    'it stopped the processes: are they stuck? Try fewer '
                    'examples or a thinner network.', timeout=timeout))
    finally:
        _launch.stop_spawned(procs.processes)


def _take(mailbox, report, state):
    """Pass the epochs that arrived on to `report`; (the trained state if
    it arrived, else `state`; how many epochs arrived)."""
    epochs = 0
    for kind, *payload in mailbox.take():
        if kind == 'epoch':
            report(*payload)
            epochs += 1
        else:
            state = payload[0]
    return state, epochs


def _after_teardown_crash(rank, code, procs, mailbox, report, state,
                         wait=30):
    """The trained state when process `rank` ended with `code` -SIGABRT,
    PyTorch's crash on the way out ("terminate called without an active
    exception"), once the run was done: rank 0 sends the state when every
    step of every process is over, so its arrival (within `wait` seconds,
    while the other processes run on) means the run is complete. Else
    None, and the run failed."""
    if code != -signal.SIGABRT:
        return None
    end = time.monotonic() + wait
    while state is None and time.monotonic() < end:
        state, _epochs = _take(mailbox, report, state)
        if state is None and not any(p.is_alive() for p in procs.processes):
            state, _epochs = _take(mailbox, report, state)
            break
        time.sleep(0.1)
    if state is not None:
        print(_('d2lpar: rank {rank} crashed while shutting down, after '
                'writing all its results ({error}); the run itself is '
                'complete.').format(rank=rank, error='SIGABRT'), flush=True)
    return state
