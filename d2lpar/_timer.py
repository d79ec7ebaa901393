"""`Timer`, as the d2l book has it, without importing the book's package
(which loads torchvision or gluon's vision datasets, and pandas)."""
import itertools
import time


class Timer:
    """Record several running times; a new timer has started."""

    def __init__(self):
        self.times = []
        self.start()

    def start(self):
        """Start (or restart) the timer."""
        self.tik = time.time()

    def stop(self):
        """Stop the timer, record the time since `start` and return it."""
        self.times.append(time.time() - self.tik)
        return self.times[-1]

    def avg(self):
        """The average of the recorded times."""
        return sum(self.times) / len(self.times)

    def sum(self):
        """The sum of the recorded times."""
        return sum(self.times)

    def cumsum(self):
        """The running sums of the recorded times."""
        return list(itertools.accumulate(self.times))
