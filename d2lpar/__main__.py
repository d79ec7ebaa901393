"""Command line: ``python -m d2lpar download`` fetches Fashion-MNIST into
the cache folder (see `d2lpar._common.data_dir`), e.g. to prepare a class
that will work offline."""
import sys

from d2lpar import _common


def main(argv):
    if argv[1:] != ['download']:
        print(__doc__)
        return 2
    root = _common.data_dir()
    for split in ('train', 'test'):
        if _common.fetch_fashion_mnist(split, root) is None:
            print(f'Could not download Fashion-MNIST into {root} (offline?).')
            return 1
    print(f'Fashion-MNIST is ready in {root}/FashionMNIST/raw')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
