"""The cost model of an allreduce (d2lpar.cost): the formulas on cases
computed by hand, the table of links against the rates it cites, clear
errors for bad input, the link read from nvidia-smi, the limit line of the
allreduce chart on CPUs and on GPUs; and the drift between the runs on 1
and 2 devices (parameter_drift, plot_drift)."""
import math

import matplotlib.pyplot as plt
import pytest

from d2lpar import cost
from d2lpar.cost import LINKS, Link, allreduce_time

LINK = Link('test link', 1e-5, 1e9)  # 10 us, 1 GB/s


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close('all')


# --------------------------------------------------------------------------
# The formulas
# --------------------------------------------------------------------------
@pytest.mark.parametrize('k, n, ring, naive', [
    # ring: 2*3*1e-5 + 2*3/4 * 1e6/1e9 = 6e-5 + 1.5e-3
    # naive: 2*3 * (1e-5 + 1e6/1e9) = 6 * 1.01e-3
    (4, 1e6, 1.56e-3, 6.06e-3),
    # k = 2: both send N once each way: ring 2e-5 + 1e-3, naive the same
    # plus one more N / beta (2 * (1e-5 + 1e-3))
    (2, 1e6, 1.02e-3, 2.02e-3),
    # k = 8, N = 0: latency only, 2 * 7 * 1e-5 for both
    (8, 0, 1.4e-4, 1.4e-4),
    # one device: nothing to send
    (1, 1e9, 0.0, 0.0),
])
def test_formulas_on_cases_computed_by_hand(k, n, ring, naive):
    assert allreduce_time(n, k, LINK) == pytest.approx(ring, rel=1e-12)
    assert allreduce_time(n, k, LINK,
                          algorithm='naive') == pytest.approx(naive,
                                                                rel=1e-12)


def test_a_named_link_by_hand():
    # PCIe 4.0 x16: alpha 5.7 us, beta 31.5 GB/s; 8 devices, 31.5 GB each:
    # ring 14 * 5.7e-6 + 14/8 * 1 s; naive 14 * (5.7e-6 + 1 s)
    assert allreduce_time(31.5e9, 8, 'pcie4') == pytest.approx(
        14 * 5.7e-6 + 1.75, rel=1e-12)
    assert allreduce_time(31.5e9, 8, 'pcie4',
                          algorithm='naive') == pytest.approx(
        14 * (5.7e-6 + 1), rel=1e-12)


def test_the_ring_wins_by_about_k_on_large_messages_only():
    big, small = 1e12, 1.0
    for k in (2, 4, 8, 16):
        ratio = (allreduce_time(big, k, 'nvlink4', algorithm='naive')
                 / allreduce_time(big, k, 'nvlink4'))
        assert ratio == pytest.approx(k, rel=1e-3)
        # a tiny message is latency-bound: both pay 2(k-1) alpha
        assert allreduce_time(small, k, 'nvlink4', algorithm='naive') == \
            pytest.approx(allreduce_time(small, k, 'nvlink4'), rel=1e-3)


def test_the_links_have_the_rates_they_cite():
    def pcie(gt_per_s):  # 16 lanes, 128b/130b encoding, 8 bits a byte
        return 16 * gt_per_s * 128 / 130 / 8
    expected = {'pcie3': pcie(8e9), 'pcie4': pcie(16e9),
                'pcie5': pcie(32e9), 'nvlink3': 600e9 / 2,
                'nvlink4': 900e9 / 2, 'ib100': 100e9 / 8,
                'ib200': 200e9 / 8, 'ib400': 400e9 / 8, 'eth10': 10e9 / 8,
                'eth100': 100e9 / 8}
    assert set(LINKS) == set(expected)
    for name, beta in expected.items():
        assert LINKS[name].beta == pytest.approx(beta, rel=2e-3), name
    # NCCL's latencies per ring step (tuning.cc, Ring, Simple)
    assert {name: link.alpha for name, link in LINKS.items()} == {
        'pcie3': 5.7e-6, 'pcie4': 5.7e-6, 'pcie5': 5.7e-6,
        'nvlink3': 3.4e-6, 'nvlink4': 3.4e-6, 'ib100': 14e-6,
        'ib200': 14e-6, 'ib400': 14e-6, 'eth10': 14e-6, 'eth100': 14e-6}


def test_both_backends_export_the_same_functions(backend):
    assert backend.allreduce_time is allreduce_time
    assert backend.LINKS is LINKS
    assert backend.gpu_link is cost.gpu_link


# --------------------------------------------------------------------------
# Bad input: a ValueError that says what is accepted
# --------------------------------------------------------------------------
@pytest.mark.parametrize('k', [0, -1, 2.5, True, '4', None])
def test_a_bad_number_of_devices(k):
    with pytest.raises(ValueError, match=r'k, the number of devices, must '
                       r'be an int >= 1, got'):
        allreduce_time(1e6, k, 'pcie4')


@pytest.mark.parametrize('n', [-1, -1e-9, math.nan, math.inf, '1e6', None,
                               False])
def test_a_bad_number_of_bytes(n):
    with pytest.raises(ValueError, match=r'n_bytes must be a finite number '
                       r'of bytes >= 0, got'):
        allreduce_time(n, 4, 'pcie4')


@pytest.mark.parametrize('link', ['pcie6', 'PCIe 4.0 x16', '', None, 31.5e9,
                                  ('x', 1e-6, 1e9)])
def test_an_unknown_link_names_the_known_ones(link):
    with pytest.raises(ValueError) as error:
        allreduce_time(1e6, 4, link)
    message = str(error.value)
    assert message.startswith(f'Unknown link {link!r}: use one of ')
    for name in LINKS:
        assert name in message
    assert 'd2l.Link(label, alpha, beta)' in message


@pytest.mark.parametrize('link', [Link('x', -1e-6, 1e9), Link('x', 1e-6, 0),
                                  Link('x', 1e-6, -1e9),
                                  Link('x', math.nan, 1e9),
                                  Link('x', 1e-6, math.inf)])
def test_a_link_with_impossible_numbers(link):
    with pytest.raises(ValueError, match=r'A Link needs alpha >= 0 '
                       r'\(seconds\) and beta > 0'):
        allreduce_time(1e6, 4, link)


@pytest.mark.parametrize('algorithm', ['tree', 'Ring', '', None])
def test_an_unknown_algorithm(algorithm):
    with pytest.raises(ValueError, match=r"Unknown algorithm .*: use one of "
                       r"'ring', 'naive'\."):
        allreduce_time(1e6, 4, 'pcie4', algorithm=algorithm)


@pytest.mark.parametrize('t, text', [
    (49.6e-6, '49.6 µs'), (0.9994e-3, '999 µs'), (0.9996e-3, '1 ms'),
    (5.77e-3, '5.77 ms'), (0.9996, '1 s'), (8.4, '8.4 s'), (0.0, '0 µs')])
def test_format_seconds(t, text):
    assert cost.format_seconds(t) == text


# --------------------------------------------------------------------------
# The link between this machine's GPUs, read from nvidia-smi
# --------------------------------------------------------------------------
TOPO_NVLINK = """\
\tGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tPXB\t0-51\t0\t\tN/A
GPU1\tNV18\t X \tPXB\t0-51\t0\t\tN/A

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""
TOPO_PCIE = """\
\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity
GPU0\t X \tPHB\t0-15\t0
GPU1\tPHB\t X \t0-15\t0
"""
TOPO_ONE_GPU = """\
\tGPU0\tCPU Affinity\tNUMA Affinity
GPU0\t X \t0-15\t0
"""


@pytest.mark.parametrize('topology, query, link', [
    (TOPO_NVLINK, 'NVIDIA H100 80GB HBM3, 5\nNVIDIA H100 80GB HBM3, 5\n',
     'nvlink4'),
    (TOPO_NVLINK, 'NVIDIA A100-SXM4-80GB, 4\nNVIDIA A100-SXM4-80GB, 4\n',
     'nvlink3'),
    (TOPO_NVLINK, 'Tesla V100-SXM2-16GB, 3\nTesla V100-SXM2-16GB, 3\n',
     None),  # NVLink 2: not in the table
    (TOPO_NVLINK, 'NVIDIA H200, 5\n', 'nvlink4'),
    (TOPO_PCIE, 'NVIDIA GeForce RTX 4090, 4\nNVIDIA GeForce RTX 4090, 4\n',
     'pcie4'),
    (TOPO_PCIE, 'NVIDIA L40S, 4\n', 'pcie4'),
    (TOPO_PCIE, 'Tesla T4, 3\nTesla T4, 3\n', 'pcie3'),
    (TOPO_PCIE, 'NVIDIA H100 PCIe, 5\n', 'pcie5'),
    (TOPO_PCIE, 'Some GPU, [N/A]\n', None),
    (TOPO_ONE_GPU, 'NVIDIA H100 80GB HBM3, 5\n', None),
    ('', '', None),
])
def test_link_from_nvidia_smi(topology, query, link):
    assert cost.link_from_nvidia_smi(topology, query) == link


def test_gpu_link_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(cost.shutil, 'which', lambda name: None)
    assert cost.gpu_link() is None


# --------------------------------------------------------------------------
# The allreduce chart's limit line, and the model next to the measurements
# --------------------------------------------------------------------------
def _rows(on, k=4):
    return [{'algorithm': algo, 'devices': k, 'bytes': n, 'seconds': t,
             'on': on}
            for algo in ('allreduce', 'ring_allreduce')
            for n, t in ((4096, 1e-4), (1 << 24, 1e-2))]


def _dashed(ax):
    return [line for line in ax.get_lines() if line.get_linestyle() == '--']


@pytest.mark.parametrize('on, label, seconds, title', [
    # CPU stand-ins: the limit is local memory
    ('cpu', 'CPU memory: 2kN bytes at 10 GB/s', lambda n: 2 * 4 * n / 10e9,
     '4 CPU stand-ins'),
    # GPUs: the limit is the link of the cost model
    ('gpu', 'ring model, NVLink 4 (H100)',
     lambda n: allreduce_time(n, 4, 'nvlink4'), '4 GPUs')])
def test_the_dashed_line_is_the_limit_of_the_devices(backend, on, label,
                                                     seconds, title):
    backend.plot_allreduce(_rows(on), copy_bandwidth=10e9, link='nvlink4')
    ax, = plt.gcf().axes
    line, = _dashed(ax)
    assert line.get_label() == label
    assert list(line.get_ydata()) == pytest.approx(
        [seconds(n) for n in (4096, 1 << 24)])
    assert ax.get_title() == title


def test_on_gpus_of_an_unknown_link_there_is_no_limit_line(backend):
    backend.plot_allreduce(_rows('gpu'), copy_bandwidth=10e9, link=None)
    ax, = plt.gcf().axes
    assert _dashed(ax) == []
    assert ax.get_title() == '4 GPUs'


def test_a_panel_per_device_count_each_with_its_own_limit(backend):
    rows = _rows('gpu', k=2) + _rows('cpu', k=4)
    backend.plot_allreduce(rows, copy_bandwidth=10e9, link='pcie4')
    labels = [[line.get_label() for line in _dashed(ax)]
              for ax in plt.gcf().axes]
    assert labels == [['ring model, PCIe 4.0 x16'],
                      ['CPU memory: 2kN bytes at 10 GB/s']]


def test_plot_cost_model_draws_every_link_and_the_measured_points(backend):
    backend.plot_cost_model(_rows('cpu'))
    ax, = plt.gcf().axes
    labels = [line.get_label() for line in ax.get_lines()]
    assert labels == [link.label for link in LINKS.values()] + [
        'measured here: allreduce', 'measured here: ring_allreduce']
    pcie4 = ax.get_lines()[list(LINKS).index('pcie4')]
    xs, ys = pcie4.get_xdata(), pcie4.get_ydata()
    assert list(ys) == pytest.approx(
        [allreduce_time(x, 4, 'pcie4') for x in xs])
    assert xs[0] == 4096 and xs[-1] == pytest.approx(1 << 30)
    measured = ax.get_lines()[-1]
    assert list(measured.get_xdata()) == [4096, 1 << 24]
    assert list(measured.get_ydata()) == [1e-4, 1e-2]


def test_plot_cost_model_draws_the_gpus_when_some_ran(backend):
    # Two GPUs: try_devices(4) gave stand-ins, which the GPU links would
    # misjudge; by default the picture is that of the 2 GPUs (N15)
    backend.plot_cost_model(_rows('gpu', k=2) + _rows('cpu', k=4))
    ax, = plt.gcf().axes
    pcie4 = ax.get_lines()[list(LINKS).index('pcie4')]
    xs, ys = pcie4.get_xdata(), pcie4.get_ydata()
    assert list(ys) == pytest.approx(
        [allreduce_time(x, 2, 'pcie4') for x in xs])


def test_plot_cost_model_of_a_device_count_not_measured(backend):
    with pytest.raises(ValueError, match=r'no measurement on 8 devices; it '
                       r'has \[4\]'):
        backend.plot_cost_model(_rows('cpu'), k=8)


def test_measured_rows_say_where_they_ran(backend):
    rows = backend.measure_allreduce([backend.allreduce], [16], [2],
                                     repeat=1)
    assert [r['on'] for r in rows] == [
        'gpu' if backend.num_gpus() >= 2 else 'cpu']


# --------------------------------------------------------------------------
# The drift between the runs on 1 and on 2 devices
# --------------------------------------------------------------------------
def _max_difference_after(backend, params, steps, k, **kw):
    """Train on try_devices(k) for `steps` steps with train_batch over the
    minibatches of `train`, and return the first device's parameters."""
    train_iter, _ = backend.load_data_fashion_mnist(**kw)
    devices = backend.try_devices(k)
    device_params = [backend.get_params(params, d) for d in devices]
    done = 0
    while done < steps:
        for X, y in train_iter:
            backend.train_batch(X, y, device_params, devices=devices, lr=0.1)
            done += 1
            if done == steps:
                break
    return [backend.numpy(p) for p in device_params[0]]


def test_parameter_drift_is_the_gap_between_the_two_runs(backend):
    backend.seed(0)
    params = backend.lenet_params()
    kw = dict(batch_size=64, num_train=128, num_test=64)
    drift = backend.parameter_drift(params, lr=0.1, num_steps=3, **kw)
    assert len(drift) == 3 and all(isinstance(d, float) for d in drift)
    # The same 3 steps (over an epoch's end: 2 steps per epoch), run apart
    one = _max_difference_after(backend, params, 3, 1, **kw)
    two = _max_difference_after(backend, params, 3, 2, **kw)
    gap = max(float(abs(a - b).max()) for a, b in zip(one, two))
    assert drift[-1] == gap
    # Rounding only: the sums differ in the last digits, not more
    assert 0 <= max(drift) < 1e-4


def test_parameter_drift_is_the_largest_absolute_difference(backend,
                                                           monkeypatch):
    """With a step that leaves the one-device run alone and adds 0.25 to
    the first parameter of the two-device run, the drift after step s is
    |-0.25 s| = 0.25 s (to float32 rounding), whatever the sign."""
    def step(X, y, device_params, devices, lr):
        if len(devices) == 2:
            first = device_params[0]
            first[0] = backend.array(backend.numpy(first[0]) + 0.25)

    monkeypatch.setattr(backend.module, 'train_batch', step)
    drift = backend.parameter_drift(backend.lenet_params(), 64, 0.1,
                                    num_steps=3,
                                    num_train=128, num_test=64)
    assert drift == pytest.approx([0.25, 0.5, 0.75], rel=1e-5)


def test_parameter_drift_compares_runs_on_the_same_kind_of_device(
        backend, monkeypatch):
    """Lesson 2's drift must measure the split of the sum, not a GPU's
    kernels against the CPU's: with one GPU, try_devices(1) is the GPU and
    try_devices(2) two CPU stand-ins, so the one-device run takes the
    first stand-in."""
    def one_gpu(k):
        return ['gpu0'] if k == 1 else ['cpu0', 'cpu1']

    seen = []
    monkeypatch.setattr(backend.module, 'try_devices', one_gpu)
    monkeypatch.setattr(backend.module, 'get_params',
                        lambda params, device: list(params))
    monkeypatch.setattr(
        backend.module, 'train_batch',
        lambda X, y, device_params, devices, lr: seen.append(list(devices)))
    backend.parameter_drift(backend.lenet_params(), 64, 0.1, num_steps=2,
                            num_train=128, num_test=64)
    assert seen == [['cpu0'], ['cpu0', 'cpu1']] * 2


@pytest.mark.parametrize('num_steps', [0, -1, 2.0, True])
def test_parameter_drift_needs_a_number_of_steps(backend, num_steps):
    with pytest.raises(ValueError, match='num_steps must be an int >= 1'):
        backend.parameter_drift(backend.lenet_params(), 64, 0.1,
                                num_steps=num_steps,
                                num_train=128, num_test=64)


def test_parameter_drift_checks_the_learning_rate(backend):
    with pytest.raises(ValueError, match='The learning rate must be'):
        backend.parameter_drift(backend.lenet_params(), 64, math.nan,
                                num_steps=2,
                                num_train=128, num_test=64)


def test_plot_drift_on_a_log_scale(backend):
    backend.plot_drift([0.0, 1e-7, 2e-7, 1e-6])
    ax, = plt.gcf().axes
    assert ax.get_yscale() == 'log'
    line, = ax.get_lines()
    assert list(line.get_xdata()) == [1, 2, 3, 4]
    # an exact 0 is drawn at the bottom, a tenth of the smallest gap
    assert list(line.get_ydata()) == pytest.approx([1e-8, 1e-7, 2e-7, 1e-6])
    assert ax.get_ylim() == pytest.approx((1e-9, 1.0))


def test_plot_drift_makes_room_for_a_large_gap(backend):
    backend.plot_drift([1e-7, 0.5, 3.0])
    ax, = plt.gcf().axes
    assert ax.get_ylim() == pytest.approx((1e-9, 6.0))


# --------------------------------------------------------------------------
# A training step: compute against communication
# --------------------------------------------------------------------------
def test_compute_time_is_six_flops_per_parameter_and_example():
    # 6 * 1e6 parameters * 100 examples / 1e12 FLOP/s = 6e8 / 1e12
    assert cost.compute_time(1e6, 100, 1e12) == pytest.approx(6e-4,
                                                               rel=1e-12)


@pytest.mark.parametrize('overlap, seconds', [
    # compute: 6 * 1e6 * 100 / 1e12 = 6e-4; allreduce of 4e6 bytes on 4
    # devices over LINK: 2*3*1e-5 + 2*3/4 * 4e6/1e9 = 6e-5 + 6e-3
    (True, 6.06e-3),            # the longer: the allreduce
    (False, 6.06e-3 + 6e-4)])   # the sum
def test_step_time_on_a_case_computed_by_hand(overlap, seconds):
    assert cost.step_time(1e6, 100, LINK, k=4, flops_per_second=1e12,
                          overlap=overlap) == pytest.approx(seconds,
                                                            rel=1e-12)


def test_step_time_of_a_compute_bound_step_and_of_one_device():
    # compute 6 * 1e6 * 1e4 / 1e12 = 0.06 s, longer than the 6.06 ms of
    # the allreduce; on one device there is nothing to send
    assert cost.step_time(1e6, 1e4, LINK, k=4, flops_per_second=1e12) == \
        pytest.approx(0.06, rel=1e-12)
    assert cost.step_time(1e6, 100, LINK, k=1, flops_per_second=1e12,
                          overlap=False) == pytest.approx(6e-4, rel=1e-12)
    # bf16 gradients: half the bytes, 2*3*1e-5 + 1.5 * 2e6/1e9 = 3.06e-3
    assert cost.step_time(1e6, 100, LINK, k=4, flops_per_second=1e12,
                          bytes_per_param=2) == pytest.approx(3.06e-3,
                                                              rel=1e-12)


@pytest.mark.parametrize('k, q, batch', [
    # C / beta = 1e12 / 1e9 = 1000 FLOPs per byte
    (4, 4, 1000 * 1.5 * 4 / 6),   # 2(k-1)/k = 1.5: 1000 examples
    (2, 2, 1000 * 1.0 * 2 / 6),   # 2(k-1)/k = 1: 333.3
    (1, 4, 0.0)])                 # one device: nothing to wait for
def test_critical_batch_on_cases_computed_by_hand(k, q, batch):
    assert cost.critical_batch(1e12, LINK, k=k, bytes_per_param=q) == \
        pytest.approx(batch, rel=1e-12)


def test_at_the_critical_batch_compute_equals_the_bandwidth_term():
    # With no latency, the step is compute-bound from that batch on
    link = Link('no latency', 0.0, 450e9)
    b = cost.critical_batch(989e12, link, k=8, bytes_per_param=2)
    assert cost.compute_time(7e9, b, 989e12) == pytest.approx(
        allreduce_time(2 * 7e9, 8, link), rel=1e-12)


def test_critical_batch_of_an_h100_over_nvlink_4():
    # 989e12 / 450e9 * 2 * 7/8 * 2 / 6 = 1282.0 tokens per GPU
    assert cost.critical_batch(cost.GPUS['H100'].bf16, 'nvlink4', k=8,
                               bytes_per_param=2) == pytest.approx(
        1282.0, abs=0.1)


def test_the_gpu_table_holds_the_dense_rates_of_the_data_sheets():
    # bf16: half the "with sparsity" figure of the sheets (242, 624, 1979)
    assert {name: (gpu.bf16, gpu.fp32) for name, gpu in cost.GPUS.items()} \
        == {'L4': (121e12, 30.3e12), 'A100': (312e12, 19.5e12),
            'H100': (989e12, 67e12)}


@pytest.mark.parametrize('bad', [0, -1, math.nan, math.inf, '1e6', None,
                                 True])
@pytest.mark.parametrize('name', ['num_params', 'batch_size',
                                  'flops_per_second'])
def test_compute_time_rejects_a_bad_number(name, bad):
    args = {'num_params': 1e6, 'batch_size': 100, 'flops_per_second': 1e12}
    args[name] = bad
    with pytest.raises(ValueError, match=rf'^{name} must be a finite '
                       rf'number > 0, got '):
        cost.compute_time(**args)


@pytest.mark.parametrize('call', [
    lambda: cost.step_time(1e6, 100, LINK, k=4, flops_per_second=1e12,
                           bytes_per_param=0),
    lambda: cost.critical_batch(1e12, LINK, k=4, bytes_per_param=-2)])
def test_a_bad_number_of_bytes_per_parameter(call):
    with pytest.raises(ValueError, match=r'^bytes_per_param must be a '
                       r'finite number > 0, got '):
        call()


@pytest.mark.parametrize('k', [0, 2.5, True, None])
def test_critical_batch_rejects_a_bad_number_of_devices(k):
    with pytest.raises(ValueError, match=r'k, the number of devices, must '
                       r'be an int >= 1, got'):
        cost.critical_batch(1e12, LINK, k=k)


def test_critical_batch_of_an_unknown_link_names_the_known_ones():
    with pytest.raises(ValueError, match=r"^Unknown link 'nvlink5': use "
                       r'one of pcie3, '):
        cost.critical_batch(1e12, 'nvlink5', k=8)


def test_plot_step_time_draws_each_link_overlapped_and_not(backend):
    backend.plot_step_time(1e6, 1e12, k=4, measured=(256, 0.01),
                           links=['pcie4', LINK])
    ax, = plt.gcf().axes
    lines = ax.get_lines()
    assert [line.get_label() for line in lines[::2][:2]] == [
        'PCIe 4.0 x16', 'test link']
    assert [line.get_linestyle() for line in lines[:4]] == [
        '-', ':', '-', ':']
    xs = lines[2].get_xdata()
    assert xs[0] == 1 and xs[-1] == pytest.approx(4096)
    assert list(lines[2].get_ydata()) == pytest.approx(
        [max(6e6 * b / 1e12, allreduce_time(4e6, 4, LINK)) for b in xs])
    assert list(lines[3].get_ydata()) == pytest.approx(
        [6e6 * b / 1e12 + allreduce_time(4e6, 4, LINK) for b in xs])
    assert lines[4].get_label() == 'compute alone'
    assert list(lines[4].get_ydata()) == pytest.approx(
        [6e6 * b / 1e12 for b in xs])
    assert (lines[5].get_label(), list(lines[5].get_xdata()),
            list(lines[5].get_ydata())) == ('measured here', [256], [0.01])


def test_matmul_rate_is_positive_and_finite(backend):
    device = backend.try_devices(1)[0]
    rate = backend.matmul_rate(device, n=64, repeat=2)
    assert math.isfinite(rate) and rate > 0


def test_matmul_rate_is_2_n_cubed_over_the_best_time(backend, monkeypatch):
    class Timer:  # the times of three products, the second the best
        def __init__(self):
            self.times = []

        def start(self):
            pass

        def stop(self):
            self.times.append([0.5, 0.25, 0.3][len(self.times)])

    monkeypatch.setattr(backend.module, 'Timer', Timer)
    rate = backend.matmul_rate(backend.try_devices(1)[0], n=64, repeat=3)
    assert rate == 2 * 64 ** 3 / 0.25
