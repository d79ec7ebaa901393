"""Settings of the benchmark: where it writes, what it measures (sizes,
repeats, the workloads of each section), its targets, and `log`."""
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
OUT_DIR = os.path.join(ROOT, 'build', 'bench')
LOG_DIR = os.path.join(OUT_DIR, 'logs')
DATA_DIR = os.environ.get('D2LPAR_DATA') or os.path.join(ROOT, 'data')
CORES = os.cpu_count() or 1
KB, MB = 1 << 10, 1 << 20

# Section 1
SIZES_FULL = [4 * KB, 64 * KB, 1 * MB, 16 * MB, 64 * MB]
SIZES_QUICK = [4 * KB, 1 * MB, 64 * MB]
COUNTS_FULL, COUNTS_QUICK = [2, 3, 4], [2, 4]
REPEAT_FULL, REPEAT_QUICK = 5, 2  # best of; 16 MB and more: at most 3
LARGE = 16 * MB
# Section 2: one global batch, learning rate and data for every loop
# Many short runs, best kept: a burst of other work on the machine spoils
# one run, not the figure.
TRAIN_FULL = dict(batch_size=256, lr=0.2, num_train=2048, num_test=1024,
                  num_epochs=1, reps=4)
TRAIN_QUICK = dict(batch_size=256, lr=0.2, num_train=1024, num_test=512,
                   num_epochs=1, reps=1)
# Section 3
NOTEBOOK_CELL_TIMEOUT = 300  # as the Makefile gives nbval

TARGET_FRACTION = 0.5        # of the one-host limit, 64 MB, 4 devices
TARGET_SCALING = 1.5         # 2 stand-ins / 1 stand-in, d2l.train
TARGET_BOTH = 0.65           # lesson 1: both stand-ins / sum of each
TARGET_COPY = 0.85           # lesson 1: compute and copy / sum
TARGET_CONCISE = 1.3         # lesson 3: 2 stand-ins / 1
TARGET_NOTEBOOK_S = 90
TARGET_NBVAL_S = 15 * 60


# Section 2, lesson 3: train_concise against the book's train_ch13
CONCISE = dict(width=8, batch_size=64, lr=0.1, num_train=1024, num_test=512,
               num_epochs=1)


# Section 0: CPU stand-ins (lessons 1 and 3 as a student runs them)
STANDIN_REPS_FULL, STANDIN_REPS_QUICK = 5, 3
LESSON1_SIZE = 500  # lesson 1's sizes on a CPU
LESSON1_A, LESSON1_B = (1000, 32), (32, 1000)
CONCISE_STANDINS = dict(width=8, batch_size=64, lr=0.05, num_train=2048,
                        num_test=256, num_epochs=1)


LOAD_TRACE = []  # (what just finished, 1-min load average), for the JSON


def log(message):
    """Progress goes to stderr; stdout carries the markdown only."""
    LOAD_TRACE.append((message, os.getloadavg()[0]))
    print(f'[bench {time.strftime("%H:%M:%S")}] {message}', file=sys.stderr,
          flush=True)
