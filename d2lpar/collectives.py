"""The ring allreduce's schedule, framework-free: which device sends which
chunk to its neighbour at each step. Each backend's `ring_allreduce` runs
these steps with its own copies and additions.
"""


def chunk_bounds(n, k):
    """Boundaries that cut `n` elements into `k` nearly equal chunks."""
    return [n * j // k for j in range(k + 1)]


def ring_steps(n, k):
    """The steps of a ring allreduce of `k` arrays of `n` elements each,
    in order, as ``(phase, i, j, start, end)``: device i sends elements
    start:end of its array to its neighbour j = i + 1 (mod k), which adds
    them to its own (phase 'reduce-scatter') or takes them ('all-gather').

    Each array is cut into k chunks. In k-1 reduce-scatter steps device i
    passes one chunk to its neighbour, which adds it to its own;
    afterwards device i holds the full sum of chunk i+1. In k-1 all-gather
    steps the finished chunks travel once more round the ring. Every link
    carries 2(k-1)/k of the data, whatever k is. Empty chunks (n < k) are
    left out; one array (k = 1) takes no step.
    """
    b = chunk_bounds(n, k)
    for s in range(k - 1):
        for i in range(k):
            c = (i - s) % k
            if b[c] < b[c + 1]:
                yield 'reduce-scatter', i, (i + 1) % k, b[c], b[c + 1]
    for s in range(k - 1):
        for i in range(k):
            c = (i + 1 - s) % k
            if b[c] < b[c + 1]:
                yield 'all-gather', i, (i + 1) % k, b[c], b[c + 1]
