"""What students do to a lesson: run it all twice in one kernel (offline,
with an empty data cache), and interrupt training. Both must leave a
working kernel and right results."""
import configparser
import pathlib
import queue
import re
import signal
import time
import warnings

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(path for chapter in ('multiple-gpus', 'communication-cost')
                   for path in (ROOT / 'notebooks' / 'en').glob(
                       f'*/{chapter}.ipynb'))


def _sanitize(text):
    """`text` with the substitutions nbval makes before it compares
    (tests/nbval_sanitize.cfg): measured figures, such as an accuracy,
    depend on the machine's kernels; the check that follows them does
    not."""
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / 'tests' / 'nbval_sanitize.cfg', encoding='utf-8')
    for section in config.sections():
        text = re.sub(config[section]['regex'],
                      config[section].get('replace', ''), text)
    return text


def checked_outputs(nb, sanitize=True):
    """What each checked cell printed, one string per cell (a busy machine
    may deliver a cell's printout in several pieces), sanitized as nbval
    sanitizes it unless `sanitize` is false."""
    return [(_sanitize if sanitize else str)(
                ''.join(''.join(o.get('text', '')) for o in c.outputs
                        if o.get('output_type') == 'stream'
                        and o.get('name') == 'stdout'))
            for c in nb.cells
            if 'nbval-check-output' in c.metadata.get('tags', [])]


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.parent.name)
def test_run_all_twice_in_one_kernel(path, monkeypatch):
    monkeypatch.setenv('MPLBACKEND', 'module://matplotlib_inline.backend_inline')
    expected = checked_outputs(nbformat.read(path, 4))
    assert expected, f'{path} has no checked output'
    nb = nbformat.read(path, 4)
    client = NotebookClient(nb, timeout=300, kernel_name='python3',
                            resources={'metadata': {'path': str(path.parent)}})
    notices, printed = [], []
    with client.setup_kernel():
        for run in (1, 2):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type == 'code':
                    cell.outputs = []
                    client.execute_cell(cell, index)
            assert checked_outputs(nb) == expected, f'run {run} of {path}'
            printed.append(checked_outputs(nb, sanitize=False))
            text = ''.join(''.join(o.get('text', '')) for c in nb.cells
                           if c.cell_type == 'code' for o in c.outputs)
            notices.append(text.count('using a synthetic stand-in'))
    # Offline with an empty cache (see conftest): the lesson says so, once
    assert notices == [1, 0]
    # The second run gives the same figures as the first, to the digit
    assert printed[0] == printed[1]


BACKENDS = {'torch': 'from d2lpar import torch as d2l',
            'mxnet': 'from d2lpar import mxnet as d2l'}


def wait_for(client, msg_id, condition, timeout, what):
    """Read the kernel's iopub messages about request `msg_id` until
    `condition(msg)` holds (other requests' messages are dropped); return
    those read, the last one included. Fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    seen = []
    while True:
        left = deadline - time.monotonic()
        try:
            if left <= 0:
                raise queue.Empty
            msg = client.get_iopub_msg(timeout=left)
        except queue.Empty:
            pytest.fail(f'no {what} from the kernel within {timeout} s; '
                        f'it sent: {[m["msg_type"] for m in seen]}')
        if msg['parent_header'].get('msg_id') != msg_id:
            continue
        seen.append(msg)
        if condition(msg):
            return seen


def is_idle(msg):
    return msg['msg_type'] == 'status' and \
        msg['content']['execution_state'] == 'idle'


def stdout(msgs):
    return ''.join(m['content']['text'] for m in msgs
                   if m['msg_type'] == 'stream')


def shell_reply(client, msg_id, timeout, fail=True):
    """The kernel's reply to request `msg_id`. Other replies are dropped:
    start_new_kernel may leave an extra kernel_info reply behind. After
    `timeout` seconds without it: fail, or return None if not `fail`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            reply = client.get_shell_msg(
                timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            if not fail:
                return None
            pytest.fail(f'no reply from the kernel within {timeout} s')
        if reply['parent_header'].get('msg_id') == msg_id:
            return reply


def execute(client, code, timeout=120):
    """Run `code` in the kernel; return (status, stdout text, reply)."""
    msg_id = client.execute(code)
    out = stdout(wait_for(client, msg_id, is_idle, timeout, 'idle status'))
    reply = shell_reply(client, msg_id, 30)
    return reply['content']['status'], out, reply['content']


# Says on stdout when the third training step starts: `train` looks up
# train_batch in the module, so it calls this wrapper.
SAY_STEP = '''
import itertools
_steps, _train_batch = itertools.count(1), d2l.train_batch
def train_batch(*args, **kwargs):
    if next(_steps) == 3:
        print('step 3', flush=True)
    return _train_batch(*args, **kwargs)
d2l.train_batch = train_batch
'''

# Lets the test see where every thread of the kernel is: SIGUSR1 writes
# their stacks to the file `stacks` of the kernel's folder
DUMP_STACKS = '''
import faulthandler, signal
_stacks = open('stacks', 'w')
faulthandler.register(signal.SIGUSR1, file=_stacks, all_threads=True)
'''


def kernel_stacks(km, folder):
    """The stacks of the kernel's threads (see DUMP_STACKS)."""
    if not km.is_alive():
        return 'the kernel has died'
    km.signal_kernel(signal.SIGUSR1)
    time.sleep(1)
    return (folder / 'stacks').read_text()


@pytest.mark.parametrize('backend', BACKENDS)
def test_interrupted_training_leaves_a_working_kernel(backend, tmp_path):
    km, kc = start_new_kernel(kernel_name='python3', cwd=str(tmp_path))
    try:
        status, _, _ = execute(kc, BACKENDS[backend] + SAY_STEP +
                               DUMP_STACKS)
        assert status == 'ok'
        msg_id = kc.execute('d2l.train(1, 64, 0.2, num_epochs=1000, '
                            'num_train=2000, num_test=200, plot=False)')
        # Interrupt inside the training loop, once it has taken two steps
        wait_for(kc, msg_id, lambda m: 'step 3' in stdout([m]), 120,
                 'training step')
        km.interrupt_kernel()
        reply = shell_reply(kc, msg_id, 30, fail=False)
        if reply is None:
            # Once in about a hundred CI runs, MXNet's kernel has not
            # answered the first interrupt (not seen in 80 tries here).
            # A student would press the button again: so does the test,
            # and says where the kernel was, so that the cause can be found
            stacks = kernel_stacks(km, tmp_path)
            km.interrupt_kernel()
            reply = shell_reply(kc, msg_id, 30, fail=False)
            if reply is None:
                pytest.fail('no reply to two interrupts within 60 s; the '
                            f'kernel\'s threads:\n{stacks}')
            warnings.warn('the kernel answered only the second interrupt; '
                          f'after the first, its threads were:\n{stacks}')
        assert reply['content']['status'] == 'error'
        assert reply['content']['ename'] == 'KeyboardInterrupt'
        # After an error, ipykernel aborts the execute requests that reach
        # it before it is done with the failed one: wait until it is idle
        wait_for(kc, msg_id, is_idle, 60, 'idle status after the interrupt')
        status, out, content = execute(kc, 'r = d2l.train(2, 64, 0.2, '
                                       'num_epochs=1, num_train=1000, '
                                       'num_test=200, plot=False)\n'
                                       'print(len(r.devices), r.num_epochs)')
        assert status == 'ok', content
        assert out.strip().endswith('2 1')
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
