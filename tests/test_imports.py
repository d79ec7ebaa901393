"""No import cycles, in the package and in tools/: a module that two
others need goes into a third that both import (issue 31)."""
import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent


def imports(folder, prefix):
    """{module: modules of the same tree it imports}, from the source
    (imports inside functions included), for the modules under `folder`,
    named as `prefix` + their dotted path."""
    names = {}
    for path in (ROOT / folder).rglob('*.py'):
        parts = path.relative_to(ROOT / folder).with_suffix('').parts
        if parts[-1] == '__init__':
            parts = parts[:-1]
        names['.'.join((prefix, *parts)).strip('.')] = path
        if folder == 'tools':  # tools/bench imports itself as tools.bench
            names['.'.join(('tools', *parts))] = path
    graph = {}
    for name, path in names.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding='utf-8'))):
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f'{path}: a relative import; the '
                                     f'code imports by absolute names')
            if isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
                found.update(f'{node.module}.{a.name}' for a in node.names)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
        graph[name] = {n for n in found if n in names and n != name}
    return graph


def cycles(graph):
    """The import cycles of `graph`, each as a list of modules."""
    found, state = [], {}

    def visit(node, path):
        state[node] = 'open'
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 'open':
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = 'done'

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


def test_the_package_has_no_import_cycle():
    graph = imports('d2lpar', 'd2lpar')
    assert 'd2lpar.torch' in graph and 'd2lpar._torch.processes' in graph
    assert cycles(graph) == []


def test_the_tools_have_no_import_cycle():
    graph = imports('tools', '')  # tools/ puts itself on sys.path
    assert 'lesson_source' in graph['library']
    assert 'tools.bench.settings' in graph['tools.bench.__main__']
    assert cycles(graph) == []


def test_a_cycle_is_found():
    assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}}) == [
        ['a', 'b', 'c', 'a']]
    assert cycles({'a': {'b'}, 'b': set()}) == []
