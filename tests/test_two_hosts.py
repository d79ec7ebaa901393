"""Lesson 4's commands for several machines, run between two hosts with
addresses of their own (tests/netns.py): exactly the lines that
`d2l.distributed_commands` prints, half on each host, give the same
training as the same job on one host."""
import importlib
import os
import shutil
import sys
import time

import numpy as np
import pytest

import netns
from d2lpar import distributed, runs
from d2lpar.launch import python_env

# One epoch of a small job, two processes on each host
ARGS = ['--cpu', '--num-train', 1536, '--num-test', 512, '--batch-size', 256,
        '--epochs', 1]
PREFIX = {'torch': 'rank', 'mxnet': 'worker'}
SERVERS = {'torch': 0, 'mxnet': 2}  # MXNet: a server on each host
TIMEOUT = 180


@pytest.fixture
def two_hosts():
    reason = netns.why_not()
    if reason:
        # .ci/run sets D2LPAR_REQUIRE_NETNS=1: in CI this test must run
        if os.environ.get('D2LPAR_REQUIRE_NETNS') == '1':
            pytest.fail(f'two hosts cannot be made here: {reason}')
        pytest.skip(f'NOT RUN: two hosts on this machine: {reason}')
    with netns.TwoHosts() as hosts:
        yield hosts


def host_scripts(framework, hosts):
    """The lines that distributed_commands prints for each host, as one
    bash script per host, run as printed."""
    d2l = importlib.import_module(f'd2lpar.{framework}')
    printed = d2l.distributed_commands(list(hosts.addresses), 2,
                                       script_args=ARGS)
    scripts = []
    for address in hosts.addresses:
        head = f'[{address}]$ '
        lines = [line[len(head):] for line in printed.splitlines()
                 if line.startswith(head)]
        assert lines, printed
        scripts.append('\n'.join(lines + ['wait']) + '\n')
    return printed, scripts


def run_on_two_hosts(framework, hosts, tmp_path):
    """Run the printed commands; (result, listening sockets per host)."""
    printed, scripts = host_scripts(framework, hosts)
    # `torchrun` and `python` as printed: those of this venv
    env = python_env({'PATH': os.path.dirname(sys.executable) + os.pathsep
                      + os.environ.get('PATH', '')})
    procs, folders = [], []
    for i, script in enumerate(scripts):
        folder = tmp_path / f'host{i}'
        folder.mkdir()
        folders.append(folder)
        procs.append(hosts.start(i, script, folder, env,
                                 tmp_path / f'host{i}.log'))
    sockets = [set(), set()]
    deadline = time.monotonic() + TIMEOUT
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline:
            pytest.fail(f'not done within {TIMEOUT} s:\n{printed}\n'
                        + logs(tmp_path))
        for i in range(2):
            sockets[i] |= hosts.listening(i)
        time.sleep(0.2)
    assert [p.returncode for p in procs] == [0, 0], logs(tmp_path)
    merged = tmp_path / 'both'  # each host wrote the files of its ranks
    merged.mkdir()
    for folder in folders:
        for path in (folder / 'OUT').iterdir():
            shutil.copy(path, merged / path.name)
    result = runs.collect(framework, str(merged), PREFIX[framework], 4,
                          SERVERS[framework])
    return result, sockets


def logs(tmp_path):
    return '\n'.join(f'--- {p.name}\n' + p.read_text()[-3000:]
                     for p in sorted(tmp_path.glob('host*.log')))


def one_host(framework, tmp_path):
    launch = {'torch': distributed.launch_torch,
              'mxnet': distributed.launch_kvstore}[framework]
    extra = {'num_servers': 2} if framework == 'mxnet' else {}
    return launch(4, tmp_path / 'one', [a for a in ARGS if a != '--cpu'],
                  use_gpus=False, timeout=TIMEOUT, **extra)


def allowed(address, own):
    """Whether a socket bound to `address` (ss's host:port) listens only
    on the host's own address or on loopback."""
    host = address.rsplit(':', 1)[0].strip('[]').split('%')[0]
    return host in (own, '::1') or host.startswith('127.')


@pytest.mark.parametrize('framework', ['torch', 'mxnet'])
def test_the_printed_commands_train_across_two_hosts(framework, two_hosts,
                                                     tmp_path):
    start = time.monotonic()
    two, sockets = run_on_two_hosts(framework, two_hosts, tmp_path)
    took = time.monotonic() - start
    one = one_host(framework, tmp_path)
    first, second = one.first_step_params(), two.first_step_params()
    largest = max(float(np.abs(first[n] - second[n]).max()) for n in first)
    assert largest < 1e-5  # the same first step, up to rounding
    # The same data and steps; a sum in another order can move an
    # accuracy by an example or two, never by 2 points
    assert abs(one.test_acc - two.test_acc) <= 0.02
    print(f'\n{framework}: two hosts in {took:.1f} s, accuracy '
          f'{two.test_acc:.3f} (one host {one.test_acc:.3f}), first step '
          f'within {largest:.1e}')
    for i, seen in enumerate(sockets):
        for protocol, address, program in sorted(seen):
            print(f'  host{i} ({two_hosts.addresses[i]}): {protocol} '
                  f'{address} {program}')
    for i, seen in enumerate(sockets):
        own = two_hosts.addresses[i]
        wide = {s for s in seen if not allowed(s[1], own)}
        # torchrun's agent ('pt_elastic') serves its stores (the
        # rendezvous on the first host, and the workers' store) with
        # TCPStore, which listens on every interface and has no option to
        # do otherwise; every other socket is on the host's address
        assert {s[2] for s in wide} <= (
            {'pt_elastic'} if framework == 'torch' else set()), wide
