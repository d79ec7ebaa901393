"""Checkpoints, restarts and mixed precision in lesson 4's training scripts.

A run whose last process is killed (SIGKILL) in its second epoch resumes
from the checkpoint of the first (PyTorch: torchrun --max-restarts 1;
MXNet: the launcher starts the whole job again) and ends with the same
parameters, bit for bit, as a run that was not interrupted; a save that
fails half-way leaves the former checkpoint whole; PyTorch's --amp
computes in bfloat16 on the CPU and learns as well; MXNet's --amp says
that MXNet's AMP does not apply to the NumPy interface.
"""
import contextlib
import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import kill_survivors
from frameworks import get_backend
from d2lpar import distributed

# Two epochs of 8 steps; the last process dies at step 12, in epoch 2
ARGS = dict(batch_size=64, lr=0.2, num_epochs=2, num_train=512,
            num_test=512, use_gpus=False, timeout=240)
FAIL_AT = 12
FRAMEWORKS = ['torch', 'mxnet']


@pytest.fixture(autouse=True)
def _one_thread_each(monkeypatch):
    monkeypatch.setenv('OMP_NUM_THREADS', '1')


@pytest.fixture(scope='module')
def runs(tmp_path_factory, data_root):
    """``runs(framework)``: (a run with checkpoints, the same run killed
    at step FAIL_AT and restarted once), made once for the module."""
    done = {}

    def get(framework):
        if framework not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv('D2LPAR_OFFLINE', '1')
                mp.setenv('D2LPAR_DATA', str(data_root))
                mp.setenv('OMP_NUM_THREADS', '1')
                mp.delenv('D2LPAR_LANG', raising=False)
                with contextlib.redirect_stdout(io.StringIO()) as out:
                    whole = distributed.train(
                        framework, 2, **ARGS, checkpoint=True,
                        out_dir=tmp_path_factory.mktemp(f'{framework}-whole'))
                    resumed = distributed.train(
                        framework, 2, **ARGS, checkpoint=True,
                        fail_at_step=FAIL_AT, max_restarts=1,
                        out_dir=tmp_path_factory.mktemp(f'{framework}-kill'))
            done[framework] = whole, resumed, out.getvalue()
        return done[framework]

    return get


def _final_params(result):
    """{name: NumPy array} of the last checkpoint of `result`'s run."""
    return get_backend(result.framework).checkpoint_params(
        os.path.join(result.out_dir, 'checkpoint'))


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_killed_run_resumes_and_ends_as_if_nothing_happened(runs,
                                                              framework):
    whole, resumed, printed = runs(framework)
    assert whole.summary['restarts'] == 0
    assert whole.summary['resumed_after_epoch'] == 0
    # It did fail: the marker of --fail-at-step, and one restart
    assert os.path.exists(os.path.join(resumed.out_dir,
                                       f'failed-at-step-{FAIL_AT}'))
    assert resumed.summary['restarts'] == 1
    # It went on after epoch 1, not from scratch, and did every step
    assert resumed.summary['resumed_after_epoch'] == 1
    assert resumed.summary['steps'] == whole.summary['steps'] == 16
    assert [p['steps'] for p in resumed.processes] == [16, 16]
    # Nothing lost, nothing done twice: the same parameters, bit for bit
    a, b = _final_params(whole), _final_params(resumed)
    assert sorted(a) == sorted(b) and len(a) == 8
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    assert resumed.test_acc == whole.test_acc > 0.2
    if framework == 'mxnet':
        assert ('worker rank 1 exited with signal SIGKILL: restarting the '
                'whole job from its checkpoint (1 of 1).') in printed
    for result in (whole, resumed):
        assert kill_survivors(result.out_dir) == []


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_without_restarts_a_killed_process_ends_the_run(tmp_path, framework):
    with pytest.raises(RuntimeError, match='training with 2 (processes|'
                                           'workers) failed'):
        distributed.train(framework, 2, **ARGS, checkpoint=True,
                          fail_at_step=3, out_dir=tmp_path)
    assert os.path.exists(tmp_path / 'failed-at-step-3')
    assert kill_survivors(tmp_path) == []


def test_max_restarts_is_checked(tmp_path):
    for bad in (-1, 1.5, None):
        with pytest.raises(ValueError, match='max_restarts must be an int'):
            distributed.launch_kvstore(2, tmp_path, max_restarts=bad)


class _Broken(Exception):
    pass


def test_a_torch_save_that_fails_leaves_the_former_checkpoint(tmp_path,
                                                              monkeypatch):
    import torch
    from d2lpar.distributed import ddp_train
    path = tmp_path / 'checkpoint.pt'
    ddp_train.save_checkpoint(str(path), {'epoch': 1, 'w': torch.ones(1000)})
    real_save = torch.save

    def save_half(obj, f, **kwargs):  # dies half-way through the file
        buffer = io.BytesIO()
        real_save(obj, buffer, **kwargs)
        data = buffer.getvalue()
        if hasattr(f, 'write'):
            f.write(data[:len(data) // 2])
        else:
            with open(f, 'wb') as out:
                out.write(data[:len(data) // 2])
        raise _Broken

    monkeypatch.setattr(torch, 'save', save_half)
    with pytest.raises(_Broken):
        ddp_train.save_checkpoint(str(path), {'epoch': 2,
                                              'w': torch.zeros(1000)})
    state = torch.load(path, weights_only=True)
    assert state['epoch'] == 1 and bool((state['w'] == 1).all())
    assert os.listdir(tmp_path) == ['checkpoint.pt']  # no temporary left


def test_an_mxnet_save_that_fails_leaves_the_former_checkpoint(tmp_path,
                                                               monkeypatch):
    import mxnet as mx
    from d2lpar.distributed import kvstore_train
    net = kvstore_train.lenet(kvstore_train.initial_params(0), mx.cpu())
    state = {'epoch': 1, 'step': 8, 'data_order': {}}
    kvstore_train.save_checkpoint(str(tmp_path), net, state)
    before = kvstore_train.named_params(net)
    real_save = type(net).save_parameters

    def save_half(self, filename, *args, **kwargs):
        real_save(self, filename, *args, **kwargs)
        with open(filename, 'r+b') as f:
            f.truncate(os.path.getsize(filename) // 2)
        raise _Broken

    monkeypatch.setattr(type(net), 'save_parameters', save_half)
    with pytest.raises(_Broken):
        kvstore_train.save_checkpoint(str(tmp_path), net,
                                      {**state, 'epoch': 2, 'step': 16})
    with open(tmp_path / 'checkpoint.json') as f:
        saved = json.load(f)
    assert saved['epoch'] == 1
    other = kvstore_train.lenet(kvstore_train.initial_params(1), mx.cpu())
    other.load_parameters(str(tmp_path / saved['params']), ctx=mx.cpu())
    after = kvstore_train.named_params(other)
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])


def test_torch_amp_computes_in_bfloat16_on_the_cpu_and_learns(runs,
                                                             tmp_path):
    whole = runs('torch')[0]
    with contextlib.redirect_stdout(io.StringIO()):
        mixed = distributed.train('torch', 2, **ARGS, amp=True,
                                  out_dir=tmp_path)
    assert whole.summary['amp'] is None
    assert whole.summary['output_dtype'] == 'float32'
    assert mixed.summary['amp'] == 'bfloat16'
    assert mixed.summary['output_dtype'] == 'bfloat16'
    assert abs(mixed.test_acc - whole.test_acc) <= 0.05
    assert kill_survivors(tmp_path) == []


def test_mxnet_amp_says_why_it_does_not_apply(tmp_path, data_root):
    """MXNet 1.9's AMP leaves the NumPy interface in float32: --amp stops
    with an error that says so (a local KVStore: no servers needed)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, '-m', 'd2lpar.distributed.kvstore_train',
         '--kvstore', 'local', '--amp', '--out', str(tmp_path),
         '--num-train', '64', '--num-test', '64', '--batch-size', '64',
         '--epochs', '1'],
        env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    assert ('left the convolutions of this network in float32: MXNet 1.9'
            in done.stderr), done.stderr
    assert 'not those of the NumPy interface' in done.stderr
