"""Lesson 4's practices of real multi-process jobs, in both scripts:

- sharding: every process takes a part of the data that no other takes,
  in a new order every epoch (PyTorch's DistributedSampler with
  set_epoch; MXNet's worker_shard with the epoch in the seed), and what
  goes wrong without the epoch (the same order every epoch);
- gradient accumulation: one step over 4 micro-batches takes the same
  step as one big batch, and communicates once (DDP's no_sync; MXNet's
  grad_req='add' and one trainer.step); the naive loop that lesson 4
  compares (--naive-accumulate) communicates after every micro-batch;
- evaluation across processes: the counts summed over the processes give
  exactly the accuracy of one process on the whole test set.
"""
import contextlib
import io
import os
import subprocess
import sys

import numpy as np
import pytest

from d2lpar import distributed
from frameworks import get_backend

FRAMEWORKS = ['torch', 'mxnet']
LAUNCH = {'torch': distributed.launch_torch,
          'mxnet': distributed.launch_kvstore}
# One epoch of 4 steps; an odd test set, which 2 processes share unevenly
ARGS = ['--num-train', 256, '--num-test', 301, '--batch-size', 64,
        '--epochs', 1, '--seed', 5]
STEPS = 256 // 64


def _script(framework):
    if framework == 'torch':
        from d2lpar.distributed import ddp_train
        return ddp_train
    from d2lpar.distributed import kvstore_train
    return kvstore_train


@pytest.fixture(scope='module')
def runs(tmp_path_factory, data_root):
    """``runs(framework)``: (plain, accumulated): two processes each, the
    second with --accumulate 4; made once per framework."""
    done = {}

    def get(framework):
        if framework not in done:
            results = []
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv('D2LPAR_OFFLINE', '1')
                mp.setenv('D2LPAR_DATA', str(data_root))
                mp.setenv('OMP_NUM_THREADS', '1')
                for extra in ([], ['--accumulate', 4]):
                    out = tmp_path_factory.mktemp(framework)
                    extra += ['--checkpoint', out / 'checkpoint']
                    with contextlib.redirect_stdout(io.StringIO()):
                        results.append(LAUNCH[framework](
                            2, out, ARGS + extra, timeout=180, num_gpus=0))
            done[framework] = tuple(results)
        return done[framework]
    return get


@pytest.fixture(scope='module')
def naive_run(tmp_path_factory, data_root):
    """``naive_run(framework)``: two processes with --accumulate 4
    --naive-accumulate, and `d2lpar.data._source` as it was just before
    the run was collected; made once per framework."""
    done = {}

    def get(framework):
        if framework not in done:
            from d2lpar import data
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv('D2LPAR_OFFLINE', '1')
                mp.setenv('D2LPAR_DATA', str(data_root))
                mp.setenv('OMP_NUM_THREADS', '1')
                mp.setattr(data, '_source', None)  # as in a fresh kernel
                out = tmp_path_factory.mktemp(framework + '-naive')
                with contextlib.redirect_stdout(io.StringIO()):
                    result = LAUNCH[framework](
                        2, out, ARGS + ['--accumulate', 4,
                                        '--naive-accumulate'],
                        timeout=180, num_gpus=0)
                done[framework] = result, data.data_source()
        return done[framework]
    return get


# --------------------------------------------------------------------------
# Sharding
# --------------------------------------------------------------------------
@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_without_the_epoch_every_epoch_repeats_the_order(framework):
    first = _script(framework).first_indices
    same = first(40, 2, 3, False, count=20)
    new = first(40, 2, 3, True, count=20)
    for rank in (0, 1):
        assert same[rank][0] == same[rank][1] == same[rank][2]
        assert len({tuple(order) for order in new[rank]}) == 3
    for seen in (same, new):  # the two shards share no example
        for epoch in range(3):
            assert sorted(seen[0][epoch] + seen[1][epoch]) == list(range(40))


def test_the_sampler_loader_shards_the_data_and_pins_only_for_a_gpu():
    import torch
    from d2lpar.distributed import ddp_train
    dataset = torch.utils.data.TensorDataset(torch.arange(48))
    orders = []
    for rank in (0, 1):
        sampler, loader = ddp_train.sharded_loader(dataset, 8, rank, 2,
                                                   seed=1, num_workers=1)
        assert loader.pin_memory == torch.cuda.is_available()
        sampler.set_epoch(1)
        batches = [b.tolist() for (b,) in loader]
        assert [len(b) for b in batches] == [8, 8, 8]
        orders.append(sum(batches, []))
    assert sorted(orders[0] + orders[1]) == list(range(48))


def test_the_gluon_loader_takes_this_workers_shard():
    from d2lpar.distributed import kvstore_train
    X = np.arange(40, dtype='float32').reshape(20, 2)
    y = np.arange(20, dtype='float32')
    seen = []
    for rank in (0, 1):
        loader = kvstore_train.sharded_loader(X, y, 5, rank, 2, epoch=2,
                                              seed=1)
        labels = [int(v) for _, yb in loader for v in yb.asnumpy()]
        assert labels == kvstore_train.worker_shard(20, rank, 2, 2,
                                                    1).tolist()
        seen += labels
    assert sorted(seen) == list(range(20))


# --------------------------------------------------------------------------
# Accumulation and evaluation (two processes, launched)
# --------------------------------------------------------------------------
@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_an_accumulated_step_is_one_big_step_sent_once(runs, framework):
    plain, accumulated = runs(framework)
    big, small = plain.first_step_params(), accumulated.first_step_params()
    assert sorted(big) == sorted(small) and len(big) == 8
    for name in big:
        np.testing.assert_allclose(small[name], big[name], rtol=0,
                                   atol=1e-5, err_msg=name)
    for result, accumulate in ((plain, 1), (accumulated, 4)):
        for p in result.processes:
            assert p['accumulate'] == accumulate and p['steps'] == STEPS
            if framework == 'torch':  # LeNet is one bucket: one per step
                assert p['allreduces'] == STEPS
            else:  # one pushpull per parameter and step
                assert p['pushes'] == 8 * STEPS


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_naive_accumulation_communicates_every_micro_batch(
        runs, naive_run, framework):
    # Lesson 4 prints these counts per step: 4 allreduces against 1
    # (MXNet: 32 pushes against 8)
    naive = naive_run(framework)[0]
    for p in naive.processes:
        assert p['naive_accumulate'] and p['steps'] == STEPS
        if framework == 'torch':
            assert p['allreduces'] == 4 * STEPS
        else:
            assert p['pushes'] == 4 * 8 * STEPS
    big, first = runs(framework)[0].first_step_params(), \
        naive.first_step_params()
    largest = max(float(np.abs(first[name] - big[name]).max())
                  for name in big)
    if framework == 'torch':  # each allreduce averages the sum so far
        assert largest < 1e-5
    else:  # the server updated after every micro-batch: four small steps
        assert largest > 1e-3


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_after_a_run_data_source_names_what_its_processes_loaded(
        naive_run, framework):
    # Lesson 4's kernel loads no data itself: the accuracies it prints
    # name the data of the run's processes
    from d2lpar.i18n import _
    result, named = naive_run(framework)
    assert result.summary['data']
    assert named == _(result.summary['data'])


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_every_accumulated_step_starts_from_zero_gradients(runs, framework):
    # After all the steps, not only the first: a step that kept the former
    # step's gradients (no zero_grad after MXNet's trainer.step) adds them
    # again and ends far from the run without accumulation
    plain, accumulated = runs(framework)
    backend = get_backend(framework)
    whole, parts = [backend.checkpoint_params(
        os.path.join(result.out_dir, 'checkpoint'))
        for result in (plain, accumulated)]
    assert sorted(whole) == sorted(parts)
    for name in whole:
        np.testing.assert_allclose(parts[name], whole[name], rtol=0,
                                   atol=1e-4, err_msg=name)


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_shared_evaluation_equals_one_process_exactly(runs, framework):
    for result in runs(framework):
        assert result.summary['num_test'] == 301
        assert result.test_acc == result.summary['test_acc_rank0_alone']
        assert result.summary['test_counted'] == 301  # every example once
        assert result.test_acc * 301 == pytest.approx(
            round(result.test_acc * 301), abs=1e-9)
        assert 0.1 < result.test_acc < 1.0


def test_a_shard_that_micro_batches_cannot_split_is_refused(tmp_path):
    with pytest.raises(RuntimeError, match='micro-batches'):
        with contextlib.redirect_stdout(io.StringIO()):
            distributed.launch_torch(2, tmp_path, ARGS + ['--accumulate', 5],
                                     timeout=120, num_gpus=0)


@pytest.mark.parametrize('script', ['ddp_train', 'kvstore_train'])
def test_a_naive_accumulation_needs_several_micro_batches(script, capsys):
    # With one micro-batch per step there is nothing to send early: the
    # option would do nothing and still be recorded as used
    if script == 'kvstore_train':
        pytest.importorskip('mxnet')
    import importlib
    module = importlib.import_module(f'd2lpar.distributed.{script}')
    with pytest.raises(SystemExit):
        module.parse_args(['--out', 'x', '--naive-accumulate'])
    assert '--naive-accumulate needs --accumulate 2' in capsys.readouterr().err
    args = module.parse_args(['--out', 'x', '--naive-accumulate',
                              '--accumulate', '4'])
    assert args.naive_accumulate and args.accumulate == 4
    with pytest.raises(ValueError, match='naive_accumulate=True needs '
                                         'accumulate=2 or more'):
        distributed.train('torch', 2, naive_accumulate=True)


def test_the_tests_own_options_stay_out_of_help():
    from d2lpar.distributed import ddp_train
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        ddp_train.parse_args(['--help'])
    assert '--crash-at-step' in out.getvalue()
    assert '--leave-a-child' not in out.getvalue()


@pytest.mark.parametrize('script', ['ddp_train', 'kvstore_train'])
def test_help_of_a_script_ends_without_a_traceback(script):
    """``python -m d2lpar.distributed.ddp_train --help``, outside torchrun,
    as a student reads a script: the options, exit code 0, no error."""
    if script == 'kvstore_train':
        pytest.importorskip('mxnet')
    env = {k: v for k, v in os.environ.items()
           if k not in ('RANK', 'WORLD_SIZE', 'DMLC_ROLE')}
    done = subprocess.run(
        [sys.executable, '-m', f'd2lpar.distributed.{script}', '--help'],
        env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert '--out' in done.stdout
    assert 'Traceback' not in done.stderr, done.stderr
