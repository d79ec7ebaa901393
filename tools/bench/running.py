"""Running workers: subprocesses that cannot hang the benchmark. Each
worker is ``python -m tools.bench --worker NAME`` in a session of its
own (d2lpar.distributed.launch), killed with everything it started when
it fails or its time runs out."""

import json
import os
import subprocess
import sys
import tempfile
import time

from d2lpar.distributed.launch import Processes, free_port, wait_for
from tools.bench.settings import CORES, DATA_DIR, LOG_DIR, OUT_DIR, ROOT, log


def worker_env(extra=None):
    """Environment of a framework worker: the Makefile's data folder, the
    offline stand-in unless Fashion-MNIST is cached, no plot windows."""
    env = dict(os.environ)
    env['D2LPAR_DATA'] = DATA_DIR
    env.setdefault('MPLBACKEND', 'Agg')
    env.setdefault('KINETO_LOG_LEVEL', '5')
    if not real_data_cached():
        env['D2LPAR_OFFLINE'] = '1'
    env['PYTHONPATH'] = os.pathsep.join(
        [ROOT] + ([env['PYTHONPATH']] if env.get('PYTHONPATH') else []))
    env.update(extra or {})
    return env


def real_data_cached():
    raw = os.path.join(DATA_DIR, 'FashionMNIST', 'raw')
    names = ['train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz',
             't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz']
    return all(os.path.exists(os.path.join(raw, n)) for n in names)


def start_worker(run, name, spec, log_name, env_extra=None):
    """Start ``python -m tools.bench --worker name`` as process `log_name`
    of `run` (a `Processes` that logs to LOG_DIR); returns the process
    and the path of its JSON result."""
    os.makedirs(LOG_DIR, exist_ok=True)
    fd, out = tempfile.mkstemp(prefix=f'{log_name}-', suffix='.json',
                               dir=OUT_DIR)
    os.close(fd)
    cmd = [sys.executable, '-m', 'tools.bench', '--worker', name,
           '--spec', json.dumps(spec), '--out', out]
    return run.start(log_name, cmd, worker_env(env_extra), cwd=ROOT), out


def collect(run, log_name, out, rc=None):
    """The result of worker `log_name` of `run`, which has exited (its
    JSON file is removed), or {'error': ...} that says how it exited (`rc`,
    default: its exit code)."""
    rc = run.procs[log_name].returncode if rc is None else rc
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = None
    finally:
        if os.path.exists(out):
            os.remove(out)
    if rc != 0 or result is None:
        return {'error': f'worker exited with {rc}; see {run.logs[log_name]}'}
    return result


def run_worker(name, spec, timeout, log_name=None, env_extra=None):
    """Run one worker to the end (or its timeout) and return its result."""
    log_name = log_name or name
    start = time.perf_counter()
    rc = None
    with Processes(LOG_DIR, grace=1) as run:
        proc, out = start_worker(run, name, spec, log_name, env_extra)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = f'killed after {timeout} s'
    # leaving the block stopped it, and whatever it left behind
    result = collect(run, log_name, out, rc)
    log(f'{log_name}: {time.perf_counter() - start:.1f} s'
        + (f' ({result["error"]})' if 'error' in result else ''))
    return result


def run_ranks(name, world, spec, timeout, log_name):
    """Run `world` gloo ranks of worker `name` on 127.0.0.1; rank 0's
    result. All ranks are killed if one fails or the time runs out; gloo
    itself gives up on a collective after spec['pg_timeout'] seconds."""
    start = time.perf_counter()
    spec = dict(spec, world=world, port=free_port(),
                pg_timeout=max(30, timeout // 2))
    threads = str(max(1, CORES // world))  # as torchrun does
    env = {'OMP_NUM_THREADS': threads, 'MKL_NUM_THREADS': threads,
           'GLOO_SOCKET_IFNAME': 'lo'}
    reason = None
    with Processes(LOG_DIR, grace=1) as run:
        outs = [start_worker(run, name, dict(spec, rank=rank),
                             f'{log_name}-rank{rank}', env)[1]
                for rank in range(world)]
        try:
            failed = wait_for(run.procs, run.procs, timeout, interval=0.1)
        except subprocess.TimeoutExpired:
            reason = f'ranks still running after {timeout} s were killed'
        else:
            if failed is not None:  # the others would wait for it
                rank = list(run.procs).index(failed)
                reason = (f'rank {rank} exited with '
                          f'{run.procs[failed].returncode}, the other ranks '
                          f'were killed')
    results = [collect(run, log, out) for log, out in zip(run.procs, outs)]
    errors = [r['error'] for r in results if 'error' in r]
    if reason:
        result = {'error': f'{reason}; see {os.path.relpath(LOG_DIR, ROOT)}'
                           f'/{log_name}-rank*.log'}
    else:
        result = {'error': errors[0]} if errors else results[0]
    log(f'{log_name}: {time.perf_counter() - start:.1f} s'
        + (f' ({result["error"]})' if 'error' in result else ''))
    return result
