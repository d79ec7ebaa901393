"""What students do to a lesson: run it all twice in one kernel (offline,
with an empty data cache), and interrupt training. Both must leave a
working kernel and right results."""
import json
import pathlib
import time

import nbformat
import pytest
from jupyter_client.manager import start_new_kernel
from nbclient import NotebookClient

ROOT = pathlib.Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / 'notebooks' / 'en').glob('*/multiple-gpus.ipynb'))


def checked_outputs(nb):
    """What each checked cell printed, one string per cell (a busy machine
    may deliver a cell's printout in several pieces)."""
    return [''.join(''.join(o.get('text', '')) for o in c.outputs
                    if o.get('output_type') == 'stream'
                    and o.get('name') == 'stdout')
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
    notices = []
    with client.setup_kernel():
        for run in (1, 2):
            for index, cell in enumerate(nb.cells):
                if cell.cell_type == 'code':
                    cell.outputs = []
                    client.execute_cell(cell, index)
            assert checked_outputs(nb) == expected, f'run {run} of {path}'
            text = ''.join(''.join(o.get('text', '')) for c in nb.cells
                           if c.cell_type == 'code' for o in c.outputs)
            notices.append(text.count('using a synthetic stand-in'))
    # Offline with an empty cache (see conftest): the lesson says so, once
    assert notices == [1, 0]


BACKENDS = {'torch': 'from d2lpar import torch as d2l',
            'mxnet': 'from d2lpar import mxnet as d2l'}


def execute(client, code, timeout=120):
    """Run `code` in the kernel; return (status, stdout text)."""
    msg_id = client.execute(code)
    out = []
    deadline = time.time() + timeout
    while True:
        msg = client.get_iopub_msg(timeout=max(1, deadline - time.time()))
        if msg['parent_header'].get('msg_id') != msg_id:
            continue
        if msg['msg_type'] == 'stream':
            out.append(msg['content']['text'])
        if msg['msg_type'] == 'status' and \
                msg['content']['execution_state'] == 'idle':
            break
    reply = client.get_shell_msg(timeout=30)
    return reply['content']['status'], ''.join(out), reply['content']


@pytest.mark.parametrize('backend', BACKENDS)
def test_interrupted_training_leaves_a_working_kernel(backend, tmp_path):
    km, kc = start_new_kernel(kernel_name='python3', cwd=str(tmp_path))
    try:
        status, _, _ = execute(kc, BACKENDS[backend])
        assert status == 'ok'
        msg_id = kc.execute('d2l.train(1, 64, 0.2, num_epochs=1000, '
                            'num_train=2000, num_test=200, plot=False)')
        time.sleep(4)  # well inside the first epochs
        km.interrupt_kernel()
        while True:
            reply = kc.get_shell_msg(timeout=60)
            if reply['parent_header'].get('msg_id') == msg_id:
                break
        assert reply['content']['status'] == 'error'
        assert reply['content']['ename'] == 'KeyboardInterrupt'
        time.sleep(1)  # ipykernel drops requests that arrive with an error
        status, out, content = execute(kc, 'r = d2l.train(2, 64, 0.2, '
                                       'num_epochs=1, num_train=1000, '
                                       'num_test=200, plot=False)\n'
                                       'print(len(r.devices), r.num_epochs)')
        assert status == 'ok', content
        assert out.strip().endswith('2 1')
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
