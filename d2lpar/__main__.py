"""Command line: ``python -m d2lpar download`` fetches Fashion-MNIST into
the cache folder (see `d2lpar.data.data_dir`), e.g. to prepare a class
that will work offline."""
import sys

from d2lpar import data
from d2lpar.i18n import _


def main(argv):
    if argv[1:] != ['download']:
        print(_('Command line: ``python -m d2lpar download`` fetches '
                'Fashion-MNIST into\nthe cache folder (see '
                '`d2lpar.data.data_dir`), e.g. to prepare a class\nthat '
                'will work offline.'))
        return 2
    root = data.data_dir()
    for split in ('train', 'test'):
        if data.fetch_fashion_mnist(split, root) is None:
            print(_('Could not download Fashion-MNIST into {root} '
                    '(offline?).').format(root=root))
            return 1
    print(_('Fashion-MNIST is ready in {folder}').format(
        folder=f'{root}/FashionMNIST/raw'))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
