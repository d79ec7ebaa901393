"""Multi-process data-parallel training on the loopback interface: k
processes take the same steps as one, the data order changes from epoch
to epoch, failures (of a worker, the MXNet scheduler or server) and
timeouts stop every process of a run, their descendants included, a busy
port is refused before anything starts, and with fewer GPUs than
processes all of them train on the CPU.

PyTorch runs DDP with gloo under torchrun; MXNet runs the dist_sync
KVStore with a scheduler and a server, also for its one-worker reference
run, so that both runs take the same code path.
"""
import contextlib
import io
import pathlib
import re
import socket
import threading
import time

import numpy as np
import psutil
import pytest

from conftest import kill_survivors
from d2lpar import devices, distributed, plots
from d2lpar.distributed import ddp_launch
from d2lpar.distributed.runs import device_options

# Two epochs of 8 steps: the second one must see the data in a new order
ARGS = ['--num-train', 512, '--num-test', 512, '--batch-size', 64,
        '--epochs', 2, '--seed', 3]
LAUNCH = {'torch': distributed.launch_torch,
          'mxnet': distributed.launch_kvstore}
FRAMEWORKS = ['torch', 'mxnet']


@pytest.fixture(autouse=True)
def _one_thread_each(monkeypatch):
    monkeypatch.setenv('OMP_NUM_THREADS', '1')  # 2 cores, up to 4 processes


@pytest.fixture(scope='module')
def runs(tmp_path_factory, data_root):
    """``runs(framework)``: (result with 1 worker, result with 2 workers),
    made once for the module (the _test_env of conftest is function-scoped).

    The launcher is told that this machine has one GPU (``num_gpus=1``),
    as on Colab: the 2-worker run must say that all its processes train
    on the CPU. What each launch printed is kept in
    ``runs.printed[framework]`` (1 worker, 2 workers)."""
    done = {}

    def get(framework):
        if framework not in done:
            results, printed = [], []
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv('D2LPAR_OFFLINE', '1')
                mp.setenv('D2LPAR_DATA', str(data_root))
                mp.setenv('OMP_NUM_THREADS', '1')
                for k in (1, 2):
                    out = io.StringIO()
                    with contextlib.redirect_stdout(out):
                        results.append(LAUNCH[framework](
                            k, tmp_path_factory.mktemp(f'{framework}{k}'),
                            ARGS, timeout=120, num_gpus=1))
                    printed.append(out.getvalue())
            done[framework] = tuple(results)
            get.printed[framework] = printed
        return done[framework]

    get.printed = {}
    return get


def _step1(result):
    return result.first_step_params()


def _read(path):
    try:
        return path.read_text(errors='replace')
    except OSError:
        return ''


def _wait_for(condition, timeout):
    """Poll `condition()` until it is true (return True) or `timeout`
    seconds have passed (return False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


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
            assert p['world_size'] == k and p['steps'] == 2 * 512 // 64
            assert p['examples'] == 2 * 512 // k
            assert p['seconds_compute'] > 0
            assert p['seconds_communication'] > 0
            assert p['seconds_total'] >= p['seconds_compute']
        assert result.num_examples == 512 and result.num_epochs == 2
    assert two.backend == {'torch': 'gloo', 'mxnet': 'dist_sync'}[framework]


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_the_order_of_examples_changes_from_epoch_to_epoch(runs, framework):
    """Each process records its first shard of every epoch: the examples
    of epoch 2 come in a new order, and the two workers' shards of a step
    are the two halves of the one worker's global batch."""
    one, two = runs(framework)
    alone = one.processes[0]['first_shard_of_epoch']
    assert len(alone) == 2 and len(alone[0]) == len(alone[1]) == 64
    assert alone[0] != alone[1], 'epoch 2 repeats the order of epoch 1'
    halves = [p['first_shard_of_epoch'] for p in two.processes]
    for epoch in (0, 1):
        assert halves[0][epoch] + halves[1][epoch] == alone[epoch]


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_with_fewer_gpus_than_processes_all_train_on_the_cpu(runs,
                                                             framework):
    """The module's runs pretend that this machine has 1 GPU: alone, the
    process would take it (nothing to say); two processes both train on
    the CPU, and the launcher says so and why, in one line."""
    one, two = runs(framework)
    alone, pair = runs.printed[framework]
    assert alone == ''
    assert len(pair.splitlines()) == 1, pair
    assert pair.startswith('2 processes but only 1 GPU(s) on this machine: '
                           'all processes train on the CPU, since each one '
                           'needs a GPU of its own'), pair
    assert all(p['device'].startswith('cpu') for p in two.processes)


# Where the processes of one machine train, by (GPUs, processes): every
# process on a GPU of its own, or all on the CPU, said when there are GPUs
DEVICES = {(0, 1): 'cpu', (0, 2): 'cpu', (0, 4): 'cpu',
           (1, 1): 'gpu', (1, 2): 'cpu, said', (1, 4): 'cpu, said',
           (2, 1): 'gpu', (2, 2): 'gpu', (2, 4): 'cpu, said'}


@pytest.mark.parametrize('num_gpus, processes', sorted(DEVICES))
def test_each_process_gets_a_gpu_of_its_own_or_all_use_the_cpu(
        num_gpus, processes):
    chosen = [devices.choose_gpu(num_gpus, r, processes)
              for r in range(processes)]
    gpus = [gpu for gpu, _ in chosen]
    notices = {notice for _, notice in chosen}
    expected = DEVICES[num_gpus, processes]
    if expected == 'gpu':
        assert gpus == list(range(processes)) and notices == {None}
    else:
        assert gpus == [None] * processes
        if expected == 'cpu':
            assert notices == {None}
        else:  # one line, the same for every process
            (notice,) = notices
            assert notice.startswith(
                f'{processes} processes but only {num_gpus} GPU(s)')
            assert 'CPU' in notice and '\n' not in notice
    with pytest.raises(ValueError, match='local rank 2 is not one of'):
        devices.choose_gpu(num_gpus, 2, 2)


def lesson_use_gpus(d2l):
    """The `use_gpus` that lesson 4 passes to all of its runs, in both of
    its notebooks (4a and 4b set it alike), evaluated with `d2l` (its
    expression, read from the English sources)."""
    found = []
    for name in ('distributed.md', 'distributed-practice.md'):
        source = (pathlib.Path(__file__).resolve().parent.parent
                  / 'notebooks' / 'en' / name).read_text()
        cell = source[source.index('settings = dict('):]
        cell = cell[:cell.index('\n```')]
        use = re.search(r'use_gpus=(.+)\)$', cell, re.M)
        assert use, f'{name} passes no use_gpus in its settings'
        found.append(use[1])
    assert found[0] == found[1], found
    return eval(found[0], {'d2l': d2l})


def test_the_lessons_two_runs_use_the_same_kind_of_device(backend, gpus,
                                                          capsys):
    """On one GPU, one process alone would take the GPU and two would train
    on the CPU, and the first steps would differ by more than the rounding
    the lesson compares (1e-5). With the lesson's `use_gpus`, both runs use
    GPUs only when each of the two processes has one; on one GPU, both
    say that they train on the CPU (simulated GPU counts)."""
    use_gpus = lesson_use_gpus(backend.module)
    options = [device_options(backend.name, None, k, use_gpus)
               for k in (1, 2)]
    assert options[0] == options[1] == ([] if gpus >= 2 else ['--cpu'])
    said = capsys.readouterr().out.splitlines()
    if gpus == 1:
        assert said == [
            '1 process(es) on the CPU, as asked (use_gpus=False), although '
            'this machine has 1 GPU(s).',
            devices.choose_gpu(1, 0, 2)[1]]
        # Without use_gpus, the process alone would take the GPU
        assert device_options(backend.name, None, 1) == []
    else:
        assert said == []


def test_use_gpus_true_requires_a_gpu_per_process(capsys):
    assert device_options('torch', 2, 2, True) == []
    with pytest.raises(ValueError, match='use_gpus=True needs a GPU for '
                                         'each of the 2 processes; this '
                                         'machine has 1'):
        device_options('torch', 1, 2, True)
    with pytest.raises(ValueError, match='None, True or False'):
        device_options('torch', 1, 2, 'yes')
    assert capsys.readouterr().out == ''


# -- the communication hook of d2lpar.distributed.ddp_train -----------------
class _Bucket:
    """What DDP hands a communication hook: its gradients in one buffer."""

    def __init__(self, tensor):
        self._buffer = tensor

    def buffer(self):
        return self._buffer


@pytest.fixture
def gloo_alone():
    """A process group of this process alone (gloo)."""
    import torch.distributed as dist
    dist.init_process_group('gloo', store=dist.HashStore(), rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


def test_the_comm_hook_returns_the_allreduce_and_never_waits(monkeypatch,
                                                             gloo_alone):
    """The hook's GPU path, with CUDA's events faked and every way of
    waiting for a GPU made to fail: the hook returns the future of DDP's
    allreduce with the reduced gradients, and only sets marks (an event
    queued when the bucket is handed over, one when its allreduce is
    done)."""
    import torch
    from d2lpar.distributed import ddp_train
    recorded = []

    class FakeEvent:
        def __init__(self, enable_timing=False):
            assert enable_timing

        def record(self, stream=None):
            recorded.append(self)

    def waits(*args, **kwargs):
        raise AssertionError('the communication hook waits for the GPU')
    monkeypatch.setattr(torch.cuda, 'Event', FakeEvent)
    for name in ('synchronize', 'current_stream', 'default_stream'):
        monkeypatch.setattr(torch.cuda, name, waits)
    monkeypatch.setattr(torch.cuda.Stream, 'synchronize', waits)
    monkeypatch.setattr(torch.cuda.Event, 'synchronize', waits,
                        raising=False)
    timer = ddp_train.CommTimer(cuda=True)
    future = ddp_train.timed_allreduce(timer, _Bucket(torch.arange(4.0)))
    assert isinstance(future, torch._C.Future)  # what .then returns
    assert torch.equal(future.wait(), torch.arange(4.0))  # mean of one
    origin, handed_over = recorded[:2]
    assert timer.origin is origin and timer.handed_over is handed_over
    assert timer.spans == [(handed_over, recorded[2])] and len(recorded) == 3


def test_the_comm_timer_adds_up_compute_and_communication():
    """CPU marks: compute runs from each step's start to its hand-over,
    communication is the time some allreduce was in flight."""
    from d2lpar.distributed import ddp_train
    timer = ddp_train.CommTimer(cuda=False)
    timer.handed_over, timer.spans = 3.0, [(2.0, 4.0), (3.0, 5.0)]
    timer.end_step(1.0)  # compute 2 s; two allreduces over 3 s
    timer.handed_over, timer.spans = 12.0, [(12.0, 13.0)]
    timer.end_step(10.0)
    assert timer.seconds() == (4.0, 4.0)
    assert ddp_train.busy([]) == 0


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_tables_and_charts(runs, framework, capsys):
    one, two = runs(framework)
    plots.print_processes([one, two])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 + 3 and 'comm.' in lines[0]
    assert str(two).startswith(f'test acc: {two.test_acc:.2f}')
    ax = plots.plot_processes([one, two], title=framework)
    assert len(ax.get_yticklabels()) == 3


# The launcher's own first line about a crash of rank 1 (the log that
# follows it quotes the worker, which names its own rank anyway)
CRASH_HEADS = {
    'torch': r'PyTorch training with 2 processes failed: rank 1 failed '
             r'\(exit code 1\)',
    'mxnet': r'MXNet training with 2 workers failed: worker rank 1 exited '
             r'with code 1\.'}


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_crash_stops_every_process(framework, tmp_path):
    """Rank 1 fails at step 1. Every process has first started a child in
    a session of its own (--leave-a-child), which no signal to the
    process groups reaches: the launcher must find and stop it too."""
    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        LAUNCH[framework](2, tmp_path, ARGS + ['--crash-at-step', 1,
                                               '--crash-rank', 1,
                                               '--leave-a-child'],
                          timeout=60)
    assert time.monotonic() - start < 60
    message = str(info.value)
    assert re.match(CRASH_HEADS[framework], message.splitlines()[0]), message
    assert 'crashes at step 1' in message
    logs = ''.join(_read(log) for log in tmp_path.glob('*.log'))
    children = re.findall(r'd2lpar: rank (\d+) left process \d+ behind',
                          logs)
    assert '1' in children  # rank 1 started its child before it failed
    assert kill_survivors(tmp_path) == []


def test_a_crash_after_the_results_does_not_fail_the_run(monkeypatch,
                                                        tmp_path, capsys):
    # PyTorch's teardown sometimes aborts a process once the run is over
    # (lesson 5's FSDP, twice in make test): the results are all there,
    # so the run is complete and the launcher says what happened
    monkeypatch.setenv('D2LPAR_TEST_ABORT_AT_EXIT', '1')
    with contextlib.redirect_stdout(io.StringIO()) as out:
        result = distributed.launch_torch(2, tmp_path, ARGS, timeout=120,
                                          num_gpus=0)
    assert result.num_workers == 2 and result.summary["epochs"] == 2
    assert re.search(r'rank 1 crashed while shutting down, after writing '
                     r'all its results \(.*SIGABRT', out.getvalue())
    assert kill_survivors(tmp_path) == []


def test_a_crash_before_the_results_fails_the_run(monkeypatch, tmp_path):
    # The same crash before rank 1 writes its results is a failure
    monkeypatch.setenv('D2LPAR_TEST_ABORT_AT_EXIT', '1')
    monkeypatch.setattr(ddp_launch, '_results_written',
                        lambda out_dir, n: False)
    with pytest.raises(RuntimeError, match='rank 1 failed'):
        distributed.launch_torch(2, tmp_path, ARGS, timeout=120,
                                 num_gpus=0)
    assert kill_survivors(tmp_path) == []


@pytest.mark.parametrize('role', ['scheduler', 'server'])
def test_a_dead_scheduler_or_server_stops_the_run(role, tmp_path):
    """Kill the MXNet scheduler or server once both workers have started:
    the launcher names it and stops everything at once (the workers would
    wait for it until the timeout)."""
    logs = [tmp_path / f'worker-process-{i}.log' for i in range(2)]
    launched, killed = threading.Event(), []

    def kill_it_once_the_workers_run():
        if not _wait_for(lambda: launched.is_set() or all(
                'd2lpar: worker rank' in _read(log) for log in logs), 60):
            return
        for p in psutil.process_iter(['cmdline']):
            with contextlib.suppress(psutil.Error):
                if (str(tmp_path) in ' '.join(p.info['cmdline'] or [])
                        and p.environ().get('DMLC_ROLE') == role):
                    p.kill()
                    killed.append(p.pid)

    killer = threading.Thread(target=kill_it_once_the_workers_run)
    killer.start()
    try:
        with pytest.raises(RuntimeError) as info:
            distributed.launch_kvstore(
                2, tmp_path, ['--num-train', 1024, '--batch-size', 64,
                              '--epochs', 10000], timeout=30)
    finally:
        launched.set()
        killer.join()
    assert len(killed) == 1, f'found {len(killed)} {role} processes'
    head = str(info.value).splitlines()[0]
    assert head.startswith(f'MXNet training with 2 workers failed: the '
                           f'{role} exited with signal SIGKILL before the '
                           f'workers were done'), str(info.value)
    assert kill_survivors(tmp_path) == []


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_timeout_stops_every_process(framework, tmp_path):
    args = ['--num-train', 1024, '--batch-size', 64, '--epochs', 10000]
    start = time.monotonic()
    with pytest.raises(RuntimeError, match='did not finish within 6 s'):
        LAUNCH[framework](2, tmp_path, args, timeout=6)
    assert time.monotonic() - start < 6 + 15  # SIGTERM, SIGKILL after 5 s
    assert kill_survivors(tmp_path) == []


@pytest.mark.parametrize('framework', FRAMEWORKS)
def test_a_busy_port_is_refused_before_anything_starts(framework, tmp_path):
    with socket.socket() as s:
        s.bind((distributed.HOST, 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(RuntimeError, match=f'port {port} .* in use'):
            LAUNCH[framework](2, tmp_path / 'out', ARGS, port=port)
    assert not (tmp_path / 'out').exists()
    assert kill_survivors(tmp_path) == []
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
        # Said, not guessed from the hostname (tests/test_two_hosts.py)
        assert f'--rdzv-conf is_host={int(host == "a")} ' in line
        assert f'--local-addr {host} ' in line
        assert line.endswith('-m d2lpar.distributed.ddp_train --out OUT')
    mx_lines = distributed.command_for_machines(
        'mxnet', ['a', 'b'], workers_per_host=2, port=1234).splitlines()
    roles = [line.split('DMLC_ROLE=')[1].split()[0] for line in mx_lines]
    assert roles == ['scheduler'] + ['server', 'worker', 'worker'] * 2
    workers = [line for line in mx_lines if 'DMLC_ROLE=worker' in line]
    for line, i in zip(workers, [0, 1, 0, 1]):  # worker i takes GPU i
        assert f'D2LPAR_LOCAL_RANK={i} D2LPAR_LOCAL_WORKERS=2 ' in line
    for line in mx_lines:
        assert ('DMLC_PS_ROOT_URI=a DMLC_PS_ROOT_PORT=1234 DMLC_NUM_SERVER=2 '
                'DMLC_NUM_WORKER=4') in line
    # Restarts: torchrun's option; MXNet restarts whole jobs, and says so
    for line in distributed.command_for_machines(
            'torch', ['a', 'b'], max_restarts=2).splitlines():
        assert ' --max-restarts 2 --rdzv-backend c10d ' in line
    with pytest.raises(ValueError, match='MXNet restarts a whole job'):
        distributed.command_for_machines('mxnet', ['a', 'b'],
                                         max_restarts=1)


@pytest.mark.parametrize('launch', [distributed.launch_torch,
                                    distributed.launch_kvstore])
def test_windows_gets_a_clear_error_and_no_process(launch, tmp_path,
                                                   monkeypatch):
    # The launcher stops a run through its process group (os.killpg,
    # start_new_session), which Windows does not have.
    monkeypatch.setattr(distributed.os, 'name', 'nt')
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    with pytest.raises(OSError, match=r'Linux or macOS.*WSL 2'):
        launch(2, tmp_path / 'run')
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before
    assert not (tmp_path / 'run').exists()  # nothing written either
