"""Lesson 1 times each block several times and draws the shortest time of
each (a single run of a few tens of milliseconds varies with what else the
machine does): Benchmark.best and plot_timings(best_of=n)."""
import pytest

from d2lpar import devices, plots
from d2lpar.timing import Benchmark


@pytest.fixture
def records(monkeypatch):
    records = []
    monkeypatch.setattr(Benchmark, 'records', records)
    return records


def test_best_is_the_shortest_of_the_latest_n(records):
    records.extend([('a', 0.1), ('b', 9.0), ('a', 0.5), ('a', 0.3),
                    ('a', 0.4)])
    assert Benchmark.best('a', 3) == 0.3  # 0.5, 0.3, 0.4: not the old 0.1
    assert Benchmark.best('a', 4) == 0.1
    assert Benchmark.best('a', 10) == 0.1  # fewer than n: all of them
    assert Benchmark.best('a', 1) == Benchmark.last('a') == 0.4


@pytest.mark.parametrize('n', [0, -1])
def test_best_of_nothing_is_an_error(records, n):
    records.append(('a', 0.1))
    with pytest.raises(ValueError, match=f'n is 1 or more, got {n}'):
        Benchmark.best('a', n)


def test_plot_timings_draws_the_best_of_n(records):
    import matplotlib.pyplot as plt
    records.extend([('x', 0.2), ('y', 0.4), ('x', 0.3), ('y', 0.1),
                    ('x', 0.5), ('y', 0.6)])
    _, ax = plt.subplots()
    times = plots.plot_timings(['x', 'y'], sum_of=('x', 'y'), best_of=3,
                               ax=ax)
    assert times == {'x': 0.2, 'y': 0.1, 'x + y': pytest.approx(0.3)}
    assert sorted(p.get_width() for p in ax.patches) == pytest.approx(
        [0.1, 0.2, 0.3])
    assert ax.get_xlabel() == 'seconds, the shortest of 3 runs'
    _, ax = plt.subplots()
    assert plots.plot_timings(['x', 'y'], ax=ax) == {'x': 0.5, 'y': 0.6}
    assert ax.get_xlabel() == 'seconds'
    # The label counts the runs there were, not those asked for
    _, ax = plt.subplots()
    plots.plot_timings(['x', 'y'], best_of=10, ax=ax)
    assert ax.get_xlabel() == 'seconds, the shortest of 3 runs'
    plt.close('all')


@pytest.mark.parametrize('wanted, share', [
    (1, 'half of the CPU: a second stand-in would take the other half'),
    (2, 'two of them split the CPU in two'),
    (3, '3 of them share cores meant for two')])
def test_the_notice_says_what_share_of_the_cpu_each_stand_in_has(
        wanted, share):
    notice = devices.fallback_notice(wanted, 0, 1, 'cpu:0')
    assert f'({share}).' in notice

