"""Multi-process data-parallel training on the loopback interface: k
processes take the same steps as one, failures and timeouts stop every
process of a run, and a busy port is refused before anything starts.

PyTorch runs DDP with gloo under torchrun; MXNet runs the dist_sync
KVStore with a scheduler and a server, also for its one-worker reference
run, so that both runs take the same code path.
"""
import socket
import time

import numpy as np
import psutil
import pytest

from d2lpar import distributed

ARGS = ['--num-train', 1024, '--num-test', 512, '--batch-size', 64,
        '--epochs', 1, '--seed', 3]
SCRIPTS = {'torch': 'd2lpar.ddp_train', 'mxnet': 'd2lpar.kvstore_train'}
LAUNCH = {'torch': distributed.launch_torch,
          'mxnet': distributed.launch_kvstore}
FRAMEWORKS = ['torch', 'mxnet']


@pytest.fixture(autouse=True)
def _one_thread_each(monkeypatch):
    monkeypatch.setenv('OMP_NUM_THREADS', '1')  # 2 cores, up to 4 processes


@pytest.fixture(scope='module')
def runs(tmp_path_factory, data_root):
    """{framework: (result with 1 worker, result with 2 workers)}, made
    once for the module (the _test_env of conftest is function-scoped)."""
    done = {}

    def get(framework):
        if framework not in done:
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv('D2LPAR_OFFLINE', '1')
                mp.setenv('D2LPAR_DATA', str(data_root))
                mp.setenv('OMP_NUM_THREADS', '1')
                done[framework] = tuple(
                    LAUNCH[framework](k, tmp_path_factory.mktemp(
                        f'{framework}{k}'), ARGS, timeout=120)
                    for k in (1, 2))
        return done[framework]

    return get


def _step1(result):
    return result.first_step_params()


def _survivors(framework, out_dir):
    found = []
    for p in psutil.process_iter(['cmdline']):
        cmd = ' '.join(p.info['cmdline'] or [])
        if SCRIPTS[framework] in cmd and str(out_dir) in cmd:
            found.append((p.pid, cmd))
    return found


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_two_workers_take_the_same_steps_as_one(runs, framework):
    one, two = runs(framework)
    assert (one.num_workers, two.num_workers) == (1, 2)
    first, second = _step1(one), _step1(two)
    assert sorted(first) == sorted(second) and len(first) == 8
    for name in first:
        np.testing.assert_allclose(second[name], first[name], rtol=1e-4,
                                   atol=1e-5, err_msg=name)
    assert abs(one.test_acc - two.test_acc) <= 0.05
    assert two.test_acc > 0.2  # it learned something (10 classes)
    for result, k in ((one, 1), (two, 2)):
        assert [p['rank'] for p in result.processes] == list(range(k))
        for p in result.processes:
            assert p['world_size'] == k and p['steps'] == 1024 // 64
            assert p['examples'] == 1024 // k
            assert p['seconds_compute'] > 0
            assert p['seconds_communication'] > 0
            assert p['seconds_total'] >= p['seconds_compute']
        assert result.num_examples == 1024 and result.num_epochs == 1
    assert two.backend == ('gloo' if framework == 'torch' else 'dist_sync')


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_tables_and_charts(runs, framework, capsys):
    one, two = runs(framework)
    distributed.print_processes([one, two])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 3 and 'comm.' in lines[0]
    assert str(two).startswith(f'test acc: {two.test_acc:.2f}')
    ax = distributed.plot_processes([one, two], title=framework)
    assert len(ax.get_yticklabels()) == 3


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_crash_stops_every_process(framework, tmp_path):
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        LAUNCH[framework](2, tmp_path, ARGS + ['--crash-at-step', 1,
                                               '--crash-rank', 1],
                          timeout=60)
    assert time.monotonic() - start < 60
    message = str(info.value)
    assert 'rank 1' in message and 'crashes at step 1' in message
    assert _survivors(framework, tmp_path) == []


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_timeout_stops_every_process(framework, tmp_path):
    args = ['--num-train', 1024, '--batch-size', 64, '--epochs', 10000]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match='did not finish within 6 s'):
        LAUNCH[framework](2, tmp_path, args, timeout=6)
    assert time.monotonic() - start < 6 + 15  # SIGTERM, SIGKILL after 5 s
    assert _survivors(framework, tmp_path) == []


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_busy_port_is_refused_before_anything_starts(framework, tmp_path):
    with socket.socket() as s:
        s.bind((distributed.HOST, 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RuntimeError, match=f'port {port} .* in use'):
            LAUNCH[framework](2, tmp_path / 'out', ARGS, port=port)
    assert not (tmp_path / 'out').exists()
    assert _survivors(framework, tmp_path) == []
    assert distributed.check_port(port) == port  # free again


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(ValueError, match='equal shards'):
        distributed.train('torch', 3, batch_size=64, out_dir=tmp_path)
    with pytest.raises(ValueError, match="'torch' or 'mxnet'"):
        distributed.train('jax', 2, out_dir=tmp_path)
    with pytest.raises(ValueError, match='num_workers'):
        distributed.launch_torch(0, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_commands_for_several_machines():
    torch_lines = distributed.command_for_machines(
        'torch', ['a', 'b'], workers_per_host=4, port=1234).splitlines()
    assert len(torch_lines) == 2
    for host, line in zip('ab', torch_lines):
        assert line.startswith(f'[{host}]$ torchrun --nnodes 2 '
                               f'--nproc-per-node 4 ')
        assert '--rdzv-endpoint a:1234' in line
        assert line.endswith('-m d2lpar.ddp_train --out OUT')
    mx_lines = distributed.command_for_machines(
        'mxnet', ['a', 'b'], workers_per_host=2, port=1234).splitlines()
    roles = [line.split('DMLC_ROLE=')[1].split()[0] for line in mx_lines]
    assert roles == ['scheduler'] + ['server', 'worker', 'worker'] * 2
    for line in mx_lines:
        assert ('DMLC_PS_ROOT_URI=a DMLC_PS_ROOT_PORT=1234 DMLC_NUM_SERVER=2 '
                'DMLC_NUM_WORKER=4') in line
